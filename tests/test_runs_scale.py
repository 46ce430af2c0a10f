"""``runs`` over many run directories: the listing's work grows with the runs, never with the runs
times the groups (counted, not timed; benchmarks/runs_listing.py times 10,000)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

from conftest import clean_env
from launcher.runs import cache, read, show
from launcher.runs.read import RunInfo


class Counted(list):
    """A list that counts the items handed out, by iteration or by index and slice."""

    handed = 0

    def __iter__(self):
        for item in super().__iter__():
            Counted.handed += 1
            yield item

    def __getitem__(self, index):
        found = super().__getitem__(index)
        Counted.handed += len(found) if isinstance(index, slice) else 1
        return found


def test_the_table_looks_at_each_run_a_bounded_number_of_times():
    """Before: each group's members were gathered by scanning every later run (19 s of 52 for
    10,000 runs in 1,167 groups): here 600 sweeps of 2 jobs and 600 single runs."""
    runs = []
    for index in range(600):
        runs += [
            RunInfo(id=f"multirun/s{index}/{job}", run_dir=f"/r/{index}/{job}", group=f"multirun/s{index}", job=job)
            for job in range(2)
        ]
        runs.append(RunInfo(id=f"single{index}", run_dir=f"/r/single{index}"))
    Counted.handed = 0
    lines = show.listing_lines(Counted(runs))
    assert Counted.handed <= 2 * len(runs)
    assert len(lines) == 1 + len(runs) + 600  # the header, one row per run and per sweep
    first = [line.split()[0] for line in lines[1:5]]
    assert first == ["multirun/s0", "multirun/s0/0", "multirun/s0/1", "single0"]


def test_runs_imports_none_of_the_launchs_modules(tmp_path):
    """``train_multigpu runs`` goes from __main__ straight to launcher/runs/: no Hydra, no OmegaConf,
    no plan, session or config (before: launcher/cli.py imported them all first, 0.22 of an empty
    root's 0.12 CPU seconds now)."""
    argv = [sys.executable, "-X", "importtime", "-m", "launcher", "runs", "--root", str(tmp_path)]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=clean_env(), cwd=tmp_path)
    assert result.returncode == 0 and result.stdout.startswith("no runs under"), result
    imported = {line.split("|")[-1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")}
    assert "launcher.runs.show" in imported
    heavy = {"hydra", "omegaconf", "launcher.plan", "launcher.session", "launcher.cli", "launcher.config"}
    assert not heavy & imported, sorted(heavy & imported)


# -- one run addressed: its own files read, not the root's ---------------------------------------
OPENED = """
import json, os, sys
root = os.path.abspath(sys.argv[1])
opened = []
sys.addaudithook(lambda event, args: event == "open" and isinstance(args[0], str) and opened.append(args[0]))
sys.argv = ["train_multigpu", "runs", "--root", root, *sys.argv[2:]]
from launcher.__main__ import entry
try:
    entry()
finally:
    runs = set()
    for path in opened:
        parts = os.path.relpath(os.path.abspath(path), root).split(os.sep)
        if parts[0] != os.pardir and len(parts) > 1:
            runs.add("/".join(parts[: 3 if parts[0] == "multirun" else 1]))
    print(json.dumps(sorted(runs)), file=sys.stderr)
"""


def _run_dir(path: Path, started: str, config: str) -> None:
    path.mkdir(parents=True)
    status = {"exit_code": 0, "outcome": "succeeded", "reason": "success", "started": started, "duration_s": 1.0}
    (path / "status.json").write_text(json.dumps(status))
    (path / "config.yaml").write_text(config)


def many_runs(root: Path, count: int) -> None:
    """``count`` finished runs: plain launches, sweeps (one an hour, of 6 jobs), and the two nodes of
    multi-node launches (named ``mn<index // 100>``: ten launches of each name)."""
    base = datetime(2026, 1, 1)
    for index in range(count):
        when = base + timedelta(minutes=index)
        stamp, started = when.strftime("%Y-%m-%d_%H-%M-%S"), when.astimezone().isoformat(timespec="seconds")
        shape = "launcher:\n  topology: single_node\n  nnodes: 1\n  nproc_per_node: 2\ntask: CartPole-v1\n"
        if index % 10 == 1:
            job = root / "multirun" / stamp[:13] / str(index // 10 % 6)
            _run_dir(job, started, shape)
            (job / "composition.json").write_text(json.dumps({"overrides": [f"seed={index}"]}))
        elif index % 10 == 2:
            nodes = "launcher:\n  topology: multinode\n  nnodes: 2\n  master_addr: node0\n  node_rank: {}\n"
            for node in range(2):
                _run_dir(root / f"{stamp}_mn{index // 100}_node{node}", started, nodes.format(node))
        else:
            _run_dir(root / f"{stamp}_run{index}", started, shape)


def runs_read(root: Path, *argv: str, cache_dir: Path) -> tuple[subprocess.CompletedProcess, list[str]]:
    """``train_multigpu runs --root ROOT ARGV...``, and the runs whose files it opened."""
    env = clean_env(TRAIN_MULTIGPU_RUNS_CACHE=str(cache_dir))
    result = subprocess.run(
        [sys.executable, "-c", OPENED, str(root), *argv], capture_output=True, text=True, timeout=120, env=env
    )
    return result, json.loads(result.stderr.splitlines()[-1])


def test_a_run_addressed_by_id_prefix_or_last_reads_its_own_files_not_every_runs(tmp_path):
    """``runs show/logs/stop/stacks ID`` read the one run (a sweep job: its sweep, a node: its
    launch's nodes), not the root's 1,000 records. Before: ``find`` read every run to learn the one's
    group, and ``last`` read every record (3 s of CPU at 10,000 runs)."""
    root = tmp_path / "runs"
    many_runs(root, 1000)
    cache_dir = tmp_path / "cache"
    plain, node = "2026-01-01_16-30-00_run990", "2026-01-01_16-32-00_mn9_node1"
    launches = sorted(path.name for path in root.iterdir() if "_mn9_node" in path.name)  # ten: told apart by time
    sweep = [f"multirun/2026-01-01_15/{job}" for job in range(6)]
    cases = [
        (("show", plain), [plain]),
        (("show", "2026-01-01_16-30"), [plain]),  # a unique prefix
        (("show", "--json", node), launches),
        (("show", "2026-01-01_15/1"), sweep),  # multirun/ left out
        (("show", "multirun/2026-01-01_15"), sweep),  # the sweep's table
        (("logs", node), launches),
        (("stop", plain), [plain]),
        (("stacks", plain), [plain]),
    ]
    for argv, wanted in cases:
        result, opened = runs_read(root, *argv, cache_dir=cache_dir)
        assert result.returncode in (0, 2), result  # (2: stop and stacks of a run that ended, said so)
        assert "Traceback" not in result.stderr, result.stderr
        assert opened == sorted(wanted), (argv, len(opened), opened[:5])
    listing, opened = runs_read(root, "--json", cache_dir=cache_dir)  # every record read, kept in the cache
    assert listing.returncode == 0 and len(opened) == 1000 + 100, len(opened)
    time.sleep(cache.SETTLED_S)  # (a record written a moment ago is read again: these are settled now)
    runs_read(root, "--json", cache_dir=cache_dir)
    result, opened = runs_read(root, "show", "last", cache_dir=cache_dir)
    newest = "2026-01-01_16-39-00_run999"
    assert result.returncode == 0 and result.stdout.startswith(f"run:      {newest}\n"), result
    assert opened == [newest]  # every other run's start from the cache


def test_a_run_looked_up_directly_is_the_one_the_listing_finds(tmp_path):
    """What ``runs show ID`` finds without listing the root (read.entry_of, read.find, read.resolve)
    is what the listing has, for every directory under a root holding what anyone may put in a
    shared one: a run directory, a multirun/ and a sweep folder that are links out of the root, a
    FIFO and a file under run names, a folder that is no run's, a sweep job named ``..x``."""
    root, outside = tmp_path / "runs", tmp_path / "elsewhere"
    many_runs(root, 60)
    (outside / "sweep" / "0").mkdir(parents=True)
    (outside / "multirun" / "s" / "0").mkdir(parents=True)
    (root / "2026-02-01_00-00-00_linked").symlink_to(outside / "sweep")
    (root / "multirun" / "linked").symlink_to(outside / "sweep")
    (root / "multirun" / "2026-01-01_00" / "..x").mkdir()
    (root / "notes").mkdir()
    os.mkfifo(root / "2026-02-01_00-00-01_fifo")
    (root / "2026-02-01_00-00-02_file").write_text("{}")
    other = tmp_path / "other"  # a root whose multirun/ is a link out of it: its sweeps are not walked
    (other / "2026-03-01_00-00-00_a").mkdir(parents=True)
    (other / "multirun").symlink_to(outside / "multirun")
    for where in (root, other):
        entries = {entry.dir: entry for entry in read.scan(where)}
        paths = {str(p) for p in where.glob("*")} | {str(p) for p in where.glob("*/*/*")}
        paths |= {os.path.join(where, "multirun", "2026-01-01_00", ".."), os.path.join(where, "multirun")}
        for path in sorted(paths):
            assert read.entry_of(where, path) == entries.get(os.path.abspath(path)), path
        listed = read.read_all(where)
        for run in listed:
            assert read.find(where, Path(run.run_dir)).as_dict() == run.as_dict(), run.id
            assert read.resolve(where, run.id) == Path(run.run_dir), run.id
    sweeps = {run.group: [] for run in read.read_all(root) if run.group_kind == "sweep"}
    for run in read.read_all(root):
        sweeps.get(run.group, []).append(run.as_dict())
    for group, members in sweeps.items():
        assert [run.as_dict() for run in read.sweep(root, group)] == members
        assert [run.as_dict() for run in read.sweep(root, group.split("/", 1)[1])] == members
    assert read.sweep(root, "linked") == read.sweep(root, "..") == read.sweep(root, "") == []


def test_a_listing_of_submitted_runs_that_ended_imports_no_back_end(tmp_path):
    """Runs submitted to SLURM, Ray, Kubernetes and over SSH whose records have their end: nothing is
    asked, and no back end's module is imported (before: each was, for nothing: 20 ms of a listing)."""
    root = tmp_path / "runs"
    ids = {"slurm": "4242", "ray": "raysubmit_1", "k8s": "ppo-1", "ssh": "1"}  # (ids each back end takes)
    for index, (backend, id_) in enumerate(ids.items()):
        run = root / f"2026-01-01_10-0{index}-00_{backend}"
        _run_dir(run / "node0", "2026-01-01T10:00:00+00:00", "launcher:\n  topology: multinode\n")
        (run / "submit.json").write_text(json.dumps({"format": 2, "backend": backend, "id": id_}))
    modules = "import sys\nfrom launcher.__main__ import entry\ntry:\n    entry()\n"
    modules += "finally:\n    print(*sys.modules, file=sys.stderr)"  # every module imported, at the end
    argv = [sys.executable, "-c", modules, "runs", "--json", "--root", str(root)]
    env = clean_env(TRAIN_MULTIGPU_RUNS_CACHE="off")
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
    runs = json.loads(result.stdout)
    assert result.returncode == 0 and [(run["status"], run["problems"]) for run in runs] == [("success", [])] * 4
    assert sorted(run["remote"]["backend"] for run in runs) == sorted(ids)
    imported = set(result.stderr.split())
    backends = {"launcher.slurm.backend", "launcher.ray_submit.backend", "launcher.k8s.backend", "launcher.ssh.backend"}
    assert not backends & imported, sorted(backends & imported)


def test_a_tables_rows_are_escaped_with_one_look_each_where_nothing_needs_it(monkeypatch):
    """A row whose cells hold no control character (and no secret to mask) is looked at once, not
    cell by cell (before: nine calls of one_line per row, 10% of a 10,000-run table); a row that
    holds one is escaped cell by cell, as before."""
    from launcher import errors, secrets

    monkeypatch.setattr(secrets, "_given", set())  # no secret remembered by an earlier test in this process
    calls = []
    real = errors.one_line
    for module in (errors, show):
        monkeypatch.setattr(module, "one_line", lambda text: calls.append(text) or real(text))
    runs = [RunInfo(id=f"2026-01-01_10-00-{index:02d}_a", run_dir=f"/r/{index}") for index in range(50)]
    runs.append(RunInfo(id="2026-01-01_10-01-00_crlf\r\nname", run_dir="/r/crlf"))
    lines = show.listing_lines(runs)
    assert len(calls) == len(show.HEADER)  # the cells of the one row holding a line break
    assert "2026-01-01_10-01-00_crlf\\r\\nname" in lines[-1]
    times = [0.0, 1e9, 1767225600.5, -62135596800.0 + 86400 * 400]  # (the last: a year before 1000 here)
    for stamp in times:
        info = RunInfo(id="x", run_dir="/r/x", started="2026-01-01T00:00:00+00:00", start_time=stamp)
        assert show.started_text(info) == datetime.fromtimestamp(stamp).strftime("%Y-%m-%d %H:%M:%S")
