"""A test rank that leaves descendants behind, then ends as told.

Each rank writes ``<pid_dir>/rank<R>.pid`` and starts two helpers that ignore SIGINT/SIGTERM/SIGHUP
and sleep: one in a new session (setsid), one double-forked (its parent exits at once, so it is
re-parented). Each helper writes ``<pid_dir>/helper-<R>-<kind>.pid``; its command line carries
``tmg-test-helper`` so a test can tell it from a process that reused its pid.

--mode ok        print a line and exit 0
--mode sleep     sleep (until stopped); with --ignore_signals, ignore SIGINT/SIGTERM/SIGHUP
--fail R:CODE    rank R exits with CODE (after writing <pid_dir>/failed.time), others sleep
--raise R        rank R raises ValueError('boom from rank R'), others sleep
--kill R         rank R kills itself with SIGKILL, others sleep
--seed S         (forwarded by the launcher from seed=S) write into <pid_dir>/seed<S>/ instead
--fail_seed S:CODE[:WAIT]  with --seed S, rank 0 exits with CODE (once <pid_dir>/WAIT exists)
"""

import argparse
import os
import signal
import subprocess
import sys
import time

HELPER = r"""
import os, signal, sys, time
for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(s, signal.SIG_IGN)
if sys.argv[2] == "daemon" and os.fork() > 0:
    os._exit(0)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(600)
"""


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pid_dir", required=True)
    parser.add_argument("--mode", default="sleep")
    parser.add_argument("--fail", default=None)
    parser.add_argument("--raise", dest="raise_", type=int, default=None)
    parser.add_argument("--kill", type=int, default=None)
    parser.add_argument("--ignore_signals", action="store_true")
    parser.add_argument("--seed", default=None)
    parser.add_argument("--fail_seed", default=None)
    args, _ = parser.parse_known_args()
    root = args.pid_dir
    if args.seed is not None:
        args.pid_dir = os.path.join(root, f"seed{args.seed}")
        os.makedirs(args.pid_dir, exist_ok=True)
    rank = int(os.environ.get("RANK", os.environ.get("JAX_RANK", "0")))
    for kind, new_session in (("setsid", True), ("daemon", False)):
        path = os.path.join(args.pid_dir, f"helper-{rank}-{kind}.pid")
        subprocess.Popen([sys.executable, "-c", HELPER, path, kind, "tmg-test-helper"], start_new_session=new_session)
    pid_file = os.path.join(args.pid_dir, f"rank{rank}.pid")
    with open(pid_file + ".tmp", "w") as f:  # whole or absent: a rank killed while writing leaves no empty pid file
        f.write(str(os.getpid()))
    os.replace(pid_file + ".tmp", pid_file)
    print(f"rank {rank} started", flush=True)
    if args.ignore_signals:
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_IGN)
    # wait for the helpers, so every rank leaves them behind for sure
    deadline = time.time() + 20
    while (
        time.time() < deadline
        and sum(n.startswith(f"helper-{rank}-") and n.endswith(".pid") for n in os.listdir(args.pid_dir)) < 2
    ):
        time.sleep(0.02)
    if args.mode == "ok":
        print(f"rank {rank} OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}", flush=True)
        print(f"rank {rank} done", flush=True)
        return 0
    if args.fail:
        bad, code = (int(x) for x in args.fail.split(":"))
        if rank == bad:
            print(f"rank {rank} failing with {code}", flush=True)
            with open(os.path.join(args.pid_dir, "failed.time"), "w") as f:
                f.write(repr(time.time()))
            return code
    if args.fail_seed and args.seed is not None and rank == 0:
        seed, code, *wait = args.fail_seed.split(":")
        if seed == args.seed:
            deadline = time.time() + 60
            while wait and not os.path.exists(os.path.join(root, wait[0])) and time.time() < deadline:
                time.sleep(0.02)
            print(f"seed {seed} failing with {code}", flush=True)
            return int(code)
    if args.raise_ is not None and rank == args.raise_:
        with open(os.path.join(args.pid_dir, "failed.time"), "w") as f:
            f.write(repr(time.time()))
        raise ValueError(f"boom from rank {rank}")
    if args.kill is not None and rank == args.kill:
        with open(os.path.join(args.pid_dir, "failed.time"), "w") as f:
            f.write(repr(time.time()))
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(600)
    return 0


if __name__ == "__main__":
    sys.exit(main())
