"""Listing cost of ``train_multigpu runs``: 10,000 run directories made from a real run's record
(one launch of the bundled trainer, copied with fresh stamps: finished, failed, restarted, swept,
submitted to SLURM, Ray, Kubernetes and SSH with their node records, multi-node, every 50th half
written), then ``train_multigpu runs --json`` and the table timed as separate processes: with the
listing's cache off (every file read: the baseline), the first listing (the cache written), the
warm ones, and one after a run's record changed; then ``runs show``, ``logs`` and ``stacks`` of one
run (by its id, a prefix, ``last``), which read that run only. Prints CPU seconds (the command's user +
system time: the machine is shared) and wall seconds, medians and spreads, and ratios: the listings
to the cache off, one run's commands to the warm listing, against ``python -c pass`` and an empty
root measured in the same run. The launcher's byte code is compiled first (as an installed wheel's).

    python benchmarks/runs_listing.py [--dirs 10000] [--repeat 5] [--workdir DIR] [--before DIR]

``--before DIR``: another version's ``launcher/`` (``git archive COMMIT launcher | tar -x -C DIR``)
timed the same way, first on PYTHONPATH, with a cache directory of its own, warmed first (a version
without a cache has none to use).

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


def timed(argv: list[str], cwd: Path, repeat: int, env: dict, codes=(0,)) -> tuple[list[float], list[float]]:
    """Wall and CPU seconds (the child's user + system time) of each of ``repeat`` runs of ``argv``
    (its exit code one of ``codes``)."""
    walls, cpus = [], []
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        if done.returncode not in codes:
            raise SystemExit(f"{' '.join(argv)}: exit code {done.returncode}")
    return walls, cpus


def line(what: str, figures: tuple[list[float], list[float]], base: tuple[str, float] | None = None) -> str:
    walls, cpus = figures
    text = f"{what:<46} CPU median {statistics.median(cpus):6.2f} s ({min(cpus):.2f}-{max(cpus):.2f})"
    text += f"   wall median {statistics.median(walls):6.2f} s ({min(walls):.2f}-{max(walls):.2f})"
    if base:
        text += f"   CPU {statistics.median(cpus) / base[1]:5.2f}x {base[0]}"
    return text


def one_run(root: Path) -> str:
    """The id of the newest launch with a record of its own (not a node's, not a sweep job's)."""
    own = (p for p in root.iterdir() if (p / "status.json").is_file() and "_node" not in p.name)
    return max(own, key=lambda p: p.name).name


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

    # the byte code an installed wheel has (this machine may set PYTHONDONTWRITEBYTECODE): no run compiles
    for where in [ROOT / "launcher", *([args.before / "launcher"] if args.before else [])]:
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(where)], check=True, stdout=subprocess.DEVNULL)
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
        one = one_run(workdir / "runs")
        repeat = args.repeat
        subprocess.run([*command, "--json"], cwd=workdir, env=off, check=True, stdout=subprocess.DEVNULL)  # page cache
        first = timed([*command, "--json"], workdir, 1, cached)  # the cache empty: reads all, writes it
        rows: list[tuple[str, tuple, str | None]] = [  # what, figures, the row it is compared with
            (
                "python -c pass (the interpreter's start)",
                timed([sys.executable, "-c", "pass"], workdir, repeat, off),
                None,
            ),
            ("runs, an empty root", timed([*command, "--root", str(empty)], workdir, repeat, off), None),
            ("runs --json, the cache off (every file read)", timed([*command, "--json"], workdir, repeat, off), None),
            ("runs (table), the cache off", timed(command, workdir, repeat, off), None),
            ("runs --json, first listing (cache written)", first, "off"),
            ("runs --json", timed([*command, "--json"], workdir, repeat, cached), "off"),
            ("runs (table)", timed(command, workdir, repeat, cached), "off table"),
            (f"runs show ID ({one})", timed([*command, "show", one], workdir, repeat, cached), "listing"),
            ("runs show --json ID", timed([*command, "show", "--json", one], workdir, repeat, cached), "listing"),
            (
                "runs show PREFIX (a unique prefix)",
                timed([*command, "show", one[:-1]], workdir, repeat, cached),
                "listing",
            ),
            ("runs logs ID", timed([*command, "logs", one], workdir, repeat, cached), "listing"),
            (
                "runs stacks ID (ended: refused, exit 2)",
                timed([*command, "stacks", one], workdir, repeat, cached, (2,)),
                "listing",
            ),
            (
                "runs show last (every start, from the cache)",
                timed([*command, "show", "last"], workdir, repeat, cached),
                "listing",
            ),
        ]
        latest = max((p for p in (workdir / "runs").iterdir() if (p / "status.json").is_file()), key=lambda p: p.name)
        (latest / "status.json").write_text((latest / "status.json").read_text())  # a run that just ended
        rows.append(
            ("runs --json, one run's record just rewritten", timed([*command, "--json"], workdir, 1, cached), "off")
        )
        if args.before:  # another version's launcher/, first on the path, with a cache of its own (if it has one)
            before = {**cached, "PYTHONPATH": str(args.before.resolve()), cache.VAR: str(Path(tmp) / "cache-before")}
            name = args.before.name
            subprocess.run([*command, "--json"], cwd=workdir, env=before, check=True, stdout=subprocess.DEVNULL)
            time.sleep(cache.SETTLED_S)
            for what, argv, base in (
                ("runs --json", [*command, "--json"], "off"),
                ("runs (table)", command, "off table"),
                ("runs show ID", [*command, "show", one], "listing"),
                ("runs logs ID", [*command, "logs", one], "listing"),
            ):
                rows.append((f"{what}, {name}'s launcher", timed(argv, workdir, repeat, before), base))
        size = os.path.getsize(cache.Cache(workdir / "runs", cached[cache.VAR]).path)
        found = len(read_all_ids(workdir / "runs"))
    print(f"{found} run directories: {made}; the cache file {size / (1 << 20):.1f} MiB")
    median = {what: statistics.median(figures[1]) for what, figures, _ in rows}
    bases = {
        "off": ("the cache off's", median["runs --json, the cache off (every file read)"]),
        "off table": ("the cache off's", median["runs (table), the cache off"]),
        "listing": ("the warm runs --json", median["runs --json"]),
    }
    for what, figures, base in rows:
        print(line(what, figures, bases.get(base)))
    start = median["python -c pass (the interpreter's start)"]
    print(f"runs show ID: {median[f'runs show ID ({one})'] - start:.2f} s of CPU beyond the interpreter's start")
    warm = [median["runs --json"], median["runs (table)"]]
    walls = [statistics.median(figures[0]) for what, figures, _ in rows if what in ("runs --json", "runs (table)")]
    verdict = "met" if max(warm) < 1.0 else "MISSED"
    print(f"target: < 1 s for {args.dirs} directories, --json and the table: CPU {verdict} ({max(warm):.2f} s);")
    print(f"  wall {max(walls):.2f} s on this machine at load {os.getloadavg()[0]:.1f} ({os.cpu_count()} CPUs)")


def read_all_ids(root: Path) -> list[str]:
    from launcher.runs import read

    return [entry.id for entry in read.scan(root)]


if __name__ == "__main__":
    main()
