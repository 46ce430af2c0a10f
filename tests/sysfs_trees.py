"""sysfs trees of real machine shapes, written into a folder for launcher/cpu_topology.py to read:
sockets of cores with SMT siblings (Linux numbers the second thread of every core after all first
threads), NUMA nodes per socket, last-level caches per socket or per core complex (AMD's CCX), and
NVIDIA GPUs on the PCI bus with their numa_node (among a NIC and an NVSwitch bridge, which are not
GPUs)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from launcher.cpu_topology import format_cpulist


@dataclass(frozen=True)
class Shape:
    sockets: int
    cores_per_socket: int
    smt: int = 2
    nodes_per_socket: int = 1
    ccx_cores: int | None = None  # cores sharing an L3; None: the socket's
    gpu_nodes: tuple[int, ...] = ()  # each GPU's numa_node file, in PCI order (-1: no NUMA)
    numa: bool = True  # False: no devices/system/node (a kernel without NUMA)

    @property
    def cores(self) -> int:
        return self.sockets * self.cores_per_socket

    def cpus_of_core(self, core: int) -> list[int]:
        return [core + thread * self.cores for thread in range(self.smt)]


# NVIDIA DGX H100: 2 x 56-core Xeon 8480C, HT, one NUMA node per socket, 4 GPUs on each
DGX_H100 = Shape(2, 56, 2, 1, None, (0, 0, 0, 0, 1, 1, 1, 1))
# 2 x 64-core EPYC (NPS2: 4 NUMA nodes), 8-core CCXs, SMT, 2 GPUs per NUMA node
EPYC_NPS2 = Shape(2, 64, 2, 2, 8, (0, 0, 1, 1, 2, 2, 3, 3))
# a CPU-only two-socket host: 2 x 8 cores, HT
CPU_HOST = Shape(2, 8, 2)
# one socket, no NUMA in the kernel: numa_node -1 on the GPUs
FLAT = Shape(1, 4, 1, gpu_nodes=(-1, -1), numa=False)


def _put(path: str, text: str) -> None:
    with open(path, "w") as handle:
        handle.write(text + "\n")


def write(root: Path, shape: Shape) -> Path:
    """The tree (plain os calls: a 256-CPU machine is some 4,000 files)."""
    cpu_root = os.path.join(root, "devices", "system", "cpu")
    os.makedirs(cpu_root)
    total = shape.cores * shape.smt
    _put(os.path.join(cpu_root, "online"), f"0-{total - 1}")
    _put(os.path.join(cpu_root, "possible"), f"0-{total - 1}")
    ccx = shape.ccx_cores or shape.cores_per_socket
    for core in range(shape.cores):
        socket = core // shape.cores_per_socket
        first = core - core % ccx
        siblings = format_cpulist(shape.cpus_of_core(core))
        complex_cpus = format_cpulist([cpu for c in range(first, first + ccx) for cpu in shape.cpus_of_core(c)])
        caches = (
            ("Data", 1, siblings),
            ("Instruction", 1, siblings),
            ("Unified", 2, siblings),
            ("Unified", 3, complex_cpus),
        )
        for cpu in shape.cpus_of_core(core):
            topo = os.path.join(cpu_root, f"cpu{cpu}", "topology")
            os.makedirs(topo)
            _put(os.path.join(topo, "thread_siblings_list"), siblings)
            _put(os.path.join(topo, "physical_package_id"), str(socket))
            _put(os.path.join(topo, "core_id"), str(core % shape.cores_per_socket))
            for index, (kind, level, shared) in enumerate(caches):
                cache = os.path.join(cpu_root, f"cpu{cpu}", "cache", f"index{index}")
                os.makedirs(cache)
                _put(os.path.join(cache, "type"), kind)
                _put(os.path.join(cache, "level"), str(level))
                _put(os.path.join(cache, "shared_cpu_list"), shared)
    if shape.numa:
        per_node = shape.cores_per_socket // shape.nodes_per_socket
        nodes = shape.sockets * shape.nodes_per_socket
        node_root = os.path.join(root, "devices", "system", "node")
        os.makedirs(node_root)
        for name in ("possible", "online", "has_cpu"):
            _put(os.path.join(node_root, name), f"0-{nodes - 1}")
        for node in range(nodes):
            cpus = [cpu for core in range(node * per_node, (node + 1) * per_node) for cpu in shape.cpus_of_core(core)]
            os.makedirs(os.path.join(node_root, f"node{node}"))
            _put(os.path.join(node_root, f"node{node}", "cpulist"), format_cpulist(cpus))
    pci = os.path.join(root, "bus", "pci", "devices")
    devices = [
        (f"0000:{0x18 + 0x10 * i:02x}:00.0", "0x10de", "0x030200", node) for i, node in enumerate(shape.gpu_nodes)
    ]
    devices += [
        ("0000:0c:00.0", "0x15b3", "0x020000", 0),  # a ConnectX NIC
        ("0000:05:00.0", "0x10de", "0x068000", 0),  # an NVSwitch bridge: NVIDIA, not a GPU
    ]
    for address, vendor, kind, node in devices:
        folder = os.path.join(pci, address)
        os.makedirs(folder)
        _put(os.path.join(folder, "vendor"), vendor)
        _put(os.path.join(folder, "class"), kind)
        _put(os.path.join(folder, "numa_node"), str(node))
    return root
