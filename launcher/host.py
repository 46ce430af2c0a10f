"""Facts about this machine that the plan needs, read once and passed in (the plan reads nothing).

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional

from . import paths


@dataclass(frozen=True)
class HostFacts:
    python: str
    visible_gpus: int
    gpus_source: str  # where the count came from, for messages
    usable_cpus: int
    examples_dir: str
    env: Mapping[str, str] = field(default_factory=dict)


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
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


# kernel file systems a run directory or a profile cannot live on
VIRTUAL_FILE_SYSTEMS = frozenset((
    "proc", "sysfs", "devpts", "cgroup", "cgroup2", "debugfs", "tracefs", "securityfs", "configfs",
    "pstore", "bpf", "mqueue", "fusectl", "binfmt_misc", "efivarfs", "nsfs", "rpc_pipefs",
))


def _mount(path: str) -> tuple[str, str, list[str]]:
    """(mount point, file system type, mount options) of the mount that holds ``path``."""
    best = ("/", "", [])
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as mounts:
            for line in mounts:
                left, _, right = line.partition(" - ")
                fields, tail = left.split(), right.split()
                if len(fields) < 6 or not tail:
                    continue
                point = fields[4].replace("\\040", " ").replace("\\011", "\t").replace("\\134", "\\")
                inside = path == point or path.startswith(point.rstrip("/") + "/")
                if inside and len(point) >= len(best[0]):
                    best = (point, tail[0], fields[5].split(","))
    except OSError:  # not Linux: nothing more to tell
        pass
    return best


def unwritable_dir(path: str) -> Optional[str]:
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


def gather(env: Optional[Mapping[str, str]] = None) -> HostFacts:
    env = dict(os.environ if env is None else env)
    gpus, source = count_gpus(env)
    return HostFacts(
        python=sys.executable,
        visible_gpus=gpus,
        gpus_source=source,
        usable_cpus=usable_cpus(),
        examples_dir=str(paths.examples_dir()),
        env=env,
    )


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on right now (the kernel's choice)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


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


def interface_ipv4(name: str) -> Optional[str]:
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
            found["addresses"] = sorted({info[4][0] for info in socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)})
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


def source_address(name: str, port: int) -> Optional[str]:
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


def interface_of(address: str) -> Optional[str]:
    """The network interface that holds ``address`` on this machine, or None."""
    if ":" in address:
        return _ipv6_addresses().get(address.split("%")[0])
    for name in interface_names():
        if interface_ipv4(name) == address:
            return name
    return None
