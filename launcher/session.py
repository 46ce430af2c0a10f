"""One invocation of ``train_multigpu``: a single launch, or every job of a ``-m`` sweep.

:class:`Session` is the state that used to be a module global in the CLI. ``cli.main`` creates one
per invocation and hands its bound :meth:`Session.job` to Hydra as the task function, so every job of
a sweep reports into the same object and nothing outlives the call (tests call ``main`` many times
in one process). Why an object and not a Hydra ``Launcher`` plugin: a Launcher must be packaged as
``hydra_plugins`` (it would be seen by every Hydra app installed beside us), it would replace
Hydra's BasicLauncher for ``-m`` only, and a single run never goes through one; an object that
``main`` owns covers both paths with the same code.

:meth:`Session.launch` is the one pass of a launch: compose (typed config) → SLURM's allocation
(``launcher=slurm``) → the sweep lane → validate (:mod:`launcher.checks`) → probe the host
(:mod:`launcher.probe`) → plan (:mod:`launcher.plan`) → print it (dry run), queue it (parallel
sweep), run it (:mod:`launcher.run`) or submit it (:mod:`launcher.slurm.submit`).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from . import checks, errors, facts, paths, probe, record, secrets
from . import plan as plan_mod
from .addresses import Endpoint
from .config import compose, isaaclab, profiles, schema, translate
from .config.schema import Topology
from .errors import EXIT_USAGE, UserError
from .k8s import launch as k8s_launch
from .names import PROG, swept
from .run.process.signals import Interrupts
from .rundir import Reason, RunPaths, node_name
from .slurm import launch as slurm_launch
from .sweep import lanes

if TYPE_CHECKING:
    from .sweep import parallel


def error(message: str) -> None:
    """The one error path's output: one line on stderr."""
    print(f"{PROG}: error: {errors.one_line(message)}", file=sys.stderr)


def warning(message: str) -> None:
    """A dry run's line for what a real launch on this host would refuse: one line on stderr."""
    print(f"{PROG}: warning: {errors.one_line(message)}", file=sys.stderr, flush=True)


