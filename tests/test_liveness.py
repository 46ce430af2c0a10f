"""Nodes watch each other (launcher/run/monitor/liveness.py, issue 12 item 5).

The channel itself between real launcher-side processes on loopback (fast: no torch, no JAX), and
whole launches across network namespaces (tests/netns.py) while the ranks are quiet (they sleep
between collectives, tests/workers/quiet_ranks.py): a node's launcher SIGKILLed, or its link taken
down (``ip link set eth0 down`` inside its namespace: nobody gets a reset), ends the launch on the
other node within ``launcher.node_timeout`` with exit code 125 naming the lost node; torch (c10d)
and JAX. A node that ends normally says goodbye and is not reported lost.
"""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import build
from launcher import plan
from launcher.plan import NodeWatch
from launcher.run.monitor import liveness
from launcher.run.monitor.liveness import NodeLiveness
from netns import Hosts
from ports import free_port
from test_checks import error_of
from test_multinode_launcher import ROOT, c10d, launch, launcher_env
from test_supervise_ports import HINT, dry_run

QUIET = str(ROOT / "tests" / "workers" / "quiet_ranks.py")
NODE = str(ROOT / "tests" / "workers" / "liveness_node.py")
TIMEOUT = 3  # launcher.node_timeout in these tests
SLACK = 10  # seconds beyond the timeout a loaded 2-core machine may need to notice and stop
NODE_LOST = 125


def status_of(cwd: Path) -> dict:
    (path,) = cwd.glob("runs/*/status.json")
    return json.loads(path.read_text())


def _torch(hosts, tmp_path, sleep: float):
    return [
        launch(
            h,
            tmp_path / f"n{h.index}",
            *[arg for arg in c10d(h, hosts, h.index) if not arg.startswith("script=")],
            "launcher.nproc_per_node=1",
            f"launcher.node_timeout={TIMEOUT}",
            f"script={QUIET}",
            script_args=("--sleep", str(sleep)),
        )
        for h in hosts
    ]


def _jax(hosts, tmp_path, sleep: float):
    overrides = [
        "launcher=skrl_jax",
        "launcher.nnodes=2",
        "launcher.nproc_per_node=1",
        "log_all_ranks=true",
        f"launcher.coordinator_address={hosts[0].addr}:5123",
        f"launcher.node_timeout={TIMEOUT}",
        f"script={QUIET}",
    ]
    return [
        launch(
            h,
            tmp_path / f"n{h.index}",
            *overrides,
            f"launcher.node_rank={h.index}",
            script_args=("--sleep", str(sleep)),
        )
        for h in hosts
    ]


def _lost(proc, cwd: Path, node: int, address: str, why: str, started: float, low: float = 0.0) -> float:
    """``proc`` (a launcher) ended with exit 125 naming ``node`` as lost; returns its delay."""
    rc = proc.wait(TIMEOUT + SLACK + 30)
    elapsed = time.monotonic() - started
    assert rc == NODE_LOST, proc.out[-3000:]
    assert f"[train_multigpu] FAILED: node {node} ({address}) lost: {why}" in proc.out, proc.out[-3000:]
    assert f"[train_multigpu] exit code {NODE_LOST} (node lost)" in proc.out
    status = status_of(cwd)
    assert (status["exit_code"], status["reason"], status["failure"]["node"]) == (NODE_LOST, "node lost", node)
    assert (status["outcome"], status["failure"]["source"]) == ("node_lost", "node liveness")
    assert low <= elapsed < TIMEOUT + SLACK, elapsed
    return elapsed


KILLED = "its launcher closed its connection without a goodbye (killed, or its machine went down)"
SILENT = f"its launcher sent no beat for {TIMEOUT} s (launcher.node_timeout)"


