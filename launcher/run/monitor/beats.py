"""Heartbeat files: how a rank shows it is alive and how far it got. Standard library only.

The worker wrapper (run/worker.py) exports ``TRAIN_MULTIGPU_HEARTBEAT_FILE=<log_dir>/rank<R>.beat``
to every rank. A beat is a write to that file: its mtime is the time of the last beat, its content
the iteration number as decimal text, optionally followed by a space and the total (``"37 150"``),
or nothing (a bare touch), trailing spaces allowed (a fixed-width record rewritten in place). The
bundled trainers beat once per iteration; a user script can too (docs/hangs.md)::

    pathlib.Path(os.environ["TRAIN_MULTIGPU_HEARTBEAT_FILE"]).touch()

The one reader, the observer (run/monitor/observer.py, once per tick for the hang watchdog and the
straggler detection), calls :func:`read_beat`: one ``stat`` and one small read, never failing on a
half-written or missing file.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from ...rundir import beat_name


@dataclass(frozen=True)
class Beat:
    mtime: float  # epoch seconds of the last beat
    iteration: int | None  # None for a bare touch (or text that is not a number)
    total: int | None


def beat_file(log_dir: Path | str, rank: int) -> Path:
    """``<log_dir>/rank<R>.beat``."""
    return Path(log_dir) / beat_name(rank)


def parse(text: str) -> tuple[int | None, int | None]:
    """(iteration, total) from a beat file's content.

    >>> parse("37 150"), parse("37\\n"), parse(""), parse("x 3"), parse("4 y"), parse("9 150     ")
    ((37, 150), (37, None), (None, None), (None, None), (4, None), (9, 150))
    """
    words = text.split()
    iteration = int(words[0]) if words and words[0].isdigit() else None
    total = int(words[1]) if iteration is not None and len(words) > 1 and words[1].isdigit() else None
    return iteration, total


def read_beat(path: Path | str) -> Beat | None:
    """The last beat written to ``path``, or None when the rank has never beaten (no file) or the
    path is not a regular file: a FIFO (opened without waiting for a writer: a plain open of one
    would block the launcher for good), a device, a directory, a symlink to one of them."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None
        text = os.read(fd, 64).decode("ascii", errors="replace")
    except OSError:
        return None
    finally:
        os.close(fd)
    mtime = info.st_mtime
    iteration, total = parse(text)
    return Beat(mtime, iteration, total)
