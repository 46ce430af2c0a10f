"""The listing's cache (launcher/runs/cache.py, docs/runs.md "Speed"): what ``runs`` read from an
ended run is used again only while every file and directory it was read from is unchanged; a
running launch is read every time; two listings at once, a cache that cannot be written and a cache
file that is not this user's (or not a cache) leave the listing as a fresh read makes it.

Real files, real processes: the running launch is a real process named by its record, the two
listings at once are real ``train_multigpu runs`` processes, the hostile cache file is a real FIFO.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import clean_env
from launcher import record
from launcher.runs import cache, read
from require import unavailable
from test_runs_records import STATUS, make_run

pytestmark = pytest.mark.timeout(240)


def fresh(root: Path) -> list[dict]:
    return [run.as_dict() for run in read.read_all(root)]


def cached(root: Path, where: Path) -> tuple[list[dict], cache.Cache]:
    """One listing through the cache in ``where`` (saved, as ``runs`` saves it)."""
    kept = cache.Cache(root, str(where))
    runs = read.read_all(root, kept.read)
    kept.save()
    return [run.as_dict() for run in runs], kept


def a_root(root: Path) -> None:
    """Finished, failed and swept runs, a submitted one with its two nodes' records, a half-written one."""
    make_run(root, "2026-01-01_10-00-00_a")
    make_run(root, "2026-01-01_10-01-00_b", status_json={**STATUS, "exit_code": 1, "reason": "rank failed"})
    make_run(root, "2026-01-01_10-02-00_c", metrics_csv="iteration,env_steps,mean_return\n1,512,5.0\n")
    for job in range(2):
        make_run(root / "multirun" / "2026-01-01_11-00-00", str(job), composition_json={"overrides": [f"seed={job}"]})
    submitted = root / "2026-01-01_12-00-00_job"
    submitted.mkdir(parents=True)
    (submitted / "submit.json").write_text(json.dumps({"format": 2, "backend": "slurm", "id": "4242"}))
    for node in range(2):
        make_run(submitted, f"node{node}")
    (submitted / "config.yaml").write_text("launcher:\n  topology: multinode\n")
    (root / "2026-01-01_13-00-00_half").mkdir()