@pytest.mark.timeout(150)
@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_a_killed_node_launcher_ends_the_other_node(tmp_path, framework):
    with Hosts(2, hostnames=framework == "jax") as hosts:
        procs = (_torch if framework == "torch" else _jax)(hosts, tmp_path, sleep=120)
        for p in procs:
            p.wait_for("QUIET rank=", 90)
        t0 = time.monotonic()
        os.kill(procs[1].popen.pid, signal.SIGKILL)  # node 1's launcher only (its watchdog ends its ranks)
        elapsed = _lost(procs[0], tmp_path / "n0", 1, hosts[1].addr, KILLED, t0)
    print(f"{framework}: node 0 ended {elapsed:.1f} s after node 1's launcher was killed")


@pytest.mark.timeout(150)
@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_a_node_whose_link_goes_down_is_lost_on_both_sides(tmp_path, framework):
    with Hosts(2, hostnames=framework == "jax") as hosts:
        procs = (_torch if framework == "torch" else _jax)(hosts, tmp_path, sleep=120)
        for p in procs:
            p.wait_for("QUIET rank=", 90)
        t0 = time.monotonic()
        hosts[1].unplug()
        first = _lost(procs[0], tmp_path / "n0", 1, hosts[1].addr, SILENT, t0, low=TIMEOUT - 1)
        second = _lost(procs[1], tmp_path / "n1", 0, hosts[0].addr, SILENT, t0, low=TIMEOUT - 1)
    print(f"{framework}: link down; node 0 ended after {first:.1f} s, node 1 after {second:.1f} s")


@pytest.mark.timeout(120)
def test_a_normal_two_node_run_reports_no_lost_node(tmp_path):
    """The ranks stay quiet longer than node_timeout; the beats keep both nodes alive, and the
    launchers' goodbyes at the end are not a loss."""
    with Hosts(2, hostnames=True) as hosts:
        procs = _jax(hosts, tmp_path, sleep=TIMEOUT + 2)
        for p in procs:
            assert p.wait(90) == 0, p.out[-3000:]
    for node, p in enumerate(procs):
        assert f"DONE rank={node}" in p.out and " lost" not in p.out, p.out[-3000:]
        assert status_of(tmp_path / f"n{node}")["reason"] == "success"


# -- the channel alone, on loopback: real processes, no torch or JAX --------------------------------

QUICK = 2.0  # node_timeout of the channel alone
QUICK_SILENT = f"its launcher sent no beat for {QUICK:g} s (launcher.node_timeout)"


