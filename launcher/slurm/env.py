"""What SLURM tells a process about its allocation, read from a mapping (PURE).

Nothing here reads ``os.environ``: callers pass the environment in, tests pass dicts.

Formats (checked against ``sbatch(1)`` of slurm 22.05 and a real one-host cluster):

- ``SLURM_JOB_NODELIST`` / ``SLURM_NODELIST``: a hostlist, e.g. ``node[01-03,07],login``;
  zero padding is the width of the range's first number (``n[001-10]`` -> ``n001``..``n010``),
  several bracket groups in one name form a product (``rack[1-2]-n[01-02]``). Expanded by the
  python-hostlist library.
- ``SLURM_TASKS_PER_NODE``: ``2(x3),1`` = 2 tasks on each of the first three nodes, 1 on the fourth.
- ``SLURM_GPUS_PER_NODE``: ``[type:]count`` as given to ``--gpus-per-node`` (``4``, ``a100:4``).
- ``SLURM_JOB_GPUS``: global GPU indices, comma separated (``0,1,2,3``); only set in batch and
  interactive jobs.  ``SLURM_GPUS_ON_NODE``: count of GPUs allocated to this step on this node.
- ``CUDA_VISIBLE_DEVICES``: set by SLURM's gres plugin to the allocated indices (or UUIDs);
  ``NoDevFiles`` when GPUs were allocated but the node has no device files configured.
- ``SLURM_NODEID`` is this node's index in the allocation (set in batch scripts and in steps,
  not in the shell ``salloc`` opens on the submit host).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "NotInAllocationError",
    "SlurmAllocation",
    "SlurmEnvError",
    "expand_hostlist",
    "expand_tasks_per_node",
]


class SlurmEnvError(ValueError):
    """A SLURM variable is malformed or the allocation cannot be described."""


class NotInAllocationError(SlurmEnvError):
    """The environment belongs to no SLURM allocation (no SLURM_JOB_ID)."""


def expand_hostlist(hostlist: str) -> list[str]:
    """Expand a SLURM hostlist expression into host names (python-hostlist, duplicates kept as SLURM
    keeps them).

    >>> expand_hostlist("node[01-03,07],gpu-a[1-2],login")
    ['node01', 'node02', 'node03', 'node07', 'gpu-a1', 'gpu-a2', 'login']
    >>> expand_hostlist("rack[1-2]-n[01-02]")
    ['rack1-n01', 'rack1-n02', 'rack2-n01', 'rack2-n02']
    >>> expand_hostlist("n[8-11]"), expand_hostlist("n[001-10]")[-1], expand_hostlist("n[5]")
    (['n8', 'n9', 'n10', 'n11'], 'n010', ['n5'])
    >>> for bad in ("n[3-1]", "n[1-2", "n[a-b]", "a,,b"):
    ...     try:
    ...         expand_hostlist(bad)
    ...     except SlurmEnvError as e:
    ...         print(e)
    hostlist 'n[3-1]': start > stop
    hostlist 'n[1-2': unbalanced brackets
    hostlist 'n[a-b]': bad range
    hostlist 'a,,b': empty host name (two commas or a trailing comma?)

    With more than two bracket groups in one name (``a[1-2]b[1-2]c[7]``) SLURM lists the names in
    another order than this; the first host (the rendezvous host) is the same, and the node rank
    comes from ``SLURM_NODEID``.
    """
    import hostlist as python_hostlist

    if not isinstance(hostlist, str):
        raise SlurmEnvError(f"hostlist must be a string, got {type(hostlist).__name__}")
    if not hostlist:
        raise SlurmEnvError("hostlist is empty")
    if any(ch.isspace() for ch in hostlist):
        raise SlurmEnvError(f"hostlist {hostlist!r}: contains whitespace")
    if re.search(r"^,|,,|,$", hostlist):
        raise SlurmEnvError(f"hostlist {hostlist!r}: empty host name (two commas or a trailing comma?)")
    try:
        return python_hostlist.expand_hostlist(hostlist, allow_duplicates=True)
    except python_hostlist.BadHostlist as err:
        raise SlurmEnvError(f"hostlist {hostlist!r}: {err}") from None


def expand_tasks_per_node(value: str) -> list[int]:
    """Expand ``SLURM_TASKS_PER_NODE`` (``2(x3),1``) into one count per node.

    >>> expand_tasks_per_node("2(x3),1")
    [2, 2, 2, 1]
    >>> expand_tasks_per_node("1")
    [1]
    >>> try:
    ...     expand_tasks_per_node("2(x)")
    ... except SlurmEnvError as e:
    ...     print(e)
    SLURM_TASKS_PER_NODE '2(x)': bad entry '2(x)' (expected N or N(xK))
    """
    counts: list[int] = []
    for piece in value.split(","):
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", piece)
        if not m:
            raise SlurmEnvError(f"SLURM_TASKS_PER_NODE {value!r}: bad entry {piece!r} (expected N or N(xK))")
        counts.extend([int(m.group(1))] * int(m.group(2) or 1))
    return counts


def _int(env: Mapping[str, str], *names: str, minimum: int = 0) -> int | None:
    """First of ``names`` that is set (non-empty), as an int; None when none is set."""
    for name in names:
        raw = env.get(name)
        if raw is None or raw == "":
            continue
        try:
            value = int(raw.strip())
        except ValueError:
            raise SlurmEnvError(f"{name}={raw!r}: expected an integer") from None
        if value < minimum:
            raise SlurmEnvError(f"{name}={raw!r}: must be >= {minimum}")
        return value
    return None


def _count_gpus_per_node(raw: str) -> int:
    """``4`` / ``a100:4`` / ``a100:2,v100:1`` -> total count."""
    total = 0
    for piece in raw.split(","):
        m = re.fullmatch(r"(?:[A-Za-z0-9_.-]+:)?(\d+)", piece.strip())
        if not m:
            raise SlurmEnvError(f"SLURM_GPUS_PER_NODE={raw!r}: expected [type:]count, e.g. '4' or 'a100:4'")
        total += int(m.group(1))
    return total


def _gpu_ids(name: str, raw: str) -> tuple[str, ...]:
    """``0,1,3`` (or UUIDs, or ``0-3``) -> ids; ``''`` and ``NoDevFiles`` -> ()."""
    raw = raw.strip()
    if raw in ("", "NoDevFiles"):
        return ()
    ids: list[str] = []
    for piece in raw.split(","):
        piece = piece.strip()
        m = re.fullmatch(r"(\d+)-(\d+)", piece)
        if m and int(m.group(1)) <= int(m.group(2)):
            ids.extend(str(i) for i in range(int(m.group(1)), int(m.group(2)) + 1))
        elif piece and re.fullmatch(r"[A-Za-z0-9:_-]+", piece):
            ids.append(piece)
        else:
            raise SlurmEnvError(f"{name}={raw!r}: bad device entry {piece!r}")
    return tuple(ids)


@dataclass(frozen=True)
class SlurmAllocation:
    """This process's view of its SLURM allocation.

    >>> a = SlurmAllocation.from_env({"SLURM_JOB_ID": "42", "SLURM_JOB_NUM_NODES": "2",
    ...     "SLURM_JOB_NODELIST": "gpu[07-08]", "SLURM_NODEID": "1",
    ...     "SLURM_GPUS_PER_NODE": "a100:4", "SLURM_TASKS_PER_NODE": "1(x2)"})
    >>> a.first_host, a.nnodes, a.node_rank, a.gpus_on_node, a.ntasks_per_node
    ('gpu07', 2, 1, 4, 1)
    >>> try:
    ...     SlurmAllocation.from_env({"PATH": "/usr/bin"})
    ... except NotInAllocationError as e:
    ...     print(e)
    not inside a SLURM allocation: SLURM_JOB_ID is not set (submit with sbatch, or run under salloc/srun)
    """

    job_id: str
    nnodes: int
    node_rank: int
    hosts: tuple[str, ...]
    gpus_on_node: int | None = None  # None: SLURM says nothing about GPUs
    gpu_ids: tuple[str, ...] = ()  # SLURM_JOB_GPUS or CUDA_VISIBLE_DEVICES entries
    cpus_per_task: int | None = None
    ntasks_per_node: int | None = None
    restart_count: int = 0
    step_id: str | None = None  # set inside srun steps ("batch" in the batch step)

    @property
    def first_host(self) -> str:
        """The allocation's first node: where rank 0 / the rendezvous endpoint lives."""
        return self.hosts[0]

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> SlurmAllocation:
        job_id = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
        if not job_id:
            raise NotInAllocationError(
                "not inside a SLURM allocation: SLURM_JOB_ID is not set (submit with sbatch, or run under salloc/srun)"
            )
        nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
        if not nodelist:
            raise SlurmEnvError(f"SLURM job {job_id}: neither SLURM_JOB_NODELIST nor SLURM_NODELIST is set")
        hosts = tuple(expand_hostlist(nodelist))
        nnodes = _int(env, "SLURM_JOB_NUM_NODES", "SLURM_NNODES", minimum=1)
        if nnodes is None:
            nnodes = len(hosts)
        if nnodes != len(hosts):
            raise SlurmEnvError(f"SLURM job {job_id}: {nnodes} nodes but the node list {nodelist!r} names {len(hosts)}")

        node_rank = _int(env, "SLURM_NODEID")
        if node_rank is None:
            here = env.get("SLURMD_NODENAME")
            if here in hosts:
                node_rank = hosts.index(here)
            elif nnodes == 1:
                node_rank = 0
            else:
                raise SlurmEnvError(
                    f"SLURM job {job_id}: SLURM_NODEID is not set and this node is not known "
                    "(run the launcher through srun, one task per node)"
                )
        if node_rank >= nnodes:
            raise SlurmEnvError(f"SLURM_NODEID={node_rank}: must be < the {nnodes} nodes")

        gpu_ids: tuple[str, ...] = ()
        for name in ("SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES"):
            if env.get(name) is not None:
                gpu_ids = _gpu_ids(name, env[name])
                break
        gpus = _int(env, "SLURM_GPUS_ON_NODE")
        if gpus is None and env.get("SLURM_GPUS_PER_NODE"):
            gpus = _count_gpus_per_node(env["SLURM_GPUS_PER_NODE"])
        if gpus is None and (env.get("SLURM_JOB_GPUS") is not None or env.get("CUDA_VISIBLE_DEVICES") is not None):
            gpus = len(gpu_ids)

        ntasks = _int(env, "SLURM_NTASKS_PER_NODE", minimum=1)
        if ntasks is None and env.get("SLURM_TASKS_PER_NODE"):
            per_node = expand_tasks_per_node(env["SLURM_TASKS_PER_NODE"])
            if len(per_node) != nnodes:
                raise SlurmEnvError(
                    f"SLURM_TASKS_PER_NODE={env['SLURM_TASKS_PER_NODE']!r}: {len(per_node)} entries for {nnodes} nodes"
                )
            ntasks = per_node[node_rank]

        return cls(
            job_id=job_id,
            nnodes=nnodes,
            node_rank=node_rank,
            hosts=hosts,
            gpus_on_node=gpus,
            gpu_ids=gpu_ids,
            cpus_per_task=_int(env, "SLURM_CPUS_PER_TASK", minimum=1),
            ntasks_per_node=ntasks,
            restart_count=_int(env, "SLURM_RESTART_COUNT") or 0,
            step_id=env.get("SLURM_STEP_ID") or None,
        )
