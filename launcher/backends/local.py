"""``submit=none``: the launch runs here, under :mod:`launcher.run.supervise`, as one :class:`Backend`.

``dryrun`` is the one pass of a local launch: SLURM's or the Kubeflow operator's allocation from this
process's environment (``launcher=slurm``/``launcher=k8s``) → the sweep lane → validate
(:mod:`launcher.checks`) → probe the host (:mod:`launcher.probe`) → plan (:mod:`launcher.plan`). It
writes and starts nothing; its :class:`Request` shows exactly what the dry run prints, and carries the
settled values (:class:`Planned`) that ``submit`` runs: ``submit`` creates the run directory, writes
the record and supervises the launch to its end (a local submit blocks). ``submit_all`` runs a serial
sweep one job after another, a parallel sweep (``sweep.parallel=N``) lane by lane
(:mod:`launcher.sweep.parallel`).

A host's facts a dry run could not run under (a port in use, too few GPUs) are *refusals*: a dry run
shows the plan and warns (``Planned.warnings``), a real launch raises at once.

``describe``/``logs``/``cancel`` read the record alone (status.json, logs/rank<R>.log): they import no
Hydra, and wait on nothing but the files (``runs`` calls them).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import record
from ..names import PROG
from ..rundir import Reason, RunPaths
from .base import Handle, Launch, Point, Refused, Request, Status

if TYPE_CHECKING:
    from ..checks import Settled
    from ..config.schema import TrainConfig
    from ..facts import HostFacts
    from ..run.process.signals import Interrupts
    from ..sweep.lanes import Slot

NAME = "none"
NOT_STARTED = "not started: "  # a record's reason when the program could not be started
POLL_S = 0.2  # logs(follow=True): how often a log and status.json are read again


@dataclass(frozen=True)
class Planned:
    """A local request's payload: what ``dryrun`` settled, for ``submit`` to run."""

    launch: Launch
    cfg: TrainConfig  # the launch's config after the allocation and the sweep lane
    settled: Settled
    facts: HostFacts
    slot: Slot | None = None  # a parallel sweep's lane
    allocation: Any = None  # slurm.launch.Allocation (launcher=slurm)
    pod: Any = None  # k8s.launch.Pod (launcher=k8s)
    warnings: tuple[str, ...] = ()  # a dry run's refusals from this host's facts (stderr, after the plan)
    share: Slot | None = None  # launcher.local_nodes=true: this node's share of the host (lanes.local_node_slot)
    tracker_env: dict[str, str] = field(default_factory=dict)  # tracker=...: what every rank gets (trackers/launch.py)

    def __repr__(self) -> str:  # the config holds the secret values (the workers need them): masked here
        from .. import secrets

        return (
            f"Planned(launch={self.launch!r}, cfg={secrets.mask_config(self.cfg)!r}, settled={self.settled!r}, "
            f"slot={self.slot!r}, warnings={self.warnings!r})"
        )


@dataclass(frozen=True)
class Result:
    """How one local launch ended: what the session reports and the sweep summary shows."""

    exit_code: int | None  # None: a sweep's job that never started (``note`` says why)
    run_dir: str = ""
    reason: str = ""  # supervise.Outcome.reason; "not started: ..." when nothing could start
    duration_s: float = 0.0
    note: str = ""  # a job skipped: lanes.SKIPPED_FAIL_FAST / SKIPPED_INTERRUPTED
    ended: Reason | None = None  # how it ended (status.json's outcome); None: it never started
    counted: bool = True  # False: stopped by the sweep's fail_fast (its code is not the sweep's)
    goodput: str = ""  # the ledger's goodput ("91%", launcher/goodput.py): the sweep summary's column


