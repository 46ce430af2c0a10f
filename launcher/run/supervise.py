"""Runs a launch plan and supervises it, from start to outcome. The work is done by components:
the process group (run/process/group.py: start, signal, kill, reap), the monitors that detect failures
(run/postmortem/detect.py, and the hang watchdog run/monitor/progress.py), and the console view (run/console.py).
This module decides when to stop and how the launch ends.

Processes
    Every process the launcher starts (torchrun, or one per JAX rank) runs in its own session, so a
    Ctrl+C on the terminal reaches the launcher alone, and it dies with the launcher
    (``PR_SET_PDEATHSIG``). Each rank runs behind the worker wrapper (launcher/run/worker.py), which
    also dies with its parent, writes the rank's log and records a non-zero exit.

Signals
    SIGINT, SIGTERM and SIGHUP are forwarded once, to each started process's group. For torchrun
    that group is torchrun alone: torchrun puts every worker in a session of its own and forwards the
    signal to each worker group itself, so a worker gets it exactly once and torch elastic shuts its
    workers down in its own order. JAX ranks get it directly, group-wide. ``launcher.grace_period``
    seconds later (default 30) every process left in the launch gets SIGKILL; a second Ctrl+C does
    that at once. Exit code 128+N after signal N (130 SIGINT, 143 SIGTERM, 129 SIGHUP), unless a
    rank failed first.

Fail fast
    The first rank that exits non-zero (seen through its exit record, its exit status or torchrun's
    report) ends the launch: the other ranks get SIGTERM (torchrun sends it itself, every
    ``--monitor_interval``, 0.1 s by default) and, ``FAILURE_KILL_S`` later, everything left gets
    SIGKILL. The launch exits with that rank's own exit code, and prints the failure summary with
    its cause (run/postmortem/causes.py: the class, a one-line fix, the ranks that only followed it; OOM
    counters read at the start, run/postmortem/oom.py). Stragglers (run/monitor/stragglers.py) are named, never stopped.

Hangs
    A rank that shows no progress (heartbeat or output) for ``launcher.hang_timeout`` seconds, or
    none at all for ``launcher.startup_timeout`` after it started, ends the launch as a failure with
    every rank's stack saved: exit code 124, reason ``hang`` (run/monitor/progress.py, docs/hangs.md).
    SIGUSR2 takes every rank's stack without stopping anything.

SIGUSR1
    SLURM's time-limit / preemption warning (docs/slurm.md) is not a stop: every process starts
    with USR1 ignored (an ignored disposition survives exec, so a worker that does not handle it is
    not killed by it; one that installs a handler gets it), and, with ``relay_usr1``, a USR1 to the
    launcher is passed on to every group. Under SLURM the step's signal reaches every process
    directly, so the CLI turns the relay off there.

Sweeps
    A sweep (``-m``) holds the signals for its whole length (run/process/signals.py's ``Interrupts``), not
    job by job: the first SIGINT/SIGTERM/SIGHUP stops the running job(s) as above and the sweep
    starts no more; a second Ctrl+C kills at once. ``sweep.fail_fast`` stops a parallel sweep's
    other jobs with :meth:`Supervisor.halt`: their outcome says so instead of reporting a failure.

Nodes
    In a multi-node launch this node's launcher keeps a liveness beat with the others' (run/monitor/liveness.py,
    a monitor like the failure detector): another node lost ends the launch here too, as a failure
    (SIGTERM to torchrun or the JAX ranks), with exit code 125 and reason ``node lost``; another node
    whose launch failed ends it with that node's exit code and reason ``node failed``. A hang found on
    any node makes every node take its own ranks' stacks before any node stops a rank; then every
    node ends with 124, reason ``hang``.

No orphans
    The launcher is a child subreaper, so descendants whose parent died are re-parented to it; at
    the end every descendant, and every process carrying the launch's marker, is killed. A watchdog
    process (launcher/run/watchdog.py) does the same if the launcher itself is SIGKILLed.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO

from .. import paths, restarts
from ..names import LAUNCH_ID_VAR, PROG
from ..plan import LaunchPlan, supervised
from ..rundir import Reason
from .console import Console
from .monitor import liveness
from .monitor.observer import Observer
from .monitor.progress import EXIT_HANG, HANG_REASON, HANG_SOURCE, ProgressMonitor
from .monitor.stragglers import StragglerMonitor
from .postmortem import causes, flight_recorder, oom
from .postmortem import failure as failure_mod
from .postmortem.detect import TORCHRUN_CLOSING, TORCHRUN_SIGNALLED, FailureDetector, Monitor
from .postmortem.failure import Failure
from .process.group import ProcessGroup
from .process.signals import RELAYED_SIGNALS, STACK_SIGNALS, Interrupts, handlers

POLL_S = 0.05
FAILURE_KILL_S = 1.0  # after a rank failed, the others get this long before SIGKILL
REAP_EVERY_S = 1.0
WORKER_WRAPPER = paths.WORKER_WRAPPER
EXIT_PORT_IN_USE = 2  # the same code as the preflight check's (a user error, nothing trained)
# a stop signal while torchrun tears its workers down after a failure of its own finding: the ranks
# are killed (not torchrun), and torchrun gets this long to report the rank that failed
TORCHRUN_REPORT_S = 5.0


@dataclass(frozen=True)
class Outcome:
    exit_code: int
    reason: str  # for people ("stopped by SIGINT", "port 29500 in use")
    ended: Reason  # for readers: status.json's outcome
    failure: Failure | None = None
    summary: str = ""  # the failure summary as printed
    port_in_use: int | None = None  # torchrun found this port taken (the CLI names the key)
    halted: bool = False  # stopped by the caller (Supervisor.halt), not failed
    context: causes.Context | None = None  # what run/postmortem/causes.py needs to name the cause (summarised)
    stragglers: tuple[dict, ...] = ()  # run/monitor/stragglers.py: the ranks named slow (status.json keeps them)
    diagnosis: causes.Diagnosis | None = None
    # the goodput ledger's marks from the ranks' heartbeats (Supervisor.beat_marks) and when the
    # failure was found (launcher/goodput.py)
    marks: dict = field(default_factory=dict, compare=False)

    def failure_record(self) -> dict | None:
        """What status.json keeps of the failure (None after a success or a signal)."""
        if self.failure is None:
            return None
        cause = self.diagnosis.record() if self.diagnosis is not None else {}
        return {**self.failure.as_dict(), **cause, "summary": self.summary}


def prepare(plan: LaunchPlan, log_dir: Path) -> LaunchPlan:
    """The plan with the worker wrapper and a fresh launch id (what command.sh should show)."""
    return supervised(plan, WORKER_WRAPPER, str(log_dir), uuid.uuid4().hex)


class Supervisor:
    """One launch: its process group, its monitors and its console; decides when to stop.
    ``exclusive``: see :class:`~launcher.run.process.group.ProcessGroup`."""

    def __init__(
        self,
        plan: LaunchPlan,
        log_dir: Path,
        console: IO[bytes] | None = None,
        exclusive: bool = True,
        given_liveness: liveness.NodeLiveness | None = None,
    ) -> None:
        """``given_liveness``: the nodes' channel when it outlives this launch (the attempt loop's, run/attempts.py):
        this supervisor uses it and neither starts nor closes it. None: it makes and closes its own."""
        if LAUNCH_ID_VAR not in plan.env:
            plan = prepare(plan, log_dir)
        self.plan = plan
        self.group = ProcessGroup(plan, plan.env[LAUNCH_ID_VAR], log_dir, exclusive)
        self.console = Console(
            plan,
            console if console is not None else sys.stdout.buffer,
            agent_quiet=lambda: self.stopping or self.failure is not None,
        )
        self.detector = FailureDetector(plan, log_dir)
        # the ranks' files, read once per tick for both policies below (run/monitor/observer.py)
        self.observer = Observer(log_dir)
        self.stragglers = StragglerMonitor(plan, log_dir, self.console.say, self.observer)  # never a failure
        # multi-node: this node's launcher and the others' watch each other (run/monitor/liveness.py)
        self.owns_liveness = given_liveness is None
        if given_liveness is not None:
            self.liveness: liveness.NodeLiveness | None = given_liveness
        else:
            self.liveness = liveness.NodeLiveness(plan.nodes) if plan.nodes is not None else None
        self.progress = ProgressMonitor(  # run/monitor/progress.py; the one writer of progress.json
            plan,
            log_dir,
            self.group.rank_pids,
            self.console.say,
            self.stragglers.record,
            self.liveness.report_hang if self.liveness is not None else lambda headline: None,
            self.observer,
        )
        self.monitors: list[Monitor] = [self.detector, self.progress, self.stragglers]
        if self.liveness is not None:
            self.monitors.append(self.liveness)
        self.found_by: Monitor | None = None  # the monitor that found the failure
        self.log_dir = log_dir
        self.signal_received: int | None = None
        self.failure: Failure | None = None
        self.kill_at: float | None = None
        self.stopping = False
        self.stop_signal: int | None = None  # what stop() sent (processes started later get it too)
        self.exit_code: int | None = None  # the outcome's (None: wait() did not end normally)
        self.halted: str | None = None  # why the sweep stopped this launch (halt)
        self.oom_before: oom.Counters | None = None  # OOM-kill counters at the start (run/postmortem/causes.py)
        self.statuses_at_failure: tuple[tuple[int, int, int], ...] = ()  # JAX ranks' exits when it failed
        self.live_at_failure: frozenset[int] | None = None  # torchrun's ranks still running then
        self.failed_at: float | None = None  # when the failure was found (epoch seconds; run/attempts.py)
        # torchrun said it stops its workers (SIGTERM) before anything here asked it to: a rank failed
        # that the detector hears of only from torchrun's report, after that teardown
        self.torchrun_failing = False
        self.torchrun_failing_at: float | None = None  # since when (monotonic)
        self.torchrun_signalled: int | None = None  # the signal torchrun said it got from outside
        self.ranks_killed = False  # the ranks got SIGKILL (kill_ranks): torchrun's teardown is over

    def start(self) -> None:
        self.oom_before = oom.read()
        flight_recorder.prepare(self.plan.env)
        if self.liveness is not None and self.owns_liveness:  # node 0 binds its port before anything starts
            self.liveness.start()
        self.group.start(self._agent_line, self._pending_signal)
        self.console.start(self.log_dir)

    def _agent_line(self, line: bytes) -> None:
        """torchrun's own output (the pump's thread): to the console, and noted when it says that it
        stops its workers while nothing here asked it to (a rank failed; its report comes after)."""
        signalled = TORCHRUN_SIGNALLED.search(line)
        if signalled and self.stop_signal is None:
            # torchrun itself got a signal from outside (a scheduler signals every process of a step:
            # SLURM's requeue, scancel; torchrun may get it before this launcher does): a stop, not a
            # failure (the wait loop takes it as this launcher's own signal: grace period, 128+N)
            self.torchrun_signalled = int(signalled.group(1))
        if (
            not self.stopping
            and self.signal_received is None
            and self.torchrun_signalled is None
            and not self.detector.elastic_restarts  # (its own restarts stop workers too, and go on)
            and TORCHRUN_CLOSING.search(line)
        ):
            self.torchrun_failing_at = self.torchrun_failing_at or time.monotonic()
            self.torchrun_failing = True
        self.console.echo_agent(line)

    def _pending_signal(self) -> int | None:
        """A signal (or a halt) that came before or while starting."""
        return self.stop_signal

    # -- stopping -------------------------------------------------------------------------
    def stop(self, signum: int, kill_after: float) -> None:
        """Forward ``signum`` once to every group; everything left gets SIGKILL ``kill_after`` s later."""
        if self.stopping:
            return
        self.stopping = True
        self.stop_signal = signum
        self.kill_at = time.monotonic() + kill_after
        self.group.signal(signum)

    def halt(self, reason: str) -> None:
        """Stop the launch for a reason of the caller's (a sweep's fail_fast): SIGTERM, SIGKILL after
        the grace period; its outcome is ``reason``, not a failure of its own."""
        if self.halted is None and self.signal_received is None and self.failure is None:
            self.halted = reason
        self.stop(signal.SIGTERM, self.plan.grace_period)

    def kill_all(self) -> None:
        self.group.kill_all()

    def relay(self, signum: int, _frame: object) -> None:
        """USR1 to every process of the launch, torch workers included (torchrun does not forward it)."""
        self.group.relay(signum)

    def on_stacks(self, _signum: int, _frame: object) -> None:
        """SIGUSR2: every rank's stack into <run_dir>/stacks/<stamp>/, the launch goes on."""
        self.progress.request_stacks()

    def on_signal(self, signum: int, _frame: object) -> None:
        if self.signal_received is not None and signum == signal.SIGINT:
            self.kill_at = 0.0  # second Ctrl+C: now (done by the wait loop)
            return
        if self.failure is not None and self.signal_received is None:  # a failed launch being torn down
            self.signal_received = signum
            self.kill_at = 0.0  # nothing left to save: what is left goes now
            return
        if self.torchrun_failing and self.signal_received is None and not self.stopping:
            # torchrun is tearing its workers down after a failure it will report: the ranks go now,
            # torchrun reports (the failure stays the attempt's), everything left goes soon after
            self.signal_received = signum
            self.stopping = True
            self.kill_at = time.monotonic() + TORCHRUN_REPORT_S
            self._kill_ranks()
            return
        if self.signal_received is None:
            self.signal_received = signum
        self.stop(signum, self.plan.grace_period)

    def _kill_ranks(self) -> None:
        if not self.ranks_killed:
            self.ranks_killed = True
            self.group.kill_ranks()

    def _on_failure(self) -> None:
        kill_after = min(self.plan.grace_period, FAILURE_KILL_S)
        if self.detector.torchrun and self.found_by is self.detector:
            # a rank failed: torchrun stops its workers itself (and reports); it gets the same short time
            self.stopping = True
            self.kill_at = time.monotonic() + kill_after
        else:
            self.stop(signal.SIGTERM, kill_after)

    # -- waiting --------------------------------------------------------------------------
    def _check(self, codes: list[int | None]) -> Failure | None:
        for monitor in self.monitors:
            found = monitor.check(codes)
            if found is not None:
                self.found_by = monitor
                return found
        return None

    def _wait_for_every_nodes_stacks(self) -> None:
        """A hang: the other nodes take their ranks' stacks before any rank here is stopped (stopping
        them breaks the collectives the others' ranks wait in). Bounded by liveness.STACKS_WAIT_S."""
        if self.liveness is None:
            return
        self.liveness.stacks_taken()
        start = time.monotonic()
        said = False
        while not self.liveness.teardown_allowed() and time.monotonic() < start + liveness.STACKS_WAIT_S + 1:
            if self.signal_received is not None:
                return
            if not said and time.monotonic() > start + 2:
                said = True
                self.console.say(f"waiting for the other nodes' stacks (at most {liveness.STACKS_WAIT_S:g} s)")
            time.sleep(POLL_S)

    def wait(self) -> Outcome:
        next_reap = time.monotonic() + REAP_EVERY_S
        while True:
            codes = self.group.poll()
            if self.torchrun_signalled is not None and self.signal_received is None and self.failure is None:
                self.signal_received = self.torchrun_signalled
                self.stop(self.torchrun_signalled, self.plan.grace_period)
            if self.failure is None and self.signal_received is not None and self.torchrun_failing:
                self.failure = self.detector.check(codes)  # torchrun's report of the failure it was ending
                if self.failure is not None:
                    self.found_by, self.failed_at = self.detector, time.time()
            if self.failure is None and self.signal_received is None and self.halted is None:
                self.failure = self._check(codes)
                if self.failure is not None and self.failure.source == liveness.HANG_SOURCE:
                    self.failure = self.progress.hang_elsewhere(self.failure)  # this node's stacks too
                if self.failure is not None and self.failure.source == HANG_SOURCE:
                    self._wait_for_every_nodes_stacks()
                if self.failure is not None:
                    self.failed_at = time.time()
                    self.statuses_at_failure = tuple(
                        (spec.global_rank, spec.local_rank, code)
                        for spec, code in zip(self.plan.processes, codes)
                        if spec.global_rank is not None and code is not None
                    )
                    if self.found_by is self.detector and self.detector.torchrun and self.plan.rank_logs:
                        self.live_at_failure = frozenset(self.group.rank_pids())
                    self._on_failure()
            if all(code is not None for code in codes):
                break
            now = time.monotonic()
            if (
                self.torchrun_failing_at is not None
                and self.failure is None
                and now >= self.torchrun_failing_at + self.plan.grace_period
            ):
                # torch 2.13 stops its workers after a failure with its default 30 s, whatever
                # --shutdown_timeout says (that holds for a stop signal): the grace period is applied
                # here, to the ranks only, and torchrun reports at once
                self._kill_ranks()
            if self.kill_at is not None and now >= self.kill_at:
                self.group.kill_all()
                self.kill_at = now + 1.0
            if now >= next_reap:
                self.group.reap_orphans()
                next_reap = now + REAP_EVERY_S
            time.sleep(POLL_S)
        self.group.kill_all()  # descendants that outlived their process: setsid'd helpers, re-parented orphans
        outcome = replace(
            self._cause_elsewhere(self._outcome()),
            stragglers=tuple(self.stragglers.record()),
            marks={**self.beat_marks(), "failure_found": self.failed_at},
        )
        self.exit_code = outcome.exit_code
        return outcome

    def _cause_elsewhere(self, outcome: Outcome) -> Outcome:
        """``outcome`` diagnosed (run/postmortem/causes.py: once; :func:`summarised` uses it). A
        multi-node launch whose failure here is a rank that only lost its peer (class ``follower``:
        gloo's "connection reset" comes at once) ends as the other nodes' channel says why, when it
        says so within ``launcher.node_timeout`` (+1 s): a node lost (its launcher gone or silent) or
        failed (its own code). Else the follower stays the failure."""
        if outcome.failure is None or outcome.context is None or self.found_by is not self.detector:
            return outcome
        if outcome.failure.source not in causes.DIAGNOSED_SOURCES:
            return outcome
        self.group.join_pumps()  # every process has ended: torchrun's last lines reach its log first
        diagnosis = causes.diagnose(outcome.failure, outcome.context)
        outcome = replace(outcome, diagnosis=diagnosis)
        if self.liveness is None or self.plan.nodes is None or diagnosis.cls != restarts.FOLLOWER:
            return outcome
        start = time.monotonic()
        said = False
        while time.monotonic() < start + self.plan.nodes.timeout + 1 and self.signal_received is None:
            found = self.liveness.check([])
            if found is not None:
                self.failure, self.found_by = found, self.liveness
                return self._outcome()
            if not said and time.monotonic() > start + 2:
                said = True
                self.console.say(
                    "a rank here only lost its peer: waiting for the other nodes to say why "
                    f"(at most {self.plan.nodes.timeout + 1:g} s)"
                )
            time.sleep(POLL_S)
        return outcome

    def _outcome(self) -> Outcome:
        if self.failure is not None and self.failure.source in liveness.SOURCES:
            lost = self.failure.source == liveness.SOURCE
            reason, ended = (
                (liveness.REASON, Reason.NODE_LOST) if lost else (liveness.FAILED_REASON, Reason.NODE_FAILED)
            )
            return Outcome(self.failure.exit_code, reason, ended, self.failure)
        if self.failure is not None and self.failure.source == HANG_SOURCE:
            return Outcome(EXIT_HANG, HANG_REASON, Reason.HANG, self.failure, summary=self.progress.summary)
        if self.failure is not None and (self.failure.rank is None or not self.detector.torchrun):
            if self.detector.torchrun:  # torchrun has exited: its last lines are on their way to the log
                self.group.join_pumps()
            port = self.detector.port_in_use(self.failure)
            if port is not None:
                return Outcome(EXIT_PORT_IN_USE, f"port {port} in use", Reason.PORT_IN_USE, port_in_use=port)
        if self.failure is not None:
            reason = "rank failed" if self.failure.rank is not None else "torchrun failed"
            context = causes.Context(
                self.log_dir,
                self.detector.torchrun,
                self.statuses_at_failure,
                self.oom_before,
                self.live_at_failure,
                self.plan.nproc_per_node,
                gpu=self.plan.device == "cuda",
            )
            return Outcome(self.failure.exit_code, reason, Reason.FAILED, self.failure, context=context)
        if self.signal_received is not None:
            name = signal.Signals(self.signal_received).name
            return Outcome(128 + self.signal_received, f"stopped by {name}", Reason.INTERRUPTED)
        if self.halted is not None:
            return Outcome(128 + signal.SIGTERM, self.halted, Reason.FAIL_FAST_STOP, halted=True)
        return Outcome(0, "success", Reason.SUCCEEDED)

    def beat_marks(self) -> dict:
        """The goodput ledger's marks of this launch from its lowest rank's heartbeats (launcher/goodput.py):
        the ranks up (``ranks_up``, ``up_iteration``), the first iteration done (``first_at``,
        ``first_iteration``), the last beat and the iteration it reached; the files read once more
        at the end. Empty when no policy watched the ranks (the observer never looked) or none beat."""
        if self.observer.snapshot.tick == 0:
            return {}
        beaten = [seen for _, seen in sorted(self.observer.read().ranks.items()) if seen.last_beat is not None]
        if not beaten:
            return {}
        seen = beaten[0]
        marks: dict = {"last_beat": seen.last_beat, "iteration": seen.iteration}
        if seen.up is not None:
            marks.update(ranks_up=seen.up[0], up_iteration=seen.up[1], up_after=seen.up_after)
        if seen.first_progress is not None:
            marks.update(first_at=seen.first_progress[0], first_iteration=seen.first_progress[1])
        return marks

    def close(self) -> None:
        self.progress.close()
        if self.liveness is not None and self.owns_liveness:  # the launch ended: goodbye, with its exit code
            self.liveness.close(self.exit_code if self.exit_code is not None else 1)
        self.group.close()
        self.console.flush_held()  # a traceback torchrun left unfinished
        self.console.stop()


