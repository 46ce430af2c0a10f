"""The supervisor with real processes: normal end, failed ranks, signals, a SIGKILLed launcher.

Every test counts survivors: each rank of tests/workers/spawner.py leaves two helpers behind (one
in its own session, one double-forked) that ignore SIGINT/SIGTERM/SIGHUP; none may outlive the
launch.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from supervise_util import finish, run_dir, spawner, status, survivors, wait_for_files

RANK_AND_HELPERS = 3  # rank<R>.pid + two helpers per rank


@pytest.mark.timeout(60)
@pytest.mark.parametrize("jax", [False, True], ids=["torchrun", "jax"])
def test_normal_end_leaves_no_descendants_and_splits_logs(tmp_path, jax):
    proc, pids = spawner(tmp_path, jax=jax, args=("--mode", "ok"))
    code, out, err = finish(proc)
    assert code == 0, err
    wait_for_files(pids, 2 * RANK_AND_HELPERS, timeout=1)
    assert survivors(pids) == []
    logs = run_dir(tmp_path) / "logs"
    assert "rank 1 done" in (logs / "rank1.log").read_text()
    assert "rank 0 done" in (logs / "rank0.log").read_text()
    # the console shows global rank 0 only
    assert "rank 0 done" in out and "rank 1 done" not in out
    assert status(tmp_path)["exit_code"] == 0 and status(tmp_path)["reason"] == "success"
    assert status(tmp_path)["outcome"] == "succeeded"


@pytest.mark.timeout(60)
def test_log_all_ranks_prefixes_node_and_rank(tmp_path):
    proc, _ = spawner(tmp_path, "log_all_ranks=true", jax=True, args=("--mode", "ok"))
    code, out, err = finish(proc)
    assert code == 0, err
    assert "[0:0] rank 0 done" in out and "[0:1] rank 1 done" in out


@pytest.mark.timeout(60)
@pytest.mark.parametrize("jax", [False, True], ids=["torchrun", "jax"])
def test_failed_rank_ends_launch_fast_with_its_exit_code(tmp_path, jax):
    proc, pids = spawner(tmp_path, jax=jax, args=("--fail", "1:7"))
    wait_for_files(pids, 1, "failed.time")
    failed_at = float((pids / "failed.time").read_text())
    code, out, err = finish(proc)
    ended = time.time()
    assert code == 7, err
    # the other rank and every helper gone; the launcher out within 2 s of the failure (+ slack
    # for a loaded 2-core machine)
    assert survivors(pids, settle=0) == []
    assert ended - failed_at < 3.0, ended - failed_at
    assert "FAILED: node 0, rank 1 (local rank 1): exit code 7" in err
    assert "rank 1 failing with 7" in err  # the last lines of that rank's log
    assert "/logs/rank1.log" in err
    record = status(tmp_path)
    assert record["exit_code"] == 7 and record["reason"] == "rank failed" and record["outcome"] == "failed"
    assert record["failure"]["rank"] == 1 and record["failure"]["exit_code"] == 7
    assert record["failure"]["summary"].startswith("FAILED: node 0, rank 1 (local rank 1): exit code 7\n")


@pytest.mark.timeout(60)
def test_traceback_of_a_failed_torchrun_rank_is_kept(tmp_path):
    proc, pids = spawner(tmp_path, args=("--raise", "1"))
    code, out, err = finish(proc)
    assert code == 1
    assert "FAILED: node 0, rank 1 (local rank 1): exit code 1" in err
    assert "error: ValueError: boom from rank 1" in err
    assert 'raise ValueError(f"boom from rank {rank}")' in err  # traceback lines from the rank's log
    # torch elastic's error file was written too: torchrun's own report carries the traceback
    assert "boom from rank 1" in (run_dir(tmp_path) / "logs" / "torchrun.log").read_text()
    assert survivors(pids) == []


@pytest.mark.timeout(60)
def test_rank_killed_by_signal_is_named_from_torchruns_report(tmp_path):
    proc, pids = spawner(tmp_path, args=("--kill", "1"))
    code, out, err = finish(proc)
    assert code == 137, err
    assert "FAILED: node 0, rank 1 (local rank 1): exit code 137 (SIGKILL)" in err
    assert survivors(pids) == []


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "signum, code, jax",
    [
        (signal.SIGINT, 130, False),
        (signal.SIGTERM, 143, True),
        (signal.SIGHUP, 129, True),
        (signal.SIGTERM, 143, False),
    ],
    ids=["SIGINT-torchrun", "SIGTERM-jax", "SIGHUP-jax", "SIGTERM-torchrun"],
)
def test_signal_stops_everything_with_128_plus_n(tmp_path, signum, code, jax):
    proc, pids = spawner(tmp_path, jax=jax)
    wait_for_files(pids, 2 * RANK_AND_HELPERS)
    proc.send_signal(signum)
    returncode, out, err = finish(proc, timeout=20)
    assert returncode == code, err
    assert survivors(pids, settle=0) == []
    assert status(tmp_path)["reason"] == f"stopped by {signal.Signals(signum).name}"
    assert status(tmp_path)["outcome"] == "interrupted"


def _torchrun_of(launcher_pid: int) -> int:
    """The pid of the launcher's torchrun (its child running torch.distributed.run)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                ppid = int(stat.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                argv = cmdline.read()
        except OSError:
            continue
        if ppid == launcher_pid and b"torch.distributed.run" in argv:
            return int(entry)
    raise AssertionError(f"no torchrun under {launcher_pid}")


