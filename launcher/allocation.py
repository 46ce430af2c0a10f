"""An allocation read from the environment, settled into the config (PURE).

A launcher started by a scheduler on each node (``launcher=slurm``/``slurm_jax`` in a SLURM
allocation, ``launcher=k8s``/``k8s_jax`` in a pod of a Kubeflow job) is ``launcher=multinode`` or
``launcher=skrl_jax`` whose topology the scheduler's variables give: the node count and this node's
rank (a value typed as well must match), the rendezvous endpoint or JAX coordinator, the rendezvous
id. This module holds that common shape; each scheduler is a :class:`Reader` -- how to read its
variables and what else it settles (SLURM's GPUs and CPUs, the pod's ranks per node):

- launcher/slurm/launch.py -- SLURM's ``SLURM_*`` variables (launcher/slurm/env.py);
- launcher/k8s/launch.py -- the operator's ``PET_*`` variables (launcher/k8s/env.py).

The session calls :func:`from_environment` once per reader; a launch under neither is unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from .config.schema import Topology, TrainConfig
from .errors import UserError
from .facts import HostFacts

A = TypeVar("A")


@dataclass(frozen=True)
class Reader(Generic[A]):
    """One scheduler: ``launcher.<flag>`` asks for it; ``launcher=<name>`` / ``<name>_jax`` are its options."""

    flag: str  # "from_slurm", "from_k8s"
    name: str  # "slurm", "k8s"
    read: Callable[[Mapping[str, str], str], A]  # (environment, launcher option) -> allocation, or UserError
    settle: Callable[[TrainConfig, A, HostFacts], tuple[TrainConfig, HostFacts]]


def launcher_name(cfg: TrainConfig, name: str) -> str:
    """The option the user chose: ``launcher=<name>`` (torchrun) or ``launcher=<name>_jax``."""
    return f"{name}_jax" if cfg.launcher.topology is Topology.skrl_jax else name


def must_match(key: str, value: object, given: object, problem: str, hint: str) -> None:
    """A value typed for what the scheduler gives (``launcher.nnodes``, ``launcher.node_rank``) must be it."""
    if value is not None and str(value) != str(given):
        raise UserError(key, value, problem, hint)


def set_topology(cfg: TrainConfig, nnodes: int, node_rank: int, endpoint: str, rdzv_id: str, reader: Reader) -> None:
    """``launcher.nnodes``/``node_rank`` from the scheduler; the endpoint as the rendezvous (torchrun,
    c10d) or the JAX coordinator, and the rendezvous id, unless given."""
    launcher = cfg.launcher
    launcher.nnodes, launcher.node_rank = str(nnodes), node_rank
    if launcher.topology is Topology.skrl_jax:
        if launcher.coordinator_address is None:
            launcher.coordinator_address = endpoint
    elif launcher.topology is Topology.multinode:
        if launcher.rdzv_endpoint is None and launcher.master_addr is None:
            launcher.rdzv_endpoint = endpoint
        if launcher.rdzv_id is None:
            launcher.rdzv_id = rdzv_id
    else:
        raise UserError(
            "launcher.topology",
            launcher.topology.value,
            f"launcher.{reader.flag}=true takes topology multinode (torchrun) or skrl_jax",
            f"use launcher={reader.name} or launcher={reader.name}_jax",
        )


def from_environment(cfg: TrainConfig, facts: HostFacts, reader: Reader[A]) -> tuple[TrainConfig, HostFacts, A | None]:
    """``reader.settle`` against ``facts.env`` when ``launcher.<reader.flag>`` is set; else unchanged."""
    if not getattr(cfg.launcher, reader.flag):
        return cfg, facts, None
    alloc = reader.read(facts.env, launcher_name(cfg, reader.name))
    cfg, facts = reader.settle(cfg, alloc, facts)
    return cfg, facts, alloc
