"""Sweeps (``train_multigpu -m seed=1,2,3``): per-job rendezvous values, packing jobs onto disjoint
device sets, and the summary table. Pure except :func:`job_info` (reads Hydra's job state).

The session asks the back end for every point's request first (``dryrun``: the check of every
point, nothing started); the local back end then runs them (``submit_all``): with
``sweep.parallel=1`` one after another, with ``sweep.parallel=N`` through
:func:`launcher.sweep.parallel.run_many`, which runs N lanes at once, each lane pinned to its own set
of devices (``CUDA_VISIBLE_DEVICES`` for GPUs, CPU affinity for CPU jobs). Job ``k`` (0-based
``hydra.job.num``) runs in lane ``k % N``: the assignment is known before anything starts, so
each job's run record shows its devices and ports.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType

from ..addresses import parse_endpoint
from ..backends import base
from ..config.schema import Device, TrainConfig
from ..cpu_topology import Allowed
from ..errors import UserError
from ..facts import HostFacts
from ..names import swept
from ..tables import table


@dataclass(frozen=True)
class Slot:
    """One lane of a parallel sweep: the devices its jobs may use."""

    index: int
    cpus: tuple[int, ...] = ()  # CPU jobs: pinned to these cores
    gpus: tuple[str, ...] = ()  # GPU jobs: CUDA_VISIBLE_DEVICES


@dataclass(frozen=True)
class JobInfo:
    num: int
    overrides: tuple[str, ...]


@dataclass
class JobResult:
    num: int
    overrides: tuple[str, ...]
    exit_code: int | None = None  # None: skipped, a dry run, or still running
    duration_s: float = 0.0
    run_dir: str = ""
    note: str = ""
    goodput: str = ""  # its ledger's goodput, "91%" (status.json's goodput; docs/goodput.md)


def job_info() -> JobInfo | None:
    """The current job's number and overrides in a ``-m`` sweep, else None."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized() or HydraConfig.get().mode != RunMode.MULTIRUN:
        return None
    hydra_cfg = HydraConfig.get()
    return JobInfo(int(hydra_cfg.job.num), tuple(hydra_cfg.overrides.task))


def gpu_ids(facts: HostFacts) -> list[str]:
    """The visible GPUs by the ids CUDA_VISIBLE_DEVICES would name them."""
    value = facts.env.get("CUDA_VISIBLE_DEVICES")
    if value is not None:
        return [item.strip() for item in value.split(",")][: facts.visible_gpus]
    return [str(i) for i in range(facts.visible_gpus)]


def make_slots(parallel: int, use_gpus: bool, gpus: Sequence[str], cpus: Sequence[int]) -> list[Slot]:
    """``parallel`` disjoint, equal device sets (what does not divide evenly stays unused).

    >>> [s.gpus for s in make_slots(4, True, [str(i) for i in range(8)], [0])]
    [('0', '1'), ('2', '3'), ('4', '5'), ('6', '7')]
    >>> [s.cpus for s in make_slots(2, False, [], [0, 1, 2])]
    [(0,), (1,)]
    """
    devices = list(gpus) if use_gpus else list(cpus)
    kind = "visible GPUs" if use_gpus else "usable CPU cores"
    if parallel < 1:
        raise UserError("sweep.parallel", parallel, "an integer >= 1 (jobs at once on this node)")
    if parallel > len(devices):
        raise UserError("sweep.parallel", parallel, f"at most {len(devices)}, the {kind}: each job needs its own")
    size = len(devices) // parallel
    chunks = [tuple(devices[i * size : (i + 1) * size]) for i in range(parallel)]
    if use_gpus:
        return [Slot(i, gpus=chunk) for i, chunk in enumerate(chunks)]
    return [Slot(i, cpus=tuple(int(c) for c in chunk)) for i, chunk in enumerate(chunks)]


def job_slot(cfg: TrainConfig, facts: HostFacts, job_num: int, cpus: Sequence[int]) -> Slot | None:
    """The lane of job ``job_num`` in a parallel sweep, or None for one job at a time."""
    if cfg.sweep.parallel == 1:
        return None
    if str(cfg.launcher.nnodes) != "1":
        raise UserError(
            "sweep.parallel",
            cfg.sweep.parallel,
            "packs jobs on one node; launcher.nnodes must be 1",
            "use sweep.parallel=1 across nodes",
        )
    use_gpus = cfg.device is not Device.cpu and facts.visible_gpus > 0
    slots = make_slots(cfg.sweep.parallel, use_gpus, gpu_ids(facts), cpus)
    return slots[job_num % len(slots)]


