"""The observer: this node's ranks as their files show them, read once per tick for every policy.

Once a second (:data:`POLL_S`) the observer lists the log directory and reads, per rank, its
heartbeat file ``logs/rank<R>.beat`` (run/monitor/beats.py: one ``stat`` and one small read) and the
modification time of its log ``logs/rank<R>.log`` (output: a ``stat``). Each tick yields one frozen
:class:`Snapshot`; the policies over it are the hang watchdog (run/monitor/progress.py) and the
straggler detection (run/monitor/stragglers.py). Whichever policy asks first in a tick makes the
observer read the files; the others get the same snapshot. With every policy off nothing asks, and
no file is looked at.

The one rate estimator: per rank, the last few (time of the beat, iteration) points
(:data:`WINDOW` + 1 looks), a point added when a newer beat carries a higher iteration, all of them
dropped when the iteration goes back (a restart: measured afresh). From it, the rate over the last
interval (``iter_per_s``, progress.json) and the seconds per iteration over the whole window once it
spans :data:`MIN_ITERATIONS` iterations (``iteration_s``, the stragglers' measure: a rank is judged
over several iterations, never one).
"""

from __future__ import annotations

import os
import re
import time
from collections import Counter, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from . import beats

POLL_S = 1.0  # how often the files are looked at
WINDOW = 5  # looks (a second apart) an iteration time is measured over
MIN_ITERATIONS = 3  # a rank is measured once it has beaten over this many iterations
RANK_FILE = re.compile(r"^rank(\d+)\.(log|beat)$")


def iteration_time(points: Sequence[tuple[float, int]]) -> float | None:
    """Seconds per iteration over ``points`` ((time, iteration), oldest first), None below
    :data:`MIN_ITERATIONS` iterations.

    >>> iteration_time([(10.0, 1), (10.5, 2), (11.0, 3), (11.5, 4)])
    0.5
    >>> iteration_time([(10.0, 1), (10.5, 2)]) is None
    True
    """
    if len(points) < 2:
        return None
    (t0, i0), (t1, i1) = points[0], points[-1]
    if i1 - i0 < MIN_ITERATIONS or t1 <= t0:
        return None
    return (t1 - t0) / (i1 - i0)


@dataclass(frozen=True)
class RankSeen:
    """One rank on one tick."""

    rank: int
    first_seen: float  # epoch seconds of the tick its first file appeared on
    last_beat: float | None = None  # mtime of its last beat
    last_output: float | None = None  # mtime of its log, once it has output
    iteration: int | None = None
    total: int | None = None
    iter_per_s: float | None = None  # over the last interval between beats with a higher iteration
    iteration_s: float | None = None  # seconds per iteration over the window (None: not measured yet)
    # the goodput ledger's marks (launcher/goodput.py): the first beat seen (mtime, iteration: the
    # ranks up), and the first one seen past that iteration (an iteration done)
    up: tuple[float, int | None] | None = None
    first_progress: tuple[float, int] | None = None
    up_after: float | None = None  # the read before the one that saw its first beat (it came after)


@dataclass(frozen=True)
class Snapshot:
    """Every rank of this node seen so far, as of the tick ``tick`` (numbered from 1; 0: none yet)
    taken at ``time`` (epoch seconds)."""

    tick: int = 0
    time: float = 0.0
    ranks: Mapping[int, RankSeen] = field(default_factory=lambda: MappingProxyType({}))


@dataclass
class _Rank:
    first_seen: float
    last_beat: float | None = None
    last_output: float | None = None
    iteration: int | None = None
    total: int | None = None
    iter_per_s: float | None = None
    points: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=WINDOW + 1))
    up: tuple[float, int | None] | None = None
    first_progress: tuple[float, int] | None = None
    up_after: float | None = None

    def beat(self, beat: beats.Beat, before: float | None = None) -> None:
        """``before``: the previous read's time (None: this is the first read)."""
        if self.last_beat is not None and beat.mtime <= self.last_beat:
            return
        self.last_beat = beat.mtime
        if self.up is None:
            self.up, self.up_after = (beat.mtime, beat.iteration), before
        elif (
            self.first_progress is None
            and beat.iteration is not None
            and (self.up[1] is None or beat.iteration > self.up[1])
        ):
            self.first_progress = (beat.mtime, beat.iteration)
        if beat.iteration is None:
            return
        points = self.points
        if points and beat.iteration < points[-1][1]:  # started again (a restart): measure afresh
            points.clear()
        if not points or beat.iteration > points[-1][1]:
            points.append((beat.mtime, beat.iteration))
            if len(points) > 1:
                (t0, i0), (t1, i1) = points[-2], points[-1]
                self.iter_per_s = round((i1 - i0) / (t1 - t0), 4)
        self.iteration = beat.iteration
        self.total = beat.total if beat.total is not None else self.total

    def seen(self, rank: int) -> RankSeen:
        return RankSeen(
            rank,
            self.first_seen,
            self.last_beat,
            self.last_output,
            self.iteration,
            self.total,
            self.iter_per_s,
            iteration_time(self.points),
            self.up,
            self.first_progress,
            self.up_after,
        )


class Observer:
    """This node's ranks' files, read at most once per :data:`POLL_S` (``reads``: how many times each
    rank's beat file was read, for the tests and benchmarks)."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.snapshot = Snapshot()
        self.next_tick = 0.0  # time.monotonic() of the next read
        self.reads: Counter[int] = Counter()
        self._ranks: dict[int, _Rank] = {}

    def look(self) -> Snapshot:
        """This tick's snapshot: the files are read when :data:`POLL_S` has passed since the last
        read, else the last snapshot is returned as it was."""
        mono = time.monotonic()
        if mono >= self.next_tick:
            self.next_tick = mono + POLL_S
            self.read()
        return self.snapshot

    def read(self) -> Snapshot:
        """Read the files now (a tick out of turn: a hang found on another node)."""
        now = time.time()
        try:
            entries = list(os.scandir(self.log_dir))
        except OSError:
            entries = []
        for entry in entries:
            match = RANK_FILE.match(entry.name)
            if not match:
                continue
            rank, kind = int(match.group(1)), match.group(2)
            state = self._ranks.get(rank)
            if state is None:
                state = self._ranks[rank] = _Rank(now)
            if kind == "beat":
                self.reads[rank] += 1
                beat = beats.read_beat(entry.path)
                if beat is not None:
                    state.beat(beat, self.snapshot.time if self.snapshot.tick else None)
            else:
                try:
                    info = entry.stat()
                except OSError:
                    continue
                if info.st_size > 0:
                    state.last_output = info.st_mtime
        ranks = {rank: state.seen(rank) for rank, state in self._ranks.items()}
        self.snapshot = Snapshot(self.snapshot.tick + 1, now, MappingProxyType(ranks))
        return self.snapshot
