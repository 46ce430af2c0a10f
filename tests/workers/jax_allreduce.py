"""JAX worker started with skrl's variables (JAX_RANK, JAX_WORLD_SIZE, JAX_LOCAL_RANK,
JAX_COORDINATOR_ADDR, JAX_COORDINATOR_PORT).

``import skrl`` runs ``jax.distributed.initialize`` exactly as skrl does (coordinator, number of
processes, process id, local device id; JAX's defaults for the rest: initialization_timeout
300 s, heartbeat 100 s, shutdown 300 s). ``--init-timeout N`` makes the same call itself with
``initialization_timeout=N`` instead and does not import skrl (which would initialise again).

Each process contributes 2**rank to a cross-process sum (jit over a global array) and an
all-gather; prints ``RESULT ...`` and exits 1 when wrong. ``--hold S`` keeps summing S seconds.
"""

import argparse
import os
import sys
import time

import jax

jax.config.update("jax_platforms", "cpu")
jax.config.update("jax_cpu_collectives_implementation", "gloo")


def say(line: str) -> None:
    """One write(2) per line: lines of ranks sharing a pipe never interleave."""
    os.write(1, (line + "\n").encode())


parser = argparse.ArgumentParser()
parser.add_argument("--init-timeout", type=int, default=None)
parser.add_argument("--hold", type=float, default=0.0)
args, _unknown = parser.parse_known_args()  # train_multigpu adds --ml_framework jax --distributed

if args.init_timeout is None:
    import skrl  # noqa: F401  (initialises jax.distributed from JAX_* variables)
else:
    jax.distributed.initialize(
        coordinator_address=os.environ["JAX_COORDINATOR_ADDR"] + ":" + os.environ["JAX_COORDINATOR_PORT"],
        num_processes=int(os.environ["JAX_WORLD_SIZE"]),
        process_id=int(os.environ["JAX_RANK"]),
        local_device_ids=int(os.environ["JAX_LOCAL_RANK"]),
        initialization_timeout=args.init_timeout,
    )

import numpy as np  # noqa: E402
from jax.experimental import multihost_utils  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec  # noqa: E402

rank, world = jax.process_index(), jax.process_count()
mesh = Mesh(np.array(jax.devices()), ("p",))
local = jax.local_devices()[0]


def global_sum(value: float) -> float:
    shard = jax.device_put(np.array([value]), local)
    arr = jax.make_array_from_single_device_arrays(
        (len(jax.devices()),), NamedSharding(mesh, PartitionSpec("p")), [shard]
    )
    out = jax.jit(lambda a: a.sum(), out_shardings=NamedSharding(mesh, PartitionSpec()))(arr)
    return float(out.addressable_data(0))


total = int(global_sum(2.0**rank))
gathered = sorted(int(x) for x in multihost_utils.process_allgather(np.array([rank])).ravel())
ok = total == 2**world - 1 and gathered == list(range(world))
say(
    f"RESULT rank={rank} world={world} devices={len(jax.devices())} sum={total} "
    f"expected={2**world - 1} gathered={gathered} ok={ok}"
)
if not ok:
    sys.exit(1)
if args.hold:
    say(f"HOLDING rank={rank}")
    end = time.monotonic() + args.hold
    while time.monotonic() < end:
        global_sum(1.0)
        time.sleep(0.05)
