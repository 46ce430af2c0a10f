"""Composing the config without the command line: for tests, tools and programs.

The CLI composes through ``@hydra.main`` (for ``-m``, ``--cfg``, tab completion); both go through
:func:`register` so they see the same schema and resolvers.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from .. import paths
from ..errors import UserError
from ..names import override_key
from . import schema
from .isaaclab import ISAACLAB_ENV, isaaclab_checkout, isaaclab_root

CONFIG_NAME = "train_multigpu"
PRESETS_GROUP = "presets"
_PRESET_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")


def _plain_name(name: str) -> bool:
    """A name Hydra reads as an option name, not as a number, bool or null."""
    if not _PRESET_NAME.match(name) or name.lower() in ("null", "true", "false"):
        return False
    try:
        float(name)
    except ValueError:
        return True
    return False


def with_default_profile(overrides: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """With Isaac Lab at hand (ISAACLAB_PATH set, or the isaaclab package importable from a source
    checkout: :func:`isaaclab_checkout`) and no profile chosen, the isaaclab profile is the default."""
    if any(override_key(o) == "profile" for o in overrides):
        return list(overrides)
    if env.get(ISAACLAB_ENV) or isaaclab_checkout(env) is not None:
        return [*overrides, "profile=isaaclab"]
    return list(overrides)


def register(config_groups: str | None = None) -> None:
    """Schema, primary config and resolvers. ``config_groups`` replaces ``$APP_CONFIG_GROUPS`` in
    the help text (Hydra lists groups from its primary directory only; see profiles.group_listing)."""
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    schema.register()
    # first: the help text reads one (the docs folder) when it is filled in below
    OmegaConf.register_new_resolver("tmg_examples_dir", lambda: str(paths.examples_dir()), replace=True)
    OmegaConf.register_new_resolver("tmg_docs_dir", lambda: str(paths.docs_dir()), replace=True)
    OmegaConf.register_new_resolver("tmg_isaaclab_root", isaaclab_root, replace=True)
    # The primary config is served from the ConfigStore: the app then needs no primary config
    # directory, and every directory on the search path (profiles.py) is in the order we give it,
    # the shipped conf/ last. (Hydra caches the primary config before it applies hydra.searchpath.)
    primary = OmegaConf.load(paths.conf_dir() / f"{CONFIG_NAME}.yaml")
    if config_groups is not None:
        primary.hydra.help.template = primary.hydra.help.template.replace("$APP_CONFIG_GROUPS", config_groups)
    ConfigStore.instance().store(name=CONFIG_NAME, node=primary, provider="train_multigpu")


def preset_overrides(overrides: Sequence[str]) -> list[tuple[int, list[str]]]:
    """(index, names) of every ``presets=`` override."""
    from .grammar import preset_names

    found = []
    for index, override in enumerate(overrides):
        key, eq, value = override.partition("=")
        if eq and key.lstrip("+~") == PRESETS_GROUP:
            found.append((index, preset_names(value)))
    return found


def preset_lists(overrides: Sequence[str]) -> list[str]:
    """A single run: Isaac Lab's ``presets=a,b`` is one list of presets (Hydra would call it an
    ambiguous sweep), so it becomes ``presets=[a,b]``. With -m it stays a sweep.

    >>> preset_lists(["presets=debug,newton", "seed=1", "presets=[a,b]"])
    ['presets=[debug,newton]', 'seed=1', 'presets=[a,b]']
    """
    out = list(overrides)
    for index, names in preset_overrides(overrides):
        key, _, value = out[index].partition("=")
        if len(names) > 1 and not value.strip().startswith("["):
            out[index] = f"{key}=[{','.join(names)}]"
    return out


def open_presets(overrides: Sequence[str], dirs: Sequence[Path]) -> dict[str, list[str]]:
    """Isaac Lab's presets are an open set: its training script knows its own. A ``presets=`` name
    that no ``presets/`` directory on the search path holds becomes a preset that forwards
    ``presets=NAME`` to the script (registered here, in Hydra's ConfigStore). Whether the profile
    takes that (``profile.forward_presets``) is checked by :func:`to_typed`: the examples profile
    keeps refusing an unknown name with Hydra's message. A value that holds no plain names
    (``presets=1``, ``presets=null``, a nested list) is an error. Returns the forwarded names, each
    with the names that do exist (for the examples profile's refusal); the caller keeps that map and
    hands it to :func:`to_typed`."""
    from hydra.core.config_store import ConfigStore

    known = sorted({f.stem for root in dirs for f in (Path(root) / PRESETS_GROUP).glob("*.yaml")})
    forwarded: dict[str, list[str]] = {}
    for index, names in preset_overrides(overrides):
        for name in names:
            if name in known or name in forwarded:
                continue
            if not _plain_name(name):
                raise UserError(
                    PRESETS_GROUP,
                    overrides[index].partition("=")[2],
                    "preset names: letters, digits, '_', '.', '-' (not a number, true, false or null)",
                    "one name, a list presets=[a,b], or Isaac Lab's presets=a,b",
                )
            forwarded[name] = known
            node = {"preset_args": {name: [f"{PRESETS_GROUP}={name}"]}}
            ConfigStore.instance().store(
                group=PRESETS_GROUP, name=name, node=node, package="_global_", provider="train_multigpu"
            )
    return forwarded


def forwarded_presets(cfg: schema.TrainConfig, forwarded: Mapping[str, Sequence[str]]) -> list[str]:
    """The presets of this config that are forwarded to the training script (``forwarded``: what
    open_presets returned)."""
    return [name for name in cfg.preset_args if name in forwarded]


def compose_dict(overrides: Sequence[str] = (), env: Mapping[str, str] | None = None, cwd: str | None = None):
    """The composed DictConfig (unresolved), as the Hydra job would receive it: the same profile
    search path (``TRAIN_MULTIGPU_CONFIG_PATH``, ``./.train_multigpu``, the user's folder, shipped)."""
    import os

    from hydra import compose, initialize

    from . import profiles

    register()
    env = os.environ if env is None else env
    searchpath = profiles.searchpath_override(env, cwd or os.getcwd())
    overrides = preset_lists(overrides)
    # no primary directory: the search path names every directory, the shipped one last
    with initialize(config_path=None, version_base="1.3"):
        return compose(CONFIG_NAME, overrides=[searchpath, *overrides])


def _unknown_keys(node, prefix: str = "") -> Iterable[str]:
    """Keys under a schema dataclass that the dataclass does not have (``+key=`` adds them). Reads the
    nodes as they are (``_get_node``: no resolution, no wrapping; every point of a sweep passes here)."""
    from omegaconf import DictConfig

    kind = node._metadata.object_type
    known = _field_names(kind) if dataclasses.is_dataclass(kind) else None
    for key in node.keys():
        if known is not None and key not in known:
            yield f"{prefix}{key}"
        child = node._get_node(key)
        # nothing typed below a missing, null or interpolated node (an interpolation is checked where it points)
        if isinstance(child, DictConfig) and not (child._is_missing() or child._is_none() or child._is_interpolation()):
            yield from _unknown_keys(child, f"{prefix}{key}.")


_FIELDS: dict[type, frozenset[str]] = {}


def _field_names(kind: type) -> frozenset[str]:
    if kind not in _FIELDS:
        _FIELDS[kind] = frozenset(f.name for f in dataclasses.fields(kind))
    return _FIELDS[kind]


def to_typed(dict_cfg, forwarded: Mapping[str, Sequence[str]] | None = None) -> schema.TrainConfig:
    """The typed config, or an error naming the key: keys that ``+key=`` smuggled into the schema
    (``to_object`` would drop them silently), ``???`` left unset, a missing environment variable, a
    preset of ``forwarded`` (see open_presets) under a profile that does not forward presets."""
    from omegaconf import OmegaConf

    for key in _unknown_keys(dict_cfg):
        raise UserError(
            key, OmegaConf.select(dict_cfg, key), "not a train_multigpu key", "train_multigpu --cfg job lists the keys"
        )
    cfg = OmegaConf.to_object(dict_cfg)
    forwarded = forwarded or {}
    for name in forwarded_presets(cfg, forwarded):
        if not cfg.profile.forward_presets:  # the message Hydra gives for an unknown option
            raise UserError(
                PRESETS_GROUP,
                name,
                f"no such presets option; available: {', '.join(forwarded[name])}",
                "train_multigpu --info searchpath shows where presets/ configs are looked up",
            )
    return cfg


def compose(overrides: Sequence[str] = (), script_args: Iterable[str] = ()) -> schema.TrainConfig:
    import os

    from . import profiles

    forwarded = open_presets(overrides, profiles.all_dirs(os.environ, os.getcwd()))
    cfg = to_typed(compose_dict(overrides), forwarded)
    # forwarded arguments are the user's literal text: added after resolution, never interpolated
    cfg.script_args += list(script_args)
    return cfg
