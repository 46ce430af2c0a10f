"""The remote end of submit=ssh's channel (launcher/run/leash.py), on a real launcher process: the
secret values it reads from stdin reach the workers' environment (and no command line, no file),
and its launch ends -- every rank stopped -- when stdin closes, says ``stop`` or falls silent."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launcher.names import SSH_CHANNEL_VAR
from launcher.run import leash
from supervise_util import env, finish, survivors, wait_for_files

REPO = Path(__file__).resolve().parents[1]
PROBE = REPO / "tests" / "workers" / "secret_probe.py"
SPAWNER = REPO / "tests" / "workers" / "spawner.py"
SECRET = "tmg-ssh-channel-s3cr3t-4711"


def start(tmp: Path, *overrides: str, script_args: tuple = ()) -> subprocess.Popen:
    """The launcher as submit=ssh starts it on a host: the channel variable set, stdin a pipe."""
    argv = [sys.executable, "-m", "launcher", "device=cpu", f"run_root={tmp / 'runs'}", "launcher=skrl_jax"]
    argv += [*overrides, "--", *script_args]
    return subprocess.Popen(
        argv,
        cwd=tmp,
        env={**env(), SSH_CHANNEL_VAR: "1"},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def drop(proc: subprocess.Popen) -> None:
    """The client's end of stdin closed (what the connection dropping does to the remote launcher)."""
    proc.stdin.close()
    proc.stdin = None  # (communicate() would flush it)


def sleeping_ranks(tmp: Path, timeout_s: float = 30) -> tuple[subprocess.Popen, Path]:
    pid_dir = tmp / "pids"
    pid_dir.mkdir()
    proc = start(
        tmp,
        "launcher.nproc_per_node=2",
        f"script={SPAWNER}",
        script_args=("--pid_dir", str(pid_dir), "--mode", "sleep"),
    )
    proc.stdin.write(leash.hello({}, timeout_s))
    proc.stdin.flush()
    deadline = time.monotonic() + 60
    while len(list(pid_dir.glob("*.pid"))) < 6:  # two ranks, two helpers each; beats meanwhile, as the client sends
        assert time.monotonic() < deadline, sorted(pid_dir.iterdir())
        proc.stdin.write(b"beat\n")
        proc.stdin.flush()
        time.sleep(0.2)
    return proc, pid_dir


