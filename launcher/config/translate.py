"""Hydra's and OmegaConf's own errors (an unknown key, option or type, an override Hydra's grammar
cannot read) as the one-line :class:`~launcher.errors.UserError` form, quoting values as the command
line's grammar does (:mod:`.grammar`)."""

from __future__ import annotations

import re
from typing import Any

from ..errors import UserError
from ..names import override_key
from .grammar import BARE_ITEM_LISTS, FLAG_TO_KEY, GROUPS, bad_env_name, quote
from .schema import keys_of_type

_OVERRIDE_IN_MESSAGE = re.compile(r"(?:Could not override '([^']+)'|Error merging override (\S+))")
_MISSING_OPTION = re.compile(r"Could not (?:find|load) '([^/']+)/([^']*)'")


def from_omegaconf(err: Exception, override: str | None = None) -> UserError:
    """From an OmegaConf error: its first line says what is wrong, ``full_key`` says where."""
    reason = str(err).splitlines()[0].strip()
    key = getattr(err, "full_key", None) or "config"
    node = getattr(err, "child_node", None)
    raw = node._value() if node is not None and hasattr(node, "_value") else None
    # an interpolation as written (``${x}``: a reference, never a secret value); else nothing
    value: Any = raw if isinstance(raw, str) and raw.startswith("${") and raw.endswith("}") else ""
    if override and "=" in override:
        key, value = override.lstrip("+~").split("=", 1)
    parent = key.rpartition(".")[0]
    if "not in struct" in reason and any(parent == m or parent.startswith(f"{m}.") for m in MAP_KEYS):
        return UserError(key, value, f"a new entry of {parent}, a free-form map", f"add it with +: +{key}={value}")
    if "not in" in reason and key != "config":
        reason += "; train_multigpu --cfg job lists the keys"
    kind = _value_kind(reason, key, str(value))
    if kind is not None:
        return UserError(key, value, *kind)
    return UserError(key, value, reason)


# free-form maps (worker_env, slurm.extra, ray.runtime_env, ...): a new entry takes +key=value
MAP_KEYS = keys_of_type(dict)
# the node-count key that takes an elastic range: every other integer key is told so for MIN:MAX
RANGE_KEY = "launcher.nnodes"
_NOT_INT = re.compile(r"could not be converted to Integer")
_NOT_FLOAT = re.compile(r"could not be converted to Float")
_NOT_BOOL = re.compile(r"could not be converted to Boolean|is not a valid bool")
_NOT_LIST = re.compile(r"is not a ListConfig")


def _value_kind(reason: str, key: str, value: str) -> tuple[str, str | None] | None:
    """What a key of this kind takes (and a hint), for OmegaConf's words on a value of the wrong
    kind; None: not such an error.

    >>> _value_kind("Value '1:2' of type 'str' could not be converted to Integer", "slurm.nodes", "1:2")
    ('an integer', 'MIN:MAX is taken by launcher.nnodes only: elastic torchrun across nodes, launcher=multinode')
    >>> _value_kind("Invalid value assigned: str is not a ListConfig, list or tuple.", "ssh.hosts", "")
    ('a list', 'write ssh.hosts=[a,b], or one item bare: ssh.hosts=a')
    """
    if _NOT_INT.search(reason):
        hint = None
        if ":" in value:
            hint = f"MIN:MAX is taken by {RANGE_KEY} only: elastic torchrun across nodes, launcher=multinode"
        return "an integer", hint
    if _NOT_FLOAT.search(reason):
        return "a number", None
    if _NOT_BOOL.search(reason):
        return "true or false", None
    if _NOT_LIST.search(reason) or (key in BARE_ITEM_LISTS and "is not Optional" in reason):
        return "a list", f"write {key}=[a,b], or one item bare: {key}=a"
    return None


_GROUP_NOT_STRING = re.compile(r"Config group override must be a string or a list")
_AMBIGUOUS = re.compile(r"Ambiguous value for argument '([^']*)'")


def shell_word(text: str) -> str:
    r"""``text`` as one word for a POSIX shell, in the least surprising quotes.

    >>> print(shell_word("task=x"), shell_word("a=b c"), shell_word("it's"), shell_word("x='it\\'s'"))
    task=x 'a=b c' "it's" "x='it\\'s'"
    """
    if re.fullmatch(r"[\w@%+=:,./-]+", text, flags=re.ASCII):
        return text
    if "'" not in text:
        return f"'{text}'"
    return '"' + re.sub(r'([\\"$`])', r"\\\1", text) + '"'


