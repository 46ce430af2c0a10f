"""The attempt loop: one launch as attempts, restarted by cause while they make progress
(``restart.*``, docs/recovery.md). The policy is launcher/restarts.py's (pure); this module runs it.

- Signals: the handlers are installed once for every attempt (:class:`~launcher.run.supervise.LaunchSignals`).
  A Ctrl+C while an attempt runs stops it as a launch without restarts stops; a Ctrl+C while one is
  torn down or before the next starts ends the launch there: no attempt starts after it.
- Teardown: an attempt ends only when its supervisor has reaped every process and killed every
  descendant and marked process (run/process/group.py), so the ports it bound are free again; the
  next attempt starts the same plan (the back end adds the resume arguments and
  ``TRAIN_MULTIGPU_ATTEMPT``: :class:`Resume`).
- Record: attempt 0 writes where a launch without restarts writes; attempt N >= 1 under
  ``attempt<N>/`` (rundir.RunPaths.attempt). :class:`Attempt` is what status.json keeps of each.
- Nodes: after each attempt the loop asks a :class:`Coordinator` (one node: :class:`Alone`, the
  local decision; across nodes node 0 decides and the others follow, through the liveness channel
  the loop owns and gives every attempt's supervisor).
"""

from __future__ import annotations

import functools
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Protocol

from .. import restarts
from ..names import PROG
from ..plan import LaunchPlan
from ..rundir import BEAT_FILE, Reason, RunPaths
from .monitor import liveness as liveness_mod
from .monitor.beats import read_beat
from .process.signals import Interrupts
from .supervise import LaunchSignals, Outcome, Supervisor


@dataclass(frozen=True)
class Attempt:
    """One attempt as status.json keeps it (times: epoch seconds; record.py writes them as ISO)."""

    number: int
    started: float
    ended: float
    exit_code: int
    reason: str
    outcome: Reason
    cause: str | None  # the failure class (launcher/restarts.py); None: no failure
    iterations: int | None  # the iteration its ranks' heartbeats reached (the furthest rank's)
    resumed_from: str | None  # the checkpoint it started from
    progress: bool
    detected: float | None = None  # when its failure was found (the benchmark's detection/teardown split)
    decision: str = ""  # why the loop restarted or stopped after it
    restart: bool = False  # the loop restarted after it
    # the goodput ledger's marks from its ranks' heartbeats (Supervisor.beat_marks; launcher/goodput.py)
    marks: dict = field(default_factory=dict, compare=False)

    def phase(self) -> dict:
        """status.json's ``phases`` entry (epoch seconds): the goodput ledger's and the timeline's input."""
        return {
            "attempt": self.number,
            "started": round(self.started, 3),
            "ended": round(self.ended, 3),
            "failure_found": None if self.detected is None else round(self.detected, 3),
            "outcome": self.outcome.value,
            "exit_code": self.exit_code,
            "cause": self.cause,
            "decision": self.decision,
            "restart": self.restart,
            "resumed_from": self.resumed_from,
            # the iteration it started from: its checkpoint's (None for a first attempt: not known here)
            "start_iteration": restarts.iteration_of(self.resumed_from) if self.number > 0 else None,
            **{key: round(value, 3) if isinstance(value, float) else value for key, value in self.marks.items()},
        }

    def as_dict(self) -> dict:
        return {
            "attempt": self.number,
            "exit_code": self.exit_code,
            "reason": self.reason,
            "outcome": self.outcome.value,
            "cause": self.cause,
            "iterations": self.iterations,
            "resumed_from": self.resumed_from,
            "progress": self.progress,
            "decision": self.decision,
            # epoch seconds (ms): when it started, its failure was found, it was torn down (benchmarks/recovery.py)
            "timing": {
                "started": round(self.started, 3),
                "failure_found": None if self.detected is None else round(self.detected, 3),
                "ended": round(self.ended, 3),
            },
        }


class Resume(Protocol):
    """How a restarted attempt starts, from the back end that knows the script (backends/local.py)."""

    def checkpoint(self) -> str | None:
        """The newest checkpoint now (None: none, or the launcher cannot tell where they are)."""

    def plan(self, number: int, previous: RunPaths, paths: RunPaths) -> tuple[LaunchPlan, str | None]:
        """Attempt ``number``'s plan (supervised for ``paths.logs``) and the checkpoint it resumes
        from; ``previous``: the attempt that ended (its rank 0 log names Isaac Lab's run folder)."""