@pytest.mark.timeout(60)
def test_a_schedulers_sigterm_that_reaches_torchrun_first_is_a_stop_not_a_failure(tmp_path):
    """SLURM's requeue or scancel sends SIGTERM to every process of the step: torchrun may die of it
    (exit 1) and be seen dead before the launcher's own SIGTERM arrives. That is a stop: exit 143,
    the ranks get their grace period, not 'torchrun failed' with the ranks killed at once."""
    proc, pids = spawner(tmp_path)
    wait_for_files(pids, 2 * RANK_AND_HELPERS)
    torchrun = _torchrun_of(proc.pid)
    os.kill(torchrun, signal.SIGTERM)
    deadline = time.monotonic() + 20
    while os.path.exists(f"/proc/{torchrun}") and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.5)  # the launcher's poll has seen torchrun's exit (a failure of torchrun's own)
    proc.send_signal(signal.SIGTERM)
    returncode, out, err = finish(proc, timeout=40)
    assert returncode == 143, err
    assert status(tmp_path)["reason"] == "stopped by SIGTERM"
    assert status(tmp_path)["outcome"] == "interrupted"
    assert survivors(pids, settle=0) == []


@pytest.mark.timeout(60)
@pytest.mark.parametrize("jax", [False, True], ids=["torchrun", "jax"])
def test_ranks_that_ignore_signals_get_sigkill_after_the_grace_period(tmp_path, jax):
    proc, pids = spawner(tmp_path, "launcher.grace_period=1.5", jax=jax, args=("--ignore_signals",))
    wait_for_files(pids, 2 * RANK_AND_HELPERS)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    code, out, err = finish(proc, timeout=20)
    took = time.monotonic() - sent
    assert code == 130
    assert 1.4 < took < 5.0, took
    assert survivors(pids, settle=0) == []


@pytest.mark.timeout(60)
def test_second_ctrl_c_kills_at_once(tmp_path):
    proc, pids = spawner(tmp_path, jax=True, args=("--ignore_signals",))  # grace period 30 s
    wait_for_files(pids, 2 * RANK_AND_HELPERS)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.3)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    code, out, err = finish(proc, timeout=20)
    assert code == 130
    assert time.monotonic() - sent < 2.0
    assert survivors(pids, settle=0) == []


@pytest.mark.timeout(60)
@pytest.mark.parametrize("jax", [False, True], ids=["torchrun", "jax"])
def test_sigkill_of_the_launcher_leaves_no_orphans(tmp_path, jax):
    proc, pids = spawner(tmp_path, jax=jax)
    wait_for_files(pids, 2 * RANK_AND_HELPERS)
    proc.kill()
    proc.communicate()
    # the watchdog notices at once; allow a loaded machine a few seconds
    assert survivors(pids, settle=5.0) == []


@pytest.mark.timeout(90)
@pytest.mark.parametrize("jax", [False, True], ids=["torchrun", "jax"])
def test_the_watchdog_records_the_end_of_a_killed_launcher(tmp_path, jax):
    """Issue 13 item 15: after kill -9 of the launcher, status.json kept exit_code null forever."""
    proc, pids = spawner(tmp_path, jax=jax)
    wait_for_files(pids, 2 * RANK_AND_HELPERS)
    assert status(tmp_path)["exit_code"] is None
    proc.kill()
    proc.communicate()
    deadline = time.monotonic() + 40
    while status(tmp_path)["exit_code"] is None and time.monotonic() < deadline:
        time.sleep(0.1)
    record = status(tmp_path)
    assert record["exit_code"] == 137 and record["reason"] == "launcher killed", record
    assert record["outcome"] == "launcher_killed"
    assert record["pid"] == proc.pid and record["failure"] is None and record["duration_s"] > 0
    keys = {"started", "ended", "duration_s", "pid", "pid_start", "host", "exit_code", "reason", "outcome", "failure"}
    assert set(record) == keys  # pid_start, host: the open record's, kept (launcher/runs/read.py)
    assert survivors(pids, settle=5.0) == []