@dataclass
class Session:
    """What ``main`` hands to each Hydra job, and what the jobs report back."""

    script_args: list[str] = field(default_factory=list)
    order: list[str] = field(default_factory=list)  # grammar.CommandLine.order: the typed order
    full_error: bool = False  # HYDRA_FULL_ERROR=1: show tracebacks instead of one-line errors
    save_as: str | None = None  # save_profile=NAME: the file to write instead of launching
    command: list[str] = field(default_factory=list)  # argv as typed (for a saved profile's header)
    hydra_flags: list[str] = field(default_factory=list)
    started: bool = False  # a job function ran: errors after this are not composition errors
    exit_codes: list[int] = field(default_factory=list)
    # -m sweeps (launcher/sweep/)
    results: list[lanes.JobResult] = field(default_factory=list)  # per job, for the summary
    queued: list[parallel.Queued] = field(default_factory=list)  # a parallel sweep's planned jobs
    ports: set[int] = field(default_factory=set)  # JAX coordinator ports given to jobs of this sweep
    run_dir: str = ""  # the current job's run directory
    fail_fast: bool | None = None
    stop_sweep: bool = False
    interrupts: Interrupts | None = None  # a sweep's signal handling, from start to summary
    reason: str = ""  # how the last launch ended (supervise.Outcome.reason)
    ended: Reason | None = None  # ... as a Reason (supervise.Outcome.ended): what the summary decides on
    checking: bool = False  # a sweep's first pass: every point is checked before any job starts
    submissions: list = field(default_factory=list)  # submit=slurm: one slurm.submit.Submission per job
    vault: secrets.Vault = field(default_factory=secrets.Vault)  # secret values Hydra never sees
    num_gpus: str | None = None  # Isaac Lab's --num_gpus, when given (checks.num_gpus_flag)
    presets: dict[str, list[str]] = field(default_factory=dict)  # forwarded presets (compose.open_presets)
    slurm: object | None = None  # submit=slurm: its slurm.backend.SlurmBackend, made by the first SLURM launch
    ray: object | None = None  # submit=ray: a ray_submit.submit.Submitter, made by the first Ray launch
    composition: dict | None = None  # record.composition: what was typed (<run_dir>/composition.json)
    trainer_dir: str | None = None  # runs resume: the run directory the training script continues in
    resume_args: list[str] = field(default_factory=list)  # runs resume: the script's resume flags, last

    # -- the Hydra task function ----------------------------------------------------------------
    def job(self, dict_cfg) -> int:
        """One job: a single launch, or one point of a ``-m`` sweep."""
        self.started = True
        job = lanes.job_info()
        result = lanes.JobResult(job.num, job.overrides) if job is not None else None
        if result is not None:
            self.results.append(result)
            if self.interrupted() is not None:
                result.note = lanes.SKIPPED_INTERRUPTED
                return 0
            if self.stop_sweep:
                result.note = lanes.SKIPPED_FAIL_FAST
                print(f"[{PROG}] job {job.num} skipped: an earlier job failed and sweep.fail_fast=true", flush=True)
                return 0
        self.run_dir, self.reason, self.ended = "", "", None
        begin = time.monotonic()
        try:
            with self._user_hydra_full_error():
                code = self.launch(dict_cfg)
        except UserError as err:
            if self.full_error:
                raise
            error(str(err))
            code = EXIT_USAGE
        if result is not None:
            result.run_dir = self.run_dir
            if self.queued and self.queued[-1].num == job.num:
                result.note = "queued"
                return 0
            if self.reason == lanes.DRY_RUN and code == 0:
                result.note = lanes.DRY_RUN
                return 0
            result.exit_code, result.duration_s = code, time.monotonic() - begin
            result.note = self.note(self.ended)
            if code != 0 and self._fail_fast(dict_cfg):
                self.stop_sweep = True
        self.exit_codes.append(code)
        return code

    @contextlib.contextmanager
    def _user_hydra_full_error(self):
        """While a job launches, HYDRA_FULL_ERROR is what the user set: the ``1`` main() sets for Hydra
        would reach the workers' environment (Isaac Lab's train.py is a Hydra app too)."""
        if self.full_error:
            yield
            return
        saved = os.environ.pop("HYDRA_FULL_ERROR", None)
        try:
            yield
        finally:
            if saved is not None:
                os.environ["HYDRA_FULL_ERROR"] = saved

    def interrupted(self) -> int | None:
        """The signal that interrupted this sweep, if one did."""
        return None if self.interrupts is None else self.interrupts.received

    def note(self, ended: Reason | None) -> str:
        """The summary's note on a job that ran: stopped by the sweep's signal, or by fail_fast."""
        if ended is Reason.FAIL_FAST_STOP:
            return lanes.FAIL_FAST_STOP
        if self.interrupted() is not None and ended is Reason.INTERRUPTED:
            return lanes.INTERRUPTED
        return ""

    def sweep(self, points) -> int | None:
        """``-m``: every point (sweep/points.py) is composed and checked first (a mistake in any
        point: each distinct message once, exit 2, nothing started or written); then the points run
        as jobs, in order."""
        from hydra.core.hydra_config import HydraConfig

        messages: list[str] = []
        self.checking = True
        try:
            for point in points:
                HydraConfig.instance().set_config(point.hydra_config)
                try:
                    self.launch(point.config)
                except UserError as err:
                    if self.full_error:
                        raise
                    messages.append(str(err))
        finally:
            self.checking = False
            self.ports.clear()
        if messages:
            for message in dict.fromkeys(messages):
                error(message)
            return EXIT_USAGE
        for point in points:
            HydraConfig.instance().set_config(point.hydra_config)
            self.job(point.config)
        return None

    def _fail_fast(self, dict_cfg) -> bool:
        from omegaconf import OmegaConf

        if self.fail_fast is not None:
            return self.fail_fast
        try:
            return bool(OmegaConf.select(dict_cfg, "sweep.fail_fast", default=False))
        except Exception:  # an unresolvable config: the safe choice is to carry on
            return False

    # -- one launch ----------------------------------------------------------------------------
    def launch(self, dict_cfg) -> int:
        from omegaconf import OmegaConf

        if self.save_as is not None:
            return self._save_profile(dict_cfg, self.save_as)
        cfg = self.vault.reveal(_to_object(dict_cfg, self.presets))
        self.fail_fast = cfg.sweep.fail_fast
        # forwarded arguments are the user's literal text: added after resolution, never interpolated
        cfg.script_args += self.script_args + self.resume_args
        if cfg.submit is schema.Submit.slurm:
            return self._submit_slurm(cfg)
        if cfg.submit is schema.Submit.ray:
            return self._submit_ray(cfg)
        if cfg.submit is schema.Submit.k8s:
            return self._submit_k8s(cfg)
        facts = probe.gather()
        # launcher=slurm: nnodes, node_rank, endpoints, nproc from SLURM's environment (facts.env)
        cfg, facts, allocation = slurm_launch.from_environment(cfg, facts)
        # launcher=k8s: the same from the Kubeflow operator's variables in this pod
        cfg, facts, pod = k8s_launch.from_environment(cfg, facts)
        if pod is not None and pod.nnodes > 1 and not cfg.dry_run and not self.checking:
            from .k8s import startup

            wait = float(cfg.launcher.join_timeout or startup.DEFAULT_WAIT_S)
            startup.wait_for_node0(pod.master_addr, wait, probe.resolve, probe.ResolveError)
        job = lanes.job_info()
        slot = None
        if job is not None:  # a -m sweep: this job's lane, devices and rendezvous values
            slot = lanes.job_slot(cfg, facts, job.num, sorted(os.sched_getaffinity(0)))
            cfg, facts = lanes.job_config(cfg, job.num, slot), lanes.job_facts(facts, slot)
        # a dry run shows the plan even where this host could not run it: the refusals that come from
        # this host's facts are collected and printed after it, one warning each (a real launch raises)
        refusals: list[UserError] = []
        refuse = refusals.append if cfg.dry_run else checks.refuse_now
        settled = checks.validate(cfg, facts, refuse)
        checks.num_gpus_flag(self.num_gpus, cfg, settled, facts)
        if cfg.launcher.topology is Topology.skrl_jax and settled.coordinator is None:
            port = lanes.distinct_port(probe.free_port, self.ports)
            settled = replace(settled, coordinator=Endpoint("127.0.0.1", port))
        settled = probe.locate(cfg, settled, refuse)
        probe.preflight(cfg, settled, refuse)
        if self.checking:
            return 0
        if cfg.dry_run:
            self.reason = lanes.DRY_RUN
            if job is not None:
                self.run_dir = str(_run_dir(cfg, create=False))
            if allocation is not None:
                print(slurm_launch.describe(allocation))
            if pod is not None:
                print(k8s_launch.describe(pod))
            # the argv a real launch starts: every rank's script behind the worker wrapper
            plan = plan_mod.wrapped(plan_mod.build(cfg, settled, facts, order=self._order()), paths.WORKER_WRAPPER)
            print(
                plan_mod.describe(
                    secrets.mask_plan(lanes.bind(plan, slot)), _dry_run_notes(cfg, settled, self.presets)
                ),
                flush=True,
            )
            for refusal in refusals:
                warning(f"{refusal}; a real launch on this host refuses it")
            return 0
        # (imported here: a dry run or a failed check needs no supervisor; the start-up budget)
        from .run import supervise
        from .run.monitor.liveness import EXIT_NODE_LOST
        from .sweep import parallel

        # a parallel job's directory is made when it starts; a requeued SLURM job's record goes to restart<N>
        run_dir = _run_dir(cfg, create=slot is None, restart=slurm_launch.record_subdir(allocation))
        self.run_dir = str(run_dir)
        logs = RunPaths(run_dir).logs
        plan = supervise.prepare(
            lanes.bind(
                plan_mod.build(
                    cfg, settled, facts, run_dir=_trainer_dir(cfg, run_dir, self.trainer_dir), order=self._order()
                ),
                slot,
            ),
            logs,
        )
        config_yaml = OmegaConf.to_yaml(OmegaConf.structured(secrets.mask_config(cfg)))
        if slot is not None:  # a parallel sweep: started with the others once every job is planned
            devices = f"GPUs {','.join(slot.gpus)}" if slot.gpus else f"CPU cores {','.join(map(str, slot.cpus))}"
            print(
                f"[{PROG}] job {job.num} queued on lane {slot.index} ({devices}); run directory: {run_dir}", flush=True
            )
            self.queued.append(parallel.Queued(job.num, plan, run_dir, config_yaml, slot, self._composed(job)))
            return 0
        logs.mkdir(exist_ok=True)
        supervise.hold_stack_requests()  # status.json names this process from now on
        started = record.write_start(run_dir, config_yaml, plan, self._composed(job))
        print(f"[{PROG}] run directory: {run_dir}", flush=True)
        # Under SLURM, the step's USR1 reaches every worker directly: relaying it would double it.
        try:
            outcome = supervise.run(plan, logs, relay_usr1=not cfg.launcher.from_slurm, interrupts=self.interrupts)
        except UserError as err:  # nothing could be started (preflight looked first): the record says so
            record.write_end(run_dir, started, EXIT_USAGE, f"not started: {err}", Reason.NOT_STARTED)
            raise
        self.reason, self.ended = outcome.reason, outcome.ended
        record.write_end(
            run_dir,
            started,
            outcome.exit_code,
            outcome.reason,
            outcome.ended,
            outcome.failure_record(),
            outcome.stragglers,
        )
        if outcome.port_in_use is not None:  # taken between the preflight check and torchrun's bind
            error(str(probe.port_taken_at_launch(cfg, settled, outcome.port_in_use)))
        elif outcome.exit_code != 0 and outcome.exit_code != EXIT_NODE_LOST:
            _rendezvous_hint(cfg, settled, logs)  # (a lost node is no rendezvous failure)
        print(f"[{PROG}] exit code {outcome.exit_code} ({outcome.reason}); run directory: {run_dir}", flush=True)
        return outcome.exit_code

    def _order(self) -> list[str]:
        """The typed order (grammar.CommandLine.order); ``runs resume``'s flags come last."""
        return [*self.order, *[plan_mod.ARG_ENTRY] * len(self.resume_args)]

    def _composed(self, job: lanes.JobInfo | None) -> dict | None:
        """This launch's composition.json: a sweep job's is the single run of its point (Hydra's
        overrides of the job, its swept values chosen), so ``runs rerun`` of a job reruns that job."""
        if self.composition is None or job is None:
            return self.composition
        own = [o for o in job.overrides if not o.startswith("hydra.")]
        return {**self.composition, "overrides": [record.mask_placeholders(o) for o in own]}

    def _save_profile(self, dict_cfg, target: str) -> int:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        if HydraConfig.get().mode == RunMode.MULTIRUN:
            raise UserError(profiles.SAVE_KEY, Path(target).stem, "saves one composition, not a -m sweep", "drop -m")
        with profiles.env_references_unresolved():
            _to_object(dict_cfg, self.presets)  # a profile that does not compose is not written
        text = profiles.render(dict_cfg, HydraConfig.get().runtime.choices, Path(target).stem, self.command)
        try:
            profiles.write(Path(target), text)
        except OSError as err:  # profiles.save_target looked first; this is what it could not foresee
            raise UserError(profiles.SAVE_KEY, target, f"cannot write it: {err.strerror or err}") from None
        print(f"[{PROG}] profile written: {target} (select it with profile={Path(target).stem})")
        return 0

    def _submit_slurm(self, cfg: schema.TrainConfig) -> int:
        """submit=slurm through its back end (launcher/slurm/backend.py): dryrun (the checks and the
        batch script, from this composition: nothing composed again), then submit. A -m sweep's
        points are collected and submitted as ONE job array by :meth:`finish`."""
        from hydra.core.hydra_config import HydraConfig
        from omegaconf import OmegaConf

        from .backends.base import Launch, Typed
        from .slurm.backend import Shown, SlurmBackend
        from .slurm.submit import DRY_RUN, Submission

        job = lanes.job_info()
        typed = Typed(
            # as typed: an ${oc.env:...} reference stays one (read naively, Hydra's list resolves it)
            overrides=tuple(OmegaConf.to_container(HydraConfig.get().overrides.task, resolve=False)),
            hydra_flags=tuple(self.hydra_flags),
            script_args=tuple(self.script_args),
            order=tuple(self.order),
            command=tuple(self.command),
            presets={k: tuple(v) for k, v in self.presets.items()},
        )
        if self.slurm is None:
            self.slurm = SlurmBackend()
        backend = self.slurm
        # one directory for the whole job (its nodes' records go into node<R> inside): no _node0 suffix
        one_dir = replace(cfg, launcher=replace(cfg.launcher, nnodes="1"))
        launch = Launch(cfg, typed, _run_dir(one_dir, create=False), self.vault, None if job is None else job.num)
        try:
            request = backend.dryrun(launch)
            if self.checking:
                return 0
            if cfg.dry_run and job is not None:  # shown with the others, as the job array it makes
                self.submissions.append(Shown(request))
                return 0
            if cfg.dry_run:
                print(request.shown, end="")
                self.submissions.append(Submission(request.payload.overrides, request.run_dir, None, DRY_RUN))
                return 0
            if job is not None:  # a sweep point: submitted with the others, as one job array
                self.submissions.append(request)
                return 0
            created = _run_dir(one_dir, create=True)  # a new directory, never one that exists
            if str(created) != request.run_dir:
                request = backend.dryrun(replace(launch, run_dir=created))
            handle = backend.submit(request)
        except UserError as err:
            if not self.checking:
                self.submissions.append(Submission(launch.typed.overrides, "", None, str(err)))
            raise
        self.submissions.append(Submission(request.payload.overrides, handle.run_dir, handle.id))
        return 0

    def _submit_ray(self, cfg: schema.TrainConfig) -> int:
        """submit=ray through its back end (launcher/ray_submit/backend.py): this composition, finished,
        becomes one Launch; nothing is composed again."""
        from hydra.core.hydra_config import HydraConfig

        from . import backends
        from .backends.base import Launch, Typed
        from .ray_submit.submit import Jobs

        job = lanes.job_info()
        if self.ray is None:
            self.ray = Jobs(backends.get("ray"))
        typed = Typed(
            overrides=tuple(HydraConfig.get().overrides.task),
            hydra_flags=tuple(self.hydra_flags),
            script_args=tuple(self.script_args),
            order=tuple(self._order()),
            command=tuple(self.command),
            presets={k: tuple(v) for k, v in self.presets.items()},
        )
        # the job's one directory (a multi-node job's nodes record into node<R> inside it)
        one = replace(cfg, launcher=replace(cfg.launcher, nnodes="1", node_rank=0))
        launch = Launch(
            cfg, typed, _run_dir(one, create=False), self.vault, None if job is None else job.num, self._composed(job)
        )
        return self.ray.launch(
            launch,
            [secrets.mask_override(o) for o in HydraConfig.get().overrides.task],
            check_only=self.checking,
            follow_now=job is None,
        )

    def _submit_k8s(self, cfg: schema.TrainConfig) -> int:
        """submit=k8s through its back end (launcher/k8s/backend.py): the request is made from this
        composition (``cfg``, already composed and typed here) and what was typed: nothing is composed
        a second time. A sweep point's refusal is its row of the sweep's table (exit code 2)."""
        from hydra.core.hydra_config import HydraConfig
        from omegaconf import OmegaConf

        from . import backends
        from .backends.base import Launch, Typed
        from .k8s import submit

        job = lanes.job_info()
        # as typed: an interpolation (${oc.env:HF_TOKEN}) stays one, to be resolved in the pod
        overrides = tuple(OmegaConf.to_container(HydraConfig.get().overrides.task, resolve=False))
        typed = Typed(
            overrides=overrides,
            hydra_flags=tuple(self.hydra_flags),
            script_args=tuple(self.script_args),
            order=tuple(self.order),
            command=tuple(self.command),
            presets={k: tuple(v) for k, v in self.presets.items()},
        )
        number = None if job is None else job.num
        # the workstation's record of a submission is one directory, never a node's (launcher.nnodes: the pods)
        here = replace(cfg, launcher=replace(cfg.launcher, nnodes="1"))
        launch = Launch(cfg, typed, _run_dir(here, create=False), self.vault, number, self._composed(job))
        backend = backends.get("k8s")
        try:
            request = backend.dryrun(launch)
            if self.checking:
                return 0
            if cfg.dry_run:
                print(request.shown, end="", flush=True)
                self.submissions.append(
                    submit.Submission(overrides, request.run_dir, request.payload.name, submit.DRY_RUN)
                )
                return 0
            request = replace(request, run_dir=str(_run_dir(here, create=True)))
            handle = backend.submit(request)
        except UserError as err:
            if self.checking:
                raise
            self.submissions.append(submit.Submission(overrides, "", None, str(err)))
            if job is None:
                raise
            return EXIT_USAGE
        self.submissions.append(submit.Submission(overrides, handle.run_dir, handle.id))
        return 0

    # -- after the last job --------------------------------------------------------------------
    def finish(self) -> int:
        """Run a parallel sweep's queued jobs, print the summaries; the invocation's exit code."""
        if self.queued:
            from .sweep import parallel

            self.exit_codes += parallel.run_queued(
                self.queued, self.results, bool(self.fail_fast), self.interrupts, self.note
            )
        if self.ray is not None and self.ray.jobs and self.results:  # a Ray sweep: follow, then its table
            self.exit_codes += self.ray.finish(self.interrupts, bool(self.fail_fast))
        elif self.submissions and (len(self.submissions) > 1 or self.results):
            from .k8s import submit as k8s_submit
            from .slurm import submit as slurm_submit

            if self.slurm is not None:  # a SLURM sweep: its points as one job array
                from .slurm.backend import submit_sweep

                self.exit_codes += submit_sweep(self.slurm, self.submissions)

            # a SLURM or Kubernetes sweep: its table says what was submitted
            summary = (
                k8s_submit.summary if isinstance(self.submissions[0], k8s_submit.Submission) else slurm_submit.summary
            )
            print(summary(self.submissions), flush=True)
        elif self.results:
            print(f"[{PROG}] sweep summary\n" + lanes.summary(self.results), flush=True)
            self._sweep_curves()
        if self.interrupted() is not None:
            return 128 + self.interrupted()
        failures = [code for code in self.exit_codes if code != 0]
        return failures[0] if failures else 0

    def _sweep_curves(self) -> None:
        """One PNG of the jobs' learning curves, labelled by their swept values, in the sweep's
        directory (launcher/sweep/curves.py); matplotlib is imported only when there is one to draw."""
        from .sweep import curves

        results = sorted(self.results, key=lambda r: r.num)
        labels = [" ".join(own) or f"job {r.num}" for r, own in zip(results, swept([r.overrides for r in results]))]
        ran = [(r.run_dir, label) for r, label in zip(results, labels) if r.exit_code is not None and r.run_dir]
        _, note = curves.sweep_png(ran)
        if note:
            print(f"[{PROG}] {note}", flush=True)


