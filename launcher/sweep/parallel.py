"""Running a parallel sweep (``sweep.parallel=N``): every job has been validated, planned and
planned by the local back end's ``dryrun`` (:mod:`launcher.backends.local`, which queues them as
:class:`Queued`); :func:`run_queued` then runs them, N lanes at once, each lane's jobs one after another.

Each job is one :class:`launcher.run.supervise.Supervisor` (not exclusive: it owns only its own
processes' trees and marker); this module owns the lane threads and the signal handling across them.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import record
from ..errors import EXIT_USAGE, UserError, one_line
from ..names import PROG
from ..plan import LaunchPlan
from ..run.process import procs
from ..run.process.signals import Interrupts
from ..run.supervise import POLL_S, Outcome, Supervisor, summarised
from ..rundir import Reason, RunPaths
from .lanes import FAIL_FAST_STOP, SKIPPED_FAIL_FAST, SKIPPED_INTERRUPTED, Slot


@dataclass
class Queued:
    """A planned job of a parallel sweep, waiting for its lane."""

    num: int
    plan: LaunchPlan
    run_dir: Path
    config_yaml: str
    slot: Slot
    composition: dict | None = None  # <run_dir>/composition.json (record.composition)
    planned: Any = None  # backends.local.Planned: what LocalBackend.ended reads after the job


def run_queued(
    queued: list[Queued],
    ended: Callable[[Queued, float, Outcome], None],
    skipped: Callable[[Queued, str], None],
    fail_fast: bool,
    interrupts: Interrupts | None,
) -> None:
    """Run the planned jobs lane by lane (the local back end's ``submit_all`` of a parallel sweep).
    ``ended(job, started, outcome)`` closes a job's record, in the order the jobs end (under the
    lanes' lock: the first failure is reported first); ``skipped(job, note)`` for a job that never
    started."""
    lanes: dict[int, list[int]] = {}
    for index, job in enumerate(queued):
        lanes.setdefault(job.slot.index, []).append(index)
    starts: dict[int, float] = {}

    def on_start(index: int) -> None:
        job = queued[index]
        RunPaths(job.run_dir).logs.mkdir(parents=True, exist_ok=True)
        starts[index] = record.write_start(job.run_dir, job.config_yaml, job.plan, job.composition)
        print(f"[{PROG}] job {job.num} started on lane {job.slot.index}; run directory: {job.run_dir}", flush=True)

    def on_end(index: int, outcome: Outcome) -> None:
        job = queued[index]
        ended(job, starts[index], outcome)
        print(
            f"[{PROG}] job {job.num} exit code {outcome.exit_code} ({outcome.reason}); run directory: {job.run_dir}",
            flush=True,
        )

    def on_skip(index: int, reason: str) -> None:
        skipped(queued[index], reason)

    jobs = [(job.plan, RunPaths(job.run_dir).logs, job.slot.cpus) for job in queued]
    run_many(jobs, list(lanes.values()), fail_fast, on_start, on_end, interrupts, on_skip)


def run_many(
    jobs: list[tuple[LaunchPlan, Path, tuple[int, ...]]],
    lanes: list[list[int]],
    fail_fast: bool = False,
    on_start: Callable[[int], None] | None = None,
    on_end: Callable[[int, Outcome], None] | None = None,
    interrupts: Interrupts | None = None,
    on_skip: Callable[[int, str], None] | None = None,
) -> list[Outcome | None]:
    """Run a parallel sweep: each lane (a list of job indexes) runs its jobs one after another, all
    lanes at once. A job given CPU cores runs pinned to them: its lane's thread sets its own CPU
    affinity before starting the job, and processes inherit the mask of the thread that starts
    them. A signal to the launcher stops every running job and starts no more (``interrupts``: the
    sweep's, else one held for this call); with ``fail_fast`` the first failure halts the running
    jobs (outcome ``stopped (sweep.fail_fast)``) and skips the rest. Returns each job's outcome
    (None: skipped). ``on_start(i)``, ``on_end(i, outcome)`` and ``on_skip(i, reason)`` are called
    from the lane threads, ``on_end`` in the order the jobs end."""
    outcomes: list[Outcome | None] = [None] * len(jobs)
    lock = threading.Lock()
    failed = threading.Event()

    def lane(indexes: list[int]) -> None:
        for index in indexes:
            plan, log_dir, cpus = jobs[index]
            with lock:  # decided and attached at once: a failure or a signal from now on reaches it
                skip = (
                    SKIPPED_INTERRUPTED if hub.received is not None else SKIPPED_FAIL_FAST if failed.is_set() else None
                )
                if skip is None:
                    supervisor = Supervisor(plan, log_dir, exclusive=False)
                    hub.attach(supervisor)
            if skip is not None:
                if on_skip is not None:
                    on_skip(index, skip)
                continue
            if cpus:
                os.sched_setaffinity(0, cpus)  # this thread only; the job's processes inherit it
            if on_start is not None:
                on_start(index)
            try:
                supervisor.start()
                outcome = supervisor.wait()
            except UserError as err:  # the program could not be started: as a single launch says it
                print(f"{PROG}: error: {one_line(str(err))}", file=sys.stderr, flush=True)
                outcome = Outcome(EXIT_USAGE, f"not started: {err}", Reason.NOT_STARTED)
            finally:
                hub.detach(supervisor)
                supervisor.close()
            outcomes[index] = outcome = summarised(outcome)
            with lock:
                if outcome.exit_code != 0 and not outcome.halted and fail_fast and not failed.is_set():
                    failed.set()
                    for other in hub.running():
                        other.halt(FAIL_FAST_STOP)
                if on_end is not None:  # under the lock: the first failure is reported first
                    on_end(index, outcome)

    procs.become_subreaper()
    threads = [threading.Thread(target=lane, args=(indexes,), daemon=True) for indexes in lanes]
    with contextlib.ExitStack() as stack:
        hub = interrupts if interrupts is not None else stack.enter_context(Interrupts())
        for thread in threads:
            thread.start()
        while any(thread.is_alive() for thread in threads):
            for thread in threads:
                thread.join(timeout=POLL_S)
    return outcomes
