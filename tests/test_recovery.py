"""Restarts by cause while progress is made, on one node (issue 20; launcher/run/attempts.py), with
real launches: the bundled trainer under torchrun and JAX (its fault injection,
TRAIN_MULTIGPU_EXAMPLE_CRASH, fires on the first attempt only), and small scripts of one's own for
the cases that need no training (a crash loop, an exception, Ctrl+C between attempts)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import clean_env
from supervise_util import launch
from supervise_util import run_dir as the_run

pytestmark = pytest.mark.timeout(400)

SMALL = ("launcher.nproc_per_node=2", "num_envs=4", "max_iterations=4", "device=cpu")
CRASH_RETRIED = ("restart.max=2", "restart.classes=[default,exit-code]")


def status(run_dir: Path) -> dict:
    return json.loads((run_dir / "status.json").read_text())


def iterations(run_dir: Path) -> list[int]:
    lines = (run_dir / "metrics.csv").read_text().splitlines()[1:]
    return [int(line.split(",")[0]) for line in lines]


def script(tmp: Path, text: str) -> str:
    path = tmp / "own.py"
    path.write_text(text)
    return f"script={path}"


@pytest.mark.parametrize("jax", [False, True], ids=["torch", "jax"])
def test_a_rank_that_crashes_once_is_restarted_from_its_checkpoint_and_the_run_completes(tmp_path, jax):
    """Also the goodput ledger of that launch (issue 27): a checkpoint every 2 iterations, rank 1
    exits after iteration 3, so the restart resumes from iteration 2 and does iteration 3 again."""
    topology = ("launcher=skrl_jax",) if jax else ()
    r = launch(
        tmp_path,
        *topology,
        *SMALL,
        *CRASH_RETRIED,
        "--",
        "--checkpoint_interval",
        "2",
        TRAIN_MULTIGPU_EXAMPLE_CRASH="3:1",
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    run_dir = the_run(tmp_path)
    assert iterations(run_dir) == [1, 2, 3, 4]  # every iteration once, in order (the redone one's row replaced)
    record = status(run_dir)
    first, second = record["attempts"]
    assert (first["attempt"], first["exit_code"] != 0, first["resumed_from"]) == (0, True, None)
    # rank 1's os._exit(3) is recorded by the worker wrapper: the cause, not rank 0's lost peer
    assert first["cause"] == "exit-code" and first["iterations"] == 3
    assert second["resumed_from"] == str(run_dir / "checkpoints" / "iter_000002.ckpt")
    assert not (run_dir / "checkpoints" / "iter_000001.ckpt").exists()  # --checkpoint_interval 2
    assert (second["exit_code"], second["iterations"], record["exit_code"]) == (0, 4, 0)
    assert (
        f"restart 1 of 2 after {first['cause']}, iteration 3 done; resuming from checkpoints/iter_000002.ckpt"
        in r.stdout
    )
    assert (run_dir / "attempt1" / "logs").is_dir() and (run_dir / "logs").is_dir()
    assert (
        "TRAIN_MULTIGPU_EXAMPLE_CRASH: rank 1 exits 3 after iteration 3" in (run_dir / "logs" / "rank1.log").read_text()
    )
    assert "iterations 3..4" in (run_dir / "attempt1" / "logs" / "rank0.log").read_text()
    ledger_agrees(record, r.stdout, redone=1)
    timeline_drawn(run_dir / "timeline.png", record)
    if not jax:  # runs: the attempts in the listing, a table in runs show, the latest attempt's log
        root = f"--root={tmp_path / 'runs'}"
        listing = launch(tmp_path, "runs", root).stdout
        assert "success, attempts 2 (1 restart)" in listing.splitlines()[1]
        shown = launch(tmp_path, "runs", "show", "last", root).stdout
        assert "attempts: 2 (1 restart)" in shown
        assert re.search(r"^  1 +\S+ \S+ +\S+ \S+ +0 +- +4 +\S*iter_000002\.ckpt +no failure$", shown, re.M), shown
        assert f"goodput:  {record['goodput']['line']}" in shown.splitlines()
        assert launch(tmp_path, "runs", "logs", "last", root).stdout.startswith("resuming from ")
        (listed,) = json.loads(launch(tmp_path, "runs", "--json", root).stdout)
        assert listed["goodput"] == record["goodput"]
        compared = json.loads(launch(tmp_path, "runs", "compare", "last", root, "--json", "--out", "c.png").stdout)
        assert compared["runs"][0]["goodput"]["line"] == record["goodput"]["line"]
    else:  # on demand, into a file of one's own
        drawn = launch(tmp_path, "runs", "timeline", "last", f"--root={tmp_path / 'runs'}", "--out", "t.png")
        assert drawn.returncode == 0 and drawn.stdout.splitlines()[0] == record["goodput"]["line"], drawn
        timeline_drawn(tmp_path / "t.png", record)


CATEGORIES = (
    "queue",
    "launcher_startup",
    "rank_startup",
    "first_iteration",
    "productive",
    "lost_work",
    "hang",
    "restart",
    "teardown",
)


def ledger_agrees(record: dict, stdout: str, redone: int) -> None:
    """The goodput ledger of a launch restarted once (docs/goodput.md): the parts add up to the wall
    time (from the launcher's start to the record's close), lost work is the iterations redone at
    the crashed attempt's seconds per iteration, start-up and restart are the recovery benchmark's
    split (benchmarks/recovery.py: the attempts' own times and the ranks' beats)."""
    led = record["goodput"]
    assert sum(led[c] for c in CATEGORIES) == pytest.approx(led["wall_s"], rel=0.01)
    began = record["launch_began"]
    first, second = record["phases"]
    closed = began + led["wall_s"]
    assert closed >= second["ended"] and record["duration_s"] <= led["wall_s"]
    assert (led["restarts"], led["iterations_redone"], led["ranks"]) == (1, redone, 2)
    assert led["rank_seconds"] == pytest.approx(2 * led["wall_s"], rel=0.01)
    # lost work: the iterations redone, at the seconds per iteration the crashed attempt beat at (from
    # its first beat when the read saw only one beat past it)
    since = (
        ("first_at", "first_iteration")
        if first.get("first_iteration", first["iteration"]) < first["iteration"]
        else ("ranks_up", "up_iteration")
    )
    # (a loaded machine's reads may see no beat between the start-up one and the crash's last one:
    # then no first_iteration mark, and the rate runs from the start-up beat)
    if first[since[1]] < first["iteration"]:
        per_iteration = (first["last_beat"] - first[since[0]]) / (first["iteration"] - first[since[1]])
        assert led["lost_work"] == pytest.approx(redone * per_iteration, abs=0.01)
    # the benchmark's split: the launcher's start-up ends where attempt 0 starts; its ranks are up at
    # their start-up beat (a beat past it first seen: at the observer's read before, up_after); the
    # restart runs from the crash (the last beat) to attempt 1's first iteration, done by its first
    # beat past the checkpoint's iteration
    assert led["launcher_startup"] == pytest.approx(first["started"] - began, abs=0.01)
    up = first["ranks_up"] if first["up_iteration"] == 0 else first["up_after"]
    assert led["rank_startup"] == pytest.approx(up - first["started"] if up else 0, abs=0.01)
    again = second["ranks_up"] if second["up_iteration"] == second["start_iteration"] else second["up_after"]
    done = second.get("first_at", second["ranks_up"])  # (a read that saw iteration 4 first: that beat)
    assert again - first["last_beat"] - 0.01 <= led["restart"] <= done - first["last_beat"] + 0.01
    assert led["teardown"] > 0 and led["productive"] > 0 and led["hang"] == 0
    assert f"[train_multigpu] {led['line']}" in stdout.splitlines()
    # (the line's whole percent is the productive share's; goodput_pct keeps one decimal: 1.46 is 1.5
    # there and 1% in the line, so the two are not compared)
    share = 100 * led["productive"] / led["wall_s"]
    assert led["line"].startswith(f"goodput {share:.0f}%: 1 restart cost ")
    assert led["goodput_pct"] == round(share, 1)
    assert f", {redone} iteration{'s' if redone != 1 else ''} redone, start-up " in led["line"]


def timeline_drawn(png: Path, record: dict) -> None:
    """The picture (launcher/timeline.py): a PNG of its size whose bars show, in their colours, every
    category that took a visible share of the time; what it drew is in its text chunk."""
    from matplotlib.image import imread

    from launcher import figures, timeline

    data = png.read_bytes()
    drawn = figures.described(data)
    (row,) = drawn["rows"]
    assert {s[2] for s in row["segments"]} >= {"launcher_startup", "rank_startup", "productive", "restart"}
    assert [m["kind"] for m in row["marks"]] == ["failure", "restart"] and row["marks"][0]["text"] == "exit-code"
    pixels = imread(png)
    assert pixels.shape[1] == 1000 and 200 <= pixels.shape[0] <= 400, pixels.shape  # 10 in. at 100 dpi
    rgb = (pixels[:, :, :3] * 255).round().astype(int)
    colours = {tuple(int(c[i : i + 2], 16) for i in (1, 3, 5)) for c in timeline.COLOURS.values()}
    seen = {tuple(p) for p in rgb.reshape(-1, 3)} & colours
    led = record["goodput"]
    for category in CATEGORIES:
        colour = tuple(int(timeline.COLOURS[category][i : i + 2], 16) for i in (1, 3, 5))
        bar = (rgb == colour).all(axis=2).sum()
        if led[category] / led["wall_s"] > 0.03:  # wide enough to fill pixels of its own (and the legend's)
            assert bar > 100, f"{category}: {bar} pixels of {timeline.COLOURS[category]}"
        elif led[category] == 0:
            assert bar == 0, f"{category} took no time, yet {bar} pixels are its colour"
    assert len(seen) >= 4


def test_a_rank_that_stalls_once_is_restarted_with_its_stacks_saved(tmp_path):
    r = launch(
        tmp_path,
        *SMALL,
        "restart.max=1",
        # small, yet longer than the trainer's silent tail (rank 0 evaluates and plots, rank 1 waits for it)
        "launcher.hang_timeout=15",
        TRAIN_MULTIGPU_EXAMPLE_CRASH="2:1:hang",
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    run_dir = the_run(tmp_path)
    first, second = status(run_dir)["attempts"]
    assert (first["exit_code"], first["cause"], first["outcome"]) == (124, "hang", "hang")
    assert second["exit_code"] == 0
    assert any((run_dir / "stacks").glob("*/summary.txt")), "attempt 0's stacks, where a launch keeps them"
    assert not (run_dir / "attempt1" / "stacks").exists()
    assert iterations(run_dir) == [1, 2, 3, 4]
    assert "restart 1 of 1 after hang, iteration 2 done" in r.stdout
    # the ledger's hang: the stalled rank's last beat to the watchdog's finding (launcher.hang_timeout
    # after its last sign of life, a line it printed after that beat; docs/goodput.md)
    led = status(run_dir)["goodput"]
    assert 15 - 1.5 <= led["hang"] <= 15 + 10 and led["iterations_redone"] == 0


def test_a_crash_loop_stops_after_the_no_progress_limit_with_the_scripts_exit_code(tmp_path):
    own = script(tmp_path, "import sys\nsys.exit(3)\n")
    start = time.monotonic()
    r = launch(tmp_path, own, "launcher.nproc_per_node=1", "restart.max=5", "restart.classes=[default,exit-code]")
    took = time.monotonic() - start
    assert r.returncode == 3, r.stdout[-3000:] + r.stderr[-3000:]
    record = status(the_run(tmp_path))
    assert (record["reason"], record["outcome"]) == ("no progress", "no_progress")
    assert [a["progress"] for a in record["attempts"]] == [False, False]  # one restart, then stop
    assert "stopped: no progress (restart.max_without_progress=1)" in r.stderr
    assert took < 90, f"a crash loop ends in seconds, took {took:.0f} s"


# beats iterations 1..3 and dies, on every attempt: no checkpoint, every attempt starts over
BEATS_THEN_DIES = """import os, sys, time
beat = os.environ["TRAIN_MULTIGPU_HEARTBEAT_FILE"]
for iteration in (1, 2, 3):
    with open(beat, "w") as f:
        f.write(f"{iteration} 10")
    time.sleep(0.05)