def _to_object(cfg, presets: dict[str, list[str]]) -> schema.TrainConfig:
    from omegaconf.errors import OmegaConfBaseException

    try:
        return compose.to_typed(cfg, presets)
    except OmegaConfBaseException as err:
        raise translate.from_omegaconf(err) from err


def _multirun() -> bool:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.get().mode == RunMode.MULTIRUN


def _run_dir(cfg: schema.TrainConfig, create: bool = True, restart: str = "") -> Path:
    """The launcher's record of this launch (config.yaml, command.sh, status.json, logs/), created;
    ``create=False``: where it will be (a sweep job's, before it starts; a dry run's)."""
    from hydra.core.hydra_config import HydraConfig

    if _multirun():
        path = Path(HydraConfig.get().runtime.output_dir)
        if create:
            path.mkdir(parents=True, exist_ok=True)
        return path.resolve()
    multinode = cfg.launcher.nnodes != "1"
    try:
        if cfg.run_dir is not None:  # given by submit=slurm: one directory for the job, restart<N>, node<R> inside
            path = Path(cfg.run_dir) / restart / (node_name(cfg.launcher.node_rank) if multinode else "")
            if create:
                path.mkdir(parents=True, exist_ok=True)
            return path.resolve()
        if not create:
            return Path(os.path.abspath(cfg.run_root)) / record.run_dir_name(cfg.run_name)
        return record.create_run_dir(cfg.run_root, cfg.run_name, cfg.launcher.node_rank, multinode)
    except OSError as err:  # probe.preflight looked first; this is what it could not foresee
        key, value = ("run_dir", cfg.run_dir) if cfg.run_dir is not None else ("run_root", cfg.run_root)
        raise UserError(
            key, value, f"cannot create the run directory: {err.strerror or err}", "choose a directory you can write"
        ) from None


