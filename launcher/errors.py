"""The one error type a user can cause. The CLI prints it in one line and exits with code 2.

Hydra's and OmegaConf's own errors (unknown key, wrong type, unknown option) are turned into the
same one-line form by :func:`from_hydra` / :meth:`UserError.from_omegaconf`.
"""

from __future__ import annotations

import re
from typing import Any, Optional

from .names import override_key

EXIT_USAGE = 2


class UserError(Exception):
    """A mistake in the command line or config: names the key, the bad value and what is allowed."""

    def __init__(self, key: str, value: Any, allowed: str, hint: Optional[str] = None) -> None:
        self.key, self.value, self.allowed, self.hint = key, value, allowed, hint
        message = f"{key}={value!s}: {allowed}"
        if hint:
            message += f" ({hint})"
        super().__init__(message)

    @classmethod
    def from_omegaconf(cls, err: Exception, override: Optional[str] = None) -> "UserError":
        """From an OmegaConf error: its first line says what is wrong, ``full_key`` says where."""
        reason = str(err).splitlines()[0].strip()
        key = getattr(err, "full_key", None) or "config"
        value: Any = ""
        if override and "=" in override:
            key, value = override.lstrip("+~").split("=", 1)
        if "not in" in reason and key != "config":
            reason += "; train_multigpu --cfg job lists the keys"
        return cls(key, value, reason)


_OVERRIDE_IN_MESSAGE = re.compile(r"(?:Could not override '([^']+)'|Error merging override (\S+))")
_MISSING_OPTION = re.compile(r"Could not (?:find|load) '([^/']+)/([^']+)'")


def from_hydra(err: Exception, overrides: list[str]) -> str:
    """One line for a Hydra composition error (unknown group option, key or type)."""
    text = str(err)
    missing = _MISSING_OPTION.search(text)
    if missing:
        group, option = missing.groups()
        options = re.findall(r"^\t(\S+)$", text.split("Config search path")[0], flags=re.M)
        allowed = f"no such {group} option" + (f"; available: {', '.join(options)}" if options else "")
        return str(UserError(group, option, allowed, f"train_multigpu --info searchpath shows where {group}/ configs are looked up"))
    named = _OVERRIDE_IN_MESSAGE.search(text)
    cause = err.__cause__
    if named and cause is not None:
        target = named.group(1) or named.group(2)
        override = next((o for o in overrides if override_key(o) == override_key(target)), target)
        return str(UserError.from_omegaconf(cause, override))
    lines = [line.strip() for line in text.splitlines() if line.strip() and "HYDRA_FULL_ERROR" not in line]
    return "; ".join(lines[:3])
