"""The Kubeflow job ``submit=k8s`` writes, and the rules Kubernetes and the operators enforce on it (PURE).

Two kinds (``k8s.kind``):

- ``TrainJob`` (Kubeflow Trainer v2, ``trainer.kubeflow.org/v1alpha1``, written for the v2.3 API): a
  ``runtimeRef`` to a training runtime (``k8s.runtime``, default ``torch-distributed``) and a
  ``trainer`` (image, command, numNodes, numProcPerNode, resourcesPerNode, env); ``/dev/shm`` is a
  ``runtimePatches`` entry that adds the volume to the runtime's ``node`` pods.
- ``PyTorchJob`` (the v1 training operator, ``kubeflow.org/v1``): a ``Master`` replica and
  ``nodes - 1`` ``Worker`` replicas, each a full pod template with a container named ``pytorch``.

What the operators refuse server-side is checked here first (:func:`check`), each as one
:class:`UserError`: the job's name (an RFC 1035 label of at most 63 characters, TrainJob's CEL rule
and the PyTorchJob webhook; the pods' host names ``<name>-node-<i>-0`` / ``<name>-worker-<i>`` are
labels too), the namespace and Secret names (RFC 1123), resource quantities, the variables an operator
reserves (Trainer's ``PET_*``: its webhook refuses them in ``trainer.env``), an elastic node range
(TrainJob has no field for one: ``numNodes`` is a number), the image's length (500).

Nothing here is sent anywhere: :mod:`launcher.k8s.backend` writes and creates what :func:`render` returns.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from ..config.schema import K8sConfig, K8sKind
from ..errors import UserError

TRAINJOB_API = "trainer.kubeflow.org/v1alpha1"
PYTORCHJOB_API = "kubeflow.org/v1"
TRAINER_NODE = "node"  # the torch runtimes' replicated job and container (Trainer's constants.Node)
PYTORCH_CONTAINER = "pytorch"  # the container name the PyTorchJob webhook requires
PYTORCH_PORT_NAME, PYTORCH_PORT = "pytorchjob-port", 23456  # the operator's defaults
MANAGER = "train-multigpu"  # runtimePatches' owner
MANAGED_BY_LABEL = {"app.kubernetes.io/managed-by": "train_multigpu"}
SHM_VOLUME = "dshm"
# Trainer v2's torch plugin refuses these in trainer.env (constants.TorchRunReservedEnvNames)
TRAINER_RESERVED_ENV = ("PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT")
# the PyTorchJob operator appends these to the container's env: a second definition is ambiguous
PYTORCHJOB_SET_ENV = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "PYTHONUNBUFFERED", *TRAINER_RESERVED_ENV)
RUNTIME_KINDS = ("ClusterTrainingRuntime", "TrainingRuntime")
MAX_IMAGE = 500  # TrainJob: trainer.image MaxLength
MAX_COMMAND = 128  # TrainJob: trainer.command MaxItems
MAX_NODES = 5000  # pods per job: Kubernetes' largest supported cluster ("Considerations for large clusters")

DNS_LABEL_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
DNS_LABEL_1123 = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
SECRET_KEY = re.compile(r"[-._a-zA-Z0-9]+")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# a resource name outside kubernetes.io: <DNS subdomain>/<name>
EXTENDED_RESOURCE = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
QUANTITY = re.compile(
    r"(?P<number>[0-9]+(\.[0-9]*)?|\.[0-9]+)(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E|[eE][-+]?[0-9]+)?"
)
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"m": Decimal("0.001"), "": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}


@dataclass(frozen=True)
class SecretRef:
    """``NAME:SECRET/KEY``: the container's variable NAME from key KEY of the Secret SECRET."""

    name: str
    secret: str
    key: str

    def env_var(self) -> dict:
        return {"name": self.name, "valueFrom": {"secretKeyRef": {"name": self.secret, "key": self.key}}}


@dataclass(frozen=True)
class Job:
    """What one submission asks for: the rendered job's inputs, all checked."""

    name: str
    nodes: int
    nproc_per_node: int | None  # None: the runtime's default (auto), resolved in each pod
    command: tuple[str, ...]
    secrets: tuple[SecretRef, ...]


