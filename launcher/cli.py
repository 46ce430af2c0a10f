"""``train_multigpu``: split the command line, compose the config with Hydra, validate, plan, then
print the plan (dry run) or run it.

Every user mistake ends here as one line on stderr and exit code 2; ``HYDRA_FULL_ERROR=1`` shows
the traceback instead.
"""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Optional

from . import checks, compose, errors, grammar, host, multirun, plan as plan_mod, profiles, record, schema, secrets, slurm_launch, supervise, sweep
from .addresses import Endpoint
from .errors import EXIT_USAGE, UserError
from .schema import Topology

PROG = "train_multigpu"


@dataclass
class _Invocation:
    """What main() hands to the Hydra job, and what the job reports back."""

    script_args: list[str] = field(default_factory=list)
    order: list[str] = field(default_factory=list)  # grammar.CommandLine.order: the typed order
    full_error: bool = False  # HYDRA_FULL_ERROR=1: show tracebacks instead of one-line errors
    started: bool = False
    exit_codes: list[int] = field(default_factory=list)
    # -m sweeps (launcher.sweep)
    results: list = field(default_factory=list)  # sweep.JobResult per job, for the summary
    queued: list = field(default_factory=list)  # _Queued jobs of a parallel sweep
    ports: set = field(default_factory=set)  # JAX coordinator ports given to jobs of this sweep
    run_dir: str = ""
    fail_fast: Optional[bool] = None
    stop_sweep: bool = False
    interrupts: Optional[supervise.Interrupts] = None  # a sweep's signal handling, from start to summary
    reason: str = ""  # how the last launch ended (supervise.Outcome.reason)
    checking: bool = False  # a sweep's first pass: every point is checked before any job starts
    save_as: Optional[str] = None  # save_profile=NAME: the file to write instead of launching
    command: list[str] = field(default_factory=list)
    hydra_flags: list[str] = field(default_factory=list)
    submissions: list = field(default_factory=list)  # submit=slurm: one slurm_submit.Submission per job
    vault: secrets.Vault = field(default_factory=secrets.Vault)  # secret values Hydra never sees
    num_gpus: Optional[str] = None  # Isaac Lab's --num_gpus, when given (checks.num_gpus_flag)


@dataclass
class _Queued:
    num: int
    plan: plan_mod.LaunchPlan
    run_dir: Path
    config_yaml: str
    slot: "sweep.Slot"


_CURRENT = _Invocation()


def _error(message: str) -> None:
    print(f"{PROG}: error: {errors.one_line(message)}", file=sys.stderr)


def _full_error() -> bool:
    return os.environ.get("HYDRA_FULL_ERROR") == "1"


def _to_object(cfg) -> schema.TrainConfig:
    from omegaconf.errors import OmegaConfBaseException

    try:
        return compose.to_typed(cfg)
    except OmegaConfBaseException as err:
        raise UserError.from_omegaconf(err) from err


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
            path = Path(cfg.run_dir) / restart / (f"node{cfg.launcher.node_rank}" if multinode else "")
            if create:
                path.mkdir(parents=True, exist_ok=True)
            return path.resolve()
        if not create:
            from .slurm_submit import new_run_dir_name

            return Path(new_run_dir_name(cfg.run_root, cfg.run_name))
        return record.create_run_dir(cfg.run_root, cfg.run_name, cfg.launcher.node_rank, multinode)
    except OSError as err:  # checks.preflight looked first; this is what it could not foresee
        key, value = ("run_dir", cfg.run_dir) if cfg.run_dir is not None else ("run_root", cfg.run_root)
        raise UserError(key, value, f"cannot create the run directory: {err.strerror or err}", "choose a directory you can write") from None


def _trainer_dir(cfg: schema.TrainConfig, record_dir: Path) -> str:
    """TRAIN_MULTIGPU_RUN_DIR: the job's directory when run_dir is given (every node and every restart
    of a SLURM job train, checkpoint and resume there); else the launch's own record directory."""
    if cfg.run_dir is not None and not _multirun():
        return str(Path(cfg.run_dir).resolve())
    return str(record_dir)


def _flag_value(flags: list[str], *names: str) -> Optional[str]:
    for i, flag in enumerate(flags[:-1]):
        if flag in names:
            return flags[i + 1]
    return None


