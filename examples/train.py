"""Example skrl PPO trainer for gymnasium tasks, torch or JAX, one process or many.

    python examples/train.py --task CartPole-v1
    python -m torch.distributed.run --standalone --nproc_per_node 2 examples/train.py --distributed
    JAX_RANK=.. JAX_WORLD_SIZE=.. ... python examples/train.py --ml_framework jax --distributed

Hyperparameters live in examples/agents/<task>.yaml, found relative to this file.
See docs/example_trainers.md.
"""

from __future__ import annotations

import gc
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "trainers"))

import trainer_args  # noqa: E402  (stdlib only: parsed before torch/JAX/skrl are loaded)


def load_hyperparameters(task: str) -> dict:
    import yaml

    with open(trainer_args.AGENTS_DIR / f"{task}.yaml") as f:
        return yaml.safe_load(f)


def main(argv: list[str] | None = None) -> int:
    args = trainer_args.parse_args(argv)
    # start-up (torch or JAX, skrl, the agent) runs without the cyclic garbage collector: imports make
    # few cycles but many lasting objects, and every full collection they set off walked all of them
    # again; trainer_loop.run freezes what start-up built and turns the collector back on
    gc.disable()
    import trainer_dist

    topo = trainer_dist.read_topology(args)
    if not topo.is_main:
        # Only global rank 0 talks on stdout; library chatter of the other ranks (e.g. gloo's
        # "[Gloo] Rank 1 is connected ...", printed from C++) goes to stderr with their errors.
        sys.stdout.flush()
        os.dup2(2, 1)
    if args.ml_framework == "torch":
        topo = trainer_dist.setup_torch(topo)  # process group before skrl is imported; agrees the attempt
        from trainer_torch import TorchBackend

        return train(args, topo, TorchBackend)
    trainer_dist.setup_jax(topo)
    try:
        from trainer_jax import JaxBackend

        return train(args, topo, JaxBackend)
    except Exception:
        trainer_dist.failed()  # it leaves without JAX's exit handler, which would wait for a dead peer
        raise


def train(args, topo, backend) -> int:
    import trainer_loop

    return trainer_loop.run(args=args, topo=topo, hp=load_hyperparameters(args.task), backend_factory=backend)


if __name__ == "__main__":
    sys.exit(main())