def quantity(key: str, value: object) -> Decimal:
    """A Kubernetes resource quantity (``8``, ``7500m``, ``64Gi``, ``1e3``) as a number; > 0.

    >>> quantity("k8s.memory_per_node", "64Gi"), quantity("k8s.cpus_per_node", "7500m")
    (Decimal('68719476736'), Decimal('7.500'))
    >>> quantity("k8s.memory_per_node", "64GB")
    Traceback (most recent call last):
    ...
    launcher.errors.UserError: k8s.memory_per_node=64GB: not a Kubernetes quantity (a number with an optional suffix: Ki Mi Gi Ti Pi Ei, m k M G T P E; e.g. 64Gi, 8, 500m)
    """  # noqa: E501
    text = str(value).strip()
    match = QUANTITY.fullmatch(text)
    if match is None:
        raise UserError(
            key,
            value,
            "not a Kubernetes quantity (a number with an optional suffix: Ki Mi Gi Ti Pi Ei, m k M G T P E; "
            "e.g. 64Gi, 8, 500m)",
        )
    suffix = match.group("suffix") or ""
    try:
        number = Decimal(match.group("number"))
        if suffix in _BINARY:
            amount = number * _BINARY[suffix]
        elif suffix in _DECIMAL:
            amount = number * _DECIMAL[suffix]
        else:
            amount = number * Decimal(10) ** int(suffix[1:])
    except (InvalidOperation, ValueError):  # pragma: no cover - the pattern admits numbers only
        raise UserError(key, value, "not a Kubernetes quantity") from None
    if amount <= 0:
        raise UserError(key, value, "must be more than 0")
    return amount


def secret_refs(entries: Sequence[str]) -> tuple[SecretRef, ...]:
    """``k8s.secret_env`` entries, each ``NAME:SECRET/KEY``.

    >>> secret_refs(["HF_TOKEN:hf/token"])
    (SecretRef(name='HF_TOKEN', secret='hf', key='token'),)
    >>> secret_refs(["HF_TOKEN=abc"])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    launcher.errors.UserError: k8s.secret_env=HF_TOKEN=...: NAME:SECRET/KEY, the variable NAME read from key KEY of the Kubernetes Secret SECRET (e.g. HF_TOKEN:hf-token/token; a value is never written into the manifest)
    """  # noqa: E501
    refs: list[SecretRef] = []
    for entry in entries:
        match = re.fullmatch(r"([^:]*):([^/]*)/(.*)", str(entry))
        if match is None:
            raise UserError(
                "k8s.secret_env",
                entry,
                "NAME:SECRET/KEY, the variable NAME read from key KEY of the Kubernetes Secret SECRET",
                "e.g. HF_TOKEN:hf-token/token; a value is never written into the manifest",
            )
        name, secret, key = match.groups()
        if not ENV_NAME.fullmatch(name):
            raise UserError("k8s.secret_env", entry, f"{name!r} is not a variable name (letters, digits, '_')")
        if not (DNS_SUBDOMAIN.fullmatch(secret) and len(secret) <= 253):
            raise UserError(
                "k8s.secret_env",
                entry,
                f"{secret!r} is not a Secret's name (lower-case letters, digits, '-', '.'; at most 253)",
            )
        if not (SECRET_KEY.fullmatch(key) and len(key) <= 253):
            raise UserError(
                "k8s.secret_env", entry, f"{key!r} is not a key of a Secret (letters, digits, '-', '_', '.')"
            )
        if name in (ref.name for ref in refs):
            raise UserError("k8s.secret_env", entry, f"{name} is given twice")
        refs.append(SecretRef(name, secret, key))
    return tuple(refs)


def derived_name(base: str, stamp: str, number: int | None) -> str:
    """A valid job name from ``run_name`` (or the default): lower case, ``-`` for anything else, a
    letter first, ``-<stamp>`` and, in a sweep, ``-<job number>`` after; 40 characters at most, so
    that the pods' host names stay within 63.

    >>> derived_name("PPO_Cartpole.v2", "20261201-101500", None)
    'ppo-cartpole-v2-20261201-101500'
    >>> derived_name("3rd", "20261201-101500", 7)
    'j-3rd-20261201-101500-7'
    """
    tail = f"-{stamp}" + (f"-{number}" if number is not None else "")
    head = re.sub(r"[^a-z0-9]+", "-", base.lower()).strip("-") or "train-multigpu"
    if not head[0].isalpha():
        head = "j-" + head
    return head[: 40 - len(tail)].rstrip("-") + tail


def pod_hostnames(kind: K8sKind, name: str, nodes: int) -> list[str]:
    """The longest host names the job's pods get (each must be a DNS label of at most 63)."""
    if kind is K8sKind.TrainJob:
        return [f"{name}-{TRAINER_NODE}-{nodes - 1}-0"]  # JobSet: <jobset>-<replicated job>-<job index>-<pod index>
    return [f"{name}-master-0"] + ([f"{name}-worker-{nodes - 2}"] if nodes > 1 else [])