def hold_stack_requests() -> None:
    """SIGUSR2 (a stack request, ``runs stacks``) ignored where it would end this process: from the
    moment a launch's record names this process (status.json) until it exits, outside :func:`run`'s
    handler. ``runs stacks`` checks for the handler, then sends: the launch may start or end between."""
    for sig in STACK_SIGNALS:
        if signal.getsignal(sig) == signal.SIG_DFL:
            signal.signal(sig, signal.SIG_IGN)


class LaunchSignals:
    """The launch's signal handlers, installed once (a context manager) for every attempt of a
    launch (run/attempts.py): SIGINT/SIGTERM/SIGHUP and SIGUSR2 go to the attempt running now
    (:meth:`run`); between attempts a stop signal is only noted in ``received``, and the next
    attempt's supervisor is told at once. Both are an :class:`Interrupts`' (its own, or a sweep's,
    whose handlers stay and pass the signals on to every launch it runs)."""

    def __init__(self, interrupts: Interrupts | None = None) -> None:
        self.own = interrupts is None
        self.interrupts = Interrupts() if interrupts is None else interrupts
        self._stack = contextlib.ExitStack()

    @property
    def received(self) -> int | None:
        return self.interrupts.received

    def __enter__(self) -> LaunchSignals:
        if self.own:
            hold_stack_requests()  # what is restored after the launch
            self._stack.enter_context(self.interrupts)
        # inherited by every process started
        self._stack.enter_context(handlers({sig: signal.SIG_IGN for sig in RELAYED_SIGNALS}))
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stack.close()

    def run(self, supervisor: Supervisor, relay_usr1: bool = True) -> Outcome:
        """One attempt under these handlers: start, supervise to the end, close; the outcome, summarised."""
        for sig in RELAYED_SIGNALS:  # ignored while starting: an ignored disposition survives exec
            signal.signal(sig, signal.SIG_IGN)
        self.interrupts.attach(supervisor)  # a stop signal that came between attempts: it starts stopped
        try:
            supervisor.start()
            if relay_usr1:
                for sig in RELAYED_SIGNALS:
                    signal.signal(sig, supervisor.relay)  # restored by handlers() too
            outcome = supervisor.wait()
        except BaseException:
            supervisor.kill_all()
            raise
        finally:
            self.interrupts.detach(supervisor)
            for sig in RELAYED_SIGNALS:
                signal.signal(sig, signal.SIG_IGN)
            supervisor.close()
        return summarised(outcome)