@dataclass
class LocalBackend:
    """The local launch. State kept across the launches of one invocation only: ``ports`` (the JAX
    coordinator ports given so far, so every point of a sweep gets its own), ``interrupts`` (a
    sweep's signal handling, set by the session), ``results`` (how each launch ended, by run
    directory, in the order they ended: ``wait`` returns their codes, a sweep's summary reads them)."""

    name: str = NAME
    interrupts: Interrupts | None = None
    ports: set[int] = field(default_factory=set)
    results: dict[str, Result] = field(default_factory=dict)
    trackers: Any = None  # trackers.launch.Trackers: W&B's mode, MLflow's runs (a sweep's parent)

    def _trackers(self):
        if self.trackers is None:
            from ..trackers.launch import Trackers

            self.trackers = Trackers()
        return self.trackers

    notifier: Any = field(default=None, repr=False)  # notify.Notifier, made at the first launch that notifies

    # -- dryrun: writes and starts nothing (a multi-node pod waits for node 0 to resolve) -------
    def dryrun(self, launch: Launch) -> Request:
        from .. import checks, cpu_placement, paths, probe, secrets
        from .. import plan as plan_mod
        from ..addresses import Endpoint
        from ..config.schema import Topology
        from ..errors import UserError
        from ..k8s import launch as k8s_launch
        from ..run import leash
        from ..slurm import launch as slurm_launch
        from ..sweep import lanes

        cfg = launch.cfg
        facts = probe.gather()
        # launcher=slurm: nnodes, node_rank, endpoints, nproc from SLURM's environment (facts.env)
        cfg, facts, allocation = slurm_launch.from_environment(cfg, facts)
        # launcher=k8s: the same from the Kubeflow operator's variables in this pod
        cfg, facts, pod = k8s_launch.from_environment(cfg, facts)
        if pod is not None and pod.nnodes > 1 and not cfg.dry_run:
            # node 0's name resolves once its pod is up: the checks below resolve it (a wait, no write)
            from ..k8s import startup

            wait = float(cfg.launcher.join_timeout or startup.DEFAULT_WAIT_S)
            startup.wait_for_node0(pod.master_addr, wait, probe.resolve, probe.ResolveError)
        slot = None
        if launch.job is not None:  # a -m sweep: this job's lane, devices and rendezvous values
            slot = lanes.job_slot(cfg, facts, launch.job, sorted(os.sched_getaffinity(0)))
            cfg, facts = lanes.job_config(cfg, launch.job, slot), lanes.job_facts(facts, slot)
        # a dry run shows the plan even where this host could not run it: the refusals that come from
        # this host's facts are collected and shown after it, one warning each (a real launch raises)
        # (so are a submit=ssh node's while it answers the preflight: run/leash.py says them, exit 2)
        refusals: list[UserError] = []
        refuse = refusals.append if cfg.dry_run or leash.preflighting() else checks.refuse_now
        # several nodes on this host (launcher.local_nodes=true): this node's share of its devices
        share = lanes.local_node_slot(cfg, facts, sorted(os.sched_getaffinity(0)), refuse) if slot is None else None
        facts = lanes.node_facts(facts, share)
        settled = checks.validate(cfg, facts, refuse)
        checks.num_gpus_flag(launch.typed.num_gpus, cfg, settled, facts)
        if cfg.launcher.topology is Topology.skrl_jax and settled.coordinator is None:
            port = lanes.distinct_port(probe.free_port, self.ports)
            settled = replace(settled, coordinator=Endpoint("127.0.0.1", port))
        settled = probe.locate(cfg, settled, refuse)
        settled = cpu_placement.place(cfg, settled, facts, refuse)
        probe.preflight(cfg, settled, refuse)
        if settled.container is not None and not cfg.dry_run:  # the image itself, before any rank starts
            from .. import container_probe

            jax = cfg.launcher.topology is Topology.skrl_jax
            python = cfg.python or plan_mod.IMAGE_PYTHON
            container_probe.check(settled.container, python, ("jax",) if jax else ("torch",), settled.script)
        shown = []
        if allocation is not None:
            shown.append(slurm_launch.describe(allocation))
        if pod is not None:
            shown.append(k8s_launch.describe(pod))
        # the argv a real launch starts: every rank's script behind the worker wrapper
        plan = plan_mod.wrapped(
            plan_mod.build(cfg, settled, facts, order=launch.typed.script_order), paths.WORKER_WRAPPER
        )
        if cfg.restart.max > 0:  # restarts on: TRAIN_MULTIGPU_ATTEMPT=0, as a real launch's first attempt
            plan = plan_mod.attempt(plan, 0)
        tracker_env, tracker_notes = self._trackers().check(cfg, refuse)  # MLflow's server probed (bounded)
        plan = _add_env(plan, tracker_env)
        notes = dry_run_notes(launch, settled) + tracker_notes
        if share is not None:
            notes.append(f"{facts.gpus_source}" + (" (the ranks pinned to them)" if share.cpus else ""))
        shown.append(plan_mod.describe(secrets.mask_plan(lanes.bind(lanes.bind(plan, slot), share)), notes))
        planned = Planned(
            launch,
            cfg,
            settled,
            facts,
            slot,
            allocation,
            pod,
            tuple(f"{refusal}; a real launch on this host refuses it" for refusal in refusals),
            share,
            tracker_env,
        )
        return Request(NAME, str(launch.run_dir), "\n".join(shown), payload=planned)

    # -- submit: runs the launch to its end ----------------------------------------------------------
    def submit(self, request: Request) -> Handle:
        """Create the run directory, write the record, run the launch under the supervisor until it
        ends; its :class:`Result` is in ``results`` under the handle's run directory."""
        from .. import notify, restarts
        from .. import plan as plan_mod
        from ..errors import EXIT_USAGE, UserError
        from ..run import attempts, console, leash, supervise
        from .local_resume import LocalResume

        planned: Planned = request.payload
        # a submit=ssh node: its refusals said (exit 2), or ready and told to go by every host's
        leash.ready(planned.warnings)
        cfg = planned.cfg
        if planned.share is not None and planned.share.cpus:  # a local node's cores: its ranks inherit them
            os.sched_setaffinity(0, planned.share.cpus)
        run_dir = self._create_run_dir(planned)
        logs = run_dir / "logs"
        plan = self._plan(planned, run_dir)
        policy = restarts.Policy.of(cfg.restart.max, cfg.restart.classes, cfg.restart.max_without_progress)
        if policy.max > 0:  # restarts on: every attempt's processes know their attempt
            plan = plan_mod.attempt(plan, 0)
        logs.mkdir(exist_ok=True)
        console.outlive_stdout()  # `train_multigpu ... | head`: the launch outlives its console's reader
        supervise.hold_stack_requests()  # status.json names this process from now on
        from ..slurm import launch as slurm_launch

        queue = slurm_launch.queue_seconds(planned.allocation)  # launcher=slurm: the job's wait (the ledger's)
        started = record.write_start(run_dir, _config_yaml(cfg), plan, planned.launch.composed, queue_s=queue)
        handle = Handle(NAME, str(os.getpid()), str(run_dir))
        print(f"[{PROG}] run directory: {run_dir}", flush=True)
        resume = LocalResume(plan, cfg.profile.name, cfg.rl_library.name, RunPaths(run_dir))
        notifier = self._notifier(cfg)

        def on_attempt(done) -> None:  # status.json while it runs; a restart is a state change (notify)
            led = record.write_attempts(run_dir, done)
            if done and done[-1].restart and notifier is not None:
                notifier.send(notify.RESTARTED, _run_id(cfg, run_dir), done[-1].cause, len(done), led)

        # Under SLURM, the step's USR1 reaches every worker directly: relaying it would double it.
        try:
            result = attempts.run(
                plan,
                run_dir,
                policy,
                resume,
                relay_usr1=not cfg.launcher.from_slurm,
                interrupts=self.interrupts,
                on_attempt=on_attempt if policy.max > 0 else None,
                shown=resume.shown,
            )
            outcome = result.outcome
        except UserError as err:  # nothing could be started (preflight looked first): the record says so
            led = record.write_end(run_dir, started, EXIT_USAGE, f"{NOT_STARTED}{err}", Reason.NOT_STARTED)
            self._trackers().end(cfg, run_dir, EXIT_USAGE, f"{NOT_STARTED}{err}", Reason.NOT_STARTED.value, 0, led)
            self.results[str(run_dir)] = Result(
                EXIT_USAGE, str(run_dir), f"{NOT_STARTED}{err}", ended=Reason.NOT_STARTED
            )
            raise
        self.ended(planned, run_dir, started, outcome, result.attempts if policy.max > 0 else (), result.attempts)
        print(f"[{PROG}] exit code {outcome.exit_code} ({outcome.reason}); run directory: {run_dir}", flush=True)
        return handle

    def submit_all(
        self, requests: Sequence[Request], interrupts=None, fail_fast: bool = False
    ) -> list[Handle | Refused | None]:
        """A sweep's points: one after another, or lane by lane when they were planned on lanes
        (``sweep.parallel=N``). A point that could not start is refused (its error printed, exit 2);
        after a signal (``interrupts``: the sweep's), or a failure with ``sweep.fail_fast``, the rest
        are skipped (None; ``results`` holds their notes)."""
        if interrupts is not None:
            self.interrupts = interrupts
        if any(r.payload.slot is not None for r in requests):
            try:
                return self._run_parallel(requests)
            finally:
                self._sweep_end(requests)
        try:
            return self._submit_serial(requests)
        finally:
            self._sweep_end(requests)

    def _sweep_end(self, requests: Sequence[Request]) -> None:
        """A sweep's parent runs in the trackers, ended (after its last job)."""
        if requests and self.trackers is not None:
            interrupted = self.interrupts is not None and self.interrupts.received is not None
            self.trackers.sweep_end(requests[0].payload.cfg, interrupted)

    def _submit_serial(self, requests: Sequence[Request]) -> list[Handle | Refused | None]:
        from ..errors import EXIT_USAGE, UserError
        from ..sweep import lanes

        handles: list[Handle | Refused | None] = []
        failed = False
        for request in requests:
            planned: Planned = request.payload
            skip = None
            if self.interrupts is not None and self.interrupts.received is not None:
                skip = lanes.SKIPPED_INTERRUPTED
            elif failed and planned.cfg.sweep.fail_fast:
                skip = lanes.SKIPPED_FAIL_FAST
                print(
                    f"[{PROG}] job {planned.launch.job} skipped: an earlier job failed and sweep.fail_fast=true",
                    flush=True,
                )
            if skip is not None:
                self.results[request.run_dir] = Result(None, request.run_dir, note=skip)
                handles.append(None)
                continue
            try:
                handles.append(handle := self.submit(request))
                failed = failed or self.results[handle.run_dir].exit_code != 0
            except UserError as err:
                if os.environ.get("HYDRA_FULL_ERROR") == "1":  # the user's (session._user_hydra_full_error)
                    raise
                error(str(err))
                handles.append(Refused(request.run_dir, str(err), EXIT_USAGE))
                failed = True
        return handles

    def wait(self, handles: Sequence[Handle | Refused | None], interrupts=None, fail_fast: bool = False) -> list[int]:
        """A local submit has already waited: the codes the launches ended with, in the order they
        ended (not those a sweep's fail_fast stopped)."""
        ran = {h.run_dir for h in handles if h is not None}
        codes = [r.exit_code for key, r in self.results.items() if key in ran and r.counted and r.exit_code is not None]
        for handle in handles:
            if isinstance(handle, Refused) and handle.run_dir not in self.results:  # refused before its record
                codes.append(handle.exit_code)
            elif isinstance(handle, Handle) and handle.run_dir not in self.results:  # not launched by this one
                codes.append(self.describe(handle).exit_code or 0)
        return codes

    def show(self, requests: Sequence[Request]) -> None:
        """Each plan, exactly what a real launch runs; after it, on stderr, what this host would refuse."""
        from .. import errors

        for request in requests:
            print(request.shown, flush=True)
            for line in request.payload.warnings:
                print(f"{PROG}: warning: {errors.one_line(line)}", file=sys.stderr, flush=True)

    def summary(self, points: Sequence[Point]) -> str | None:
        """A local sweep's table (launcher/sweep/lanes.py: each job's exit code, duration, note) and
        its learning curves."""
        from ..sweep.state import Sweep

        sweep = Sweep(self.interrupts)
        for point in points:
            launch, run_dir = point.launch, point.request.run_dir
            if point.shown:
                sweep.add(launch.job, launch.typed.overrides, run_dir, dry_run=True)
            else:
                sweep.add(launch.job, launch.typed.overrides, run_dir, self.results.get(run_dir))
        return sweep.summary() if sweep.results else None

    # -- what a launch's end does, serial or parallel ------------------------------------------------
    def ended(self, planned: Planned, run_dir: Path, started: float, outcome, attempts=(), phases=()) -> None:
        """Close the record, say what a failed launch's output shows (the port taken at torchrun's
        bind, what a rendezvous waited for) and keep the result. ``attempts``: run/attempts.Attempt
        of a launch with restarts on (status.json lists them); ``phases``: every attempt, restarts on
        or off (the goodput ledger; none: the one attempt from ``started`` to now, a parallel
        sweep's job). Then the word (``notify.*``) and the timeline picture (launcher/timeline.py)."""
        from .. import notify, probe
        from ..run.monitor.liveness import EXIT_NODE_LOST

        if not phases:
            phases = [single_phase(started, outcome)]
        led = record.write_end(
            run_dir,
            started,
            outcome.exit_code,
            outcome.reason,
            outcome.ended,
            outcome.failure_record(),
            outcome.stragglers,
            attempts,
            phases,
        )
        print(f"[{PROG}] {led['line']}", flush=True)
        notifier = self._notifier(planned.cfg)
        if notifier is not None:
            cause = (outcome.failure_record() or {}).get("class") or (outcome.reason if outcome.exit_code else None)
            notifier.send(notify.event_of(outcome.ended), _run_id(planned.cfg, run_dir), cause, len(phases), led)
        if outcome.ended not in (Reason.INTERRUPTED, Reason.FAIL_FAST_STOP):  # stopped: out at once, no drawing
            _draw_timeline(run_dir, led)
        ended = outcome.ended.value if outcome.ended is not None else None
        self._trackers().end(planned.cfg, run_dir, outcome.exit_code, outcome.reason, ended, len(attempts) or 1, led)
        if outcome.port_in_use is not None:  # taken between the preflight check and torchrun's bind
            error(str(probe.port_taken_at_launch(planned.cfg, planned.settled, outcome.port_in_use)))
        elif outcome.exit_code != 0 and outcome.exit_code != EXIT_NODE_LOST and not outcome.halted:
            last = RunPaths(run_dir).attempt(attempts[-1].number if attempts else 0)
            rendezvous_hint(planned.cfg, planned.settled, last.logs)  # (a lost node is no rendezvous failure)
        self.results[str(run_dir)] = Result(
            outcome.exit_code,
            str(run_dir),
            outcome.reason,
            time.time() - started,
            ended=outcome.ended,
            counted=not outcome.halted,
            goodput=f"{led['goodput_pct']:.0f}%",
        )

    def _notifier(self, cfg: TrainConfig):
        """This invocation's webhook sender (``notify.url``; node 0 of a multi-node launch only), or None."""
        from .. import notify

        if not cfg.notify.url or cfg.launcher.node_rank not in (0, None):
            return None
        if self.notifier is None:
            self.notifier = notify.Notifier(cfg.notify.url, tuple(cfg.notify.events))
        return self.notifier

    def _create_run_dir(self, planned: Planned) -> Path:
        from ..slurm import launch as slurm_launch

        launch = planned.launch
        if launch.job is not None:  # a sweep job's: Hydra's output directory for its point
            try:
                launch.run_dir.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                raise _unwritable(planned.cfg, err) from None
            return launch.run_dir.resolve()
        # a requeued SLURM job's record goes to restart<N>
        return run_dir(planned.cfg, restart=slurm_launch.record_subdir(planned.allocation))

    def _plan(self, planned: Planned, run_dir: Path):
        """The plan the supervisor runs, for this run directory (TRAIN_MULTIGPU_RUN_DIR)."""
        from .. import plan as plan_mod
        from ..run import supervise
        from ..sweep import lanes

        launch, cfg = planned.launch, planned.cfg
        trainer_dir = trainer_run_dir(cfg, run_dir, launch.typed.trainer_dir, launch.job is not None)
        built = plan_mod.build(
            cfg, planned.settled, planned.facts, run_dir=trainer_dir, order=launch.typed.script_order
        )
        # tracker=...: the run's identity in its trackers (trackers.json: kept across restarts), its MLflow run
        tracked = self._trackers().begin(cfg, launch, run_dir, trainer_dir)
        built = _add_env(built, {**planned.tracker_env, **tracked})
        return supervise.prepare(lanes.bind(lanes.bind(built, planned.slot), planned.share), run_dir / "logs")

    def _run_parallel(self, requests: Sequence[Request]) -> list[Handle | Refused | None]:
        """``sweep.parallel=N``: every job's directory and record are made when it starts on its lane."""
        from ..errors import EXIT_USAGE
        from ..sweep import parallel

        queued = []
        for request in requests:
            planned: Planned = request.payload
            run_dir = Path(request.run_dir)
            slot = planned.slot
            devices = f"GPUs {','.join(slot.gpus)}" if slot.gpus else f"CPU cores {','.join(map(str, slot.cpus))}"
            print(
                f"[{PROG}] job {planned.launch.job} queued on lane {slot.index} ({devices}); run directory: {run_dir}",
                flush=True,
            )
            queued.append(
                parallel.Queued(
                    planned.launch.job,
                    self._plan(planned, run_dir),
                    run_dir,
                    _config_yaml(planned.cfg),
                    slot,
                    planned.launch.composed,
                    planned,
                )
            )

        def ended(job: parallel.Queued, started: float, outcome) -> None:
            self.ended(job.planned, job.run_dir, started, outcome)

        def skipped(job: parallel.Queued, note: str) -> None:
            self.results[str(job.run_dir)] = Result(None, str(job.run_dir), note=note)

        fail_fast = bool(requests[0].payload.cfg.sweep.fail_fast)
        parallel.run_queued(queued, ended, skipped, fail_fast, self.interrupts)
        pid = str(os.getpid())
        handles: list[Handle | Refused | None] = []
        for job in queued:
            result = self.results.get(str(job.run_dir))
            if result is not None and result.ended is Reason.NOT_STARTED:
                handles.append(Refused(str(job.run_dir), result.reason, EXIT_USAGE))
            elif result is not None and result.exit_code is not None:
                handles.append(Handle(NAME, pid, str(job.run_dir)))
            else:  # skipped: the sweep's signal, or fail_fast
                handles.append(None)
        return handles

    # -- a run under way, from its record alone ------------------------------------------------------
    # the handle side (runs asks it too): launcher/backends/local_state.py, no Hydra
    def describe(self, handle: Handle) -> Status:
        from . import local_state

        return local_state.describe(handle)

    def logs(self, handle: Handle, rank: int | None = None, follow: bool = False) -> Iterator[str]:
        """That rank's log; None: every rank's, each line prefixed ``[rank R]`` (base.Backend.logs)."""
        from . import local_state

        return local_state.logs(handle, rank, follow)

    def cancel(self, handle: Handle) -> None:
        """What one Ctrl+C does: SIGINT to the launcher (only while it is the process status.json names)."""
        from . import local_state

        local_state.cancel(handle)


