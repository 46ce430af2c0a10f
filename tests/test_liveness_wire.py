"""The nodes' liveness channel on the wire (launcher/run/monitor/liveness_wire.py), alone: every
message the launchers send decodes to what was meant, malformed frames are told apart from
foreign ones, and no frame longer than MAX_LINE is sent or taken. Pure: no socket, no clock."""

from __future__ import annotations

import pytest

from launcher.run.monitor import liveness_wire as wire


def one(data: bytes) -> wire.Message | None:
    """The frame ``data`` as the receiving end reads it (fed a byte at a time: frames may arrive in pieces)."""
    frames = wire.Frames()
    lines = [line for byte in data for line in frames.feed(bytes([byte]))]
    assert len(lines) == 1 and not frames.too_long and frames.buffer == b""
    return wire.decode(lines[0])


@pytest.mark.parametrize(
    ("sent", "meant"),
    [
        (wire.hello(1, 2), wire.Hello(1, 2)),
        (wire.hello(15, 16), wire.Hello(15, 16)),
        (wire.simple("welcome"), wire.Simple("welcome")),
        (wire.simple("later"), wire.Simple("later")),
        (wire.simple("beat"), wire.Simple("beat")),
        (wire.refused("node 1 is connected already"), wire.Refused("node 1 is connected already")),
        (wire.bye(0), wire.Bye(0)),
        (wire.bye(124), wire.Bye(124)),
        (wire.bye(-9), wire.Bye(1)),  # not a process's exit code: said as 1
        (wire.bye(300), wire.Bye(1)),
        (
            wire.lost(2, 125, "node 2 (10.0.0.3) lost: no beat for 30 s"),
            wire.LostNode(2, 125, "node 2 (10.0.0.3) lost: no beat for 30 s"),
        ),
        (
            wire.frame("stacks 2 " + wire.text("HANG on node 2:\nrank 5")),
            wire.Relay(("stacks", "2", "HANG", "on", "node", "2:", "rank", "5")),
        ),
        (wire.frame("teardown"), wire.Relay(("teardown",))),
        # restarts across nodes, elastic nodes (issue 20)
        (wire.hello(2, 3, min_nodes=2), wire.Hello(2, 3, 2)),
        (wire.hello(1, 2, min_nodes=1), wire.Hello(1, 2, 1)),
        (wire.simple("standby"), wire.Simple("standby")),
        (
            wire.ended(0, 3, True, "exit-code", "rank 1 failed: exit code 3"),
            wire.Ended(0, 3, True, "exit-code", "rank 1 failed: exit code 3"),
        ),
        (wire.ended(4, 0, False, None, ""), wire.Ended(4, 0, False, None, "")),
        (wire.ended(1, 300, False, "a class\n", "x\ny"), wire.Ended(1, 1, False, "aclass", "x y")),
        (wire.restart(1, 2, "node-lost"), wire.Restart(1, 2, "node-lost")),
        (wire.restart(1, 2, None), wire.Restart(1, 2, None)),
        (wire.stop(125, "node 1 lost"), wire.Stop(125, "node 1 lost")),
        (wire.stop(0, ""), wire.Stop(0, "")),
    ],
)
def test_every_message_round_trips(sent, meant):
    assert sent.endswith(b"\n") and sent.count(b"\n") == 1 and len(sent) <= wire.MAX_LINE
    assert one(sent) == meant


@pytest.mark.parametrize(
    "line",
    [
        b"hello train_multigpu-nodes-2 1 2",  # another version of the protocol
        b"hello " + wire.GREETING.encode() + b" 1",
        b"hello " + wire.GREETING.encode() + b" one 2",
        b"hello " + wire.GREETING.encode() + b" 1 2 3",
        b"hello " + wire.GREETING.encode() + b" -1 2",
        b"bye",
        b"bye x",
        b"bye -1",
        b"bye 256",
        b"bye 0 0",
        b"bye \xff",
        b"hello " + wire.GREETING.encode() + b" 1 3:2",  # MIN above MAX
        b"hello " + wire.GREETING.encode() + b" 1 0:2",
        b"hello " + wire.GREETING.encode() + b" 1 1:2:3",
        b"ended",
        b"ended 1 3",
        b"ended 1 3 maybe hang why",
        b"ended 1 3 retry",  # no class (nodes-4's frame)
        b"ended x 3 retry hang why",
        b"ended 1 256 retry hang why",
        b"ended 99999999999 1 retry hang why",
        b"restart 1",
        b"restart 1 2",  # no class (nodes-4's frame)
        b"restart 1 0 hang",
        b"restart one 2 hang",
        b"restart 1 2 hang 3",
        b"stop",
        b"stop 300 why",
        b"stop x why",
    ],
)
def test_a_known_word_with_arguments_no_launcher_sends_is_malformed(line):
    message = wire.decode(line)
    assert isinstance(message, wire.Malformed) and message.word == line.split(b" ")[0].decode()
    assert message.line == line.decode("ascii", errors="replace")


@pytest.mark.parametrize(
    "line", [b"", b"GET / HTTP/1.1", b"SSH-2.0-OpenSSH_9.6", b"lost x 1 y", b"lost 1 2", b"\x00\x01"]
)
def test_a_foreign_line_is_not_a_message(line):
    assert wire.decode(line) is None


def test_a_frame_longer_than_max_line_is_refused_whole_or_in_pieces():
    frames = wire.Frames()
    assert frames.feed(b"beat\n" + b"x" * (wire.MAX_LINE - 2)) == [b"beat"] and not frames.too_long
    assert frames.feed(b"x") == [] and not frames.too_long  # MAX_LINE - 1 bytes: a frame once its newline comes
    assert frames.feed(b"x") == [] and frames.too_long and frames.buffer == b""  # it can no longer be a frame
    assert frames.feed(b"\nbeat\n") == []  # nothing after it is taken
    frames = wire.Frames()
    longest = b"y" * (wire.MAX_LINE - 1)  # with its newline: MAX_LINE bytes
    assert frames.feed(longest + b"\n") == [longest] and not frames.too_long
    assert frames.feed(b"bye 3\n" + longest + b"y\nbeat\n") == [b"bye 3"] and frames.too_long


def test_no_frame_longer_than_max_line_is_sent():
    assert len(wire.lost(1, 125, "z" * 10 * wire.MAX_LINE)) <= wire.MAX_LINE
    assert len(wire.refused("why " * wire.MAX_LINE)) <= wire.MAX_LINE
    with pytest.raises(wire.FrameTooLong, match=f"at most {wire.MAX_LINE}"):
        wire.frame("w" * wire.MAX_LINE)
    for bad in ("two\nlines", "escape \x1b[2J", "über"):
        with pytest.raises(ValueError, match="not one line of printable ASCII"):
            wire.frame(bad)
