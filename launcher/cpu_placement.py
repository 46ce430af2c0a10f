"""``launcher.cpu_binding`` on this machine: each local rank's CPUs (:mod:`launcher.cpu_binding`
computes them from the topology :mod:`launcher.cpu_topology` reads) and who binds them.

torchrun binds where it can do it as we would (``--numa-binding MODE``: a mode, not a list; a torch
launch on GPUs; the installed torchrun's argument parser has the flag; ``numactl``, which torch wraps
each worker in, is on the PATH; the kernel lists NUMA nodes, which torch reads without a fallback).
Everywhere else (JAX ranks, CPU launches, an older torchrun, no numactl, no NUMA nodes, an explicit
list) the rank wrapper (run/worker.py) sets its own affinity before the script starts. Either way
the dry run prints each rank's list, and each rank records the mask it started with
(``logs/rank<R>.cpus``): ``runs show`` prints them.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import replace
from functools import cache

from . import checks, cpu_binding, cpu_topology
from .config.schema import Topology, TrainConfig
from .errors import UserError
from .facts import HostFacts, Settled

SYSFS = "/sys"
TORCHRUN_FLAG = "--numa-binding"
# asks torchrun's own argument parser (not its version) whether it takes --numa-binding
_HAS_FLAG = (
    "import torch.distributed.run as r; "
    f"print(any('{TORCHRUN_FLAG}' in a.option_strings for a in r.get_args_parser()._actions))"
)
PROBE_TIMEOUT_S = 60


@cache
def torchrun_has_numa_binding(python: str) -> bool:
    """Whether ``python``'s torchrun takes ``--numa-binding`` (torch 2.9 and later), asked of its
    argument parser in a child process (the launcher never imports torch)."""
    try:
        done = subprocess.run(
            [python, "-c", _HAS_FLAG], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0 and done.stdout.strip() == "True"


def torchrun_can_bind(python: str) -> bool:
    """This machine's torchrun can bind: numactl on the PATH, and the flag in its parser."""
    return shutil.which("numactl") is not None and torchrun_has_numa_binding(python)


def place(
    cfg: TrainConfig,
    settled: Settled,
    facts: HostFacts,
    refuse: checks.Refuse = checks.refuse_now,
    machine: cpu_topology.Machine | None = None,
    can_bind: bool | None = None,
) -> Settled:
    """``settled`` with each local rank's CPUs, their source, and torchrun's mode where it binds.
    ``machine`` (default: read from /sys when a mode needs it) and ``can_bind`` (whether this
    machine's torchrun can bind; default: :func:`torchrun_can_bind`) are for tests. A binding this
    host cannot apply is refused (a dry run warns)."""
    binding = cpu_binding.parse(cfg.launcher.cpu_binding)
    if not binding.on:
        return settled
    explicit = binding.mode == cpu_binding.EXPLICIT
    if explicit and len(binding.lists) != settled.nproc_per_node:
        return settled  # checks.validate refused the count (a dry run: warned of it once)
    allowed = facts.cpus if facts.cpus is not None else cpu_topology.allowed()
    if not explicit and machine is None:
        machine = cpu_topology.read(SYSFS)
    gpus = None
    if settled.device == "cuda" and not explicit:
        gpus = cpu_binding.visible_gpus(facts.env, facts.visible_gpus)
        if gpus is None:
            refuse(
                UserError(
                    cpu_binding.KEY,
                    binding.mode,
                    "binds each rank near its GPU, and CUDA_VISIBLE_DEVICES names GPUs by UUID (no PCI address to "
                    "find their NUMA node by)",
                    "GPU indices in CUDA_VISIBLE_DEVICES, or an explicit list per local rank",
                )
            )
            return settled
    try:  # an explicit list needs no machine
        lists = cpu_binding.masks(
            binding, machine or cpu_topology.Machine({}, {}, {}, {}), allowed, settled.nproc_per_node, gpus
        )
    except UserError as error:
        refuse(error)
        return settled
    torch_gpus = cfg.launcher.topology is not Topology.skrl_jax and settled.device == "cuda"
    numa = None
    if torch_gpus and binding.mode in cpu_binding.TORCH_MODES and machine is not None and machine.numa:
        if can_bind is None:
            can_bind = torchrun_can_bind(cfg.python or facts.python)
        numa = binding.mode if can_bind else None
    source = f"CPUs this launcher may use: {cpu_topology.format_cpulist(allowed.cpus)} ({allowed.source})"
    return replace(settled, cpu_lists=lists, cpu_source=source, numa_binding=numa)
