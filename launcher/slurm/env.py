"""What SLURM tells a process about its allocation, read from a mapping (PURE).

Nothing here reads ``os.environ``: callers pass the environment in, tests pass dicts.

Formats (checked against ``sbatch(1)`` of slurm 22.05 and a real one-host cluster):

- ``SLURM_JOB_NODELIST`` / ``SLURM_NODELIST``: a hostlist, e.g. ``node[01-03,07],login``;
  zero padding is the width of the range's first number (``n[001-10]`` -> ``n001``..``n010``),
  several bracket groups in one name form a product (``rack[1-2]-n[01-02]``).
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
from dataclasses import dataclass
from itertools import product
from typing import Mapping, Optional

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


_RANGE = re.compile(r"(\d+)(?:-(\d+))?\Z")
_NAME_CHARS = re.compile(r"[A-Za-z0-9._:-]*\Z")


def _split_top_level(text: str, what: str) -> list[str]:
    """Split on commas that are outside brackets; check bracket balance."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
            if depth > 1:
                raise SlurmEnvError(f"{what} {text!r}: nested '[' at position {i}")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise SlurmEnvError(f"{what} {text!r}: ']' without '[' at position {i}")
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise SlurmEnvError(f"{what} {text!r}: '[' is never closed")
    parts.append(text[start:])
    return parts


def _expand_ranges(body: str, where: str) -> list[str]:
    """``01-03,07`` -> ``['01', '02', '03', '07']`` (width of each range's first number)."""
    out: list[str] = []
    for piece in body.split(","):
        m = _RANGE.match(piece)
        if not m:
            raise SlurmEnvError(
                f"hostlist {where!r}: bad range {piece!r} in [{body}] "
                "(expected N or N-M with decimal numbers)"
            )
        lo_text, hi_text = m.group(1), m.group(2)
        lo = int(lo_text)
        hi = lo if hi_text is None else int(hi_text)
        if hi < lo:
            raise SlurmEnvError(f"hostlist {where!r}: range {piece!r} goes down ({lo} > {hi})")
        width = len(lo_text)
        out.extend(f"{n:0{width}d}" for n in range(lo, hi + 1))
    return out


def _expand_one(item: str, whole: str) -> list[str]:
    """Expand one comma-free (outside brackets) host pattern, e.g. ``rack[1-2]-n[01-02]``."""
    if not item:
        raise SlurmEnvError(f"hostlist {whole!r}: empty host name (two commas or a trailing comma?)")
    groups = list(re.finditer(r"\[([^\[\]]*)\]", item))
    if len(groups) > 2:
        raise SlurmEnvError(
            f"hostlist {whole!r}: {item!r} has {len(groups)} bracket groups; at most 2 are supported"
        )
    pieces: list[list[str]] = []
    pos = 0
    for m in re.finditer(r"\[([^\[\]]*)\]", item):
        literal = item[pos : m.start()]
        if not _NAME_CHARS.match(literal):
            raise SlurmEnvError(f"hostlist {whole!r}: bad character in {literal!r}")
        pieces.append([literal])
        pieces.append(_expand_ranges(m.group(1), item))
        pos = m.end()
    tail = item[pos:]
    if not _NAME_CHARS.match(tail):
        raise SlurmEnvError(f"hostlist {whole!r}: bad character in {tail!r}")
    pieces.append([tail])
    return ["".join(p) for p in product(*pieces)]


