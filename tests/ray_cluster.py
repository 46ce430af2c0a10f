"""Pytest fixture: a REAL two-node Ray cluster on this host, for the ``submit=ray`` tests.

``ray_cluster`` (session scope) starts a head (GCS, dashboard with the Job Submission API) and a
second raylet with ``ray start --block``, each on its own loopback address (127.0.0.2 and 127.0.0.3:
Ray turns 127.0.0.1 into the machine's network address, and a second raylet on the same address
would not be a second node), a small object store, every port chosen free, its own
temp dir, 4 CPUs declared per node (Ray's count, not cores: the tests run their jobs side by side).
The processes are this fixture's children: teardown signals those two (``ray start
--block`` stops what it started), never ``ray stop`` (which stops every Ray process on the host).

Without Ray installed the tests skip, saying why; ``TRAIN_MULTIGPU_REQUIRE_RAY=1`` (CI, .ci/run)
turns that into a failure.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

import require
from ports import free_ports

HEAD_IP, WORKER_IP = "127.0.0.2", "127.0.0.3"
CPUS_PER_NODE = 4  # logical: Ray counts, it does not pin (the tests' jobs run side by side)


@dataclass(frozen=True)
class RayCluster:
    address: str  # the dashboard: what RAY_ADDRESS / ray.address take
    gcs: str
    temp_dir: Path  # Ray's --temp-dir: the session directories (logs, runtime_resources) of both nodes


def _unavailable(reason: str):
    require.unavailable("RAY", f"Ray test cluster unavailable: {reason}")


def _start(argv: list[str], log: Path, env: dict) -> subprocess.Popen:
    out = open(log, "w")
    return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def _wait_started(proc: subprocess.Popen, log: Path, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace")
        if "block forever" in text:
            return
        if proc.poll() is not None:
            break
        time.sleep(0.3)
    tail = "\n".join(log.read_text(errors="replace").strip().splitlines()[-8:])
    raise RuntimeError(f"`ray start` did not come up (exit {proc.poll()}):\n{tail}")


NODE_PORT_FLAGS = (
    "--node-manager-port",
    "--object-manager-port",
    "--dashboard-agent-listen-port",
    "--dashboard-agent-grpc-port",
    "--runtime-env-agent-port",
    "--metrics-export-port",
)


def _node_ports(ports: list[int]) -> list[str]:
    """One node's port flags, taking its ports from ``ports`` (drawn together: all distinct)."""
    return [f"{flag}={ports.pop()}" for flag in NODE_PORT_FLAGS]


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture(scope="session")
def ray_cluster():
    ray_cli = Path(sys.executable).parent / "ray"
    try:
        import ray.job_submission  # noqa: F401
    except ImportError as err:
        _unavailable(f"the ray extra is not installed ({err})")
    if not ray_cli.exists():
        _unavailable(f"{ray_cli} does not exist")
    folder = Path(tempfile.mkdtemp(prefix="tmgray", dir="/tmp"))  # short: Ray's socket paths have a limit
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    # every port of both nodes in one draw: ports drawn one by one may coincide, and a node given a
    # taken port fails to start (under TRAIN_MULTIGPU_REQUIRE_RAY, a CI failure)
    ports = free_ports(3 + 2 * len(NODE_PORT_FLAGS))
    gcs_port, dashboard_port, client_port = ports.pop(), ports.pop(), ports.pop()
    common = ["--block", f"--num-cpus={CPUS_PER_NODE}", "--num-gpus=0", "--object-store-memory=80000000"]
    common.append("--disable-usage-stats")
    head = _start(
        [
            str(ray_cli),
            "start",
            "--head",
            f"--node-ip-address={HEAD_IP}",
            f"--port={gcs_port}",
            "--include-dashboard=true",  # its server is the Job Submission API
            "--dashboard-host=127.0.0.1",
            f"--dashboard-port={dashboard_port}",
            f"--ray-client-server-port={client_port}",
            f"--temp-dir={folder}",
            *common,
            *_node_ports(ports),
        ],
        folder / "head.log",
        env,
    )
    procs = [head]
    try:
        # the second raylet starts at once: `ray start --address` waits for the head's GCS itself
        worker = _start(
            [
                str(ray_cli),
                "start",
                f"--address={HEAD_IP}:{gcs_port}",
                f"--node-ip-address={WORKER_IP}",
                *common,
                *_node_ports(ports),
            ],
            folder / "worker.log",
            env,
        )
        procs.append(worker)
        _wait_started(head, folder / "head.log")
        _wait_started(worker, folder / "worker.log")
    except RuntimeError as err:
        for proc in reversed(procs):
            _stop(proc)
        _unavailable(str(err))
    try:
        yield RayCluster(f"http://127.0.0.1:{dashboard_port}", f"{HEAD_IP}:{gcs_port}", folder)
    finally:
        for proc in reversed(procs):
            _stop(proc)
        shutil.rmtree(folder, ignore_errors=True)


def job_info(cluster: RayCluster, job_id: str):
    from ray.job_submission import JobSubmissionClient

    return JobSubmissionClient(cluster.address).get_job_info(job_id)


def job_logs(cluster: RayCluster, job_id: str) -> str:
    from ray.job_submission import JobSubmissionClient

    return JobSubmissionClient(cluster.address).get_job_logs(job_id)


def stop_jobs(cluster: RayCluster, job_ids) -> None:
    """Stop those of the jobs that still run (a test's cleanup: no job outlives its test)."""
    from ray.job_submission import JobSubmissionClient

    client = JobSubmissionClient(cluster.address)
    for job_id in job_ids:
        try:
            client.stop_job(job_id)
        except Exception:  # ended, or never known
            pass
