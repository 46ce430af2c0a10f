"""Command-line flags of the example trainer (Isaac Lab's skrl ``train.py`` spelling).

Imports nothing heavy: the flags are parsed before torch, JAX or skrl are loaded so that the
process group can be set up before skrl reads the environment.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

AGENTS_DIR = Path(__file__).resolve().parent.parent / "agents"


def available_tasks() -> list[str]:
    """Tasks that have a hyperparameter file next to the trainer."""
    return sorted(p.stem for p in AGENTS_DIR.glob("*.yaml"))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="train.py",
        allow_abbrev=False,  # exact flag names only: a misspelt flag must not silently match another
        description="Example skrl PPO trainer (torch or JAX) for gymnasium tasks; single process, "
        "torchrun or JAX multi-process.",
    )
    p.add_argument(
        "--task",
        default="CartPole-v1",
        help=f"gymnasium task id with a file in examples/agents/ ({', '.join(available_tasks())})",
    )
    p.add_argument(
        "--num_envs", type=int, default=None, help="environments per worker (default: the task's agent file)"
    )
    p.add_argument(
        "--max_iterations",
        type=int,
        default=None,
        help="PPO iterations (rollout + update) to run in total (default: the task's agent file)",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=None,
        help="base seed; each worker uses seed + global rank (default: the task's agent file)",
    )
    p.add_argument(
        "--run_name",
        default=None,
        help="name of the run directory under runs/<task>/ (ignored when TRAIN_MULTIGPU_RUN_DIR is set)",
    )
    p.add_argument(
        "--device", default=None, help="cpu | cuda | cuda:N (default: cuda:LOCAL_RANK when CUDA is available, else cpu)"
    )
    p.add_argument(
        "--distributed", action="store_true", help="train with several processes (torchrun env or skrl JAX_* env)"
    )
    p.add_argument("--ml_framework", choices=("torch", "jax"), default="torch", help="skrl back end")
    p.add_argument(
        "--checkpoint",
        default=None,
        metavar="PATH",
        help="checkpoint file to start from (weights, optimiser state, iteration counter)",
    )
    p.add_argument("--resume", action="store_true", help="continue from the latest checkpoint of the run directory")
    p.add_argument(
        "--checkpoint_interval",
        type=int,
        default=1,
        metavar="N",
        help="write a checkpoint every N iterations, and after the last one or a stop signal (default 1)",
    )
    # Forwarded by Isaac Lab's launcher; accepted and ignored here.
    p.add_argument("--rl_library", choices=("skrl",), default="skrl", help=argparse.SUPPRESS)
    p.add_argument("--headless", action="store_true", help=argparse.SUPPRESS)
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        parser.error(
            f"unrecognized arguments: {' '.join(unknown)} "
            f"(this example trainer accepts only the flags listed by --help)"
        )
    if args.task not in available_tasks():
        parser.error(f"--task {args.task!r} has no agent file; available: {', '.join(available_tasks())}")
    for name in ("num_envs", "max_iterations", "checkpoint_interval"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name} must be >= 1, got {value}")
    if args.device is not None and not (
        args.device == "cpu" or args.device == "cuda" or (args.device.startswith("cuda:") and args.device[5:].isdigit())
    ):
        parser.error(f"--device must be cpu, cuda or cuda:N, got {args.device!r}")
    if args.checkpoint is not None and args.resume:
        parser.error("--checkpoint and --resume are mutually exclusive")
    if args.checkpoint is not None and not os.path.isfile(args.checkpoint):
        parser.error(f"--checkpoint {args.checkpoint!r}: no such file")
    return args