def _save_profile(dict_cfg, target: str) -> int:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if HydraConfig.get().mode == RunMode.MULTIRUN:
        raise UserError(profiles.SAVE_KEY, Path(target).stem, "saves one composition, not a -m sweep", "drop -m")
    with profiles.env_references_unresolved():
        _to_object(dict_cfg)  # a profile that does not compose is not written
    text = profiles.render(dict_cfg, HydraConfig.get().runtime.choices, Path(target).stem, _CURRENT.command)
    try:
        profiles.write(Path(target), text)
    except OSError as err:  # profiles.save_target looked first; this is what it could not foresee
        raise UserError(profiles.SAVE_KEY, target, f"cannot write it: {err.strerror or err}") from None
    print(f"[{PROG}] profile written: {target} (select it with profile={Path(target).stem})")
    return 0


def launch(dict_cfg) -> int:
    from omegaconf import OmegaConf

    if _CURRENT.save_as is not None:
        return _save_profile(dict_cfg, _CURRENT.save_as)
    cfg = _CURRENT.vault.reveal(_to_object(dict_cfg))
    _CURRENT.fail_fast = cfg.sweep.fail_fast
    # forwarded arguments are the user's literal text: added after resolution, never interpolated
    cfg.script_args += _CURRENT.script_args
    if cfg.submit is schema.Submit.slurm:
        return _submit_slurm(cfg)
    facts = host.gather()
    # launcher=slurm: nnodes, node_rank, endpoints, nproc from SLURM's environment (facts.env)
    cfg, facts, allocation = slurm_launch.from_environment(cfg, facts)
    job = sweep.job_info()
    slot = None
    if job is not None:  # a -m sweep: this job's lane, devices and rendezvous values
        slot = sweep.job_slot(cfg, facts, job.num, sorted(os.sched_getaffinity(0)))
        cfg, facts = sweep.job_config(cfg, job.num, slot), sweep.job_facts(facts, slot)
    settled = checks.validate(cfg, facts)
    checks.num_gpus_flag(_CURRENT.num_gpus, cfg, settled, facts)
    if cfg.launcher.topology is Topology.skrl_jax and settled.coordinator is None:
        settled = replace(settled, coordinator=Endpoint("127.0.0.1", sweep.distinct_port(host.free_port, _CURRENT.ports)))
    settled = checks.locate(cfg, settled)
    checks.preflight(cfg, settled)
    if _CURRENT.checking:
        return 0
    if cfg.dry_run:
        _CURRENT.reason = "dry run"
        if job is not None:
            _CURRENT.run_dir = str(_run_dir(cfg, create=False))
        if allocation is not None:
            print(slurm_launch.describe(allocation))
        # the argv a real launch starts: every rank's script behind the worker wrapper
        plan = plan_mod.wrapped(plan_mod.build(cfg, settled, facts, order=_CURRENT.order), supervise.WORKER_WRAPPER)
        print(plan_mod.describe(secrets.mask_plan(sweep.bind(plan, slot)), _dry_run_notes(cfg, settled)))
        return 0
    run_dir = _run_dir(cfg, create=slot is None, restart=slurm_launch.record_subdir(allocation))  # a parallel job's: when it starts
    _CURRENT.run_dir = str(run_dir)
    logs = run_dir / "logs"
    plan = supervise.prepare(sweep.bind(plan_mod.build(cfg, settled, facts, run_dir=_trainer_dir(cfg, run_dir), order=_CURRENT.order), slot), logs)
    config_yaml = OmegaConf.to_yaml(OmegaConf.structured(secrets.mask_config(cfg)))
    if slot is not None:  # a parallel sweep: started with the others once every job is planned
        devices = f"GPUs {','.join(slot.gpus)}" if slot.gpus else f"CPU cores {','.join(map(str, slot.cpus))}"
        print(f"[{PROG}] job {job.num} queued on lane {slot.index} ({devices}); run directory: {run_dir}", flush=True)
        _CURRENT.queued.append(_Queued(job.num, plan, run_dir, config_yaml, slot))
        return 0
    logs.mkdir(exist_ok=True)
    started = record.write_start(run_dir, config_yaml, plan)
    print(f"[{PROG}] run directory: {run_dir}", flush=True)
    # Under SLURM, the step's USR1 reaches every worker directly: relaying it would double it.
    try:
        outcome = supervise.run(plan, logs, relay_usr1=not cfg.launcher.from_slurm, interrupts=_CURRENT.interrupts)
    except UserError as err:  # nothing could be started (preflight looked first): the record says so
        record.write_end(run_dir, started, EXIT_USAGE, f"not started: {err}")
        raise
    _CURRENT.reason = outcome.reason
    record.write_end(run_dir, started, outcome.exit_code, outcome.reason, outcome.failure_record())
    if outcome.port_in_use is not None:  # taken between the preflight check and torchrun's bind
        _error(str(checks.port_taken_at_launch(cfg, settled, outcome.port_in_use)))
    elif outcome.exit_code != 0:
        _rendezvous_hint(cfg, settled, logs)
    print(f"[{PROG}] exit code {outcome.exit_code} ({outcome.reason}); run directory: {run_dir}", flush=True)
    return outcome.exit_code


