"""Secrets in worker environment variables: shown and recorded masked, passed to workers as they are.

A variable is a secret when a part of its name (split at ``_``, ``-``, ``.``) is, or ends with, one
of TOKEN, SECRET, PASSWORD, PASSWD, KEY, CREDENTIAL(S), or the part is AUTH/PAT/APIKEY:
``WANDB_API_KEY``, ``HF_TOKEN``, ``AWS_SECRET_ACCESS_KEY``, ``DB_PASSWORD``, ``GITHUB_PAT``.
``MONKEY_COUNT`` is one (``MONKEY`` ends with KEY): better a masked harmless value than a leaked
token. What is masked: the dry run's text, ``env.json``, ``command.sh`` (which reads the value
from the caller's environment instead) and ``config.yaml``. The plan given to the supervisor keeps
the real values.

A secret typed on the command line (``+worker_env.HF_TOKEN=abc``) never reaches Hydra:
:func:`launcher.config.grammar.hide` hands Hydra ``+worker_env.HF_TOKEN=***`` (``***1,***2`` for the
values of a ``-m`` sweep) and keeps the values in a :class:`Vault`; the launch puts them back into
its typed config (:meth:`Vault.reveal`). So whatever Hydra writes or prints -- ``multirun.yaml``,
``.hydra/``, ``override_dirname``, ``--cfg``, the sweep table, its own error messages -- shows the
masked form. A value that is a reference (``${oc.env:HF_TOKEN}``) is not a secret value and is left
to OmegaConf. What Hydra prints of a config it composed itself (``--cfg``, ``--info``, ``--help``: a
profile file's values, a reference that ``--resolve`` resolves) goes through
:func:`hydra_shows_masked`.

Errors: every :class:`~launcher.errors.UserError` shows its value through :func:`shown` (``***`` for
a secret key's value, or a map holding one), and every error line is passed through :func:`redact`,
which masks each secret value this process was given (:func:`remember`: the grammar and its
:func:`~launcher.config.grammar.hide` note them as they read them), wherever the message quotes it:
the value of another override it contradicts, Hydra's own words, a hint that shows the value quoted.
No caller has to remember to.

A leaf: it imports nothing of the package (:mod:`launcher.errors` imports it to mask values).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

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


# keys of the schema whose names read as secret ones but whose values are not: k8s.secret_env names
# Kubernetes Secrets (NAME:secret/key), profile.pass_rl_library is a switch
NOT_SECRET_KEYS = ("k8s.secret_env", "profile.pass_rl_library")
# config keys whose value is a secret although their name does not say so: a webhook URL grants
# posting (launcher/notify.py); typed on the command line it is hidden from Hydra as a worker_env
# secret is (config.grammar.hide), masked in config.yaml, composition.json and every error line; the
# variable a submitted job finds it in (Vault.by_reference)
SECRET_KEYS = {"notify.url": "TRAIN_MULTIGPU_NOTIFY_URL"}
_REFERENCE = re.compile(r"\$\{[^${}]*\}")
# the names in a map as typed: ``{HF_TOKEN: abc}``
_MAP_NAMES = re.compile(r"[\w.\-]+(?=\s*:)")


def _path(key: str) -> str:
    return key.lstrip("+~").split("@", 1)[0]


def secret_key(key: str) -> bool:
    """A config key (as typed or as shown) whose value is a secret: its last segment names one.

    >>> [secret_key(k) for k in ("+worker_env.HF_TOKEN", "HF_TOKEN", "profile.env.PASSWD", "k8s.secret_env", "seed")]
    [True, True, True, False, False]
    >>> secret_key("notify.url"), secret_key("notify.events")
    (True, False)
    """
    path = _path(key)
    return path in SECRET_KEYS or (path not in NOT_SECRET_KEYS and is_secret(path.rsplit(".", 1)[-1]))


def holds_secret(value: Any) -> bool:
    """A map with a secret-named key at any depth: typed (``{env_vars: {HF_TOKEN: abc}}``) or composed.

    >>> holds_secret("{env_vars: {HF_TOKEN: abc}}"), holds_secret({"a": {"HF_TOKEN": "x"}}), holds_secret("{A: 1}")
    (True, True, False)
    """
    if isinstance(value, str):
        return "{" in value and any(is_secret(name) for name in _MAP_NAMES.findall(value))
    if isinstance(value, Mapping):
        return any(is_secret(str(k)) or holds_secret(v) for k, v in value.items())
    if isinstance(value, Sequence):
        return any(holds_secret(v) for v in value)
    return False


def shown(key: str, value: Any) -> Any:
    """A value as an error shows it: ``***`` for a secret key's value or a map holding a secret; a
    pure reference (``${oc.env:HF_TOKEN}``) holds no value and is shown as typed.

    >>> shown("worker_env.HF_TOKEN", "abc"), shown("worker_env.HF_TOKEN", "${oc.env:T}"), shown("worker_env", {"HF_TOKEN": "abc"})
    ('***', '${oc.env:T}', '***')
    >>> shown("seed", "abc"), shown("k8s.secret_env", "[HF_TOKEN:hf/token]"), shown("worker_env.HF_TOKEN", "")
    ('abc', '[HF_TOKEN:hf/token]', '')
    """  # noqa: E501
    if value is None or value == "" or value == MASK or _path(key) in NOT_SECRET_KEYS:
        return value
    if isinstance(value, str) and _REFERENCE.fullmatch(value.strip()):
        return value
    if secret_key(key) or holds_secret(value):
        return MASK
    return value


# -- the secret values this process was given, masked in every error line ----------------------

# Module state on purpose: the values typed on this command line (the launcher is one process per
# command; cli.main starts from an empty set), so that an error built anywhere -- Hydra's own
# words included -- never quotes one. Never written, never printed.
_given: set[str] = set()
_QUOTES = "'\" \t"


def forget() -> None:
    """A new command line (cli.main): no value of an earlier one is masked any more."""
    _given.clear()


def remember(override: str) -> None:
    """Note the value(s) of an override whose key (or map) holds a secret, as typed: the whole text,
    without its quotes, and each item of a ``,`` list or of a map's secret entries.

    >>> forget(); remember("+worker_env.HF_TOKEN='a b',c"); remember("seed=1"); sorted(_given)
    ["'a b'", "'a b',c", 'a b', "a b',c", 'c']
    >>> forget()
    """
    key, eq, text = override.partition("=")
    path = _path(key)
    if not eq or not text.strip() or path in NOT_SECRET_KEYS:
        return
    if holds_secret(text):  # a map: the values after its secret names
        found = re.findall(r"([\w.\-]+)\s*:\s*([^,{}\[\]]*)", text)
        remember_values([text, *(value for name, value in found if is_secret(name))])
    elif secret_key(path):
        remember_values([text, *text.split(",")])


def remember_values(values: Iterable[Any]) -> None:
    """Note secret values (as Hydra read them: :func:`launcher.config.grammar.hide`; as typed: :func:`remember`)."""
    for value in values:
        for form in (str(value), str(value).strip(_QUOTES)):
            if form.strip() and form != MASK and not _REFERENCE.fullmatch(form.strip()):
                _given.add(form)


def masking() -> bool:
    """Is any secret value remembered (:func:`redact` has something to mask)?"""
    return bool(_given)


def redact(text: str, values: Iterable[str] = ()) -> str:
    """``text`` with every remembered secret value (and ``values``) as ``***``, longest first. A
    value shorter than 8 characters is masked where it stands as a value (after ``=``, a quote,
    ``:``, ``,`` or a bracket, up to the end of a word), so that a secret ``a`` or ``1`` does not
    garble ``a --flag`` or ``nproc_per_node=10``.

    >>> redact("x=abc: contradicts y=abcdef12 (abcd, 'abc', a abc)", ["abc", "abcdef12"])
    "x=***: contradicts y=*** (abcd, '***', a abc)"
    """
    if not _given and not values:  # nothing to mask (a listing's every cell comes here)
        return text
    forms = {v for v in (*_given, *values) if v and v.strip()}
    for value in sorted(forms, key=len, reverse=True):
        if value not in text:
            continue
        if len(value) >= 8:
            text = text.replace(value, MASK)
        else:
            tail = r"(?!\w)" if re.search(r"\w$", value) else ""
            text = re.sub(r"(?:(?<=[=':\",{\[(])|^)" + re.escape(value) + tail, lambda _: MASK, text)
    return text


def mask_env(env: Mapping[str, str]) -> dict[str, str]:
    return {key: (MASK if is_secret(key) and value else value) for key, value in env.items()}


def without_values(env: Mapping[str, str], values: Iterable[str]) -> dict[str, str]:
    """``env`` without the variables that hold one of the secret ``values``: the environment of a
    program that must not carry them (submit=ssh's clients: a ``${oc.env:NAME}`` secret is resolved
    from the environment the command is typed in, and ssh's ``SendEnv`` would send it, its debug
    log print it; the value travels on the channel alone).

    >>> without_values({"API_TOKEN": "s3", "HOME": "/h", "EMPTY": ""}, ["s3", ""])
    {'HOME': '/h', 'EMPTY': ''}
    """
    hidden = {value for value in values if value}
    return {key: value for key, value in env.items() if value not in hidden}


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
    """``+worker_env.HF_TOKEN=abc`` -> ``+worker_env.HF_TOKEN=***`` (the last key segment decides;
    a map holding a secret is masked whole).

    >>> mask_override("+worker_env.HF_TOKEN=abc"), mask_override("seed=1")
    ('+worker_env.HF_TOKEN=***', 'seed=1')
    >>> mask_override("+worker_env={HF_TOKEN: abc}"), mask_override("k8s.secret_env=[HF_TOKEN:hf/token]")
    ('+worker_env=***', 'k8s.secret_env=[HF_TOKEN:hf/token]')
    """
    key, eq, value = text.partition("=")
    path = key.lstrip("+~-")
    if eq and value and path not in NOT_SECRET_KEYS and (secret_key(path) or holds_secret(value)):
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
    for key in SECRET_KEYS:  # notify.url
        node, name = _typed_owner(masked, key)
        if node is not None and getattr(node, name, None):
            setattr(node, name, MASK)
    return masked


def _typed_owner(cfg, key: str) -> tuple[object | None, str]:
    """The typed config's object that holds ``key`` (``notify.url`` -> (cfg.notify, "url")); None:
    no such section in this config."""
    owner, _, name = key.rpartition(".")
    node = cfg
    for part in owner.split(".") if owner else ():
        node = getattr(node, part, None)
    return node, name


def mask_composed(cfg, resolve: bool):
    """A composed DictConfig with the secret values of SECTIONS as ``***``, in place (what Hydra
    prints of it). A pure reference stays as written unless ``resolve``: resolved, it would show
    the value it reads."""
    from omegaconf import DictConfig, OmegaConf, flag_override

    for key in SECRET_KEYS:  # notify.url
        section, _, name = key.rpartition(".")
        node = OmegaConf.select(cfg, section, throw_on_missing=False, throw_on_resolution_failure=False)
        if isinstance(node, DictConfig) and not node._is_none() and name in node:
            raw = node._get_node(name)._value()
            if raw not in (None, "", MASK) and (resolve or not (isinstance(raw, str) and _REFERENCE.fullmatch(raw))):
                with flag_override(node, ["readonly", "struct"], [False, False]):
                    node[name] = MASK
    for section in SECTIONS:
        node = OmegaConf.select(cfg, section, throw_on_missing=False, throw_on_resolution_failure=False)
        if not isinstance(node, DictConfig) or node._is_none():
            continue
        with flag_override(node, ["readonly", "struct"], [False, False]):
            for name in list(node.keys()):
                raw = node._get_node(name)._value()
                if not is_secret(str(name)) or raw is None or raw == "" or raw == MASK:
                    continue
                if isinstance(raw, str) and _REFERENCE.fullmatch(raw.strip()) and not resolve:
                    continue
                node[name] = MASK
    return cfg


@contextlib.contextmanager
def hydra_shows_masked(resolve: bool):
    """While Hydra prints a config it composes itself (``--cfg``, ``--info``, ``--help``; the job
    function never runs then): every composition it makes has its secret values masked. Hydra has
    no hook between composing and printing, so its ``compose_config`` is wrapped for the call."""
    from hydra._internal.hydra import Hydra

    original = Hydra.compose_config

    def compose_config(self, *args, **kwargs):
        return mask_composed(original(self, *args, **kwargs), resolve)

    Hydra.compose_config = compose_config
    try:
        yield
    finally:
        Hydra.compose_config = original


# -- secrets typed on the command line ---------------------------------------------------------

# the config sections whose entries become worker environment variables (Ray's runtime_env: the job's)
SECTIONS = ("worker_env", "profile.env", "ray.runtime_env.env_vars")


def section_name(path: str) -> tuple[str | None, str]:
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


def references(dict_cfg) -> list[str]:
    """The dotted paths of the secret entries of SECTIONS whose value, as composed, is a reference
    (``${oc.env:HF_TOKEN}``, typed or in a profile): resolved here, where the command is typed.

    >>> from omegaconf import OmegaConf
    >>> references(OmegaConf.create({"worker_env": {"HF_TOKEN": "${oc.env:T}", "A_KEY": "x", "N": "${oc.env:N}"},
    ...                              "profile": {"env": {"WANDB_API_KEY": "${oc.env:W,''}"}}}))
    ['worker_env.HF_TOKEN', 'profile.env.WANDB_API_KEY']
    """
    from omegaconf import DictConfig, OmegaConf

    found = []
    for section in SECTIONS:
        node = OmegaConf.select(dict_cfg, section, throw_on_missing=False, throw_on_resolution_failure=False)
        if not isinstance(node, DictConfig) or node._is_none():
            continue
        for name in node.keys():
            raw = node._get_node(name)._value()
            if is_secret(str(name)) and isinstance(raw, str) and _REFERENCE.search(raw):
                found.append(f"{section}.{name}")
    return found


@dataclass
class Vault:
    """The secret values taken off the command line: ``{dotted key: {placeholder: value}}``; and, for
    one launch, the secrets given by reference with the values they resolved to here (``referenced``:
    ``{dotted key: value}``, see :func:`references`; ``submit=ssh`` carries them as typed ones)."""

    values: dict[str, dict[str, str]] = field(default_factory=dict)
    referenced: dict[str, str] = field(default_factory=dict)

    def resolved_here(self, paths: Sequence[str], cfg) -> Vault:
        """This vault, with the values the typed config ``cfg`` resolved for the references at ``paths``.

        >>> class C: worker_env, profile = {"HF_TOKEN": "abc"}, None
        >>> Vault().resolved_here(["worker_env.HF_TOKEN"], C()).referenced
        {'worker_env.HF_TOKEN': 'abc'}
        """
        if not paths:
            return self
        found = {}
        for path in paths:
            section, name = section_name(path)
            value = section_env(cfg, section).get(name) if section is not None else None
            if value is not None:
                found[path] = str(value)
        return replace(self, referenced=found)

    def reveal(self, cfg):
        """Put the real values back into the typed config, where Hydra left a placeholder of ours."""
        for path, by_placeholder in self.values.items():
            section, name = section_name(path)
            if section is None:  # a secret key outside the env sections (SECRET_KEYS: notify.url)
                node, name = _typed_owner(cfg, path)
                if node is not None and getattr(node, name, None) in by_placeholder:
                    setattr(node, name, by_placeholder[getattr(node, name)])
                continue
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
                name = SECRET_KEYS.get(key.lstrip("+~")) or section_name(key.lstrip("+~"))[1]
                env[name] = by_placeholder[value]
                override = f"{key}=${{oc.env:{name}}}"
            out.append(override)
        return out, env
