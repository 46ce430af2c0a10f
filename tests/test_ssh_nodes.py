"""launcher/run/ssh_nodes.py, the local side of submit=ssh, without sshd: each "node" is a real
launcher started here with its stdin as its channel (what ssh gives the remote one), so the
supervision's rules are tested fast -- a second Ctrl+C kills at once, the exit code is the node
that failed on its own, a client that never answers is killed and counted lost. The same code over
real sshd hosts: tests/test_ssh_launch.py."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from launcher.names import SSH_CHANNEL_VAR
from ports import free_port
from supervise_util import env, finish, survivors, wait_for_files

REPO = Path(__file__).resolve().parents[1]
DRIVER = REPO / "tests" / "workers" / "ssh_nodes_driver.py"
SPAWNER = REPO / "tests" / "workers" / "spawner.py"


def node_argv(tmp: Path, rank: int, port: int, *overrides: str, script_args: tuple = ()) -> list[str]:
    return [
        "env",
        f"{SSH_CHANNEL_VAR}=1",
        sys.executable,
        "-m",
        "launcher",
        "device=cpu",
        f"run_root={tmp / 'runs'}",
        "launcher=skrl_jax",
        "launcher.nproc_per_node=1",
        "launcher.nnodes=2",
        f"launcher.node_rank={rank}",
        f"launcher.coordinator_address=127.0.0.1:{port}",
        "launcher.local_nodes=true",  # both "nodes" on this host
        f"script={SPAWNER}",
        *overrides,
        "--",
        *script_args,
    ]


def start(tmp: Path, grace: float, nodes: list[list[str]]) -> subprocess.Popen:
    spec = json.dumps([[f"local{i}", argv] for i, argv in enumerate(nodes)])
    argv = [sys.executable, str(DRIVER), str(grace), spec, "{}"]
    return subprocess.Popen(argv, cwd=tmp, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def outcome(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1].removeprefix("OUTCOME "))


def test_a_second_ctrl_c_kills_every_node_at_once(tmp_path):
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    port = free_port()
    args = ("--pid_dir", str(pid_dir), "--mode", "sleep", "--ignore_signals")  # ranks that ignore SIGINT/SIGTERM
    nodes = [node_argv(tmp_path, r, port, "launcher.grace_period=120", script_args=args) for r in (0, 1)]
    proc = start(tmp_path, 120, nodes)
    wait_for_files(pid_dir, 6, timeout=120)
    proc.send_signal(signal.SIGINT)
    time.sleep(2)
    assert proc.poll() is None  # the ranks ignore it: the nodes wait for their grace period
    second = time.monotonic()
    proc.send_signal(signal.SIGINT)
    code, out, err = finish(proc, timeout=60)
    assert code == 130, (out, err)
    assert time.monotonic() - second < 20  # not the 120 s grace period
    assert survivors(pid_dir) == []
    assert [n["reason"] for n in outcome(out)["nodes"]] == ["stopped by SIGINT", "stopped by SIGINT"]


def test_the_node_that_failed_on_its_own_gives_the_exit_code(tmp_path):
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    port = free_port()
    args = ("--pid_dir", str(pid_dir), "--mode", "sleep", "--fail", "1:7")
    nodes = [node_argv(tmp_path, r, port, "launcher.grace_period=5", script_args=args) for r in (0, 1)]
    proc = start(tmp_path, 5, nodes)
    code, out, err = finish(proc, timeout=120)
    assert code == 7, (out, err)
    ended = outcome(out)
    assert ended["nodes"][1]["reason"] == "rank failed"
    assert ended["nodes"][0]["exit_code"] == 7 and ended["nodes"][0]["reason"] == "node failed"  # it followed
    assert "[train_multigpu] node 1 (local1) failed: exit code 7 (rank failed); its run directory: local1:" in err
    assert "[train_multigpu] node 0 (local0): run directory: " in out  # a node's own lines, named
    assert survivors(pid_dir) == []


def test_a_client_that_never_answers_is_killed_and_lost(tmp_path):
    # node 1 is not a launcher: it passes the preflight (says ready), then ignores the channel and
    # every signal but SIGKILL
    deaf = [
        sys.executable,
        "-c",
        "import signal, time; from launcher.run import leash; signal.signal(signal.SIGINT, signal.SIG_IGN); "
        "print(leash.MARKER, leash.READY, sep='\\n', flush=True); time.sleep(600)",
    ]
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    args = ("--pid_dir", str(pid_dir), "--mode", "sleep")
    port = free_port()
    node0 = node_argv(tmp_path, 0, port, "launcher.nnodes=1", "launcher.grace_period=1", script_args=args)
    node0 = [a for a in node0 if a not in ("launcher.nnodes=2", f"launcher.coordinator_address=127.0.0.1:{port}")]
    proc = start(tmp_path, 1, [node0, deaf])
    wait_for_files(pid_dir, 3, timeout=120)  # node 0's rank is up: every client started
    proc.send_signal(signal.SIGINT)
    code, out, err = finish(proc, timeout=60)  # grace 1 s + the stop margin, then SIGKILL
    assert code == 130, (out, err)
    assert outcome(out)["nodes"][1]["exit_code"] == -signal.SIGKILL
