"""``launcher=slurm`` / ``launcher=slurm_jax``: one launcher per node inside a SLURM allocation (PURE).

:func:`settle` takes the typed config, this node's :class:`SlurmAllocation` and the host facts, and
returns the config with the topology filled in from SLURM -- exactly what ``launcher=multinode``
(torchrun, c10d) or ``launcher=skrl_jax`` would be given by hand on each node -- and the host facts
narrowed to what SLURM allocated. The plan is then built as for those launchers. The shape shared
with ``launcher=k8s`` is launcher/allocation.py's; this module is its SLURM :data:`READER`.

From the allocation, unless the key is set explicitly:

==========================  =========================================================================
``launcher.nnodes``         the job's node count (an explicit value must match it)
``launcher.node_rank``      ``SLURM_NODEID`` (an explicit value must match it)
``launcher.rdzv_endpoint``  ``<first host of the node list>:<port>``, c10d (torchrun path)
``launcher.coordinator_address``  the same endpoint (JAX path)
``launcher.rdzv_id``        ``slurm-<job id>``
``launcher.nproc_per_node`` ``auto``/``gpu``: the GPUs SLURM gave this node; on CPU-only
                            allocations the CPUs per task. An explicit count above that is an error.
==========================  =========================================================================

The port is ``20000 + job id % 10000``: below Linux's ephemeral range, and different for jobs that
share a node. A requeued job (``SLURM_RESTART_COUNT`` > 0) gets ``slurm.resume_arg`` (``--resume``)
appended to the training script's arguments; its launcher record goes to ``<run_dir>/restart<N>``
(:func:`record_subdir`) while the script keeps training in ``<run_dir>``.
"""

from __future__ import annotations

import copy
import re
from dataclasses import replace

from .. import allocation as common
from ..config.schema import TrainConfig
from ..errors import UserError
from ..facts import HostFacts
from ..rundir import restart_name
from .env import NotInAllocationError, SlurmAllocation, SlurmEnvError

PORT_BASE = 20000
PORT_SPAN = 10000


def rendezvous_port(job_id: str) -> int:
    """The job's rendezvous / coordinator port.

    >>> rendezvous_port("4242"), rendezvous_port("123456"), rendezvous_port("7_3")
    (24242, 23456, 20007)
    """
    digits = "".join(ch for ch in job_id.split("_")[0] if ch.isdigit()) or "0"
    return PORT_BASE + int(digits) % PORT_SPAN


def launcher_name(cfg: TrainConfig) -> str:
    """The option the user chose: launcher=slurm (torchrun) or launcher=slurm_jax."""
    return common.launcher_name(cfg, "slurm")


def allocation(env, name: str = "slurm") -> SlurmAllocation:
    """This node's allocation, or the one-line error every launcher=slurm mistake ends as."""
    try:
        return SlurmAllocation.from_env(env)
    except NotInAllocationError:
        raise UserError(
            "launcher",
            name,
            "only runs inside a SLURM allocation (SLURM_JOB_ID is not set)",
            "submit with submit=slurm, or start it under sbatch/salloc with srun --ntasks-per-node=1",
        ) from None
    except SlurmEnvError as err:
        raise UserError("launcher", name, f"cannot read the SLURM environment: {err}") from None


def _explicit_must_match(key: str, value: object, slurm_value: object, what: str, job: str) -> None:
    common.must_match(
        key,
        value,
        slurm_value,
        f"SLURM job {job} has {what} {slurm_value}",
        f"leave {key} unset under launcher=slurm, or ask SLURM for what you want (slurm.nodes=)",
    )


def _cpus(alloc: SlurmAllocation, facts: HostFacts) -> tuple[int, str]:
    if alloc.cpus_per_task is not None:
        return alloc.cpus_per_task, f"SLURM_CPUS_PER_TASK={alloc.cpus_per_task}"
    return facts.usable_cpus, f"{facts.usable_cpus} usable CPU core(s)"


