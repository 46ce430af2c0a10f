"""Secrets in worker environment variables: shown and recorded masked, passed to workers as they are.

A variable is a secret when a part of its name (split at ``_``, ``-``, ``.``) is, or ends with, one
of TOKEN, SECRET, PASSWORD, PASSWD, KEY, CREDENTIAL(S), or the part is AUTH/PAT/APIKEY:
``WANDB_API_KEY``, ``HF_TOKEN``, ``AWS_SECRET_ACCESS_KEY``, ``DB_PASSWORD``, ``GITHUB_PAT``.
``MONKEY_COUNT`` is one (``MONKEY`` ends with KEY): better a masked harmless value than a leaked
token. What is masked: the dry run's text, ``env.json``, ``command.sh`` (which reads the value
from the caller's environment instead) and ``config.yaml``. The plan given to the supervisor keeps
the real values.

A secret typed on the command line (``+worker_env.HF_TOKEN=abc``) never reaches Hydra: :func:`hide`
hands Hydra ``+worker_env.HF_TOKEN=***`` (``***1,***2`` for the values of a ``-m`` sweep) and keeps
the values in a :class:`Vault`; the launch puts them back into its typed config (:meth:`Vault.reveal`).
So whatever Hydra writes or prints -- ``multirun.yaml``, ``.hydra/``, ``override_dirname``, ``--cfg``,
the sweep table, its own error messages -- shows the masked form. A value that is a reference
(``${oc.env:HF_TOKEN}``) is not a secret value and is left to OmegaConf.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from .errors import UserError

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
    """A copy of the typed config with secret values of ``worker_env``, ``profile.env`` and
    ``ray.runtime_env.env_vars`` masked."""
    import copy

    masked = copy.deepcopy(cfg)
    masked.worker_env = mask_env(masked.worker_env)
    masked.profile.env = mask_env(masked.profile.env)
    env_vars = masked.ray.runtime_env.get("env_vars")
    if isinstance(env_vars, Mapping):
        masked.ray.runtime_env["env_vars"] = mask_env({str(k): v for k, v in env_vars.items()})
    return masked


# -- secrets typed on the command line ---------------------------------------------------------

# the config sections whose entries become worker environment variables (Ray's runtime_env: the job's)
SECTIONS = ("worker_env", "profile.env", "ray.runtime_env.env_vars")


def _section_name(path: str) -> tuple[str | None, str]:
    """``worker_env.HF_TOKEN`` -> ``("worker_env", "HF_TOKEN")``; not an env entry -> ``(None, "")``."""
    for section in SECTIONS:
        if path.startswith(section + "."):
            return section, path[len(section) + 1 :]
    return None, ""


def section_env(cfg, section: str) -> dict:
    """The typed config's mapping for one of SECTIONS (``ray.runtime_env.env_vars`` made when missing)."""
    if section == "worker_env":
        return cfg.worker_env
    if section == "profile.env":
        return cfg.profile.env
    return cfg.ray.runtime_env.setdefault("env_vars", {})


@dataclass
class Vault:
    """The secret values taken off the command line: ``{dotted key: {placeholder: value}}``."""

    values: dict[str, dict[str, str]] = field(default_factory=dict)

    def reveal(self, cfg):
        """Put the real values back into the typed config, where Hydra left a placeholder of ours."""
        for path, by_placeholder in self.values.items():
            section, name = _section_name(path)
            env = section_env(cfg, section)
            if env.get(name) in by_placeholder:
                env[name] = by_placeholder[env[name]]
        return cfg

    def by_reference(self, overrides: Sequence[str]) -> tuple[list[str], dict[str, str]]:
        """A SLURM job's overrides, each hidden secret as ``${oc.env:NAME}``, and the variables
        (NAME -> value) the job must find in its environment.

        >>> vault = Vault({"worker_env.HF_TOKEN": {"***": "abc"}})
        >>> vault.by_reference(["seed=1", "+worker_env.HF_TOKEN=***"])
        (['seed=1', '+worker_env.HF_TOKEN=${oc.env:HF_TOKEN}'], {'HF_TOKEN': 'abc'})
        """
        out, env = [], {}
        for override in overrides:
            key, _, value = override.partition("=")
            by_placeholder = self.values.get(key.lstrip("+~"))
            if by_placeholder is not None and value in by_placeholder:
                name = _section_name(key.lstrip("+~"))[1]
                env[name] = by_placeholder[value]
                override = f"{key}=${{oc.env:{name}}}"
            out.append(override)
        return out, env


def _quote_hint(key: str) -> str:
    return f"""quote the whole value: '{key}="..."'"""


def hide(overrides: Sequence[str], multirun: bool) -> tuple[list[str], Vault]:
    """Replace the values of secret ``worker_env``/``profile.env`` overrides by placeholders.

    >>> hide(["seed=1,2", "+worker_env.HF_TOKEN=abc"], True)
    (['seed=1,2', '+worker_env.HF_TOKEN=***'], Vault(values={'worker_env.HF_TOKEN': {'***': 'abc'}}))
    >>> hide(["+worker_env.HF_TOKEN=a,b"], True)[0], hide(["+worker_env.HF_TOKEN=${oc.env:T}"], False)[0]
    (['+worker_env.HF_TOKEN=***1,***2'], ['+worker_env.HF_TOKEN=${oc.env:T}'])
    """
    vault, out = Vault(), []
    for override in overrides:
        key, eq, text = override.partition("=")
        path = key.lstrip("+~")
        section, name = _section_name(path)
        # a map holding a section (worker_env, ray.runtime_env: {env_vars: ...}) with a secret-named key
        section_of = next((s for s in SECTIONS if s == path or s.startswith(path + ".")), None)
        if section_of and eq and any(is_secret(part) for part in re.findall(r"[\w.\-]+(?=\s*:)", text)):
            raise UserError(
                path, MASK, "secrets are given one by one, never as a map", f"e.g. +{section_of}.NAME=VALUE"
            )
        if section is None or not is_secret(name) or not eq or not text:
            out.append(override)
            continue
        values = _parse_values(key, path, text, multirun)
        if values is None:  # null, or a reference such as ${oc.env:NAME}: no secret value here
            out.append(override)
            continue
        if key.startswith("~"):  # a delete: the value is only a guard; delete by name
            out.append(key)
            continue
        placeholders = [MASK] if len(values) == 1 else [f"{MASK}{i}" for i in range(1, len(values) + 1)]
        vault.values[path] = dict(zip(placeholders, values))
        out.append(f"{key}={','.join(placeholders)}")
    return out, vault


def _parse_values(key: str, path: str, text: str, multirun: bool) -> list[str] | None:
    """The value(s) of one secret override as Hydra reads them (quotes, sweeps), never echoed."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        parsed = OverridesParser.create().parse_override(f"{key}={text}")
    except Exception:
        from .errors import bad_env_name

        raise bad_env_name(key, MASK) or UserError(
            path, MASK, "not a value Hydra's override grammar can read", _quote_hint(key)
        ) from None
    if parsed.is_sweep_override():
        if not multirun:
            raise UserError(
                path, MASK, "one value (a ',' outside quotes makes a list of values to sweep with -m)", _quote_hint(key)
            )
        values = list(parsed.sweep_iterator())
    else:
        values = [parsed.value()]
    if values == [None]:
        return None
    if any(isinstance(value, (list, dict)) or value is None for value in values):
        raise UserError(path, MASK, "a string", _quote_hint(key))
    values = [str(value) for value in values]
    if len(values) == 1 and "${" in values[0]:
        return None
    return values
