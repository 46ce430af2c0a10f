"""One invocation of ``train_multigpu``: a single launch, or every job of a ``-m`` sweep.

:class:`Session` is the state that used to be a module global in the CLI. ``cli.main`` creates one
per invocation and hands its bound :meth:`Session.job` to Hydra as the task function (and every
point of a ``-m`` sweep to :meth:`Session.sweep`), so nothing outlives the call (tests call
``main`` many times in one process). Why an object and not a Hydra ``Launcher`` plugin: a Launcher
must be packaged as ``hydra_plugins`` (it would be seen by every Hydra app installed beside us), it
would replace Hydra's BasicLauncher for ``-m`` only, and a single run never goes through one; an
object that ``main`` owns covers both paths with the same code.

One path for every back end (:mod:`launcher.backends`), for a single launch and a sweep alike:
*prepare* composes each point into a :class:`~launcher.backends.base.Launch` and asks its back end
for a request (``dryrun``: pure; for a sweep this is the check of every point before anything
starts); *execute* prints the requests (dry run) or submits them (``submit_all``) and waits for
them (``wait``). The local launch (``submit=none``) is :class:`launcher.backends.local.LocalBackend`.
"""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from . import backends, errors, secrets
from .backends.base import DRY_RUN, Launch, Request, Typed
from .config import compose, profiles, schema, translate
from .errors import EXIT_USAGE, UserError
from .names import PROG
from .sweep import lanes
from .sweep.state import Sweep, first_failure


def error(message: str) -> None:
    """The one error path's output: one line on stderr."""
    print(f"{PROG}: error: {errors.one_line(message)}", file=sys.stderr)


def warning(message: str) -> None:
    """A dry run's line for what a real launch on this host would refuse: one line on stderr."""
    print(f"{PROG}: warning: {errors.one_line(message)}", file=sys.stderr, flush=True)


