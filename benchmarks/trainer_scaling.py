"""Env steps/s of the example trainer with 1 worker vs 2 workers (same envs per worker), one run.

    python benchmarks/trainer_scaling.py [--ml_framework torch|jax] [--iterations 60] [--num_envs N]

Both runs use torchrun (or, for JAX, one process per rank with skrl's JAX_* variables) with one
thread per worker, the task's default hyperparameters, and read the per-iteration figures from
the run's metrics.csv, skipping the first iterations (start-up, JIT).  Prints the two throughputs,
their ratio, the share of each iteration spent in the PPO update (where the gradient all-reduces
are), and the load average, since other work on the machine distorts the figures.
"""

from __future__ import annotations

import argparse
import csv
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

TRAIN = Path(__file__).resolve().parent.parent / "examples" / "train.py"
WARMUP = 5


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(workers: int, framework: str, iterations: int, num_envs: int | None, run_dir: Path) -> None:
    env = dict(os.environ, OMP_NUM_THREADS="1", TRAIN_MULTIGPU_RUN_DIR=str(run_dir))
    args = ["--max_iterations", str(iterations)] + (["--num_envs", str(num_envs)] if num_envs else [])
    if framework == "torch":
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(workers),
               str(TRAIN), *args, "--distributed"]
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return
    port = _free_port()
    procs = [subprocess.Popen([sys.executable, str(TRAIN), *args, "--ml_framework", "jax", "--distributed"],
                              env=dict(env, JAX_LOCAL_RANK=str(r), JAX_RANK=str(r), JAX_WORLD_SIZE=str(workers),
                                       JAX_COORDINATOR_ADDR="127.0.0.1", JAX_COORDINATOR_PORT=str(port)),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for r in range(workers)]
    codes = [p.wait() for p in procs]
    if any(codes):
        raise SystemExit(f"JAX run with {workers} workers failed: exit codes {codes}")


def _measure(run_dir: Path) -> tuple[float, float, float, float]:
    rows = list(csv.DictReader(open(run_dir / "metrics.csv")))[WARMUP:]
    per_iteration = int(rows[1]["env_steps"]) - int(rows[0]["env_steps"])
    steps = per_iteration * len(rows)
    seconds = sum(float(r["iteration_s"]) for r in rows)
    update = sum(float(r["update_s"]) for r in rows)
    n = len(rows)
    return steps / seconds, update / seconds, 1000 * (seconds - update) / n, 1000 * update / n


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ml_framework", choices=("torch", "jax"), default="torch")
    p.add_argument("--iterations", type=int, default=60)
    p.add_argument("--num_envs", type=int, default=None, help="envs per worker (default: the task's agent file)")
    a = p.parse_args()
    load_before = os.getloadavg()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for workers in (1, 2):
            run_dir = Path(tmp) / f"w{workers}"
            _run(workers, a.ml_framework, a.iterations, a.num_envs, run_dir)
            results[workers] = _measure(run_dir)
    load_after = os.getloadavg()
    (sps1, upd1, roll_ms1, upd_ms1), (sps2, upd2, roll_ms2, upd_ms2) = results[1], results[2]
    print(f"framework {a.ml_framework}, {a.iterations} iterations (first {WARMUP} skipped), "
          f"{os.cpu_count()} CPUs, 1 thread per worker")
    print(f"1 worker : {sps1:9.0f} env steps/s  (per iteration: rollout {roll_ms1:6.1f} ms, "
          f"update {upd_ms1:6.1f} ms = {100 * upd1:4.1f}%)")
    print(f"2 workers: {sps2:9.0f} env steps/s  (per iteration: rollout {roll_ms2:6.1f} ms, "
          f"update {upd_ms2:6.1f} ms = {100 * upd2:4.1f}%, incl. gradient all-reduces)")
    print(f"ratio    : {sps2 / sps1:.2f}x")
    print("load average (1/5/15 min) before: %.2f %.2f %.2f, after: %.2f %.2f %.2f" % (*load_before, *load_after))
    return 0


if __name__ == "__main__":
    sys.exit(main())
