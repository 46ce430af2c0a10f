"""``submit=ssh``'s early start: every host's ssh client started before Hydra composes.

Hydra's import and composition take most of what this machine does before its ssh clients start
(about 0.7 s of a 2.8 s start, docs/ssh.md); an ssh login takes about 0.6 s more, and every host's
launcher then imports for as long again. A node's ssh command (launcher/ssh/command.py ``node``)
depends on the ``ssh.*`` keys, this interpreter and this directory alone -- its launcher's
arguments go on the channel once known (run/leash.py) -- so when the command line itself says
``submit=ssh`` and names the hosts, the clients start at once, from the command line as typed
(:func:`start`, from launcher/__main__.py, before the launcher imports Hydra): the logins and every
host's imports overlap this machine's composition. Nothing goes on any channel before the
launch has composed and checked everything: each host's launcher says it is there and waits.

Only where nothing but the command line can set an ``ssh.*`` key: ``submit=ssh`` and ``ssh.hosts``
typed, every ``ssh.*`` value typed plainly (no interpolation anywhere on the line: ``${...}`` may
read the environment the clients run in), and no profile (typed, or Isaac Lab's default), preset,
``ssh.hostfile``, ``dry_run``, ``save_profile`` or Hydra flag. Anything else starts the clients
once composed, as before.

Then the launch adopts them (:func:`take`) only when the composed launch runs exactly those
commands, in that environment; otherwise -- and whenever the launch ends without adopting them (a
composition or a check that fails, a dry run, a Ctrl+C) -- :func:`close` closes every channel:
each host's launcher (or, while it still imports, its shell's guard) ends with nothing started or
written, and the clients are waited for.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable, Mapping, Sequence

from ..names import RAY_CONFIG_VAR, SSH_CHANNEL_VAR, override_key

# the keys that decide a node's ssh command (command.node), as typed; any other ssh.* key typed
# (ssh.hostfile, ssh.rendezvous_port is only an argument) is left to the composition
_LISTS = ("hosts", "options")
_INTS = ("port", "connect_timeout")
_TEXTS = ("user", "identity", "python", "command", "workdir")
_ARGUMENT_ONLY = ("rendezvous_port",)
# typed keys that may set or hide an ssh.* value, or mean no launch: no early start
_NOT_EARLY = ("profile", "presets", "dry_run", "save_profile", "ssh", "ssh.hostfile", "hydra")
_ITEM = r"""'[^'\\]*'|"[^"\\]*"|[A-Za-z0-9_./:@%+\-]+"""
_LIST = re.compile(rf"^\[\s*(?:(?:{_ITEM})\s*(?:,\s*(?:{_ITEM})\s*)*)?\]$")

_started = None  # the clients started early: a run.ssh_nodes.SshNodes, until taken or closed


def _plain(text: str) -> str | None:
    """A scalar as Hydra reads a plain one: quoted (no escape inside), or bare; None: not plain.

    >>> _plain("'a b'"), _plain("gpu-a"), _plain("null"), _plain("a b")
    ('a b', 'gpu-a', None, None)
    """
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        inner = text[1:-1]
        return inner if "\\" not in inner and text[0] not in inner else None
    if text.lower() in ("null", "true", "false", "") or not re.fullmatch(r"[A-Za-z0-9_./:@%+\-]+", text):
        return None
    return text


def _items(text: str) -> list[str] | None:
    """A list as Hydra reads a plain one, or one plain item; None: not plain.

    >>> _items("[a, 'b=1', \\"c d\\"]"), _items("gpu-a"), _items("[a,[b]]")
    (['a', 'b=1', 'c d'], ['gpu-a'], None)
    """
    text = text.strip()
    if not text.startswith("["):
        one = _plain(text)
        return None if one is None else [one]
    if not _LIST.match(text):
        return None
    found = [_plain(m) for m in re.findall(_ITEM, text[1:-1])]
    return None if any(item is None for item in found) else [str(item) for item in found]


