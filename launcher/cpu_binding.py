"""``launcher.cpu_binding``: which CPUs each local rank runs on (docs/cpu_placement.md). Pure: the
machine (:mod:`launcher.cpu_topology`, read by :mod:`launcher.cpu_placement`) and the CPUs the
launcher may use (read by :mod:`launcher.probe`) are passed in. A leaf: it imports only leaves.

The modes are torchrun's ``--numa-binding`` modes, with torch 2.13's meaning (torch/numa/binding.py),
so that the lists the dry run prints are the ones torchrun applies where it binds:

- ``node``: every CPU of the rank's NUMA node;
- ``socket``: every CPU of the NUMA nodes of the rank's socket;
- ``exclusive``: the node's physical cores (SMT siblings together) split evenly among the ranks of the
  node, the lowest ranks taking one more where they do not divide; fewer cores than ranks: refused;
- ``core-complex``: one core complex (the CPUs sharing a last-level cache: AMD's CCX) of the node per
  rank, the largest first, shared again when there are more ranks than complexes;
- a list per local rank (``[0-3,4-7]``): exactly those CPUs.

A rank's NUMA node: on GPUs, the node of the GPU it drives (local rank ``r`` drives the ``r``-th of
``CUDA_VISIBLE_DEVICES``, else GPU ``r``), and the node's ranks are the visible GPUs on it (torch
counts them so); on CPUs, the ranks are split over the NUMA nodes that hold usable CPUs in equal
consecutive blocks. Only CPUs the launcher may use count (its affinity within its cgroup cpuset).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .cpu_topology import Allowed, Machine, format_cpulist, parse_cpulist
from .errors import UserError

KEY = "launcher.cpu_binding"
NONE = "none"
MODES = (NONE, "node", "socket", "exclusive", "core-complex")
TORCH_MODES = MODES[1:]  # torchrun --numa-binding's choices
EXPLICIT = "list"
DOCS = "docs/cpu_placement.md"
ALLOWED_TEXT = f"one of {', '.join(MODES)}, or a CPU list per local rank like [0-3,4-7] or ['0,2','1,3'] ({DOCS})"


@dataclass(frozen=True)
class Binding:
    """A parsed ``launcher.cpu_binding``: a mode, or ``list`` with each local rank's CPUs."""

    mode: str
    lists: tuple[tuple[int, ...], ...] = ()

    @property
    def on(self) -> bool:
        return self.mode != NONE


def spelled(value: object) -> str:
    """A value as the user would type it again.

    >>> spelled(["0-3", 4, "5,7"]), spelled("node"), spelled(None)
    ("[0-3,4,'5,7']", 'node', 'none')
    """
    if value is None:
        return NONE
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(f"'{item}'" if "," in str(item) else str(item) for item in value) + "]"
    return str(value)


def parse(value: object) -> Binding:
    """The config's value (a mode, null, or a list of CPU lists: ints or strings), checked.

    >>> parse("exclusive"), parse(None).on
    (Binding(mode='exclusive', lists=()), False)
    >>> parse(["0-1", 2, "3,5"])
    Binding(mode='list', lists=((0, 1), (2,), (3, 5)))
    >>> parse("numa")
    Traceback (most recent call last):
    ...
    launcher.errors.UserError: launcher.cpu_binding=numa: one of none, node, socket, exclusive, core-complex, or a CPU list per local rank like [0-3,4-7] or ['0,2','1,3'] (docs/cpu_placement.md)
    """  # noqa: E501
    if value is None:
        return Binding(NONE)
    if isinstance(value, str):
        if value in MODES:
            return Binding(value)
        hint = None
        try:
            if parse_cpulist(value):
                hint = f"a list per local rank: launcher.cpu_binding=[{value}] binds one rank"
        except ValueError:
            pass
        raise UserError(KEY, value, ALLOWED_TEXT, hint)
    if isinstance(value, (list, tuple)) and value:
        lists = []
        for rank, item in enumerate(value):
            if isinstance(item, bool) or not isinstance(item, (int, str)):
                raise UserError(
                    KEY, spelled(value), f"local rank {rank}'s entry {item!r} is not a CPU list", ALLOWED_TEXT
                )
            if isinstance(item, int) and item < 0:
                raise UserError(KEY, spelled(value), f"local rank {rank}'s CPU {item} is negative", ALLOWED_TEXT)
            try:
                cpus = parse_cpulist(str(item))
            except ValueError as err:
                raise UserError(KEY, spelled(value), f"local rank {rank}: {err}", ALLOWED_TEXT) from None
            if not cpus:
                raise UserError(KEY, spelled(value), f"local rank {rank}'s CPU list is empty", ALLOWED_TEXT)
            lists.append(cpus)
        return Binding(EXPLICIT, tuple(lists))
    raise UserError(KEY, spelled(value), ALLOWED_TEXT)


