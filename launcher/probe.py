"""Everything that looks at this machine before a launch: the facts the plan needs (read once and
passed in; the plan reads nothing), and the checks only the machine can answer (the script exists,
node 0's ports are free, an address is this host's). Each such check hands its refusal to
``refuse`` (checks.Refuse): a real launch raises it, a dry run prints it as a warning after the plan.

GPUs are counted without importing torch: ``CUDA_VISIBLE_DEVICES`` when set, else ``nvidia-smi -L``,
else the driver's ``/proc/driver/nvidia/gpus``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path

from . import cgroups, checks, cpu_topology, paths
from .addresses import Endpoint, is_loopback
from .config.schema import Topology, TrainConfig
from .errors import UserError
from .facts import MASTER_DEFAULT_PORT, NODE_PORT_DEFAULT, Facing, HostFacts, Settled


def count_visible_devices(value: str) -> int:
    """Devices CUDA would see for a ``CUDA_VISIBLE_DEVICES`` value (it stops at the first invalid one).

    >>> [count_visible_devices(v) for v in ("", "0,1,2", "1", "-1", "0,-1,2", "GPU-5a3c,GPU-77ff")]
    [0, 3, 1, 0, 1, 2]
    """
    count = 0
    for item in value.split(","):
        item = item.strip()
        if not item or item.startswith("-"):
            break
        if not (item.isdigit() or item.startswith(("GPU-", "MIG-"))):
            break
        count += 1
    return count


def count_gpus(env: Mapping[str, str]) -> tuple[int, str]:
    if "CUDA_VISIBLE_DEVICES" in env:
        value = env["CUDA_VISIBLE_DEVICES"]
        return count_visible_devices(value), f"CUDA_VISIBLE_DEVICES={value!r}"
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=15).stdout
            return sum(line.startswith("GPU ") for line in out.splitlines()), "nvidia-smi -L"
        except (OSError, subprocess.SubprocessError):
            pass
    driver = Path("/proc/driver/nvidia/gpus")
    if driver.is_dir():
        return len(list(driver.iterdir())), str(driver)
    return 0, "no CUDA_VISIBLE_DEVICES, nvidia-smi or NVIDIA driver found"


def usable_cpus() -> int:
    return len(cpu_topology.affinity())


# kernel file systems a run directory or a profile cannot live on
VIRTUAL_FILE_SYSTEMS = frozenset(
    (
        "proc",
        "sysfs",
        "devpts",
        "cgroup",
        "cgroup2",
        "debugfs",
        "tracefs",
        "securityfs",
        "configfs",
        "pstore",
        "bpf",
        "mqueue",
        "fusectl",
        "binfmt_misc",
        "efivarfs",
        "nsfs",
        "rpc_pipefs",
    )
)


def _mount(path: str) -> tuple[str, str, list[str]]:
    """(mount point, file system type, mount options) of the mount that holds ``path``."""
    best = ("/", "", [])
    for mount in cgroups.mount_table():  # [] where there is none (not Linux): nothing more to tell
        inside = path == mount.point or path.startswith(mount.point.rstrip("/") + "/")
        if inside and len(mount.point) >= len(best[0]):
            best = (mount.point, mount.fstype, mount.options)
    return best


def unwritable_dir(path: str) -> str | None:
    """Why no directory can be created (or written) at ``path``, told without writing anything;
    None when nothing stands in the way. For checks that run before anything is created.

    >>> unwritable_dir("/proc/x")
    '/proc is on the proc file system (made by the kernel, not a place for files)'
    >>> unwritable_dir("/proc/self/status/sub")
    '/proc/self/status is not a directory'
    """
    if "\x00" in path:
        return "the path contains a NUL character"
    if not path.strip():
        return "an empty path"
    target = os.path.abspath(os.path.expanduser(path))
    for part in target.split(os.sep):
        if len(part.encode(errors="surrogateescape")) > 255:
            return f"the name {part[:20]}... is longer than 255 bytes"
    probe = target
    while not os.path.lexists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        return f"{probe} is not a directory"
    point, kind, options = _mount(os.path.realpath(probe))
    if kind in VIRTUAL_FILE_SYSTEMS:
        return f"{probe} is on the {kind} file system (made by the kernel, not a place for files)"
    if "ro" in options:
        return f"{probe} is on a read-only file system ({point})"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"no permission to write in {probe}"
    return None


def gather(env: Mapping[str, str] | None = None) -> HostFacts:
    env = dict(os.environ if env is None else env)
    gpus, source = count_gpus(env)
    return HostFacts(
        python=sys.executable,
        visible_gpus=gpus,
        gpus_source=source,
        usable_cpus=usable_cpus(),
        examples_dir=str(paths.examples_dir()),
        env=env,
        cpus=cpu_topology.allowed(),
        cwd=os.getcwd(),
        home=os.path.expanduser("~"),
    )


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on right now (the kernel's choice)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def free_port_pair(host: str = "127.0.0.1", pick: Callable[[str], int] = free_port) -> int:
    """A free port whose next port is free too: a rendezvous whose nodes' liveness channel takes the
    next one (launcher.node_port unset). Raises RuntimeError when 64 picks found none."""
    for _ in range(64):
        port = pick(host)
        if port < 65535 and not port_in_use(port) and not port_in_use(port + 1):
            return port
    raise RuntimeError(f"no free pair of ports found on {host}")


def port_in_use(port: int) -> bool:
    """True when binding ``port`` on all interfaces fails, as a rendezvous store's bind would."""
    for family, addr in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        try:
            with socket.socket(family, socket.SOCK_STREAM) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind((addr, port))
        except OSError as err:
            if err.errno == 98:  # EADDRINUSE
                return True
            # the address family is unavailable here: nothing can be listening on it
    return False


