"""A ``-m`` sweep's own state, from its first point to its summary: the signal handling every job
shares (the session holds one per sweep), and each job's row of a local sweep's summary
(:class:`lanes.JobResult`: the local back end's ``summary`` makes them from how each launch ended)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..names import PROG, swept
from ..rundir import Reason
from . import lanes

if TYPE_CHECKING:
    from ..run.process.signals import Interrupts


@dataclass
class Sweep:
    interrupts: Interrupts | None = None  # one Ctrl+C stops the whole sweep (cli.launch_line holds it)
    results: list[lanes.JobResult] = field(default_factory=list)  # per job, for the summary

    def interrupted(self) -> int | None:
        """The signal that interrupted this sweep, if one did."""
        return None if self.interrupts is None else self.interrupts.received

    def note(self, ended: Reason | None) -> str:
        """The summary's note on a job that ran: stopped by the sweep's signal, or by fail_fast
        (decided on how it ended, status.json's outcome)."""
        if ended is Reason.FAIL_FAST_STOP:
            return lanes.FAIL_FAST_STOP
        if self.interrupted() is not None and ended is Reason.INTERRUPTED:
            return lanes.INTERRUPTED
        return ""

    def add(self, num: int, overrides, run_dir: str, ended=None, dry_run: bool = False) -> None:
        """One job's row: ``ended`` (backends.local.Result) says how it ended, None when it never
        started; ``dry_run``: only shown."""
        result = lanes.JobResult(num, tuple(overrides))
        if dry_run:
            result.run_dir, result.note = run_dir, lanes.DRY_RUN
        elif ended is not None and ended.exit_code is None:
            result.note = ended.note
        elif ended is not None:
            result.exit_code, result.duration_s, result.run_dir = ended.exit_code, ended.duration_s, run_dir
            result.goodput = getattr(ended, "goodput", "")
            result.note = self.note(ended.ended)
        self.results.append(result)

    def summary(self) -> str:
        """The sweep's table, then (drawn into the sweep's directory) its learning curves' note."""
        text = f"[{PROG}] sweep summary\n" + lanes.summary(self.results)
        note = self._curves()
        return text + (f"\n[{PROG}] {note}" if note else "")

    def _curves(self) -> str:
        """One PNG of the jobs' learning curves, labelled by their swept values, in the sweep's
        directory (launcher/sweep/curves.py); matplotlib is imported only when there is one to draw.
        What to say about it (empty: nothing)."""
        from . import curves

        results = sorted(self.results, key=lambda r: r.num)
        labels = [" ".join(own) or f"job {r.num}" for r, own in zip(results, swept([r.overrides for r in results]))]
        ran = [(r.run_dir, label) for r, label in zip(results, labels) if r.exit_code is not None and r.run_dir]
        _, note = curves.sweep_png(ran)
        return note or ""


def first_failure(codes: Mapping | list[int]) -> int:
    """The invocation's exit code from its jobs' codes (in the order they ended): the first failure's."""
    failures = [code for code in codes if code != 0]
    return failures[0] if failures else 0
