"""The ``ssh.*`` keys checked before anything is built (pure): each mistake one :class:`UserError`
naming the key, the value and what is allowed (docs/errors.md lists the messages)."""

from __future__ import annotations

import re

from ..addresses import check_port
from ..errors import UserError

HINT = "docs/ssh.md"
MAX_CONNECT_TIMEOUT_S = 600
# an ssh -o option: Name=value or "Name value" (ssh_config(5)); never a flag of its own
_OPTION = re.compile(r"^[A-Za-z][A-Za-z0-9]*(=|\s+)\S.*$")
# options the launch sets itself: a different value would break it (a prompt that waits forever)
_OWN_OPTIONS = ("batchmode",)
# options that would break the SSH channel (the secrets, then a beat every second, on ssh's stdin):
# name -> (the one value allowed, why). ssh keeps the first value it gets of each option, from the
# command line before any config file: the launch's own -T and -o PermitLocalCommand=no come first
# (launcher/ssh/command.py); these are refused here so that no typed value is silently overridden
CHANNEL_OPTIONS = {
    "requesttty": ("no", "the launch runs without a terminal (ssh -T): a terminal would echo the secrets"),
    "permitlocalcommand": (
        "no",
        "the launch sets PermitLocalCommand=no: a LocalCommand shares ssh's stdin, the secrets",
    ),
    "remotecommand": ("none", "the launch runs its own command on each host"),
    "sessiontype": ("default", "the launch runs its own command on each host"),
    "stdinnull": ("no", "the launch speaks on ssh's stdin (the secrets, then a beat every second)"),
    "forkafterauthentication": ("no", "the launch stays with every ssh client to the end (one Ctrl+C, one exit code)"),
}


def check(ssh) -> None:
    """``ssh`` (:class:`~launcher.config.schema.SshConfig`) as the launch needs it.

    >>> from launcher.config.schema import SshConfig
    >>> check(SshConfig(hosts=["a"], connect_timeout=0))
    Traceback (most recent call last):
    ...
    launcher.errors.UserError: ssh.connect_timeout=0: whole seconds from 1 to 600 (how long ssh waits for each host to answer)
    >>> check(SshConfig(hosts=["a"], options=["-v"]))
    Traceback (most recent call last):
    ...
    launcher.errors.UserError: ssh.options=-v: each an ssh -o option as Name=value, e.g. StrictHostKeyChecking=accept-new (ssh_config(5))
    >>> check(SshConfig(hosts=["a"], python="py", command="train_multigpu"))
    Traceback (most recent call last):
    ...
    launcher.errors.UserError: ssh.command=train_multigpu: either ssh.python or ssh.command, not both (ssh.command runs the launcher itself; drop ssh.python)
    """  # noqa: E501
    if ssh.hostfile is not None and list(ssh.hosts):
        raise UserError("ssh.hostfile", ssh.hostfile, "either ssh.hosts or ssh.hostfile, not both", "drop one of them")
    if not 1 <= int(ssh.connect_timeout) <= MAX_CONNECT_TIMEOUT_S:
        raise UserError(
            "ssh.connect_timeout",
            ssh.connect_timeout,
            f"whole seconds from 1 to {MAX_CONNECT_TIMEOUT_S}",
            "how long ssh waits for each host to answer",
        )
    if ssh.port is not None:
        check_port(ssh.port, "ssh.port")
    check_port(ssh.rendezvous_port, "ssh.rendezvous_port")
    for option in ssh.options:
        text = str(option).strip()
        if not _OPTION.match(text):
            raise UserError(
                "ssh.options",
                option,
                "each an ssh -o option as Name=value, e.g. StrictHostKeyChecking=accept-new",
                "ssh_config(5)",
            )
        name = re.split(r"[=\s]", text, maxsplit=1)[0].lower()
        if name in _OWN_OPTIONS:
            raise UserError(
                "ssh.options",
                option,
                "the launch sets BatchMode=yes itself (a password prompt would wait forever)",
                HINT,
            )
        if name == "connecttimeout":
            raise UserError("ssh.options", option, "the connect timeout is ssh.connect_timeout=N", HINT)
        if name in CHANNEL_OPTIONS:
            allowed, why = CHANNEL_OPTIONS[name]
            value = re.split(r"[=\s]+", text, maxsplit=1)[1].strip().strip("\"'")
            if value.lower() != allowed:
                raise UserError("ssh.options", option, why, HINT)
    for key in ("user", "identity", "python", "workdir"):
        value = getattr(ssh, key)
        if value is not None and (not str(value).strip() or str(value).startswith("-")):
            raise UserError(f"ssh.{key}", value, _WHAT[key], HINT)
    if ssh.user is not None and re.search(r"[\s@:/]", str(ssh.user)):
        raise UserError("ssh.user", ssh.user, _WHAT["user"], HINT)
    if ssh.workdir is not None and not str(ssh.workdir).startswith("/"):
        raise UserError("ssh.workdir", ssh.workdir, _WHAT["workdir"], HINT)
    if ssh.command is not None:
        if not str(ssh.command).strip():
            raise UserError(
                "ssh.command",
                ssh.command,
                "a shell line that runs train_multigpu there (the arguments are appended)",
                HINT,
            )
        if ssh.python is not None:
            raise UserError(
                "ssh.command",
                ssh.command,
                "either ssh.python or ssh.command, not both",
                "ssh.command runs the launcher itself; drop ssh.python",
            )


_WHAT = {
    "user": "the login name on every host (ssh -l)",
    "identity": "the private key file ssh uses (ssh -i)",
    "python": "the interpreter that runs the launcher on every host (a path, e.g. /opt/venv/bin/python)",
    "workdir": "an absolute directory that exists on every host (the launcher runs there)",
}


def check_node(node_cfg, python: str) -> None:
    """Node i's composition (command.node_config) checked here as far as it is the config's: every
    refusal that comes from a host's own facts (its GPUs, CPUs, script, ports) is that host's, asked
    by the preflight (launcher/ssh/preflight.py), so this machine -- maybe a laptop without GPUs --
    stands in with as many GPUs and CPUs as the launch asks for."""
    from .. import checks, paths
    from ..facts import HostFacts

    given = str(node_cfg.launcher.nproc_per_node).strip()
    count = int(given) if given.isdigit() and int(given) > 0 else 8
    facts = HostFacts(
        python=python,
        visible_gpus=count,
        gpus_source="the host's own: its preflight checks them",
        usable_cpus=count,
        examples_dir=str(paths.examples_dir()),
    )
    checks.validate(node_cfg, facts, refuse=lambda error: None)
