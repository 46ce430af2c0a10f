"""The hang watchdog and stacks on demand, with real processes (issue 12 items 1-3, 8): torchrun +
gloo and JAX ranks on CPU, stacks taken by the real py-spy (tests/workers/hang.py is the rank)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from launcher.run.postmortem import stacks
from netns import Hosts
from require import unavailable
from supervise_util import REPO, finish, run_dir, spawner, status, survivors, wait_for_files
from test_multinode_launcher import launch as launch_on

WORKER = REPO / "tests" / "workers" / "hang.py"


def line_of(code: str) -> int:
    """The line of the worker that holds ``code``."""
    return next(n for n, line in enumerate(WORKER.read_text().splitlines(), 1) if code in line)


SLEEP = line_of("time.sleep(1000)")


def launch(tmp: Path, *overrides: str, jax: bool, args: tuple = (), nproc: int = 2) -> tuple[subprocess.Popen, Path]:
    return spawner(tmp, *overrides, nproc=nproc, jax=jax, args=args, script=WORKER)


def alive(pid_dir: Path, settle: float = 2.0) -> list[str]:
    """The ranks (rank<R>-<pid>.pid) still running hang.py, after up to ``settle`` s."""
    return survivors(pid_dir, settle, script=WORKER.name.encode())


def one_capture(run: Path, suffix: str) -> Path:
    found = [p for p in (run / "stacks").iterdir() if p.name.endswith(suffix)]
    assert len(found) == 1, sorted(p.name for p in (run / "stacks").iterdir())
    return found[0]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("jax", [False, True], ids=["torchrun", "jax"])
def test_a_rank_stuck_before_the_collective_ends_the_launch_with_every_stack(tmp_path, jax):
    """Rank 1 sleeps forever before the 3rd collective; rank 0 waits in it. Found within
    hang_timeout + a few s of rank 1's last beat, both stacks saved, nothing left running."""
    proc, pids = launch(tmp_path, "launcher.hang_timeout=3", jax=jax, args=("--mode", "jax" if jax else "torch"))
    code, out, err = finish(proc, timeout=90)
    ended = time.time()
    assert code == 124, out + err
    run = run_dir(tmp_path)
    last_beat = (run / "logs" / "rank1.beat").stat().st_mtime
    assert (run / "logs" / "rank1.beat").read_text() == "3 1000"
    # 3 s of silence, then at most 1 s to notice (1 s polls), the stacks and the teardown: slack for load
    assert 3 < ended - last_beat < 3 + 7, ended - last_beat
    assert alive(pids) == []
    capture = one_capture(run, "_hang")
    assert sorted(p.name for p in capture.iterdir()) == ["rank0.txt", "rank1.txt", "summary.txt"]
    rank0, rank1 = (capture / "rank0.txt").read_text(), (capture / "rank1.txt").read_text()
    if jax:
        assert "psum_across_ranks (" in rank0 and "jax/_src/pmap.py" in rank0
        waits = (
            f"rank 0 waits in pmap (hang.py:{line_of('np.asarray(summed(')}); rank 1 in time.sleep (hang.py:{SLEEP})"
        )
    else:
        assert "all_reduce (" in rank0 and "torch/distributed/distributed_c10d.py" in rank0
        reduce = line_of("dist.all_reduce(")
        waits = f"rank 0 waits in dist.all_reduce (hang.py:{reduce}); rank 1 in time.sleep (hang.py:{SLEEP})"
    assert "stuck_forever (" in rank1 and f"hang.py:{SLEEP})" in rank1
    summary = (capture / "summary.txt").read_text()
    assert summary.startswith("HANG on node 0: no progress from rank")
    assert "(launcher.hang_timeout=3)" in summary.splitlines()[0]
    assert waits in summary and waits in err  # printed at the end of the launch too
    assert f"stacks: {capture}/rank<R>.txt" in err
    record = status(tmp_path)
    assert record["exit_code"] == 124 and record["reason"] == "hang" and record["outcome"] == "hang"
    assert record["failure"]["source"] == "hang" and record["failure"]["summary"] == summary.rstrip("\n")
    progress = json.loads((run / "logs" / "progress.json").read_text())
    assert progress["node"] == 0 and set(progress["ranks"]) == {"0", "1"}
    assert progress["ranks"]["1"]["stalled"] is True and progress["ranks"]["1"]["iteration"] == 3
    assert progress["ranks"]["1"]["total"] == 1000 and progress["ranks"]["1"]["phase"] == "running"
    assert "exit code 124 (hang)" in out


