"""``submit=k8s``: from a workstation, write a Kubeflow TrainJob / PyTorchJob into the run directory and
``kubectl create`` it in the current context.

Each pod runs ``train_multigpu launcher=k8s <the overrides as typed> submit=none [-- <script args>]``
(``launcher=k8s_jax`` for a JAX launch), so every pod's launcher takes its topology from the operator's
variables (launcher/k8s/launch.py). What is rendered comes from the composition the session already
made and typed (``cfg``) and the overrides as typed (:class:`Composition`): nothing is composed again.
Before anything is written, that composition is settled as node 0 and the last node of the job will
settle it (the pod's variables as the operator will set them, the GPUs and CPUs ``k8s.*`` asks for) and
validated (launcher/checks.py), and the manifest passes the operators' own rules (manifest.check).

The training script is not looked for here: it lives in the image. A secret value typed on the
command line (``+worker_env.HF_TOKEN=...``) is refused: it would have to be written into the manifest;
``k8s.secret_env=[NAME:SECRET/KEY]`` references a Kubernetes Secret instead.

Everything but :func:`create` is pure. ``kubectl`` is the only process started here: short,
synchronous calls, not a launch (launches belong to launcher/run/supervise.py).
"""

from __future__ import annotations

import copy
import math
import re
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

from .. import checks, files, probe, record, secrets
from ..backends import summary as sweep_summary
from ..backends.base import DRY_RUN
from ..config.schema import K8sKind, Submit, Topology, TrainConfig
from ..errors import EXIT_USAGE, UserError
from ..names import PROG, override_key
from ..probe import HostFacts
from . import launch as k8s_launch
from . import manifest
from .env import PodTopology

# overrides the pods must not inherit: they pick their own launcher, never submit, write their own run dir
_DROPPED = ("launcher", "submit", "dry_run", "run_dir")
CONFIG_FLAGS = ("--config-dir", "-cd")
ENTRY = PROG  # the console script the image provides
TRAINJOB_MASTER_PORT = 29400  # Trainer v2: constants.ContainerTrainerPort
KUBECTL_TIMEOUT_S = 120


@dataclass(frozen=True)
class Composition:
    """What the user typed, as the session holds it (``overrides``: Hydra's task overrides, secret values
    masked; ``sweep_job``: the job's number in a ``-m`` sweep)."""

    overrides: tuple[str, ...]
    hydra_flags: tuple[str, ...] = ()
    script_args: tuple[str, ...] = ()
    sweep_job: int | None = None


@dataclass(frozen=True)
class Submission:
    """One created (or refused, or dry-run) job, for the sweep's table (``job_id``: the job's name;
    ``error`` is ``DRY_RUN`` for a dry run's)."""

    overrides: tuple[str, ...]
    run_dir: str
    job_id: str | None = None
    error: str | None = None


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


def container_command(composition: Composition, jax: bool) -> list[str]:
    command = [ENTRY, *config_flags(composition.hydra_flags), *job_overrides(composition.overrides, jax)]
    return command + (["--", *composition.script_args] if composition.script_args else [])


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


def build(cfg: TrainConfig, composition: Composition, facts: HostFacts, now: datetime) -> tuple[str, dict]:
    """Check everything and render: (the job's name, the manifest). Writes nothing."""
    k8s = cfg.k8s
    typed_range = ":" in str(cfg.launcher.nnodes) and "launcher.nnodes" in map(override_key, composition.overrides)
    refs = manifest.check(k8s, str(cfg.launcher.nnodes) if typed_range else None)
    name = job_name(cfg, composition.sweep_job, now)
    manifest.check_name(k8s.kind, name, k8s.nodes, "k8s.job_name")
    nproc = planned_nproc(cfg)
    check_pods(cfg, composition.overrides, name, nproc, facts)
    command = container_command(composition, is_jax(cfg))
    if len(command) > manifest.MAX_COMMAND:
        raise UserError(
            "k8s", k8s.kind.value, f"the container command has {len(command)} arguments, at most {manifest.MAX_COMMAND}"
        )
    job = manifest.Job(name, k8s.nodes, nproc, tuple(command), refs)
    return name, manifest.render(k8s, job, cfg.launcher.max_restarts)


def manifest_file(cfg: TrainConfig) -> str:
    return f"{cfg.k8s.kind.value.lower()}.yaml"


def _kubectl(kubectl: str, args: Sequence[str], path: Path) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(  # its output may not be UTF-8 (a plugin's, a proxy's page): replaced, not a traceback
            [kubectl, *args], capture_output=True, encoding="utf-8", errors="replace", timeout=KUBECTL_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        raise UserError(
            "submit", "k8s", f"kubectl {args[0]} did not answer within {KUBECTL_TIMEOUT_S} s", f"manifest: {path}"
        ) from None


# kubectl's own log lines (klog: W1201 17:09:47.067663   27687 loader.go:223] Config not found: ...),
# printed before its error by some versions: not the error
_KLOG = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ \S+:\d+\] ")


