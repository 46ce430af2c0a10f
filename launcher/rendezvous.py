"""How the nodes of a torchrun launch find each other: the rendezvous options the plan emits, and the
hint printed when a multi-node rendezvous failed. Pure functions (docs/multinode.md,
docs/notes/multinode_facts.md).

- ``join_timeout``: c10d waits ``join_timeout`` (torch: 600 s) for the other nodes, static waits
  ``timeout`` (torchrun: 900 s). The launcher emits one only when ``launcher.join_timeout`` is set:
  otherwise torchrun's own defaults hold, as for a user of bare torchrun or Isaac Lab's launcher.
- ``is_host``: which node hosts c10d's rendezvous store. torch guesses it from the machine's
  hostname, and guesses "nobody" when the hostname resolves to loopback (a common /etc/hosts);
  the launcher states it when the endpoint is an address of this machine.
- A user's ``launcher.rdzv_conf`` is merged with these, never duplicated: a key written there wins.
"""

from __future__ import annotations

import re

from .errors import UserError

# the rdzv_conf key that bounds the wait for the other nodes, per rendezvous backend
TIMEOUT_KEY = {"c10d": "join_timeout", "static": "timeout"}
# torch's own values for that key (c10d: DynamicRendezvousHandler's join timeout; static: the
# timeout torchrun's launcher puts into rdzv_configs), in force when neither the user nor the
# launcher sets one
TORCH_DEFAULT_TIMEOUT = {"c10d": 600, "static": 900}
# rdzv_conf keys torch reads as whole seconds (dynamic_rendezvous, c10d backend, static); checked
# here so that nan, inf or a negative value fails before launch, not in torch's traceback
SECONDS_KEYS = ("join_timeout", "last_call_timeout", "close_timeout", "read_timeout", "timeout", "keep_alive_interval")
MAX_SECONDS = 604800  # a week
_PAIR = re.compile(r"^[A-Za-z_][\w.\-]*=[^,=]*$")


def parse_conf(text: str | None, key: str = "launcher.rdzv_conf") -> dict[str, str]:
    """``k=v,k=v`` as torchrun takes it, in order.

    >>> parse_conf("join_timeout=60,read_timeout=30")
    {'join_timeout': '60', 'read_timeout': '30'}
    >>> parse_conf("join_timeout=nan")
    Traceback (most recent call last):
    ...
    launcher.errors.UserError: launcher.rdzv_conf=join_timeout=nan: join_timeout takes whole seconds in 1..604800 (torch reads it as an integer)
    >>> parse_conf("join_timeout")
    Traceback (most recent call last):
    ...
    launcher.errors.UserError: launcher.rdzv_conf=join_timeout: comma-separated key=value pairs (e.g. join_timeout=300,read_timeout=60)
    """  # noqa: E501
    if text is None or not str(text).strip():
        return {}
    pairs: dict[str, str] = {}
    for item in str(text).split(","):
        item = item.strip()
        if not _PAIR.match(item):
            raise UserError(key, text, "comma-separated key=value pairs (e.g. join_timeout=300,read_timeout=60)")
        name, value = item.split("=", 1)
        if name in pairs:
            raise UserError(key, text, f"{name} is given twice")
        if name in SECONDS_KEYS and not (value.strip().isdigit() and 1 <= int(value) <= MAX_SECONDS):
            raise UserError(key, text, f"{name} takes whole seconds in 1..{MAX_SECONDS} (torch reads it as an integer)")
        pairs[name] = value
    return pairs


def backend(topology_is_torchrun: bool, rdzv_backend: str | None, has_endpoint: bool) -> str | None:
    """The rendezvous backend torchrun will use across nodes (None: not torchrun)."""
    if not topology_is_torchrun:
        return None
    if rdzv_backend is not None:
        return rdzv_backend
    return "c10d" if has_endpoint else "static"