@pytest.mark.timeout(60)
def test_a_rank_that_beats_but_prints_nothing_and_one_that_prints_but_never_beats_are_not_flagged(tmp_path):
    """Rank 2 prints once, then nothing and never beats (as the non-zero ranks of a script that logs on
    rank 0 only): judged with its node, where the others show progress, it is not stalled either."""
    proc, pids = launch(
        tmp_path,
        "launcher.hang_timeout=1.5",
        "launcher.startup_timeout=1.5",
        jax=True,
        nproc=3,
        args=("--mode", "mixed", "--seconds", "4"),
    )
    code, out, err = finish(proc)
    assert code == 0, out + err
    run = run_dir(tmp_path)
    assert (run / "logs" / "rank0.log").read_text() == ""  # rank 0 said nothing, and beat
    assert not (run / "logs" / "rank1.beat").exists()  # rank 1 never beat, and printed
    progress = json.loads((run / "logs" / "progress.json").read_text())
    assert progress["ranks"]["0"]["iteration"] > 10 and progress["ranks"]["0"]["iter_per_s"] > 1
    assert progress["ranks"]["1"]["last_beat"] is None and progress["ranks"]["1"]["last_output"] is not None
    assert progress["ranks"]["2"]["last_output"] < progress["updated"] - 2.5  # silent for the last 3 s
    assert not any(r["stalled"] for r in progress["ranks"].values())
    assert not (run / "stacks").exists()


@pytest.mark.timeout(60)
def test_startup_timeout_applies_before_the_first_sign_of_life(tmp_path):
    """torchrun's workers: no output, no beat; hang_timeout alone would never end it."""
    proc, pids = launch(
        tmp_path, "launcher.hang_timeout=600", "launcher.startup_timeout=2", jax=False, args=("--mode", "mute")
    )
    code, out, err = finish(proc)
    assert code == 124, out + err
    assert alive(pids) == []
    summary = (one_capture(run_dir(tmp_path), "_hang") / "summary.txt").read_text()
    assert summary.startswith("HANG on node 0: ranks 0, 1 showed no sign of life (no heartbeat, no output)")
    assert "(launcher.startup_timeout=2)" in summary
    assert f"rank 0 waits in time.sleep (hang.py:{SLEEP}); rank 1 in time.sleep (hang.py:{SLEEP})" in summary
    record = status(tmp_path)
    assert record["reason"] == "hang" and record["failure"]["rank"] in (0, 1)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", ["single", "sweep", "parallel"])