def _trainer_dir(cfg: schema.TrainConfig, record_dir: Path, trainer_dir: str | None = None) -> str:
    """TRAIN_MULTIGPU_RUN_DIR: the job's directory when run_dir is given (every node and every restart
    of a SLURM job train, checkpoint and resume there); ``runs resume``: the resumed run's (``trainer_dir``);
    else the launch's own record directory."""
    if cfg.run_dir is not None and not _multirun():
        return str(Path(cfg.run_dir).resolve())
    return trainer_dir or str(record_dir)


def _dry_run_notes(cfg: schema.TrainConfig, settled: facts.Settled, presets: dict[str, list[str]]) -> list[str]:
    """What the dry run says beyond the commands: presets applied and forwarded, where Isaac Lab was
    found when ISAACLAB_PATH is unset."""
    from hydra.core.hydra_config import HydraConfig

    notes = []
    forwarded = compose.forwarded_presets(cfg, presets)
    typed = [name for _, names in compose.preset_overrides(HydraConfig.get().overrides.task) for name in names]
    if typed:
        applied = [name for name in typed if name not in forwarded]
        notes.append(
            f"presets: applied {', '.join(applied) or '-'}; "
            f"forwarded to the training script as presets=NAME: {', '.join(forwarded) or '-'}"
        )
    checkout = isaaclab.isaaclab_checkout(os.environ)
    if (
        checkout is not None
        and checkout.how != isaaclab.ISAACLAB_ENV
        and settled.script.startswith(checkout.root + os.sep)
    ):
        notes.append(f"Isaac Lab: {checkout.root} ({checkout.how})")
    return notes


def _rendezvous_hint(cfg: schema.TrainConfig, settled: facts.Settled, logs: Path) -> None:
    """After a failed multi-node torchrun launch: say what the rendezvous waited for, when torchrun's
    output shows that the nodes never all met (docs/multinode.md)."""
    from . import rendezvous

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
            Endpoint(cfg.launcher.master_addr or "127.0.0.1", cfg.launcher.master_port or facts.MASTER_DEFAULT_PORT)
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
