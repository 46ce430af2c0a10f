"""Stragglers: a rank whose iterations take much longer than the others'. Named, never stopped.

A policy over the observer's snapshot (run/monitor/observer.py: each rank's heartbeats, the
iteration number and the time of the beat, read once a second and shared with the hang watchdog).
A rank's iteration time is the observer's measure over its last few beats (``WINDOW`` + 1 looks:
the time between the first and the last divided by the iterations between them), taken once those
span at least ``MIN_ITERATIONS`` iterations (a rank is judged over several iterations, never one).
A rank whose iteration time is more than ``launcher.straggler_factor`` (default 2) times the median of the
**other** ranks' is a straggler (the median of the others: with two ranks, the median of both could
never be exceeded twice over). It is named once on the console and recorded in
``logs/progress.json`` (``stragglers``, written by the progress monitor, run/monitor/progress.py,
while it runs) and in ``status.json``; the launch goes on.

Each node's launcher sees its own ranks only; ranks that never beat with an iteration number are
not measured. ``launcher.straggler_factor=null`` turns it off (no file is looked at).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from pathlib import Path

from ...plan import LaunchPlan
from ..postmortem.failure import Failure
from .observer import Observer, Snapshot


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
    """A :class:`launcher.run.postmortem.detect.Monitor` that never fails the launch. ``say(text)``: a line of
    the launcher's own on the console; ``observer``: the ranks' files, shared with the hang watchdog
    (its own when not given)."""

    def __init__(
        self, plan: LaunchPlan, log_dir: Path, say: Callable[[str], None], observer: Observer | None = None
    ) -> None:
        self.plan, self.log_dir, self.say = plan, log_dir, say
        self.observer = observer if observer is not None else Observer(log_dir)
        self.factor = plan.straggler_factor
        self.named: dict[int, dict] = {}  # rank -> its record entry, in the order named
        self.seen = Snapshot()  # the last snapshot judged

    def record(self) -> list[dict]:
        """The stragglers named so far: ``[{"rank", "iteration_s", "median_s"}]``."""
        return list(self.named.values())

    def check(self, codes: Sequence[int | None]) -> Failure | None:
        if self.factor is None:
            return None
        snapshot = self.observer.look()
        if snapshot.tick == self.seen.tick:  # judged already: the next tick reads the files again
            return None
        self.seen = snapshot
        times = {rank: seen.iteration_s for rank, seen in snapshot.ranks.items() if seen.iteration_s is not None}
        new = [found for found in stragglers(times, self.factor) if found[0] not in self.named]
        for rank, seconds, median in new:
            self.named[rank] = {"rank": rank, "iteration_s": round(seconds, 4), "median_s": round(median, 4)}
            self.say(
                f"straggler on node {self.plan.node_rank}: rank {rank} takes {seconds:.3g} s per iteration, "
                f"the other ranks' median {median:.3g} s ({seconds / median:.1f}x; "
                f"launcher.straggler_factor={self.factor:g})"
            )
        return None
