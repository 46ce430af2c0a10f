"""Listing cost of ``train_multigpu runs``: 10,000 run directories made from a real run's record
(one launch of the bundled trainer, copied with fresh stamps: finished, failed, restarted, swept,
submitted to SLURM, Ray, Kubernetes and SSH with their node records, multi-node, every 50th half
written), then ``train_multigpu runs --json`` and the table timed as separate processes: with the
listing's cache off (every file read: the baseline), the first listing (the cache written), the
warm ones, and one after a run's record changed. Prints CPU seconds (the command's user + system
time: the machine is shared) and wall seconds, medians and spreads, and ratios to the cache off.

    python benchmarks/runs_listing.py [--dirs 10000] [--repeat 5] [--workdir DIR] [--before DIR]

``--before DIR``: another version's ``launcher/`` (``git archive COMMIT launcher | tar -x -C DIR``)
timed the same way, first on PYTHONPATH, with the cache off (a version without one has none).

Target: under 1 s for 10,000 directories (the whole command, interpreter start included).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
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


def timed(argv: list[str], cwd: Path, repeat: int, env: dict) -> tuple[list[float], list[float]]:
    """Wall and CPU seconds (the child's user + system time) of each of ``repeat`` runs of ``argv``."""
    walls, cpus = [], []
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(argv, cwd=cwd, check=True, stdout=subprocess.DEVNULL, env=env)
        walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return walls, cpus


def line(what: str, figures: tuple[list[float], list[float]], base: float | None = None) -> str:
    walls, cpus = figures
    text = f"{what:<44} CPU median {statistics.median(cpus):6.2f} s ({min(cpus):.2f}-{max(cpus):.2f})"
    text += f"   wall median {statistics.median(walls):6.2f} s ({min(walls):.2f}-{max(walls):.2f})"
    if base:
        text += f"   CPU {statistics.median(cpus) / base:5.2f}x the cache off's"
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dirs", type=int, default=10000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--workdir", type=Path, help="build the run root here, or use the one built there before")
    parser.add_argument(
        "--before",
        type=Path,
        help="a folder holding another version's launcher/ (git archive COMMIT launcher | tar -x -C DIR), timed too",
    )
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from launcher.runs import cache

    with tempfile.TemporaryDirectory() as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        if not (workdir / "runs").is_dir():
            source = real_run(workdir)
            made = synthetic(source, workdir / "runs", args.dirs)
            time.sleep(cache.SETTLED_S)  # a record written a moment ago is not kept: these are settled
        else:
            made = "(built before)"
        empty = workdir / "empty"
        empty.mkdir(exist_ok=True)
        command = [sys.executable, "-m", "launcher", "runs"]
        cached = {**os.environ, cache.VAR: str(Path(tmp) / "cache")}
        off = {**os.environ, cache.VAR: cache.OFF}
        subprocess.run([*command, "--json"], cwd=workdir, env=off, check=True, stdout=subprocess.DEVNULL)  # page cache
        first = timed([*command, "--json"], workdir, 1, cached)  # the cache empty: reads all, writes it
        rows = [
            ("runs --json, the cache off (every file read)", timed([*command, "--json"], workdir, args.repeat, off)),
            ("runs (table), the cache off", timed(command, workdir, args.repeat, off)),
            ("runs --json, first listing (cache written)", first),
            ("runs --json", timed([*command, "--json"], workdir, args.repeat, cached)),
            ("runs (table)", timed(command, workdir, args.repeat, cached)),
        ]
        latest = max((p for p in (workdir / "runs").iterdir() if (p / "status.json").is_file()), key=lambda p: p.name)
        (latest / "status.json").write_text((latest / "status.json").read_text())  # a run that just ended
        rows.append(("runs --json, one run's record just rewritten", timed([*command, "--json"], workdir, 1, cached)))
        rows.append(("runs, an empty root", timed([*command, "--root", str(empty)], workdir, args.repeat, off)))
        if args.before:  # another version's launcher/, first on the path
            before = {**off, "PYTHONPATH": str(args.before.resolve())}
            name = args.before.name
            rows.append((f"runs --json, {name}'s launcher", timed([*command, "--json"], workdir, args.repeat, before)))
            rows.append((f"runs (table), {name}'s launcher", timed(command, workdir, args.repeat, before)))
            rows.append((f"runs, an empty root, {name}'s", timed([*command, "--root", str(empty)], workdir, 3, before)))
        size = os.path.getsize(cache.Cache(workdir / "runs", cached[cache.VAR]).path)
        found = len(read_all_ids(workdir / "runs"))
    print(f"{found} run directories: {made}; the cache file {size / (1 << 20):.1f} MiB")
    off_json, off_table = (statistics.median(rows[index][1][1]) for index in (0, 1))
    bases = [None, None, off_json, off_json, off_table, off_json, None, None, None, None]
    for (what, figures), base in zip(rows, bases):
        print(line(what, figures, base))
    warm = [statistics.median(figures[1]) for what, figures in rows[3:5]]
    walls = [statistics.median(figures[0]) for what, figures in rows[3:5]]
    verdict = "met" if max(warm) < 1.0 else "MISSED"
    print(f"target: < 1 s for {args.dirs} directories, --json and the table: CPU {verdict} ({max(warm):.2f} s);")
    print(f"  wall {max(walls):.2f} s on this machine at load {os.getloadavg()[0]:.1f} ({os.cpu_count()} CPUs)")


def read_all_ids(root: Path) -> list[str]:
    from launcher.runs import read

    return [entry.id for entry in read.scan(root)]


if __name__ == "__main__":
    main()
