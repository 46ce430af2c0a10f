"""The ``WANDB_*`` variables of a launch (W&B reads them in ``wandb.init``), pure.

What every rank's environment gets (``tracker=wandb``):

- ``WANDB_PROJECT`` (``tracker.wandb.project``, default ``train_multigpu``), ``WANDB_ENTITY`` (when
  set), ``WANDB_TAGS`` (``tracker.wandb.tags``, comma-joined), ``WANDB_MODE`` (below),
  ``WANDB_RESUME=allow``: shown by the dry run;
- for the run directory (added by a real launch, :func:`launch_env`): ``WANDB_RUN_ID`` (one per
  launch: kept in ``trackers.json`` and read again by every restart, SLURM requeue and ``runs
  resume``), ``WANDB_RUN_GROUP`` (``tracker.wandb.group``, else the ``-m`` sweep's directory name,
  else the launch's), ``WANDB_NAME`` and ``WANDB_DIR`` (the run directory: W&B writes its
  ``wandb/`` there).

A ``WANDB_*`` variable set in ``worker_env``/``profile.env`` wins over the launcher's.

The mode: ``tracker.wandb.mode=offline`` or ``online`` as given; ``auto`` is online only when an API
key is given (``WANDB_API_KEY`` in ``worker_env``, ``profile.env`` or the launcher's environment --
a secret by its name: masked wherever the launcher writes or shows it, launcher/secrets.py -- or a
``wandb login`` entry in ``~/.netrc``) and W&B's server answers a bounded probe; otherwise offline,
said once per invocation, so a run on a cluster without the network never hangs in ``wandb.init``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

DEFAULT_PROJECT = "train_multigpu"
DEFAULT_BASE_URL = "https://api.wandb.ai"  # W&B's own server (WANDB_BASE_URL: another)
KEY_VAR = "WANDB_API_KEY"
BASE_URL_VAR = "WANDB_BASE_URL"
RESUME = "allow"  # W&B's recommended value: resume the run of this id if it exists, else create it
# the variables a real launch adds for its run directory (the dry run names them)
LAUNCH_VARS = ("WANDB_RUN_ID", "WANDB_RUN_GROUP", "WANDB_NAME", "WANDB_DIR")


@dataclass(frozen=True)
class Mode:
    value: str  # online | offline
    why: str = ""  # the line said once when auto chose offline


def given(name: str, cfg, environ: Mapping[str, str]) -> str:
    """A worker variable's value as the workers get it: worker_env, else profile.env, else inherited."""
    for source in (cfg.worker_env, cfg.profile.env, environ):
        value = source.get(name)
        if value:
            return str(value)
    return ""


def base_url(cfg, environ: Mapping[str, str]) -> str:
    return given(BASE_URL_VAR, cfg, environ) or DEFAULT_BASE_URL


def netrc_has(host: str, home: str | None) -> bool:
    """``wandb login`` keeps the key in ``~/.netrc`` under the server's host name."""
    if not home:
        return False
    import netrc

    try:
        return netrc.netrc(os.path.join(home, ".netrc")).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def decide(cfg, environ: Mapping[str, str], answers: Callable[[str], str | None]) -> Mode:
    """``answers(url)``: None when W&B's server at ``url`` answers, else why not (bounded).

    >>> from types import SimpleNamespace as N
    >>> from launcher.config.schema import WandbMode
    >>> cfg = N(worker_env={}, profile=N(env={}), tracker=N(wandb=N(mode=WandbMode.auto)))
    >>> decide(cfg, {}, lambda url: None).why
    'W&B: no WANDB_API_KEY given (worker_env, profile.env, the environment or ~/.netrc): offline mode; sync later with `wandb sync <run dir>/wandb/offline-run-*`'
    >>> decide(cfg, {"WANDB_API_KEY": "k"}, lambda url: None)
    Mode(value='online', why='')
    >>> decide(cfg, {"WANDB_API_KEY": "k"}, lambda url: "connection refused").value
    'offline'
    """  # noqa: E501
    mode = cfg.tracker.wandb.mode.value
    if mode != "auto":
        return Mode(mode)
    sync = "sync later with `wandb sync <run dir>/wandb/offline-run-*`"
    url = base_url(cfg, environ)
    host = urlsplit(url).hostname or url
    if not given(KEY_VAR, cfg, environ) and not netrc_has(host, environ.get("HOME")):
        return Mode(
            "offline",
            f"W&B: no {KEY_VAR} given (worker_env, profile.env, the environment or ~/.netrc): offline mode; {sync}",
        )
    problem = answers(url)
    if problem is not None:
        return Mode("offline", f"W&B: {url} does not answer ({problem}): offline mode; {sync}")
    return Mode("online")