def test_secret_from_stdin_reaches_the_workers_and_nothing_else(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    proc = start(
        tmp_path,
        "launcher.nproc_per_node=2",
        f"script={PROBE}",
        "+worker_env.HF_TOKEN=***",  # the placeholder the command line carries, as submit=ssh sends it
        script_args=("--name", "HF_TOKEN", "--out", str(out), "--sleep"),
    )
    proc.stdin.write(leash.hello({"worker_env.HF_TOKEN": SECRET}))
    proc.stdin.flush()
    shas = wait_for_files(out, 2, "*.sha")
    assert {p.read_text() for p in shas} == {hashlib.sha256(SECRET.encode()).hexdigest()}
    for pid in filter(str.isdigit, os.listdir("/proc")):  # no command line on this host holds it
        try:
            assert SECRET.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes(), pid
        except OSError:
            continue
    drop(proc)  # the connection drops: the launch ends as Ctrl+C ends it
    code, stdout, stderr = finish(proc)
    assert code == 130, (stdout, stderr)
    assert "the SSH connection closed: stopping this node's launch" in stdout
    written = [p for p in tmp_path.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
    assert written == []
    assert SECRET not in stdout + stderr


@pytest.mark.parametrize("how", ["eof", "stop", "silence"])
def test_the_channel_ending_stops_every_rank(tmp_path, how):
    proc, pid_dir = sleeping_ranks(tmp_path, timeout_s=2 if how == "silence" else 30)
    started = time.monotonic()
    if how == "eof":
        drop(proc)
    elif how == "stop":
        proc.stdin.write(b"stop\n")
        proc.stdin.flush()
    else:  # nothing more comes, stdin stays open (a link down): the leash's timeout
        proc.wait(timeout=60)
    code, stdout, stderr = finish(proc)
    assert code == 130, (stdout, stderr)
    why = {
        "eof": "the SSH connection closed",
        "stop": "Ctrl+C on the launching host",
        "silence": "the SSH channel was silent for 2 s",
    }[how]
    assert f"{why}: stopping this node's launch" in stdout
    assert "stopped by SIGINT" in stdout
    assert survivors(pid_dir) == []
    if how == "silence":
        assert time.monotonic() - started >= 1.5


def test_beats_keep_the_launch_going(tmp_path):
    proc, pid_dir = sleeping_ranks(tmp_path, timeout_s=1.5)
    for _ in range(8):  # 4 s of beats, more than twice the timeout
        proc.stdin.write(b"beat\n")
        proc.stdin.flush()
        time.sleep(0.5)
    assert proc.poll() is None
    proc.send_signal(signal.SIGINT)
    code, _, _ = finish(proc)
    assert code == 130
    assert survivors(pid_dir) == []


def test_a_launcher_told_of_a_channel_that_sends_no_first_line(tmp_path):
    proc = start(tmp_path, f"script={PROBE}", script_args=("--name", "X"))
    proc.stdin.write(b"hello\n")
    drop(proc)
    code, stdout, stderr = finish(proc)
    assert code == 2
    assert stderr.strip() == (
        f"train_multigpu: error: {SSH_CHANNEL_VAR}=1: set by submit=ssh only: the launcher reads its secrets "
        f"from stdin (not the SSH channel's first line) (unset {SSH_CHANNEL_VAR})"
    )
    assert not (tmp_path / "runs").exists()


def test_a_dead_channel_stops_every_rank_though_nothing_can_be_written_to_it(tmp_path):
    """The connection is gone: stdin at EOF, and stdout and stderr -- the same channel -- closed
    (every write fails, EPIPE). The launch still stops, every rank with it, and its record closes."""
    import json

    proc, pid_dir = sleeping_ranks(tmp_path)
    proc.stdout.close()  # what sshd does to the remote command's streams when the connection drops
    proc.stderr.close()
    proc.stdout = proc.stderr = None
    drop(proc)
    try:
        code = proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)  # (the failure this guards: a launch left running; end it)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
        raise AssertionError("the launch did not stop when its channel died") from None
    assert code == 130
    assert survivors(pid_dir) == []
    (status,) = (tmp_path / "runs").glob("*/status.json")
    record = json.loads(status.read_text())
    assert (record["exit_code"], record["reason"]) == (130, "stopped by SIGINT")


def test_the_arguments_come_on_the_channel_exactly(tmp_path):
    """submit=ssh starts each host's launcher with no arguments (it imports while this machine
    composes) and sends them in the channel's first line: they arrive as they were, whatever a
    shell would have made of them -- here the script's --pid_dir, a directory no shell word keeps."""
    pid_dir = tmp_path / "it's a $HOME `x` d;e"
    pid_dir.mkdir()
    argv = ["device=cpu", f"run_root={tmp_path / 'runs'}", "launcher=skrl_jax", "launcher.nproc_per_node=1"]
    argv += [f"script={SPAWNER}", "--", "--pid_dir", str(pid_dir), "--mode", "sleep"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "launcher"],
        cwd=tmp_path,
        env={**env(), SSH_CHANNEL_VAR: "1"},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout.readline().decode().strip() == leash.MARKER  # imported; now it waits for them
    proc.stdin.write(leash.hello({}, 30, argv=argv))
    proc.stdin.flush()
    wait_for_files(pid_dir, 3, "*.pid")  # the rank and its two helpers
    drop(proc)
    code, stdout, stderr = finish(proc)
    assert code == 130, (stdout, stderr)
    assert survivors(pid_dir) == []
