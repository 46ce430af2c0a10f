"""A test rank that fails in one chosen way, for the failure-cause tests (tests/test_causes.py).

--mode oom      torch + gloo: both ranks join; rank 1 allocates host memory until the kernel kills it
                (the test's memory cgroup limit); rank 0 waits in an all_reduce for it and fails
                with gloo's lost-peer error (a follower). Rank 0 ignores SIGTERM so that torchrun's
                stop does not race its error: the launcher's SIGKILL ends it a second later.
--mode abort    rank 1 calls os.abort() in crash_here(); rank 0 sleeps (standard library only)
--mode hard_exit rank 1 forks a child that calls os._exit(5), waits for it, then calls os._exit(3);
                rank 0 sleeps (standard library only)
--mode raise    rank 1 raises RuntimeError(--text); rank 0 sleeps (standard library only)
--mode printed  rank 1 prints --text, then raises KeyError (standard library only)
--mode segv     rank 1 dies of SIGSEGV in crash_segv() (ctypes reads address 0); rank 0 sleeps
--mode sigbus   rank 1 dies of SIGBUS in crash_sigbus(): it maps a file, truncates it and reads the
                page that is gone; rank 0 sleeps (standard library only)
--mode beat     every rank beats (TRAIN_MULTIGPU_HEARTBEAT_FILE) once per iteration for --seconds,
                an iteration taking --dt s, and --slow_dt s on rank --slow_rank (standard library only)
"""

import argparse
import os
import signal
import sys
import time


def rank() -> int:
    return int(os.environ.get("RANK", os.environ.get("JAX_RANK", "0")))


def crash_here() -> None:
    os.abort()


def crash_segv() -> None:
    import ctypes

    ctypes.string_at(0)


def crash_sigbus() -> None:
    import mmap
    import tempfile

    with tempfile.TemporaryFile() as handle:
        handle.truncate(mmap.PAGESIZE)
        mapped = mmap.mmap(handle.fileno(), mmap.PAGESIZE)
        handle.truncate(0)
        mapped[0]  # the page's file is gone: the kernel sends SIGBUS


def oom() -> int:
    import datetime

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    if dist.get_rank() == 1:
        print("rank 1 allocating", flush=True)
        hoard = []
        while True:
            hoard.append(bytearray(50 * 1024 * 1024))
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print("rank 0 waiting in all_reduce", flush=True)
    dist.all_reduce(torch.ones(1))
    return 0


def beat(seconds: float, dt: float, slow_rank: int, slow_dt: float) -> int:
    path = os.environ["TRAIN_MULTIGPU_HEARTBEAT_FILE"]
    step = slow_dt if rank() == slow_rank else dt
    end = time.monotonic() + seconds
    iteration = 0
    while time.monotonic() < end:
        time.sleep(step)
        iteration += 1
        with open(path, "w") as handle:
            handle.write(f"{iteration}")
    print(f"rank {rank()} did {iteration} iterations", flush=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", required=True)
    parser.add_argument("--text", default="")
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--dt", type=float, default=0.05)
    parser.add_argument("--slow_rank", type=int, default=1)
    parser.add_argument("--slow_dt", type=float, default=0.3)
    args, _ = parser.parse_known_args()
    if args.mode == "oom":
        return oom()
    if args.mode == "beat":
        return beat(args.seconds, args.dt, args.slow_rank, args.slow_dt)
    print(f"rank {rank()} started", flush=True)
    if rank() == 1:
        if args.mode == "abort":
            crash_here()
        if args.mode == "raise":
            raise RuntimeError(args.text)
        if args.mode == "printed":
            print(args.text, flush=True)
            raise KeyError("step_count")
        if args.mode == "segv":
            crash_segv()
        if args.mode == "sigbus":
            crash_sigbus()
        if args.mode == "hard_exit":
            child = os.fork()
            if child == 0:
                os._exit(5)
            os.waitpid(child, 0)
            os._exit(3)
    time.sleep(120)
    return 0


if __name__ == "__main__":
    sys.exit(main())