def test_a_cached_listing_is_a_fresh_one_and_what_changed_is_read_again(tmp_path, monkeypatch):
    """Every run read again whose file changed in place, even keeping its size and its modification
    time (a stat of size and mtime alone would keep the old status); a run gone is gone."""
    monkeypatch.setattr(cache, "SETTLED_S", 0.0)  # these files were written a moment ago
    root, where = tmp_path / "runs", tmp_path / "cache"
    a_root(root)
    first, kept = cached(root, where)
    assert first == fresh(root) and kept.hits == 0
    second, kept = cached(root, where)
    assert second == first
    assert (kept.hits, kept.misses) == (len(first), 0)  # the half-written one too (no status.json: its files say)

    a = root / "2026-01-01_10-00-00_a"
    with open(a / "metrics.csv", "a") as handle:  # the trainer of a `runs resume` goes on in it
        handle.write("4,2048,99.5\n")
    b = root / "2026-01-01_10-01-00_b" / "status.json"
    before = b.stat()
    text = b.read_text()
    with open(b, "r+") as handle:  # same size, same modification time: only the change time tells
        handle.write(text.replace('"exit_code": 1', '"exit_code": 0').replace('"rank failed"', '"success"    '))
    os.utime(b, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (b.stat().st_size, b.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    for name in ("status.json", "config.yaml", "composition.json", "command.sh", "metrics.csv", "logs/rank0.log"):
        (root / "2026-01-01_10-02-00_c" / name).unlink(missing_ok=True)
    for path in sorted((root / "2026-01-01_10-02-00_c").rglob("*"), reverse=True):
        path.rmdir() if path.is_dir() else path.unlink()
    (root / "2026-01-01_10-02-00_c").rmdir()
    half = root / "2026-01-01_13-00-00_half"
    (half / "status.json").write_text(json.dumps(STATUS))  # its launcher wrote its record after all

    third, kept = cached(root, where)
    assert third == fresh(root)
    shown = {run["id"]: run for run in third}
    assert shown["2026-01-01_10-00-00_a"]["last_return"] == 99.5
    assert shown["2026-01-01_10-01-00_b"]["status"] == "success"
    assert "2026-01-01_10-02-00_c" not in shown
    assert shown["2026-01-01_13-00-00_half"]["status"] == "success"
    assert kept.misses == 3 and kept.hits == len(third) - 3  # a, b and the half-written one
    assert set(json.loads(Path(kept.path).read_text())["runs"]) == {r["id"] for r in third}


def test_a_running_launch_is_read_every_time(tmp_path, monkeypatch):
    """An open record whose launcher (a real process) is alive is running, never kept; when the
    process is gone it is lost at once; once its record ends, it is kept."""
    monkeypatch.setattr(cache, "SETTLED_S", 0.0)
    root, where = tmp_path / "runs", tmp_path / "cache"
    launcher = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        opened = {"started": STATUS["started"], "exit_code": None, "pid": launcher.pid}
        opened.update(pid_start=record.process_start(launcher.pid), host=read.HOST)
        run = make_run(root, "2026-01-01_10-00-00_live", status_json=opened)
        for _ in range(2):
            runs, kept = cached(root, where)
            assert [r["status"] for r in runs] == ["running"] and kept.hits == 0 and kept.new == {}
    finally:
        launcher.kill()
        launcher.wait()
    runs, kept = cached(root, where)
    assert [r["status"] for r in runs] == ["lost"] and kept.new == {}  # an open record: never kept
    (run / "status.json").write_text(json.dumps({**opened, "exit_code": 0, "reason": "success"}))
    runs, kept = cached(root, where)
    assert [r["status"] for r in runs] == ["success"] and kept.misses == 1
    runs, kept = cached(root, where)
    assert [r["status"] for r in runs] == ["success"] and kept.hits == 1


def test_a_record_written_a_moment_ago_is_not_kept(tmp_path):
    """A write in the same tick of the file system's clock as the read would leave the stat as it
    was: what changed in the last SETTLED_S is read again next time."""
    root, where = tmp_path / "runs", tmp_path / "cache"
    make_run(root, "2026-01-01_10-00-00_a")
    runs, kept = cached(root, where)
    assert runs == fresh(root) and kept.new == {} and not Path(kept.path).exists()


def _listing(root: Path, cache_dir: str, **popen) -> subprocess.Popen:
    env = clean_env(TRAIN_MULTIGPU_RUNS_CACHE=cache_dir)
    argv = [sys.executable, "-m", "launcher", "runs", "--json", "--root", str(root)]
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def _tree(root: Path) -> dict[str, tuple]:
    return {str(p): (p.stat().st_mtime_ns, p.stat().st_size) for p in root.rglob("*")}


def test_two_listings_at_once_and_a_cache_that_cannot_be_written(tmp_path):
    """Two real listings started together, each with the cache empty, then warm: each prints what a
    listing without the cache prints, one whole cache file is left (no temporary one), nothing is
    written into the run root; a cache directory that cannot be made is no error."""
    root = tmp_path / "runs"
    a_root(root)
    time.sleep(cache.SETTLED_S + 0.2)  # the records settle: kept
    tree = _tree(root)
    plain = _listing(root, "off").communicate(timeout=60)
    assert plain[1] == "" and json.loads(plain[0])
    where = tmp_path / "cache"
    for _ in range(2):  # cold, then warm
        both = [_listing(root, str(where)) for _ in range(2)]
        for proc in both:
            out, err = proc.communicate(timeout=60)
            assert (proc.returncode, out, err) == (0, plain[0], "")
        assert [p.name for p in where.iterdir()] == [os.path.basename(cache.Cache(root, str(where)).path)]
    assert len(cache.Cache(root, str(where)).old) == 7  # every run (the half-written one too: its files say)
    blocked = tmp_path / "a_file"
    blocked.write_text("")
    proc = _listing(root, str(blocked / "cache"))  # under a regular file: no directory can be made
    assert proc.communicate(timeout=60) == (plain[0], "") and proc.returncode == 0
    assert _tree(root) == tree


def test_a_cache_file_that_is_not_this_users_cache_is_not_read(tmp_path, monkeypatch):
    """Garbage, a cache of another code or root, another user's file: read as no cache (and
    replaced); a FIFO under the cache's name is not waited on."""
    monkeypatch.setattr(cache, "SETTLED_S", 0.0)
    root, where = tmp_path / "runs", tmp_path / "cache"
    a_root(root)
    expected, kept = cached(root, where)
    path = Path(kept.path)
    good = path.read_text()
    for garbage in ("{", "[]", '{"key": 1, "runs": {}}', good.replace('"runs":{', '"runs":{"x":[1],', 1)):
        path.write_text(garbage)
        runs, kept = cached(root, where)
        assert runs == expected
    path.write_text(good.replace(json.dumps(kept.root), json.dumps("/elsewhere")))
    runs, kept = cached(root, where)
    assert runs == expected and kept.hits == 0
    if os.geteuid() == 0:
        os.chown(path, 4242, 4242)
        runs, kept = cached(root, where)
        assert runs == expected and kept.hits == 0 and path.stat().st_uid == os.geteuid()  # replaced
    path.unlink()
    os.mkfifo(path)
    proc = _listing(root, str(where))
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and err == "" and len(json.loads(out)) == len(expected)


def test_runs_help_says_where_the_cache_is_and_how_to_turn_it_off(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "launcher", "runs", "--help"],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=60,
    )
    text = " ".join(result.stdout.split())
    assert result.returncode == 0 and f"{cache.VAR}=DIR or off" in text and "~/.cache/train_multigpu/runs" in text


def test_a_run_root_mounted_read_only_is_listed_and_its_cache_kept_elsewhere(tmp_path):
    """The run root bind-mounted read-only (a private mount namespace: even root cannot write it):
    the listing, cold then warm, prints what a listing without the cache prints, and its cache is
    written in the cache directory."""
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("mount") is None:
        unavailable("ROOT", "a read-only bind mount needs root, unshare and mount")
    root = tmp_path / "runs"
    a_root(root)
    time.sleep(cache.SETTLED_S + 0.2)
    plain = _listing(root, "off").communicate(timeout=60)[0]
    where = tmp_path / "cache"
    listing = f"{shlex.quote(sys.executable)} -m launcher runs --json --root {shlex.quote(str(root))}"
    script = (
        f"mount --bind {shlex.quote(str(root))} {shlex.quote(str(root))} && "
        f"mount -o remount,ro,bind {shlex.quote(str(root))} && "
        f"! touch {shlex.quote(str(root / 'written'))} 2>/dev/null && {listing} && echo --- && {listing}"
    )
    env = clean_env(TRAIN_MULTIGPU_RUNS_CACHE=str(where))
    result = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0 and result.stderr == "", result
    cold, warm = result.stdout.split("---\n")
    assert cold == warm == plain
    assert len(cache.Cache(root, str(where)).old) == 7 and not (root / "written").exists()