def visible_gpus(env: Mapping[str, str], count: int) -> tuple[int, ...] | None:
    """The physical GPU indices the ranks drive, in CUDA's order: ``CUDA_VISIBLE_DEVICES`` (up to its
    first invalid entry, as CUDA reads it), else the first ``count`` GPUs. None: GPUs named by UUID
    (no index to find their PCI address by without asking the driver).

    >>> visible_gpus({"CUDA_VISIBLE_DEVICES": "4,5,x,6"}, 2), visible_gpus({}, 2)
    ((4, 5), (0, 1))
    >>> visible_gpus({"CUDA_VISIBLE_DEVICES": "GPU-5a3c"}, 1) is None
    True
    """
    value = env.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return tuple(range(count))
    indices = []
    for item in value.split(","):
        item = item.strip()
        if item.startswith(("GPU-", "MIG-")):
            return None
        if not item.isdigit():
            break
        indices.append(int(item))
    return tuple(indices)


def masks(
    binding: Binding, machine: Machine, allowed: Allowed, nproc: int, gpus: Sequence[int] | None = None
) -> tuple[tuple[int, ...], ...]:
    """Each local rank's CPUs (empty: no binding). ``gpus``: the physical GPU index each visible CUDA
    device is (:func:`visible_gpus`), for a launch on GPUs; None for one on CPUs. A binding that
    cannot be applied is a :class:`UserError` naming why (docs/cpu_placement.md#when-it-cannot-apply)."""
    if not binding.on:
        return ()
    usable = set(allowed.cpus)
    where = f"{format_cpulist(allowed.cpus) or 'none'}: {allowed.source}"
    if binding.mode == EXPLICIT:
        value = spelled([format_cpulist(cpus) for cpus in binding.lists])
        if len(binding.lists) != nproc:
            raise UserError(
                KEY,
                value,
                f"{len(binding.lists)} CPU list(s) for {nproc} local rank(s): one list per local rank",
                "launcher.nproc_per_node sets the local ranks",
            )
        for rank, cpus in enumerate(binding.lists):
            outside = [cpu for cpu in cpus if cpu not in usable]
            if outside:
                raise UserError(
                    KEY,
                    value,
                    f"local rank {rank}'s CPU(s) {format_cpulist(outside)} are not among those this launcher may use "
                    f"({where})",
                )
        return binding.lists
    homes, peers = _homes(binding, machine, usable, nproc, gpus, where)
    out = []
    for rank in range(nproc):
        node = homes[rank]
        node_cpus = tuple(cpu for cpu in machine.nodes.get(node, ()) if cpu in usable)
        if not node_cpus:
            owner = f"GPU {gpus[rank]}'s " if gpus is not None else ""
            raise UserError(
                KEY, binding.mode, f"{owner}NUMA node {node} has none of the CPUs this launcher may use ({where})"
            )
        mates = peers[node]
        index = mates.index(rank if gpus is None else gpus[rank])
        if binding.mode == "node":
            out.append(node_cpus)
        elif binding.mode == "socket":
            socket = machine.package.get(node_cpus[0], 0)
            out.append(tuple(cpu for cpu in machine.cpus if cpu in usable and machine.package.get(cpu, 0) == socket))
        elif binding.mode == "exclusive":
            out.append(_exclusive(machine, node, node_cpus, len(mates), index))
        else:  # core-complex
            out.append(_core_complex(machine, node_cpus, index))
    return tuple(out)