class Coordinator(Protocol):
    def join(self, signal: Callable[[], int | None]) -> int | restarts.Decision:
        """Before the first attempt: the attempt this node starts at, or how it ends having run none."""

    def decide(
        self, attempt: int, outcome: Outcome, cls: str | None, judge: Callable[[str | None], restarts.Decision]
    ) -> restarts.Decision:
        """The decision every node follows after attempt ``attempt``, which ended here with class
        ``cls``; ``judge``: this node's policy for a class (this attempt's budget and progress)."""


class Alone:
    """One node: attempt 0 first, then the local decision."""

    def join(self, signal: Callable[[], int | None]) -> int:
        return 0

    def decide(
        self, attempt: int, outcome: Outcome, cls: str | None, judge: Callable[[str | None], restarts.Decision]
    ) -> restarts.Decision:
        return judge(cls)


@dataclass(frozen=True)
class Result:
    outcome: Outcome  # the launch's: the last attempt's, or the loop's stop (no progress, a signal)
    attempts: tuple[Attempt, ...]


def reached(logs: Path) -> int | None:
    """The highest iteration a rank's heartbeat in ``logs`` reports; None before any rank beat with one."""
    try:
        names = [entry.name for entry in os.scandir(logs)]
    except OSError:
        return None
    beats = [read_beat(logs / name) for name in names if BEAT_FILE.match(name)]
    iterations = [beat.iteration for beat in beats if beat is not None and beat.iteration is not None]
    return max(iterations) if iterations else None


def _stamp(checkpoint: str | None) -> tuple[str, int] | None:
    if checkpoint is None:
        return None
    try:
        return checkpoint, os.stat(checkpoint).st_mtime_ns
    except OSError:
        return checkpoint, 0


def say(line: str) -> None:
    try:
        print(f"[{PROG}] {line}", flush=True)
    except OSError:  # the terminal is gone (SIGHUP)
        pass


def run(
    plan: LaunchPlan,
    run_dir: Path,
    policy: restarts.Policy,
    resume: Resume,
    console: IO[bytes] | None = None,
    relay_usr1: bool = True,
    interrupts: Interrupts | None = None,
    coordinator: Coordinator | None = None,
    liveness: liveness_mod.NodeLiveness | None = None,
    on_attempt: Callable[[tuple[Attempt, ...]], None] | None = None,
    shown: Callable[[str | None], str | None] = lambda path: path,
) -> Result:
    """Run ``plan`` (attempt 0's, supervised for ``run_dir/logs``) and restart it as ``policy`` says.
    ``on_attempt``: called with every attempt so far after each one ends (status.json while it
    runs); ``shown``: a checkpoint's path as the console line shows it. A multi-node launch with
    restarts on (``plan.nodes``, ``restart.max > 0``): the loop owns the nodes' liveness channel for
    every attempt (node 0 binds its port before the first; a goodbye with the launch's exit code
    after the last) and node 0 decides for every node (run/monitor/coordinator.py)."""
    if liveness is not None or plan.nodes is None or policy.max == 0:
        return _run(
            plan, run_dir, policy, resume, console, relay_usr1, interrupts, coordinator, liveness, on_attempt, shown
        )
    from .monitor.coordinator import NodesCoordinator

    channel = liveness_mod.NodeLiveness(plan.nodes)
    channel.start()
    code = 1
    try:
        coordinator = coordinator or NodesCoordinator(channel)
        result = _run(
            plan, run_dir, policy, resume, console, relay_usr1, interrupts, coordinator, channel, on_attempt, shown
        )
        code = result.outcome.exit_code
        return result
    finally:
        channel.close(code)


