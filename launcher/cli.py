"""``train_multigpu``: split the command line, compose the config with Hydra, validate, plan, then
print the plan (dry run) or run it.

Every user mistake ends here as one line on stderr and exit code 2; ``HYDRA_FULL_ERROR=1`` shows
the traceback instead.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Optional

from . import checks, compose, grammar, host, paths, plan as plan_mod, record, schema, slurm_launch, supervise
from .addresses import Endpoint
from . import errors
from .errors import EXIT_USAGE, UserError
from .schema import Topology

PROG = "train_multigpu"


@dataclass
class _Invocation:
    """What main() hands to the Hydra job, and what the job reports back."""

    script_args: list[str] = field(default_factory=list)
    full_error: bool = False  # HYDRA_FULL_ERROR=1: show tracebacks instead of one-line errors
    started: bool = False
    exit_codes: list[int] = field(default_factory=list)
    hydra_flags: list[str] = field(default_factory=list)
    submissions: list = field(default_factory=list)  # submit=slurm: one slurm_submit.Submission per job


_CURRENT = _Invocation()


def _error(message: str) -> None:
    print(f"{PROG}: error: {message}", file=sys.stderr)


def _full_error() -> bool:
    return os.environ.get("HYDRA_FULL_ERROR") == "1"



def _to_object(cfg) -> schema.TrainConfig:
    from omegaconf.errors import OmegaConfBaseException

    try:
        return compose.to_typed(cfg)
    except OmegaConfBaseException as err:
        raise UserError.from_omegaconf(err) from err


def _run_dir(cfg: schema.TrainConfig) -> Path:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    hydra_cfg = HydraConfig.get()
    if hydra_cfg.mode == RunMode.MULTIRUN:
        path = Path(hydra_cfg.runtime.output_dir)
        path.mkdir(parents=True, exist_ok=True)
        return path.resolve()
    multinode = cfg.launcher.nnodes != "1"
    if cfg.run_dir is not None:  # given by submit=slurm: one directory for the job, node<R> inside
        path = Path(cfg.run_dir) / (f"node{cfg.launcher.node_rank}" if multinode else "")
        path.mkdir(parents=True, exist_ok=True)
        return path.resolve()
    return record.create_run_dir(cfg.run_root, cfg.run_name, cfg.launcher.node_rank, multinode)


def launch(dict_cfg) -> int:
    from omegaconf import OmegaConf

    cfg = _to_object(dict_cfg)
    # forwarded arguments are the user's literal text: added after resolution, never interpolated
    cfg.script_args += _CURRENT.script_args
    if cfg.submit is schema.Submit.slurm:
        return _submit_slurm(cfg)
    facts = host.gather()
    # launcher=slurm: nnodes, node_rank, endpoints, nproc from SLURM's environment (facts.env)
    cfg, facts, allocation = slurm_launch.from_environment(cfg, facts)
    settled = checks.validate(cfg, facts)
    if cfg.launcher.topology is Topology.skrl_jax and settled.coordinator is None:
        settled = replace(settled, coordinator=Endpoint("127.0.0.1", host.free_port()))
    checks.preflight(cfg, settled)
    if cfg.dry_run:
        if allocation is not None:
            print(slurm_launch.describe(allocation))
        print(plan_mod.describe(plan_mod.build(cfg, settled, facts)))
        return 0
    run_dir = _run_dir(cfg)
    plan = plan_mod.build(cfg, settled, facts, run_dir=str(run_dir))
    logs = run_dir / "logs"
    logs.mkdir(exist_ok=True)
    started = record.write_start(run_dir, OmegaConf.to_yaml(OmegaConf.structured(cfg)), plan)
    print(f"[{PROG}] run directory: {run_dir}", flush=True)
    # Under SLURM, the step's USR1 reaches every worker directly: relaying it would double it.
    code = supervise.run(plan, logs, relay_usr1=not cfg.launcher.from_slurm)
    record.write_end(run_dir, started, code)
    print(f"[{PROG}] exit code {code}; run directory: {run_dir}", flush=True)
    return code


def _submit_slurm(cfg: schema.TrainConfig) -> int:
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    from . import slurm_submit

    return slurm_submit.run(
        cfg, HydraConfig.get().overrides.task, _CURRENT.hydra_flags, _CURRENT.script_args, _run_dir,
        host.gather(), _CURRENT.submissions, OmegaConf.to_yaml(OmegaConf.structured(cfg)),
    )


def _job(dict_cfg) -> int:
    _CURRENT.started = True
    try:
        code = launch(dict_cfg)
    except UserError as err:
        if _CURRENT.full_error:
            raise
        _error(str(err))
        code = EXIT_USAGE
    _CURRENT.exit_codes.append(code)
    return code


def _is_config_error(err: Exception) -> bool:
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    return isinstance(err, (HydraException, OmegaConfBaseException))


def main(argv: Optional[list[str]] = None) -> int:
    global _CURRENT
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        line = grammar.parse(argv)
    except UserError as err:
        _error(str(err))
        return EXIT_USAGE
    overrides = compose.with_default_profile(line.overrides, os.environ)
    _CURRENT = _Invocation(script_args=line.script_args, full_error=_full_error(), hydra_flags=line.hydra_flags)

    import hydra

    compose.register()
    app = hydra.main(config_path=str(paths.conf_dir()), config_name=compose.CONFIG_NAME, version_base="1.3")(_job)
    saved_argv, user_full_error = sys.argv, _CURRENT.full_error
    sys.argv = [PROG, *line.hydra_flags, *overrides]
    # Let Hydra's exceptions reach us, so they end as one line like every other user error.
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        app()
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    except Exception as err:
        if user_full_error or _CURRENT.started or not _is_config_error(err):
            raise
        _error(errors.from_hydra(err, overrides))
        return EXIT_USAGE
    finally:
        sys.argv = saved_argv
        if not user_full_error:
            os.environ.pop("HYDRA_FULL_ERROR", None)
    if len(_CURRENT.submissions) > 1 or {"-m", "--multirun"} & set(line.hydra_flags):
        if _CURRENT.submissions:
            from .slurm_submit import summary

            print(summary(_CURRENT.submissions), flush=True)
    failures = [code for code in _CURRENT.exit_codes if code != 0]
    return failures[0] if failures else 0


def entry() -> None:
    sys.exit(main())
