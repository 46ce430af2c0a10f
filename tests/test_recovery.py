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

pytestmark = pytest.mark.timeout(400)

SMALL = ("launcher.nproc_per_node=2", "num_envs=4", "max_iterations=4", "device=cpu")
CRASH_RETRIED = ("restart.max=2", "restart.classes=[default,exit-code]")


def launch(tmp: Path, *args: str, timeout: float = 300, **env: str) -> subprocess.CompletedProcess:
    root = [] if args[:1] == ("runs",) else [f"run_root={tmp / 'runs'}"]
    return subprocess.run(
        [sys.executable, "-m", "launcher", *root, *args],
        cwd=tmp,
        env=clean_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def the_run(tmp: Path) -> Path:
    (run_dir,) = (tmp / "runs").iterdir()
    return run_dir


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
    topology = ("launcher=skrl_jax",) if jax else ()
    r = launch(tmp_path, *topology, *SMALL, *CRASH_RETRIED, TRAIN_MULTIGPU_EXAMPLE_CRASH="2:1")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    run_dir = the_run(tmp_path)
    assert iterations(run_dir) == [1, 2, 3, 4]  # every iteration once, in order
    record = status(run_dir)
    first, second = record["attempts"]
    assert (first["attempt"], first["exit_code"] != 0, first["resumed_from"]) == (0, True, None)
    # rank 1's os._exit(3) is recorded by the worker wrapper: the cause, not rank 0's lost peer
    assert first["cause"] == "exit-code" and first["iterations"] == 2
    assert second["resumed_from"] == str(run_dir / "checkpoints" / "iter_000002.ckpt")
    assert (second["exit_code"], second["iterations"], record["exit_code"]) == (0, 4, 0)
    assert (
        f"restart 1 of 2 after {first['cause']} at iteration 2; resuming from checkpoints/iter_000002.ckpt" in r.stdout
    )
    assert (run_dir / "attempt1" / "logs").is_dir() and (run_dir / "logs").is_dir()
    assert (
        "TRAIN_MULTIGPU_EXAMPLE_CRASH: rank 1 exits 3 after iteration 2" in (run_dir / "logs" / "rank1.log").read_text()
    )
    assert "iterations 3..4" in (run_dir / "attempt1" / "logs" / "rank0.log").read_text()
    if not jax:  # runs: the attempts in the listing, a table in runs show, the latest attempt's log
        root = f"--root={tmp_path / 'runs'}"
        listing = launch(tmp_path, "runs", root).stdout
        assert "success, attempts 2 (1 restart)" in listing.splitlines()[1]
        shown = launch(tmp_path, "runs", "show", "last", root).stdout
        assert "attempts: 2 (1 restart)" in shown
        assert re.search(r"^  1 +\S+ \S+ +\S+ \S+ +0 +- +4 +\S*iter_000002\.ckpt +no failure$", shown, re.M), shown
        assert launch(tmp_path, "runs", "logs", "last", root).stdout.startswith("resuming from ")


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
    assert "restart 1 of 1 after hang at iteration 2" in r.stdout


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
    assert [a["decision"] for a in record["attempts"]] == ["stopped by a signal before the restart"]
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
