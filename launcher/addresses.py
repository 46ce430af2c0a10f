"""Parsing ``host:port`` endpoints, IPv6 included. Pure functions.

>>> parse_endpoint("10.0.0.10:29400", "launcher.rdzv_endpoint")
Endpoint(host='10.0.0.10', port=29400)
>>> parse_endpoint("[::1]:29400", "k")
Endpoint(host='::1', port=29400)
>>> parse_endpoint("node0", "launcher.rdzv_endpoint", default_port=29400)
Endpoint(host='node0', port=29400)
>>> parse_endpoint("node0", "launcher.coordinator_address")
Traceback (most recent call last):
...
launcher.errors.UserError: launcher.coordinator_address=node0: expected host:port, the port is missing (e.g. node0:29400; IPv6 as [::1]:29400)
>>> parse_endpoint("::1:29400", "k")
Traceback (most recent call last):
...
launcher.errors.UserError: k=::1:29400: expected host:port, write an IPv6 host in brackets: [::1]:29400
"""  # noqa: E501

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from .errors import UserError

PORT_RANGE = "a port is an integer in 1..65535"


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def check_port(port: int, key: str) -> int:
    if not 1 <= port <= 65535:
        raise UserError(key, port, PORT_RANGE)
    return port


def _parse_port(text: str, key: str, value: str) -> int:
    if not (text.isascii() and text.isdigit()):
        raise UserError(key, value, f"the port {text!r} is not a number; {PORT_RANGE}")
    port = int(text)
    if not 1 <= port <= 65535:
        raise UserError(key, value, PORT_RANGE)
    return port


def parse_endpoint(value: str, key: str, default_port: int | None = None) -> Endpoint:
    """Split ``host:port``; IPv6 hosts must be bracketed. Without a port, ``default_port`` is used
    when given (torchrun's c10d endpoint defaults to 29400), otherwise it is an error."""
    text = value.strip()
    if not text:
        raise UserError(key, repr(value), "expected host:port")
    if text.startswith("["):
        close = text.find("]")
        if close < 0:
            raise UserError(key, value, "expected [IPv6]:port, the ']' is missing")
        host, rest = text[1:close], text[close + 1 :]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise UserError(key, value, f"{host!r} in brackets is not an IPv6 address") from None
        if not rest:
            port_text = None
        elif rest.startswith(":"):
            port_text = rest[1:]
        else:
            raise UserError(key, value, "expected [IPv6]:port")
    elif text.count(":") > 1:
        raise UserError(key, value, "expected host:port, write an IPv6 host in brackets: [::1]:29400")
    elif ":" in text:
        host, port_text = text.split(":")
    else:
        host, port_text = text, None
    if not host:
        raise UserError(key, value, "expected host:port, the host is missing")
    if port_text is None:
        if default_port is None:
            example = f"[{host}]:29400" if ":" in host else f"{host}:29400"
            raise UserError(
                key, value, f"expected host:port, the port is missing (e.g. {example}; IPv6 as [::1]:29400)"
            )
        return Endpoint(host, default_port)
    return Endpoint(host, _parse_port(port_text, key, value))


LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"}


def is_loopback(host: str) -> bool:
    """True for names and addresses that always mean "this machine".

    >>> [is_loopback(h) for h in ("127.0.0.1", "::1", "localhost", "10.0.0.1", "node0")]
    [True, True, True, False, False]
    """
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