sys.exit(3)
"""


def test_a_crash_loop_that_starts_over_and_gets_no_further_makes_no_progress(tmp_path):
    """Issue 25 item 7: attempt 1 starts over (no checkpoint) and reaches iteration 3 as attempt 0
    did: no progress, although it passed 0 (the start it was measured against before)."""
    own = script(tmp_path, BEATS_THEN_DIES)
    r = launch(tmp_path, own, "launcher.nproc_per_node=1", "restart.max=6", "restart.classes=[default,exit-code]")
    assert r.returncode == 3, r.stdout[-3000:] + r.stderr[-3000:]
    record = status(the_run(tmp_path))
    assert (record["reason"], record["outcome"]) == ("no progress", "no_progress")
    assert [(a["iterations"], a["progress"]) for a in record["attempts"]] == [(3, True), (3, False)]
    assert "stopped: no progress (restart.max_without_progress=1)" in r.stderr


EXCEPTION_ON_FIRST = """import os
if os.environ["TRAIN_MULTIGPU_ATTEMPT"] == "0":
    raise ValueError("a bug in the first attempt")
print("attempt", os.environ["TRAIN_MULTIGPU_ATTEMPT"], "done")
"""


def test_a_python_exception_is_not_restarted_by_default(tmp_path):
    r = launch(tmp_path, script(tmp_path, EXCEPTION_ON_FIRST), "launcher.nproc_per_node=1", "restart.max=2")
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
    (only,) = status(the_run(tmp_path))["attempts"]
    assert (only["cause"], only["decision"]) == ("exception", "exception is not in restart.classes")
    assert "restart 1" not in r.stdout


def test_a_python_exception_is_restarted_when_opted_in(tmp_path):
    r = launch(
        tmp_path,
        script(tmp_path, EXCEPTION_ON_FIRST),
        "launcher.nproc_per_node=1",
        "restart.max=2",
        "restart.classes=[default,exception]",
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    run_dir = the_run(tmp_path)
    assert [a["exit_code"] for a in status(run_dir)["attempts"]] == [1, 0]
    assert "attempt 1 done" in (run_dir / "attempt1" / "logs" / "rank0.log").read_text()
    assert "restart 1 of 2 after exception before any iteration; starting over (no checkpoint)" in r.stdout


# JAX ranks (started by the launcher itself): rank 0 fails; rank 1 notes the launcher's SIGTERM (the
# failure was found: the attempt is being torn down) and ignores it, so the teardown lasts until SIGKILL
SLOW_TEARDOWN = """import os, signal, sys, time
if os.environ["JAX_RANK"] == "0":
    time.sleep(1)
    sys.exit(3)