def test_sigusr2_writes_every_stack_and_the_launch_goes_on(tmp_path, mode):
    """A single run, a -m sweep (which holds the signals for its whole length) and a parallel sweep
    (two jobs at once, each writes its own ranks' stacks into its own run directory)."""
    extra = {"single": [], "sweep": ["-m", "seed=5"], "parallel": ["-m", "seed=5,6", "sweep.parallel=2"]}[mode]
    nproc = 1 if mode == "parallel" else 2
    proc, pids = launch(tmp_path, *extra, jax=True, nproc=nproc, args=("--mode", "silent", "--seconds", "4"))
    runs = tmp_path / "runs"
    deadline = time.monotonic() + 30
    made = runs / "multirun" if mode != "single" else runs
    # a sweep's multirun/ is made before its dated directory inside: wait for that one
    while time.monotonic() < deadline and not (made.is_dir() and (mode == "single" or any(made.iterdir()))):
        time.sleep(0.05)
    if mode == "single":
        jobs = [run_dir(tmp_path)]
    else:
        jobs = [next((runs / "multirun").iterdir()) / str(num) for num in range(len(extra[1].split(",")))]
    wait_for_files(pids, nproc * len(jobs), "rank*.pid", timeout=30)  # every rank of every job runs hang.py
    for job in jobs:
        assert json.loads((job / "status.json").read_text())["pid"] == proc.pid
    os.kill(proc.pid, signal.SIGUSR2)
    for job in jobs:
        while time.monotonic() < deadline and not any(not p.name.endswith(".tmp") for p in (job / "stacks").glob("*")):
            time.sleep(0.05)
    assert alive(pids, settle=0) != []  # taken while the ranks run
    captures = [one_capture(job, "") for job in jobs]
    code, out, err = finish(proc)
    assert code == 0, out + err  # the launch went on to its normal end
    for job, capture in zip(jobs, captures):
        assert not capture.name.endswith("_hang") and capture.parent == job / "stacks"
        assert len(capture.name) == len("2026-12-01_00-51-04")
        ranks = [f"rank{r}.txt" for r in range(nproc)]
        assert sorted(p.name for p in capture.iterdir()) == [*ranks, "summary.txt"]
        assert "hang.py" in (capture / ranks[-1]).read_text()
        assert f"stacks of every rank of node 0: {capture}" in out
        summary = (capture / "summary.txt").read_text()
        assert summary.startswith("stacks on demand (SIGUSR2)\nrank 0 waits in time.sleep (hang.py:")
        assert nproc == 1 or "rank 1 in time.sleep (hang.py:" in summary


@pytest.mark.timeout(30)
def test_alive_finds_a_rank_that_survived(tmp_path):
    """The check every launch test ends with can fail: a hang.py rank started outside any launch is found
    (its pid file is the one a rank writes), and no longer once it is killed."""
    rank = subprocess.Popen([sys.executable, str(WORKER), "--mode", "mute", "--pid_dir", str(tmp_path)])
    try:
        wait_for_files(tmp_path, 1, "rank*.pid", timeout=20)
        assert alive(tmp_path) == [f"rank0-{rank.pid}.pid:{rank.pid}"]
    finally:
        rank.kill()
        rank.wait()
    assert alive(tmp_path) == []


@pytest.mark.timeout(200)
@pytest.mark.parametrize("finder", [0, 1], ids=["node0-finds", "node1-finds"])
def test_a_hang_across_nodes_gets_every_nodes_stacks_before_any_node_stops(tmp_path, finder):
    """Two nodes (network namespaces, static rendezvous: rank R on node R), torch + gloo. Rank 1 (node 1)
    sleeps before the 3rd all-reduce; rank 0 (node 0) waits in it. Only ``finder``'s launcher has a short
    hang_timeout: the other node's stacks are taken on its word (through node 0), while its rank still
    runs, and both nodes end with 124."""
    with Hosts(2) as hosts:
        procs = []
        for host in hosts:
            cwd = tmp_path / f"n{host.index}"
            (cwd / "pids").mkdir(parents=True)
            procs.append(
                launch_on(
                    host,
                    cwd,
                    "launcher=multinode",
                    "launcher.nnodes=2",
                    f"launcher.node_rank={host.index}",
                    f"launcher.master_addr={hosts[0].addr}",
                    "launcher.master_port=29500",
                    "launcher.network_interface=eth0",
                    "launcher.nproc_per_node=1",
                    f"script={WORKER}",
                    "log_all_ranks=true",
                    f"launcher.hang_timeout={3 if host.index == finder else 600}",
                    script_args=("--mode", "torch", "--pid_dir", str(cwd / "pids")),
                )
            )
        codes = [p.wait(120) for p in procs]
    assert codes == [124, 124], [p.out[-3000:] for p in procs]
    other = 1 - finder
    for node, p in enumerate(procs):
        run = run_dir(tmp_path / f"n{node}")
        capture = one_capture(run, "_hang")
        assert sorted(f.name for f in capture.iterdir()) == [f"rank{node}.txt", "summary.txt"]
        text = (capture / f"rank{node}.txt").read_text()
        assert "no stack" not in text, text
        expected = "stuck_forever (" if node == 1 else "all_reduce ("
        assert expected in text, text
        summary = (capture / "summary.txt").read_text()
        if node == finder:
            assert summary.startswith(f"HANG on node {finder}: no progress from rank {finder} for "), summary
        else:
            assert summary.startswith(
                f"HANG on node {finder} (found there; these are node {other}'s ranks): no progress from rank {finder}"
            ), summary
        record = json.loads((run / "status.json").read_text())
        assert (record["exit_code"], record["reason"]) == (124, "hang"), record
        assert "exit code 124 (hang)" in p.out
        assert alive(tmp_path / f"n{node}" / "pids") == []


