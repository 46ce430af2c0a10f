"""Listing cost of ``train_multigpu runs``: 1,000 run directories made from a real run's record
(one launch of the bundled trainer, copied with fresh stamps; every 10th one a sweep job, a few
half written), then ``train_multigpu runs --json`` and the table timed as separate processes, and
the in-process read alone. Prints medians.

    python benchmarks/runs_listing.py [--dirs 1000] [--repeat 5]

Target: under 1 s for 1,000 directories (the whole command, interpreter start included).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COPIED = ("status.json", "config.yaml", "command.sh", "env.json", "metrics.csv", "run_info.json", "composition.json")


def real_run(workdir: Path) -> Path:
    """One real launch of the bundled trainer (presets=debug, two ranks)."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    argv = [sys.executable, "-m", "launcher", "presets=debug", "launcher.nproc_per_node=2", "run_root=real"]
    subprocess.run(argv, cwd=workdir, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    (run,) = (workdir / "real").iterdir()
    return run


def synthetic(source: Path, root: Path, count: int) -> None:
    """``count`` run directories under ``root`` copied from ``source``'s record, logs included."""
    status = json.loads((source / "status.json").read_text())
    base = datetime(2026, 1, 1)
    for index in range(count):
        stamp = (base + timedelta(minutes=index)).strftime("%Y-%m-%d_%H-%M-%S")
        if index % 10 == 9:  # a sweep job
            target = root / "multirun" / stamp[:13] / str(index % 7)
        else:
            target = root / f"{stamp}_run{index}"
        target.mkdir(parents=True, exist_ok=True)
        if index % 50 == 49:  # half written: the launcher died before status.json
            (target / "config.yaml").write_text((source / "config.yaml").read_text()[:200])
            continue
        for name in COPIED:
            if (source / name).exists():
                shutil.copy(source / name, target / name)
        shutil.copytree(source / "logs", target / "logs")
        started = (base + timedelta(minutes=index)).astimezone().isoformat(timespec="seconds")
        (target / "status.json").write_text(json.dumps({**status, "started": started}))


def timed(argv: list[str], cwd: Path, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(argv, cwd=cwd, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dirs", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        source = real_run(workdir)
        synthetic(source, workdir / "runs", args.dirs)
        command = [sys.executable, "-m", "launcher", "runs"]
        subprocess.run([*command, "--json"], cwd=workdir, check=True, stdout=subprocess.DEVNULL)  # warm the cache
        as_json = timed([*command, "--json"], workdir, args.repeat)
        as_table = timed(command, workdir, args.repeat)
        empty = workdir / "empty"
        empty.mkdir()
        nothing = timed([*command, "--root", str(empty)], workdir, args.repeat)
        from launcher.runs import read

        reads = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            found = read.read_all(workdir / "runs")
            reads.append(time.perf_counter() - start)
    print(f"{len(found)} run directories (from {source.name}'s record)")
    print(f"train_multigpu runs --json      median {as_json * 1000:7.1f} ms over {args.repeat} runs")
    print(f"train_multigpu runs (table)     median {as_table * 1000:7.1f} ms over {args.repeat} runs")
    print(f"train_multigpu runs (no runs)   median {nothing * 1000:7.1f} ms (interpreter + launcher start)")
    print(f"read.read_all in-process        median {statistics.median(reads) * 1000:7.1f} ms")
    print(f"target: < 1000 ms for {args.dirs} directories: {'met' if max(as_json, as_table) < 1.0 else 'MISSED'}")


if __name__ == "__main__":
    main()