def static_env(cfg, mode: Mode) -> dict[str, str]:
    """What the dry run shows (the same for every launch of the invocation)."""
    wandb = cfg.tracker.wandb
    env = {"WANDB_PROJECT": wandb.project or DEFAULT_PROJECT}
    if wandb.entity:
        env["WANDB_ENTITY"] = wandb.entity
    if wandb.tags:
        env["WANDB_TAGS"] = ",".join(str(tag) for tag in wandb.tags)
    env["WANDB_MODE"] = mode.value
    env["WANDB_RESUME"] = RESUME
    return env


def group_and_name(cfg, trainer_dir: Path, sweep_dir: Path | None, job: int | None) -> tuple[str, str]:
    """``WANDB_RUN_GROUP`` and ``WANDB_NAME``: a sweep point's group is its sweep's directory name
    and its name ``<sweep>/<job>``; a single launch's both the run directory's name (its run_name in it).

    >>> from types import SimpleNamespace as N
    >>> cfg = N(tracker=N(wandb=N(group=None)), run_name=None)
    >>> group_and_name(cfg, Path("/r/2026-01-01_10-00-00"), None, None)
    ('2026-01-01_10-00-00', '2026-01-01_10-00-00')
    >>> group_and_name(cfg, Path("/r/multirun/2026-01-01_10-00-00/2"), Path("/r/multirun/2026-01-01_10-00-00"), 2)
    ('sweep_2026-01-01_10-00-00', 'sweep_2026-01-01_10-00-00/2')
    """
    if sweep_dir is not None and job is not None:
        group = f"sweep_{sweep_dir.name}"
        name = f"{group}/{job}"
    else:
        group = name = trainer_dir.name
    return cfg.tracker.wandb.group or group, name


def launch_env(identity: Mapping[str, str]) -> dict[str, str]:
    """The variables of one launch's run (its identity, :mod:`.identity`)."""
    return {
        "WANDB_RUN_ID": identity["id"],
        "WANDB_RUN_GROUP": identity["group"],
        "WANDB_NAME": identity["name"],
        "WANDB_DIR": identity["dir"],
    }


def url(identity: Mapping[str, str], base: str) -> str | None:
    """The run's page where it is known: an online run with an entity on W&B's own server."""
    if identity.get("mode") != "online" or not identity.get("entity"):
        return None
    app = "https://wandb.ai" if base == DEFAULT_BASE_URL else base.rstrip("/")
    return f"{app}/{identity['entity']}/{identity['project']}/runs/{identity['id']}"


ISAACLAB_PROFILE = "isaaclab"
RSL_RL_FLAGS = ("--logger", "--log_project_name")  # Isaac Lab's scripts/reinforcement_learning/rsl_rl/cli_args.py
SKRL_WANDB = "++agent.agent.experiment.wandb=true"  # skrl's experiment.wandb; ++: set, or add where a yaml lacks it


def isaaclab_args(cfg) -> list[str]:
    """``tracker=wandb`` under ``profile=isaaclab``, as Isaac Lab's training scripts take it: rsl_rl's
    ``--logger wandb --log_project_name PROJECT``, skrl's ``experiment.wandb`` (a Hydra override of the
    agent config; its ``wandb.init`` reads the launcher's WANDB_* for the project, group, id and resume).
    Nothing when the user gave the script its own ``--logger``; rl_games: the environment alone.

    >>> from types import SimpleNamespace as N
    >>> cfg = N(tracker=N(wandb=N(enabled=True, project="p")), profile=N(name="isaaclab"),
    ...         rl_library=N(name="rsl_rl"), script_args=[])
    >>> isaaclab_args(cfg)
    ['--logger', 'wandb', '--log_project_name', 'p']
    >>> cfg.rl_library.name = "skrl"; isaaclab_args(cfg)
    ['++agent.agent.experiment.wandb=true']
    """
    if not cfg.tracker.wandb.enabled or cfg.profile.name != ISAACLAB_PROFILE:
        return []
    given = [arg.split("=", 1)[0] for arg in cfg.script_args]
    if cfg.rl_library.name == "rsl_rl" and RSL_RL_FLAGS[0] not in given:
        return [RSL_RL_FLAGS[0], "wandb", RSL_RL_FLAGS[1], cfg.tracker.wandb.project or DEFAULT_PROJECT]
    if cfg.rl_library.name == "skrl" and not any(arg.startswith(SKRL_WANDB.split("=")[0][2:]) for arg in given):
        return [SKRL_WANDB]
    return []