def interpreter_without_py_spy(tmp: Path, py_spy: str | None = None) -> tuple[str, dict]:
    """A virtual environment that sees this one's packages (a .pth file) but has no py-spy beside its
    interpreter (where stacks.find_py_spy looks first), and a PATH without one (where it looks next);
    ``py_spy``: a script to put there instead. Returns its python and the launch's environment."""
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    here = sysconfig.get_paths()["purelib"]
    Path(purelib, "train_multigpu_tests.pth").write_text(f"import site; site.addsitedir({here!r})\n")
    if py_spy is not None:
        (venv / "bin" / "py-spy").write_text(py_spy)
        (venv / "bin" / "py-spy").chmod(0o755)
    path = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d and not Path(d, "py-spy").exists()]
    env = {**os.environ, "PATH": os.pathsep.join(path), "PYTHONPATH": str(REPO)}
    found = subprocess.run(
        [str(python), "-c", "from launcher.run.postmortem import stacks; print(stacks.find_py_spy())"],
        env=env, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert found == ("None" if py_spy is None else str(venv / "bin" / "py-spy"))
    return str(python), env


NOT_FOUND = "py-spy not found: pip install py-spy (a dependency of train_multigpu: reinstall it)"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", ["missing", "refused"])
def test_a_hang_without_stacks_still_ends_124_with_the_progress_lines_and_one_message(tmp_path, case):
    """Real launches whose py-spy is missing, or refused by the kernel. What is refused here: py-spy
    run as another user (nobody) than the ranks (root), through a wrapper where the launcher finds
    py-spy. This kernel has no Yama (no /proc/sys/kernel/yama), so the same-user refusals of
    ptrace_scope 1..3 cannot exist here."""
    if case == "refused" and (os.geteuid() != 0 or shutil.which("setpriv") is None):
        unavailable("ROOT", "needs root and setpriv")
    real = stacks.find_py_spy()
    as_nobody = f'#!/bin/sh\nexec setpriv --reuid=65534 --regid=65534 --clear-groups {real} "$@"\n'
    python, env = interpreter_without_py_spy(tmp_path, as_nobody if case == "refused" else None)
    pids = tmp_path / "pids"
    pids.mkdir()
    argv = [
        python, "-m", "launcher", "device=cpu", "launcher.nproc_per_node=2", f"script={WORKER}",
        f"run_root={tmp_path / 'runs'}", "launcher.hang_timeout=3", "--", "--mode", "torch", "--pid_dir", str(pids),
    ]  # fmt: skip
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    code, out, err = finish(proc, timeout=90)
    assert code == 124, out + err
    assert alive(pids) == []
    assert "  rank 0: last progress " in err and "  rank 1: last progress " in err
    assert ", iteration 3/1000 (stalled)" in err
    (said,) = [line for line in err.splitlines() if "no stack" in line]  # one line, said once
    if case == "missing":
        assert said == f"ranks 0, 1 no stack ({NOT_FOUND})"
    else:
        assert said.startswith("ranks 0, 1 no stack (py-spy cannot attach to pids "), said
        assert said.endswith(f": permission denied (ptrace); {stacks.PTRACE_HINT})"), said
    capture = one_capture(run_dir(tmp_path), "_hang")
    for rank in (0, 1):
        assert "\nno stack: " in (capture / f"rank{rank}.txt").read_text()
    record = status(tmp_path)
    assert (record["exit_code"], record["reason"]) == (124, "hang") and said in record["failure"]["summary"]


def test_no_py_spy_says_what_to_install():
    found = stacks.dump({0: os.getpid()}, None)
    assert found[0].error == "py-spy not found: pip install py-spy (a dependency of train_multigpu: reinstall it)"
    assert stacks.one_line(found).startswith("rank 0 no stack (py-spy not found: pip install py-spy")


def test_py_spy_without_ptrace_permission_says_why(tmp_path):
    """The real py-spy, run as nobody against a process of root's: the kernel refuses the attach."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        unavailable("ROOT", "needs root and setpriv")
    binary = stacks.find_py_spy()
    assert binary is not None
    unprivileged = tmp_path / "py-spy-as-nobody"
    unprivileged.write_text(f'#!/bin/sh\nexec setpriv --reuid=65534 --regid=65534 --clear-groups {binary} "$@"\n')
    unprivileged.chmod(0o755)
    target = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        found = stacks.dump({3: target.pid}, str(unprivileged))
    finally:
        target.kill()
        target.wait()
    assert found[3].error.startswith(
        f"py-spy cannot attach to pid {target.pid}: permission denied (ptrace); run as root"
    )
    assert "kernel.yama.ptrace_scope=0" in found[3].error


def test_a_stopped_rank_gets_py_spys_error_line_not_its_backtrace():
    """The real py-spy against a SIGSTOPped process: it fails at once (it cannot suspend a stopped
    process) and prints its error, its causes and then a Rust backtrace ending in ``9: main``. The
    message is the error and its causes, and says the process is stopped."""
    target = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.3)
        os.kill(target.pid, signal.SIGSTOP)
        found = stacks.dump({0: target.pid}, stacks.find_py_spy())
    finally:
        target.kill()
        target.wait()
    error = found[0].error
    assert error.startswith(f"py-spy failed on pid {target.pid}: Failed to get stack traces: Failed to suspend"), error
    assert "main" not in error and "backtrace" not in error.lower()
    assert error.endswith(f"(pid {target.pid} is stopped: SIGSTOP or a debugger; kill -CONT {target.pid} resumes it)")


@pytest.mark.timeout(120)
def test_a_launch_whose_rank_was_stopped_ends_124_and_says_so(tmp_path):
    """A real launch (torchrun + gloo) whose rank 1 is SIGSTOPped mid-run: the watchdog finds it, the
    summary gives py-spy's error for it (not a backtrace line), and the teardown still ends it."""
    proc, pids = launch(tmp_path, "launcher.hang_timeout=3", jax=False, args=("--mode", "torch", "--at", "1000"))
    (rank1,) = wait_for_files(pids, 2, "rank*.pid", timeout=60)[1:]
    run_logs = tmp_path / "runs"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not list(run_logs.glob("*/logs/rank1.beat")):
        time.sleep(0.1)
    pid = int(rank1.read_text())
    os.kill(pid, signal.SIGSTOP)
    code, out, err = finish(proc, timeout=90)
    assert code == 124, out + err
    assert alive(pids) == []
    said = next(line for line in err.splitlines() if line.startswith("rank 0 waits in "))
    assert f"; rank 1 no stack (py-spy failed on pid {pid}: Failed to get stack traces: " in said, said
    assert said.endswith(f"(pid {pid} is stopped: SIGSTOP or a debugger; kill -CONT {pid} resumes it))"), said


def test_the_rank_wrapper_finds_the_launcher_above_torchrun():
    """Under Yama's ptrace_scope=1 the wrapper names the launcher as the rank's allowed tracer (its py-spy
    is the launcher's child): the first ancestor without this launch's marker. Here: this test process
    (no marker) -> an agent with the marker (as torchrun) -> the rank."""
    rank = "from launcher.run import worker; print(worker.launcher_pid())"
    agent = f"import subprocess, sys; sys.exit(subprocess.call([sys.executable, '-c', {rank!r}]))"
    env = {**os.environ, "TRAIN_MULTIGPU_LAUNCH_ID": "abc", "PYTHONPATH": str(REPO)}
    found = subprocess.run([sys.executable, "-c", agent], env=env, capture_output=True, text=True, check=True)
    assert int(found.stdout) == os.getpid()
    # without the marker (a rank started by the launcher itself, as JAX ranks are): its parent
    env.pop("TRAIN_MULTIGPU_LAUNCH_ID")
    found = subprocess.run([sys.executable, "-c", agent], env=env, capture_output=True, text=True, check=True)
    assert int(found.stdout) != os.getpid()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["fifo", "symlink to a fifo", "directory", "symlink to /dev/zero"])
