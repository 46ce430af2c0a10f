"""What this machine's CPUs look like, read from sysfs, and which of them the launcher may use.

A leaf (standard library only): :mod:`launcher.cpu_placement` reads a :class:`Machine` once before a
launch (:func:`read`, any sysfs root: tests write trees of real machine shapes into a folder),
:mod:`launcher.probe` the CPUs this process may run on (:func:`allowed`); :mod:`launcher.cpu_binding`
turns them into each local rank's CPU list, purely.

What is read (the files the kernel writes; a file that is missing means "nothing to tell"):

- ``devices/system/cpu/online`` (else every ``cpuN``), and per CPU
  ``topology/thread_siblings_list`` (its physical core: the SMT siblings), ``topology/physical_package_id``
  (its socket) and ``cache/index*/{level,type,shared_cpu_list}`` (its core complex: the CPUs sharing
  its highest-level data or unified cache, an L3 on AMD's CCXs);
- ``devices/system/node/nodeK/cpulist``: the NUMA nodes (none: one node 0 holding every CPU);
- ``bus/pci/devices/<address>/{vendor,class,numa_node}``: NVIDIA GPUs (vendor 0x10de, class 0x03xxxx),
  in PCI bus order -- nvidia-smi's index order, and CUDA's with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``.
  A ``numa_node`` of -1 (one node) counts as node 0, as torch's ``--numa-binding`` counts it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from . import cgroups

NVIDIA_VENDOR = "0x10de"
DISPLAY_CLASS = "0x03"  # PCI base class 03: display controllers (VGA 0x0300xx, 3D 0x0302xx)
_CPU_DIR = re.compile(r"^cpu(\d+)$")
_NODE_DIR = re.compile(r"^node(\d+)$")
_RANGE = re.compile(r"^(\d+)(?:-(\d+)(?::(\d+))?)?$")


def parse_cpulist(text: str) -> tuple[int, ...]:
    """The kernel's CPU list format (``Cpus_allowed_list``, ``cpulist``, ``taskset -c``), sorted.

    >>> parse_cpulist("0-3,8,10-14:2\\n")
    (0, 1, 2, 3, 8, 10, 12, 14)
    >>> parse_cpulist("")
    ()
    >>> parse_cpulist("3-1")
    Traceback (most recent call last):
    ...
    ValueError: '3-1' is not a CPU or a range of CPUs (like 0-3, 8 or 0-15:2)
    """
    cpus: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        match = _RANGE.match(part)
        if match is None or (match.group(2) is not None and int(match.group(2)) < int(match.group(1))):
            raise ValueError(f"{part!r} is not a CPU or a range of CPUs (like 0-3, 8 or 0-15:2)")
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) is not None else first
        step = int(match.group(3)) if match.group(3) is not None else 1
        if step < 1:
            raise ValueError(f"{part!r} is not a CPU or a range of CPUs (like 0-3, 8 or 0-15:2)")
        cpus.update(range(first, last + 1, step))
    return tuple(sorted(cpus))


def format_cpulist(cpus: Iterable[int]) -> str:
    """The kernel's compact spelling.

    >>> format_cpulist([5, 0, 1, 2, 8, 9])
    '0-2,5,8-9'
    >>> format_cpulist([])
    ''
    """
    ordered = sorted(set(cpus))
    parts: list[str] = []
    start = prev = None
    for cpu in ordered + [None]:
        if prev is not None and cpu == prev + 1:
            prev = cpu
            continue
        if start is not None:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = cpu
    return ",".join(parts)


@dataclass(frozen=True)
class Gpu:
    """An NVIDIA GPU on the PCI bus: its address and NUMA node."""

    address: str
    node: int


@dataclass(frozen=True)
class Machine:
    """The CPU topology: per CPU its physical core (the lowest of its SMT siblings), its socket and
    its core complex (the lowest CPU sharing its last-level cache); the NUMA nodes' CPUs; the GPUs."""

    core: Mapping[int, int]
    package: Mapping[int, int]
    complex: Mapping[int, int]
    nodes: Mapping[int, tuple[int, ...]]
    gpus: tuple[Gpu, ...] = ()
    source: str = "/sys"
    numa: bool = True  # the kernel lists NUMA nodes (torch's --numa-binding needs them)

    @property
    def cpus(self) -> tuple[int, ...]:
        return tuple(sorted(self.core))


@dataclass(frozen=True)
class Allowed:
    """The CPUs this process may use, and what said so (for messages and the dry run)."""

    cpus: tuple[int, ...]
    source: str


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return None


def _list(path: str) -> tuple[int, ...] | None:
    text = _read(path)
    if text is None:
        return None
    try:
        return parse_cpulist(text)
    except ValueError:
        return None


