"""One observer of the ranks' files (launcher/run/monitor/observer.py): each beat file is read once
per tick, and the hang watchdog and the straggler detection judge the same snapshot. Real files in a
real log directory; the monitors are the supervisor's own classes, called as its loop calls them;
and the real launcher under strace."""

from __future__ import annotations

import datetime
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.config.schema import Topology
from launcher.plan import LaunchPlan, ProcessSpec
from launcher.run.monitor.observer import POLL_S, Observer
from launcher.run.monitor.progress import ProgressMonitor
from launcher.run.monitor.stragglers import StragglerMonitor
from require import unavailable
from supervise_util import REPO, env

RANKS = 4


def plan(**keys) -> LaunchPlan:
    return LaunchPlan(
        topology=Topology.single_node,
        profile="examples",
        device="cpu",
        backend="gloo",
        nproc_per_node=RANKS,
        nnodes="1",
        node_rank=0,
        script="train.py",
        env={},
        processes=(ProcessSpec("torchrun", ("torchrun",)),),
        grace_period=30.0,
        log_all_ranks=False,
        rank_logs=True,
        **keys,
    )


def beat(log_dir: Path, rank: int, iteration: int, at: float) -> None:
    path = log_dir / f"rank{rank}.beat"
    path.write_text(f"{iteration} 100")
    os.utime(path, (at, at))


def test_each_beat_file_is_read_once_per_tick_and_both_policies_judge_the_same_snapshot(tmp_path):
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    for rank in range(RANKS):
        (log_dir / f"rank{rank}.log").write_text("started\n")
        beat(log_dir, rank, 1, 1000.0)
    launch = plan(hang_timeout=900.0, startup_timeout=1800.0, straggler_factor=2.0)
    observer = Observer(log_dir)
    said: list[str] = []
    stragglers = StragglerMonitor(launch, log_dir, said.append, observer)
    progress = ProgressMonitor(launch, log_dir, dict, said.append, stragglers.record, observer=observer)

    for tick in range(1, 7):  # rank 3 takes 1 s per iteration, the others 0.1 s
        for rank in range(RANKS):
            beat(log_dir, rank, 1 + tick, 1000.0 + tick * (1.0 if rank == 3 else 0.1))
        observer.next_tick = 0.0  # a second has passed
        for _ in range(3):  # the supervisor's loop calls every monitor every 50 ms
            assert progress.check([None]) is None and stragglers.check([None]) is None
        assert observer.reads == {rank: tick for rank in range(RANKS)}
        assert progress.seen is stragglers.seen is observer.snapshot and observer.snapshot.tick == tick

    seen = observer.snapshot.ranks
    assert [seen[rank].iteration for rank in range(RANKS)] == [7] * RANKS
    assert seen[0].iter_per_s == 10.0 and seen[3].iter_per_s == 1.0  # progress.json's rate: the last interval
    assert round(seen[0].iteration_s, 6) == 0.1 and round(seen[3].iteration_s, 6) == 1.0  # the stragglers' measure
    assert progress.ranks[0].iter_per_s == 10.0 and progress.ranks[3].iteration == 7
    assert [entry["rank"] for entry in stragglers.record()] == [3]
    (line,) = said
    assert line.startswith("straggler on node 0: rank 3 takes 1 s per iteration, the other ranks' median 0.1 s")


def test_the_rate_starts_afresh_after_a_restart_and_a_stale_beat_is_ignored(tmp_path):
    observer = Observer(tmp_path)
    for i in range(5):
        beat(tmp_path, 0, i, 2000.0 + i * 0.5)
        observer.read()
    (seen,) = observer.snapshot.ranks.values()
    assert (seen.iteration, seen.iter_per_s, seen.iteration_s, seen.last_beat) == (4, 2.0, 0.5, 2002.0)
    beat(tmp_path, 0, 9, 2001.0)  # older than the last beat: not a beat
    observer.read()
    assert observer.snapshot.ranks[0].iteration == 4
    beat(tmp_path, 0, 1, 2010.0)  # started again: measured afresh, the last rate kept
    observer.read()
    seen = observer.snapshot.ranks[0]
    assert (seen.iteration, seen.iter_per_s, seen.iteration_s) == (1, 2.0, None)
    assert observer.snapshot.tick == 7 and observer.reads == {0: 7}


def test_with_every_policy_off_no_file_is_looked_at(tmp_path):
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    beat(log_dir, 0, 1, 1000.0)
    observer = Observer(log_dir)
    launch = plan(hang_timeout=None, startup_timeout=None, straggler_factor=None)
    stragglers = StragglerMonitor(launch, log_dir, print, observer)
    progress = ProgressMonitor(launch, log_dir, dict, print, stragglers.record, observer=observer)
    assert progress.check([None]) is None and stragglers.check([None]) is None
    assert observer.snapshot.tick == 0 and not observer.reads
    progress.close()
    assert not (log_dir / "progress.json").exists()


@pytest.mark.timeout(120)
def test_the_real_launcher_reads_each_beat_file_once_a_second(tmp_path):
    """Two JAX ranks beat every 50 ms for 6 s with the hang watchdog and the straggler detection both
    on (the defaults); strace shows the launcher's main thread reading each beat file at most once
    per POLL_S (before the observer: twice, once per monitor), and once more at the end."""
    strace = shutil.which("strace")
    if strace is None:
        unavailable("STRACE", "strace is not installed: the launcher's reads cannot be counted")
    trace = tmp_path / "trace"
    worker = REPO / "tests" / "workers" / "causes_worker.py"
    argv = [strace, "-e", "trace=openat", "-tt", "-o", str(trace), sys.executable, "-m", "launcher"]
    argv += ["device=cpu", f"run_root={tmp_path / 'runs'}", "launcher=skrl_jax", "launcher.nproc_per_node=2"]
    argv += [f"script={worker}", "--", "--mode", "beat", "--seconds", "6", "--dt", "0.05", "--slow_dt", "0.05"]
    done = subprocess.run(argv, cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=100)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = trace.read_text().splitlines()
    for rank in (0, 1):  # the launcher opens a beat file O_NONBLOCK to read it (the rank writes it)
        reads = [line for line in lines if f"rank{rank}.beat" in line and "O_NONBLOCK" in line]
        times = [datetime.datetime.strptime(line.split(" ", 1)[0], "%H:%M:%S.%f") for line in reads]
        assert len(times) >= 3, reads
        # while the launch runs; the last read is the attempt's end (the goodput ledger's last beat,
        # Supervisor.beat_marks), out of turn once
        running = times[:-1]
        span = (running[-1] - running[0]).total_seconds()
        assert len(running) <= span / POLL_S + 1, f"{len(running)} reads of rank{rank}.beat in {span:.1f} s"
