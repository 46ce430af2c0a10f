"""The hosts of a ``submit=ssh`` launch: ``ssh.hosts``, or a hostfile in DeepSpeed's format (pure).

A hostfile holds one host per line, ``NAME slots=N`` (N: the ranks on that host) or just ``NAME``;
``#`` starts a comment, blank lines are skipped. Node 0 is the first host. ``slots`` sets
``launcher.nproc_per_node`` (every host must have the same number; a ``launcher.nproc_per_node``
given as a number must agree with it), as DeepSpeed's launcher starts ``slots`` ranks per host.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import UserError

HINT = "docs/ssh.md#the-hostfile"
# a host name or an IPv4 address; an IPv6 address (bare or bracketed) is checked by ipaddress
_HOST = re.compile(r"^[A-Za-z0-9_](?:[A-Za-z0-9_.\-]*[A-Za-z0-9_])?$")
_SLOTS = re.compile(r"^slots=(\d+)$")
MAX_SLOTS = 4096  # ranks on one host: more is a typo (and a dry run would list every one)


@dataclass(frozen=True)
class Host:
    name: str  # as given: what ssh connects to, and (node 0) the rendezvous address the others use
    slots: int | None = None  # the hostfile's slots=N; None: not given

    @property
    def address(self) -> str:
        """The name as an endpoint's host part: an IPv6 address bracketed.

        >>> Host("gpu-a").address, Host("fd00::2").address, Host("[fd00::2]").address
        ('gpu-a', '[fd00::2]', '[fd00::2]')
        """
        bare = self.name.strip("[]")
        return f"[{bare}]" if ":" in bare else bare

    @property
    def destination(self) -> str:
        """What ssh takes: an IPv6 address without brackets."""
        return self.name.strip("[]")


def check_name(name: str, key: str, where: str | None = None) -> str:
    """One host as ``ssh.hosts`` or a hostfile names it.

    >>> check_name("gpu-a", "ssh.hosts")
    'gpu-a'
    >>> check_name("me@gpu-a", "ssh.hosts")
    Traceback (most recent call last):
    ...
    launcher.errors.UserError: ssh.hosts=me@gpu-a: a host name or address (gpu-a, 10.0.0.2, fd00::2) (the user goes in ssh.user=NAME)
    """  # noqa: E501
    text = str(name).strip()
    if "@" in text:
        raise UserError(
            key, where or name, "a host name or address (gpu-a, 10.0.0.2, fd00::2)", "the user goes in ssh.user=NAME"
        )
    if not text or text.startswith("-") or not (_HOST.match(text) or _ipv6(text)):
        raise UserError(key, where or name, "a host name or address (gpu-a, 10.0.0.2, fd00::2)", HINT)
    return text


def _ipv6(text: str) -> bool:
    """An IPv6 address, bare or bracketed, with a zone or without.

    >>> [_ipv6(t) for t in ("fd00::2", "[fd00::2]", "fe80::1%eth0", ":", "::", "[:]", "a:b:c", "[fd00::2")]
    [True, True, True, False, True, False, False, False]
    """
    import ipaddress

    bare = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    if ":" not in bare or not re.fullmatch(r"[0-9A-Fa-f:.]+(%[\w.\-]+)?", bare):
        return False
    try:
        ipaddress.IPv6Address(bare)
    except ValueError:
        return False
    return True


def parse_hostfile(text: str, key: str = "ssh.hostfile") -> list[Host]:
    """The hosts of a DeepSpeed hostfile.

    >>> parse_hostfile("# lab\\ngpu-a slots=4\\n\\ngpu-b slots=4  # second\\n")
    [Host(name='gpu-a', slots=4), Host(name='gpu-b', slots=4)]
    >>> parse_hostfile("gpu-a slots=four")
    Traceback (most recent call last):
    ...
    launcher.errors.UserError: ssh.hostfile=line 1 'gpu-a slots=four': each line is 'HOST slots=N' (N from 1 to 4096), 'HOST', a # comment or blank (docs/ssh.md#the-hostfile)
    """  # noqa: E501
    hosts: list[Host] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        slots = None
        if len(fields) == 2 and (match := _SLOTS.match(fields[1])) and 1 <= int(match.group(1)) <= MAX_SLOTS:
            slots = int(match.group(1))
        elif len(fields) != 1:
            raise UserError(
                key,
                f"line {number} {raw.strip()!r}",
                f"each line is 'HOST slots=N' (N from 1 to {MAX_SLOTS}), 'HOST', a # comment or blank",
                HINT,
            )
        hosts.append(Host(check_name(fields[0], key, f"line {number} {raw.strip()!r}"), slots))
    return hosts


def from_config(hosts: Sequence[str], hostfile: str | None, hostfile_text: str | None) -> list[Host]:
    """The launch's hosts from ``ssh.hosts`` or the hostfile's text (read by the caller); exactly one
    of the two, at least one host, none twice.

    >>> from_config(["gpu-a", "gpu-b"], None, None)
    [Host(name='gpu-a', slots=None), Host(name='gpu-b', slots=None)]
    >>> from_config([], None, None)
    Traceback (most recent call last):
    ...
    launcher.errors.UserError: ssh.hosts=[]: submit=ssh needs the hosts, node 0 first: 'ssh.hosts=[gpu-a,gpu-b]' or ssh.hostfile=FILE (docs/ssh.md)
    >>> from_config(["a", "a"], None, None)
    Traceback (most recent call last):
    ...
    launcher.errors.UserError: ssh.hosts=['a', 'a']: each host once (a is given twice)
    """  # noqa: E501
    if hostfile is not None and list(hosts):
        raise UserError("ssh.hostfile", hostfile, "either ssh.hosts or ssh.hostfile, not both", "drop one of them")
    if hostfile is not None:
        found, key, shown = parse_hostfile(hostfile_text or ""), "ssh.hostfile", hostfile
        if not found:
            raise UserError(key, hostfile, "a hostfile naming at least one host ('HOST slots=N' per line)", HINT)
    else:
        found, key, shown = [Host(check_name(h, "ssh.hosts")) for h in hosts], "ssh.hosts", list(hosts)
        if not found:
            raise UserError(
                key,
                "[]",
                "submit=ssh needs the hosts, node 0 first: 'ssh.hosts=[gpu-a,gpu-b]' or ssh.hostfile=FILE",
                "docs/ssh.md",
            )
    seen: set[str] = set()
    for host in found:
        if host.destination in seen:
            raise UserError(key, shown, f"each host once ({host.name} is given twice)")
        seen.add(host.destination)
    return found


def nproc(hosts: Sequence[Host], nproc_per_node: str, key: str = "ssh.hostfile") -> str:
    """``launcher.nproc_per_node`` as the hosts' slots settle it: the slots when given (the same on
    every host; a number given in launcher.nproc_per_node must agree), else as it is.

    >>> nproc([Host("a", 4), Host("b", 4)], "auto"), nproc([Host("a")], "2"), nproc([Host("a", 2)], "2")
    ('4', '2', '2')
    >>> nproc([Host("a", 4), Host("b", 2)], "auto")
    Traceback (most recent call last):
    ...
    launcher.errors.UserError: ssh.hostfile=a slots=4, b slots=2: the same slots on every host (each node runs launcher.nproc_per_node ranks) (docs/ssh.md#the-hostfile)
    >>> nproc([Host("a", 4)], "2")
    Traceback (most recent call last):
    ...
    launcher.errors.UserError: ssh.hostfile=a slots=4: must agree with launcher.nproc_per_node=2 (drop one of them) (docs/ssh.md#the-hostfile)
    """  # noqa: E501
    slots = {h.slots for h in hosts if h.slots is not None}
    if not slots:
        return nproc_per_node
    shown = ", ".join(f"{h.name} slots={h.slots}" if h.slots is not None else h.name for h in hosts)
    if len(slots) > 1 or any(h.slots is None for h in hosts):
        raise UserError(key, shown, "the same slots on every host (each node runs launcher.nproc_per_node ranks)", HINT)
    (count,) = slots
    given = str(nproc_per_node).strip()
    if given.isdigit() and int(given) != count:
        raise UserError(key, shown, f"must agree with launcher.nproc_per_node={given} (drop one of them)", HINT)
    return str(count)
