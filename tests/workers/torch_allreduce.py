"""torchrun worker: gloo all-reduce of 2**rank, so the sum proves which ranks took part.

Prints one line ``RESULT rank=.. group_rank=.. world=.. sum=.. expected=.. ok=..`` and exits 1
when the sum is wrong. ``--hold S`` keeps all-reducing for S seconds afterwards (so that a
test can kill another node mid-run) and prints ``HOLDING`` once it starts. ``--crash-once R``:
global rank R exits 3 before the all-reduce in the first attempt (TORCHELASTIC_RESTART_COUNT=0)
only, for max_restarts tests. Unknown arguments (``--distributed`` from train_multigpu) are ignored.
"""

import argparse
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist


def say(line: str) -> None:
    """One write(2) per line: lines of ranks sharing a pipe never interleave."""
    os.write(1, (line + "\n").encode())


parser = argparse.ArgumentParser()
parser.add_argument("--hold", type=float, default=0.0)
parser.add_argument("--pg-timeout", type=float, default=60.0)
parser.add_argument("--crash-once", type=int, default=None)
args, _unknown = parser.parse_known_args()
restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
if args.crash_once is not None:
    # torch elastic keeps the agent's store (MASTER_ADDR:MASTER_PORT) across restarts, and the
    # restart count is per node (a node restarted because another failed keeps 0). So that no
    # worker of the failed attempt writes gloo keys a restarted worker could read, the others wait
    # for the crashing rank's "go", which it gives only in a later attempt.
    store = dist.TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        is_master=False,
        timeout=datetime.timedelta(seconds=args.pg_timeout),
    )
    if int(os.environ["RANK"]) == args.crash_once:
        if restart == "0":
            say(f"CRASHING rank={os.environ['RANK']} restart={restart}")
            sys.exit(3)
        store.set("crash_once/go", "1")
    else:
        store.wait(["crash_once/go"])
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.pg_timeout))
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([2.0**rank], dtype=torch.float64)
dist.all_reduce(t)
total, expected = int(t.item()), 2**world - 1
env = {k: os.environ.get(k) for k in ("GROUP_RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
say(
    f"RESULT rank={rank} group_rank={env['GROUP_RANK']} local_rank={env['LOCAL_RANK']} "
    f"world={world} sum={total} expected={expected} ok={total == expected} "
    f"master={env['MASTER_ADDR']}:{env['MASTER_PORT']} restart={restart}"
)
if total != expected:
    sys.exit(1)
if args.hold:
    say(f"HOLDING rank={rank}")
    end = time.monotonic() + args.hold
    while time.monotonic() < end:
        dist.all_reduce(torch.ones(1))
        time.sleep(0.05)
dist.destroy_process_group()
