"""A test rank that says whether a secret reached it, without ever writing the value: standard library only.

--name NAME   the variable to look for; writes ``<out>/<host>-rank<R>.sha`` with the sha256 of its value
              (``missing`` when unset) and ``<out>/<host>-rank<R>.pid``; given more than once, the
              digests of each, in order, one space apart
--out DIR     where (default: TRAIN_MULTIGPU_RUN_DIR)
--sleep       then sleep until stopped
"""

import argparse
import hashlib
import os
import socket
import time


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--name", required=True, action="append")
    parser.add_argument("--out", default=os.environ.get("TRAIN_MULTIGPU_RUN_DIR", "."))
    parser.add_argument("--sleep", action="store_true")
    args, _ = parser.parse_known_args()
    rank = os.environ.get("RANK", os.environ.get("JAX_RANK", "0"))
    values = [os.environ.get(name) for name in args.name]
    digest = " ".join("missing" if value is None else hashlib.sha256(value.encode()).hexdigest() for value in values)
    stem = os.path.join(args.out, f"{socket.gethostname()}-rank{rank}")
    with open(stem + ".sha.tmp", "w") as f:
        f.write(digest)
    os.replace(stem + ".sha.tmp", stem + ".sha")
    with open(stem + ".pid.tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(stem + ".pid.tmp", stem + ".pid")
    print(f"rank {rank} probed {', '.join(args.name)}", flush=True)
    while args.sleep:
        time.sleep(0.2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
