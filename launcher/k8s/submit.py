"""``submit=k8s``, the pure part: the Kubeflow TrainJob / PyTorchJob for one launch, checked as the
operators and the pods will check it (launcher/k8s/backend.py shows it, writes it and creates it).

Each pod runs ``train_multigpu launcher=k8s <the overrides as typed> submit=none [-- <script args>]``
(``launcher=k8s_jax`` for a JAX launch), so every pod's launcher takes its topology from the operator's
variables (launcher/k8s/launch.py). What is rendered comes from the composition the session already
made and typed (``cfg``) and what was typed (:class:`~launcher.backends.base.Typed`): nothing is
composed again. Before anything is written, that composition is settled as node 0 and the last node of
the job will settle it (the pod's variables as the operator will set them, the GPUs and CPUs ``k8s.*``
asks for) and validated (launcher/checks.py), and the manifest passes the operators' own rules
(manifest.check).

The job's shape is ``launcher.nnodes`` pods (``k8s.nodes``: its old spelling, which must agree) of
``launcher.nproc_per_node`` ranks each.

The training script is not looked for here: it lives in the image. A secret value typed on the
command line (``+worker_env.HF_TOKEN=...``) is refused: it would have to be written into the manifest;
``k8s.secret_env=[NAME:SECRET/KEY]`` references a Kubernetes Secret instead.

Everything but :func:`create` is pure. ``kubectl`` is the only process started here: short,
synchronous calls, not a launch (launches belong to launcher/run/supervise.py).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from pathlib import Path

from .. import checks, files, nodes, secrets
from ..backends import summary as sweep_summary
from ..backends.base import Typed
from ..config.schema import K8sKind, Submit, Topology, TrainConfig
from ..errors import UserError
from ..facts import HostFacts
from ..names import PROG, override_key
from ..rundir import CONFIG, manifest_name
from . import kubectl, manifest
from . import launch as k8s_launch
from .env import PodTopology

# overrides the pods must not inherit: they pick their own launcher, never submit, write their own run dir
_DROPPED = ("launcher", "submit", "dry_run", "run_dir")
CONFIG_FLAGS = ("--config-dir", "-cd")
ENTRY = PROG  # the console script the image provides
TRAINJOB_MASTER_PORT = 29400  # Trainer v2: constants.ContainerTrainerPort
KUBECTL_TIMEOUT_S = kubectl.TIMEOUT_S


Submission = sweep_summary.Submission  # one created (or refused, or shown) job: the sweep table's row


def is_jax(cfg: TrainConfig) -> bool:
    return cfg.launcher.topology is Topology.skrl_jax


def job_overrides(overrides: Sequence[str], jax: bool) -> list[str]:
    """The pods' overrides: the user's, the launcher replaced, the submission and its keys removed.

    >>> job_overrides(["launcher=skrl_jax", "seed=3", "submit=k8s", "k8s.image=img", "dry_run=true"], True)
    ['launcher=k8s_jax', 'seed=3', 'submit=none']
    """
    kept = [o for o in overrides if override_key(o) not in _DROPPED and not override_key(o).startswith("k8s.")]
    return ["launcher=k8s_jax" if jax else "launcher=k8s", *kept, "submit=none"]


def config_flags(hydra_flags: Sequence[str]) -> list[str]:
    """``--config-dir DIR`` as typed: the directory must exist in the image at that path.

    >>> config_flags(["-m", "--config-dir", "/etc/tmg"])
    ['--config-dir', '/etc/tmg']
    """
    out: list[str] = []
    for i, flag in enumerate(hydra_flags):
        if flag in CONFIG_FLAGS and i + 1 < len(hydra_flags):
            out += [flag, hydra_flags[i + 1]]
    return out


def container_command(typed: Typed, jax: bool) -> list[str]:
    command = [ENTRY, *config_flags(typed.hydra_flags), *job_overrides(typed.overrides, jax)]
    return command + (["--", *typed.script_args] if typed.script_args else [])


def planned_nproc(cfg: TrainConfig) -> int | None:
    """Processes per pod as the manifest states it (numProcPerNode / nprocPerNode): an explicit
    count, else the GPUs asked for (device auto/cuda), else the CPUs asked for; None: each pod decides."""
    given, k8s = str(cfg.launcher.nproc_per_node).strip(), cfg.k8s
    if given.isdigit():
        return int(given)
    if given in ("auto", "gpu") and k8s.gpus_per_node > 0 and cfg.device.value != "cpu":
        return k8s.gpus_per_node
    if given in ("auto", "cpu") and k8s.cpus_per_node is not None:
        return max(1, math.floor(manifest.quantity("k8s.cpus_per_node", k8s.cpus_per_node)))
    return None


def pod_env(kind: K8sKind, name: str, nodes: int, rank: int, nproc: int | None) -> dict[str, str]:
    """The variables the operator will set in pod ``rank`` (launcher/k8s/env.py says where from)."""
    if kind is K8sKind.TrainJob:
        env = {
            "PET_NNODES": str(nodes),
            "PET_NODE_RANK": str(rank),
            "PET_MASTER_ADDR": f"{name}-{manifest.TRAINER_NODE}-0-0.{name}",
            "PET_MASTER_PORT": str(TRAINJOB_MASTER_PORT),
        }
    else:
        env = {
            "PET_NNODES": str(nodes),
            "PET_NODE_RANK": str(rank),
            "MASTER_ADDR": f"{name}-master-0",
            "MASTER_PORT": str(manifest.PYTORCH_PORT),
            "WORLD_SIZE": str(nodes * (nproc or 1)),
            "RANK": str(rank),
        }
    if nproc is not None:
        env["PET_NPROC_PER_NODE"] = str(nproc)
    return env


def pod_config(cfg: TrainConfig, overrides: Sequence[str]) -> TrainConfig:
    """The composition as ``launcher=k8s`` (or ``k8s_jax``) gives it to each pod: its topology keys
    null unless typed (the launcher option sets them null after any profile), never a submission."""
    pod = copy.deepcopy(cfg)
    typed = {override_key(o) for o in overrides}
    launcher = pod.launcher
    launcher.topology = Topology.skrl_jax if is_jax(cfg) else Topology.multinode
    launcher.from_k8s, launcher.from_slurm = True, False
    if "launcher.nnodes" not in typed:
        launcher.nnodes = None
    if "launcher.node_rank" not in typed:
        launcher.node_rank = None
    pod.submit = Submit.none
    return pod


def check_pods(cfg: TrainConfig, overrides: Sequence[str], name: str, nproc: int | None, facts: HostFacts) -> None:
    """Validate the composition as node 0 and the last node will, in the pods ``k8s.*`` asks for."""
    k8s = cfg.k8s
    cpus = facts.usable_cpus
    if k8s.cpus_per_node is not None:
        cpus = max(1, math.floor(manifest.quantity("k8s.cpus_per_node", k8s.cpus_per_node)))
    for rank in sorted({0, k8s.nodes - 1}):
        env = pod_env(k8s.kind, name, k8s.nodes, rank, nproc)
        planned = replace(
            facts,
            visible_gpus=k8s.gpus_per_node,
            gpus_source=f"k8s.gpus_per_node={k8s.gpus_per_node}",
            usable_cpus=cpus,
            env=env,
        )
        pod, planned = k8s_launch.settle(pod_config(cfg, overrides), PodTopology.from_env(env), planned)
        settled = checks.validate(pod, planned)
        if k8s.cpus_per_node is not None and settled.device == "cpu" and settled.nproc_per_node > cpus:
            raise UserError(
                "launcher.nproc_per_node",
                pod.launcher.nproc_per_node,
                f"more workers than the {cpus} CPU(s) each pod asks for (k8s.cpus_per_node={k8s.cpus_per_node})",
                f"use at most {cpus}, or ask for more with k8s.cpus_per_node=",
            )


def refuse_secret_values(vault: secrets.Vault | None, overrides: Sequence[str]) -> None:
    """A secret value typed here would have to be written into the manifest: refused, by name."""
    for override in overrides:
        path = override_key(override)
        if vault is not None and path in vault.values:
            name = path.rsplit(".", 1)[-1]
            raise UserError(
                path,
                secrets.MASK,
                "a secret value cannot travel in a Kubernetes manifest (it would be written into it)",
                f"store it in a Secret (kubectl create secret generic NAME --from-literal=KEY=...) and name it: "
                f"'k8s.secret_env=[{name}:NAME/KEY]'",
            )


def job_name(cfg: TrainConfig, number: int | None, now: datetime) -> str:
    """``k8s.job_name`` (``-<job number>`` in a sweep), else one derived from ``run_name`` and the time."""
    if cfg.k8s.job_name is not None:
        return str(cfg.k8s.job_name) + (f"-{number}" if number is not None else "")
    return manifest.derived_name(cfg.run_name or PROG, now.strftime("%Y%m%d-%H%M%S"), number)


def job_nodes(cfg: TrainConfig, overrides: Sequence[str]) -> int:
    """How many pods: ``launcher.nnodes``, or ``k8s.nodes`` (its old spelling; both set: they agree).
    A range typed as ``launcher.nnodes`` is refused first (manifest.check); one from elsewhere (a
    launcher option, a profile) is no count for the pods and is left to ``k8s.nodes``."""
    typed = set(map(override_key, overrides))
    nnodes = None if ":" in str(cfg.launcher.nnodes) else cfg.launcher.nnodes
    return nodes.job_nodes(
        nnodes, "launcher.nnodes" in typed, "k8s.nodes", cfg.k8s.nodes, "k8s.nodes" in typed, manifest.MAX_NODES
    )


# container.* keys that the pod spec has no place for: the pod runs in container.image itself
POD_FIXED = ("container.runtime", "container.runtime_flags", "container.mounts", "container.options")


def pod_image(cfg: TrainConfig, overrides: Sequence[str]) -> str | None:
    """The pods' image: ``container.image``, the one key on every back end; ``k8s.image`` is its old
    spelling, which must agree (launcher/nodes.py's alias rule, as for ``k8s.nodes``). The container
    keys a pod has no place for are refused when typed (the pod is the container: no runtime runs in it)."""
    for override in overrides:
        key = override_key(override)
        if key in POD_FIXED:
            raise UserError(
                key,
                override.split("=", 1)[1] if "=" in override else None,
                "submit=k8s runs each pod in container.image itself: no container runtime runs there",
                "leave it unset (volumes and pod options are the cluster's: docs/kubernetes.md)",
            )
    return nodes.aliased("container.image", cfg.container.image, "k8s.image", cfg.k8s.image, "the pods' image")


def build(
    cfg: TrainConfig, typed: Typed, facts: HostFacts, now: datetime, number: int | None = None
) -> tuple[str, dict]:
    """Check everything and render: (the job's name, the manifest). Writes nothing; ``cfg`` is not
    changed. ``number``: the point's number in a ``-m`` sweep."""
    typed_range = ":" in str(cfg.launcher.nnodes) and "launcher.nnodes" in map(override_key, typed.overrides)
    cfg = copy.deepcopy(cfg)
    cfg.k8s.image = pod_image(cfg, typed.overrides)
    refs = manifest.check(cfg.k8s, str(cfg.launcher.nnodes) if typed_range else None)
    k8s = cfg.k8s
    k8s.nodes = job_nodes(cfg, typed.overrides)
    name = job_name(cfg, number, now)
    manifest.check_name(k8s.kind, name, k8s.nodes, "k8s.job_name")
    nproc = planned_nproc(cfg)
    check_pods(cfg, typed.overrides, name, nproc, facts)
    command = container_command(typed, is_jax(cfg))
    if len(command) > manifest.MAX_COMMAND:
        raise UserError(
            "k8s", k8s.kind.value, f"the container command has {len(command)} arguments, at most {manifest.MAX_COMMAND}"
        )
    job = manifest.Job(name, k8s.nodes, nproc, tuple(command), refs)
    return name, manifest.render(k8s, job, cfg.launcher.max_restarts)


def manifest_file(cfg: TrainConfig) -> str:
    return manifest_name(cfg.k8s.kind.value)


def create(path: Path) -> tuple[str, str]:
    """``kubectl create -f PATH`` in the current context: (the context, the created object's ``kind/name``)."""
    saved = f"the manifest is saved: {path}"
    try:
        context = kubectl.run(["config", "current-context"], KUBECTL_TIMEOUT_S)
        if context.returncode != 0 or not context.stdout.strip():
            raise UserError(
                "submit",
                "k8s",
                f"kubectl has no current context ({kubectl.why(context)})",
                f"kubectl config use-context NAME; {saved}",
            )
        out = kubectl.run(["create", "-f", str(path), "-o", "name"], KUBECTL_TIMEOUT_S)
    except kubectl.KubectlError as err:
        hint = f"install kubectl and choose a context; {saved}" if "not on PATH" in str(err) else f"manifest: {path}"
        raise UserError("submit", "k8s", str(err), hint) from None
    if out.returncode != 0:
        raise UserError(
            "submit", "k8s", f"kubectl create failed in context {context.stdout.strip()}: {kubectl.why(out)}", saved
        )
    return context.stdout.strip(), out.stdout.strip()


def refuse_unwritable(run_dir: Path, manifest_name: str) -> None:
    """``run_dir=`` may name an existing directory: its manifest and config.yaml are written through
    (files.write_through), and one that is not a regular file (a FIFO: opening it would wait for a
    reader for good; /dev/null: kubectl would be given nothing) is refused before anything is written."""
    for name in (manifest_name, CONFIG):
        problem = files.refusal(run_dir / name, "run_dir")
        if problem is not None:
            raise UserError("run_dir", run_dir / name, problem.allowed, "choose another run_dir, or remove it")


def announce(kind: str, name: str, namespace: str | None, path: Path) -> str:
    scope = f" -n {namespace}" if namespace else ""
    pods = (
        f"trainer.kubeflow.org/trainjob-name={name}"
        if kind == K8sKind.TrainJob.value
        else f"training.kubeflow.org/job-name={name}"
    )
    return "\n".join(
        [
            f"[{PROG}] created {kind} {name}",
            f"[{PROG}]   manifest: {path}",
            f"[{PROG}]   follow:   kubectl get {kind.lower()} {name}{scope}   kubectl logs -f -l {pods}{scope}",
        ]
    )


def summary(submissions: Sequence[Submission]) -> str:
    """The sweep's table (launcher/backends/summary.py)."""
    return sweep_summary.table(submissions, id_header="job name", done="created")
