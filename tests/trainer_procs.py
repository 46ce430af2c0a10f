"""Helpers for the example-trainer tests: start real trainer processes (bare, torchrun, JAX ranks)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ports import free_port

REPO = Path(__file__).resolve().parent.parent
TRAIN = REPO / "examples" / "train.py"
PY = sys.executable


def clean_env(**extra) -> dict:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TRAIN_MULTIGPU_", "JAX_", "TORCHELASTIC_"))
        and k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    }
    env.setdefault("OMP_NUM_THREADS", "1")
    env.update({k: str(v) for k, v in extra.items()})
    return env


def bare(args: list[str], *, env: dict, cwd, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([PY, str(TRAIN), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def torchrun_cmd(nproc: int, args: list[str], *extra_torchrun: str) -> list[str]:
    return [
        PY,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        str(nproc),
        "--standalone",
        *extra_torchrun,
        str(TRAIN),
        *args,
        "--distributed",
    ]


def torchrun(
    nproc: int, args: list[str], *, env: dict, cwd, timeout: float = 120, extra: tuple[str, ...] = ()
) -> subprocess.CompletedProcess:
    return subprocess.run(
        torchrun_cmd(nproc, args, *extra), env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


def jax_ranks(
    nproc: int, args: list[str], *, env: dict, cwd, timeout: float = 180
) -> list[subprocess.CompletedProcess]:
    """One process per rank with exactly the variables skrl's JAX launcher sets."""
    port = free_port()
    procs = []
    for rank in range(nproc):
        rank_env = dict(
            env,
            JAX_LOCAL_RANK=str(rank),
            JAX_RANK=str(rank),
            JAX_WORLD_SIZE=str(nproc),
            JAX_COORDINATOR_ADDR="127.0.0.1",
            JAX_COORDINATOR_PORT=str(port),
        )
        procs.append(
            subprocess.Popen(
                [PY, str(TRAIN), *args, "--ml_framework", "jax", "--distributed"],
                env=rank_env,
                cwd=cwd,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    results = []
    try:
        for p in procs:
            stdout, stderr = p.communicate(timeout=timeout)
            results.append(subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return results


def iteration_lines(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("[iter ")]