def conf(
    user: dict[str, str],
    rdzv_backend: str | None,
    multi: bool,
    join_timeout: int | None,
    is_host: bool | None,
) -> str | None:
    """The ``--rdzv_conf`` value: the user's pairs, then launcher.join_timeout (when set) and is_host.

    >>> conf({}, "c10d", True, None, True)
    'is_host=1'
    >>> conf({}, "c10d", True, 120, None)
    'join_timeout=120'
    >>> conf({"read_timeout": "30", "join_timeout": "60"}, "c10d", True, None, None)
    'read_timeout=30,join_timeout=60'
    >>> conf({}, "static", True, 20, None)
    'timeout=20'
    >>> conf({}, "c10d", False, None, None) is None
    True
    """
    pairs = dict(user)
    if multi and rdzv_backend in TIMEOUT_KEY and join_timeout is not None:
        pairs.setdefault(TIMEOUT_KEY[rdzv_backend], str(join_timeout))
    if rdzv_backend == "c10d" and is_host is not None:
        pairs.setdefault("is_host", str(int(is_host)))
    return ",".join(f"{k}={v}" for k, v in pairs.items()) or None


def waited_timeout(user: dict[str, str], rdzv_backend: str | None, join_timeout: int | None) -> int | None:
    """Seconds a node waits for the others: the emitted rdzv_conf's value, else torch's default.

    >>> waited_timeout({}, "c10d", None), waited_timeout({}, "static", None), waited_timeout({}, "c10d", 45)
    (600, 900, 45)
    >>> waited_timeout({"timeout": "20"}, "static", None)
    20
    """
    key = TIMEOUT_KEY.get(rdzv_backend or "")
    if key is None:
        return None
    value = user.get(key)
    if value is not None and value.strip().isascii() and value.strip().isdigit():
        return int(value)
    return join_timeout if join_timeout is not None else TORCH_DEFAULT_TIMEOUT[rdzv_backend]


# what torchrun (the agent) prints when the nodes did not all meet
_TIMED_OUT = ("RendezvousTimeoutError", "waiting for clients", "RendezvousClosedError")
_UNREACHABLE = ("RendezvousConnectionError", "The client socket has timed out")


def failure_hint(
    output: str,
    rdzv_backend: str | None,
    endpoint: str,
    nnodes: str,
    node_rank: int,
    rdzv_id: str | None,
    waited: int | None,
    met: bool = False,
) -> str | None:
    """One paragraph for a failed multi-node launch whose torchrun output shows the rendezvous
    failed; None when the output shows no rendezvous failure. ``met``: this node's workers started,
    so the nodes had met (a store that went away as the launch ended is not an unreachable one).

    >>> failure_hint("... RendezvousConnectionError ...", "c10d", "10.0.0.1:29400", "2", 1, None, 30, met=True)
    >>> print(failure_hint("... RendezvousTimeoutError ...", "c10d", "10.0.0.1:29400", "2", 0, None, 30))
    node 0 waited 30 s for 2 nodes at 10.0.0.1:29400 (c10d rendezvous, rdzv_id none) and not all of them joined: check that every node started train_multigpu with the same launcher.rdzv_endpoint, launcher.rdzv_id and launcher.nnodes, that port 29400 of 10.0.0.1 is open to every node (firewall), and raise launcher.join_timeout if nodes start far apart
    """  # noqa: E501
    host, _, port = endpoint.rpartition(":")
    if any(text in output for text in _TIMED_OUT):
        waited_text = f" {waited} s" if waited is not None else ""
        same = (
            "launcher.rdzv_endpoint, launcher.rdzv_id"
            if rdzv_backend == "c10d"
            else "launcher.master_addr, launcher.master_port"
        )
        what = f"{rdzv_backend} rendezvous" + (f", rdzv_id {rdzv_id or 'none'}" if rdzv_backend == "c10d" else "")
        return (
            f"node {node_rank} waited{waited_text} for {nnodes} nodes at {endpoint} ({what}) and not all of them "
            f"joined: check that every node started train_multigpu with the same {same} and launcher.nnodes, "
            f"that port {port} of {host.strip('[]')} is open to every node (firewall), and raise "
            f"launcher.join_timeout if nodes start far apart"
        )
    if not met and any(text in output for text in _UNREACHABLE):
        return (
            f"node {node_rank} could not reach the {rdzv_backend} rendezvous at {endpoint}: check that node 0 "
            f"is running train_multigpu, that {host.strip('[]')} is node 0's address as seen from this node, and "
            f"that port {port} is open (firewall)"
        )
    return None