def test_a_beat_file_replaced_by_a_fifo_or_other_non_file_never_blocks_the_launcher(tmp_path, kind):
    """A rank that replaces its beat file with a FIFO (no writer) made the launcher's monitor block in
    open() for ever: the launch never ended and SIGTERM / Ctrl+C could not stop it (found by the
    hostile pass of issue 18). A beat file that is not a regular file is no beat; reading it returns at once."""
    beat = tmp_path / "rank0.beat"
    if kind == "fifo":
        os.mkfifo(beat)
    elif kind == "symlink to a fifo":
        os.mkfifo(tmp_path / "pipe")
        beat.symlink_to(tmp_path / "pipe")
    elif kind == "directory":
        beat.mkdir()
    else:
        beat.symlink_to("/dev/zero")
    code = f"from launcher.run.monitor import beats; print(beats.read_beat({str(beat)!r}))"
    # a child process: a read that blocks must fail this test, not hang pytest
    try:
        done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=15)
    except subprocess.TimeoutExpired:
        pytest.fail(f"reading a beat file that is a {kind} blocked for 15 s")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "None", done.stdout


@pytest.mark.timeout(120)
def test_a_flood_of_stack_requests_takes_a_bounded_number_of_captures_and_the_launch_goes_on(tmp_path):
    """SIGUSR2 sent 60 times, 0.06 s apart (faster than a capture of 4 ranks: here each py-spy waits
    0.5 s first, so that no machine is fast enough to keep up): each request started a capture of its
    own, queued behind the others, so the launcher went on taking stacks (pausing every rank each
    time) long after the requests stopped, and its end waited for all of them (issue 18's hostile
    pass). A request made while a capture is queued is served by that capture: at most one runs and
    one waits. (With the real py-spy alone a capture of these silent ranks can take under 0.06 s on
    an idle machine, and the queue never grew: the test passed without the fix.)"""
    slow = f'#!/bin/sh\nsleep 0.5\nexec {stacks.find_py_spy()} "$@"\n'
    python, env = interpreter_without_py_spy(tmp_path, slow)
    pids = tmp_path / "pids"
    pids.mkdir()
    argv = [
        python, "-m", "launcher", "device=cpu", "launcher=skrl_jax", "launcher.nproc_per_node=4", f"script={WORKER}",
        f"run_root={tmp_path / 'runs'}", "--", "--pid_dir", str(pids), "--mode", "silent", "--seconds", "8",
    ]  # fmt: skip
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wait_for_files(pids, 4, "rank*.pid", timeout=60)
    for _ in range(60):
        os.kill(proc.pid, signal.SIGUSR2)
        time.sleep(0.06)
    last_request = time.time()
    code, out, err = finish(proc, timeout=90)
    assert code == 0, out + err
    captures = sorted((run_dir(tmp_path) / "stacks").iterdir())
    # a capture's name is the second it started: those started in a later second than the last request
    # answer no request of their own (1 at most: the one queued then; 2 allow for the second's edge)
    later = time.strftime("%Y-%m-%d_%H-%M-%S", time.localtime(int(last_request) + 1))
    after = [p.name for p in captures if p.name[: len(later)] >= later]
    assert 1 <= len(captures) and len(after) <= 2, [p.name for p in captures]
    ranks = [f"rank{rank}.txt" for rank in range(4)]
    assert all(sorted(p.name for p in c.iterdir()) == [*ranks, "summary.txt"] for c in captures)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["fifo", "symlink", "directory"])