def _dry_run_notes(cfg: schema.TrainConfig, settled: checks.Settled) -> list[str]:
    """What the dry run says beyond the commands: presets applied and forwarded, where Isaac Lab was
    found when ISAACLAB_PATH is unset."""
    from hydra.core.hydra_config import HydraConfig

    notes = []
    forwarded = compose.forwarded_presets(cfg)
    typed = [name for _, names in compose.preset_overrides(HydraConfig.get().overrides.task) for name in names]
    if typed:
        applied = [name for name in typed if name not in forwarded]
        notes.append(
            f"presets: applied {', '.join(applied) or '-'}; "
            f"forwarded to the training script as presets=NAME: {', '.join(forwarded) or '-'}"
        )
    checkout = compose.isaaclab_checkout(os.environ)
    if checkout is not None and checkout.how != compose.ISAACLAB_ENV and settled.script.startswith(checkout.root + os.sep):
        notes.append(f"Isaac Lab: {checkout.root} ({checkout.how})")
    return notes


def _rendezvous_hint(cfg: schema.TrainConfig, settled: checks.Settled, logs: Path) -> None:
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
        endpoint = str(Endpoint(cfg.launcher.master_addr or "127.0.0.1", cfg.launcher.master_port or checks.MASTER_DEFAULT_PORT))
    waited = rendezvous.waited_timeout(dict(settled.rdzv_conf), settled.rdzv_backend, cfg.launcher.join_timeout)
    hint = rendezvous.failure_hint(
        output, settled.rdzv_backend, endpoint, settled.nnodes, cfg.launcher.node_rank, cfg.launcher.rdzv_id, waited
    )
    if hint:
        print(f"[{PROG}] {hint}", file=sys.stderr, flush=True)


def _submit_slurm(cfg: schema.TrainConfig) -> int:
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    from . import slurm_submit

    return slurm_submit.run(
        cfg, HydraConfig.get().overrides.task, _CURRENT.hydra_flags, _CURRENT.script_args, _run_dir,
        host.gather(), _CURRENT.submissions, OmegaConf.to_yaml(OmegaConf.structured(secrets.mask_config(cfg))),
        _CURRENT.vault, check_only=_CURRENT.checking,
    )


def _job(dict_cfg) -> int:
    import time

    _CURRENT.started = True
    job = sweep.job_info()
    result = sweep.JobResult(job.num, job.overrides) if job is not None else None
    if result is not None:
        _CURRENT.results.append(result)
        if _interrupted() is not None:
            result.note = supervise.SKIPPED_INTERRUPTED
            return 0
        if _CURRENT.stop_sweep:
            result.note = supervise.SKIPPED_FAIL_FAST
            print(f"[{PROG}] job {job.num} skipped: an earlier job failed and sweep.fail_fast=true", flush=True)
            return 0
    _CURRENT.run_dir, _CURRENT.reason = "", ""
    begin = time.monotonic()
    try:
        with _user_hydra_full_error():
            code = launch(dict_cfg)
    except UserError as err:
        if _CURRENT.full_error:
            raise
        _error(str(err))
        code = EXIT_USAGE
    if result is not None:
        result.run_dir = _CURRENT.run_dir
        if _CURRENT.queued and _CURRENT.queued[-1].num == job.num:
            result.note = "queued"
            return 0
        if _CURRENT.reason == "dry run" and code == 0:
            result.note = "dry run"
            return 0
        result.exit_code, result.duration_s = code, time.monotonic() - begin
        result.note = _note(_CURRENT.reason)
        if code != 0 and _fail_fast(dict_cfg):
            _CURRENT.stop_sweep = True
    _CURRENT.exit_codes.append(code)
    return code


