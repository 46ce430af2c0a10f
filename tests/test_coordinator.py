"""Restarts across nodes (launcher/run/monitor/coordinator.py, issue 20 item 5): node 0 decides
through the liveness channel, the others follow; a lost node is fatal with a fixed node count, not
with MIN:MAX while MIN remain. Real processes on loopback (tests/workers/coordinated_node.py: one
node's channel and coordinator, driven as an attempt loop drives them), no torch or JAX; whole
launches across network namespaces: tests/test_restarts_nodes.py."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time

import pytest

from conftest import build
from ports import free_port
from test_checks import error_of
from test_multinode_launcher import ROOT, launcher_env

NODE = str(ROOT / "tests" / "workers" / "coordinated_node.py")
TIMEOUT = 2.0  # launcher.node_timeout


class Node:
    def __init__(self, node: int, nnodes: int, port: int, min_nodes: int | None = None) -> None:
        argv = [sys.executable, NODE, str(node), str(nnodes), str(port), str(TIMEOUT)]
        argv += [str(min_nodes)] if min_nodes is not None else []
        self.popen = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=launcher_env()
        )
        self.node = node
        self.said: list[str] = []
        # read on a thread: a select() on the pipe misses a line already in the reader's buffer
        # (two lines written together: the second waited there until the test gave up)
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.up = self.line(20)

    def _read(self) -> None:
        for line in self.popen.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def line(self, seconds: float) -> str:
        """Its next line of output, within ``seconds`` (the launcher's own lines are kept in ``said``)."""
        end = time.monotonic() + seconds
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, end - time.monotonic()))
            except queue.Empty:
                pytest.fail(f"node {self.node}: no line within {seconds} s; its launcher's lines: {self.said}")
            assert line is not None, f"ended (exit {self.popen.wait(5)})"
            if not line.startswith("[train_multigpu] "):
                return line.strip()
            self.said.append(line.strip())

    def say(self, line: str) -> None:
        self.popen.stdin.write(line + "\n")
        self.popen.stdin.flush()

    def word(self, seconds: float) -> str:
        """Node 0's word (its next ``WORD`` line): a ``FAILED`` line before it (the channel found the
        failure before this node's attempt ended here) is skipped."""
        line = self.line(seconds)
        while line.startswith("FAILED "):
            line = self.line(seconds)
        return line

    def end(self, code: int, retry: bool, cls: str | None) -> None:
        """This node's attempt ended with ``code``, failure class ``cls`` (its policy: ``retry``)."""
        why = "no failure" if cls is None else f"{cls} is retried" if retry else f"{cls} is not in restart.classes"
        self.say(f"end {code} {int(retry)} {cls or '-'} {why}")

    def close(self, code: int = 0) -> None:
        self.say(f"close {code}")
        assert self.line(10) == "BYE"

    def kill(self) -> None:
        os.kill(self.popen.pid, signal.SIGKILL)
        self.popen.wait(5)

    def __enter__(self) -> Node:
        return self

    def __exit__(self, *exc) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait(10)


@pytest.mark.timeout(60)
def test_a_rank_failure_on_node_1_restarts_both_nodes_together_and_the_next_attempt_ends_both():
    port = free_port()
    with Node(0, 2, port) as hub, Node(1, 2, port) as one:
        one.end(3, True, "killed")  # its class is retried there
        assert hub.line(10) == "FAILED 1 3"  # node 0's attempt ends too
        hub.end(3, True, "node-failed")
        assert hub.line(10) == "WORD restart 1 2 after killed"
        assert one.line(10) == "WORD restart 1 2 after killed"
        one.end(0, False, None)
        hub.end(0, False, None)
        assert hub.line(10) == one.line(10) == "WORD stop 0 success"
        one.close()
        hub.close()


