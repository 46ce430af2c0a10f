"""``train_multigpu``: split the command line, hand it to a :class:`~launcher.session.Session`
(through Hydra), and turn every user mistake into one line on stderr and exit code 2
(``HYDRA_FULL_ERROR=1`` shows the traceback instead). Nothing imports this module.
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

from . import record, secrets
from .backends.base import Typed
from .config import compose, grammar, profiles, translate
from .errors import EXIT_USAGE, UserError, exit_with
from .names import PROG, SSH_CHANNEL_VAR, version_line
from .ray_submit.spec import CONFIG_VAR, ORDER_VAR
from .run import leash
from .run.process.signals import Interrupts
from .session import Session, error
from .sweep import points
from .sweep.state import Sweep


def _flag_value(flags: list[str], *names: str) -> str | None:
    for i, flag in enumerate(flags[:-1]):
        if flag in names:
            return flags[i + 1]
    return None


def _is_config_error(err: Exception) -> bool:
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    return isinstance(err, (HydraException, OmegaConfBaseException))


def _run_once(session: Session, overrides: list[str]) -> None:
    """A single run, without Hydra flags: the config composed once, through Hydra's compose API.
    (``hydra.main`` composes it twice, once to find the run mode; that is most of the start-up
    time the launcher adds.) The job sees the same config and the same HydraConfig."""
    from hydra import compose as hydra_compose
    from hydra import initialize
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict

    with initialize(config_path=None, version_base="1.3", job_name=PROG):
        cfg = hydra_compose(compose.CONFIG_NAME, overrides=overrides, return_hydra_config=True)
        HydraConfig.instance().set_config(cfg)
        with open_dict(cfg):
            del cfg["hydra"]
        session.job(cfg)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    secrets.forget()  # the secret values errors mask are this command line's (secrets.remember)
    try:
        argv += _channel_args()
    except UserError as err:
        error(str(err))
        return EXIT_USAGE
    except KeyboardInterrupt:  # the channel closed while this launcher started (run/leash.py)
        return 128 + 2
    carried = os.environ.pop(CONFIG_VAR, None)
    if carried is not None:  # a node of a Ray job (ray_submit/job.py): the config the job carries
        return launch_carried(carried, os.environ.pop(ORDER_VAR, "[]"), argv)
    if argv[:1] == ["runs"]:  # the run records read back (launcher/runs/): a subcommand, no Hydra
        from .runs import cli as runs_cli

        return runs_cli.main(argv[1:], launch=launch_line)  # rerun/resume launch through launch_line
    try:
        return _start(argv)
    except KeyboardInterrupt:  # Ctrl+C before anything started (a launch handles its own): quiet 130
        return 128 + 2


# what a launch imports once composed (Hydra's compose API, the checks, the supervisor: most of a
# node launcher's start-up); a node over ssh imports them while this machine composes
_LAUNCH_MODULES = (
    "hydra",
    "hydra.compose",
    "hydra.initialize",
    "hydra.core.config_store",
    "hydra.core.hydra_config",
    "launcher.checks",
    "launcher.plan",
    "launcher.backends.local",
    "launcher.run.attempts",
)


def _channel_args() -> list[str]:
    """Under submit=ssh (run/leash.py): the arguments the channel's first line carries, read once
    what a launch composes with is imported -- this machine sends them once it has composed, so
    this host's imports and its own composition overlap; [] otherwise."""
    if SSH_CHANNEL_VAR not in os.environ:
        return []
    import importlib

    for module in _LAUNCH_MODULES:
        importlib.import_module(module)
    found = leash.take_channel()
    return list(found.argv) if found is not None else []


# the carried config becomes a primary config: the schema first, then its values
_CARRIED_NAME = "ray_job"
_CARRIED_HEADER = "defaults:\n  - train_multigpu_schema\n  - _self_\n\n"