class Node:
    """tests/workers/liveness_node.py: one node's channel in a process of its own."""

    def __init__(self, node: int, nnodes: int, port: int, timeout: float = QUICK) -> None:
        self.popen = subprocess.Popen(
            [sys.executable, NODE, str(node), str(nnodes), str(port), str(timeout)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=launcher_env(),
        )
        assert self.popen.stdout.readline() == "UP\n"

    def end(self) -> str:
        """Its launch ends normally: it says goodbye."""
        out, _ = self.popen.communicate("", timeout=30)
        return out

    def kill(self, signum: int = signal.SIGKILL) -> None:
        os.kill(self.popen.pid, signum)

    def __enter__(self) -> Node:
        return self

    def __exit__(self, *exc) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait(10)


def channel(node: int, nnodes: int, port: int, timeout: float = QUICK) -> NodeLiveness:
    """A node's channel in this process, reporting into a buffer."""
    node_liveness = NodeLiveness(NodeWatch(node, nnodes, "127.0.0.1", port, timeout, str(port)), err=io.StringIO())
    node_liveness.start()
    return node_liveness


def joined(node_liveness: NodeLiveness) -> None:
    """Wait until node 0 answered this node's hello."""
    end = time.monotonic() + 10
    while not node_liveness.watched():
        assert time.monotonic() < end, "node 0 never answered"
        time.sleep(0.01)


def lost_within(node_liveness: NodeLiveness, seconds: float):
    """The Failure its check() returns within ``seconds`` (None: none)."""
    end = time.monotonic() + seconds
    while True:
        found = node_liveness.check([])
        if found is not None or time.monotonic() >= end:
            return found
        time.sleep(0.02)


@pytest.mark.timeout(60)
def test_a_node_that_says_goodbye_is_not_lost_a_killed_one_is_at_once_a_frozen_one_after_the_timeout():
    port, other_port = free_port(), free_port()
    hub, other_hub = channel(0, 3, port), channel(0, 2, other_port)
    try:
        with Node(1, 3, port) as done, Node(2, 3, port) as killed, Node(1, 2, other_port) as frozen:
            assert hub.watched() == [1, 2] and other_hub.watched() == [1]
            t0 = time.monotonic()
            frozen.kill(signal.SIGSTOP)  # alive, connected, and silent: a machine that froze
            assert done.end().splitlines() == ["BYE"]
            assert lost_within(hub, QUICK + 1) is None  # ended normally, then silent: not lost
            silent = lost_within(other_hub, QUICK + 6)
            elapsed = time.monotonic() - t0
            t0 = time.monotonic()
            killed.kill()
            found = lost_within(hub, 5)
            assert found is not None and time.monotonic() - t0 < 3
            frozen.kill(signal.SIGKILL)
    finally:
        hub.close()
        other_hub.close()
    assert (found.node, found.exit_code, found.source) == (2, liveness.EXIT_NODE_LOST, liveness.SOURCE)
    assert found.exception == f"node 2 (127.0.0.1) lost: {KILLED}"
    assert silent is not None and silent.exception == f"node 1 (127.0.0.1) lost: {QUICK_SILENT}", silent
    assert QUICK - 1 <= elapsed < QUICK + 5, elapsed


@pytest.mark.timeout(60)
def test_node_0_lost_is_seen_by_the_others_and_node_0_names_a_lost_node_to_all():
    port = free_port()
    with Node(0, 3, port) as hub, Node(2, 3, port) as other:
        mine = channel(1, 3, port)
        try:
            joined(mine)
            other.kill()  # node 0 sees node 2 go, and tells node 1
            found = lost_within(mine, 3)
        finally:
            mine.close()
        said = hub.popen.stdout.readline()  # node 0 found it too
    assert found is not None and found.node == 2, found
    assert found.exception == f"node 2 (127.0.0.1) lost: {KILLED} (seen by node 0)"
    assert said == "LOST " + found.exception.removesuffix(" (seen by node 0)") + "\n"
    port = free_port()
    with Node(0, 2, port) as hub:
        mine = channel(1, 2, port)
        try:
            joined(mine)
            hub.kill()
            found = lost_within(mine, 5)
            assert lost_within(mine, 0) == found  # it stays found
        finally:
            mine.close()
    assert found is not None and found.exception == f"node 0 (127.0.0.1) lost: {KILLED}", found


@pytest.mark.timeout(60)
def test_a_node_whose_launch_failed_ends_the_others_with_its_exit_code():
    """``bye 7``: node 2's launch failed; node 0 ends with 7 and tells node 1, which ends with 7 too."""
    port = free_port()
    hub, one, two = channel(0, 3, port), channel(1, 3, port), channel(2, 3, port)
    try:
        joined(one)
        joined(two)
        two.close(7)
        at_hub, at_one = lost_within(hub, 3), lost_within(one, 3)
    finally:
        for each in (hub, one, two):
            each.close()
    assert at_hub is not None and at_one is not None
    assert (at_hub.node, at_hub.exit_code, at_hub.source) == (2, 7, liveness.FAILED_SOURCE)
    assert at_hub.exception == "node 2 (127.0.0.1) failed: its launch ended with exit code 7"
    assert (at_one.exit_code, at_one.source, at_one.exception) == (
        7,
        liveness.FAILED_SOURCE,
        at_hub.exception + " (seen by node 0)",
    )
    assert liveness.summary(at_hub).splitlines()[1] == (
        "  this node's launch was stopped: exit code 7 (node failed); that node's output and run directory say why"
    )


@pytest.mark.timeout(60)
@pytest.mark.parametrize("started", [False, True], ids=["before-connecting", "just-started"])
def test_a_node_whose_launch_failed_before_node_0_answered_still_ends_node_0(started):
    """Node 1's ranks fail in their first second: its channel had not connected yet (or node 0 had
    not answered). Its goodbye still reaches node 0, which ends with node 1's exit code."""
    port = free_port()
    hub = channel(0, 2, port)
    mine = NodeLiveness(NodeWatch(1, 2, "127.0.0.1", port, QUICK, str(port)), err=io.StringIO())
    try:
        if started:
            mine.start()
        mine.close(7)
        found = lost_within(hub, 3)
    finally:
        hub.close()
    assert found is not None and (found.node, found.exit_code, found.source) == (1, 7, liveness.FAILED_SOURCE)
    assert found.exception == "node 1 (127.0.0.1) failed: its launch ended with exit code 7"
    assert mine.err.getvalue() == ""


@pytest.mark.timeout(60)
def test_a_failed_node_says_goodbye_even_when_node_0_is_too_busy_to_answer_its_hello_in_time():
    """Node 0's launcher under load answers node 1's hello later than node 1 waits for it (CI saw a
    JAX node 0 wait 60 s after node 1 failed: node 1 dropped its unanswered connection silently).
    Node 0 reads a connection's lines in order, so ``bye <code>`` after an unanswered hello is read
    as that node's goodbye: node 1 sends it. Node 0 here is a real socket that answers nothing for
    longer than node 1's wait, then reads what it got."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        mine = NodeLiveness(NodeWatch(1, 2, "127.0.0.1", port, QUICK, str(port)), err=io.StringIO())
        mine.start()
        conn, _ = server.accept()
        mine.close(7)  # longer than its wait for a welcome: node 0 has not read anything yet
        conn.settimeout(5)
        received = b""
        while chunk := conn.recv(4096):
            received += chunk
        conn.close()
    lines = [line for line in received.decode().splitlines() if line != "beat"]
    assert lines == [f"hello {liveness.GREETING} 1 2", "bye 7"], received


@pytest.mark.timeout(60)
def test_node_0_ending_normally_ends_the_watch_and_a_wrong_node_is_refused():
    port = free_port()
    with Node(0, 2, port) as hub:
        mine = channel(1, 2, port)
        joined(mine)
        assert hub.end().splitlines() == ["BYE"]
        assert lost_within(mine, QUICK + 1) is None
        mine.close()
    port = free_port()
    with Node(0, 2, port), Node(1, 2, port):
        twin = channel(1, 2, port)  # a second launcher given node_rank 1
        end = time.monotonic() + 10
        while "refused" not in twin.err.getvalue() and time.monotonic() < end:
            assert lost_within(twin, 0.05) is None  # (check() prints what the channel has to say)
        assert twin.watched() == []
        twin.close()
        assert twin.err.getvalue() == (
            "[train_multigpu] node 0's launcher refused this node (node 1 is connected already: give every node its "
            "own launcher.node_rank): nodes are not watched\n"
        )


@pytest.mark.timeout(60)
def test_the_next_launch_of_a_node_waits_for_node_0s_next_launch():
    """A -m sweep across nodes: node 1's next job starts while node 0's job is still ending. Node 0's
    ending launch answers ``later`` (node 1 ended there), and node 1 joins node 0's next launch."""
    port = free_port()
    hub = channel(0, 2, port)
    with Node(1, 2, port) as first:
        assert hub.watched() == [1]
        first.end()
    upcoming = channel(1, 2, port)
    time.sleep(1)
    assert (upcoming.watched(), hub.watched(), upcoming.err.getvalue()) == ([], [], "")
    hub.close()
    hub = channel(0, 2, port)
    joined(upcoming)
    assert hub.watched() == [1] and lost_within(upcoming, 0) is None and lost_within(hub, 0) is None
    upcoming.close()
    hub.close()


def _every_node_may_tear_down(nodes, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while not all(node.teardown_allowed() for node in nodes):
        if time.monotonic() >= end:
            return False
        time.sleep(0.02)
    return True


HEADLINE = "HANG on node 2: no progress from rank 5 for 4 s (launcher.hang_timeout=3)"


@pytest.mark.timeout(60)
def test_a_hang_found_on_one_node_gets_every_nodes_stacks_before_any_node_tears_down():
    """Node 2 finds a hang and tells node 0, which asks every node for its stacks; nobody may tear
    down until the last node (node 1) has taken its stacks."""
    port = free_port()
    hub, one, two = channel(0, 3, port), channel(1, 3, port), channel(2, 3, port)
    try:
        joined(one)
        joined(two)
        two.report_hang(HEADLINE)
        at_hub, at_one = lost_within(hub, 3), lost_within(one, 3)
        assert lost_within(two, 0.3) is None  # its own monitor has the hang
        two.stacks_taken()
        hub.stacks_taken()
        time.sleep(1)
        allowed_before = [node.teardown_allowed() for node in (hub, one, two)]
        one.stacks_taken()
        assert _every_node_may_tear_down((hub, one, two), 5)
    finally:
        for each in (hub, one, two):
            each.close()
    assert allowed_before == [False, False, False]
    for found in (at_hub, at_one):
        assert found is not None and (found.node, found.exit_code, found.source) == (2, 124, liveness.HANG_SOURCE)
        assert found.exception == HEADLINE


@pytest.mark.timeout(60)
def test_a_hang_node_0_found_waits_for_no_node_that_left_nor_beyond_the_limit(monkeypatch):
    monkeypatch.setattr(liveness, "STACKS_WAIT_S", 1.5)
    port = free_port()
    hub, one, two = channel(0, 3, port), channel(1, 3, port), channel(2, 3, port)
    try:
        joined(one)
        joined(two)
        hub.report_hang(HEADLINE.replace("node 2", "node 0"))
        hub.stacks_taken()
        assert lost_within(one, 3).source == lost_within(two, 3).source == liveness.HANG_SOURCE
        two.close(124)  # node 2 ended before it took its stacks: not waited for
        time.sleep(0.3)
        assert not hub.teardown_allowed()  # node 1 has not answered yet
        t0 = time.monotonic()
        assert _every_node_may_tear_down((hub, one), 5)  # node 1 never answers: the limit
        waited = time.monotonic() - t0
    finally:
        for each in (hub, one, two):
            each.close()
    assert 0.5 < waited < 3, waited
    # a node alone (node 0 not reachable): nothing to wait for
    alone = channel(1, 2, free_port())
    try:
        alone.report_hang(HEADLINE)
        alone.stacks_taken()
        assert _every_node_may_tear_down((alone,), 2)
    finally:
        alone.close()


def test_node_0_not_reachable_is_said_once_and_the_port_taken_at_start_is_the_preflight_message(monkeypatch):
    port = free_port()
    monkeypatch.setattr(liveness, "UNREACHABLE_NOTICE_S", 0.3)
    mine = channel(1, 2, port)
    time.sleep(1.5)
    assert lost_within(mine, 0) is None
    mine.close()
    assert mine.err.getvalue() == (
        f"[train_multigpu] node 0's launcher is not reachable at 127.0.0.1:{port} yet (Connection refused): this "
        "node is not watched until it is; launcher.node_port must be open between the nodes\n"
    )
    with socket.socket() as holder:
        holder.bind(("0.0.0.0", port))
        holder.listen()
        with pytest.raises(liveness.UserError) as caught:
            channel(0, 2, port)
    assert str(caught.value) == f"launcher.node_port={port}: port {port} is already in use on this host ({HINT})"


# -- keys, checks and the dry run ----------------------------------------------------------------

C10D = ["launcher=multinode", "launcher.nnodes=2", "launcher.rdzv_endpoint=10.0.0.1:29400"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            [*C10D, "launcher.node_timeout=0.5"],
            "launcher.node_timeout=0.5: null or 0 (off), or finite seconds in 1..3600 (how long a node's launcher may "
            "stay silent before the other nodes stop the launch)",
        ),
        (["launcher.node_timeout=nan"], "launcher.node_timeout=nan: null or 0 (off), or finite seconds in 1..3600"),
        (["launcher.node_timeout=-1"], "launcher.node_timeout=-1.0: null or 0 (off), or finite seconds in 1..3600"),
        (["launcher.node_port=70000"], "launcher.node_port=70000: a port is an integer in 1..65535"),
        (
            [*C10D, "launcher.node_port=29400"],
            "launcher.node_port=29400: the rendezvous uses port 29400 (launcher.rdzv_endpoint) (give the nodes' "
            "liveness channel another port, or leave launcher.node_port unset: the rendezvous port + 1)",
        ),
        (
            [
                "launcher=skrl_jax",
                "launcher.nnodes=2",
                "launcher.coordinator_address=h:5000",
                "launcher.node_port=5000",
            ],
            "launcher.node_port=5000: the rendezvous uses port 5000 (launcher.coordinator_address)",
        ),
    ],
)
def test_message(argv, message):
    assert message in error_of(argv)