# -- helpers the launch shares -------------------------------------------------------------------
def _add_env(plan, env: dict[str, str]):
    """The plan with the trackers' variables added; a value worker_env or profile.env set wins."""
    if not env:
        return plan
    from types import MappingProxyType

    return replace(plan, env=MappingProxyType({**plan.env, **{k: v for k, v in env.items() if k not in plan.env}}))


def single_phase(started: float, outcome) -> dict:
    """The one attempt of a launch the attempt loop did not run (a parallel sweep's job): from the
    record's opening to now, with the supervisor's marks (launcher/goodput.py)."""
    return {"attempt": 0, "started": started, "ended": time.time(), "outcome": outcome.ended.value, **outcome.marks}


def _run_id(cfg: TrainConfig, run_dir: Path) -> str:
    """The run's id as ``runs`` names it: its directory relative to the run root (else its name)."""
    try:
        return str(Path(run_dir).resolve().relative_to(Path(cfg.run_root).resolve()))
    except (ValueError, OSError):
        return Path(run_dir).name


TIMELINE_MIN_S = 300.0  # a launch shorter than this, without a restart, gets its timeline on demand only


def _draw_timeline(run_dir: Path, led: dict) -> None:
    """The timeline picture into the run directory (launcher/timeline.py) when the launch restarted or
    ran at least TIMELINE_MIN_S: matplotlib costs about a second, more than a short run's picture tells
    (``runs timeline ID`` draws any run's on demand). Never fails the launch."""
    if not led.get("restarts") and float(led.get("wall_s") or 0) < TIMELINE_MIN_S:
        return
    from .. import timeline

    note = timeline.write_for(run_dir)
    if note:
        print(f"[{PROG}] {note}", flush=True)