def launch_carried(text: str, order: str, overrides: list[str]) -> int:
    """A launch from a config composed elsewhere (``submit=ray``: the resolved config ``text`` the
    job carries, the typed ``order`` of the script-bound values, JSON) plus this node's
    ``overrides``: the text is the primary config of a Hydra composition with no other source, so the
    schema checks it again; secret values came as variables of their own name (spec.secret_env)."""
    import json
    import tempfile

    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf, open_dict

    vault = secrets.Vault()
    compose.register()
    with tempfile.TemporaryDirectory(prefix="tmg-ray-") as folder:
        (Path(folder) / f"{_CARRIED_NAME}.yaml").write_text(_CARRIED_HEADER + text)
        with initialize_config_dir(config_dir=folder, version_base="1.3", job_name=PROG):
            cfg = hydra_compose(_CARRIED_NAME, overrides=overrides, return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)
    with open_dict(cfg):
        del cfg["hydra"]
    for section in ("worker_env", "profile.env"):
        for name, value in (OmegaConf.select(cfg, section) or {}).items():
            if value == secrets.MASK and name in os.environ:
                vault.values[f"{section}.{name}"] = {secrets.MASK: os.environ[name]}
    session = Session(Typed(order=tuple(json.loads(order)), submitted_by="ray"), vault)
    session.job(cfg)
    return session.finish()


