"""Per-rank log files and the console view of them.

Every rank writes its own output, stdout and stderr interleaved, to ``<run_dir>/logs/rank<R>.log``
(R the global rank; the worker wrapper redirects file descriptors 1 and 2 there, so the rank's
child processes land there too). torchrun's own agent output goes to ``logs/torchrun.log``.

The console is a view of those files: :class:`ConsoleTail` follows the shown ranks' files and
copies what they gain to the launcher's stdout, bytes as they come for a single shown rank
(progress bars keep working), whole lines prefixed ``[node:rank]`` when all ranks are shown.

When the launcher's stdout is a terminal, the bundled trainers' per-iteration lines
(``[iter N/M] ...``, :data:`PROGRESS`) are collapsed into one live line, rewritten in place; the rank
logs, and a console that is not a terminal, keep every line.
"""

from __future__ import annotations

import collections
import contextlib
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO

from .. import files
from ..rundir import RANK_LOG, rank_log_name
from ..rundir import TORCHRUN_LOG as TORCHRUN_LOG  # (logs.TORCHRUN_LOG: detect, group, causes)

POLL_S = 0.02
# a progress line: the bundled trainers' per-iteration line (examples/trainers/trainer_outputs.py)
PROGRESS = re.compile(rb"^\[iter +\d+/\d+\] ")
_PROGRESS_HEAD = b"[iter "


def rank_log(log_dir: Path, rank: int) -> Path:
    return log_dir / rank_log_name(rank)


# the lines a pump could not write to its log (a full disk), kept for the log's readers (last_lines)
HELD_LINES = 1000
_held: dict[str, collections.deque[bytes]] = {}


def last_lines(path: Path, count: int = 20, max_bytes: int = 64 * 1024) -> list[str]:
    """The last ``count`` lines of a file ([] when it does not exist), with the lines its pump could
    not write to it (a full disk: torchrun's report must still name the failed rank)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, 2)
            size = handle.tell()
            handle.seek(max(0, size - max_bytes))
            data = handle.read()
    except OSError:
        data = b""
    held = _held.get(str(path))
    if held:
        data += b"".join(held)
    return data.decode(errors="replace").splitlines()[-count:]


class ConsoleTail:
    """Follows the shown ranks' log files on a thread and copies them to ``console``."""

    def __init__(
        self,
        log_dir: Path,
        console: IO[bytes],
        shown: Callable[[int], bool],
        node_rank: int,
        prefix: bool,
        collapse: bool = False,
    ) -> None:
        """``collapse``: the console is a terminal: progress lines are rewritten in place."""
        self.log_dir, self.console, self.shown = log_dir, console, shown
        self.node_rank, self.prefix = node_rank, prefix
        self.collapse = Collapse() if collapse and not prefix else None
        self._files: dict[int, IO[bytes]] = {}
        self._partial: dict[int, bytes] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="console-tail", daemon=True)

    def start(self) -> ConsoleTail:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Copy what is left, then stop following."""
        self._stop.set()
        self._thread.join(timeout=5)
        for rank, rest in self._partial.items():
            if rest:
                self._write(rank, rest + b"\n")
        if self.collapse is not None:
            self._write(0, self.collapse.end())
        for handle in self._files.values():
            handle.close()
        self._flush()

    def break_line(self) -> None:
        """Before a line of the launcher's own: end a live progress line (Collapse)."""
        if self.collapse is not None:
            data = self.collapse.newline()
            if data:
                self._write(0, data)

    def _discover(self) -> None:
        try:
            names = [entry.name for entry in self.log_dir.iterdir()]
        except OSError:
            return
        for name in names:
            match = RANK_LOG.match(name)
            if match and int(match.group(1)) not in self._files and self.shown(int(match.group(1))):
                try:
                    self._files[int(match.group(1))] = open(self.log_dir / name, "rb")
                except OSError:
                    pass

    def _write(self, rank: int, data: bytes) -> None:
        try:
            self.console.write(data)
        except (OSError, ValueError):
            pass

    def _flush(self) -> None:
        try:
            self.console.flush()
        except (OSError, ValueError):
            pass

    def _copy(self) -> bool:
        copied = False
        for rank, handle in sorted(self._files.items()):
            data = handle.read()
            if not data:
                continue
            copied = True
            if not self.prefix:
                self._write(rank, data if self.collapse is None else self.collapse.feed(data))
                continue
            data = self._partial.pop(rank, b"") + data
            *lines, rest = data.split(b"\n")
            self._partial[rank] = rest
            tag = f"[{self.node_rank}:{rank}] ".encode()
            if lines:
                self._write(rank, b"".join(tag + line + b"\n" for line in lines))
        if copied:
            self._flush()
        return copied

    def _run(self) -> None:
        rounds = 0
        while not self._stop.is_set():
            if rounds % 4 == 0 or not self._files:
                self._discover()
            rounds += 1
            if not self._copy():
                self._stop.wait(POLL_S)
        self._discover()
        self._copy()