@pytest.mark.timeout(60)
def test_the_verdict_of_the_node_that_failed_first_decides_for_every_node():
    """Node 1's rank raised an exception (not retried there); node 0 only followed it (its own
    class, node-failed, is retried): nobody restarts, every node ends with node 1's code."""
    port = free_port()
    with Node(0, 3, port) as hub, Node(1, 3, port) as one, Node(2, 3, port) as two:
        one.end(1, False, "exception")
        assert hub.line(10) == "FAILED 1 1"
        assert two.line(10) == "FAILED 1 1"  # node 0 named node 1 to node 2
        two.end(1, True, "node-failed")
        hub.end(1, True, "node-failed")
        for node in (hub, one, two):
            assert node.line(10) == "WORD stop 1 exception is not in restart.classes"


@pytest.mark.timeout(60)
def test_a_rank_that_only_lost_its_peer_is_no_cause_the_other_nodes_exception_is():
    """Node 0's rank failed first, of a reset connection (``follower``: retried), while node 1's
    rank raised the exception behind it (not retried): nobody restarts, node 1's code everywhere."""
    port = free_port()
    with Node(0, 2, port) as hub, Node(1, 2, port) as one:
        hub.end(1, True, "follower")
        assert one.line(10) == "FAILED 0 1"
        one.end(1, False, "exception")
        for node in (hub, one):
            assert node.line(10) == "WORD stop 1 exception is not in restart.classes"


@pytest.mark.timeout(60)
def test_survivors_whose_ranks_failed_before_a_node_was_found_lost_restart_after_node_lost():
    """2:3, node 2's launcher killed: the survivors' ranks fail at once (gloo: connection reset,
    ``follower``), node 2 is found silent a node_timeout later; the restart is after ``node-lost``."""
    port = free_port()
    with Node(0, 3, port, 2) as hub, Node(1, 3, port, 2) as one, Node(2, 3, port, 2) as two:
        two.kill()
        hub.end(1, True, "follower")  # before node 2 is found lost, or just after
        one.end(1, True, "follower")
        assert hub.word(15) == one.word(15) == "WORD restart 1 2 after node-lost"


@pytest.mark.timeout(60)
def test_node_0s_own_failure_is_heard_by_every_node_and_restarts_them():
    port = free_port()
    with Node(0, 2, port) as hub, Node(1, 2, port) as one:
        hub.end(124, True, "hang")
        assert one.line(10) == "FAILED 0 124"
        one.end(124, True, "node-failed")
        assert hub.line(10) == one.line(10) == "WORD restart 1 2 after hang"


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("nnodes", "min_nodes", "word"),
    [
        (
            2,
            None,
            "WORD stop 125 node 1 lost: launcher.nnodes=2 is a fixed count (MIN:MAX goes on without a lost node)",
        ),
        (2, 1, "WORD restart 1 1 after node-lost"),
    ],
)
def test_a_lost_node_stops_a_fixed_count_and_not_an_elastic_one(nnodes, min_nodes, word):
    port = free_port()
    with Node(0, nnodes, port, min_nodes) as hub, Node(1, nnodes, port, min_nodes) as one:
        one.kill()
        assert hub.line(10) == "FAILED 1 125"
        hub.end(125, True, "node-lost")
        assert hub.line(10) == word


@pytest.mark.timeout(90)
def test_three_nodes_2_3_one_lost_the_two_left_restart_and_a_node_that_comes_back_joins_the_next_attempt():
    port = free_port()
    with Node(0, 3, port, 2) as hub, Node(1, 3, port, 2) as one, Node(2, 3, port, 2) as two:
        two.kill()
        assert hub.line(10) == "FAILED 2 125"
        assert one.line(10) == "FAILED 2 125"
        one.end(125, True, "node-failed")
        hub.end(125, True, "node-lost")
        assert hub.line(15) == one.line(15) == "WORD restart 1 2 after node-lost"
        with Node(2, 3, port, 2) as back:
            assert back.up == "UP standby"  # the others run attempt 1: it joins the next
            one.end(3, True, "killed")
            assert hub.line(10) == "FAILED 1 3"
            hub.end(3, True, "node-failed")
            for node in (hub, one, back):
                assert node.line(15) == "WORD restart 2 3 after killed"
            assert back.said == [
                "[train_multigpu] the other nodes run an attempt: this node joins at their next restart"
            ]
            # two lost of three: fewer than MIN remain
            one.kill()
            back.kill()
            assert hub.line(10).startswith("FAILED ")
            hub.end(125, True, "node-lost")
            assert (
                hub.line(15) == "WORD stop 125 node 1, node 2 lost: 1 node left, launcher.nnodes=2:3 needs at least 2"
            )


