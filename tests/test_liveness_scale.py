"""Node 0's liveness hub with many nodes (issue 28; benchmarks/liveness_scale.py measures 256 and 1,024
real members). Cheap guards of what made it hold: node 0 does not pass over every node for each
frame it reads, takes every connection waiting when a crowd connects at once, and beats further
apart past a few hundred nodes (launcher/run/monitor/liveness.py, docs/multinode.md)."""

from __future__ import annotations

import socket
import time

import pytest

from launcher.run.monitor import liveness
from launcher.run.monitor import liveness_wire as wire
from ports import free_port
from test_liveness import channel, lost_within

MEMBERS = 100  # more than liveness.BATCH_FROM, and more than liveness.ACCEPTS_AT_ONCE


def _crowd(port: int, nnodes: int) -> list[socket.socket]:
    """``nnodes - 1`` raw members of the wire format, connected at once, each having said hello."""
    socks = []
    for node in range(1, nnodes):
        socks.append(socket.create_connection(("127.0.0.1", port), timeout=10))
        socks[-1].sendall(wire.hello(node, nnodes))
    return socks


def _all_welcomed(hub, nnodes: int, within: float) -> None:
    end = time.monotonic() + within
    while len(hub.watched()) < nnodes - 1:
        assert time.monotonic() < end, f"{len(hub.watched())} of {nnodes - 1} nodes welcomed"
        time.sleep(0.02)


@pytest.mark.timeout(60)
def test_node_0_reads_a_crowds_frames_without_a_pass_over_every_node_per_frame():
    """Before: each wake of node 0's thread passed over every node twice (the hang relay's view of
    who is connected, and the silence check), a thousand wakes a second at a thousand nodes: node
    0's CPU grew with the square of the count. Now a pass runs only while the relay has work, and
    the silence check every SWEEP_S."""
    nnodes = MEMBERS + 1
    port = free_port()
    hub = channel(0, nnodes, port, timeout=30)
    socks = _crowd(port, nnodes)
    try:
        _all_welcomed(hub, nnodes, 20)
        passes = 0
        watches = hub._watches

        def counted(peer):
            nonlocal passes
            passes += 1
            return watches(peer)

        hub._watches = counted  # every pass over the nodes asks this of each one
        frames = 0
        t0 = time.monotonic()
        while time.monotonic() - t0 < 1.0:
            for sock in socks[::10]:
                sock.sendall(b"beat\n")
                frames += 1
            time.sleep(0.002)
        time.sleep(0.3)
        assert lost_within(hub, 0) is None
        assert passes < MEMBERS, (passes, frames)  # before: about one pass (MEMBERS calls) per wake
    finally:
        for sock in socks:
            sock.close()
        hub.close(1)


@pytest.mark.timeout(60)
def test_a_crowd_connecting_at_once_is_welcomed_in_batches():
    """Node 0 takes every connection waiting at a wake (up to ACCEPTS_AT_ONCE, fewer than the
    strangers it keeps), not one per wake: with frames read in batches BATCH_S apart, one per wake
    took 20 s for a thousand nodes, and strangers dropped meanwhile had to try again."""
    nnodes = MEMBERS + 1
    port = free_port()
    hub = channel(0, nnodes, port, timeout=30)
    wakes = 0
    accept = hub._accept

    def counted():
        nonlocal wakes
        wakes += 1
        accept()

    hub._accept = counted  # called once per wake that finds the listener ready
    socks = _crowd(port, nnodes)
    try:
        _all_welcomed(hub, nnodes, 20)
        assert wakes < MEMBERS / 2, wakes  # before: one wake per connection
        for sock in socks:
            sock.settimeout(5)
            assert sock.recv(64).startswith(b"welcome\n")  # none was dropped as a stranger
    finally:
        for sock in socks:
            sock.close()
        hub.close(1)


def test_beats_are_spaced_out_past_a_few_hundred_nodes_but_never_past_a_quarter_of_the_timeout():
    assert liveness.beat_interval(30, 2) == liveness.BEAT_EVERY_S
    assert liveness.beat_interval(30, liveness.BEATS_PER_S) == liveness.BEAT_EVERY_S
    assert liveness.beat_interval(30, 1024) == 1024 / liveness.BEATS_PER_S
    assert liveness.beat_interval(30, 100_000) == 30 / 4
    assert liveness.beat_interval(3, 1024) == 3 / 4
