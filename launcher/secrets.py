"""Secrets in worker environment variables: shown and recorded masked, passed to workers as they are.

A variable is a secret when a part of its name (split at ``_``, ``-``, ``.``) is, or ends with, one
of TOKEN, SECRET, PASSWORD, PASSWD, KEY, CREDENTIAL(S), or the part is AUTH/PAT/APIKEY:
``WANDB_API_KEY``, ``HF_TOKEN``, ``AWS_SECRET_ACCESS_KEY``, ``DB_PASSWORD``, ``GITHUB_PAT``.
``MONKEY_COUNT`` is one (``MONKEY`` ends with KEY): better a masked harmless value than a leaked
token. What is masked: the dry run's text, ``env.json``, ``command.sh`` (which reads the value
from the caller's environment instead) and ``config.yaml``. The plan given to the supervisor keeps
the real values.
"""

from __future__ import annotations

import re
from dataclasses import replace
from types import MappingProxyType
from typing import Mapping

MASK = "***"
_SUFFIXES = ("TOKEN", "TOKENS", "SECRET", "SECRETS", "PASSWORD", "PASSWD", "KEY", "KEYS", "CREDENTIAL", "CREDENTIALS")
_WHOLE = ("AUTH", "PAT", "APIKEY", "PASS", "PWD_HASH")
_PARTS = re.compile(r"[_\-.]+")
# names that match the rule but are never secrets (PWD is the working directory)
_NOT_SECRET = frozenset({"PWD", "OLDPWD"})


def is_secret(name: str) -> bool:
    """
    >>> [is_secret(n) for n in ("WANDB_API_KEY", "HF_TOKEN", "AWS_SECRET_ACCESS_KEY", "db.password", "GITHUB_PAT")]
    [True, True, True, True, True]
    >>> [is_secret(n) for n in ("NCCL_SOCKET_IFNAME", "NCCL_DEBUG", "PWD", "KEYBOARD", "OMP_NUM_THREADS")]
    [False, False, False, False, False]
    """
    upper = name.upper()
    if upper in _NOT_SECRET:
        return False
    return any(part.endswith(_SUFFIXES) or part in _WHOLE for part in _PARTS.split(upper) if part)


def mask_env(env: Mapping[str, str]) -> dict[str, str]:
    return {key: (MASK if is_secret(key) and value else value) for key, value in env.items()}


def mask_plan(plan):
    """The plan as shown and recorded: secret values replaced by ``***``."""
    processes = tuple(replace(p, env=MappingProxyType(mask_env(p.env))) for p in plan.processes)
    return replace(plan, env=MappingProxyType(mask_env(plan.env)), processes=processes)


def export_line(key: str, value: str) -> str:
    """A ``command.sh`` line: secrets are taken from the caller's environment, never written."""
    import shlex

    if is_secret(key) and value:
        return f'export {key}="${{{key}:?set {key}: train_multigpu does not record secret values}}"'
    return f"export {key}={shlex.quote(value)}"


def mask_override(text: str) -> str:
    """``+worker_env.HF_TOKEN=abc`` -> ``+worker_env.HF_TOKEN=***`` (the last key segment decides).

    >>> mask_override("+worker_env.HF_TOKEN=abc"), mask_override("seed=1")
    ('+worker_env.HF_TOKEN=***', 'seed=1')
    """
    key, eq, value = text.partition("=")
    if eq and value and is_secret(key.lstrip("+~-").rsplit(".", 1)[-1]):
        return f"{key}={MASK}"
    return text


def mask_config(cfg):
    """A copy of the typed config with secret values of ``worker_env`` and ``profile.env`` masked."""
    import copy

    masked = copy.deepcopy(cfg)
    masked.worker_env = mask_env(masked.worker_env)
    masked.profile.env = mask_env(masked.profile.env)
    return masked
