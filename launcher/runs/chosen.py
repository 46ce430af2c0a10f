"""What the user chose: the recorded config's differences from the defaults, and the composition
the ``runs-again`` work records (``composition.json``: the overrides as typed).

The defaults are composed in-process (Hydra, only for ``runs show``) with the recorded profile, as
a launch with no overrides under that profile would compose them; when that profile cannot be
found any more, against the schema's defaults. The recorded config.yaml is what the launcher
resolved (secret values masked), so the differences are exactly what the launch ran with.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from .. import files
from ..rundir import CONFIG
from .read import RunInfo, config_values

# keys that differ between any two launches, or that the launcher fills in: not a choice
_NOT_CHOSEN = ("run_dir",)


FLAT_MAX = 10_000  # keys of a config flattened (a YAML alias bomb expands without end)
DEPTH_MAX = 32


def _flat(value, prefix: str = "", out: dict | None = None, depth: int = 0) -> dict[str, object]:
    """``{"a.b": 1}`` for ``{"a": {"b": 1}}``; at most FLAT_MAX keys, DEPTH_MAX levels (deeper: the
    nested value as one)."""
    out = {} if out is None else out
    if isinstance(value, dict) and depth < DEPTH_MAX:
        if not value and prefix:
            out[prefix[:-1]] = {}
        for key, item in value.items():
            if len(out) >= FLAT_MAX:
                break
            _flat(item, f"{prefix}{key}.", out, depth + 1)
        return out
    out[prefix[:-1]] = value if not isinstance(value, (dict, list)) or _small(value) else "(too large to show)"
    return out


def _small(value, budget: int = 1000) -> bool:
    """Does a list or mapping hold at most ``budget`` values, DEPTH_MAX deep (counted without
    expanding what YAML's aliases share more than ``budget`` times)?"""
    pending = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        budget -= 1
        if budget < 0 or depth > DEPTH_MAX:
            return False
        if isinstance(item, dict):
            pending += [(child, depth + 1) for child in item.values()]
        elif isinstance(item, list):
            pending += [(child, depth + 1) for child in item]
    return True


def _defaults(profile: str | None) -> tuple[dict, str]:
    """The default composition as a plain dict (as config.yaml would hold it), and what it is."""
    import os

    from omegaconf import OmegaConf

    from ..config import compose, schema
    from ..errors import UserError

    if profile:
        try:
            cfg = compose.compose([f"profile={profile}"])
            return OmegaConf.to_container(OmegaConf.structured(cfg), enum_to_str=True), (
                f"the defaults of profile={profile}"
            )
        except (UserError, Exception):  # noqa: BLE001 - a profile that no longer composes: the schema's
            if os.environ.get("HYDRA_FULL_ERROR") == "1":
                raise
    schema.register()
    plain = OmegaConf.to_container(OmegaConf.structured(schema.TrainConfig), enum_to_str=True)
    return plain, "the schema's defaults" + (f" (profile={profile} does not compose here)" if profile else "")


def differences(info: RunInfo) -> tuple[dict[str, tuple[str, str]], str]:
    """``{key: (default, recorded)}`` for every key whose recorded value is not the default."""
    path = Path(info.record_dirs[0] if info.record_dirs else info.run_dir) / CONFIG
    try:
        text = files.read_text(path, files.CONFIG_MAX, info.within)
    except FileNotFoundError:
        return {}, "nothing: config.yaml is missing"
    except OSError as err:
        return {}, f"nothing: config.yaml: {err.strerror or err}"
    try:
        import yaml

        recorded = yaml.safe_load(text)
    except Exception:  # noqa: BLE001 - hand-edited or half written
        recorded = None
    if not isinstance(recorded, dict):
        return {}, "nothing: config.yaml is not readable YAML"
    profile = config_values(text, {"profile.name"}).get("profile.name")
    if profile is not None and not re.fullmatch(r"[A-Za-z0-9_][\w.-]{0,99}", profile, flags=re.ASCII):
        profile = None  # a record names a profile, never a path or an override (shared run roots)
    default, against = _defaults(profile)
    flat_default, flat_recorded = _flat(default), _flat(recorded)
    out: dict[str, tuple[str, str]] = {}
    for key in sorted(set(flat_default) | set(flat_recorded)):
        if key in _NOT_CHOSEN:
            continue
        old, new = flat_default.get(key, "(unset)"), flat_recorded.get(key, "(unset)")
        if old != new:
            out[key] = (_text(old), _text(new))
    return out, against


def _text(value) -> str:
    if isinstance(value, str):
        return value
    try:
        text = json.dumps(value, allow_nan=False, default=str)
    except (ValueError, RecursionError):  # YAML's .nan / .inf, or a list nested without end
        text = repr(value) if not isinstance(value, (list, dict)) else "(not shown)"
    return text if len(text) <= 200 else text[:197] + "..."
