"""Listing cost of ``train_multigpu runs``: 1,000 run directories made from a real run's record
(one launch of the bundled trainer, copied with fresh stamps; every 10th one a sweep job, a few
half written), then ``train_multigpu runs --json`` and the table timed as separate processes, and
the in-process read alone. Prints medians.

    python benchmarks/runs_listing.py [--dirs 10000] [--repeat 5]

Target: under 1 s for 10,000 directories (the whole command, interpreter start included); the
ratio to the empty root's command (interpreter and launcher start) is printed too.
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


def _copy_record(source: Path, target: Path, status: dict) -> None:
    target.mkdir(parents=True, exist_ok=True)
    for name in COPIED:
        if (source / name).exists():
            shutil.copy(source / name, target / name)
    shutil.copytree(source / "logs", target / "logs")
    (target / "status.json").write_text(json.dumps(status))


# the realistic mix, by index % 10: what each run directory is
KINDS = ("finished", "failed", "restarted", "slurm", "ray", "k8s", "ssh", "nodes", "finished", "swept")
FAILURE = {"rank": 1, "node": 0, "local_rank": 1, "exit_code": 1, "class": "exception", "hint": "see logs/rank1.log"}


def synthetic(source: Path, root: Path, count: int) -> dict[str, int]:
    """``count`` run directories under ``root`` from ``source``'s record, logs included: a mix of
    finished, failed, restarted (attempt1/), swept (multirun/), submitted to every back end
    (submit.json, the job's node records) and multi-node (``_node<R>``) launches; every 50th half
    written. Returns how many of each."""
    status = json.loads((source / "status.json").read_text())
    base = datetime(2026, 1, 1)
    made: dict[str, int] = {}
    for index in range(count):
        stamp = (base + timedelta(minutes=index)).strftime("%Y-%m-%d_%H-%M-%S")
        started = (base + timedelta(minutes=index)).astimezone().isoformat(timespec="seconds")
        kind = "half written" if index % 50 == 49 else KINDS[index % 10]
        made[kind] = made.get(kind, 0) + 1
        mine = {**status, "started": started}
        if kind == "swept":
            target = root / "multirun" / stamp[:13] / str(index % 7)
        elif kind == "nodes":
            first = index - index % 20 + 7  # the two nodes of one launch: its stamp and name, a second apart
            node_stamp = (base + timedelta(minutes=first, seconds=index % 20 // 10)).strftime("%Y-%m-%d_%H-%M-%S")
            target = root / f"{node_stamp}_run{first}_node{index % 20 // 10}"
        else:
            target = root / f"{stamp}_run{index}"
        if kind == "half written":  # the launcher died before status.json
            target.mkdir(parents=True, exist_ok=True)
            (target / "config.yaml").write_text((source / "config.yaml").read_text()[:200])
            continue
        if kind == "failed":
            mine.update(exit_code=1, reason="rank 1 failed", failure=FAILURE)
        if kind == "restarted":
            mine["attempts"] = [{"attempt": 0, "exit_code": 1, "class": "nccl"}, {"attempt": 1, "exit_code": 0}]
            _copy_record(source, target / "attempt1", mine)
        if kind in ("slurm", "ray", "k8s", "ssh"):
            ids = {
                "slurm": str(1000 + index),
                "ray": f"raysubmit_{index}",
                "k8s": f"ppo-{index}",
                "ssh": str(index + 1),
            }
            record = {"format": 2, "backend": kind, "id": ids[kind], "run_dir": str(target)}
            target.mkdir(parents=True, exist_ok=True)
            (target / "submit.json").write_text(json.dumps(record))
            for node in range(2):
                _copy_record(source, target / f"node{node}", mine)
            shutil.copy(source / "config.yaml", target / "config.yaml")
            continue
        _copy_record(source, target, mine)
    return made


def timed(argv: list[str], cwd: Path, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(argv, cwd=cwd, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dirs", type=int, default=10000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        source = real_run(workdir)
        made = synthetic(source, workdir / "runs", args.dirs)
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
    print(f"{len(found)} run directories (from {source.name}'s record): {made}")
    print(f"train_multigpu runs --json      median {as_json * 1000:7.1f} ms over {args.repeat} runs")
    print(f"train_multigpu runs (table)     median {as_table * 1000:7.1f} ms over {args.repeat} runs")
    print(f"train_multigpu runs (no runs)   median {nothing * 1000:7.1f} ms (interpreter + launcher start)")
    print(f"read.read_all in-process        median {statistics.median(reads) * 1000:7.1f} ms")
    print(f"target: < 1000 ms for {args.dirs} directories: {'met' if max(as_json, as_table) < 1.0 else 'MISSED'}")


if __name__ == "__main__":
    main()
