"""A JAX rank pair: both join jax.distributed (through skrl, as skrl trainers do), then rank 1
exits 7 while rank 0 waits in an all-gather for it."""

import sys


def main() -> int:
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    import numpy as np
    from jax.experimental import multihost_utils
    from skrl import config  # initialises jax.distributed from the JAX_* variables

    rank = config.jax.rank
    multihost_utils.sync_global_devices("joined")
    print(f"rank {rank} joined", flush=True)
    if rank == 1:
        return 7
    multihost_utils.process_allgather(np.array([1.0]))
    print("rank 0 was not stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
