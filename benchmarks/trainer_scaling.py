"""Env steps/s of the example trainer with 1 worker vs 2 workers (same envs per worker), one run.

    python benchmarks/trainer_scaling.py [--ml_framework torch|jax] [--iterations 60] [--num_envs N]
                                         [--set agent.rollouts=128 --set agent.learning_epochs=4]

Both runs use torchrun (or, for JAX, one process per rank with skrl's JAX_* variables) with one
thread per worker, the task's hyperparameters (``--set`` changes one, in a temporary copy of
examples/), and read the per-iteration figures from the run's metrics.csv, skipping the first
iterations (start-up, JIT).  Prints the two throughputs, their ratio, and per iteration the time
in the rollout (env steps and actions), the PPO update (where the gradient all-reduces are), the
per-iteration all-gather and rank 0's checkpoint write (with its fsync), and the load average,
since other work on the machine distorts the figures: measure on a quiet machine.
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
WARMUP = 5


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _examples_with(settings: list[str], task: str, tmp: Path) -> Path:
    """train.py in a copy of examples/ whose agent file has the ``key.sub=value`` settings applied."""
    if not settings:
        return EXAMPLES / "train.py"
    copy = tmp / "examples"
    shutil.copytree(EXAMPLES, copy, ignore=shutil.ignore_patterns("__pycache__", "runs"))
    agent_file = copy / "agents" / f"{task}.yaml"
    hp = yaml.safe_load(agent_file.read_text())
    for setting in settings:
        key, _, value = setting.partition("=")
        *parents, leaf = key.split(".")
        node = hp
        for part in parents:
            node = node[part]
        if leaf not in node:
            raise SystemExit(f"--set {setting}: {key} is not in {task}'s agent file")
        node[leaf] = yaml.safe_load(value)
    agent_file.write_text(yaml.safe_dump(hp, sort_keys=False))
    return copy / "train.py"


def _run(train: Path, workers: int, framework: str, iterations: int, num_envs: int | None, run_dir: Path) -> None:
    env = dict(os.environ, OMP_NUM_THREADS="1", TRAIN_MULTIGPU_RUN_DIR=str(run_dir))
    args = ["--max_iterations", str(iterations)] + (["--num_envs", str(num_envs)] if num_envs else [])
    if framework == "torch":
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            str(workers),
            str(train),
            *args,
            "--distributed",
        ]
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return
    port = _free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, str(train), *args, "--ml_framework", "jax", "--distributed"],
            env=dict(
                env,
                JAX_LOCAL_RANK=str(r),
                JAX_RANK=str(r),
                JAX_WORLD_SIZE=str(workers),
                JAX_COORDINATOR_ADDR="127.0.0.1",
                JAX_COORDINATOR_PORT=str(port),
            ),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for r in range(workers)
    ]
    codes = [p.wait() for p in procs]
    if any(codes):
        raise SystemExit(f"JAX run with {workers} workers failed: exit codes {codes}")


PARTS = ("rollout_s", "update_s", "sync_s", "checkpoint_s")


def _measure(run_dir: Path) -> tuple[float, dict[str, float]]:
    """Env steps/s and the mean ms per iteration of each part (PARTS)."""
    with open(run_dir / "metrics.csv") as f:
        rows = list(csv.DictReader(f))[WARMUP:]
    per_iteration = int(rows[1]["env_steps"]) - int(rows[0]["env_steps"])
    seconds = sum(float(r["iteration_s"]) for r in rows)
    parts = {name: 1000 * sum(float(r[name]) for r in rows) / len(rows) for name in PARTS}
    return per_iteration * len(rows) / seconds, parts


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ml_framework", choices=("torch", "jax"), default="torch")
    p.add_argument("--iterations", type=int, default=60)
    p.add_argument("--num_envs", type=int, default=None, help="envs per worker (default: the task's agent file)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="change a CartPole-v1 hyperparameter for this benchmark, e.g. agent.rollouts=128",
    )
    a = p.parse_args()
    load_before = os.getloadavg()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        train = _examples_with(a.set, "CartPole-v1", Path(tmp))
        for workers in (1, 2):
            run_dir = Path(tmp) / f"w{workers}"
            _run(train, workers, a.ml_framework, a.iterations, a.num_envs, run_dir)
            results[workers] = _measure(run_dir)
    load_after = os.getloadavg()
    print(
        f"framework {a.ml_framework}, {a.iterations} iterations (first {WARMUP} skipped), "
        f"{os.cpu_count()} CPUs, 1 thread per worker" + (f", {' '.join(a.set)}" if a.set else "")
    )
    print("per iteration (ms): rollout = env steps and actions; update = PPO update with its gradient all-reduces;")
    print("                    sync = the all-gather of returns and stop flags; checkpoint = rank 0's write + fsync")
    for workers, (sps, parts) in results.items():
        text = "  ".join(f"{name[:-2]} {ms:6.1f}" for name, ms in parts.items())
        print(f"{workers} worker(s): {sps:9.0f} env steps/s   {text}")
    print(f"ratio    : {results[2][0] / results[1][0]:.2f}x")
    before, after = " ".join(f"{x:.2f}" for x in load_before), " ".join(f"{x:.2f}" for x in load_after)
    print(f"load average (1/5/15 min) before: {before}, after: {after}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