def error(message: str) -> None:
    """The one error path's output: one line on stderr."""
    from .. import errors

    print(f"{PROG}: error: {errors.one_line(message)}", file=sys.stderr, flush=True)


def _config_yaml(cfg: TrainConfig) -> str:
    from ..config import dump

    return dump.config_yaml(cfg)


def _unwritable(cfg: TrainConfig, err: OSError):
    from ..errors import UserError

    key, value = ("run_dir", cfg.run_dir) if cfg.run_dir is not None else ("run_root", cfg.run_root)
    return UserError(
        key, value, f"cannot create the run directory: {err.strerror or err}", "choose a directory you can write"
    )


def run_dir(cfg: TrainConfig, restart: str = "") -> Path:
    """A single launch's record (config.yaml, command.sh, status.json, logs/), created: a node's own
    (``_node<R>``, or ``node<R>/`` inside the job's ``run_dir=``), a requeue's ``restart<N>/``. Where a
    launch will record before it starts (a dry run's, the session's): backends/job_dir.planned."""
    multinode = cfg.launcher.nnodes != "1"
    try:
        if cfg.run_dir is not None:  # given by submit=slurm: one directory for the job, restart<N>, node<R> inside
            path = Path(cfg.run_dir) / restart / (f"node{cfg.launcher.node_rank}" if multinode else "")
            path.mkdir(parents=True, exist_ok=True)
            if multinode:  # node<R>/ is this node's alone: a launcher that recorded here before keeps its record
                _set_aside(path.resolve())
            return path.resolve()
        return record.create_run_dir(cfg.run_root, cfg.run_name, cfg.launcher.node_rank, multinode)
    except OSError as err:  # probe.preflight looked first; this is what it could not foresee
        raise _unwritable(cfg, err) from None


