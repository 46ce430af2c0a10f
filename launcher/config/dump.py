"""The typed config as the YAML a run records (``config.yaml``), secret values masked: byte for byte
what ``OmegaConf.to_yaml(OmegaConf.structured(secrets.mask_config(cfg)))`` writes, without building
the OmegaConf tree (20 ms a config; a 1,000-point ``submit=slurm`` sweep writes one per point).

How: the dataclasses are walked into the plain container ``to_container(enum_to_str=True)`` would
give, and only where each value's type is exactly its field's (a ``str`` in a ``str`` field, an enum
member of the field's enum, ...); anything else (an ``int`` in a ``float`` field, which OmegaConf
converts; a value OmegaConf would refuse) takes OmegaConf's own path. The container is dumped with
OmegaConf's YAML dumper one top-level key at a time (a block mapping's text is its keys' texts in
order), and each key's text is kept by its value: the points of a sweep differ in a few keys, so
the others are dumped once. tests/test_config_dump.py compares the two paths over the shipped
configs, presets, profiles and swept values.
"""

from __future__ import annotations

import dataclasses
import typing
from collections import OrderedDict
from enum import Enum
from typing import Any

_NONE = type(None)
_SCALARS = (str, int, float, bool, _NONE)
_KEPT = 4096  # texts of top-level keys kept (a sweep's points' distinct values)
_texts: OrderedDict[tuple[str, str], str] = OrderedDict()
_hints: dict[type, dict[str, tuple[bool, Any]]] = {}


class _Slow(Exception):
    """A value the fast path is not sure OmegaConf would write as it is."""


def config_yaml(cfg) -> str:
    """``config.yaml``: the typed config ``cfg`` (a ``TrainConfig``), secret values masked."""
    from .. import secrets

    masked = secrets.mask_config(cfg)
    try:
        plain = _dataclass(masked)
    except _Slow:
        from omegaconf import OmegaConf

        return OmegaConf.to_yaml(OmegaConf.structured(masked))
    return "".join(_text(key, value) for key, value in plain.items())


def _text(key: str, value) -> str:
    """``key: value`` as OmegaConf's dumper writes it at the top level, kept by value."""
    import yaml
    from omegaconf._utils import get_omega_conf_dumper

    cache_key = (key, repr(value))
    text = _texts.get(cache_key)
    if text is None:
        text = yaml.dump(
            {key: value}, default_flow_style=False, allow_unicode=True, sort_keys=False, Dumper=get_omega_conf_dumper()
        )
        _texts[cache_key] = text
        if len(_texts) > _KEPT:
            _texts.popitem(last=False)
    return text


def _fields(kind: type) -> dict[str, tuple[bool, Any]]:
    """A dataclass's fields: name -> (optional, type), as OmegaConf resolves its hints."""
    if kind not in _hints:
        hints = typing.get_type_hints(kind)
        fields: dict[str, tuple[bool, Any]] = {}
        for field in dataclasses.fields(kind):
            hint = hints[field.name]
            args = typing.get_args(hint)
            optional = _NONE in args
            if optional:
                rest = [a for a in args if a is not _NONE]
                hint = rest[0] if len(rest) == 1 else hint
            fields[field.name] = (optional, hint)
        _hints[kind] = fields
    return _hints[kind]


def _dataclass(obj) -> dict:
    kind = type(obj)
    if not dataclasses.is_dataclass(kind):
        raise _Slow
    return {name: _typed(getattr(obj, name), optional, hint) for name, (optional, hint) in _fields(kind).items()}


def _typed(value, optional: bool, hint):
    """``value`` of a field typed ``hint`` as ``to_container(enum_to_str=True)`` gives it."""
    if value is None:
        if optional or hint is Any:
            return None
        raise _Slow
    if hint is Any:
        return _any(value)
    if hint in (str, int, float, bool):
        if type(value) is not hint:
            raise _Slow
        return value
    if isinstance(hint, type) and issubclass(hint, Enum):
        if type(value) is not hint:
            raise _Slow
        return value.name
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        if type(value) is not hint:
            raise _Slow
        return _dataclass(value)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is list and len(args) == 1 and type(value) is list:
        return [_typed(item, False, args[0]) for item in value]
    if origin is dict and len(args) == 2 and args[0] is str and type(value) is dict:
        if not all(type(key) is str for key in value):
            raise _Slow
        return {key: _typed(item, False, args[1]) for key, item in value.items()}
    raise _Slow


def _any(value):
    """An untyped value (``dict[str, Any]``): plain data only."""
    if type(value) in _SCALARS:
        return value
    if type(value) is list:
        return [_any(item) for item in value]
    if type(value) is dict and all(type(key) is str for key in value):
        return {key: _any(item) for key, item in value.items()}
    raise _Slow