def quoting_hint(override: str) -> UserError:
    r"""A value Hydra's override grammar cannot read as typed: name the key and show what works --
    the Isaac Lab flag (no Hydra quoting at all) where the key has one, and the quoted override.

    >>> print(quoting_hint("task=it's"))
    task=it's: Hydra's override grammar needs this value quoted (write --task "it's", or "task='it\\'s'")
    >>> print(quoting_hint("launcher.rdzv_id=a=b"))
    launcher.rdzv_id=a=b: Hydra's override grammar needs this value quoted (write --rdzv_id a=b, or "launcher.rdzv_id='a=b'")
    >>> print(quoting_hint("+worker_env.X=café"))
    worker_env.X=café: Hydra's override grammar needs this value quoted (write "+worker_env.X='café'")
    """  # noqa: E501
    raw_key, _, value = override.partition("=")
    key = raw_key.lstrip("+~")
    if (name_error := bad_env_name(raw_key, value)) is not None:
        return name_error
    flags = [name for name, flag_key in FLAG_TO_KEY.items() if flag_key == key]
    hydra_form = f"{raw_key}={quote(value)}"
    if key in BARE_ITEM_LISTS and value.startswith("[") and value.endswith("]"):  # a list: quote its items
        flags = []
        hydra_form = f"{raw_key}=[{','.join(quote(item.strip()) for item in value[1:-1].split(','))}]"
    quoted = shell_word(hydra_form)
    if quoted == hydra_form:  # no shell quotes: the shell would strip the quotes Hydra needs
        quoted = f'"{quoted}"'
    hint = f"write --{flags[0]} {shell_word(value)}, or {quoted}" if flags else f"write {quoted}"
    return UserError(key, value, "Hydra's override grammar needs this value quoted", hint)


def _unreadable_override(overrides: list[str]) -> str | None:
    """The first override Hydra's grammar cannot parse, as one line naming its key."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    parser = OverridesParser.create()
    for override in overrides:
        try:
            parser.parse_overrides([override])
        except OverrideParseException:
            return str(quoting_hint(override))
    return None


def _reads_as_scalar(value: str) -> bool:
    """Hydra reads this unquoted value as a number or a bool, not a name."""
    if value.strip().lower() in ("true", "false"):
        return True
    try:
        float(value)
    except ValueError:
        return False
    return True


def hydra_value_error(err: Exception) -> bool:
    """A ValueError Hydra raises for a user's override (no HydraException): from_hydra explains it."""
    return isinstance(err, ValueError) and bool(_GROUP_NOT_STRING.search(str(err)))


def from_hydra(err: Exception, overrides: list[str]) -> str:
    """One line for a Hydra composition error (unknown group option, key or type, an override its
    grammar cannot read)."""
    from hydra.errors import OverrideParseException

    text = str(err)
    if isinstance(err, OverrideParseException):
        line = _unreadable_override(overrides)
        if line:
            return line
    ambiguous = _AMBIGUOUS.search(text)
    if ambiguous:
        key, _, value = ambiguous.group(1).partition("=")
        key = key.lstrip("+~")
        if key in BARE_ITEM_LISTS:
            return str(
                UserError(
                    key,
                    value,
                    "a comma list is a sweep: one job per value",
                    f"a list is written in brackets: {shell_word(f'{key}=[{value}]')}; add -m to sweep",
                )
            )
        return str(
            UserError(
                key,
                value,
                "a comma list is a sweep: one job per value",
                f"add -m to sweep, or quote it as one string: {shell_word(f'{key}={quote(value)}')}",
            )
        )
    if _GROUP_NOT_STRING.search(text):
        for override in overrides:
            key, _, value = override.partition("=")
            group = key.lstrip("+~").split("@")[0]
            if group in GROUPS and _reads_as_scalar(value):
                return str(
                    UserError(
                        group,
                        value,
                        f"a {group} name",
                        f"quote a name that reads as a number: {shell_word(f'{group}={quote(value)}')}",
                    )
                )
    missing = _MISSING_OPTION.search(text)
    if missing:
        group, option = missing.groups()
        options = re.findall(r"^\t(\S+)$", text.split("Config search path")[0], flags=re.M)
        allowed = f"no such {group} option" + (f"; available: {', '.join(options)}" if options else "")
        return str(
            UserError(
                group, option, allowed, f"train_multigpu --info searchpath shows where {group}/ configs are looked up"
            )
        )
    named = _OVERRIDE_IN_MESSAGE.search(text)
    cause = err.__cause__
    if named and cause is not None:
        target = named.group(1) or named.group(2)
        override = next((o for o in overrides if override_key(o) == override_key(target)), target)
        return str(from_omegaconf(cause, override))
    lines = [line.strip() for line in text.splitlines() if line.strip() and "HYDRA_FULL_ERROR" not in line]
    message = "; ".join(lines[:3])
    for override in overrides:  # Hydra's own words, led by the key of the override they are about
        key, _, value = override.partition("=")
        if f"'{key.lstrip('+~')}'" in text or f"'{override}'" in text:
            return str(UserError(key.lstrip("+~"), value, message))
    return message