def test_progress_json_is_written_whatever_a_rank_left_at_its_temporary_name(tmp_path, kind):
    """progress.json is written as ``progress.json.tmp`` and renamed, in the logs directory the ranks
    can write into. A FIFO left at that name blocked the launcher's monitor for good (the launch never
    ended); a symlink made it write through into the file it points at (issue 18's hostile pass)."""
    tmp = tmp_path / "progress.json.tmp"
    outside = tmp_path / "outside.txt"
    outside.write_text("keep\n")
    if kind == "fifo":
        os.mkfifo(tmp)
    elif kind == "symlink":
        tmp.symlink_to(outside)
    else:
        tmp.mkdir()
    target = str(tmp_path / "progress.json")
    code = (
        "import pathlib; from launcher.run.monitor import progress; "
        f"progress.write_json(pathlib.Path({target!r}), {{1: 1}})"
    )
    try:
        done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=15)
    except subprocess.TimeoutExpired:
        pytest.fail(f"writing progress.json blocked for 15 s on a {kind} at its temporary name")
    assert outside.read_text() == "keep\n"
    if kind == "directory":  # cannot be removed: not written, said as an OSError (the monitor skips that write)
        assert "OSError" in done.stderr or "IsADirectoryError" in done.stderr, done.stderr
        return
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "progress.json").read_text()) == {"1": 1}
    assert not tmp.exists() and not tmp.is_symlink()