def run(
    plan: LaunchPlan,
    log_dir: Path,
    console: IO[bytes] | None = None,
    relay_usr1: bool = True,
    interrupts: Interrupts | None = None,
) -> Outcome:
    """Start the plan, supervise it to the end, print the failure summary; return the outcome.
    With ``interrupts`` (a sweep), the sweep's handler passes SIGINT/SIGTERM/SIGHUP on.
    Restarts: run/attempts.py."""
    with LaunchSignals(interrupts) as launch:
        return launch.run(Supervisor(plan, log_dir, console), relay_usr1)


def summarised(outcome: Outcome) -> Outcome:
    """The outcome with its failure's cause (run/postmortem/causes.py: the rank that only lost a peer gives way
    to the one that failed, whose exit code the launch takes) and summary, printed on stderr."""
    if outcome.failure is not None:
        lines: list[str] = []
        if outcome.context is not None and outcome.failure.source in causes.DIAGNOSED_SOURCES:
            diagnosis = outcome.diagnosis or causes.diagnose(outcome.failure, outcome.context)
            outcome = replace(
                outcome, failure=diagnosis.failure, exit_code=diagnosis.failure.exit_code, diagnosis=diagnosis
            )
            lines = diagnosis.lines()
        if outcome.failure.source in liveness.SOURCES:
            text = outcome.summary or liveness.summary(outcome.failure)
        else:
            text = outcome.summary or failure_mod.summary(outcome.failure, cause=lines)
        outcome = replace(outcome, summary=text)
        try:
            print(f"[{PROG}] " + text, file=sys.stderr, flush=True)
        except OSError:  # the terminal is gone (SIGHUP)
            pass
    return outcome