def _int(path: str) -> int | None:
    text = _read(path)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _last_level_cache(cpu_dir: str) -> tuple[int, ...] | None:
    """The CPUs sharing this CPU's highest-level data or unified cache (None: no cache information)."""
    best: tuple[int, tuple[int, ...]] | None = None
    cache = os.path.join(cpu_dir, "cache")
    for entry in sorted(_listdir(cache)):
        if not (entry.startswith("index") and entry[5:].isdigit()):
            continue
        index = os.path.join(cache, entry)
        if _read(os.path.join(index, "type")) not in ("Unified", "Data"):
            continue
        level, shared = _int(os.path.join(index, "level")), _list(os.path.join(index, "shared_cpu_list"))
        if level is not None and shared and (best is None or level > best[0]):
            best = (level, shared)
    return best[1] if best else None


def read(root: str = "/sys") -> Machine:
    """The machine as sysfs under ``root`` describes it (see the module's docstring)."""
    cpu_root = os.path.join(root, "devices", "system", "cpu")
    cpus = _list(os.path.join(cpu_root, "online"))
    if not cpus:
        cpus = tuple(sorted(int(m.group(1)) for m in map(_CPU_DIR.match, _listdir(cpu_root)) if m))
    core, package, complex_ = {}, {}, {}
    for cpu in cpus:
        cpu_dir = os.path.join(cpu_root, f"cpu{cpu}")
        siblings = _list(os.path.join(cpu_dir, "topology", "thread_siblings_list")) or (cpu,)
        core[cpu] = min(siblings)
        package[cpu] = max(0, _int(os.path.join(cpu_dir, "topology", "physical_package_id")) or 0)
        shared = _last_level_cache(cpu_dir)
        complex_[cpu] = min(shared) if shared else -1  # -1: unknown, the whole NUMA node is one
    node_root = os.path.join(root, "devices", "system", "node")
    nodes: dict[int, tuple[int, ...]] = {}
    for match in sorted(filter(None, map(_NODE_DIR.match, _listdir(node_root))), key=lambda m: int(m.group(1))):
        listed = _list(os.path.join(node_root, match.group(0), "cpulist")) or ()
        nodes[int(match.group(1))] = tuple(cpu for cpu in listed if cpu in core)
    numa = bool(nodes)
    if not numa:
        nodes = {0: tuple(cpus)}
    pci = os.path.join(root, "bus", "pci", "devices")
    gpus = []
    for address in sorted(_listdir(pci)):
        device = os.path.join(pci, address)
        kind = _read(os.path.join(device, "class")) or ""
        if _read(os.path.join(device, "vendor")) == NVIDIA_VENDOR and kind.startswith(DISPLAY_CLASS):
            node = _int(os.path.join(device, "numa_node"))
            gpus.append(Gpu(address, max(0, node if node is not None else 0)))
    return Machine(core, package, complex_, nodes, tuple(gpus), root, numa)


# -- the CPUs this process may use ------------------------------------------------------------------


def _cgroup_cpuset(proc: str) -> tuple[tuple[int, ...], str] | None:
    """This process's cgroup cpuset (v2 ``cpuset.cpus.effective``, v1 ``cpuset.effective_cpus``):
    what a container's ``--cpuset-cpus``, SLURM's task/cgroup or systemd's AllowedCPUs leave it, in
    the cgroup launcher/cgroups.py finds (``<proc>/self/cgroup`` and its mounts). None: no cpuset
    found (the affinity mask then says it all)."""
    self_dir = os.path.join(proc, "self")
    for directory in cgroups.dirs("cpuset", os.path.join(self_dir, "cgroup"), os.path.join(self_dir, "mountinfo")):
        for name in ("cpuset.cpus.effective", "cpuset.effective_cpus", "cpuset.cpus"):
            cpus = _list(os.path.join(directory, name))
            if cpus:
                return cpus, os.path.join(directory, name)
    return None


def affinity() -> tuple[int, ...]:
    """This process's affinity mask, sorted (``os.sched_getaffinity``; not Linux: every CPU)."""
    try:
        return tuple(sorted(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return tuple(range(os.cpu_count() or 1))


def allowed(mask: Iterable[int] | None = None, proc: str = "/proc") -> Allowed:
    """The CPUs this process may use: its affinity mask (:func:`affinity`: what ``taskset``,
    ``srun --cpu-bind``, a parallel sweep's lane or SLURM's task/affinity left it) within its cgroup's
    cpuset (a container's ``--cpuset-cpus``, SLURM's task/cgroup). The kernel keeps the mask inside
    the cpuset already; both are read so that the dry run says where a short list comes from."""
    mask = affinity() if mask is None else tuple(sorted(mask))
    parts = [f"affinity {format_cpulist(mask)}"]
    cpuset = _cgroup_cpuset(proc)
    cpus = mask
    if cpuset is not None:
        cpus = tuple(cpu for cpu in mask if cpu in set(cpuset[0]))
        parts.append(f"cpuset {format_cpulist(cpuset[0])} ({cpuset[1]})")
    return Allowed(cpus, "; ".join(parts))
