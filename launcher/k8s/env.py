"""What the Kubeflow training operators tell a pod about its job, read from a mapping (PURE).

Nothing here reads ``os.environ``: callers pass the environment in, tests pass dicts.

What each operator sets in the training container (read from their source, December 2026):

- **Trainer v2** (``TrainJob`` on a torch runtime; ``pkg/runtime/framework/plugins/torch``):
  ``PET_NNODES`` (``trainer.numNodes``), ``PET_NPROC_PER_NODE`` (``numProcPerNode``: an integer, or
  ``auto``/``cpu``/``gpu``), ``PET_NODE_RANK`` (the Job completion index of the pod),
  ``PET_MASTER_ADDR`` (``<job>-node-0-0.<job>``, node 0's pod) and ``PET_MASTER_PORT`` (29400).
  No ``WORLD_SIZE``/``RANK``/``MASTER_ADDR``.
- **PyTorchJob v1** (training-operator ``pkg/controller.v1/pytorch/envvar.go``, ``master.go``):
  ``MASTER_ADDR``/``MASTER_PORT`` (the Master pod's service, port ``pytorchjob-port``) and their
  ``PET_`` copies; ``RANK`` = this pod's index (Master 0, Worker i → i+1): a *node* rank, the same
  as ``PET_NODE_RANK``; ``PET_NNODES`` = the pods; ``PET_NPROC_PER_NODE`` = ``spec.nprocPerNode``.
  ``WORLD_SIZE`` = pods × ``nprocPerNode`` when that is an integer, else the pods (1.7 and later);
  older operators (no ``PET_NNODES``) set ``WORLD_SIZE`` = the pods. So ``WORLD_SIZE`` is read only
  when ``PET_NNODES`` is absent, as a pod count.

torchrun itself reads ``PET_<FLAG>`` as a default for each of its flags; the launcher passes every
topology flag explicitly, so what torchrun runs is what the dry run shows.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["K8sEnvError", "NotInPodError", "PodTopology"]

TRAINJOB = "TrainJob"
PYTORCHJOB = "PyTorchJob"
# what a pod of either operator carries; one of them present means "inside a training pod"
MARKERS = ("PET_NNODES", "PET_NODE_RANK", "PET_MASTER_ADDR", "MASTER_ADDR", "WORLD_SIZE")


class K8sEnvError(ValueError):
    """An operator variable is malformed, or the variables contradict each other."""


class NotInPodError(K8sEnvError):
    """No variable of a Kubeflow training operator is set."""


def _int(env: Mapping[str, str], name: str, minimum: int) -> int | None:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return None
    if re.fullmatch(r"\d+:\d+", raw.strip()):
        raise K8sEnvError(f"{name}={raw!r}: an elastic node range; train_multigpu runs a fixed number of pods")
    try:
        value = int(raw.strip())
    except ValueError:
        raise K8sEnvError(f"{name}={raw!r}: expected an integer") from None
    if value < minimum:
        raise K8sEnvError(f"{name}={raw!r}: must be >= {minimum}")
    return value


@dataclass(frozen=True)
class PodTopology:
    """This pod's place in its job, as the operator described it.

    >>> t = PodTopology.from_env({"PET_NNODES": "2", "PET_NPROC_PER_NODE": "4", "PET_NODE_RANK": "1",
    ...     "PET_MASTER_ADDR": "ppo-node-0-0.ppo", "PET_MASTER_PORT": "29400"})
    >>> t.operator, t.nnodes, t.node_rank, t.nproc_per_node, t.master_addr, t.master_port
    ('TrainJob', 2, 1, '4', 'ppo-node-0-0.ppo', 29400)
    >>> old = PodTopology.from_env({"WORLD_SIZE": "3", "RANK": "2", "MASTER_ADDR": "ppo-master-0",
    ...     "MASTER_PORT": "23456"})
    >>> old.operator, old.nnodes, old.node_rank, old.nproc_per_node, old.master_addr
    ('PyTorchJob', 3, 2, None, 'ppo-master-0')
    >>> try:
    ...     PodTopology.from_env({"PATH": "/usr/bin"})
    ... except NotInPodError as e:
    ...     print(e)
    not inside a Kubeflow training pod: none of PET_NNODES, PET_NODE_RANK, PET_MASTER_ADDR, MASTER_ADDR, WORLD_SIZE is set
    """  # noqa: E501

    operator: str  # TrainJob (Trainer v2) or PyTorchJob (v1)
    nnodes: int
    node_rank: int
    nproc_per_node: str | None  # PET_NPROC_PER_NODE as given: an integer, auto, cpu or gpu; None: unset
    master_addr: str
    master_port: int
    job: str  # a name for the rendezvous id: the first label of the master's address

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> PodTopology:
        if not any(env.get(name) for name in MARKERS):
            raise NotInPodError(f"not inside a Kubeflow training pod: none of {', '.join(MARKERS)} is set")
        operator = PYTORCHJOB if env.get("MASTER_ADDR") or env.get("WORLD_SIZE") else TRAINJOB
        nnodes = _int(env, "PET_NNODES", 1)
        if nnodes is None:
            nnodes = _int(env, "WORLD_SIZE", 1)  # PyTorchJob before PET_NNODES: the pod count
        if nnodes is None:
            raise K8sEnvError("neither PET_NNODES nor WORLD_SIZE is set: the node count is unknown")
        node_rank = _int(env, "PET_NODE_RANK", 0)
        rank = _int(env, "RANK", 0)
        if node_rank is not None and rank is not None and rank != node_rank:
            raise K8sEnvError(f"PET_NODE_RANK={node_rank} and RANK={rank} disagree (both are this pod's rank)")
        node_rank = node_rank if node_rank is not None else rank
        if node_rank is None:
            if nnodes != 1:
                raise K8sEnvError("neither PET_NODE_RANK nor RANK is set: this pod's rank is unknown")
            node_rank = 0
        if node_rank >= nnodes:
            raise K8sEnvError(f"node rank {node_rank}: must be < the {nnodes} nodes")
        addr, port = _master(env)
        nproc = (env.get("PET_NPROC_PER_NODE") or "").strip() or None
        if nproc is not None and not (re.fullmatch(r"[1-9][0-9]*", nproc) or nproc in ("auto", "cpu", "gpu")):
            raise K8sEnvError(f"PET_NPROC_PER_NODE={nproc!r}: expected an integer >= 1, auto, cpu or gpu")
        return cls(operator, nnodes, node_rank, nproc, addr, port, addr.split(".")[0])


def _master(env: Mapping[str, str]) -> tuple[str, int]:
    """PET_MASTER_ADDR/PORT, else MASTER_ADDR/PORT; both forms set must agree."""
    values: dict[str, str] = {}
    for what in ("ADDR", "PORT"):
        pet, plain = env.get(f"PET_MASTER_{what}") or None, env.get(f"MASTER_{what}") or None
        if pet is not None and plain is not None and pet.strip() != plain.strip():
            raise K8sEnvError(f"PET_MASTER_{what}={pet!r} and MASTER_{what}={plain!r} disagree")
        value = pet or plain
        if value is None:
            raise K8sEnvError(f"neither PET_MASTER_{what} nor MASTER_{what} is set: node 0's address is unknown")
        values[what] = value.strip()
    port = values["PORT"]
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise K8sEnvError(f"master port {port!r}: expected 1..65535")
    return values["ADDR"], int(port)
