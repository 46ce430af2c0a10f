"""Composing the config without the command line: for tests, tools and programs.

The CLI composes through ``@hydra.main`` (for ``-m``, ``--cfg``, tab completion); both go through
:func:`register` so they see the same schema and resolvers.
"""

from __future__ import annotations

import copy
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


def _unknown_keys(node, prefix: str = "", kept: frozenset[str] = frozenset()) -> Iterable[str]:
    """Keys under a schema dataclass that the dataclass does not have (``+key=`` adds them). Reads the
    nodes as they are (``_get_node``: no resolution, no wrapping; every point of a sweep passes here).
    ``kept``: top-level keys not walked (a sweep point's, as an earlier point's: :class:`Typing`)."""
    from omegaconf import DictConfig

    kind = node._metadata.object_type
    known = _field_names(kind) if dataclasses.is_dataclass(kind) else None
    for key in node.keys():
        if known is not None and key not in known:
            yield f"{prefix}{key}"
        child = node._get_node(key)
        # nothing typed below a missing, null or interpolated node (an interpolation is checked where it points)
        if key not in kept and isinstance(child, DictConfig) and _walked(child):
            yield from _unknown_keys(child, f"{prefix}{key}.")


def _walked(node) -> bool:
    """A container with items of its own (not missing, null or an interpolation)."""
    from omegaconf import Container

    return isinstance(node, Container) and not (node._is_missing() or node._is_none() or node._is_interpolation())


def _literal(node) -> bool:
    """A top-level dict whose every node is a plain value: no interpolation anywhere in it."""
    from omegaconf import DictConfig

    if node._is_interpolation() or not isinstance(node, DictConfig):
        return False
    pending = [node]
    while pending:
        here = pending.pop()
        if here._is_interpolation():
            return False
        if _walked(here):
            pending += [
                here._get_node(key) for key in (here.keys() if isinstance(here, DictConfig) else range(len(here)))
            ]
    return True


class Typing:
    """The typed configs of one sweep's points, each as :func:`OmegaConf.to_object` makes it, without
    converting again what an earlier point already had. Two points of one base (sweep/groups.py: the
    same choice of config groups, ``base``) differ only in the top-level keys their value overrides
    set (``touched``); every other top-level dict with no interpolation in it is the same in both, so
    the earlier point's typed value is copied for it (``copy.deepcopy`` of a whole typed config:
    0.1 ms; ``OmegaConf.to_object``: 1.6 ms, a fifth of a point's cost in a 1,000-point SLURM
    submission) and it is not walked again for unknown keys. Only a point that passed is kept (a
    copy of it, before its secrets are revealed); tests/test_sweep_groups.py compares every point
    with ``OmegaConf.to_object``'s."""

    def __init__(self) -> None:
        self._earlier: dict[tuple[str, ...], tuple[schema.TrainConfig, frozenset[str]]] = {}

    def kept(self, base: tuple[str, ...] | None, touched: frozenset[str]):
        """(the earlier typed config, the top-level keys to take from it) for a point."""
        earlier = self._earlier.get(base) if base is not None else None
        if earlier is None:
            return None, frozenset()
        return earlier[0], earlier[1] - touched

    def keep(self, base: tuple[str, ...] | None, touched: frozenset[str], dict_cfg, typed) -> None:
        if base is not None and base not in self._earlier:
            literal = frozenset(key for key in dict_cfg.keys() if _literal(dict_cfg._get_node(key)))
            self._earlier[base] = (copy.deepcopy(typed), literal - touched)


def _typed(dict_cfg, earlier, kept: frozenset[str]):
    """``OmegaConf.to_object(dict_cfg)`` (a schema dataclass: no init=False field, no __post_init__),
    the ``kept`` top-level keys' values copied from ``earlier``; anything amiss: to_object's own
    result, or its error."""
    from omegaconf import Container, OmegaConf

    if not kept:
        return OmegaConf.to_object(dict_cfg)
    try:
        typed = copy.copy(earlier)  # every field is set below: a copy of the earlier point's, or converted
        if list(dict_cfg.keys()) != [f.name for f in dataclasses.fields(typed)]:
            raise ValueError("not the earlier point's keys")
        for key in dict_cfg.keys():
            if key in kept:
                setattr(typed, key, copy.deepcopy(getattr(earlier, key)))
            else:
                node = dict_cfg._get_child(key)._dereference_node()
                if node._is_missing():
                    raise ValueError(key)
                setattr(typed, key, OmegaConf.to_object(node) if isinstance(node, Container) else node._value())
        return typed
    except Exception:
        return OmegaConf.to_object(dict_cfg)


_FIELDS: dict[type, frozenset[str]] = {}


def _field_names(kind: type) -> frozenset[str]:
    if kind not in _FIELDS:
        _FIELDS[kind] = frozenset(f.name for f in dataclasses.fields(kind))
    return _FIELDS[kind]


def to_typed(
    dict_cfg,
    forwarded: Mapping[str, Sequence[str]] | None = None,
    typing: Typing | None = None,
    base: tuple[str, ...] | None = None,
    touched: frozenset[str] = frozenset(),
) -> schema.TrainConfig:
    """The typed config, or an error naming the key: keys that ``+key=`` smuggled into the schema
    (``to_object`` would drop them silently), ``???`` left unset, a missing environment variable, a
    preset of ``forwarded`` (see open_presets) under a profile that does not forward presets.
    ``typing``: a sweep's, with the point's ``base`` and ``touched`` keys (:class:`Typing`)."""
    from omegaconf import OmegaConf

    earlier, kept = typing.kept(base, touched) if typing is not None else (None, frozenset())
    for key in _unknown_keys(dict_cfg, kept=kept):
        raise UserError(
            key, OmegaConf.select(dict_cfg, key), "not a train_multigpu key", "train_multigpu --cfg job lists the keys"
        )
    cfg = _typed(dict_cfg, earlier, kept)
    if typing is not None:
        typing.keep(base, touched, dict_cfg, cfg)
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