def settle(cfg: TrainConfig, alloc: SlurmAllocation, facts: HostFacts) -> tuple[TrainConfig, HostFacts]:
    """The config and host facts as ``launcher=multinode``/``skrl_jax`` would see them on this node."""
    cfg = copy.deepcopy(cfg)
    launcher = cfg.launcher
    job = alloc.job_id
    if alloc.step_id not in (None, "batch", "extern") and (alloc.ntasks_per_node or 1) > 1:
        raise UserError(
            "launcher",
            launcher_name(cfg),
            f"runs one launcher per node, but this srun step has {alloc.ntasks_per_node} tasks per node",
            "start it with srun --ntasks-per-node=1; the launcher starts the workers itself",
        )
    _explicit_must_match("launcher.nnodes", launcher.nnodes, alloc.nnodes, "node count", job)
    _explicit_must_match("launcher.node_rank", launcher.node_rank, alloc.node_rank, "this node at rank", job)
    endpoint = f"{alloc.first_host}:{rendezvous_port(job)}"
    common.set_topology(cfg, alloc.nnodes, alloc.node_rank, endpoint, f"slurm-{job}", READER)

    # What this node was given: GPUs when SLURM says so, CPUs per task otherwise.
    if alloc.gpus_on_node is not None:
        facts = replace(
            facts,
            visible_gpus=alloc.gpus_on_node,
            gpus_source=f"the SLURM allocation ({alloc.gpus_on_node} GPU(s) on this node)",
        )
    cpus, cpus_source = _cpus(alloc, facts)
    facts = replace(facts, usable_cpus=cpus)
    nproc = str(launcher.nproc_per_node).strip()
    if re.fullmatch(r"[0-9]+", nproc) and int(nproc) > 0:
        gpu_run = cfg.device.value == "cuda" or (cfg.device.value == "auto" and facts.visible_gpus > 0)
        if not gpu_run and int(nproc) > cpus:
            raise UserError(
                "launcher.nproc_per_node",
                nproc,
                f"more workers than the {cpus} CPU(s) SLURM allocated per node ({cpus_source})",
                f"use at most {cpus}, or ask for more with slurm.cpus_per_task=",
            )

    if alloc.restart_count > 0 and cfg.slurm.resume_arg and cfg.slurm.resume_arg not in cfg.script_args:
        cfg.script_args.append(cfg.slurm.resume_arg)
    return cfg, facts


def record_subdir(alloc: SlurmAllocation | None) -> str:
    """Where a requeued job's launcher record goes inside ``run_dir``: ``restart<N>``; ``""`` otherwise.

    Only the record is per restart: the training script's directory (``TRAIN_MULTIGPU_RUN_DIR``)
    stays ``run_dir``, so ``--resume`` finds the checkpoints the interrupted start wrote.

    >>> env = {"SLURM_JOB_ID": "7", "SLURM_NODELIST": "n1", "SLURM_RESTART_COUNT": "2"}
    >>> record_subdir(None), record_subdir(SlurmAllocation.from_env(env))
    ('', 'restart2')
    """
    return restart_name(alloc.restart_count) if alloc is not None and alloc.restart_count > 0 else ""


def describe(alloc: SlurmAllocation) -> str:
    """One comment line for the dry run."""
    hosts = ",".join(alloc.hosts[:4]) + (",..." if len(alloc.hosts) > 4 else "")
    gpus = "?" if alloc.gpus_on_node is None else str(alloc.gpus_on_node)
    return (
        f"# slurm: job {alloc.job_id}   node {alloc.node_rank} of {alloc.nnodes} ({hosts})   "
        f"GPUs on node: {gpus}   CPUs per task: {alloc.cpus_per_task or '?'}   restarts: {alloc.restart_count}"
    )


def from_environment(cfg: TrainConfig, facts: HostFacts) -> tuple[TrainConfig, HostFacts, SlurmAllocation | None]:
    """:func:`settle` against ``facts.env`` when ``launcher.from_slurm`` is set; else unchanged."""
    return common.from_environment(cfg, facts, READER)


READER = common.Reader("from_slurm", "slurm", allocation, settle)


QUEUE_QUERY_S = 5.0  # squeue: a silent controller costs the ledger its queue, never the launch


def queue_seconds(alloc: SlurmAllocation | None, squeue: str = "squeue") -> float:
    """How long this allocation's job waited in SLURM's queue (its start time less its submit time,
    squeue's ``%V %S``): the goodput ledger's ``queue`` (launcher/goodput.py). 0.0 outside an
    allocation or when squeue does not say within QUEUE_QUERY_S."""
    import subprocess

    if alloc is None:
        return 0.0
    try:
        out = subprocess.run(
            [squeue, "-h", "-j", alloc.job_id, "-o", "%V %S"], capture_output=True, text=True, timeout=QUEUE_QUERY_S
        )
    except (OSError, subprocess.TimeoutExpired):
        return 0.0
    return waited(out.stdout) if out.returncode == 0 else 0.0


def waited(line: str) -> float:
    """Seconds from a job's submit time to its start time, as squeue prints them (``%V %S``).

    >>> waited("2026-12-03T23:30:01 2026-12-03T23:31:05\\n"), waited("N/A N/A"), waited("")
    (64.0, 0.0, 0.0)
    """
    from datetime import datetime

    words = line.split()
    if len(words) < 2:
        return 0.0
    try:
        submitted, started = (datetime.fromisoformat(word) for word in words[:2])
    except ValueError:
        return 0.0
    return max(0.0, (started - submitted).total_seconds())
