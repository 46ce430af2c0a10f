"""What a ``submit=slurm`` sweep writes and what its job array's tasks read, in bytes (a count, not a
time): ``train_multigpu -m seed=range(0,N) presets=[debug] submit=slurm`` with a stand-in ``sbatch``
that only answers a job id (what is counted is what the launcher writes; nothing reaches a cluster).

For each N it prints the array script's size (SLURM stores it once and sends it to every task),
what one task reads (the script and, where there is one, its own point's command file), that times
N (what the array's tasks read in all: quadratic when the script holds every point's command), and
the bytes written per point (each distinct file once: a hard link is not counted again).

    python benchmarks/array_bytes.py [--points 10,100,1000]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

SCRIPT = "job.sbatch"
TASK = "job.task"


def measure(points: int, workdir: Path) -> dict[str, float]:
    bin_dir = workdir / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text("#!/bin/sh\necho 4242\n")
    (bin_dir / "sbatch").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "CUDA_VISIBLE_DEVICES": ""}
    argv = [sys.executable, "-m", "launcher", "-m", f"seed=range(0,{points})", "presets=[debug]", "submit=slurm"]
    subprocess.run(argv, cwd=workdir, env=env, check=True, capture_output=True, text=True)
    dirs = sorted(p for p in (workdir / "runs" / "multirun").glob("*/*") if p.is_dir())
    assert len(dirs) == points, dirs
    seen: dict[tuple[int, int], int] = {}
    for path in (workdir / "runs").rglob("*"):
        if path.is_file():
            info = path.stat()
            seen[(info.st_dev, info.st_ino)] = info.st_size
    script = max((d / SCRIPT).stat().st_size for d in dirs)
    task = max(((d / TASK).stat().st_size if (d / TASK).exists() else 0) for d in dirs)
    return {
        "script": script,
        "task file": task,
        "one task reads": script + task,
        "all tasks read": points * (script + task),
        "written per point": sum(seen.values()) / points,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--points", default="10,100,1000")
    args = parser.parse_args()
    print(
        f"{'points':>7} {'script B':>9} {'task file B':>12} {'one task reads B':>17} {'all tasks read B':>17} "
        f"{'written/point B':>16}"
    )
    for points in (int(p) for p in args.points.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            row = measure(points, Path(tmp))
        print(
            f"{points:>7} {row['script']:>9.0f} {row['task file']:>12.0f} {row['one task reads']:>17.0f} "
            f"{row['all tasks read']:>17.0f} {row['written per point']:>16.0f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
