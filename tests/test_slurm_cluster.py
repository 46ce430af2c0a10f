"""End-to-end: batch scripts (launcher.slurm.batch.render) and SlurmAllocation against a REAL one-host SLURM cluster.

Skipped (with the reason) where tests/infra/slurm_up.sh cannot bring the cluster up.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from launcher.config.schema import SlurmConfig
from launcher.slurm.batch import render
from launcher.slurm.env import SlurmAllocation
from slurm_cluster import sbatch, wait_job

ALLREDUCE = """\
import os
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
print(f"ALLREDUCE rank={rank} world={dist.get_world_size()} value={t.item():g}", flush=True)
dist.destroy_process_group()
"""

USR1_WORKER = """\
import signal, sys, time
got = []
signal.signal(signal.SIGUSR1, lambda s, f: got.append(s))
print("READY", flush=True)
deadline = time.time() + 30
while not got and time.time() < deadline:
    time.sleep(0.05)
print("WORKER GOT USR1" if got else "WORKER TIMED OUT", flush=True)
sys.exit(0 if got else 5)
"""


def write_job(tmp_path: Path, name: str, command: list[str], **settings) -> Path:
    s = SlurmConfig(time="5", signal_seconds=60, **{"requeue": False, **settings})
    env = {"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    script = tmp_path / f"{name}.sbatch"
    script.write_text(render(s, command, env, str(tmp_path), name, str(tmp_path / f"{name}-%j.out")))
    return script


def output_of(tmp_path: Path, name: str, job_id: str) -> str:
    return (tmp_path / f"{name}-{job_id}.out").read_text()


def test_torchrun_allreduce_completes(slurm_cluster, tmp_path):
    (tmp_path / "allreduce.py").write_text(ALLREDUCE)
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--standalone",
        str(tmp_path / "allreduce.py"),
    ]
    job = sbatch(write_job(tmp_path, "allreduce", command))
    info = wait_job(job, timeout=120)
    out = output_of(tmp_path, "allreduce", job)
    assert info["JobState"] == "COMPLETED", out
    assert info["ExitCode"] == "0:0"
    for rank in (0, 1):
        assert f"ALLREDUCE rank={rank} world=2 value=3" in out, out


def test_failing_command_fails_with_its_exit_code(slurm_cluster, tmp_path):
    job = sbatch(write_job(tmp_path, "exit3", ["bash", "-c", "echo about to fail; exit 3"]))
    info = wait_job(job)
    assert info["JobState"] == "FAILED"
    assert info["ExitCode"] == "3:0"
    assert "about to fail" in output_of(tmp_path, "exit3", job)


def _env_of(argv: list[str]) -> dict[str, str]:
    out = subprocess.run(argv, capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr.decode()
    return dict(item.split("=", 1) for item in out.stdout.decode().split("\0") if "=" in item)


def test_allocation_from_real_environment(slurm_cluster):
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    for argv in (
        ["srun", "--nodes=1", "--ntasks-per-node=1", "env", "-0"],
        ["salloc", "--nodes=1", "--ntasks-per-node=1", "srun", "env", "-0"],
        ["salloc", "--nodes=1", "--ntasks-per-node=1", "env", "-0"],  # no SLURM_NODEID here
    ):
        env = _env_of(argv)
        alloc = SlurmAllocation.from_env(env)
        assert (alloc.nnodes, alloc.node_rank) == (1, 0), argv
        assert alloc.first_host == slurm_cluster.host, argv
        assert alloc.hosts == (slurm_cluster.host,)
        assert alloc.ntasks_per_node == 1
        assert alloc.job_id.isdigit() and alloc.restart_count == 0
        assert alloc.gpus_on_node is None  # a CPU-only cluster says nothing about GPUs
    assert "SLURM_JOB_ID" not in clean  # the test's own environment is outside any allocation


def test_three_jobs_at_once_all_complete(slurm_cluster, tmp_path):
    start = time.monotonic()
    jobs = [sbatch(write_job(tmp_path, f"many{i}", ["bash", "-c", f"sleep 1; echo job {i} done"])) for i in range(3)]
    for i, job in enumerate(jobs):
        info = wait_job(job, timeout=60)
        assert info["JobState"] == "COMPLETED", info
        assert f"job {i} done" in output_of(tmp_path, f"many{i}", job)
    assert time.monotonic() - start < 60


def test_usr1_warning_is_forwarded_to_the_step(slurm_cluster, tmp_path):
    """What --signal=B:USR1@N does near the time limit, triggered now with scancel --batch."""
    (tmp_path / "worker.py").write_text(USR1_WORKER)
    job = sbatch(write_job(tmp_path, "usr1", [sys.executable, str(tmp_path / "worker.py")]))
    out_file = tmp_path / f"usr1-{job}.out"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if out_file.exists() and "READY" in out_file.read_text():
            break
        time.sleep(0.2)
    else:
        raise AssertionError(f"worker never started: {wait_job(job, timeout=1)}")
    subprocess.run(["scancel", "--signal=USR1", "--batch", job], check=True, timeout=30)
    info = wait_job(job)
    out = out_file.read_text()
    assert "forwarding USR1 to srun" in out, out
    assert "WORKER GOT USR1" in out, out
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", (info, out)