def _set_aside(path: Path) -> None:
    """record.set_aside, its refusal as the one error path's line (nothing recorded, nothing started)."""
    from ..errors import UserError

    try:
        aside = record.set_aside(path)
    except record.StillRecording as err:
        raise UserError(
            "run_dir",
            str(path),
            f"a launcher that still runs (pid {err.pid}) records here: two launchers for one node",
            "give this one its own launcher.node_rank, or stop the other first",
        ) from None
    if aside is not None:
        print(f"[{PROG}] {path} held an earlier launcher's record: kept in {aside}", flush=True)


def trainer_run_dir(cfg: TrainConfig, record_dir: Path, trainer_dir: str | None, sweep: bool) -> str:
    """TRAIN_MULTIGPU_RUN_DIR: the job's directory when run_dir is given (every node and every restart
    of a SLURM job train, checkpoint and resume there); ``runs resume``: the resumed run's (``trainer_dir``);
    else the launch's own record directory."""
    if cfg.run_dir is not None and not sweep:
        return str(Path(cfg.run_dir).resolve())
    return trainer_dir or str(record_dir)


def dry_run_notes(launch: Launch, settled: Settled) -> list[str]:
    """What the dry run says beyond the commands: presets applied and forwarded, where Isaac Lab was
    found when ISAACLAB_PATH is unset."""
    from ..config import compose

    notes = []
    forwarded = compose.forwarded_presets(launch.cfg, dict(launch.typed.presets))
    typed = [name for _, names in compose.preset_overrides(list(launch.typed.overrides)) for name in names]
    if typed:
        applied = [name for name in typed if name not in forwarded]
        notes.append(
            f"presets: applied {', '.join(applied) or '-'}; "
            f"forwarded to the training script as presets=NAME: {', '.join(forwarded) or '-'}"
        )
    restart = launch.cfg.restart
    if restart.max > 0:
        from .. import restarts

        classes = ", ".join(sorted(restarts.expand(restart.classes)))
        notes.append(
            f"restarts: up to {restart.max} after {classes}, from the newest checkpoint, while progress is made "
            f"(restart.max_without_progress={restart.max_without_progress}; docs/recovery.md)"
        )
    checkout = compose.isaaclab_checkout(os.environ)
    if (
        checkout is not None
        and checkout.how != compose.ISAACLAB_ENV
        and settled.script.startswith(checkout.root + os.sep)
    ):
        notes.append(f"Isaac Lab: {checkout.root} ({checkout.how})")
    return notes


