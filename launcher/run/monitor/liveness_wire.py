"""The nodes' liveness channel on the wire (run/monitor/liveness.py holds the roles): pure encoding
and decoding, no socket, no clock. Standard library only.

A frame is one line of printable ASCII words ending in ``\\n``, at most :data:`MAX_LINE` bytes::

    hello <GREETING> <node_rank> <nnodes>      a node to node 0 (nnodes: N, or MIN:MAX when elastic)
    welcome | refused <why> | later            node 0's answer
    standby                                    node 0, after welcome: join at the next attempt
    beat                                       both ways, every second
    bye <code>                                 a launch ended (code 0..255)
    lost <node> <code> <text>                  node 0: that node was lost or failed
    hang | stacks | stacked | teardown ...     a hang across nodes (liveness.HangRelay reads them)
    ended <attempt> <code> <verdict> <class> <text>
                                               a node's attempt ended, the node stays (restarts on): its
                                               code, its own verdict (retry or stop) and failure class
                                               (launcher/restarts.py; ``-``: none)
    restart <attempt> <nodes> <class>          node 0: every node starts attempt <attempt>, <nodes> nodes,
                                               after a failure of <class> (``-``: none known)
    stop <code> <text>                         node 0: no attempt follows; the launch ends with <code>

:func:`decode` turns a frame into a message, :class:`Malformed` when a known word has arguments no
launcher sends, ``None`` for a word that is not this protocol's (ignored). :class:`Frames` cuts a
stream into frames and refuses one longer than :data:`MAX_LINE`; the encoders never write one.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...names import PROG

GREETING = f"{PROG}-nodes-5"  # the protocol's name and version, in the hello
MAX_LINE = 1024  # bytes in a frame, its newline included
RELAY_WORDS = frozenset({"hang", "stacks", "stacked", "teardown"})
SIMPLE_WORDS = frozenset({"beat", "welcome", "later", "standby"})
VERDICTS = ("retry", "stop")  # an ended attempt's verdict, its node's own
NO_CLASS = "-"  # an ended attempt's or a restart's class when there is none


@dataclass(frozen=True)
class Hello:
    node: int
    nnodes: int  # the most nodes (MAX of MIN:MAX)
    min_nodes: int | None = None  # elastic: MIN (None: a fixed count)


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
    word: str  # beat, welcome, later or standby


@dataclass(frozen=True)
class Ended:
    attempt: int
    code: int  # the attempt's exit code, 0..255
    retry: bool  # the node's own verdict on its outcome (restart.classes, the budget, progress)
    cls: str | None  # its failure class (launcher/restarts.py), None: none
    text: str  # why it ended, for people ("rank 3 failed: exit code 3 (exception)")


@dataclass(frozen=True)
class Restart:
    attempt: int  # the attempt every node starts now
    nodes: int  # how many nodes take part in it
    cause: str | None = None  # the class of the failure it restarts after (the first node's that failed)


@dataclass(frozen=True)
class Stop:
    code: int  # the launch's exit code on every node, 0..255
    text: str  # why (node 0's words)


@dataclass(frozen=True)
class Relay:
    words: tuple[str, ...]  # the hang relay's line (its first word in RELAY_WORDS)


@dataclass(frozen=True)
class Malformed:
    word: str  # a word of this protocol ...
    line: str  # ... with arguments no launcher sends


Message = Hello | Bye | Refused | LostNode | Simple | Relay | Ended | Restart | Stop | Malformed


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


def hello(node: int, nnodes: int, min_nodes: int | None = None) -> bytes:
    """``hello <GREETING> <node> <N or MIN:MAX>``.

    >>> hello(1, 2), hello(1, 3, min_nodes=2)
    (b'hello train_multigpu-nodes-5 1 2\\n', b'hello train_multigpu-nodes-5 1 2:3\\n')
    """
    count = str(nnodes) if min_nodes is None else f"{min_nodes}:{nnodes}"
    return frame(f"hello {GREETING} {node} {count}")


def _code(code: int) -> int:
    return code if 0 <= code <= 255 else 1


def _class(cls: str | None) -> str:
    """A failure class as one wire word (``-``: none)."""
    word = text(cls or "").replace(" ", "")
    return word or NO_CLASS


def ended(attempt: int, code: int, retry: bool, cls: str | None, why: str) -> bytes:
    """``ended <attempt> <code> <verdict> <class> <text>``; a code outside 0..255 is said as 1.

    >>> ended(0, 3, True, "exit-code", "rank 1 failed"), ended(2, -9, False, None, "x")
    (b'ended 0 3 retry exit-code rank 1 failed\\n', b'ended 2 1 stop - x\\n')
    """
    verdict = VERDICTS[0] if retry else VERDICTS[1]
    return frame(f"ended {attempt} {_code(code)} {verdict} {_class(cls)} {text(why)}".rstrip())


def restart(attempt: int, nodes: int, cause: str | None) -> bytes:
    return frame(f"restart {attempt} {nodes} {_class(cause)}")


def stop(code: int, why: str) -> bytes:
    return frame(f"stop {_code(code)} {text(why)}".rstrip())


def refused(why: str) -> bytes:
    return frame(f"refused {text(why)}")


def bye(code: int) -> bytes:
    """``bye <code>``: a code outside 0..255 (not a process's) is said as 1."""
    return frame(f"bye {_code(code)}")


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
    return int(word) if word.isascii() and word.isdigit() and len(word) <= 9 else None


def _count(word: str) -> tuple[int, int | None] | None:
    """A hello's node count: ``N`` -> (N, None); ``MIN:MAX`` -> (MAX, MIN) with 1 <= MIN <= MAX."""
    low, colon, high = word.partition(":")
    if not colon:
        return None if _number(word) is None else (int(word), None)
    lowest, highest = _number(low), _number(high)
    if lowest is None or highest is None or not 1 <= lowest <= highest:
        return None
    return highest, lowest


def _read_class(word: str) -> str | None:
    return None if word == NO_CLASS else word


def _attempt_words(words: list[str]) -> Message | None:
    """``ended``, ``restart`` and ``stop``: the restarts' words (None: not one of them)."""
    what, said = words[0], " ".join(words)
    numbers = [_number(word) for word in words[1:3]] + [None, None]
    if what == "ended":
        attempt, code = numbers[0], numbers[1]
        if len(words) < 5 or attempt is None or code is None or code > 255 or words[3] not in VERDICTS:
            return Malformed(what, said)
        return Ended(attempt, code, words[3] == VERDICTS[0], _read_class(words[4]), " ".join(words[5:]))
    if what == "restart":
        if len(words) != 4 or numbers[0] is None or not numbers[1]:
            return Malformed(what, said)
        return Restart(numbers[0], numbers[1], _read_class(words[3]))  # type: ignore[arg-type]
    if what == "stop":
        if len(words) < 2 or numbers[0] is None or numbers[0] > 255:
            return Malformed(what, said)
        return Stop(numbers[0], " ".join(words[2:]))
    return None


def decode(line: bytes) -> Message | None:
    """A frame (without its newline) as a message.

    >>> decode(b"hello " + GREETING.encode() + b" 1 2"), decode(b"bye 7"), decode(b"beat")
    (Hello(node=1, nnodes=2, min_nodes=None), Bye(code=7), Simple(word='beat'))
    >>> decode(b"lost 1 125 node 1 lost"), decode(b"stacked")
    (LostNode(node=1, code=125, text='node 1 lost'), Relay(words=('stacked',)))
    >>> decode(b"hello other-3 1 2"), decode(b"bye 300")
    (Malformed(word='hello', line='hello other-3 1 2'), Malformed(word='bye', line='bye 300'))
    >>> decode(b"hello " + GREETING.encode() + b" 2 2:3"), decode(b"ended 1 3 retry exit-code rank 1 failed")
    (Hello(node=2, nnodes=3, min_nodes=2), Ended(attempt=1, code=3, retry=True, cls='exit-code', text='rank 1 failed'))
    >>> decode(b"restart 2 3 node-lost"), decode(b"stop 125 node 1 lost")
    (Restart(attempt=2, nodes=3, cause='node-lost'), Stop(code=125, text='node 1 lost'))
    >>> decode(b"restart 2 3")
    Malformed(word='restart', line='restart 2 3')
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
        node, count = _number((words + ["", ""])[2]), _count((words + ["", "", ""])[3])
        if len(words) != 4 or words[1] != GREETING or node is None or count is None:
            return Malformed(what, said)
        return Hello(node, *count)
    if what in ("ended", "restart", "stop"):
        return _attempt_words(words)
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