def local_node_slot(cfg: TrainConfig, facts: HostFacts, cpus: Sequence[int], refuse) -> Slot | None:
    """``launcher.local_nodes=true``: several nodes' launchers on this host share its devices as a
    parallel sweep's lanes do -- node ``node_rank`` of N (N: MAX of ``launcher.nnodes``) gets the
    ``node_rank``-th of N disjoint, equal sets of the visible GPUs (``CUDA_VISIBLE_DEVICES``) or, on
    CPU, of the cores this launcher may use (its ranks pinned to them), so ``nproc_per_node=auto``
    counts its share, not the whole host. None: one node, not local nodes, or a value the checks
    refuse. Fewer devices than nodes: ``refuse`` (a fact of this host: a dry run warns).

    >>> from launcher.config.schema import TrainConfig, Device
    >>> from launcher.facts import HostFacts
    >>> cfg = TrainConfig(); cfg.device = Device.cpu
    >>> cfg.launcher.nnodes, cfg.launcher.node_rank, cfg.launcher.local_nodes = "2", 1, True
    >>> facts = HostFacts(visible_gpus=0, usable_cpus=4, python="python", gpus_source="-", examples_dir="-")
    >>> local_node_slot(cfg, facts, [0, 1, 2, 3], print)
    Slot(index=1, cpus=(2, 3), gpus=())
    """
    from ..config.schema import Topology
    from ..nodes import node_range

    launcher = cfg.launcher
    if not launcher.local_nodes or launcher.nnodes is None or launcher.node_rank is None:
        return None
    try:
        _, nodes = node_range(launcher.nnodes, launcher.topology is Topology.skrl_jax)
    except UserError:
        return None  # the checks name it
    if nodes < 2 or not 0 <= launcher.node_rank < nodes:
        return None
    use_gpus = cfg.device is not Device.cpu and facts.visible_gpus > 0
    devices = list(gpu_ids(facts)) if use_gpus else list(cpus)
    if len(devices) < nodes:
        kind = "visible GPUs" if use_gpus else "usable CPU cores"
        refuse(
            UserError(
                "launcher.local_nodes",
                "true",
                f"{nodes} nodes on this host share its {len(devices)} {kind}: each node gets its own, at least one",
                "fewer nodes, or the nodes on separate hosts",
            )
        )
        return None
    size = len(devices) // nodes
    share = tuple(devices[launcher.node_rank * size : (launcher.node_rank + 1) * size])
    if use_gpus:
        return Slot(launcher.node_rank, gpus=share)
    return Slot(launcher.node_rank, cpus=tuple(int(c) for c in share))


def node_facts(facts: HostFacts, slot: Slot | None) -> HostFacts:
    """What a local node in ``slot`` sees: only its GPUs or cores (:func:`local_node_slot`)."""
    if slot is None:
        return facts
    lane = job_facts(facts, slot)
    devices = f"GPUs {','.join(slot.gpus)}" if slot.gpus else f"CPU cores {','.join(map(str, slot.cpus))}"
    lane = replace(lane, gpus_source=f"local node {slot.index}'s share of this host: {devices}")
    if slot.cpus:
        lane = replace(lane, cpus=Allowed(tuple(slot.cpus), f"local node {slot.index}'s share of this host"))
    return lane


def job_facts(facts: HostFacts, slot: Slot | None) -> HostFacts:
    """What a job in ``slot`` sees: only its GPUs or cores (``nproc_per_node=auto`` fills the slot)."""
    if slot is None:
        return facts
    if slot.gpus:
        env = {**facts.env, "CUDA_VISIBLE_DEVICES": ",".join(slot.gpus)}
        return replace(
            facts,
            visible_gpus=len(slot.gpus),
            gpus_source=f"sweep lane {slot.index}: GPUs {','.join(slot.gpus)}",
            env=env,
        )
    # launcher.cpu_binding binds the job's ranks within its lane's cores (the lane's thread runs on them)
    cpus = Allowed(tuple(slot.cpus), f"sweep lane {slot.index}'s cores")
    return replace(
        facts,
        visible_gpus=0,
        usable_cpus=len(slot.cpus),
        gpus_source=f"sweep lane {slot.index}: CPU cores only",
        cpus=cpus,
    )


