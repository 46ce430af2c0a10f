"""Composing the config without the command line: for tests, tools and programs.

The CLI composes through ``@hydra.main`` (for ``-m``, ``--cfg``, tab completion); both go through
:func:`register` so they see the same schema and resolvers.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Mapping, Sequence

from .. import paths
from ..errors import UserError
from ..names import override_key
from . import schema

CONFIG_NAME = "train_multigpu"
ISAACLAB_ENV = "ISAACLAB_PATH"


def with_default_profile(overrides: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """With ISAACLAB_PATH set and no profile chosen, the isaaclab profile is the default."""
    if env.get(ISAACLAB_ENV) and not any(override_key(o) == "profile" for o in overrides):
        return [*overrides, "profile=isaaclab"]
    return list(overrides)


def register(config_groups: str | None = None) -> None:
    """Schema, primary config and resolvers. ``config_groups`` replaces ``$APP_CONFIG_GROUPS`` in
    the help text (Hydra lists groups from its primary directory only; see profiles.group_listing)."""
    from omegaconf import OmegaConf

    from hydra.core.config_store import ConfigStore

    schema.register()
    # The primary config is served from the ConfigStore: the app then needs no primary config
    # directory, and every directory on the search path (profiles.py) is in the order we give it,
    # the shipped conf/ last. (Hydra caches the primary config before it applies hydra.searchpath.)
    primary = OmegaConf.load(paths.conf_dir() / f"{CONFIG_NAME}.yaml")
    if config_groups is not None:
        primary.hydra.help.template = primary.hydra.help.template.replace("$APP_CONFIG_GROUPS", config_groups)
    ConfigStore.instance().store(name=CONFIG_NAME, node=primary, provider="train_multigpu")
    OmegaConf.register_new_resolver("tmg_examples_dir", lambda: str(paths.examples_dir()), replace=True)


def compose_dict(overrides: Sequence[str] = (), env: Mapping[str, str] | None = None, cwd: str | None = None):
    """The composed DictConfig (unresolved), as the Hydra job would receive it: the same profile
    search path (``TRAIN_MULTIGPU_CONFIG_PATH``, ``./.train_multigpu``, the user's folder, shipped)."""
    import os

    from hydra import compose, initialize

    from . import profiles

    register()
    searchpath = profiles.searchpath_override(os.environ if env is None else env, cwd or os.getcwd())
    # no primary directory: the search path names every directory, the shipped one last
    with initialize(config_path=None, version_base="1.3"):
        return compose(CONFIG_NAME, overrides=[searchpath, *overrides])


def _unknown_keys(node, prefix: str = "") -> Iterable[str]:
    """Keys under a schema dataclass that the dataclass does not have (``+key=`` adds them)."""
    from omegaconf import DictConfig, OmegaConf

    kind = OmegaConf.get_type(node)
    known = {f.name for f in dataclasses.fields(kind)} if dataclasses.is_dataclass(kind) else None
    for key in node.keys():
        if known is not None and key not in known:
            yield f"{prefix}{key}"
        if OmegaConf.is_missing(node, key) or OmegaConf.is_interpolation(node, key):
            continue  # nothing typed below it (an interpolation is checked where it points)
        child = node[key]
        if isinstance(child, DictConfig):
            yield from _unknown_keys(child, f"{prefix}{key}.")


def to_typed(dict_cfg) -> schema.TrainConfig:
    """The typed config, or an error naming the key: keys that ``+key=`` smuggled into the schema
    (``to_object`` would drop them silently), ``???`` left unset, a missing environment variable."""
    from omegaconf import OmegaConf

    for key in _unknown_keys(dict_cfg):
        raise UserError(key, OmegaConf.select(dict_cfg, key), "not a train_multigpu key", "train_multigpu --cfg job lists the keys")
    return OmegaConf.to_object(dict_cfg)


def compose(overrides: Sequence[str] = (), script_args: Iterable[str] = ()) -> schema.TrainConfig:
    cfg = to_typed(compose_dict(overrides))
    # forwarded arguments are the user's literal text: added after resolution, never interpolated
    cfg.script_args += list(script_args)
    return cfg
