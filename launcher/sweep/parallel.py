"""Running a parallel sweep (``sweep.parallel=N``): every job has been validated, planned and
recorded by its Hydra job call (:class:`launcher.session.Session` keeps them as :class:`Queued`);
:func:`run_queued` then runs them, N lanes at once, each lane's jobs one after another.

Each job is one :class:`launcher.run.supervise.Supervisor` (not exclusive: it owns only its own
processes' trees and marker); this module owns the lane threads and the signal handling across them.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from .. import record
from ..errors import UserError
from ..names import PROG
from ..plan import LaunchPlan
from ..run import procs
from ..run.signals import FORWARDED_SIGNALS, handlers
from ..run.supervise import POLL_S, Outcome, Supervisor, summarised
from .lanes import JobResult, Slot


@dataclass
class Queued:
    """A planned job of a parallel sweep, waiting for its lane."""

    num: int
    plan: LaunchPlan
    run_dir: Path
    config_yaml: str
    slot: Slot


def run_queued(queued: list[Queued], results: list[JobResult], fail_fast: bool) -> list[int]:
    """Run the planned jobs lane by lane; fill in their results; return their exit codes (0: skipped)."""
    by_num = {r.num: r for r in results}
    lanes: dict[int, list[int]] = {}
    for index, job in enumerate(queued):
        lanes.setdefault(job.slot.index, []).append(index)
    starts: dict[int, float] = {}

    def on_start(index: int) -> None:
        job = queued[index]
        starts[index] = record.write_start(job.run_dir, job.config_yaml, job.plan)
        by_num[job.num].note = ""
        print(f"[{PROG}] job {job.num} started on lane {job.slot.index}; run directory: {job.run_dir}", flush=True)

    def on_end(index: int, outcome: Outcome) -> None:
        job, code = queued[index], outcome.exit_code
        record.write_end(job.run_dir, starts[index], code, outcome.reason, outcome.failure_record())
        by_num[job.num].exit_code, by_num[job.num].duration_s = code, time.time() - starts[index]
        print(f"[{PROG}] job {job.num} exit code {code} ({outcome.reason}); run directory: {job.run_dir}", flush=True)

    jobs = [(job.plan, job.run_dir / "logs", job.slot.cpus) for job in queued]
    outcomes = run_many(jobs, list(lanes.values()), fail_fast, on_start, on_end)
    codes = []
    for job, outcome in zip(queued, outcomes):
        if outcome is None:
            by_num[job.num].note = "skipped (sweep.fail_fast)"
        codes.append(0 if outcome is None else outcome.exit_code)
    return codes


def run_many(
    jobs: list[tuple[LaunchPlan, Path, tuple[int, ...]]],
    lanes: list[list[int]],
    fail_fast: bool = False,
    on_start: Optional[Callable[[int], None]] = None,
    on_end: Optional[Callable[[int, Outcome], None]] = None,
) -> list[Optional[Outcome]]:
    """Run a parallel sweep: each lane (a list of job indexes) runs its jobs one after another, all
    lanes at once. A job given CPU cores runs pinned to them: its lane's thread sets its own CPU
    affinity before starting the job, and processes inherit the mask of the thread that starts
    them. Signals to the launcher reach every running job; with ``fail_fast`` the first failure
    stops the running jobs and skips the rest. Returns each job's outcome (None: skipped).
    ``on_start(i)``/``on_end(i, outcome)`` are called from the lane threads."""
    outcomes: list[Optional[Outcome]] = [None] * len(jobs)
    active: dict[int, Supervisor] = {}
    lock = threading.Lock()
    stopping = threading.Event()

    def lane(indexes: list[int]) -> None:
        for index in indexes:
            plan, log_dir, cpus = jobs[index]
            with lock:
                if stopping.is_set():
                    continue
                supervisor = Supervisor(plan, log_dir, exclusive=False)
                active[index] = supervisor
            if cpus:
                os.sched_setaffinity(0, cpus)  # this thread only; the job's processes inherit it
            if on_start is not None:
                on_start(index)
            try:
                supervisor.start()
                outcome = supervisor.wait()
            except UserError as err:  # the program could not be started
                print(f"[{PROG}] job {index}: {err}", file=sys.stderr, flush=True)
                outcome = Outcome(127, "could not start")
            finally:
                supervisor.close()
            outcomes[index] = outcome = summarised(outcome)
            with lock:
                active.pop(index, None)
                if outcome.exit_code != 0 and fail_fast and not stopping.is_set():
                    stopping.set()
                    for other in active.values():
                        other.stop(signal.SIGTERM, other.plan.grace_period)
            if on_end is not None:
                on_end(index, outcome)

    def on_signal(signum: int, frame: object) -> None:
        stopping.set()
        with lock:
            for supervisor in active.values():
                supervisor.on_signal(signum, frame)

    procs.become_subreaper()
    threads = [threading.Thread(target=lane, args=(indexes,), daemon=True) for indexes in lanes]
    with handlers({sig: on_signal for sig in FORWARDED_SIGNALS}):
        for thread in threads:
            thread.start()
        while any(thread.is_alive() for thread in threads):
            for thread in threads:
                thread.join(timeout=POLL_S)
    return outcomes