def check_name(kind: K8sKind, name: str, nodes: int, key: str) -> None:
    allowed = "lower-case letters, digits and '-', a letter first, not ending in '-', at most 63 characters"
    if not (DNS_LABEL_1035.fullmatch(name) and len(name) <= 63):
        raise UserError(key, name, f"not a {kind.value} name: {allowed} (RFC 1035)")
    longest = max(pod_hostnames(kind, name, nodes), key=len)
    if len(longest) > 63:
        raise UserError(
            key,
            name,
            f"too long for {nodes} node(s): the pod host name {longest} has {len(longest)} characters, at most 63",
            f"at most {len(name) - (len(longest) - 63)} characters",
        )


def check(k8s: K8sConfig, elastic: str | None) -> tuple[SecretRef, ...]:
    """The ``k8s.*`` keys, before anything is written: what the operators would refuse. ``elastic``:
    a typed ``launcher.nnodes=MIN:MAX``."""
    if k8s.image is None or not str(k8s.image).strip():
        raise UserError(
            "container.image",
            k8s.image,
            "required: the container image the pods run (k8s.image is its old spelling)",
            "e.g. container.image=nvcr.io/nvidia/isaac-lab:2.3.0",
        )
    if len(k8s.image) > MAX_IMAGE or any(ch.isspace() for ch in k8s.image):
        raise UserError("k8s.image", k8s.image, f"an image reference: no spaces, at most {MAX_IMAGE} characters")
    if k8s.namespace is not None and not (DNS_LABEL_1123.fullmatch(k8s.namespace) and len(k8s.namespace) <= 63):
        raise UserError(
            "k8s.namespace",
            k8s.namespace,
            "a namespace name: lower-case letters, digits and '-', at most 63 (RFC 1123)",
        )
    if k8s.nodes < 1:
        raise UserError("k8s.nodes", k8s.nodes, "at least 1")
    if k8s.nodes > MAX_NODES:
        raise UserError(
            "k8s.nodes", k8s.nodes, f"at most {MAX_NODES} (one pod per node; Kubernetes supports {MAX_NODES} nodes)"
        )
    if k8s.gpus_per_node < 0:
        raise UserError("k8s.gpus_per_node", k8s.gpus_per_node, "0 or more")
    if not (EXTENDED_RESOURCE.fullmatch(k8s.gpu_resource) and len(k8s.gpu_resource) <= 253):
        raise UserError(
            "k8s.gpu_resource", k8s.gpu_resource, "an extended resource name, e.g. nvidia.com/gpu or amd.com/gpu"
        )
    if k8s.cpus_per_node is not None:
        quantity("k8s.cpus_per_node", k8s.cpus_per_node)
    memory = None if k8s.memory_per_node is None else quantity("k8s.memory_per_node", k8s.memory_per_node)
    if k8s.shm_size is not None:
        shm = quantity("k8s.shm_size", k8s.shm_size)
        if memory is not None and shm > memory:
            raise UserError(
                "k8s.shm_size",
                k8s.shm_size,
                f"more than k8s.memory_per_node={k8s.memory_per_node}: a memory-backed /dev/shm counts against it",
            )
    if k8s.kind is K8sKind.TrainJob:
        if k8s.runtime_kind not in RUNTIME_KINDS:
            raise UserError("k8s.runtime_kind", k8s.runtime_kind, f"one of {', '.join(RUNTIME_KINDS)}")
        if not (DNS_SUBDOMAIN.fullmatch(k8s.runtime) and len(k8s.runtime) <= 253):
            raise UserError("k8s.runtime", k8s.runtime, "a runtime's name: lower-case letters, digits, '-', '.'")
    if elastic is not None:
        raise UserError(
            "launcher.nnodes",
            elastic,
            "an elastic node range is not submitted to Kubernetes: TrainJob's numNodes is one number (Trainer "
            "refuses numNodes with an elastic policy) and train_multigpu writes no elasticPolicy",
            "a fixed count: launcher.nnodes=N",
        )
    refs = secret_refs(k8s.secret_env)
    from ..plan import LAUNCH_VARS

    reserved = TRAINER_RESERVED_ENV if k8s.kind is K8sKind.TrainJob else PYTORCHJOB_SET_ENV
    for ref in refs:
        if ref.name in reserved:
            raise UserError(
                "k8s.secret_env",
                f"{ref.name}:{ref.secret}/{ref.key}",
                f"{ref.name} is set by the {k8s.kind.value} operator",
            )
        if ref.name in LAUNCH_VARS:
            raise UserError(
                "k8s.secret_env",
                f"{ref.name}:{ref.secret}/{ref.key}",
                "the launch sets this variable for every worker itself",
            )
    return refs


