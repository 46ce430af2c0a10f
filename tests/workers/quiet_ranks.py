"""A rank that takes part in one collective and then stays silent (sleeps, no communication at all)
before a last one: the node liveness tests (tests/test_liveness_nodes.py) take a node away while the
ranks are quiet, when neither torch nor JAX would notice.

torch under torchrun (gloo all-reduce), or JAX with skrl's variables (JAX_RANK set: a cross-process
all-gather over gloo). Prints ``QUIET rank=R`` after the first collective, sleeps ``--sleep S``,
does one more collective and prints ``DONE rank=R``. Unknown arguments (``--distributed``) are ignored.
"""

import argparse
import os
import time


def say(line: str) -> None:
    os.write(1, (line + "\n").encode())


parser = argparse.ArgumentParser()
parser.add_argument("--sleep", type=float, default=60.0)
args, _unknown = parser.parse_known_args()

if "JAX_RANK" in os.environ:
    import jax

    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=os.environ["JAX_COORDINATOR_ADDR"] + ":" + os.environ["JAX_COORDINATOR_PORT"],
        num_processes=int(os.environ["JAX_WORLD_SIZE"]),
        process_id=int(os.environ["JAX_RANK"]),
        local_device_ids=int(os.environ["JAX_LOCAL_RANK"]),
    )
    import numpy as np
    from jax.experimental import multihost_utils

    rank = jax.process_index()

    def collective() -> None:
        multihost_utils.process_allgather(np.array([rank]))

else:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()

    def collective() -> None:
        dist.all_reduce(torch.ones(1))


collective()
say(f"QUIET rank={rank}")
time.sleep(args.sleep)
collective()
say(f"DONE rank={rank}")