def is_local_address(host: str) -> bool:
    """True when ``host`` names this machine (loopback, or an address of one of its interfaces)."""
    try:
        infos = socket.getaddrinfo(host, None)
    except (OSError, UnicodeError):  # UnicodeError: not a valid host name (IDNA)
        return False
    for family, _, _, _, sockaddr in infos:
        try:
            with socket.socket(family, socket.SOCK_DGRAM) as sock:
                sock.bind((sockaddr[0], 0))
            return True
        except OSError:
            continue
    return False


def interface_names() -> list[str]:
    """This machine's network interfaces (empty when they cannot be listed)."""
    try:
        return [name for _, name in socket.if_nameindex()]
    except OSError:
        return []


def interface_ipv4(name: str) -> str | None:
    """The IPv4 address of interface ``name``, or None (no such interface, or no IPv4 address)."""
    import fcntl
    import struct

    SIOCGIFADDR = 0x8915
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            packed = fcntl.ioctl(sock.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
        return socket.inet_ntoa(packed[20:24])
    except OSError:
        return None


def hostname_addresses() -> tuple[str, list[str]]:
    """This machine's host name and the addresses it resolves to here."""
    name = socket.gethostname()
    try:
        addresses = sorted({info[4][0] for info in socket.getaddrinfo(name, None)})
    except OSError:
        addresses = []
    return name, addresses


RESOLVE_TIMEOUT_S = 5.0


class ResolveError(Exception):
    """A host name that does not resolve here (the resolver's reason), or got no answer in time."""


def resolve(name: str, timeout: float = RESOLVE_TIMEOUT_S) -> list[str]:
    """The addresses ``name`` resolves to here, waiting at most ``timeout`` seconds for the resolver
    (getaddrinfo has no timeout of its own: it runs in a daemon thread that is left behind if slow).
    Raises :class:`ResolveError`."""
    found: dict[str, object] = {}

    def lookup() -> None:
        try:
            found["addresses"] = sorted(
                {info[4][0] for info in socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)}
            )
        except (OSError, UnicodeError) as err:
            found["error"] = err

    worker = threading.Thread(target=lookup, name=f"resolve {name}", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        raise ResolveError(f"no answer from the resolver within {timeout:g} s")
    if "error" in found:
        err = found["error"]
        raise ResolveError(getattr(err, "strerror", None) or str(err))
    return found["addresses"]  # type: ignore[return-value]


def tcp_answers(url: str, timeout: float) -> str | None:
    """None when ``url``'s host accepts a TCP connection, else why not: a server's bounded probe
    (W&B's, tracker.wandb.mode=auto). The name resolved within ``timeout`` (:func:`resolve`: a host
    without the network may wait long on its resolver), then each address tried in the rest of it."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return f"no port in {url}"
    deadline = time.monotonic() + timeout
    try:
        addresses = resolve(parts.hostname or "", timeout)
    except ResolveError as err:
        return str(err)
    why = f"no address for {parts.hostname}"
    for address in addresses:
        left = deadline - time.monotonic()
        if left <= 0:
            return f"no answer within {timeout:g} s"
        try:
            with socket.create_connection((address, port), timeout=left):
                return None
        except OSError as err:
            why = err.strerror or str(err) or type(err).__name__
    return why


def source_address(name: str, port: int) -> str | None:
    """The local address this machine sends from to reach ``name:port``, or None (no route, no such
    host). A UDP socket "connected" to it asks the kernel's routing table; no packet is sent."""
    try:
        infos = socket.getaddrinfo(name, port, type=socket.SOCK_DGRAM)
    except (OSError, UnicodeError):
        return None
    for family, kind, proto, _, sockaddr in infos:
        try:
            with socket.socket(family, kind, proto) as sock:
                sock.connect(sockaddr)
                return sock.getsockname()[0]
        except OSError:
            continue
    return None


def _ipv6_addresses() -> dict[str, str]:
    """IPv6 address -> interface name, from /proc/net/if_inet6 (empty when IPv6 is off)."""
    import ipaddress

    found: dict[str, str] = {}
    try:
        with open("/proc/net/if_inet6") as table:
            for line in table:
                fields = line.split()
                if len(fields) == 6:
                    found[str(ipaddress.IPv6Address(bytes.fromhex(fields[0])))] = fields[5]
    except (OSError, ValueError):
        pass
    return found


def interface_of(address: str) -> str | None:
    """The network interface that holds ``address`` on this machine, or None."""
    if ":" in address:
        return _ipv6_addresses().get(address.split("%")[0])
    for name in interface_names():
        if interface_ipv4(name) == address:
            return name
    return None


# -- the checks that look at the machine (after checks.validate, before plan.build) --------------


def script_exists(cfg: TrainConfig, script: str, before_submit: bool = False) -> None:
    """The training script is a file on this machine (``before_submit``: checked for a SLURM job). A
    launch in a container image (``settled.container``) checks it inside the image instead, on the
    node, before any rank starts (launcher/container_probe.py): its callers skip this then."""
    if not os.path.isfile(script):
        key = "script" if cfg.script else "profile.script_root"
        if before_submit:
            raise UserError(key, script, "the training script does not exist (checked on this node before submitting)")
        raise UserError(key, script, "the training script does not exist", f"profile={cfg.profile.name}")


def _node0(cfg: TrainConfig, settled: Settled) -> tuple[str, Endpoint] | None:
    """What the nodes meet at: (description, endpoint) of the c10d endpoint, the static master or
    the JAX coordinator; None on one node."""
    if settled.max_nodes < 2:
        return None
    if settled.rdzv_endpoint is not None:
        return "the rendezvous endpoint", settled.rdzv_endpoint
    if settled.coordinator is not None:
        return "the JAX coordinator", settled.coordinator
    if cfg.launcher.master_addr is not None:
        return "the master", Endpoint(cfg.launcher.master_addr, cfg.launcher.master_port or MASTER_DEFAULT_PORT)
    return None


def _resolvable(cfg: TrainConfig, settled: Settled, refuse: checks.Refuse) -> set[str]:
    """Every host name the launch connects to resolves here, in bounded time (RESOLVE_TIMEOUT_S):
    torch would otherwise fail minutes later with a traceback. Returns the names that do not."""
    launcher = cfg.launcher
    given = (
        ("rdzv_endpoint", settled.rdzv_endpoint.host if settled.rdzv_endpoint else None, launcher.rdzv_endpoint),
        ("master_addr", launcher.master_addr, launcher.master_addr),
        (
            "coordinator_address",
            settled.coordinator.host if settled.coordinator else None,
            launcher.coordinator_address,
        ),
    )
    unresolved: set[str] = set()
    for name, host_name, value in given:
        if host_name is None:
            continue
        try:
            resolve(host_name)
        except ResolveError as err:
            unresolved.add(host_name)
            refuse(
                UserError(
                    _key(name),
                    value if value is not None else host_name,
                    f"the host {host_name!r} does not resolve on this machine ({err})",
                    "give node 0's address, or a host name every node resolves (/etc/hosts or DNS)",
                )
            )
    return unresolved


def _facing(cfg: TrainConfig, settled: Settled) -> Facing | None:
    """The non-loopback interface this machine would use to reach node 0 (None: loopback, no route,
    or an address no interface holds)."""
    found = _node0(cfg, settled)
    if found is None:
        return None
    what, endpoint = found
    address = source_address(endpoint.host, endpoint.port)
    if address is None or is_loopback(address):
        return None
    interface = interface_of(address)
    if interface is None:
        return None
    return Facing(interface, address, f"{what} {endpoint}")


def own_name_resolves() -> bool:
    """Whether this machine's own host name resolves here (a fresh node's /etc/hosts may lack it)."""
    try:
        return bool(resolve(socket.gethostname()))
    except ResolveError:
        return False


def locate(cfg: TrainConfig, settled: Settled, refuse: checks.Refuse = checks.refuse_now) -> Settled:
    """What only this machine can say about the addresses of a multi-node launch: that its host
    names resolve, the interface facing node 0 (when launcher.network_interface is unset), whether
    it holds the c10d endpoint (then node 0 hosts the rendezvous store: is_host), whether its own
    host name resolves (where it does not hold the endpoint: torch's is_host guess needs it), and
    the address advertised as --local_addr when none is given (launcher.network_interface's, else
    the facing interface's). A name that does not resolve is refused; a dry run goes on without
    what it would have told."""
    launcher = cfg.launcher
    unresolved = _resolvable(cfg, settled, refuse)
    node0 = _node0(cfg, settled)
    if launcher.network_interface is None and not (node0 is not None and node0[1].host in unresolved):
        settled = replace(settled, facing=_facing(cfg, settled))
    if launcher.network_interface is not None:
        present = interface_names()
        for name in str(launcher.network_interface).split(","):
            if present and name not in present:
                refuse(
                    UserError(
                        _key("network_interface"),
                        launcher.network_interface,
                        f"no network interface {name} on this host",
                        f"available: {', '.join(present)}",
                    )
                )
    if settled.max_nodes < 2 or settled.rdzv_backend != "c10d":
        return settled
    local_addr = settled.local_addr
    if local_addr is None and launcher.network_interface is not None:
        local_addr = interface_ipv4(str(launcher.network_interface).split(",")[0])
    elif local_addr is None and settled.facing is not None:
        local_addr = settled.facing.address
    endpoint = settled.rdzv_endpoint
    if endpoint is None or endpoint.host in unresolved:  # unknown: torch's own guess (nothing emitted)
        return replace(settled, local_addr=local_addr)
    here = is_loopback(endpoint.host) or is_local_address(endpoint.host)
    own = None if here else own_name_resolves()
    return replace(settled, local_addr=local_addr, endpoint_here=here, own_name_resolves=own)


def _bound_here(host_name: str, node_rank: int) -> bool:
    return node_rank == 0 and (is_loopback(host_name) or is_local_address(host_name))


def _port_taken(key: str, value: object, port: int) -> UserError:
    return UserError(
        key,
        value,
        f"port {port} is already in use on this host",
        "choose a free port, or stop what holds it; ss -ltnp names it",
    )


def port_taken_at_launch(cfg: TrainConfig, settled: Settled, port: int) -> UserError:
    """The preflight message for a port that was free at the check but taken when torchrun (or JAX's
    coordinator) bound it (another launch started at the same time): the key that chose the port,
    as the user wrote it."""
    launcher = cfg.launcher
    if settled.coordinator is not None and settled.coordinator.port == port:
        return _port_taken(_key("coordinator_address"), launcher.coordinator_address or str(settled.coordinator), port)
    if settled.rdzv_endpoint is not None and settled.rdzv_endpoint.port == port:
        return _port_taken(_key("rdzv_endpoint"), launcher.rdzv_endpoint or str(settled.rdzv_endpoint), port)
    if launcher.master_port is None and port == MASTER_DEFAULT_PORT:
        return _port_taken(_key("master_port"), f"{MASTER_DEFAULT_PORT} (torchrun's default)", port)
    return _port_taken(_key("master_port"), launcher.master_port if launcher.master_port is not None else port, port)


def preflight(cfg: TrainConfig, settled: Settled, refuse: checks.Refuse = checks.refuse_now) -> None:
    """Checks that look at the machine: the run directory can be made, the interpreter and the
    script exist, node 0's ports are free. Nothing is created before they all pass."""
    key, where = ("run_dir", cfg.run_dir) if cfg.run_dir is not None else ("run_root", cfg.run_root)
    problem = unwritable_dir(str(where))
    if problem is not None:
        refuse(
            UserError(
                key,
                where,
                f"cannot hold run directories: {problem}",
                "choose a directory you can write, e.g. run_root=runs",
            )
        )
    # in a container image the interpreter and the script are the image's: launcher/container_probe.py
    # checks them inside it, before any rank starts
    if settled.container is None and cfg.python is not None and shutil.which(cfg.python) is None:
        missing = UserError(
            "python",
            cfg.python,
            "no such interpreter: not an executable file, nor a command on PATH",
            "set python= to an interpreter that exists, or leave it unset",
        )
        if not cfg.python.strip():  # no host has it: a mistake in the config, an error in a dry run too
            raise missing
        refuse(missing)
    try:
        if settled.container is None:
            script_exists(cfg, settled.script)
    except UserError as err:
        refuse(err)
    launcher = cfg.launcher
    # (key, value as the user wrote it, port): the ports node 0 binds, checked where they are bound
    ports: list[tuple[str, object, int]] = []
    static = launcher.master_port is not None or (launcher.master_addr is not None and settled.rdzv_endpoint is None)
    if static and (launcher.master_addr is None or _bound_here(launcher.master_addr, launcher.node_rank)):
        if launcher.master_port is not None:
            ports.append(("launcher.master_port", launcher.master_port, launcher.master_port))
        else:
            ports.append(
                (
                    "launcher.master_port",
                    f"{MASTER_DEFAULT_PORT} (torchrun's default)",
                    MASTER_DEFAULT_PORT,
                )
            )
    if settled.rdzv_endpoint is not None and _bound_here(settled.rdzv_endpoint.host, launcher.node_rank):
        ports.append(("launcher.rdzv_endpoint", launcher.rdzv_endpoint, settled.rdzv_endpoint.port))
    if settled.coordinator is not None and _bound_here(settled.coordinator.host, launcher.node_rank):
        value = launcher.coordinator_address or str(settled.coordinator)
        ports.append(("launcher.coordinator_address", value, settled.coordinator.port))
    if settled.node_hub is not None and launcher.node_rank == 0:  # node 0's launcher listens (run/monitor/liveness.py)
        node_port = settled.node_hub.port
        given = launcher.node_port if launcher.node_port is not None else f"{node_port} ({NODE_PORT_DEFAULT})"
        ports.append(("launcher.node_port", given, node_port))
    for key, value, port in ports:
        if port_in_use(port):
            refuse(_port_taken(key, value, port))
    if launcher.local_addr is not None and settled.max_nodes > 1 and not is_local_address(launcher.local_addr):
        refuse(
            UserError(
                _key("local_addr"),
                launcher.local_addr,
                "not an address of this host",
                "it tells the other nodes where to reach this one: give this node's own address",
            )
        )
    if (
        cfg.launcher.topology is Topology.skrl_jax
        and settled.device == "cpu"
        and settled.max_nodes > 1
        and not launcher.local_nodes
        and settled.coordinator is not None
        and not is_loopback(settled.coordinator.host)
    ):
        name, addresses = hostname_addresses()
        if addresses and all(is_loopback(a) for a in addresses):
            refuse(
                UserError(
                    _key("coordinator_address"),
                    str(settled.coordinator),
                    f"this host's name {name!r} resolves to {addresses[0]}, so JAX's CPU (gloo) collectives "
                    "would offer the other nodes a loopback address",
                    f"make {name!r} resolve to this node's own address (/etc/hosts or DNS); see docs/multinode.md",
                )
            )
        elif not addresses:  # gloo resolves it to find this node's address: RuntimeError "device.cc:99 rv == 0"
            refuse(
                UserError(
                    _key("coordinator_address"),
                    str(settled.coordinator),
                    f"this host's name {name!r} does not resolve here, and JAX's CPU (gloo) collectives resolve it "
                    "to find this node's address (every rank would fail in gloo's device.cc)",
                    f"add {name!r} with this node's own address to /etc/hosts (or DNS); see docs/multinode.md",
                )
            )


def _key(name: str) -> str:
    return f"launcher.{name}"