def rendezvous_hint(cfg: TrainConfig, settled: Settled, logs: Path) -> None:
    """After a failed multi-node torchrun launch: say what the rendezvous waited for, when torchrun's
    output shows that the nodes never all met (docs/multinode.md)."""
    from .. import checks, rendezvous
    from ..addresses import Endpoint

    if settled.max_nodes < 2 or settled.rdzv_backend not in rendezvous.TIMEOUT_KEY:
        return
    output = ""
    for path in sorted(logs.rglob("*.log")):
        with open(path, "rb") as log:
            log.seek(max(0, path.stat().st_size - 200_000))
            output += log.read().decode(errors="replace")
    if settled.rdzv_backend == "c10d":
        endpoint = str(settled.rdzv_endpoint)
    else:
        endpoint = str(
            Endpoint(cfg.launcher.master_addr or "127.0.0.1", cfg.launcher.master_port or checks.MASTER_DEFAULT_PORT)
        )
    waited = rendezvous.waited_timeout(dict(settled.rdzv_conf), settled.rdzv_backend, cfg.launcher.join_timeout)
    met = any(logs.glob("rank*.log")) or any(logs.glob("rank*.exit.json"))  # workers start after the rendezvous
    hint = rendezvous.failure_hint(
        output,
        settled.rdzv_backend,
        endpoint,
        settled.nnodes,
        cfg.launcher.node_rank,
        cfg.launcher.rdzv_id,
        waited,
        met,
    )
    if hint:
        print(f"[{PROG}] {hint}", file=sys.stderr, flush=True)
