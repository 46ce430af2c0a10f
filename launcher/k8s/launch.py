"""``launcher=k8s`` / ``launcher=k8s_jax``: one launcher per pod of a Kubeflow job (PURE).

:func:`settle` takes the typed config, this pod's :class:`PodTopology` (launcher/k8s/env.py) and the
host facts, and returns the config with the topology filled in from the operator's variables --
exactly what ``launcher=multinode`` (torchrun, c10d) or ``launcher=skrl_jax`` would be given by hand
on each node. The plan is then built as for those launchers. The shape shared with ``launcher=slurm``
is launcher/allocation.py's; this module is its Kubeflow pod :data:`READER`.

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

from .. import allocation as common
from ..addresses import Endpoint
from ..config.schema import TrainConfig
from ..errors import UserError
from ..facts import HostFacts
from .env import K8sEnvError, NotInPodError, PodTopology


def launcher_name(cfg: TrainConfig) -> str:
    """The option the user chose: launcher=k8s (torchrun) or launcher=k8s_jax."""
    return common.launcher_name(cfg, "k8s")


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
    common.must_match(
        key,
        value,
        pod_value,
        f"the pod's {variable} is {pod_value}",
        f"leave {key} unset under launcher=k8s, or change the job (submit=k8s launcher.nnodes=N)",
    )


def settle(cfg: TrainConfig, pod: PodTopology, facts: HostFacts) -> tuple[TrainConfig, HostFacts]:
    """The config as ``launcher=multinode``/``skrl_jax`` would see it in this pod."""
    cfg = copy.deepcopy(cfg)
    launcher = cfg.launcher
    nnodes_var = "PET_NNODES" if "PET_NNODES" in facts.env else "WORLD_SIZE"
    rank_var = "PET_NODE_RANK" if "PET_NODE_RANK" in facts.env else "RANK"
    _must_match("launcher.nnodes", launcher.nnodes, pod.nnodes, nnodes_var)
    _must_match("launcher.node_rank", launcher.node_rank, pod.node_rank, rank_var)
    endpoint = str(Endpoint(pod.master_addr, pod.master_port))
    common.set_topology(cfg, pod.nnodes, pod.node_rank, endpoint, f"k8s-{pod.job}", READER)
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
    return common.from_environment(cfg, facts, READER)


READER = common.Reader("from_k8s", "k8s", topology, settle)
