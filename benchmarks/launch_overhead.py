"""A whole local launch against bare torchrun, start to exit: a trivial two-rank gloo all-reduce
(examples/allreduce.py) launched by ``train_multigpu`` and by ``torchrun --standalone``, alternating
pairs in this run. Prints both medians and their ratio (issue 19's budget: <= 1.15).

    python benchmarks/launch_overhead.py [--pairs 7] [--nproc 2]

The first line printed is the load: figures on a busy machine mean little.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "examples" / "allreduce.py"


def timed(argv: list[str]) -> float:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    start = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=7)
    parser.add_argument("--nproc", type=int, default=2)
    args = parser.parse_args()
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    n = str(args.nproc)
    bare_argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", n, str(SCRIPT)]
    ours, bare = [], []
    with tempfile.TemporaryDirectory() as tmp:
        ours_argv = [
            *(sys.executable, "-m", "launcher", "device=cpu", f"run_root={tmp}/runs"),
            *(f"script={SCRIPT}", f"launcher.nproc_per_node={n}"),
        ]
        timed(ours_argv), timed(bare_argv)  # warm the file cache
        for _ in range(args.pairs):
            ours.append(timed(ours_argv))
            bare.append(timed(bare_argv))
    o, b = statistics.median(ours), statistics.median(bare)
    print(f"train_multigpu {o:.3f} s   torchrun {b:.3f} s   ratio {o / b:.2f}   (medians of {args.pairs} pairs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