def _why(out: subprocess.CompletedProcess) -> str:
    r"""kubectl's error: its last two lines, its log lines left out when it said more.

    >>> _why(subprocess.CompletedProcess([], 1, "", "W1201 17:09:47.067663   27687 loader.go:223] Config not found: /x\nerror: current-context is not set\n"))
    'error: current-context is not set'
    """  # noqa: E501
    lines = [line.strip() for line in (out.stderr or out.stdout).strip().splitlines() if line.strip()]
    lines = [line for line in lines if not _KLOG.match(line)] or lines
    return " ".join(lines[-2:]) or f"exit code {out.returncode}"


def create(path: Path) -> str:
    """``kubectl create -f PATH`` in the current context; the created object's ``kind/name``."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        raise UserError(
            "submit",
            "k8s",
            "kubectl is not on PATH",
            f"install kubectl and choose a context; the manifest is saved: {path}",
        )
    context = _kubectl(kubectl, ["config", "current-context"], path)
    if context.returncode != 0 or not context.stdout.strip():
        raise UserError(
            "submit",
            "k8s",
            f"kubectl has no current context ({_why(context)})",
            f"kubectl config use-context NAME; the manifest is saved: {path}",
        )
    out = _kubectl(kubectl, ["create", "-f", str(path), "-o", "name"], path)
    if out.returncode != 0:
        raise UserError(
            "submit",
            "k8s",
            f"kubectl create failed in context {context.stdout.strip()}: {_why(out)}",
            f"the manifest is saved: {path}",
        )
    return out.stdout.strip()


def refuse_unwritable(run_dir: Path, manifest_name: str) -> None:
    """``run_dir=`` may name an existing directory: its manifest and config.yaml are written through
    (files.write_through), and one that is not a regular file (a FIFO: opening it would wait for a
    reader for good; /dev/null: kubectl would be given nothing) is refused before anything is written."""
    for name in (manifest_name, "config.yaml"):
        problem = files.refusal(run_dir / name, "run_dir")
        if problem is not None:
            raise UserError("run_dir", run_dir / name, problem.allowed, "choose another run_dir, or remove it")


def run(
    cfg: TrainConfig,
    composition: Composition,
    make_run_dir: Callable[..., Path],
    submissions: list,
    resolved_yaml: Callable[[], str],
    vault: secrets.Vault | None = None,
    check_only: bool = False,
    facts: HostFacts | None = None,
    now: datetime | None = None,
) -> int:
    """Create one job for ``cfg`` (one sweep point); append its :class:`Submission` to ``submissions``.
    ``make_run_dir(cfg, create)`` gives the run directory (``create=False``: where a real submission
    would write, for the dry run). ``check_only``: validate, write and create nothing.

    A sweep point that fails here is one row of the sweep's table (:func:`summary`), its error in it:
    the point returns exit code 2 rather than raising, which would print the same line once more."""
    overrides = tuple(composition.overrides)
    try:
        refuse_secret_values(vault, overrides)
        name, rendered = build(cfg, composition, facts or probe.gather(), now or datetime.now())
        if check_only:
            return 0
        text = manifest.to_yaml(rendered)
        planned_dir = str(make_run_dir(cfg, False))
        if cfg.dry_run:
            refuse_unwritable(Path(planned_dir), manifest_file(cfg))
            print(f"# {planned_dir}/{manifest_file(cfg)} (dry run: nothing written, nothing created)")
            print(text, end="")
            submissions.append(Submission(overrides, planned_dir, name, DRY_RUN))
            return 0
        run_dir = Path(make_run_dir(cfg, True))
        path = run_dir / manifest_file(cfg)
        refuse_unwritable(run_dir, path.name)
        files.write_through(path, text.encode(), "run_dir")
        files.write_through(run_dir / "config.yaml", resolved_yaml().encode(), "run_dir")
        created = create(path)
    except UserError as err:
        if check_only:
            raise
        submissions.append(Submission(overrides, "", None, str(err)))
        if composition.sweep_job is None:
            raise
        return EXIT_USAGE
    record.write_json(
        run_dir / "submit.json",
        {
            "kind": cfg.k8s.kind.value,
            "name": name,
            "namespace": cfg.k8s.namespace,
            "created": created,
            "manifest": str(path),
            "overrides": list(overrides),
        },
    )
    submissions.append(Submission(overrides, str(run_dir), name))
    print(announce(cfg, name, path), flush=True)
    return 0


def announce(cfg: TrainConfig, name: str, path: Path) -> str:
    kind = cfg.k8s.kind.value.lower()
    namespace = f" -n {cfg.k8s.namespace}" if cfg.k8s.namespace else ""
    pods = (
        f"trainer.kubeflow.org/trainjob-name={name}"
        if cfg.k8s.kind is K8sKind.TrainJob
        else f"training.kubeflow.org/job-name={name}"
    )
    return "\n".join(
        [
            f"[{PROG}] created {cfg.k8s.kind.value} {name}",
            f"[{PROG}]   manifest: {path}",
            f"[{PROG}]   follow:   kubectl get {kind} {name}{namespace}   kubectl logs -f -l {pods}{namespace}",
        ]
    )


def summary(submissions: Sequence[Submission]) -> str:
    """The sweep's table (launcher/backends/summary.py)."""
    return sweep_summary.table(submissions, id_header="job name", done="created")
