"""Everything that looks at this machine before a launch: the facts the plan needs (read once and
passed in; the plan reads nothing), and the checks only the machine can answer (the script exists,
node 0's ports are free, an address is this host's).

GPUs are counted without importing torch: ``CUDA_VISIBLE_DEVICES`` when set, else ``nvidia-smi -L``,
else the driver's ``/proc/driver/nvidia/gpus``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Mapping, Optional

from . import checks, paths
from .addresses import is_loopback
from .config.schema import Topology, TrainConfig
from .errors import UserError


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
    except OSError:
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


# -- the checks that look at the machine (after checks.validate, before plan.build) --------------


def script_exists(cfg: TrainConfig, script: str, before_submit: bool = False) -> None:
    """The training script is a file on this machine (``before_submit``: checked for a SLURM job)."""
    if not os.path.isfile(script):
        key = "script" if cfg.script else "profile.script_root"
        if before_submit:
            raise UserError(key, script, "the training script does not exist (checked on this node before submitting)")
        raise UserError(key, script, "the training script does not exist", f"profile={cfg.profile.name}")


def locate(cfg: TrainConfig, settled: checks.Settled) -> checks.Settled:
    """What only this machine can say about the addresses of a multi-node launch: whether it holds the
    c10d endpoint (then node 0 hosts the rendezvous store: is_host), and the address of
    launcher.network_interface (advertised as --local_addr when none is given)."""
    launcher = cfg.launcher
    if launcher.network_interface is not None:
        present = interface_names()
        for name in str(launcher.network_interface).split(","):
            if present and name not in present:
                raise UserError(
                    "launcher.network_interface", launcher.network_interface,
                    f"no network interface {name} on this host", f"available: {', '.join(present)}",
                )
    if settled.max_nodes < 2 or settled.rdzv_backend != "c10d":
        return settled
    local_addr = settled.local_addr
    if local_addr is None and launcher.network_interface is not None:
        local_addr = interface_ipv4(str(launcher.network_interface).split(",")[0])
    here = settled.rdzv_endpoint is not None and (
        is_loopback(settled.rdzv_endpoint.host) or is_local_address(settled.rdzv_endpoint.host)
    )
    return replace(settled, local_addr=local_addr, endpoint_here=here)


def _bound_here(host_name: str, node_rank: int) -> bool:
    return node_rank == 0 and (is_loopback(host_name) or is_local_address(host_name))


def preflight(cfg: TrainConfig, settled: checks.Settled) -> None:
    """Checks that look at the machine: the script exists and node 0's ports are free."""
    script_exists(cfg, settled.script)
    launcher = cfg.launcher
    # (key, value as the user wrote it, port): the ports node 0 binds, checked where they are bound
    ports: list[tuple[str, object, int]] = []
    static = launcher.master_port is not None or (launcher.master_addr is not None and settled.rdzv_endpoint is None)
    if static and (
        launcher.master_addr is None or _bound_here(launcher.master_addr, launcher.node_rank)
    ):
        if launcher.master_port is not None:
            ports.append(("launcher.master_port", launcher.master_port, launcher.master_port))
        else:
            ports.append(("launcher.master_port", f"{checks.MASTER_DEFAULT_PORT} (torchrun's default)", checks.MASTER_DEFAULT_PORT))
    if settled.rdzv_endpoint is not None and _bound_here(settled.rdzv_endpoint.host, launcher.node_rank):
        ports.append(("launcher.rdzv_endpoint", launcher.rdzv_endpoint, settled.rdzv_endpoint.port))
    if settled.coordinator is not None and _bound_here(settled.coordinator.host, launcher.node_rank):
        value = launcher.coordinator_address or str(settled.coordinator)
        ports.append(("launcher.coordinator_address", value, settled.coordinator.port))
    for key, value, port in ports:
        if port_in_use(port):
            raise UserError(
                key, value, f"port {port} is already in use on this host",
                "choose a free port, or stop what holds it; ss -ltnp names it",
            )
    if launcher.local_addr is not None and settled.max_nodes > 1 and not is_local_address(launcher.local_addr):
        raise UserError(
            "launcher.local_addr", launcher.local_addr, "not an address of this host",
            "it tells the other nodes where to reach this one: give this node's own address",
        )
    if (
        cfg.launcher.topology is Topology.skrl_jax and settled.device == "cpu" and settled.max_nodes > 1
        and not launcher.local_nodes and settled.coordinator is not None and not is_loopback(settled.coordinator.host)
    ):
        name, addresses = hostname_addresses()
        if addresses and all(is_loopback(a) for a in addresses):
            raise UserError(
                "launcher.coordinator_address", str(settled.coordinator),
                f"this host's name {name!r} resolves to {addresses[0]}, so JAX's CPU (gloo) collectives would "
                "offer the other nodes a loopback address",
                f"make {name!r} resolve to this node's own address (/etc/hosts or DNS); see docs/multinode.md",
            )