@pytest.mark.parametrize(
    "argv, hub",
    [
        (C10D, "10.0.0.1:29401"),
        ([*C10D, "launcher.node_port=6000"], "10.0.0.1:6000"),
        (["launcher=multinode", "launcher.nnodes=2", "launcher.master_addr=h"], "h:29501"),  # torchrun's 29500
        (["launcher=skrl_jax", "launcher.nnodes=3", "launcher.coordinator_address=h:65535"], "h:65534"),
        ([*C10D, "launcher.node_timeout=null"], None),
        ([*C10D, "launcher.node_timeout=0"], None),
        (["launcher=multinode", "launcher.nnodes=1:2", "launcher.rdzv_endpoint=h:1"], None),  # elastic
        (["launcher.node_port=6000"], None),  # one node: nothing to watch
    ],
)
def test_who_listens_where(argv, hub):
    p = build([*argv, "launcher.nproc_per_node=1", "device=cpu"])
    found = None if p.nodes is None else f"{p.nodes.host}:{p.nodes.port}"
    assert found == hub


def test_the_dry_run_says_who_listens_and_who_connects():
    for rank, how in (
        (0, "this launcher (node 0) listens on port 29401 for the other nodes' launchers"),
        (1, "this launcher connects to node 0's at 10.0.0.1:29401"),
    ):
        text = plan.describe(build([*C10D, f"launcher.node_rank={rank}", "launcher.nproc_per_node=1", "device=cpu"]))
        assert (
            f"# nodes watch each other: {how} (launcher.node_port=29401 (the rendezvous port + 1)); a node silent "
            "for 30 s (launcher.node_timeout) or gone without a goodbye ends the launch on every node, exit code 125"
        ) in text.splitlines()


