"""The goodput ledger: where a launch's wall time went (docs/goodput.md). A leaf, pure: no I/O, no clock.

The inputs are what the launcher already times: the launch's start (the launcher process's own start
for a launch's first record, the record's opening for a sweep's later jobs) and the record's close,
and per attempt its ``phases`` (status.json; run/attempts.py's Attempt: started, failure found,
ended, and from this node's lowest rank's heartbeats as the observer saw them, run/monitor/observer.py:
the first beat (the ranks up), the first beat past the iteration it started from (the first
iteration done), the last beat and the iteration reached). The wall time is cut into contiguous
segments, each of one category (:data:`CATEGORIES`), so the parts add up to the wall time by
construction; the same segments are the timeline's bars (launcher/timeline.py).

Lost work is the training an attempt did past the checkpoint the next attempt resumed from (the
iterations redone, times that attempt's seconds per iteration, the newest first); an attempt whose
next one started over without a checkpoint lost all of its training. A script that never beats
gets what the launcher knows: its attempts' start, failure and end.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

# the categories, in the order a launch meets them (docs/goodput.md defines each)
QUEUE = "queue"  # waiting for resources before the launcher started (a batch queue)
LAUNCHER_STARTUP = "launcher_startup"  # the launcher's own start: compose, validate, probe, plan
RANK_STARTUP = "rank_startup"  # the first attempt's ranks: interpreter, imports, process group, checkpoint
FIRST_ITERATION = "first_iteration"  # the first attempt's first iteration (compilation, warm-up)
PRODUCTIVE = "productive"  # training whose iterations were kept
LOST_WORK = "lost_work"  # training redone after a restart (past the checkpoint resumed)
HANG = "hang"  # a hang: the last beat to its detection
RESTART = "restart"  # a failure to the next attempt's first iteration (detection, teardown, start-up)
TEARDOWN = "teardown"  # the last beat to the launch's end: the script's tail, the ranks' exit, the record
CATEGORIES = (QUEUE, LAUNCHER_STARTUP, RANK_STARTUP, FIRST_ITERATION, PRODUCTIVE, LOST_WORK, HANG, RESTART, TEARDOWN)
KEY = "goodput"  # status.json's key for the ledger
PHASES_KEY = "phases"  # status.json's key for each attempt's phase times (the ledger's input)
BEGAN_KEY = "launch_began"  # status.json: epoch seconds the launch began (the ledger's first instant)


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def segments(
    began: float, closed: float, phases: Sequence[Mapping], tail: str = TEARDOWN
) -> list[tuple[float, float, str, int | None]]:
    """(start, end, category, attempt) from ``began`` to ``closed``, contiguous, in time order;
    ``tail``: the category after the last phase (a launch that runs: its next attempt's restart).

    >>> p = [dict(attempt=0, started=1, ended=10, ranks_up=3, up_iteration=0, first_at=4, first_iteration=1,
    ...           last_beat=9, iteration=5, start_iteration=0)]
    >>> [(c, b - a) for a, b, c, _ in segments(0.0, 11.0, p)]
    [('launcher_startup', 1.0), ('rank_startup', 2.0), ('first_iteration', 1.0), ('productive', 5.0), ('teardown', 1.0), ('teardown', 1.0)]
    """  # noqa: E501
    out: list[tuple[float, float, str, int | None]] = []
    at = began

    def add(until: float | None, category: str, attempt: int | None) -> None:
        nonlocal at
        if until is None:
            return
        until = max(at, min(until, closed))
        if until > at:
            if out and out[-1][2] == category and out[-1][3] == attempt:
                out[-1] = (out[-1][0], until, category, attempt)
            else:
                out.append((at, until, category, attempt))
            at = until

    phases = [p for p in phases if _number(p.get("started")) is not None and _number(p.get("ended")) is not None]
    for index, phase in enumerate(phases):
        number = _int(phase.get("attempt"))
        number = index if number is None else number
        following = phases[index + 1] if index + 1 < len(phases) else None
        first_attempt = index == 0
        started, ended = float(phase["started"]), float(phase["ended"])
        found = _number(phase.get("failure_found"))
        add(started, LAUNCHER_STARTUP if first_attempt else RESTART, None if first_attempt else number)
        end = max(at, ended)
        start_iteration = _int(phase.get("start_iteration")) or 0
        up, first, last, reached, rate = _beats(phase, started, start_iteration)
        redone = _redone(phase, following, start_iteration)
        if up is None and first is None and last is None:  # no heartbeat: what the launcher knows
            lost = following is not None and not following.get("resumed_from") and redone is None
            add(found if found is not None else end, LOST_WORK if lost else PRODUCTIVE, number)
        else:
            add(up, RANK_STARTUP if first_attempt else RESTART, number)
            add(first, FIRST_ITERATION if first_attempt else RESTART, number)
            if last is not None and last > at:
                lost_s = _lost_seconds(redone, reached, start_iteration, rate, last - at)
                add(last - lost_s, PRODUCTIVE, number)
                add(last, LOST_WORK, number)
        restarted = following is not None or phase.get("restart") is True  # (a launch that runs: decided)
        if found is not None:
            after = HANG if phase.get("cause") == HANG else RESTART if restarted else TEARDOWN
            add(found, after, number)
        add(end, RESTART if restarted else TEARDOWN, number)
    add(closed, tail, None)
    return out


def _beats(
    phase: Mapping, started: float, start_iteration: int
) -> tuple[float | None, float | None, float | None, int | None, float | None]:
    """An attempt's heartbeat marks as the ledger cuts them: (ranks up, first iteration done, last
    beat, iteration reached, seconds per iteration), each None when not seen."""
    up, up_iteration = _number(phase.get("ranks_up")), _int(phase.get("up_iteration"))
    first, first_iteration = _number(phase.get("first_at")), _int(phase.get("first_iteration"))
    last, reached = _number(phase.get("last_beat")), _int(phase.get("iteration"))
    # seconds per iteration: between the first beat past the start and the last; when those are one
    # (several iterations done between two reads), from the first beat seen (an upper bound)
    rate = _rate((first, first_iteration), (last, reached)) or _rate((up, up_iteration), (last, reached))
    if up is not None and up_iteration is not None and up_iteration > start_iteration:
        # the start-up beat was overwritten before a read saw it: the ranks came up after the read
        # before (up_after), and the first iteration was done that many iterations before this beat
        first, first_iteration = up, up_iteration
        after = _number(phase.get("up_after"))
        up = after if after is not None and after >= started else None
        if rate is None and up is not None:  # the one beat seen: its iterations were done since the read before
            rate = _rate((up, start_iteration), (last, reached))  # (an upper bound, start-up included)
    if first is not None and first_iteration is not None and rate is not None:
        extra = first_iteration - start_iteration - 1  # iterations done before the first beat seen past it
        if extra > 0:
            first = max(up if up is not None else started, first - extra * rate)
    return up, first, last, reached, rate


def _lost_seconds(
    redone: int | None, reached: int | None, start_iteration: int, rate: float | None, trained_s: float
) -> float:
    """The end of ``trained_s`` (an attempt's training) the next attempt does again: its iterations
    redone at its pace; all of it when they are some but the pace is unknown; 0 without a next attempt."""
    if redone is None or reached is None:
        return 0.0
    lost_iterations = min(redone, reached - start_iteration)
    if rate is not None:
        return min(trained_s, lost_iterations * rate)
    return trained_s if lost_iterations > 0 else 0.0


def _rate(a: tuple[float | None, int | None], b: tuple[float | None, int | None]) -> float | None:
    """Seconds per iteration between two beats (None: not two beats, or no iteration between).

    >>> _rate((10.0, 2), (13.0, 5)), _rate((10.0, 2), (13.0, 2)), _rate((None, None), (13.0, 5))
    (1.0, None, None)
    """
    (t0, i0), (t1, i1) = a, b
    if t0 is None or t1 is None or i0 is None or i1 is None or i1 <= i0:
        return None
    return (t1 - t0) / (i1 - i0)


def _redone(phase: Mapping, following: Mapping | None, start_iteration: int) -> int | None:
    """The iterations of ``phase`` the next attempt does again (None: no next attempt, or unknown)."""
    if following is None:
        return None
    reached = _int(phase.get("iteration"))
    if reached is None:
        return None
    resumed = _int(following.get("start_iteration")) or 0
    return max(0, reached - max(resumed, 0))


def iterations_redone(phases: Sequence[Mapping]) -> int:
    """Every restart's iterations redone: from the checkpoint resumed to the last iteration reached.

    >>> iterations_redone([dict(iteration=7), dict(start_iteration=5, iteration=9), dict(start_iteration=9)])
    2
    """
    total = 0
    for index, phase in enumerate(phases[:-1]):
        redone = _redone(phase, phases[index + 1], 0)
        total += redone or 0
    return total


def ledger(
    began: float, closed: float, phases: Sequence[Mapping], ranks: int, queue_s: float = 0.0, tail: str = TEARDOWN
) -> dict[str, float | int | str]:
    """status.json's ``goodput``: seconds per category (rounded to ms), ``wall_s`` (their sum),
    ``rank_seconds`` (wall x ranks), ``iterations_redone``, ``restarts`` and the one-line summary.

    >>> p = [dict(attempt=0, started=1, ended=10, ranks_up=3, up_iteration=0, first_at=4, first_iteration=1,
    ...           last_beat=9, iteration=5, start_iteration=0)]
    >>> led = ledger(0, 11, p, 2); (led["productive"], led["wall_s"], led["rank_seconds"])
    (5.0, 11.0, 22.0)
    >>> led["line"]
    'goodput 45%: no restarts, start-up 4.0 s'
    """
    seconds = dict.fromkeys(CATEGORIES, 0.0)
    seconds[QUEUE] = max(0.0, queue_s)
    for start, end, category, _ in segments(began, closed, phases, tail):
        seconds[category] += end - start
    out: dict[str, float | int | str] = {key: round(value, 3) for key, value in seconds.items()}
    wall = sum(seconds.values())
    # the restarts decided (a launch that runs may be starting its next attempt)
    restarts = max(len(phases) - 1, sum(1 for phase in phases if phase.get("restart") is True))
    redone = iterations_redone(phases)
    out.update(
        wall_s=round(wall, 3),
        rank_seconds=round(wall * max(ranks, 1), 3),
        ranks=max(ranks, 1),
        restarts=restarts,
        iterations_redone=redone,
    )
    out["goodput_pct"] = round(100.0 * seconds[PRODUCTIVE] / wall, 1) if wall > 0 else 0.0
    out["line"] = line(seconds, wall, restarts, redone)
    return out


def line(seconds: Mapping[str, float], wall: float, restarts: int, redone: int) -> str:
    """``goodput 91%: 2 restarts cost 41 s, 1,200 iterations redone, start-up 12 s``.

    >>> line({PRODUCTIVE: 91, RESTART: 30, LOST_WORK: 11, LAUNCHER_STARTUP: 2, RANK_STARTUP: 10}, 100, 2, 1200)
    'goodput 91%: 2 restarts cost 41 s, 1,200 iterations redone, start-up 12 s'
    """
    percent = 100.0 * seconds.get(PRODUCTIVE, 0.0) / wall if wall > 0 else 0.0
    parts = []
    if restarts:
        cost = sum(seconds.get(k, 0.0) for k in (RESTART, LOST_WORK, HANG))
        parts.append(f"{restarts} restart{'s' if restarts != 1 else ''} cost {_secs(cost)}")
        parts.append(f"{redone:,} iteration{'s' if redone != 1 else ''} redone")
    else:
        parts.append("no restarts")
        if seconds.get(HANG, 0.0) > 0:
            parts.append(f"hang {_secs(seconds[HANG])}")
    startup = sum(seconds.get(k, 0.0) for k in (QUEUE, LAUNCHER_STARTUP, RANK_STARTUP, FIRST_ITERATION))
    parts.append(f"start-up {_secs(startup)}")
    return f"goodput {percent:.0f}%: " + ", ".join(parts)


def _secs(value: float) -> str:
    """
    >>> _secs(4.04), _secs(41.2), _secs(3725)
    ('4.0 s', '41 s', '1h02m')
    """
    if value < 10:
        return f"{value:.1f} s"
    if value < 3600:
        return f"{value:.0f} s"
    return f"{int(value // 3600)}h{int(value % 3600 // 60):02d}m"