@pytest.mark.timeout(60)
def test_the_watchdog_ignores_a_malformed_line_and_still_kills_what_it_was_told_about(tmp_path):
    """A bare ``remove`` (no command) crashed the watchdog (IndexError) before its sweep: the groups
    it was told about outlived a SIGKILLed launcher. Malformed lines are ignored, said on stderr."""
    import subprocess
    import sys

    from supervise_util import env

    sleeper = subprocess.Popen(["sleep", "120"], start_new_session=True)  # a group of its own, as a rank's
    watchdog = subprocess.Popen(
        [sys.executable, "-S", "-m", "launcher.run.watchdog", "tmg-test-malformed"],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env(),
    )
    try:
        _, err = watchdog.communicate(f"remove\nremove [\npgid {sleeper.pid}\nremove {{}}\n".encode(), timeout=30)
        assert watchdog.returncode == 0, err.decode()
        assert err.decode().count("watchdog: ignored a malformed line") == 3, err.decode()
        assert sleeper.wait(10) == -signal.SIGKILL  # the launcher's end of the pipe closed without done
    finally:
        for proc in (sleeper, watchdog):
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.mark.timeout(60)
def test_torchrun_output_flags_are_honoured(tmp_path):
    """With tee/redirects/log_dir torchrun keeps the workers' output, as the user asked."""
    torch_logs = tmp_path / "torchrun_logs"
    proc, pids = spawner(tmp_path, "launcher.tee=3", f"launcher.log_dir={torch_logs}", args=("--mode", "ok"))
    code, out, err = finish(proc)
    assert code == 0, err
    assert "rank 1 done" in out and "rank 0 done" in out  # torchrun's tee, all local ranks
    assert list(torch_logs.rglob("stdout.log"))
    assert not (run_dir(tmp_path) / "logs" / "rank0.log").exists()


@pytest.mark.timeout(60)
def test_local_ranks_filter_alone_selects_the_console_ranks(tmp_path):
    proc, _ = spawner(tmp_path, "launcher.local_ranks_filter=1", args=("--mode", "ok"))
    code, out, err = finish(proc)
    assert code == 0, err
    assert "rank 1 done" in out and "rank 0 done" not in out
    assert "rank 0 done" in (run_dir(tmp_path) / "logs" / "rank0.log").read_text()


@pytest.mark.timeout(90)
def test_torchrun_restarts_are_left_to_torchrun(tmp_path):
    """With max_restarts, a failed rank is restarted by torchrun, not ended by the launcher."""
    proc, pids = spawner(tmp_path, "launcher.max_restarts=1", args=("--fail", "1:7"))
    code, out, err = finish(proc, timeout=80)
    assert code == 7, err
    assert "FAILED: node 0, rank 1 (local rank 1): exit code 7" in err
    # two attempts ran: rank 1 failed twice
    assert (run_dir(tmp_path) / "logs" / "rank1.log").read_text().count("rank 1 failing with 7") == 2
    assert survivors(pids) == []


@pytest.mark.timeout(60)
def test_a_node_without_rank_0_says_where_its_logs_are(tmp_path):
    """JAX ranks of node 1 of 2 (node 0 never comes): the console points at this node's logs."""
    proc, pids = spawner(
        tmp_path,
        "launcher.nnodes=2",
        "launcher.node_rank=1",
        "launcher.local_nodes=true",
        "launcher.coordinator_address=127.0.0.1:1",
        nproc=1,
        jax=True,
        args=("--mode", "ok"),
    )
    code, out, err = finish(proc)
    assert code == 0, err
    logs = run_dir(tmp_path) / "logs"
    assert (
        f"[train_multigpu] the console shows global rank 0 (on node 0); this node's ranks log to {logs}"
        " (log_all_ranks=true shows them here)"
    ) in out
    assert "rank 1 done" in (logs / "rank1.log").read_text() and "rank 1 done" not in out


# the middle process: ray_submit/job.py's node launcher actor, which starts a launcher tied to itself
_TIED_PARENT = """
import os, signal, sys, time
from launcher.run.process import procs
procs.start_tied([sys.executable, "-c", sys.argv[1], sys.argv[2]], dict(os.environ), signal.SIGTERM)
time.sleep(600)
"""
# the launcher it starts: ties its own ranks to itself (run/process/group.py), then waits
_TIED_CHILD = """
import os, pathlib, signal, sys, time
from launcher.run.process import procs
out = pathlib.Path(sys.argv[1])
signal.signal(signal.SIGTERM, lambda *_: (out.joinpath("sigterm").write_text(""), os._exit(0)))
procs.die_with_parent_preexec(os.getpid())  # what group.start does before it starts the ranks
out.joinpath("ready").write_text(str(os.getpid()))
time.sleep(600)
"""


def test_a_tied_child_gets_sigterm_when_its_starter_dies_after_tying_its_own_children(tmp_path):
    """run/process/procs.start_tied (the Ray node launcher): the launcher gets SIGTERM when the process that
    started it dies, also after it prepared to tie its own ranks to itself (loading libc there must
    not clear its own parent-death signal, as ``prctl(PR_SET_PDEATHSIG, 0)`` once did)."""
    import subprocess
    import sys

    parent = subprocess.Popen([sys.executable, "-c", _TIED_PARENT, _TIED_CHILD, str(tmp_path)])
    try:
        wait_for_files(tmp_path, 1, pattern="ready", timeout=60)
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 20
        while not (tmp_path / "sigterm").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert (tmp_path / "sigterm").exists(), "the tied child outlived its starter"
    finally:
        if parent.poll() is None:
            parent.kill()
        child = int((tmp_path / "ready").read_text() or 0) if (tmp_path / "ready").exists() else 0
        if child:
            try:
                os.kill(child, signal.SIGKILL)
            except ProcessLookupError:
                pass