def _resources(k8s: K8sConfig) -> dict:
    amounts: dict[str, str] = {}
    if k8s.cpus_per_node is not None:
        amounts["cpu"] = str(k8s.cpus_per_node)
    if k8s.memory_per_node is not None:
        amounts["memory"] = str(k8s.memory_per_node)
    if k8s.gpus_per_node > 0:
        amounts[k8s.gpu_resource] = str(k8s.gpus_per_node)
    # requests = limits: the scheduler places the pod only where all of it fits (extended
    # resources such as GPUs must have them equal anyway)
    return {"requests": dict(amounts), "limits": dict(amounts)} if amounts else {}


def _shm_volume(k8s: K8sConfig) -> dict:
    empty_dir: dict = {"medium": "Memory"}
    if k8s.shm_size is not None:
        empty_dir["sizeLimit"] = str(k8s.shm_size)
    return {"name": SHM_VOLUME, "emptyDir": empty_dir}


SHM_MOUNT = {"name": SHM_VOLUME, "mountPath": "/dev/shm"}


def _metadata(k8s: K8sConfig, name: str) -> dict:
    metadata: dict = {"name": name}
    if k8s.namespace is not None:
        metadata["namespace"] = k8s.namespace
    metadata["labels"] = dict(MANAGED_BY_LABEL)
    return metadata


def render(k8s: K8sConfig, job: Job, max_restarts: int | None) -> dict:
    """The manifest, as a mapping ready for YAML."""
    if k8s.kind is K8sKind.TrainJob:
        return _trainjob(k8s, job)
    return _pytorchjob(k8s, job, max_restarts)


def _trainjob(k8s: K8sConfig, job: Job) -> dict:
    trainer: dict = {"image": k8s.image, "command": list(job.command), "numNodes": job.nodes}
    if job.nproc_per_node is not None:
        trainer["numProcPerNode"] = job.nproc_per_node
    resources = _resources(k8s)
    if resources:
        trainer["resourcesPerNode"] = resources
    if job.secrets:
        trainer["env"] = [ref.env_var() for ref in job.secrets]
    pod_patch = {"volumes": [_shm_volume(k8s)], "containers": [{"name": TRAINER_NODE, "volumeMounts": [SHM_MOUNT]}]}
    patch = {
        "manager": MANAGER,
        "trainingRuntimeSpec": {
            "template": {
                "spec": {
                    "replicatedJobs": [{"name": TRAINER_NODE, "template": {"spec": {"template": {"spec": pod_patch}}}}]
                }
            }
        },
    }
    return {
        "apiVersion": TRAINJOB_API,
        "kind": "TrainJob",
        "metadata": _metadata(k8s, job.name),
        "spec": {
            "runtimeRef": {"name": k8s.runtime, "kind": k8s.runtime_kind},
            "trainer": trainer,
            "runtimePatches": [patch],
        },
    }


def _pytorchjob(k8s: K8sConfig, job: Job, max_restarts: int | None) -> dict:
    container: dict = {
        "name": PYTORCH_CONTAINER,
        "image": k8s.image,
        "command": list(job.command),
        "ports": [{"name": PYTORCH_PORT_NAME, "containerPort": PYTORCH_PORT}],
        "volumeMounts": [SHM_MOUNT],
    }
    if job.secrets:
        container["env"] = [ref.env_var() for ref in job.secrets]
    resources = _resources(k8s)
    if resources:
        container["resources"] = resources
    restarts = max_restarts or 0
    # the pods restart in place (OnFailure) at most launcher.max_restarts times in all; none: Never
    policy = "OnFailure" if restarts > 0 else "Never"

    def replica(count: int) -> dict:
        return {
            "replicas": count,
            "restartPolicy": policy,
            "template": {"spec": {"containers": [container], "volumes": [_shm_volume(k8s)]}},
        }

    specs = {"Master": replica(1)}
    if job.nodes > 1:
        specs["Worker"] = replica(job.nodes - 1)
    spec: dict = {}
    if job.nproc_per_node is not None:
        spec["nprocPerNode"] = str(job.nproc_per_node)
    spec["runPolicy"] = {"backoffLimit": restarts}
    spec["pytorchReplicaSpecs"] = specs
    return {"apiVersion": PYTORCHJOB_API, "kind": "PyTorchJob", "metadata": _metadata(k8s, job.name), "spec": spec}


def to_yaml(manifest: dict) -> str:
    import yaml  # PyYAML: OmegaConf's own dependency

    class Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data) -> bool:  # the replicas' shared parts written out in full, no &id001
            return True

    return yaml.dump(manifest, Dumper=Dumper, sort_keys=False, default_flow_style=False, width=10_000)
