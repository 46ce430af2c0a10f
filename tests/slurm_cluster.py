"""Pytest fixture and helpers for tests against a REAL one-host SLURM cluster.

The ``slurm_cluster`` fixture (session scope) makes sure ``tests/infra/slurm_up.sh`` has brought
the cluster up -- it installs and starts SLURM when needed, which takes root -- and skips the
requesting tests with the reason when it cannot. Set ``TRAIN_MULTIGPU_REQUIRE_SLURM=1`` (CI) to
turn those skips into failures.

There is no accounting database on the test cluster, so ``sacct`` does not work: jobs are
followed with ``scontrol show job`` (finished jobs stay visible for MinJobAge=600 s).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

import require

INFRA = Path(__file__).resolve().parent / "infra"
TERMINAL_STATES = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
}


@dataclass(frozen=True)
class SlurmCluster:
    host: str  # the node's name (this host's short name)
    partition: str = "cpu"


def _unavailable(reason: str):
    require.unavailable("SLURM", f"SLURM test cluster unavailable: {reason}")


@pytest.fixture(scope="session")
def slurm_cluster() -> SlurmCluster:
    if os.name != "posix" or not hasattr(os, "geteuid"):
        _unavailable("needs Linux")
    if os.geteuid() != 0 and shutil.which("sinfo") is None:
        _unavailable("not root (cannot install SLURM) and sinfo is not installed")
    if os.geteuid() != 0:
        # Not root: use a cluster someone else started, if it answers.
        probe = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=30)
        if probe.returncode != 0 or "idle" not in probe.stdout:
            _unavailable("not root (cannot run tests/infra/slurm_up.sh) and no idle node")
    else:
        try:
            up = subprocess.run(["bash", str(INFRA / "slurm_up.sh")], capture_output=True, text=True, timeout=900)
        except subprocess.TimeoutExpired:
            _unavailable("tests/infra/slurm_up.sh took more than 900 s")
        if up.returncode != 0:
            tail = "\n".join(up.stderr.strip().splitlines()[-8:])
            _unavailable(f"tests/infra/slurm_up.sh exited {up.returncode}:\n{tail}")
    host = subprocess.run(["hostname", "-s"], capture_output=True, text=True).stdout.strip()
    return SlurmCluster(host=host)


def sbatch(script: Path) -> str:
    """Submit a batch script, return the job id."""
    out = subprocess.run(["sbatch", "--parsable", str(script)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, f"sbatch failed: {out.stderr}"
    return out.stdout.strip().split(";")[0]


def job_info(job_id: str) -> dict[str, str]:
    """``scontrol show job -o`` as a dict (values with spaces are not needed here)."""
    out = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        return {}
    return dict(tok.split("=", 1) for tok in out.stdout.split() if "=" in tok)


def wait_job(job_id: str, timeout: float = 90.0) -> dict[str, str]:
    """Poll until the job reaches a terminal state; fail with its last state otherwise."""
    deadline = time.monotonic() + timeout
    info: dict[str, str] = {}
    while time.monotonic() < deadline:
        info = job_info(job_id)
        if info.get("JobState") in TERMINAL_STATES:
            return info
        time.sleep(0.3)
    subprocess.run(["scancel", job_id], timeout=30)
    pytest.fail(
        f"job {job_id} not finished after {timeout} s: {info.get('JobState')} {info.get('Reason')}", pytrace=False
    )