def _start(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        line = grammar.parse(argv)
    except UserError as err:
        error(str(err))
        return EXIT_USAGE
    if "--version" in line.hydra_flags:  # ours first (submit=ssh's preflight compares it), then Hydra's
        print(version_line(), flush=True)
        return 0
    return launch_line(line, argv)


def launch_line(line: grammar.CommandLine, command: list[str], again: dict | None = None) -> int:
    """Launch a parsed command line: the path every launch takes, ``runs rerun``/``runs resume``
    (launcher/runs/again.py) included. ``again``: what the record notes besides the composition
    (``rerun_of``/``resumed_from``) and, for a resume, ``trainer_dir`` (the run directory the
    training script continues in)."""
    again = dict(again or {})
    resume_args = list(again.pop("resume_args", None) or [])
    try:
        save_as, overrides = profiles.split_save(line.overrides)
        # secret values typed here never reach Hydra (nor anything it writes or prints)
        overrides, vault = grammar.hide(overrides, multirun=bool({"-m", "--multirun"} & set(line.hydra_flags)))
        # submit=ssh's remote launcher: the secret values come on stdin, which it watches (run/leash.py)
        submitted_by = "ssh" if leash.fill_vault(vault) else None
        config_dir = _flag_value(line.hydra_flags, "--config-dir", "-cd")
        if save_as is not None:
            save_as = str(profiles.save_target(save_as, os.getcwd(), config_dir))
        searchpath = profiles.searchpath_override(os.environ, os.getcwd())
        if config_dir is not None and not Path(config_dir).is_dir():
            raise UserError(
                "--config-dir",
                config_dir,
                "not a directory",
                "a config directory, with your profiles in its profile/ folder",
            )
        if (
            {"-sc", "--shell-completion"} & set(line.hydra_flags)
            and any(o.startswith("query=") for o in line.overrides)
            and "COMP_LINE" not in os.environ
        ):
            raise UserError(
                "--shell-completion",
                "query",
                "is run by the shell's completion function (COMP_LINE is not set)",
                'install it: eval "$(train_multigpu -sc install=bash)"',
            )
        listed = ([Path(config_dir)] if config_dir else []) + profiles.all_dirs(os.environ, os.getcwd())
    except UserError as err:
        error(str(err))
        return EXIT_USAGE
    # what the user typed, secret values masked: <run_dir>/composition.json (runs rerun reads it)
    composition = record.composition(overrides, line, os.getcwd(), again)
    overrides = compose.with_default_profile(overrides, os.environ)
    user_full_error = os.environ.get("HYDRA_FULL_ERROR") == "1"
    typed = Typed(
        hydra_flags=tuple(line.hydra_flags),
        script_args=tuple(line.script_args),
        order=tuple(line.order),
        command=tuple(command),
        num_gpus=line.num_gpus,
        resume_args=tuple(resume_args),
        trainer_dir=again.get(record.TRAINER_DIR),
        submitted_by=submitted_by,
    )
    session = Session(typed, vault, composition, full_error=user_full_error, save_as=save_as)
    if {"-m", "--multirun"} & set(line.hydra_flags):  # one Ctrl+C stops the whole sweep
        with Interrupts() as interrupts:
            session.multirun = Sweep(interrupts)
            return _dispatch(session, line, searchpath, overrides, listed)
    return _dispatch(session, line, searchpath, overrides, listed)


def _dispatch(
    session: Session, line: grammar.CommandLine, searchpath: str, overrides: list[str], listed: list[Path]
) -> int:
    """Hand the composed config(s) to the session: a sweep through sweep/points.py, Hydra's own
    flags through ``hydra.main``, a single run through the compose API."""
    user_full_error = session.full_error

    def task(dict_cfg) -> int:  # Hydra's task function (its module names Hydra's job: cli)
        return session.job(dict_cfg)

    compose.register(
        profiles.group_listing(listed) if "--help" in line.hydra_flags or "-h" in line.hydra_flags else None
    )
    try:
        presets = compose.open_presets(overrides, listed)
        session.typed = replace(session.typed, presets={k: tuple(v) for k, v in presets.items()})
    except UserError as err:
        error(str(err))
        return EXIT_USAGE
    if not {"-m", "--multirun"} & set(line.hydra_flags):
        overrides = compose.preset_lists(overrides)
    saved_argv = sys.argv
    sys.argv = [PROG, *line.hydra_flags, searchpath, *overrides]
    # Let Hydra's exceptions reach us, so they end as one line like every other user error.
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        if points.handles(line.hydra_flags):
            args = [
                points.searchpath_with(_flag_value(line.hydra_flags, "--config-dir", "-cd"), searchpath),
                *overrides,
            ]
            with points.expand(compose.CONFIG_NAME, args, PROG) as expanded:
                code = session.sweep(expanded)
            if code is not None:
                return code
        elif line.hydra_flags:
            import hydra

            # no primary config directory: the profile search path names them all, the shipped one last
            main_ = hydra.main(config_path=None, config_name=compose.CONFIG_NAME, version_base="1.3")(task)
            if _shows_config(line.hydra_flags):  # Hydra prints the config itself: secret values masked
                with secrets.hydra_shows_masked(resolve="--resolve" in line.hydra_flags):
                    main_()
            else:
                main_()
        else:
            _run_once(session, [searchpath, *overrides])
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    except UserError as err:  # a sweep that cannot run (sweep/points.py); a launch's are the session's
        if user_full_error or session.started:
            raise
        error(str(err))
        return EXIT_USAGE
    except Exception as err:
        if user_full_error or session.started:
            raise
        broken = profiles.config_file_error(err, listed)
        if broken is not None:
            error(str(broken))
            return EXIT_USAGE
        if not (_is_config_error(err) or translate.hydra_value_error(err)):
            raise
        error(translate.from_hydra(err, overrides))
        return EXIT_USAGE
    finally:
        sys.argv = saved_argv
        if not user_full_error:
            os.environ.pop("HYDRA_FULL_ERROR", None)
    return session.finish()


def _shows_config(hydra_flags: list[str]) -> bool:
    """Hydra prints a config it composed (--cfg, --info, --help, ...) and runs no job."""
    shows = {"--cfg", "--info", "--help", "--hydra-help", "--shell-completion"}
    return any(grammar.HYDRA_LONG.get(flag, flag) in shows for flag in hydra_flags)


def entry() -> None:
    exit_with(_main_then_freeze)


def _main_then_freeze() -> int:
    code = main()
    if {"-m", "--multirun"} & set(sys.argv[1:]):
        # a sweep's points left millions of objects in reference cycles (OmegaConf's parent links): the
        # process's exit frees their memory; the interpreter's last collection took 3.5 s to, after a
        # 1,000-point sweep had finished (atexit handlers still run; every record is written and closed)
        import gc

        gc.freeze()
    return code
