"""One invocation of ``train_multigpu``: a single launch, or every job of a ``-m`` sweep.

:class:`Session` is the state that used to be a module global in the CLI. ``cli.main`` creates one
per invocation and hands its bound :meth:`Session.job` to Hydra as the task function (and every
point of a ``-m`` sweep to :meth:`Session.sweep`), so nothing outlives the call (tests call
``main`` many times in one process). Why an object and not a Hydra ``Launcher`` plugin: a Launcher
must be packaged as ``hydra_plugins`` (it would be seen by every Hydra app installed beside us), it
would replace Hydra's BasicLauncher for ``-m`` only, and a single run never goes through one; an
object that ``main`` owns covers both paths with the same code.

One path for every back end (:mod:`launcher.backends`), for a single launch and a sweep alike, with
no code of its own for any of them: *prepare* composes each point into a
:class:`~launcher.backends.base.Launch` and asks its back end for a request (``dryrun``: pure; for a
sweep this is the check of every point before anything starts); *execute* hands a dry run's requests
to ``show`` and the others to ``submit_all`` and ``wait``; *finish* prints a sweep's ``summary``.
The local launch (``submit=none``) is :class:`launcher.backends.local.LocalBackend`.
"""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from . import backends, errors, secrets
from .backends.base import Launch, Point, Typed
from .config import compose, profiles, schema, translate
from .errors import EXIT_USAGE, UserError
from .names import PROG
from .sweep import lanes
from .sweep.state import Sweep, first_failure


