"""A small distributed check: every rank all-reduces 2**rank and prints what it sees.

Runs under torchrun (RANK/WORLD_SIZE, torch.distributed with gloo on CPU, NCCL on GPUs) or as a JAX
rank (skrl's JAX_* variables, a psum through jax.distributed). Exits non-zero when the sum is wrong.
Extra flags of the training scripts are accepted and ignored, so every profile can target it.
"""

import argparse
import gc
import os
import sys


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ml_framework", default="torch", choices=["torch", "jax"])
    parser.add_argument("--distributed", action="store_true")
    parser.add_argument("--exit_code_on_rank", default=None, help="R:CODE - rank R exits with CODE (for tests)")
    args, _ignored = parser.parse_known_args()
    return args


def _torch(fail: tuple) -> int:
    import torch
    import torch.distributed as dist

    backend = os.environ.get("TRAIN_MULTIGPU_DIST_BACKEND") or ("nccl" if torch.cuda.is_available() else "gloo")
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if backend == "nccl" else torch.device("cpu")
    if fail and fail[0] == rank:
        sys.exit(fail[1])
    value = torch.tensor([2.0**rank], device=device)
    dist.all_reduce(value)
    total = int(value.item())
    print(
        f"rank {rank}/{world} local_rank {os.environ.get('LOCAL_RANK')} all_reduce sum={total} expected={2**world - 1}",
        flush=True,
    )
    dist.destroy_process_group()
    return 0 if total == 2**world - 1 else 1


def _jax(fail: tuple) -> int:
    rank, world = int(os.environ.get("JAX_RANK", 0)), int(os.environ.get("JAX_WORLD_SIZE", 1))
    if fail and fail[0] == rank:
        sys.exit(fail[1])
    import jax

    if os.environ.get("JAX_PLATFORMS", "") == "cpu":
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    import numpy as np
    from jax.experimental import multihost_utils
    from skrl import config  # initialises jax.distributed from the JAX_* variables, as skrl trainers do

    gathered = multihost_utils.process_allgather(np.array([2.0**rank]))
    total = int(gathered.sum())
    print(
        f"rank {config.jax.rank}/{world} local_rank {config.jax.local_rank} psum={total} expected={2**world - 1}",
        flush=True,
    )
    return 0 if total == 2**world - 1 else 1


def main() -> int:
    # a check of seconds: no cyclic garbage collection while torch or JAX is imported, and none of
    # what they built at the interpreter's exit (frozen): a third of a second of CPU per rank
    gc.disable()
    args = _args()
    fail = tuple(int(x) for x in args.exit_code_on_rank.split(":")) if args.exit_code_on_rank else ()
    code = _jax(fail) if args.ml_framework == "jax" else _torch(fail)
    gc.freeze()
    return code


if __name__ == "__main__":
    sys.exit(main())