@pytest.mark.timeout(60)
def test_node_0_refuses_a_taken_node_port_before_anything_starts(tmp_path):
    """A real launch of node 0 refuses it (exit 2, one line, no run directory); its dry run shows the
    plan and warns (since 2d4b934: a dry run shows the plan where this host cannot run it)."""
    with socket.socket() as holder:
        holder.bind(("0.0.0.0", 0))
        holder.listen()
        port = holder.getsockname()[1]
        base = ["launcher=multinode", "launcher.nnodes=2", "launcher.local_nodes=true"]
        default = dry_run(*base, f"launcher.rdzv_endpoint=127.0.0.1:{port - 1}")
        given = dry_run(*base, f"launcher.rdzv_endpoint=127.0.0.1:{free_port()}", f"launcher.node_port={port}")
        node1 = dry_run(*base, f"launcher.rdzv_endpoint=127.0.0.1:{port - 1}", "launcher.node_rank=1")
        argv = [sys.executable, "-m", "launcher", "device=cpu", "launcher.nproc_per_node=1", *base]
        real = subprocess.run(
            [*argv, f"launcher.rdzv_endpoint=127.0.0.1:{port - 1}", f"run_root={tmp_path / 'runs'}"],
            capture_output=True, text=True, env=launcher_env(), cwd=tmp_path, timeout=60,
        )  # fmt: skip
    assert (default.returncode, given.returncode, node1.returncode, real.returncode) == (0, 0, 0, 2), real.stderr
    refused = (
        f"launcher.node_port={port} (the rendezvous port + 1): port {port} is already in use on this host ({HINT})"
    )
    assert real.stderr == f"train_multigpu: error: {refused}\n"
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
    assert default.stderr == f"train_multigpu: warning: {refused}; a real launch on this host refuses it\n"
    assert given.stderr == (
        f"train_multigpu: warning: launcher.node_port={port}: port {port} is already in use on this host ({HINT}); "
        "a real launch on this host refuses it\n"
    )
    assert node1.stderr == ""  # node 1 binds nothing


