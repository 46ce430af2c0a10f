"""The nodes' liveness channel on the wire (run/monitor/liveness.py holds the roles): pure encoding
and decoding, no socket, no clock. Standard library only.

A frame is one line of printable ASCII words ending in ``\\n``, at most :data:`MAX_LINE` bytes::

    hello <GREETING> <node_rank> <nnodes>      a node to node 0
    welcome | refused <why> | later            node 0's answer
    beat                                       both ways, every second
    bye <code>                                 a launch ended (code 0..255)
    lost <node> <code> <text>                  node 0: that node was lost or failed
    hang | stacks | stacked | teardown ...     a hang across nodes (liveness.HangRelay reads them)

:func:`decode` turns a frame into a message, :class:`Malformed` when a known word has arguments no
launcher sends, ``None`` for a word that is not this protocol's (ignored). :class:`Frames` cuts a
stream into frames and refuses one longer than :data:`MAX_LINE`; the encoders never write one.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...names import PROG

GREETING = f"{PROG}-nodes-3"  # the protocol's name and version, in the hello
MAX_LINE = 1024  # bytes in a frame, its newline included
RELAY_WORDS = frozenset({"hang", "stacks", "stacked", "teardown"})
SIMPLE_WORDS = frozenset({"beat", "welcome", "later"})


@dataclass(frozen=True)
class Hello:
    node: int
    nnodes: int


@dataclass(frozen=True)
class Bye:
    code: int  # the launch's exit code, 0..255


@dataclass(frozen=True)
class Refused:
    why: str


@dataclass(frozen=True)
class LostNode:
    node: int
    code: int
    text: str


@dataclass(frozen=True)
class Simple:
    word: str  # beat, welcome or later


@dataclass(frozen=True)
class Relay:
    words: tuple[str, ...]  # the hang relay's line (its first word in RELAY_WORDS)


@dataclass(frozen=True)
class Malformed:
    word: str  # a word of this protocol ...
    line: str  # ... with arguments no launcher sends


Message = Hello | Bye | Refused | LostNode | Simple | Relay | Malformed


class FrameTooLong(ValueError):
    """A frame longer than :data:`MAX_LINE`: not this protocol."""


def text(value: str) -> str:
    """Free text as wire words: one line of printable ASCII (no terminal escape sequence), short
    enough for a frame with its prefix.

    >>> text("HANG on node 1: no progress\\nfrom rank 3 for 4 s – über"), text("\\x1b[2J\\x07x")
    ('HANG on node 1: no progress from rank 3 for 4 s ? ?ber', '?[2J?x')
    >>> len(text("x" * 5000)) == MAX_LINE - 32
    True
    """
    ascii_text = " ".join(value.split()).encode("ascii", errors="replace").decode()
    return "".join(char if char.isprintable() else "?" for char in ascii_text)[: MAX_LINE - 32]


def frame(line: str) -> bytes:
    """One frame: ``line`` and its newline; a line that is not one printable ASCII line of at most
    :data:`MAX_LINE` bytes is refused (ValueError).

    >>> frame("bye 0")
    b'bye 0\\n'
    >>> frame("a\\nb")
    Traceback (most recent call last):
    ...
    ValueError: not one line of printable ASCII: 'a\\nb'
    """
    if not line.isascii() or not line.isprintable():
        raise ValueError(f"not one line of printable ASCII: {line!r}")
    data = f"{line}\n".encode()
    if len(data) > MAX_LINE:
        raise FrameTooLong(f"a frame of {len(data)} bytes (at most {MAX_LINE})")
    return data


def hello(node: int, nnodes: int) -> bytes:
    return frame(f"hello {GREETING} {node} {nnodes}")


def refused(why: str) -> bytes:
    return frame(f"refused {text(why)}")


def bye(code: int) -> bytes:
    """``bye <code>``: a code outside 0..255 (not a process's) is said as 1."""
    return frame(f"bye {code if 0 <= code <= 255 else 1}")


def lost(node: int, code: int, why: str) -> bytes:
    return frame(f"lost {node} {code} {text(why)}")


def simple(word: str) -> bytes:
    assert word in SIMPLE_WORDS, word
    return frame(word)


def exit_code_of(words: list[str]) -> int | None:
    """The exit code in a ``bye <code>`` line: 0..255 (a process's), else None.

    >>> exit_code_of(["bye", "0"]), exit_code_of(["bye", "7"]), exit_code_of(["bye", "256"])
    (0, 7, None)
    >>> exit_code_of(["bye", "-1"]), exit_code_of(["bye", "x"]), exit_code_of(["bye"])
    (None, None, None)
    """
    if len(words) != 2 or not words[1].isdigit() or len(words[1]) > 3 or int(words[1]) > 255:
        return None
    return int(words[1])


def _number(word: str) -> int | None:
    return int(word) if word.isascii() and word.isdigit() else None


def decode(line: bytes) -> Message | None:
    """A frame (without its newline) as a message.

    >>> decode(b"hello " + GREETING.encode() + b" 1 2"), decode(b"bye 7"), decode(b"beat")
    (Hello(node=1, nnodes=2), Bye(code=7), Simple(word='beat'))
    >>> decode(b"lost 1 125 node 1 lost"), decode(b"stacked")
    (LostNode(node=1, code=125, text='node 1 lost'), Relay(words=('stacked',)))
    >>> decode(b"hello other-3 1 2"), decode(b"bye 300")
    (Malformed(word='hello', line='hello other-3 1 2'), Malformed(word='bye', line='bye 300'))
    >>> decode(b"GET / HTTP/1.1") is None, decode(b"lost x 1 y") is None
    (True, True)
    """
    said = line.decode("ascii", errors="replace")
    words = said.split(" ")
    what = words[0]
    if what in SIMPLE_WORDS:
        return Simple(what)
    if what in RELAY_WORDS:
        return Relay(tuple(words))
    if what == "bye":
        code = exit_code_of(words)
        return Malformed(what, said) if code is None else Bye(code)
    if what == "hello":
        node, nnodes = (_number(w) for w in (words + ["", ""])[2:4])
        if len(words) != 4 or words[1] != GREETING or node is None or nnodes is None:
            return Malformed(what, said)
        return Hello(node, nnodes)
    if what == "refused":
        return Refused(" ".join(words[1:]))
    if what == "lost":
        node, code = (_number(w) for w in (words + ["", ""])[1:3])
        if len(words) > 3 and node is not None and code is not None:
            return LostNode(node, code, " ".join(words[3:]))
    return None


class Frames:
    """A stream cut into frames. :meth:`feed` returns the complete frames (without their newline)
    and keeps the rest; a frame longer than :data:`MAX_LINE` (complete, or a rest that can no longer
    be one) is refused: the frames before it are returned, nothing after it, and ``too_long`` is set
    (the peer is not this protocol's).

    >>> frames = Frames()
    >>> frames.feed(b"beat\\nbye"), frames.feed(b" 0\\n"), frames.too_long
    ([b'beat'], [b'bye 0'], False)
    >>> frames.feed(b"beat\\n" + b"x" * MAX_LINE + b"\\nbeat\\n"), frames.too_long, frames.feed(b"beat\\n")
    ([b'beat'], True, [])
    """

    def __init__(self) -> None:
        self.buffer = b""
        self.too_long = False

    def feed(self, data: bytes) -> list[bytes]:
        if self.too_long:
            return []
        *lines, self.buffer = (self.buffer + data).split(b"\n")
        for index, line in enumerate(lines):
            if len(line) >= MAX_LINE:
                self.too_long, self.buffer = True, b""
                return lines[:index]
        if len(self.buffer) >= MAX_LINE:
            self.too_long, self.buffer = True, b""
        return lines