@dataclass
class Session:
    """What ``main`` hands to each Hydra job, and what the jobs report back."""

    typed: Typed = field(default_factory=Typed)  # what the user typed (cli.launch_line, once)
    vault: secrets.Vault = field(default_factory=secrets.Vault)  # secret values Hydra never sees
    composition: dict | None = None  # record.composition: what was typed (<run_dir>/composition.json)
    full_error: bool = False  # HYDRA_FULL_ERROR=1: show tracebacks instead of one-line errors
    save_as: str | None = None  # save_profile=NAME: the file to write instead of launching
    multirun: Sweep | None = None  # -m: the sweep's signal handling and summary rows (sweep/state.py)
    started: bool = False  # a job began (a sweep: its checks passed): later errors are not composition errors
    exit_codes: list[int] = field(default_factory=list)  # every launch's, in the order they ended
    # the back ends used so far, by submit= value: each keeps its own state (ports, submissions)
    backends: dict[str, object] = field(default_factory=dict)

    # -- the Hydra task function ----------------------------------------------------------------
    def job(self, dict_cfg) -> int:
        """One launch (or one point of a sweep Hydra's own launcher runs: ``-m`` with other flags)."""
        self.started = True
        if self.save_as is not None:
            return self._saved(dict_cfg)
        job = lanes.job_info()
        requests, messages = self.prepare([(job, dict_cfg)])
        if messages:
            self.exit_codes.append(EXIT_USAGE)
            return EXIT_USAGE
        codes = self.execute(requests)
        return first_failure(codes)

    def sweep(self, points) -> int | None:
        """``-m``: every point (sweep/points.py) is composed and checked first (a mistake in any
        point: each distinct message once, exit 2, nothing started or written); then the points run
        as jobs, in order."""
        from hydra.core.hydra_config import HydraConfig

        if self.save_as is not None:
            HydraConfig.instance().set_config(points[0].hydra_config)
            return self._saved(points[0].config)
        prepared = [(lanes.JobInfo(point.num, tuple(point.overrides)), point.config) for point in points]
        requests, messages = self.prepare(prepared, hydra=[p.hydra_config for p in points])
        if messages:
            return EXIT_USAGE
        self.execute(requests)
        return None

    def _saved(self, dict_cfg) -> int:
        """save_profile=NAME: the composition written as a profile instead of a launch."""
        try:
            return self._save_profile(dict_cfg, self.save_as)
        except UserError as err:
            if self.full_error:
                raise
            error(str(err))
            self.exit_codes.append(EXIT_USAGE)
            return EXIT_USAGE

    # -- prepare: every point's request; nothing written ------------------------------------------
    def prepare(self, points, hydra=None) -> tuple[list[tuple[object, Request]], list[str]]:
        """Each point's (back end, request); a mistake in any: each distinct message printed once."""
        from hydra.core.hydra_config import HydraConfig

        requests: list[tuple[object, Request]] = []
        messages: list[str] = []
        for index, (job, dict_cfg) in enumerate(points):
            if hydra is not None:
                HydraConfig.instance().set_config(hydra[index])
            try:
                with self._user_hydra_full_error():
                    launch = self._launch(dict_cfg, job)
                    backend = self._backend(launch.cfg.submit.value)
                    requests.append((backend, backend.dryrun(launch)))
            except UserError as err:
                if self.full_error:
                    raise
                messages.append(str(err))
        for message in dict.fromkeys(messages):
            error(message)
        return requests, messages

    def _launch(self, dict_cfg, job: lanes.JobInfo | None) -> Launch:
        """One point, composed and typed, its secrets revealed, what was typed for it."""
        from hydra.core.hydra_config import HydraConfig
        from omegaconf import OmegaConf

        cfg = self.vault.reveal(_to_object(dict_cfg, self.typed.presets))
        # forwarded arguments are the user's literal text: added after resolution, never interpolated
        cfg.script_args += [*self.typed.script_args, *self.typed.resume_args]
        # the point's own overrides, as typed: an interpolation (${oc.env:HF_TOKEN}) stays one
        task = OmegaConf.to_container(HydraConfig.get().overrides.task, resolve=False)
        typed = replace(self.typed, overrides=tuple(task))
        num = None if job is None else job.num
        return Launch(cfg, typed, _run_dir(cfg, create=False), self.vault, num, self._composed(job))

    def _backend(self, name: str):
        """The back end for ``submit=name``, one per invocation; the ones not yet converted to the
        Backend interface run through the session's former calls (:class:`_Pending`)."""
        if name not in self.backends:
            # submit=slurm|ray|k8s: their back ends' requests, through the session's calls (_Pending)
            backend = backends.get(name) if name == "none" else _Pending(name, self)
            if hasattr(backend, "interrupts") and self.multirun is not None:
                backend.interrupts = self.multirun.interrupts
            self.backends[name] = backend
        return self.backends[name]

    # -- execute: show, or submit and wait --------------------------------------------------------
    def execute(self, requests: list[tuple[object, Request]]) -> list[int]:
        """Print the requests (dry run) or submit them and wait; a sweep's rows; the exit codes."""
        self.started = True
        codes: list[int] = []
        by_backend: dict[int, list[Request]] = {}
        owners = {}
        for backend, request in requests:
            by_backend.setdefault(id(backend), []).append(request)
            owners[id(backend)] = backend
        for key, group in by_backend.items():
            backend = owners[key]
            if isinstance(backend, _Pending):
                codes += backend.run(group)
                continue
            for request in [r for r in group if r.payload.cfg.dry_run]:  # what a real launch would run
                print(request.shown, flush=True)
                for line in request.payload.warnings:
                    warning(line)
                codes.append(0)
                if self.multirun is not None:
                    job = request.payload.launch
                    self.multirun.add(job.job, job.typed.overrides, request.run_dir, dry_run=True)
            group = [r for r in group if not r.payload.cfg.dry_run]
            if not group:
                continue
            with self._user_hydra_full_error():
                handles = backend.submit_all(group)
                waited = backend.wait(handles, getattr(backend, "interrupts", None))
            ended = getattr(backend, "results", None)
            if ended is None:
                codes += waited
                continue
            # the local back end: each launch's result, in the order they ended
            codes += [r.exit_code for r in ended.values() if r.counted and r.exit_code is not None]
            if self.multirun is not None:
                for request in group:
                    launch = request.payload.launch
                    result = ended.get(request.run_dir)
                    self.multirun.add(launch.job, launch.typed.overrides, request.run_dir, result)
        self.exit_codes += codes
        return codes

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

    def _order(self) -> list[str]:
        """The typed order (grammar.CommandLine.order); ``runs resume``'s flags come last."""
        return list(self.typed.script_order)

    def _composed(self, job: lanes.JobInfo | None) -> dict | None:
        """This launch's composition.json: a sweep job's is the single run of its point (Hydra's
        overrides of the job, its swept values chosen), so ``runs rerun`` of a job reruns that job."""
        from . import record

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
            _to_object(dict_cfg, self.typed.presets)  # a profile that does not compose is not written
        text = profiles.render(dict_cfg, HydraConfig.get().runtime.choices, Path(target).stem, list(self.typed.command))
        try:
            profiles.write(Path(target), text)
        except OSError as err:  # profiles.save_target looked first; this is what it could not foresee
            raise UserError(profiles.SAVE_KEY, target, f"cannot write it: {err.strerror or err}") from None
        print(f"[{PROG}] profile written: {target} (select it with profile={Path(target).stem})")
        return 0

    def _submit_slurm(self, cfg: schema.TrainConfig, pending: _Pending, check_only: bool = False) -> int:
        """submit=slurm through its back end (launcher/slurm/backend.py): dryrun (the checks and the
        batch script, from this composition: nothing composed again), then submit. A -m sweep's
        points are collected and submitted as ONE job array by :meth:`finish`."""
        from hydra.core.hydra_config import HydraConfig
        from omegaconf import OmegaConf

        from .backends.base import Launch, Typed
        from .slurm.backend import Shown, SlurmBackend
        from .slurm.submit import Submission

        job = lanes.job_info()
        typed = Typed(
            # as typed: an ${oc.env:...} reference stays one (read naively, Hydra's list resolves it)
            overrides=tuple(OmegaConf.to_container(HydraConfig.get().overrides.task, resolve=False)),
            hydra_flags=self.typed.hydra_flags,
            script_args=self.typed.script_args,
            order=self.typed.order,
            command=self.typed.command,
            presets=self.typed.presets,
        )
        if pending.slurm is None:
            pending.slurm = SlurmBackend()
        backend = pending.slurm
        # one directory for the whole job (its nodes' records go into node<R> inside): no _node0 suffix
        one_dir = replace(cfg, launcher=replace(cfg.launcher, nnodes="1"))
        launch = Launch(cfg, typed, _run_dir(one_dir, create=False), self.vault, None if job is None else job.num)
        try:
            request = backend.dryrun(launch)
            if check_only:
                return 0
            if cfg.dry_run and job is not None:  # shown with the others, as the job array it makes
                pending.submissions.append(Shown(request))
                return 0
            if cfg.dry_run:
                print(request.shown, end="")
                pending.submissions.append(Submission(request.payload.overrides, request.run_dir, None, DRY_RUN))
                return 0
            if job is not None:  # a sweep point: submitted with the others, as one job array
                pending.submissions.append(request)
                return 0
            created = _run_dir(one_dir, create=True)  # a new directory, never one that exists
            if str(created) != request.run_dir:
                request = backend.dryrun(replace(launch, run_dir=created))
            handle = backend.submit(request)
        except UserError as err:
            if not check_only:
                pending.submissions.append(Submission(launch.typed.overrides, "", None, str(err)))
            raise
        pending.submissions.append(Submission(request.payload.overrides, handle.run_dir, handle.id))
        return 0

    def _submit_ray(self, cfg: schema.TrainConfig, pending: _Pending, check_only: bool = False) -> int:
        """submit=ray through its back end (launcher/ray_submit/backend.py): this composition, finished,
        becomes one Launch; nothing is composed again."""
        from hydra.core.hydra_config import HydraConfig

        from . import backends
        from .backends.base import Launch, Typed
        from .ray_submit.submit import Jobs

        job = lanes.job_info()
        if pending.ray is None:
            pending.ray = Jobs(backends.get("ray"))
        typed = Typed(
            overrides=tuple(HydraConfig.get().overrides.task),
            hydra_flags=self.typed.hydra_flags,
            script_args=self.typed.script_args,
            order=tuple(self._order()),
            command=self.typed.command,
            presets=self.typed.presets,
        )
        # the job's one directory (a multi-node job's nodes record into node<R> inside it)
        one = replace(cfg, launcher=replace(cfg.launcher, nnodes="1", node_rank=0))
        launch = Launch(
            cfg, typed, _run_dir(one, create=False), self.vault, None if job is None else job.num, self._composed(job)
        )
        return pending.ray.launch(
            launch,
            [secrets.mask_override(o) for o in HydraConfig.get().overrides.task],
            check_only=check_only,
            follow_now=job is None,
        )

    def _submit_k8s(self, cfg: schema.TrainConfig, pending: _Pending, check_only: bool = False) -> int:
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
            hydra_flags=self.typed.hydra_flags,
            script_args=self.typed.script_args,
            order=self.typed.order,
            command=self.typed.command,
            presets=self.typed.presets,
        )
        number = None if job is None else job.num
        # the workstation's record of a submission is one directory, never a node's (launcher.nnodes: the pods)
        here = replace(cfg, launcher=replace(cfg.launcher, nnodes="1"))
        launch = Launch(cfg, typed, _run_dir(here, create=False), self.vault, number, self._composed(job))
        backend = backends.get("k8s")
        try:
            request = backend.dryrun(launch)
            if check_only:
                return 0
            if cfg.dry_run:
                print(request.shown, end="", flush=True)
                pending.submissions.append(submit.Submission(overrides, request.run_dir, request.payload.name, DRY_RUN))
                return 0
            request = replace(request, run_dir=str(_run_dir(here, create=True)))
            handle = backend.submit(request)
        except UserError as err:
            if check_only:
                raise
            pending.submissions.append(submit.Submission(overrides, "", None, str(err)))
            if job is None:
                raise
            return EXIT_USAGE
        pending.submissions.append(submit.Submission(overrides, handle.run_dir, handle.id))
        return 0

    # -- after the last job --------------------------------------------------------------------
    def finish(self) -> int:
        """The submitted sweeps' tables, a local sweep's summary; the invocation's exit code."""
        tabled = False
        for backend in self.backends.values():
            if isinstance(backend, _Pending):
                tabled = backend.finish() or tabled
        if self.multirun is not None and self.multirun.results and not tabled:
            self.multirun.summary()
        if self.multirun is not None and self.multirun.interrupted() is not None:
            return 128 + self.multirun.interrupted()
        return first_failure(self.exit_codes)