def test_help_names_the_keys():
    result = subprocess.run(
        [sys.executable, "-m", "launcher", "--help"], capture_output=True, text=True, env=launcher_env(), timeout=60
    )
    assert result.returncode == 0
    assert "launcher.node_timeout (a node whose launcher is silent" in result.stdout
    assert "launcher.node_port" in result.stdout


# -- a stranger on node 0's port (issue 18's hostile pass): raw sockets on loopback -----------------


def _helloed(port: int, node: int = 1, nnodes: int = 3) -> socket.socket:
    """A raw connection that said a valid hello and got node 0's welcome."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.sendall(f"hello {liveness.GREETING} {node} {nnodes}\n".encode())
    assert sock.recv(100) == b"welcome\n"
    return sock


@pytest.mark.timeout(60)
@pytest.mark.parametrize("code", ["256", "99999999999999999999", "-1", "x", ""])
def test_a_goodbye_with_a_code_no_launcher_sends_ends_node_0s_launch_naming_the_node(code):
    """``bye 256`` made node 0's launch end with exit code 256, which the shell sees as 0 (success);
    ``bye -1`` or ``bye x`` was taken for a success and the node silently left the watch. A launcher's
    exit code is 0..255: anything else is a goodbye node 0 cannot read, and the node is lost, named."""
    port = free_port()
    hub = channel(0, 3, port)
    try:
        sock = _helloed(port)
        sock.sendall(f"bye {code}\n".encode() if code else b"bye\n")
        found = lost_within(hub, 5)
        assert found is not None, "the goodbye was taken for a success"
        assert (found.node, found.exit_code, found.source) == (1, NODE_LOST, liveness.SOURCE)
        said = repr(f"bye {code}" if code else "bye")
        assert found.exception == f"node 1 (127.0.0.1) lost: its launcher said a goodbye no launcher sends ({said})"
        sock.close()
    finally:
        hub.close(1)


@pytest.mark.timeout(60)
def test_a_hang_line_names_the_node_that_sent_it_in_printable_text():
    """A connected node that says ``hang 7 <escape sequence>`` (there is no node 7) made node 0 report a
    hang found on node 7, with the terminal's escape sequence in the summary."""
    port = free_port()
    hub = channel(0, 3, port)
    try:
        sock = _helloed(port)
        sock.sendall(b"hang 7 \x1b[2J\x07HANG on node 7: made up\n")
        found = lost_within(hub, 5)
        assert found is not None and (found.node, found.exit_code) == (1, liveness.EXIT_HANG)
        assert found.exception == "?[2J?HANG on node 7: made up"
        sock.close()
    finally:
        hub.close(1)


@pytest.mark.timeout(120)
def test_connections_that_never_say_hello_are_bounded_and_a_real_node_still_joins():
    """Thousands of connections that say nothing each held a file descriptor of node 0's launcher
    until ``node_timeout``: with the common limit of 1024 descriptors, a stranger could leave the
    launcher unable to open a file. At most ``MAX_STRANGERS`` are kept (the oldest is closed)."""
    port = free_port()
    hub = channel(0, 3, port, timeout=30)
    clients = []
    try:
        before = len(os.listdir("/proc/self/fd"))
        for _ in range(400):
            clients.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        end = time.monotonic() + 20
        while len(hub._peers) < liveness.MAX_STRANGERS and time.monotonic() < end:
            time.sleep(0.05)
        time.sleep(0.5)
        held = len(os.listdir("/proc/self/fd")) - before - len(clients)
        assert held <= liveness.MAX_STRANGERS + 2, held
        real = _helloed(port, node=2)
        assert lost_within(hub, 0.5) is None
        assert hub.watched() == [2]
        real.close()
    finally:
        for sock in clients:
            sock.close()
        hub.close(1)
