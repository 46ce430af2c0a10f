"""Stragglers: a rank whose iterations take much longer than the others'. Named, never stopped.

From each rank's heartbeats (run/beats.py: the iteration number and the time of the beat), once a
second, the monitor keeps the last few (time of the beat, iteration) points per rank of this node
(:data:`WINDOW` + 1 looks). A rank's iteration time is the time between the first and the last of
them divided by the iterations between them; it is measured once those span at least
:data:`MIN_ITERATIONS` iterations (a rank is judged over several iterations, never one). A rank whose
iteration time is more than ``launcher.straggler_factor`` (default 2) times the median of the
**other** ranks' is a straggler (the median of the others: with two ranks, the median of both could
never be exceeded twice over). It is named once on the console and recorded in
``logs/progress.json`` (``stragglers``, written by the progress monitor, run/progress.py, while it runs)
and in ``status.json``; the launch goes on.

Each node's launcher sees its own ranks only; ranks that never beat with an iteration number are
not measured. ``launcher.straggler_factor=null`` turns it off (no file is looked at).
"""

from __future__ import annotations

import os
import statistics
import time
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path

from ..plan import LaunchPlan
from ..rundir import BEAT_FILE
from . import beats
from .failure import Failure

POLL_S = 1.0
WINDOW = 5  # looks (a second apart) an iteration time is measured over
MIN_ITERATIONS = 3  # a rank is measured once it has beaten over this many iterations


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


def stragglers(times: dict[int, float], factor: float) -> list[tuple[int, float, float]]:
    """(rank, its iteration time, the other ranks' median) for each rank slower than ``factor``
    times that median.

    >>> stragglers({0: 0.1, 1: 0.1, 2: 0.45, 3: 0.11}, 2.0)
    [(2, 0.45, 0.1)]
    >>> stragglers({0: 0.1, 1: 0.15}, 2.0)
    []
    """
    found = []
    for rank, seconds in sorted(times.items()):
        others = [value for other, value in times.items() if other != rank]
        if not others:
            continue
        median = statistics.median(others)
        if median > 0 and seconds > factor * median:
            found.append((rank, seconds, median))
    return found


class StragglerMonitor:
    """A :class:`launcher.run.detect.Monitor` that never fails the launch. ``say(text)``: a line of
    the launcher's own on the console."""

    def __init__(self, plan: LaunchPlan, log_dir: Path, say: Callable[[str], None]) -> None:
        self.plan, self.log_dir, self.say = plan, log_dir, say
        self.factor = plan.straggler_factor
        self.points: dict[int, deque[tuple[float, int]]] = {}
        self.named: dict[int, dict] = {}  # rank -> its record entry, in the order named
        self.next_poll = 0.0

    def record(self) -> list[dict]:
        """The stragglers named so far: ``[{"rank", "iteration_s", "median_s"}]``."""
        return list(self.named.values())

    def _observe(self) -> None:
        try:
            entries = list(os.scandir(self.log_dir))
        except OSError:
            return
        for entry in entries:
            match = BEAT_FILE.match(entry.name)
            if not match:
                continue
            beat = beats.read_beat(entry.path)
            if beat is None or beat.iteration is None:
                continue
            points = self.points.setdefault(int(match.group(1)), deque(maxlen=WINDOW + 1))
            if not points or beat.iteration > points[-1][1]:
                points.append((beat.mtime, beat.iteration))
            elif beat.iteration < points[-1][1]:  # started again (a restart): measure afresh
                points.clear()
                points.append((beat.mtime, beat.iteration))

    def check(self, codes: Sequence[int | None]) -> Failure | None:
        if self.factor is None:
            return None
        mono = time.monotonic()
        if mono < self.next_poll:
            return None
        self.next_poll = mono + POLL_S
        self._observe()
        times = {rank: t for rank, points in self.points.items() if (t := iteration_time(points)) is not None}
        new = [found for found in stragglers(times, self.factor) if found[0] not in self.named]
        for rank, seconds, median in new:
            self.named[rank] = {"rank": rank, "iteration_s": round(seconds, 4), "median_s": round(median, 4)}
            self.say(
                f"straggler on node {self.plan.node_rank}: rank {rank} takes {seconds:.3g} s per iteration, "
                f"the other ranks' median {median:.3g} s ({seconds / median:.1f}x; "
                f"launcher.straggler_factor={self.factor:g})"
            )
        return None