@pytest.mark.timeout(60)
def test_a_node_waits_for_node_0s_word_while_node_0_runs_and_a_ctrl_c_ends_the_wait_at_once():
    port = free_port()
    with Node(0, 2, port) as hub, Node(1, 2, port) as one:
        one.end(0, False, None)  # its ranks are done; node 0's rank 0 still evaluates
        time.sleep(TIMEOUT + 1)  # longer than node_timeout: node 0 beats, so the wait goes on
        assert one.popen.poll() is None
        started = time.monotonic()
        one.popen.send_signal(signal.SIGINT)
        assert one.line(10) == "WORD stop 1 stopped by a signal while the nodes decided"
        assert time.monotonic() - started < 3
        one.close(130)
        assert hub.line(10) == "FAILED 1 130"  # node 0's attempt ends: node 1 said goodbye, stopped


@pytest.mark.timeout(60)
def test_a_node_whose_node_0_is_gone_stops_at_once_instead_of_waiting_for_a_word():
    port = free_port()
    with Node(0, 2, port) as hub, Node(1, 2, port) as one:
        hub.kill()
        assert one.line(10) == "FAILED 0 125"
        started = time.monotonic()
        one.end(125, True, "node-lost")
        assert one.line(10) == "WORD stop 125 node 0's launcher is gone: nobody decides on a restart"
        assert time.monotonic() - started < 5


# -- the checks: an elastic launch with restarts (launcher/checks.elastic_restarts) ----------------

ELASTIC = ["launcher=multinode", "launcher.nnodes=1:2", "restart.max=2"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            [*ELASTIC, "launcher.master_addr=10.0.0.1"],
            "launcher.nnodes=1:2: MIN:MAX with restart.max > 0 needs the c10d rendezvous: the static one has a fixed "
            "world size (set launcher.rdzv_endpoint=<node 0's host>:<port> (c10d), or give launcher.nnodes one number)",
        ),
        (
            [*ELASTIC, "launcher.rdzv_endpoint=10.0.0.1:29400", "launcher.node_timeout=null"],
            "launcher.node_timeout=None: seconds with launcher.nnodes=1:2 and restart.max > 0: every node restarts "
            "together through the nodes' liveness channel, node 0 deciding (leave launcher.node_timeout at its "
            "default (30), or restart.max=0)",
        ),
        (
            ["launcher=multinode", "launcher.nnodes=2", "restart.max=1", "launcher.rdzv_backend=etcd"]
            + ["launcher.rdzv_endpoint=10.0.0.1:2379"],
            "restart.max=1: across nodes needs node 0's address for the nodes' liveness channel; the etcd "
            "rendezvous endpoint is not node 0 (use the c10d or the static rendezvous, or restart.max=0)",
        ),
    ],
)
def test_restarts_across_nodes_need_the_nodes_watch_and_an_elastic_launch_c10d(argv, message):
    assert error_of(argv) == message


def test_an_elastic_launch_is_watched_with_restarts_and_not_without():
    """MIN:MAX without restarts is torch elastic's own (nothing watched, as before); with restarts
    node 0's channel watches the nodes, and a node says MIN:MAX in its hello."""
    c10d = [*ELASTIC[:2], "launcher.rdzv_endpoint=10.0.0.1:29400", "launcher.node_rank=1"]
    assert build([*c10d, "restart.max=0"]).nodes is None
    watch = build([*c10d, "restart.max=2"]).nodes
    assert (watch.host, watch.port, watch.nnodes, watch.min_nodes) == ("10.0.0.1", 29401, 2, 1)
    assert build([*c10d[:1], "launcher.nnodes=2", *c10d[2:], "restart.max=2"]).nodes.min_nodes is None