signal.signal(signal.SIGTERM, lambda *_: open(os.environ["TEARDOWN_MARK"], "w").close())
time.sleep(60)
"""


def test_ctrl_c_during_a_restart_stops_at_once_and_no_attempt_starts(tmp_path):
    argv = [
        sys.executable,
        "-m",
        "launcher",
        f"run_root={tmp_path / 'runs'}",
        script(tmp_path, SLOW_TEARDOWN),
        "launcher=skrl_jax",
        "launcher.nproc_per_node=2",
        "restart.max=3",
        "restart.classes=[default,exit-code]",
    ]
    mark = tmp_path / "teardown"
    env = clean_env(TEARDOWN_MARK=str(mark))
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not mark.exists():
        assert proc.poll() is None
        time.sleep(0.02)
    sent = time.monotonic()
    os.kill(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    took = time.monotonic() - sent
    assert proc.returncode == 130, out.decode()[-2000:] + err.decode()[-2000:]
    assert took < 5, f"stopped {took:.1f} s after Ctrl+C"
    run_dir = the_run(tmp_path)
    assert not (run_dir / "attempt1").exists(), "no attempt starts after Ctrl+C"
    record = status(run_dir)
    assert (record["reason"], record["outcome"]) == ("stopped by SIGINT", "interrupted")
    assert [a["decision"] for a in record["attempts"]] == ["stopped by SIGINT before the restart"]
    assert b"restart 1" not in out


TWO_ATTEMPTS = """import os, pathlib, sys, time
attempt, gate = os.environ["TRAIN_MULTIGPU_ATTEMPT"], pathlib.Path(sys.argv[1])
print(f"attempt {attempt} line", flush=True)
if attempt == "0":
    (gate / "ready").touch()
    while not (gate / "go").exists():
        time.sleep(0.05)
    print("attempt 0 last line", flush=True)
    sys.exit(3)
