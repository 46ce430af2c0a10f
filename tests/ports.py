"""Free TCP ports for the tests' launches on this host.

A port found by binding port 0 lies in the kernel's ephemeral range, where an outgoing connection of
any concurrent process (a JAX client, a Ray worker, a rendezvous client) may take it, or the port
next to it, before the launch binds it: CI once saw node 0 of a two-node launch refuse its liveness
port (the rendezvous port + 1) because something had connected from it in between. These ports are
drawn below the ephemeral range, above the ports a Ray raylet gives its workers (10002..19999 by
default; tests/ray_cluster.py's nodes take theirs from here), and checked the way the launcher's
preflight checks them.
"""

from __future__ import annotations

import random
from pathlib import Path

from launcher.probe import port_in_use

LOWEST = 20000  # Ray's default worker ports end at 19999


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port(span: int = 1) -> int:
    """A port ``p`` with ``p .. p+span-1`` all free on every interface (``span=2`` for a rendezvous
    port whose liveness channel takes the next one), below the ephemeral range.

    >>> port = free_port(2)
    >>> LOWEST <= port < _ephemeral_low() and not port_in_use(port + 1)
    True
    """
    return free_ports(1, span)[0]


def free_ports(count: int, span: int = 1) -> list[int]:
    """``count`` such ports at once, their spans pairwise apart: ports drawn one by one may coincide
    (a port is free until someone binds it), and a Ray node given the same port twice fails to start.

    >>> ports = free_ports(15)
    >>> len(set(ports)) == 15 and all(LOWEST <= p < _ephemeral_low() for p in ports)
    True
    """
    top = min(_ephemeral_low(), 32768) - span
    taken: set[int] = set()
    chosen: list[int] = []
    for _ in range(200 * count):
        base = random.randrange(LOWEST, top)
        span_ports = range(base, base + span)
        if taken.intersection(span_ports) or any(port_in_use(port) for port in span_ports):
            continue
        chosen.append(base)
        taken.update(span_ports)
        if len(chosen) == count:
            return chosen
    raise RuntimeError(f"no {count} sets of {span} free consecutive ports in {LOWEST}..{top}")