def expand_hostlist(hostlist: str) -> list[str]:
    """Expand a SLURM hostlist expression into host names, in SLURM's order.

    >>> expand_hostlist("node[01-03,07],gpu-a[1-2],login")
    ['node01', 'node02', 'node03', 'node07', 'gpu-a1', 'gpu-a2', 'login']
    >>> expand_hostlist("rack[1-2]-n[01-02]")
    ['rack1-n01', 'rack1-n02', 'rack2-n01', 'rack2-n02']
    >>> expand_hostlist("n[8-11]"), expand_hostlist("n[001-10]")[-1], expand_hostlist("n[5]")
    (['n8', 'n9', 'n10', 'n11'], 'n010', ['n5'])
    >>> for bad in ("n[3-1]", "n[1-2", "n[a-b]"):
    ...     try:
    ...         expand_hostlist(bad)
    ...     except SlurmEnvError as e:
    ...         print(e)
    hostlist 'n[3-1]': range '3-1' goes down (3 > 1)
    hostlist 'n[1-2': '[' is never closed
    hostlist 'n[a-b]': bad range 'a-b' in [a-b] (expected N or N-M with decimal numbers)

    More than two bracket groups in one name are rejected: SLURM orders those as a grid
    (``a[1-2]b[1-2]c[7]`` -> a1b1c7 a2b1c7 a1b2c7 ...), not as a plain product.
    """
    if not isinstance(hostlist, str):
        raise SlurmEnvError(f"hostlist must be a string, got {type(hostlist).__name__}")
    if not hostlist:
        raise SlurmEnvError("hostlist is empty")
    if any(ch.isspace() for ch in hostlist):
        raise SlurmEnvError(f"hostlist {hostlist!r}: contains whitespace")
    hosts: list[str] = []
    for item in _split_top_level(hostlist, "hostlist"):
        hosts.extend(_expand_one(item, hostlist))
    return hosts


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
            raise SlurmEnvError(
                f"SLURM_TASKS_PER_NODE {value!r}: bad entry {piece!r} (expected N or N(xK))"
            )
        counts.extend([int(m.group(1))] * int(m.group(2) or 1))
    return counts


def _int(env: Mapping[str, str], *names: str, minimum: int = 0) -> Optional[int]:
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
            raise SlurmEnvError(
                f"SLURM_GPUS_PER_NODE={raw!r}: expected [type:]count, e.g. '4' or 'a100:4'"
            )
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
    gpus_on_node: Optional[int] = None  # None: SLURM says nothing about GPUs
    gpu_ids: tuple[str, ...] = ()  # SLURM_JOB_GPUS or CUDA_VISIBLE_DEVICES entries
    cpus_per_task: Optional[int] = None
    ntasks_per_node: Optional[int] = None
    restart_count: int = 0
    array_job_id: Optional[str] = None
    array_task_id: Optional[int] = None
    step_id: Optional[str] = None  # set inside srun steps ("batch" in the batch step)

    @property
    def first_host(self) -> str:
        """The allocation's first node: where rank 0 / the rendezvous endpoint lives."""
        return self.hosts[0]

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "SlurmAllocation":
        job_id = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
        if not job_id:
            raise NotInAllocationError(
                "not inside a SLURM allocation: SLURM_JOB_ID is not set "
                "(submit with sbatch, or run under salloc/srun)"
            )
        nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
        if not nodelist:
            raise SlurmEnvError(
                f"SLURM job {job_id}: neither SLURM_JOB_NODELIST nor SLURM_NODELIST is set"
            )
        hosts = tuple(expand_hostlist(nodelist))
        nnodes = _int(env, "SLURM_JOB_NUM_NODES", "SLURM_NNODES", minimum=1)
        if nnodes is None:
            nnodes = len(hosts)
        if nnodes != len(hosts):
            raise SlurmEnvError(
                f"SLURM job {job_id}: {nnodes} nodes but the node list {nodelist!r} "
                f"names {len(hosts)}"
            )

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
        if gpus is None and (env.get("SLURM_JOB_GPUS") is not None
                             or env.get("CUDA_VISIBLE_DEVICES") is not None):
            gpus = len(gpu_ids)

        ntasks = _int(env, "SLURM_NTASKS_PER_NODE", minimum=1)
        if ntasks is None and env.get("SLURM_TASKS_PER_NODE"):
            per_node = expand_tasks_per_node(env["SLURM_TASKS_PER_NODE"])
            if len(per_node) != nnodes:
                raise SlurmEnvError(
                    f"SLURM_TASKS_PER_NODE={env['SLURM_TASKS_PER_NODE']!r}: "
                    f"{len(per_node)} entries for {nnodes} nodes"
                )
            ntasks = per_node[node_rank]

        array_task = _int(env, "SLURM_ARRAY_TASK_ID")
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
            array_job_id=env.get("SLURM_ARRAY_JOB_ID") or None,
            array_task_id=array_task,
            step_id=env.get("SLURM_STEP_ID") or None,
        )