def test_the_flight_recorders_pipes_are_written_only_when_they_are_fifos(tmp_path):
    """On a hang the launcher writes a byte into every ``<stem><R>.pipe`` (NCCL's dump pipes, in the run
    directory the ranks write into). A directory there raised IsADirectoryError out of the hang path
    (a traceback instead of the hang's summary); a regular file, or a symlink to one, had its first
    byte overwritten (issue 18's hostile pass). Only a FIFO with a reader is written to."""
    from launcher.names import FR_PIPE_FILE_VAR
    from launcher.run.postmortem import flight_recorder

    stem = str(tmp_path / "pipe_rank_")
    (tmp_path / "pipe_rank_0.pipe").mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_text("keep\n")
    (tmp_path / "pipe_rank_1.pipe").symlink_to(outside)
    (tmp_path / "pipe_rank_2.pipe").write_text("x")
    os.mkfifo(tmp_path / "pipe_rank_3.pipe")
    reader = os.open(tmp_path / "pipe_rank_3.pipe", os.O_RDONLY | os.O_NONBLOCK)
    try:
        assert flight_recorder.trigger_dumps({FR_PIPE_FILE_VAR: stem}) == [str(tmp_path / "pipe_rank_3.pipe")]
        assert os.read(reader, 10) == b"1"
    finally:
        os.close(reader)
    assert outside.read_text() == "keep\n" and (tmp_path / "pipe_rank_2.pipe").read_text() == "x"


@pytest.mark.timeout(120)
def test_a_hang_whose_stacks_cannot_be_saved_still_ends_124_with_its_summary(tmp_path):
    """A rank that leaves a file named ``stacks`` in the run directory: saving the hang's stacks raised
    NotADirectoryError out of the launcher (a traceback, exit code 1, no summary; issue 18's hostile
    pass). The launch ends as a hang all the same, and the summary says where each rank waits and
    why the stacks were not saved."""
    script = tmp_path / "blocks_stacks.py"
    script.write_text(
        "import os, time\n"
        "beat = os.environ['TRAIN_MULTIGPU_HEARTBEAT_FILE']\n"
        "open(beat, 'w').write('1 10')\n"
        "if os.environ.get('RANK') == '0':\n"
        "    open(os.path.join(os.path.dirname(os.path.dirname(beat)), 'stacks'), 'w').write('x')\n"
        "time.sleep(1000)\n"
    )
    proc, pids = spawner(tmp_path, "launcher.hang_timeout=2", script=script)
    code, out, err = finish(proc, timeout=90)
    assert code == 124, out + err
    assert "Traceback" not in err, err
    assert "rank 0 waits in time.sleep (blocks_stacks.py:6); rank 1 in time.sleep (blocks_stacks.py:6)" in err
    stacks_file = run_dir(tmp_path) / "stacks"
    assert f"stacks not saved: {stacks_file}/" in err and "Not a directory" in err, err
    assert stacks_file.read_text() == "x"