while not (gate / "until").exists():
    time.sleep(0.05)
print("attempt 1 done", flush=True)
"""


def test_runs_logs_follow_goes_on_into_the_next_attempt(tmp_path):
    """``runs logs --follow`` started during attempt 0 prints the rest of attempt 0's log, then
    attempt 1's as it is written, and ends with the launch."""
    from test_runs import Lines

    argv = [sys.executable, "-m", "launcher", f"run_root={tmp_path / 'runs'}", script(tmp_path, TWO_ATTEMPTS)]
    argv += ["launcher.nproc_per_node=1", *CRASH_RETRIED, "--", str(tmp_path)]
    proc = subprocess.Popen(argv, cwd=tmp_path, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    follow = None
    try:
        wait = time.monotonic() + 120
        while not (tmp_path / "ready").exists():
            assert proc.poll() is None and time.monotonic() < wait, proc.stdout.read().decode()[-3000:]
            time.sleep(0.05)
        root = f"--root={tmp_path / 'runs'}"
        follow = subprocess.Popen(
            [sys.executable, "-m", "launcher", "runs", "logs", the_run(tmp_path).name, root, "--follow"],
            cwd=tmp_path,
            env=clean_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        lines = Lines(follow.stdout)

        def until(count: int, what: str) -> None:
            end = time.monotonic() + 60
            while len(lines.lines) < count:
                assert time.monotonic() < end, f"{what}: {lines.lines}"
                time.sleep(0.05)

        until(1, "attempt 0's first line")
        (tmp_path / "go").touch()  # attempt 0 ends (exit 3, restarted)
        until(3, "attempt 1's first line, through follow")
        (tmp_path / "until").touch()
        assert proc.wait(timeout=120) == 0, proc.stdout.read().decode()[-3000:]
        assert follow.wait(timeout=30) == 0
        lines.thread.join(timeout=10)
        assert lines.lines == ["attempt 0 line", "attempt 0 last line", "attempt 1 line", "attempt 1 done"]
        the_log = the_run(tmp_path) / "attempt1" / "logs" / "rank0.log"
        assert follow.stderr.read() == f"[train_multigpu] rank 0: the next attempt's log {the_log}\n"
    finally:
        for p in (proc, follow):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait(10)


# attempt 0 fills the disk the run directory is on, then dies of SIGKILL (as the OOM killer, or an
# operator, ends it); a restarted attempt frees the space and succeeds
FILLS_THE_DISK = """import os, signal
ballast = os.path.join(os.environ["TRAIN_MULTIGPU_RUN_DIR"], "ballast")
if os.environ.get("TRAIN_MULTIGPU_ATTEMPT", "0") != "0":
    os.unlink(ballast)
    raise SystemExit(0)
print("filling the disk", flush=True)
with open(ballast, "ab") as f:
    try:
        while True:
            f.write(b"x" * 65536)
            f.flush()
    except OSError as err:
        print("full:", err, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.fixture
def small_disk(tmp_path):
    """A real 3 MB tmpfs (root only) as the run root's disk."""
    from require import unavailable

    if os.geteuid() != 0:
        unavailable("ROOT", "mounting a small tmpfs needs root")
    where = tmp_path / "runs"
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=True)


@pytest.mark.parametrize("restart_max", [0, 1])
def test_a_full_disk_keeps_the_ranks_exit_code_and_closes_the_record(tmp_path, small_disk, restart_max):
    """Issue 25 item 8: the rank fills the run root's disk and dies of SIGKILL: exit 137 (the rank's),
    status.json closed with it, no temporary file left, one line saying the disk is full, no traceback."""
    own = script(tmp_path, FILLS_THE_DISK)
    r = launch(tmp_path, own, "launcher.nproc_per_node=1", f"restart.max={restart_max}", timeout=120)
    assert r.returncode == (0 if restart_max else 137), r.stdout[-3000:] + r.stderr[-3000:]
    assert "Traceback" not in r.stderr and "Exception in thread" not in r.stderr, r.stderr[-3000:]
    assert r.stderr.count("the disk is full") == 1, r.stderr[-3000:]
    run_dir = the_run(tmp_path)
    record = status(run_dir)
    if restart_max:  # attempt 0's end could not be written while it ran: the close writes every attempt
        assert [(a["exit_code"], a["cause"]) for a in record["attempts"]] == [(137, "killed"), (0, None)]
        assert (record["exit_code"], record["outcome"]) == (0, "succeeded")
    else:  # the close, in the space the launcher held for it
        assert (record["exit_code"], record["outcome"]) == (137, "failed")
        assert record["failure"]["signal"] == "SIGKILL"
    assert not [p for p in run_dir.rglob("*.tmp")], "a temporary file left behind"


def test_a_restarted_attempt_that_gets_further_and_fails_again_is_restarted_again(tmp_path):
    """Issue 25 (tests that do not guard): attempt 0 fails after iteration 2, attempt 1 resumes from
    its checkpoint, gets further (iteration 3) and fails again: progress, so it is restarted again
    (with restart.max_without_progress=1 a progress that counted for nothing would stop here)."""
    r = launch(
        tmp_path,
        *SMALL,
        "restart.max=3",
        "restart.classes=[default,exit-code]",
        TRAIN_MULTIGPU_EXAMPLE_CRASH="2:1:always,3:1:always",
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    run_dir = the_run(tmp_path)
    attempts = status(run_dir)["attempts"]
    assert [(a["exit_code"], a["iterations"], a["progress"]) for a in attempts] == [
        (3, 2, True),
        (3, 3, True),
        (0, 4, True),
    ]
    assert attempts[1]["decision"] == "exit-code is retried"
    assert "restart 2 of 3 after exit-code, iteration 3 done; resuming from checkpoints/iter_000003.ckpt" in r.stdout
    assert "rank 1 exits 3 after iteration 3" in (run_dir / "attempt1" / "logs" / "rank1.log").read_text()
    assert iterations(run_dir) == [1, 2, 3, 4]


# Isaac Lab's train.py as far as a restart sees it (it writes no heartbeats): it logs where its run
# folder is, writes one more model_<N>.pt per attempt and fails, twice
ISAACLAB_NO_BEATS = """import os, pathlib, sys
root = os.path.abspath("logs/rsl_rl/cartpole")
print(f"[INFO] Logging experiment in directory: {root}", flush=True)
print("Exact experiment name requested from command line: 2025-01-01_10-00-00", flush=True)
run = pathlib.Path(root, "2025-01-01_10-00-00")
run.mkdir(parents=True, exist_ok=True)
attempt = int(os.environ["TRAIN_MULTIGPU_ATTEMPT"])
print("ARGV", sys.argv[1:], flush=True)
(run / f"model_{attempt + 1}.pt").write_bytes(b"weights")
sys.exit(3 if attempt < 2 else 0)
"""


def test_a_new_checkpoint_alone_is_progress(tmp_path, isaaclab):
    """Issue 25: Isaac Lab's scripts write no heartbeats; their only progress is a new checkpoint.
    Each attempt writes one more and fails: every restart made progress, the third attempt ends it."""
    (isaaclab / "scripts" / "reinforcement_learning" / "train.py").write_text(ISAACLAB_NO_BEATS)
    r = launch(
        tmp_path,
        "--num_gpus",
        "1",
        "--task=Isaac-Cartpole-v0",
        "device=cpu",
        "restart.max=3",
        "restart.classes=[default,exit-code]",
        ISAACLAB_PATH=str(isaaclab),
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    run_dir = the_run(tmp_path)
    attempts = status(run_dir)["attempts"]
    assert [(a["exit_code"], a["iterations"], a["resumed_from"], a["progress"]) for a in attempts] == [
        (3, None, None, True),
        (3, None, "model_1.pt", True),
        (0, None, "model_2.pt", True),
    ]
    assert "'--checkpoint', 'model_2.pt'" in (run_dir / "attempt2" / "logs" / "rank0.log").read_text()


# every attempt: the rank records its pid and a grandchild's (a process of its own session), the
# attempt's start, and what it finds of the attempt before it; attempt 0 fails, attempt 1 waits for the test
PIDS = """import json, os, pathlib, subprocess, sys, time
gate = pathlib.Path(sys.argv[1])
attempt = int(os.environ["TRAIN_MULTIGPU_ATTEMPT"])
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
def alive(pid):
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"
before = json.loads((gate / "attempt0.json").read_text()) if attempt else {}
found = {name: alive(pid) for name, pid in before.items()}
(gate / f"attempt{attempt}.json").write_text(json.dumps({"rank": os.getpid(), "grandchild": child.pid}))
(gate / f"found{attempt}.json").write_text(json.dumps(found))
if attempt == 0:
    time.sleep(0.5)
    sys.exit(3)
while not (gate / "go").exists():
    time.sleep(0.05)
"""


def test_attempt_0_is_gone_before_attempt_1_starts_and_status_shows_the_attempts_meanwhile(tmp_path):
    """Issue 25: at attempt 1's start attempt 0's rank and its grandchild (a session of its own) are
    dead; status.json's attempts, read while attempt 1 runs, hold attempt 0's end (the per-attempt write)."""
    gate = tmp_path / "gate"
    gate.mkdir()
    argv = [sys.executable, "-m", "launcher", f"run_root={tmp_path / 'runs'}", script(tmp_path, PIDS)]
    argv += ["launcher.nproc_per_node=1", *CRASH_RETRIED, "--", str(gate)]
    proc = subprocess.Popen(argv, cwd=tmp_path, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while not (gate / "found1.json").exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read().decode()[-3000:]
            time.sleep(0.05)
        assert json.loads((gate / "found1.json").read_text()) == {"rank": False, "grandchild": False}
        running = status(the_run(tmp_path))
        assert running["exit_code"] is None
        (only,) = running["attempts"]
        assert (only["attempt"], only["exit_code"], only["cause"], only["decision"]) == (
            0,
            3,
            "exit-code",
            "exit-code is retried",
        )
        (gate / "go").touch()
        assert proc.wait(timeout=120) == 0, proc.stdout.read().decode()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


# torchrun's ranks: rank 1 dies of SIGKILL on attempt 0 (no exit record: only torchrun's report, after
# its teardown, names it); rank 0 ignores the SIGTERM torchrun then sends, so that teardown lasts
# torchrun's shutdown timeout. Attempt 1 ends at once.
KILLED_AND_DEAF = """import os, pathlib, signal, sys, time
gate = pathlib.Path(sys.argv[1])
if os.environ["TRAIN_MULTIGPU_ATTEMPT"] != "0":
    sys.exit(0)
if os.environ["RANK"] == "1":
    time.sleep(1)
    (gate / "killed").write_text(repr(time.time()))
    os.kill(os.getpid(), signal.SIGKILL)
signal.signal(signal.SIGTERM, lambda *_: (gate / "sigterm").touch())
time.sleep(300)
"""


def test_torchruns_teardown_after_a_failure_takes_the_grace_period(tmp_path):
    """Issue 25 item 9: torchrun waited its own 30 s (not launcher.grace_period) for a rank that
    ignores SIGTERM before it reported the failure: the restart came 31-32 s after the failure."""
    gate = tmp_path / "gate"
    gate.mkdir()
    r = launch(
        tmp_path,
        script(tmp_path, KILLED_AND_DEAF),
        "launcher.nproc_per_node=2",
        "launcher.grace_period=3",
        "restart.max=1",
        "--",
        str(gate),
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    first, _ = status(the_run(tmp_path))["attempts"]
    assert first["cause"] == "killed"
    torn_down = first["timing"]["ended"] - float((gate / "killed").read_text())
    assert torn_down < 3 + 12, f"attempt 0 ended {torn_down:.1f} s after its rank was killed"


def test_ctrl_c_while_torchrun_tears_a_failed_attempt_down_keeps_the_failure(tmp_path):
    """Issue 25 item 9: a Ctrl+C while torchrun tears down after a rank it has not reported yet
    (SIGKILL: no exit record) lost the failure (failure null, decision "no failure"). Now the ranks
    are killed, torchrun reports, the attempt keeps its failure, the launch ends as the user asked."""
    gate = tmp_path / "gate"
    gate.mkdir()
    argv = [sys.executable, "-m", "launcher", f"run_root={tmp_path / 'runs'}", script(tmp_path, KILLED_AND_DEAF)]
    argv += ["launcher.nproc_per_node=2", "restart.max=2", "--", str(gate)]
    proc = subprocess.Popen(argv, cwd=tmp_path, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not (gate / "sigterm").exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        torchrun_log = the_run(tmp_path) / "logs" / "torchrun.log"
        while b"closing signal SIGTERM" not in torchrun_log.read_bytes():  # the launcher has read it
            assert time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(0.3)
        sent = time.monotonic()
        os.kill(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 130, out.decode()[-2000:] + err.decode()[-2000:]
    assert took < 15, f"stopped {took:.1f} s after Ctrl+C"
    run_dir = the_run(tmp_path)
    assert not (run_dir / "attempt1").exists()
    record = status(run_dir)
    assert (record["reason"], record["outcome"]) == ("stopped by SIGINT", "interrupted")
    assert (record["failure"]["rank"], record["failure"]["signal"]) == (1, "SIGKILL")
    (only,) = record["attempts"]
    assert (only["cause"], only["decision"]) == ("killed", "stopped by SIGINT before the restart")


# prints, waits until its reader is gone, prints again
AFTER_THE_READER = """import pathlib, sys, time
gate = pathlib.Path(sys.argv[1])
print("first line", flush=True)
while not (gate / "closed").exists():
    time.sleep(0.05)
for n in range(2000):
    print("line", n, "of the launch, after its reader went away", flush=True)
(gate / "trained").touch()
"""


def test_a_launch_whose_console_reader_goes_away_ends_with_its_own_exit_code(tmp_path):
    """Issue 25 (low): `train_multigpu ... | head` exited 1 though status.json said success. A real
    pipe closed early: the launch trains on, writes nothing more to stdout and exits with its code."""
    gate = tmp_path / "gate"
    gate.mkdir()
    argv = [sys.executable, "-m", "launcher", f"run_root={tmp_path / 'runs'}", script(tmp_path, AFTER_THE_READER)]
    argv += ["launcher.nproc_per_node=1", "--", str(gate)]
    proc = subprocess.Popen(argv, cwd=tmp_path, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        seen = b""
        while b"first line" not in seen:
            line = proc.stdout.readline()
            assert line, proc.stderr.read().decode()[-3000:]
            seen += line
        proc.stdout.close()  # the reader goes away (head has read its lines)
        (gate / "closed").touch()
        err = proc.stderr.read().decode()
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert code == 0, err[-3000:]
    assert "Traceback" not in err and "BrokenPipeError" not in err, err[-3000:]
    assert (gate / "trained").exists()
    assert status(the_run(tmp_path))["exit_code"] == 0
