"""``launcher=k8s`` / ``launcher=k8s_jax``: one launcher per pod of a Kubeflow job (PURE).

:func:`settle` takes the typed config, this pod's :class:`PodTopology` (launcher/k8s/env.py) and the
host facts, and returns the config with the topology filled in from the operator's variables --
exactly what ``launcher=multinode`` (torchrun, c10d) or ``launcher=skrl_jax`` would be given by hand
on each node. The plan is then built as for those launchers. It mirrors ``launcher=slurm``
(launcher/slurm/launch.py).

From the pod's environment, unless the key is set explicitly:

==================================  ====================================================================
``launcher.nnodes``                 ``PET_NNODES`` (else ``WORLD_SIZE`` of an older PyTorchJob); an
                                    explicit value must match it
``launcher.node_rank``              ``PET_NODE_RANK`` (else ``RANK``); an explicit value must match it
``launcher.rdzv_endpoint``          ``<PET_MASTER_ADDR>:<PET_MASTER_PORT>`` (else ``MASTER_ADDR``/``_PORT``), c10d
``launcher.coordinator_address``    the same endpoint (JAX path)
``launcher.rdzv_id``                ``k8s-<first label of the master's address>`` (the job's name)
``launcher.nproc_per_node``         ``auto``: ``PET_NPROC_PER_NODE`` when it is an integer; an explicit
                                    integer must match it
==================================  ====================================================================
"""

from __future__ import annotations

import copy
import re

from ..addresses import Endpoint
from ..config.schema import Topology, TrainConfig
from ..errors import UserError
from ..facts import HostFacts
from .env import K8sEnvError, NotInPodError, PodTopology


def launcher_name(cfg: TrainConfig) -> str:
    """The option the user chose: launcher=k8s (torchrun) or launcher=k8s_jax."""
    return "k8s_jax" if cfg.launcher.topology is Topology.skrl_jax else "k8s"


def topology(env, name: str = "k8s") -> PodTopology:
    """This pod's topology, or the one-line error every launcher=k8s mistake ends as."""
    try:
        return PodTopology.from_env(env)
    except NotInPodError as err:
        raise UserError(
            "launcher",
            name,
            f"only runs inside a pod of a Kubeflow TrainJob or PyTorchJob ({err})",
            "create the job with submit=k8s, or run launcher=multinode with the topology given by hand",
        ) from None
    except K8sEnvError as err:
        raise UserError("launcher", name, f"cannot read the operator's environment: {err}") from None


def _must_match(key: str, value: object, pod_value: object, variable: str) -> None:
    if value is not None and str(value) != str(pod_value):
        raise UserError(
            key,
            value,
            f"the pod's {variable} is {pod_value}",
            f"leave {key} unset under launcher=k8s, or change the job (k8s.nodes=)",
        )


def settle(cfg: TrainConfig, pod: PodTopology, facts: HostFacts) -> tuple[TrainConfig, HostFacts]:
    """The config as ``launcher=multinode``/``skrl_jax`` would see it in this pod."""
    cfg = copy.deepcopy(cfg)
    launcher = cfg.launcher
    nnodes_var = "PET_NNODES" if "PET_NNODES" in facts.env else "WORLD_SIZE"
    rank_var = "PET_NODE_RANK" if "PET_NODE_RANK" in facts.env else "RANK"
    _must_match("launcher.nnodes", launcher.nnodes, pod.nnodes, nnodes_var)
    _must_match("launcher.node_rank", launcher.node_rank, pod.node_rank, rank_var)
    launcher.nnodes, launcher.node_rank = str(pod.nnodes), pod.node_rank
    endpoint = str(Endpoint(pod.master_addr, pod.master_port))
    if launcher.topology is Topology.skrl_jax:
        if launcher.coordinator_address is None:
            launcher.coordinator_address = endpoint
    elif launcher.topology is Topology.multinode:
        if launcher.rdzv_endpoint is None and launcher.master_addr is None:
            launcher.rdzv_endpoint = endpoint
        if launcher.rdzv_id is None:
            launcher.rdzv_id = f"k8s-{pod.job}"
    else:
        raise UserError(
            "launcher.topology",
            launcher.topology.value,
            "launcher.from_k8s=true takes topology multinode (torchrun) or skrl_jax",
            "use launcher=k8s or launcher=k8s_jax",
        )
    given = str(launcher.nproc_per_node).strip()
    if pod.nproc_per_node is not None and re.fullmatch(r"[0-9]+", pod.nproc_per_node):
        if given == "auto":
            launcher.nproc_per_node = pod.nproc_per_node
        elif re.fullmatch(r"[0-9]+", given) and int(given) != int(pod.nproc_per_node):
            raise UserError(
                "launcher.nproc_per_node",
                given,
                f"the pod's PET_NPROC_PER_NODE is {pod.nproc_per_node}",
                "leave launcher.nproc_per_node unset under launcher=k8s, or change the job",
            )
    return cfg, facts


def describe(pod: PodTopology) -> str:
    """One comment line for the dry run."""
    return (
        f"# k8s: {pod.operator} pod   node {pod.node_rank} of {pod.nnodes}   "
        f"master {Endpoint(pod.master_addr, pod.master_port)}   PET_NPROC_PER_NODE: {pod.nproc_per_node or '?'}"
    )


def from_environment(cfg: TrainConfig, facts: HostFacts) -> tuple[TrainConfig, HostFacts, PodTopology | None]:
    """:func:`settle` against ``facts.env`` when ``launcher.from_k8s`` is set; else unchanged."""
    if not cfg.launcher.from_k8s:
        return cfg, facts, None
    pod = topology(facts.env, launcher_name(cfg))
    cfg, facts = settle(cfg, pod, facts)
    return cfg, facts, pod