@contextlib.contextmanager
def _user_hydra_full_error():
    """While a job launches, HYDRA_FULL_ERROR is what the user set: the ``1`` main() sets for Hydra
    would reach the workers' environment (Isaac Lab's train.py is a Hydra app too)."""
    if _CURRENT.full_error:
        yield
        return
    saved = os.environ.pop("HYDRA_FULL_ERROR", None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ["HYDRA_FULL_ERROR"] = saved


def _interrupted() -> Optional[int]:
    """The signal that interrupted this sweep, if one did."""
    return None if _CURRENT.interrupts is None else _CURRENT.interrupts.received


def _note(reason: str) -> str:
    """The summary's note on a job that ran: stopped by the sweep's signal, or by fail_fast."""
    if reason == supervise.FAIL_FAST_STOP:
        return reason
    if _interrupted() is not None and reason.startswith("stopped by "):
        return "interrupted"
    return ""


def _fail_fast(dict_cfg) -> bool:
    from omegaconf import OmegaConf

    if _CURRENT.fail_fast is not None:
        return _CURRENT.fail_fast
    try:
        return bool(OmegaConf.select(dict_cfg, "sweep.fail_fast", default=False))
    except Exception:  # an unresolvable config: the safe choice is to carry on
        return False


def _run_queued() -> None:
    """A parallel sweep: every job is planned and recorded; now run them, lane by lane."""
    import time

    queued, results = _CURRENT.queued, {r.num: r for r in _CURRENT.results}
    fail_fast = bool(_CURRENT.fail_fast)
    lanes: dict[int, list[int]] = {}
    for index, job in enumerate(queued):
        lanes.setdefault(job.slot.index, []).append(index)
    starts: dict[int, float] = {}

    def on_start(index: int) -> None:
        job = queued[index]
        (job.run_dir / "logs").mkdir(parents=True, exist_ok=True)
        starts[index] = record.write_start(job.run_dir, job.config_yaml, job.plan)
        results[job.num].note = ""
        print(f"[{PROG}] job {job.num} started on lane {job.slot.index}; run directory: {job.run_dir}", flush=True)

    def on_end(index: int, outcome: supervise.Outcome) -> None:
        job, code = queued[index], outcome.exit_code
        record.write_end(job.run_dir, starts[index], code, outcome.reason, outcome.failure_record())
        result = results[job.num]
        result.exit_code, result.duration_s = code, time.time() - starts[index]
        result.note = _note(outcome.reason)
        if not outcome.halted:  # in the order the jobs end: the exit code is the first failure's
            _CURRENT.exit_codes.append(code)
        print(f"[{PROG}] job {job.num} exit code {code} ({outcome.reason}); run directory: {job.run_dir}", flush=True)

    def on_skip(index: int, reason: str) -> None:
        results[queued[index].num].note = reason

    jobs = [(job.plan, job.run_dir / "logs", job.slot.cpus) for job in queued]
    supervise.run_many(jobs, list(lanes.values()), fail_fast, on_start, on_end, _CURRENT.interrupts, on_skip)


def _sweep(line: grammar.CommandLine, searchpath: str, overrides: list[str]) -> Optional[int]:
    """``-m``: every point is composed and checked first (a mistake in any point: each distinct
    message once, exit 2, nothing started or written); then the points run as jobs, in order."""
    from hydra.core.hydra_config import HydraConfig

    args = [multirun.searchpath_with(_flag_value(line.hydra_flags, "--config-dir", "-cd"), searchpath), *overrides]
    with multirun.expand(compose.CONFIG_NAME, args, PROG) as points:
        messages: list[str] = []
        _CURRENT.checking = True
        try:
            for point in points:
                HydraConfig.instance().set_config(point.hydra_config)
                try:
                    launch(point.config)
                except UserError as err:
                    if _CURRENT.full_error:
                        raise
                    messages.append(str(err))
        finally:
            _CURRENT.checking = False
            _CURRENT.ports.clear()
        if messages:
            for message in dict.fromkeys(messages):
                _error(message)
            return EXIT_USAGE
        for point in points:
            HydraConfig.instance().set_config(point.hydra_config)
            _job(point.config)
    return None


def _is_config_error(err: Exception) -> bool:
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    return isinstance(err, (HydraException, OmegaConfBaseException))


def _run_once(overrides: list[str]) -> None:
    """A single run, without Hydra flags: the config composed once, through Hydra's compose API.
    (``hydra.main`` composes it twice, once to find the run mode; that is most of the start-up
    time the launcher adds.) The job sees the same config and the same HydraConfig."""
    from hydra import compose as hydra_compose, initialize
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict

    with initialize(config_path=None, version_base="1.3", job_name=PROG):
        cfg = hydra_compose(compose.CONFIG_NAME, overrides=overrides, return_hydra_config=True)
        HydraConfig.instance().set_config(cfg)
        with open_dict(cfg):
            del cfg["hydra"]
        _job(cfg)


def main(argv: Optional[list[str]] = None) -> int:
    try:
        return _start(argv)
    except KeyboardInterrupt:  # Ctrl+C before anything started (a launch handles its own): quiet 130
        return 128 + 2


def _start(argv: Optional[list[str]] = None) -> int:
    global _CURRENT
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        line = grammar.parse(argv)
    except UserError as err:
        _error(str(err))
        return EXIT_USAGE
    try:
        save_as, overrides = profiles.split_save(line.overrides)
        # secret values typed here never reach Hydra (nor anything it writes or prints)
        overrides, vault = secrets.hide(overrides, multirun=bool({"-m", "--multirun"} & set(line.hydra_flags)))
        if save_as is not None:
            save_as = str(profiles.save_target(save_as, os.getcwd(), _flag_value(line.hydra_flags, "--config-dir", "-cd")))
        searchpath = profiles.searchpath_override(os.environ, os.getcwd())
        config_dir = _flag_value(line.hydra_flags, "--config-dir", "-cd")
        if config_dir is not None and not Path(config_dir).is_dir():
            raise UserError("--config-dir", config_dir, "not a directory", "a config directory, with your profiles in its profile/ folder")
        if {"-sc", "--shell-completion"} & set(line.hydra_flags) and any(o.startswith("query=") for o in line.overrides) and "COMP_LINE" not in os.environ:
            raise UserError("--shell-completion", "query", "is run by the shell's completion function (COMP_LINE is not set)", "install it: eval \"$(train_multigpu -sc install=bash)\"")
        listed = ([Path(config_dir)] if config_dir else []) + profiles.all_dirs(os.environ, os.getcwd())
    except UserError as err:
        _error(str(err))
        return EXIT_USAGE
    overrides = compose.with_default_profile(overrides, os.environ)
    _CURRENT = _Invocation(script_args=line.script_args, order=line.order, full_error=_full_error(), save_as=save_as, command=argv, hydra_flags=line.hydra_flags, vault=vault,
                           num_gpus=line.num_gpus)
    if {"-m", "--multirun"} & set(line.hydra_flags):  # one Ctrl+C stops the whole sweep
        with supervise.Interrupts() as _CURRENT.interrupts:
            return _main(line, searchpath, overrides, listed)
    return _main(line, searchpath, overrides, listed)


def _main(line: grammar.CommandLine, searchpath: str, overrides: list[str], listed: list[Path]) -> int:

    compose.register(profiles.group_listing(listed) if "--help" in line.hydra_flags or "-h" in line.hydra_flags else None)
    try:
        compose.open_presets(overrides, listed)
    except UserError as err:
        _error(str(err))
        return EXIT_USAGE
    if not {"-m", "--multirun"} & set(line.hydra_flags):
        overrides = compose.preset_lists(overrides)
    saved_argv, user_full_error = sys.argv, _CURRENT.full_error
    sys.argv = [PROG, *line.hydra_flags, searchpath, *overrides]
    # Let Hydra's exceptions reach us, so they end as one line like every other user error.
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        if multirun.handles(line.hydra_flags):
            code = _sweep(line, searchpath, overrides)
            if code is not None:
                return code
        elif line.hydra_flags:
            import hydra

            # no primary config directory: the profile search path names them all, the shipped one last
            hydra.main(config_path=None, config_name=compose.CONFIG_NAME, version_base="1.3")(_job)()
        else:
            _run_once([searchpath, *overrides])
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    except Exception as err:
        if user_full_error or _CURRENT.started:
            raise
        broken = profiles.config_file_error(err, listed)
        if broken is not None:
            _error(str(broken))
            return EXIT_USAGE
        if not (_is_config_error(err) or errors.hydra_value_error(err)):
            raise
        _error(errors.from_hydra(err, overrides))
        return EXIT_USAGE
    finally:
        sys.argv = saved_argv
        if not user_full_error:
            os.environ.pop("HYDRA_FULL_ERROR", None)
    if _CURRENT.queued:
        _run_queued()
    if _CURRENT.submissions and (len(_CURRENT.submissions) > 1 or _CURRENT.results):
        from .slurm_submit import summary  # a SLURM sweep: its table says what was submitted

        print(summary(_CURRENT.submissions), flush=True)
    elif _CURRENT.results:
        print(f"[{PROG}] sweep summary\n" + sweep.summary(_CURRENT.results), flush=True)
    if _interrupted() is not None:
        return 128 + _interrupted()
    failures = [code for code in _CURRENT.exit_codes if code != 0]
    return failures[0] if failures else 0


def entry() -> None:
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:  # the reader went away (train_multigpu --help | head): no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 1
    sys.exit(code)