class _Pending:
    """``submit=slurm|ray|k8s`` until their back ends (launcher/<name>/backend.py, issue 19) are
    merged: the session's former calls, through the same prepare → execute path. ``dryrun`` is the
    former pre-check (``check_only``); ``run`` the former job calls; ``finish`` the former tables.
    Its state: SLURM's or Kubernetes' submissions, Ray's submitter."""

    def __init__(self, name: str, session: Session):
        self.name, self.session = name, session
        self.submissions: list = []  # one slurm.submit.Submission / k8s.submit.Submission per job
        self.ray = None  # a ray_submit.submit.Jobs (the Ray back end's jobs), made by the first Ray launch
        self.slurm = None  # the SLURM back end: a sweep's points are submitted as one job array
        self.swept = False  # a -m sweep ran through it (its table is printed)
        self.stopped = False  # sweep.fail_fast after a failed submission
        self.fail_fast = False  # the sweep's sweep.fail_fast

    def _call(self, cfg, check_only: bool) -> int:
        return getattr(self.session, f"_submit_{self.name}")(cfg, self, check_only=check_only)

    def dryrun(self, launch: Launch) -> Request:
        from hydra.core.hydra_config import HydraConfig

        self._call(launch.cfg, check_only=True)
        return Request(self.name, str(launch.run_dir), "", payload=(launch, HydraConfig.instance().cfg))

    def run(self, requests: list[Request]) -> list[int]:
        from hydra.core.hydra_config import HydraConfig

        codes = []
        sweep = self.session.multirun
        for request in requests:
            launch, hydra_cfg = request.payload
            HydraConfig.instance().set_config(hydra_cfg)
            if launch.job is not None:
                self.swept = True
                row = lanes.JobResult(launch.job, launch.typed.overrides)
                sweep.results.append(row)
                if sweep.interrupted() is not None:
                    row.note = lanes.SKIPPED_INTERRUPTED
                    continue
                if self.stopped:
                    row.note = lanes.SKIPPED_FAIL_FAST
                    print(
                        f"[{PROG}] job {launch.job} skipped: an earlier job failed and sweep.fail_fast=true", flush=True
                    )
                    continue
            try:
                code = self._call(launch.cfg, check_only=False)
            except UserError as err:
                if self.session.full_error:
                    raise
                error(str(err))
                code = EXIT_USAGE
            if launch.job is not None:
                row.exit_code = code
                self.fail_fast = launch.cfg.sweep.fail_fast
                self.stopped = self.stopped or (code != 0 and launch.cfg.sweep.fail_fast)
            codes.append(code)
        return codes

    def finish(self) -> bool:
        """Follow a Ray sweep, print a submitted sweep's table; whether a table was printed."""
        sweep = self.session.multirun
        if self.ray is not None and self.ray.jobs and self.swept:  # a Ray sweep: follow, then its table
            self.session.exit_codes += self.ray.finish(sweep.interrupts, bool(self.fail_fast))
            return True
        if self.submissions and (len(self.submissions) > 1 or self.swept):
            from .k8s import submit as k8s_submit
            from .slurm import submit as slurm_submit

            if self.slurm is not None:  # a SLURM sweep: its points as one job array
                from .slurm.backend import submit_sweep

                self.session.exit_codes += submit_sweep(self.slurm, self.submissions)

            # a SLURM or Kubernetes sweep: its table says what was submitted
            summary = k8s_submit.summary if self.name == "k8s" else slurm_submit.summary
            print(summary(self.submissions), flush=True)
            return True
        return False


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
    from .backends import local

    return local.run_dir(cfg, create, restart)