class Collapse:
    r"""One shown rank's output for a terminal: each progress line replaces the one before it
    (``\r``, then erase to the end of the line); any other output starts on a line of its own.
    Everything else passes through as it comes (a partial line that may become a progress line is
    held until its end).

    >>> c = Collapse()
    >>> c.feed(b"start\n[iter    1/2] a\n[iter    2/2] b\n[it") + c.feed(b"er x\ndone\n") + c.end()
    b'start\n\r[iter    1/2] a\x1b[K\r[iter    2/2] b\x1b[K\n[iter x\ndone\n'
    """

    def __init__(self) -> None:
        self.held = b""
        self.live = False  # a progress line is on the screen, the cursor at its end
        self.midline = False  # a partial line went out as it came: the rest of it passes too

    def feed(self, data: bytes) -> bytes:
        out = []
        data, self.held = self.held + data, b""
        while data:
            cut = data.find(b"\n")
            if self.midline:
                piece, data = (data, b"") if cut < 0 else (data[: cut + 1], data[cut + 1 :])
                out.append(piece)
                self.midline = cut < 0
                continue
            if cut < 0:
                if _PROGRESS_HEAD.startswith(data[: len(_PROGRESS_HEAD)]):
                    self.held = data  # may be a progress line: wait for its end
                else:
                    out += [self.newline(), data]
                    self.midline = True
                break
            line, data = data[:cut], data[cut + 1 :]
            if PROGRESS.match(line):
                out.append(b"\r" + line.rstrip(b"\r") + b"\x1b[K")
                self.live = True
            else:
                out += [self.newline(), line + b"\n"]
        return b"".join(out)

    def newline(self) -> bytes:
        """The newline that ends a live progress line (empty when none is live)."""
        if self.live:
            self.live = False
            return b"\n"
        return b""

    def end(self) -> bytes:
        """What is left: a held partial line, the newline after a live progress line."""
        rest, self.held = self.held, b""
        return (self.newline() + rest + b"\n") if rest else self.newline()


def pump(stream: IO[bytes], log: IO[bytes], echo: Callable[[bytes], None]) -> threading.Thread:
    """Copy a child's output pipe to its log file and, line by line, through ``echo``. A log that
    cannot be written (a full disk: said once) is left out: the pipe is still read to its end (a
    child blocked on a full pipe would never end), every line still goes through ``echo``, and the
    last :data:`HELD_LINES` are kept for :func:`last_lines` (the failure's report is read from them)."""

    name = str(getattr(log, "name", ""))

    def run() -> None:
        held: collections.deque[bytes] | None = None
        for line in iter(stream.readline, b""):
            if held is None:
                try:
                    log.write(line)
                    log.flush()
                except (OSError, ValueError) as err:
                    held = _held.setdefault(name, collections.deque(maxlen=HELD_LINES))
                    held.append(line)
                    if files.out_of_space(err):
                        files.say_out_of_space(name, err)
            else:
                held.append(line)
            echo(line)
        stream.close()
        with contextlib.suppress(OSError, ValueError):
            log.close()

    thread = threading.Thread(target=run, name="pump", daemon=True)
    thread.start()
    return thread