def _homes(
    binding: Binding, machine: Machine, usable: set[int], nproc: int, gpus: Sequence[int] | None, where: str
) -> tuple[list[int], dict[int, list[int]]]:
    """Each rank's NUMA node, and per node the ranks (CPU launch) or visible GPU indices (GPU launch)
    that share it, in order."""
    peers: dict[int, list[int]] = {}
    if gpus is None:
        nodes = [node for node, cpus in sorted(machine.nodes.items()) if usable.intersection(cpus)]
        if not nodes:
            raise UserError(KEY, binding.mode, f"no NUMA node holds a CPU this launcher may use ({where})")
        homes = [nodes[rank * len(nodes) // nproc] for rank in range(nproc)]
        for rank, node in enumerate(homes):
            peers.setdefault(node, []).append(rank)
        return homes, peers
    if len(gpus) < nproc:
        raise UserError(
            KEY,
            binding.mode,
            f"binds each rank near its GPU, and only {len(gpus)} GPU index(es) are known for {nproc} local ranks",
            "CUDA_VISIBLE_DEVICES names GPUs by index, or give an explicit list per local rank",
        )
    node_of = {}
    for index in gpus:
        if index >= len(machine.gpus):
            raise UserError(
                KEY,
                binding.mode,
                f"GPU {index} is not among the {len(machine.gpus)} NVIDIA GPU(s) that "
                f"{machine.source}/bus/pci/devices lists",
                "give an explicit list per local rank",
            )
        node_of[index] = machine.gpus[index].node
    for index in sorted(set(gpus)):
        peers.setdefault(node_of[index], []).append(index)
    return [node_of[gpus[rank]] for rank in range(nproc)], peers


def _exclusive(machine: Machine, node: int, node_cpus: tuple[int, ...], ranks: int, index: int) -> tuple[int, ...]:
    cores: dict[int, list[int]] = {}
    for cpu in node_cpus:
        cores.setdefault(machine.core.get(cpu, cpu), []).append(cpu)
    ordered = [cores[key] for key in sorted(cores)]
    each, extra = divmod(len(ordered), ranks)
    if each < 1:
        raise UserError(
            KEY,
            "exclusive",
            f"{ranks} local ranks share NUMA node {node}'s {len(ordered)} usable physical core(s) "
            f"({format_cpulist(node_cpus)}): each needs one of its own",
            "fewer ranks, launcher.cpu_binding=node, or an explicit list per local rank",
        )
    start = index * each + min(index, extra)
    end = start + each + (1 if index < extra else 0)
    return tuple(sorted(cpu for core in ordered[start:end] for cpu in core))


def _core_complex(machine: Machine, node_cpus: tuple[int, ...], index: int) -> tuple[int, ...]:
    groups: dict[int, list[int]] = {}
    for cpu in node_cpus:  # -1: no cache information, the node's unknown CPUs one complex
        groups.setdefault(machine.complex.get(cpu, -1), []).append(cpu)
    ordered = sorted(groups.values(), key=lambda cpus: (-len(cpus), cpus[0]))
    return tuple(ordered[index % len(ordered)])


def omp_threads(lists: Sequence[Sequence[int]]) -> tuple[int, ...]:
    """Each rank's ``OMP_NUM_THREADS`` from its mask: its CPUs over the local ranks bound to the same
    CPUs (``node`` binds a node's ranks to one list: they share it), at least 1.

    >>> omp_threads([(0, 1, 2, 3), (0, 1, 2, 3), (4, 5, 6, 7, 8, 9)])
    (2, 2, 6)
    """
    shared = [sum(1 for other in lists if tuple(other) == tuple(cpus)) for cpus in lists]
    return tuple(max(1, len(cpus) // count) for cpus, count in zip(lists, shared))


def lines(lists: Sequence[Sequence[int]], threads: Sequence[int] = ()) -> list[str]:
    """One line per local rank, as the dry run and ``runs show`` print them.

    >>> lines([(0, 1), (2, 3)], (2, 2))
    ['local rank 0: CPUs 0-1 (OMP_NUM_THREADS=2)', 'local rank 1: CPUs 2-3 (OMP_NUM_THREADS=2)']
    """
    out = []
    for rank, cpus in enumerate(lists):
        omp = f" (OMP_NUM_THREADS={threads[rank]})" if rank < len(threads) else ""
        out.append(f"local rank {rank}: CPUs {format_cpulist(cpus)}{omp}")
    return out


def encode(lists: Sequence[Sequence[int]]) -> str:
    """The wrapper's variable: each local rank's list, ``;`` between ranks.

    >>> encode([(0, 1), (4,)])
    '0-1;4'
    """
    return ";".join(format_cpulist(cpus) for cpus in lists)