def error(message: str) -> None:
    """The one error path's output: one line on stderr."""
    print(f"{PROG}: error: {errors.one_line(message)}", file=sys.stderr)


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
    points: dict[str, list[Point]] = field(default_factory=dict)  # what each ran, for a sweep's summary

    # -- the Hydra task function ----------------------------------------------------------------
    def job(self, dict_cfg) -> int:
        """One launch (or one point of a sweep Hydra's own launcher runs: ``-m`` with other flags)."""
        self.started = True
        if self.save_as is not None:
            return self._saved(dict_cfg)
        job = lanes.job_info()
        prepared, messages = self.prepare([(job, dict_cfg)])
        if messages:
            self.exit_codes.append(EXIT_USAGE)
            return EXIT_USAGE
        codes = self.execute(prepared)
        return first_failure(codes)

    def sweep(self, points) -> int | None:
        """``-m``: every point (sweep/points.py) is composed and checked first (a mistake in any
        point: each distinct message once, exit 2, nothing started or written); then the points run
        as jobs, in order."""
        from hydra.core.hydra_config import HydraConfig

        if self.save_as is not None:
            HydraConfig.instance().set_config(points[0].hydra_config)
            return self._saved(points[0].config)
        from .sweep import points as sweep_points

        prepared = [(lanes.JobInfo(point.num, tuple(point.overrides)), point.config) for point in points]
        kin = compose.Typing()  # what the points' typed configs share (the same base, keys no point sets)
        with sweep_points.collector_held():  # every point's configs stay alive: no full collection walks them
            ready, messages = self.prepare(
                prepared, hydra=[p.hydra_config for p in points], kin=[(kin, p.base, p.touched) for p in points]
            )
        if messages:
            return EXIT_USAGE
        self.execute(ready)
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
    def prepare(self, points, hydra=None, kin=None) -> tuple[list[Point], list[str]]:
        """Each point's launch and request (a :class:`Point` not yet run); a mistake in any: each
        distinct message printed once. A sweep's: ``hydra``, each point's config with its hydra node;
        ``kin``, each point's (typing, base, touched keys) for :func:`compose.to_typed`."""
        from .sweep import points as sweep_points

        prepared: list[Point] = []
        messages: list[str] = []
        for index, (job, dict_cfg) in enumerate(points):
            if hydra is not None:
                sweep_points.use(hydra[index])
            try:
                with self._user_hydra_full_error():
                    launch = self._launch(dict_cfg, job, () if kin is None else kin[index])
                    prepared.append(Point(launch, self._backend(launch.cfg.submit.value).dryrun(launch)))
            except UserError as err:
                if self.full_error:
                    raise
                messages.append(str(err))
        for message in dict.fromkeys(messages):
            error(message)
        return prepared, messages

    def _launch(self, dict_cfg, job: lanes.JobInfo | None, kin: tuple = ()) -> Launch:
        """One point, composed and typed, its secrets revealed, what was typed for it, the directory
        it records in (a sweep point's: Hydra's; else the job's: backends/job_dir.py)."""
        from hydra.core.hydra_config import HydraConfig
        from omegaconf import OmegaConf

        cfg = self.vault.reveal(_to_object(dict_cfg, self.typed.presets, *kin))
        # a secret given by reference (${oc.env:HF_TOKEN}) is resolved here, where the command is typed
        vault = self.vault.resolved_here(secrets.references(dict_cfg), cfg)
        # forwarded arguments are the user's literal text: added after resolution, never interpolated
        cfg.script_args += [*self.typed.script_args, *self.typed.resume_args]
        # the point's own overrides, as typed: an interpolation (${oc.env:HF_TOKEN}) stays one
        task = OmegaConf.to_container(HydraConfig.get().overrides.task, resolve=False)
        typed = replace(self.typed, overrides=tuple(task))
        num = None if job is None else job.num
        return Launch(cfg, typed, _planned_dir(cfg), vault, num, self._composed(job))

    def _backend(self, name: str):
        """The back end for ``submit=name``, one per invocation (it keeps its launches' state)."""
        if name not in self.backends:
            self.backends[name] = backends.get(name)
        return self.backends[name]

    # -- execute: show, or submit and wait --------------------------------------------------------
    def execute(self, prepared: list[Point]) -> list[int]:
        """Show the dry runs' requests, submit the others and wait for them, each back end's at
        once; every point kept for the sweep's summary. The exit codes."""
        self.started = True
        codes: list[int] = []
        groups: dict[str, list[Point]] = {}
        for point in prepared:
            groups.setdefault(point.launch.cfg.submit.value, []).append(point)
        interrupts = None if self.multirun is None else self.multirun.interrupts
        for name, group in groups.items():
            backend = self._backend(name)
            shown = [p for p in group if p.shown]
            real = [p for p in group if not p.shown]
            outcomes: list = []
            try:
                with self._user_hydra_full_error():
                    if shown:  # what a real launch would run
                        backend.show([p.request for p in shown])
                        codes += [0] * len(shown)
                    if real:
                        fail_fast = any(p.launch.cfg.sweep.fail_fast for p in real)
                        outcomes = backend.submit_all([p.request for p in real], interrupts, fail_fast)
                        codes += backend.wait(outcomes, interrupts, fail_fast)
            except UserError as err:
                if self.full_error:
                    raise
                error(str(err))
                codes.append(EXIT_USAGE)
            ran = self.points.setdefault(name, [])
            ran += shown
            ran += [replace(p, outcome=o) for p, o in zip(real, [*outcomes, *[None] * len(real)])]
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
        how = profiles.selection(Path(target), os.environ, os.getcwd())
        print(f"[{PROG}] profile written: {target} ({how})")
        return 0

    # -- after the last job --------------------------------------------------------------------
    def finish(self) -> int:
        """A sweep's summary from each back end that ran its points; the invocation's exit code."""
        if self.multirun is not None:
            for name, points in self.points.items():
                text = self._backend(name).summary(points)
                if text:
                    print(text, flush=True)
        if self.multirun is not None and self.multirun.interrupted() is not None:
            return 128 + self.multirun.interrupted()
        return first_failure(self.exit_codes)


def _to_object(cfg, presets: dict[str, list[str]], *kin) -> schema.TrainConfig:
    from omegaconf.errors import OmegaConfBaseException

    try:
        return compose.to_typed(cfg, presets, *kin)
    except OmegaConfBaseException as err:
        raise translate.from_omegaconf(err) from err


def _multirun() -> bool:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.get().mode == RunMode.MULTIRUN


def _planned_dir(cfg: schema.TrainConfig) -> Path:
    """Where a launch records (not created here): a sweep point's, Hydra's output directory for it;
    else the job's one directory (backends/job_dir.py: never a node's; the local back end derives a
    node's and a requeue's itself)."""
    from hydra.core.hydra_config import HydraConfig

    if _multirun():
        return Path(HydraConfig.get().runtime.output_dir).resolve()
    from .backends import job_dir

    return job_dir.planned(cfg)
