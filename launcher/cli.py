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

from . import checks, grammar, host, paths, plan as plan_mod, record, schema, supervise
from .addresses import Endpoint
from .errors import EXIT_USAGE, UserError
from .schema import Topology

PROG = "train_multigpu"
ISAACLAB_ENV = "ISAACLAB_PATH"


@dataclass
class _Invocation:
    """What main() hands to the Hydra job, and what the job reports back."""

    script_args: list[str] = field(default_factory=list)
    started: bool = False
    exit_codes: list[int] = field(default_factory=list)


_CURRENT = _Invocation()


def _error(message: str) -> None:
    print(f"{PROG}: error: {message}", file=sys.stderr)


def _full_error() -> bool:
    return os.environ.get("HYDRA_FULL_ERROR") == "1"


def _to_object(cfg) -> schema.TrainConfig:
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        return OmegaConf.to_object(cfg)
    except OmegaConfBaseException as err:
        key = getattr(err, "full_key", None) or "config"
        reason = str(err).splitlines()[0]
        raise UserError(key, "???" if "Missing mandatory" in reason else "", reason) from err


def _run_dir(cfg: schema.TrainConfig) -> Path:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    hydra_cfg = HydraConfig.get()
    if hydra_cfg.mode == RunMode.MULTIRUN:
        path = Path(hydra_cfg.runtime.output_dir)
        path.mkdir(parents=True, exist_ok=True)
        return path.resolve()
    multinode = cfg.launcher.nnodes != "1"
    return record.create_run_dir(cfg.run_root, cfg.run_name, cfg.launcher.node_rank, multinode)


def launch(dict_cfg) -> int:
    from omegaconf import OmegaConf

    dict_cfg.script_args = list(dict_cfg.script_args) + _CURRENT.script_args
    cfg = _to_object(dict_cfg)
    facts = host.gather()
    settled = checks.validate(cfg, facts)
    if cfg.launcher.topology is Topology.skrl_jax and settled.coordinator is None:
        settled = replace(settled, coordinator=Endpoint("127.0.0.1", host.free_port()))
    checks.preflight(cfg, settled)
    if cfg.dry_run:
        print(plan_mod.describe(plan_mod.build(cfg, settled, facts)))
        return 0
    run_dir = _run_dir(cfg)
    logs = run_dir / "logs"
    logs.mkdir(exist_ok=True)
    plan = supervise.prepare(plan_mod.build(cfg, settled, facts, run_dir=str(run_dir)), logs)
    started = record.write_start(run_dir, OmegaConf.to_yaml(dict_cfg, resolve=True), plan)
    print(f"[{PROG}] run directory: {run_dir}", flush=True)
    outcome = supervise.run(plan, logs)
    record.write_end(run_dir, started, outcome.exit_code, outcome.reason, outcome.failure_record())
    print(f"[{PROG}] exit code {outcome.exit_code} ({outcome.reason}); run directory: {run_dir}", flush=True)
    return outcome.exit_code


def _job(dict_cfg) -> int:
    _CURRENT.started = True
    try:
        code = launch(dict_cfg)
    except UserError as err:
        if _full_error():
            raise
        _error(str(err))
        code = EXIT_USAGE
    _CURRENT.exit_codes.append(code)
    return code


def _register() -> None:
    from omegaconf import OmegaConf

    schema.register()
    OmegaConf.register_new_resolver("tmg_examples_dir", lambda: str(paths.examples_dir()), replace=True)


def _with_default_profile(overrides: list[str], env) -> list[str]:
    """With ISAACLAB_PATH set and no profile chosen, the isaaclab profile is the default."""
    if env.get(ISAACLAB_ENV) and not any(o.split("=", 1)[0].lstrip("+~") == "profile" for o in overrides):
        return [*overrides, "profile=isaaclab"]
    return overrides


def main(argv: Optional[list[str]] = None) -> int:
    global _CURRENT
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        line = grammar.parse(argv)
    except UserError as err:
        _error(str(err))
        return EXIT_USAGE
    overrides = _with_default_profile(line.overrides, os.environ)
    _CURRENT = _Invocation(script_args=line.script_args)

    import hydra

    _register()
    app = hydra.main(config_path=str(paths.conf_dir()), config_name="train_multigpu", version_base="1.3")(_job)
    saved_argv = sys.argv
    sys.argv = [PROG, *line.hydra_flags, *overrides]
    try:
        app()
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
        # Hydra exits 1 on a composition error, before our job runs: that is the user's mistake.
        return EXIT_USAGE if code == 1 and not _CURRENT.started else code
    finally:
        sys.argv = saved_argv
    failures = [code for code in _CURRENT.exit_codes if code != 0]
    return failures[0] if failures else 0


def entry() -> None:
    sys.exit(main())
