"""The one summary table of a submitted sweep (SLURM, Ray, Kubernetes): one row per point, its own
overrides (those not shared by all points), its job's id or why it has none, and, where the back end
followed the jobs (Ray), their state and exit code. A local sweep's table is :func:`launcher.sweep.lanes.summary`
(its jobs ran here: exit codes and durations)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..names import PROG, swept
from ..tables import table as _table
from .base import DRY_RUN, Handle, Point, Refused, Request


@dataclass(frozen=True)
class Submission:
    """One point of a submitted sweep: submitted (``job_id``), refused (``error``), or only shown
    (``error`` is :data:`DRY_RUN`); ``state``/``exit_code`` once followed."""

    overrides: tuple[str, ...]
    run_dir: str
    job_id: str | None = None
    error: str | None = None
    state: str | None = None
    exit_code: int | None = None


def table(
    submissions: Sequence,
    *,
    title: str = "sweep",
    id_header: str = "job id",
    done: str = "submitted",
    none: str = "FAILED",
    followed: bool = False,
) -> str:
    """The sweep's table. ``submissions``: :class:`Submission` (or any object with its fields);
    ``done``: what the back end did ("submitted", "created"); ``none``: the id column of a point
    that was refused; ``followed``: state and exit columns, and the failed points named."""
    head_row = ("#", id_header, *(("state", "exit") if followed else ()), "overrides", "run directory / error")
    rows = [head_row]
    for number, (s, own) in enumerate(zip(submissions, swept([s.overrides for s in submissions]))):
        dry = s.error == DRY_RUN
        job = s.job_id or (DRY_RUN if dry else none)
        where = s.run_dir if s.job_id or dry else s.error or ""
        extra = ()
        if followed:
            code = getattr(s, "exit_code", None)
            state = getattr(s, "state", None) or ("" if dry or not s.job_id else "SUBMITTED")
            extra = (state, "" if code is None else str(code))
        rows.append((str(number), job, *extra, " ".join(own) or "-", where))
    if submissions and all(s.error == DRY_RUN for s in submissions):
        nothing = "nothing submitted" if done == "submitted" else f"nothing {done}"
        head = f"[{PROG}] {title}: {len(submissions)} job(s), dry run: nothing written, {nothing}"
    else:
        count = sum(s.job_id is not None and s.error is None for s in submissions)
        head = f"[{PROG}] {title}: {count} of {len(submissions)} job(s) {done}"
        if followed:
            failed = [
                str(n)
                for n, s in enumerate(submissions)
                if getattr(s, "exit_code", None) not in (None, 0) or not s.job_id
            ]
            if failed:
                head += f"; failed: {', '.join(failed)}"
    return "\n".join([head] + _table(rows, indent="  "))


def rows(
    points: Sequence[Point],
    shown_id: Callable[[Request], str | None] = lambda request: None,
    followed: Callable[[Handle], tuple[str | None, int | None]] | None = None,
) -> list[Submission]:
    """One row per point a back end submitted, refused or only showed (a point not submitted, after
    the sweep's signal or ``fail_fast``, has none): its overrides as typed (secret values masked);
    ``shown_id``: a dry run's job id (Kubernetes names its job before it exists); ``followed``: a
    submitted job's state and exit code."""
    from ..secrets import mask_override

    out = []
    for point in points:
        overrides = tuple(mask_override(o) for o in point.launch.typed.overrides)
        outcome = point.outcome
        if isinstance(outcome, Handle):
            state, code = followed(outcome) if followed is not None else (None, None)
            out.append(Submission(overrides, outcome.run_dir, outcome.id, None, state, code))
        elif isinstance(outcome, Refused):
            out.append(Submission(overrides, "", None, outcome.error))
        elif point.shown:
            out.append(Submission(overrides, point.request.run_dir, shown_id(point.request), DRY_RUN))
    return out


def submitted(
    points: Sequence[Point],
    shown_id: Callable[[Request], str | None] = lambda request: None,
    followed: Callable[[Handle], tuple[str | None, int | None]] | None = None,
    **words,
) -> str | None:
    """``Backend.summary`` for a back end whose sweep submits jobs: :func:`table` of :func:`rows`
    (``words``: its title, id header, ...); None when no point has a row."""
    found = rows(points, shown_id, followed)
    return table(found, followed=followed is not None, **words) if found else None


def _failed(s) -> bool:
    return getattr(s, "exit_code", None) not in (None, 0) or s.job_id is None
