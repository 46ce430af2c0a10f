"""A test rank for the ``runs`` tests: standard library only, starts in a blink.

Prints ``rank R line N`` lines, beats (TRAIN_MULTIGPU_HEARTBEAT_FILE, when the launcher sets it) and
writes ``metrics.csv`` like the bundled trainers (rank 0, in TRAIN_MULTIGPU_RUN_DIR). Once its lines
are printed a rank writes its pid into ``<run_dir>/printed<R>``.

--lines N        print N lines, one per iteration (default 3), beating ``N-th-line total`` with each
--pace S         seconds between two lines (default 0)
--fail R:CODE    rank R exits with CODE once every rank printed its lines; the others sleep until stopped
--sleep          after the lines, sleep until stopped (SIGINT/SIGTERM end it with 128+N)
--ready FILE     touch FILE (rank 0) once every rank printed its lines
--go FILE        then wait for FILE to exist and print ``rank R after go`` (a line written when the
                 test says, e.g. once ``runs logs --follow`` has printed what was there before)
--until FILE     then sleep until FILE exists and exit 0 (a launch that ends when the test says)
"""

import argparse
import os
import sys
import time


def wait_for_file(path: str) -> None:
    while not os.path.exists(path):
        time.sleep(0.02)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, default=3)
    parser.add_argument("--pace", type=float, default=0.0)
    parser.add_argument("--fail", default=None)
    parser.add_argument("--sleep", action="store_true")
    parser.add_argument("--ready", default=None)
    parser.add_argument("--go", default=None)
    parser.add_argument("--until", default=None)
    args, _ = parser.parse_known_args()
    rank = int(os.environ.get("RANK", os.environ.get("JAX_RANK", "0")))
    beat = os.environ.get("TRAIN_MULTIGPU_HEARTBEAT_FILE", "")
    run_dir = os.environ.get("TRAIN_MULTIGPU_RUN_DIR", "")
    if rank == 0 and run_dir:
        with open(os.path.join(run_dir, "metrics.csv"), "w") as f:
            f.write("iteration,env_steps,env_steps_per_s,mean_return,iteration_s\n")
            for i in range(1, args.lines + 1):
                f.write(f"{i},{i * 100},1000.0,{10.0 * i:.3f},0.01\n")
    for i in range(1, args.lines + 1):
        if i > 1 and args.pace:
            time.sleep(args.pace)
        print(f"rank {rank} line {i}", flush=True)
        if beat:
            with open(beat, "w") as f:
                f.write(f"{i} {args.lines}")
    world = int(os.environ.get("WORLD_SIZE", os.environ.get("JAX_WORLD_SIZE", "1")))
    if run_dir:  # this rank has printed its lines: <run_dir>/printed<R>, its pid
        with open(os.path.join(run_dir, f"printed{rank}.tmp"), "w") as f:
            f.write(str(os.getpid()))
        os.replace(os.path.join(run_dir, f"printed{rank}.tmp"), os.path.join(run_dir, f"printed{rank}"))
    failing, code = (int(x) for x in args.fail.split(":")) if args.fail else (None, 0)
    if run_dir and (rank == failing or (rank == 0 and args.ready)):
        deadline = time.monotonic() + 60  # fail, or say ready, once every rank's lines are in its log
        while time.monotonic() < deadline:
            if all(os.path.exists(os.path.join(run_dir, f"printed{r}")) for r in range(world)):
                break
            time.sleep(0.02)
    if rank == 0 and args.ready:
        open(args.ready, "w").close()
    if args.go:
        wait_for_file(args.go)
        print(f"rank {rank} after go", flush=True)
    if args.until:
        wait_for_file(args.until)
        return 0
    if args.fail:
        if rank == failing:
            print(f"rank {rank} fails with exit code {code}", file=sys.stderr, flush=True)
            return code
        args.sleep = True
    while args.sleep:
        time.sleep(0.1)  # sleeping until stopped
    return 0


if __name__ == "__main__":
    sys.exit(main())