def _run(
    plan: LaunchPlan,
    run_dir: Path,
    policy: restarts.Policy,
    resume: Resume,
    console: IO[bytes] | None,
    relay_usr1: bool,
    interrupts: Interrupts | None,
    coordinator: Coordinator | None,
    liveness: liveness_mod.NodeLiveness | None,
    on_attempt: Callable[[tuple[Attempt, ...]], None] | None,
    shown: Callable[[str | None], str | None],
) -> Result:
    coordinator = coordinator or Alone()
    paths = RunPaths(run_dir)
    attempts: list[Attempt] = []
    stalled = 0
    number, resumed_from = 0, None
    # the furthest iteration reached from each start (the checkpoint's stamp; None: from the start):
    # an attempt that starts where an earlier one did must get further to make progress
    furthest: dict[tuple[str, int] | None, int] = {}
    with LaunchSignals(interrupts) as signals:
        joined = coordinator.join(lambda: signals.received)
        if isinstance(joined, restarts.Decision):  # node 0 ended the launch before this node could join
            outcome = Outcome(joined.exit_code or 0, joined.why, joined.ended or Reason.SUCCEEDED)
            if signals.received is not None:
                outcome = _interrupted(outcome, signals.received)
            return Result(outcome, ())
        if joined:  # a node that came back joins the others' next attempt (elastic launcher.nnodes=MIN:MAX)
            number = joined
            plan, resumed_from = resume.plan(number, paths.attempt(0), paths.attempt(number))
        while True:
            here = paths.attempt(number)
            # the checkpoint it starts from: a new one after it is progress
            before = (_stamp(resumed_from) if number > 0 else _stamp(resume.checkpoint())) if policy.max > 0 else None
            started = time.time()
            supervisor = Supervisor(plan, here.logs, console, given_liveness=liveness)
            outcome = signals.run(supervisor, relay_usr1)
            ended = time.time()
            # without restarts nothing reads it (status.json records no attempts): no read of the beats
            iterations = reached(here.logs) if policy.max > 0 else None
            after = _stamp(resume.checkpoint()) if policy.max > 0 else None
            progress = restarts.progressed(
                restarts.iteration_of(resumed_from),
                iterations,
                restarts.newer_checkpoint(before, after),
                furthest.get(before),
            )
            if iterations is not None:
                furthest[before] = max(iterations, furthest.get(before, iterations))
            signal_name = outcome.failure.signal if outcome.failure is not None else None
            cls = restarts.failure_class(
                outcome.ended, outcome.diagnosis.cls if outcome.diagnosis else None, outcome.exit_code, signal_name
            )
            if number > 0:
                stalled = 0 if progress else stalled + 1
            judge = functools.partial(restarts.decide, policy, number, stalled=stalled)
            decision = coordinator.decide(number, outcome, cls, judge)
            cls = decision.cause or cls  # another node's failure, when node 0 found that one the cause
            stopped = (decision.restart or decision.ended is Reason.INTERRUPTED) and signals.received is not None
            if stopped:  # the failure stays the attempt's (its cause, status.json's failure)
                name = signal.Signals(signals.received).name
                decision = restarts.Decision(False, f"stopped by {name} before the restart")
            attempts.append(
                Attempt(
                    number,
                    started,
                    ended,
                    outcome.exit_code,
                    outcome.reason,
                    outcome.ended,
                    cls,
                    iterations,
                    resumed_from,
                    progress,
                    supervisor.failed_at,
                    decision.why,
                    decision.restart and not stopped,
                    {k: v for k, v in outcome.marks.items() if k != "failure_found"},
                )
            )
            if on_attempt is not None:
                on_attempt(tuple(attempts))
            if stopped:
                return Result(_interrupted(outcome, signals.received), tuple(attempts))
            if not decision.restart:
                return Result(_final(outcome, decision), tuple(attempts))
            number += 1
            plan, resumed_from = resume.plan(number, here, paths.attempt(number))
            if signals.received is not None:  # came while the next attempt was prepared: none starts
                return Result(_interrupted(outcome, signals.received), tuple(attempts))
            say(restarts.restart_line(number, policy, cls or "failure", iterations, shown(resumed_from)))


def _interrupted(outcome: Outcome, received: int) -> Outcome:
    """A signal between attempts ends the launch as that signal ends one (128+N); the failure that
    asked for the restart stays in the outcome (status.json's failure) and the attempts."""
    name = signal.Signals(received).name
    return replace(outcome, exit_code=128 + received, reason=f"stopped by {name}", ended=Reason.INTERRUPTED)


def _final(outcome: Outcome, decision: restarts.Decision) -> Outcome:
    """The launch's outcome: the last attempt's, unless the decision says how it ends (no progress:
    the last failure's exit code; a coordinator's word from another node)."""
    if decision.ended is None:
        return outcome
    code = decision.exit_code if decision.exit_code is not None else outcome.exit_code
    reason = restarts.NO_PROGRESS if decision.ended is Reason.NO_PROGRESS else outcome.reason
    if decision.ended is Reason.NO_PROGRESS:
        print(f"[{PROG}] stopped: {decision.why}", file=sys.stderr, flush=True)
    return replace(outcome, exit_code=code, reason=reason, ended=decision.ended)