def typed_ssh(overrides: Sequence[str]):
    """The ``ssh.*`` config the command line alone sets (:class:`~launcher.config.schema.SshConfig`,
    its defaults for the rest), or None when the composition may set more, or differently."""
    from ..config.schema import SshConfig

    ssh, submit, hosts = SshConfig(), None, False
    for override in overrides:
        key, eq, value = override.partition("=")
        name = override_key(key)
        if not eq or key.startswith("~") or "${" in value:
            return None
        if name in _NOT_EARLY or name.split(".", 1)[0] == "hydra":
            return None
        if name == "submit":
            submit = _plain(value)
        if not name.startswith("ssh."):
            continue
        field = name.split(".", 1)[1]
        if field in _LISTS:
            parsed = _items(value)
            hosts = hosts or (field == "hosts" and bool(parsed))
        elif field in _INTS:
            plain = _plain(value)
            parsed = int(plain) if plain is not None and plain.isdigit() else None
        elif field in _TEXTS:
            parsed = _plain(value)
        elif field in _ARGUMENT_ONLY:
            continue
        else:
            return None
        if parsed is None:
            return None
        setattr(ssh, field, parsed)
    return ssh if submit == "ssh" and hosts else None


def predict(argv: Sequence[str], environ: Mapping[str, str], cwd: str, python: str):
    """(every node's command without its arguments, the secret values typed) when the command line
    alone decides them; None otherwise -- or when anything in it is wrong: the launch says what."""
    from ..config import compose, grammar
    from ..errors import UserError
    from ..run.ssh_nodes import RemoteNode
    from . import checks, command, hosts

    try:
        line = grammar.parse(list(argv))
        if line.hydra_flags:
            return None
        overrides, vault = grammar.hide(line.overrides, multirun=False)
        overrides = compose.with_default_profile(overrides, environ)
        ssh = typed_ssh(overrides)
        if ssh is None:
            return None
        checks.check(ssh)
        found = hosts.from_config(ssh.hosts, None, None)
    except (UserError, ValueError):
        return None
    nodes = [command.node(rank, host, ssh, python, cwd) for rank, host in enumerate(found)]
    hidden = [value for by_placeholder in vault.values.values() for value in by_placeholder.values()]
    return [RemoteNode(n.rank, n.host, n.argv) for n in nodes], hidden


def start(argv: Sequence[str], environ: Mapping[str, str] = os.environ) -> None:
    """Start every host's ssh client now when the command line alone decides its command
    (:func:`predict`); otherwise nothing. Never fails the launch: whatever goes wrong here, the
    launch starts its clients once composed."""
    global _started
    if SSH_CHANNEL_VAR in environ or RAY_CONFIG_VAR in environ or _started is not None:
        return  # a node's own launcher (over ssh, in a Ray job): never
    try:
        predicted = predict(argv, environ, os.getcwd(), sys.executable)
    except Exception:  # noqa: BLE001 -- only an early start lost; the launch says what is wrong
        return
    if predicted is None:
        return
    from ..run.ssh_nodes import SshNodes

    nodes, hidden = predicted
    clients = SshNodes(nodes, hidden)
    _started = clients  # before the first client: a Ctrl+C meanwhile still closes what started
    try:
        clients.start()
    except OSError:  # no ssh here: the launch's own start says so
        close()


def take(nodes: Sequence, hidden: Iterable[str]):
    """The clients started early, when they run exactly ``nodes``' commands (run.ssh_nodes.RemoteNode)
    and their environment holds none of the launch's secret values (``hidden``); else None, every
    early client closed first."""
    global _started
    from ..secrets import without_values

    clients, _started = _started, None
    if clients is None:
        return None
    if [n.argv for n in clients.nodes] == [n.argv for n in nodes] and without_values(
        clients.env, hidden
    ) == clients.env:
        return clients
    clients.abort()
    return None


def close() -> None:
    """The early clients, if the launch did not take them: every channel closed, each host's
    launcher (or its guard) ended with nothing started, every client waited for."""
    global _started
    clients, _started = _started, None
    if clients is not None:
        clients.abort()