def _shift_endpoint(value: str, key: str, offset: int, default_port: int | None = None) -> str:
    endpoint = parse_endpoint(value, key, default_port=default_port)
    return str(replace(endpoint, port=endpoint.port + offset))


def job_config(cfg: TrainConfig, job_num: int, slot: Slot | None) -> TrainConfig:
    """Per-job rendezvous values: an explicit ``rdzv_id`` gets ``-<job>``; in a parallel sweep an
    explicit port (master_port, rdzv_endpoint, coordinator_address) is shifted by the lane index,
    so concurrent jobs never share one (jobs in one lane run one after another)."""
    cfg = copy.deepcopy(cfg)
    launcher = cfg.launcher
    if launcher.rdzv_id is not None:
        launcher.rdzv_id = f"{launcher.rdzv_id}-{job_num}"
    if slot is not None and slot.index:
        if launcher.master_port is not None:
            launcher.master_port += slot.index
        if launcher.rdzv_endpoint is not None:
            launcher.rdzv_endpoint = _shift_endpoint(
                launcher.rdzv_endpoint, "launcher.rdzv_endpoint", slot.index, 29400
            )
        if launcher.coordinator_address is not None:
            launcher.coordinator_address = _shift_endpoint(
                launcher.coordinator_address, "launcher.coordinator_address", slot.index
            )
    return cfg


def bind(plan, slot: Slot | None):
    """The plan with the lane's GPUs in every process's environment."""
    if slot is None or not slot.gpus:
        return plan
    return replace(plan, env=MappingProxyType({**plan.env, "CUDA_VISIBLE_DEVICES": ",".join(slot.gpus)}))


def distinct_port(pick: Callable[[], int], taken: set[int]) -> int:
    """A port from ``pick`` that no other job of this sweep was given."""
    for _ in range(100):
        port = pick()
        if port not in taken:
            taken.add(port)
            return port
    raise RuntimeError("no distinct free port found")


# the summary's notes on jobs a sweep stopped or never started
FAIL_FAST_STOP = "stopped (sweep.fail_fast)"
INTERRUPTED = "interrupted"  # a job that ran, stopped by the sweep's signal
SKIPPED_FAIL_FAST = "skipped (sweep.fail_fast)"
SKIPPED_INTERRUPTED = "skipped (interrupted)"
DRY_RUN = base.DRY_RUN


def kind(result: JobResult) -> str:
    """succeeded, failed, stopped (by the sweep's signal or fail_fast), skipped (never started) or
    dry run."""
    if result.note == DRY_RUN:
        return DRY_RUN
    if result.exit_code is None:
        return "skipped"
    if result.note in (INTERRUPTED, FAIL_FAST_STOP):
        return "stopped"
    return "succeeded" if result.exit_code == 0 else "failed"


def summary(results: Sequence[JobResult]) -> str:
    """The table printed at the end of a sweep (the overrides column: the swept values)."""
    rows = [("job", "overrides", "exit", "duration", "goodput", "run directory")]
    results = sorted(results, key=lambda r: r.num)
    own = dict(zip((r.num for r in results), swept([r.overrides for r in results])))
    for r in results:
        if r.exit_code is None or r.note == FAIL_FAST_STOP:
            exit_text = r.note
        else:
            exit_text = str(r.exit_code) + (f" ({r.note})" if r.note else "")
        run_dir = "-" if kind(r) == "skipped" else r.run_dir or "-"  # a skipped job's was planned, never made
        rows.append(
            (str(r.num), " ".join(own[r.num]) or "-", exit_text, f"{r.duration_s:.1f}s", r.goodput or "-", run_dir)
        )
    lines = table(rows, rule=True)
    counts = {
        name: sum(1 for r in results if kind(r) == name)
        for name in ("succeeded", "failed", "stopped", "skipped", DRY_RUN)
    }
    if counts[DRY_RUN] == len(results):
        lines.append(f"{len(results)} job(s): dry run, nothing started")
    else:
        stopped = f", {counts['stopped']} stopped" if counts["stopped"] else ""
        lines.append(
            f"{len(results)} job(s): {counts['succeeded']} succeeded, {counts['failed']} failed{stopped}, "
            f"{counts['skipped']} skipped"
        )
    return "\n".join(lines)
