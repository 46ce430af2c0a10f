"""The Ray job for one launch, from the config the session composed (PURE: no I/O, no Ray import).

The job carries the session's resolved config (secret values masked, see below) in its runtime_env
as ``TRAIN_MULTIGPU_RAY_CONFIG``; its entrypoint ``<ray.python> -m launcher.ray_submit.job`` launches
from that text (launcher/ray_submit/job.py) and composes nothing from the user's overrides again: a
profile, a preset or ``$ISAACLAB_PATH`` that differs on the cluster changes nothing. What the cluster
adds are the values only it knows: each node's ``launcher.node_rank`` and node 0's address and port
(multi-node), nothing else.

Secret values (launcher/secrets.py: ``worker_env``/``profile.env`` entries, and the secret-named
``ray.runtime_env.env_vars``) never enter the runtime_env, the entrypoint or the metadata: Ray's
runtime_env agent writes the whole runtime_env into the head's session logs, and the GCS keeps and
shows the rest. The config text shows ``***`` for them; the values travel in :attr:`JobSpec.secrets`,
which the submitter (submit.py) stores in Ray's internal KV, XOR-ed with a one-time pad, through the
dashboard's package upload; the runtime_env carries only ``TRAIN_MULTIGPU_RAY_SECRETS`` = the KV key and
the pad. The entrypoint (job.py) reads the entry through its own GCS connection, deletes it, and puts the
values into its environment, where the launch finds them as before (:func:`reveal`). What is shown or
(the dry run) is :meth:`JobSpec.shown`: the secrets' names only.

Resources: one node: the entrypoint reserves ``nproc_per_node × ray.num_cpus_per_rank`` CPUs and
``× ray.num_gpus_per_rank`` GPUs (Ray sets the entrypoint's CUDA_VISIBLE_DEVICES). ``launcher.nnodes=N``:
the entrypoint reserves nothing; it asks for a STRICT_SPREAD placement group of N such bundles, one
per node, and starts one train_multigpu per bundle.
"""

from __future__ import annotations

import copy
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .. import secrets
from ..config.schema import Device, Topology, TrainConfig
from ..errors import UserError
from ..names import PROG
from ..names import RAY_CONFIG_VAR as CONFIG_VAR  # the resolved config the job launches from

# the order the script-bound values were typed in (grammar.CommandLine.order, JSON): the training
# script's arguments come out in the same order as a launch on the submitting machine
ORDER_VAR = "TRAIN_MULTIGPU_RAY_ORDER"
# "<KV key> <pad, hex>": where the job's secret values wait in Ray's internal KV, and their one-time pad
SECRETS_VAR = "TRAIN_MULTIGPU_RAY_SECRETS"
JOB_MODULE = "launcher.ray_submit.job"
# every node's launch: the command-line entry (python -m launcher), the carried config in CONFIG_VAR
LAUNCH_MODULE = "launcher"
# Ray's job supervisor waits this long after its SIGTERM before SIGKILL (its default: 3 s): the
# launcher's grace period, plus time to write its record
STOP_WAIT_VAR = "RAY_JOB_STOP_WAIT_TIME_S"
STOP_WAIT_MARGIN_S = 15
HINT = "docs/ray.md"
# the password of http://USER:PASSWORD@HOST (greedy: a password may hold '@'; the host part never has '/')
CREDENTIALS = re.compile(r"^((?:[A-Za-z][A-Za-z0-9+.-]*://)?[^:/@\s]*):([^/\s]*)@")


@dataclass(frozen=True)
class JobSpec:
    """What ``JobSubmissionClient.submit_job`` gets."""

    entrypoint: str
    runtime_env: Mapping[str, Any]
    entrypoint_num_cpus: float = 0
    entrypoint_num_gpus: float = 0
    metadata: Mapping[str, str] = field(default_factory=dict)
    nnodes: int = 1
    bundle: Mapping[str, float] = field(default_factory=dict)  # nnodes > 1: each node's reservation
    # the secret values, by variable name: never in runtime_env (see the module docstring)
    secrets: Mapping[str, str] = field(default_factory=dict, repr=False)

    def with_secrets_at(self, reference: str) -> JobSpec:
        """The spec whose runtime_env tells the entrypoint where its secrets wait (``SECRETS_VAR``)."""
        runtime_env = copy.deepcopy(dict(self.runtime_env))
        runtime_env["env_vars"] = {**runtime_env.get("env_vars", {}), SECRETS_VAR: reference}
        return replace(self, runtime_env=runtime_env)

    def submit_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = dict(
            entrypoint=self.entrypoint, runtime_env=dict(self.runtime_env), metadata=dict(self.metadata)
        )
        if self.entrypoint_num_cpus:
            kwargs["entrypoint_num_cpus"] = self.entrypoint_num_cpus
        if self.entrypoint_num_gpus:
            kwargs["entrypoint_num_gpus"] = self.entrypoint_num_gpus
        return kwargs

    def shown(self) -> dict[str, Any]:
        """The spec as printed and recorded: secret variables masked, the carried config named only."""
        runtime_env = copy.deepcopy(dict(self.runtime_env))
        env_vars = dict(runtime_env.get("env_vars", {}))
        if CONFIG_VAR in env_vars:
            env_vars[CONFIG_VAR] = "<the resolved config: config.yaml>"
        if self.secrets:
            env_vars[SECRETS_VAR] = secrets.MASK  # the KV key and the one-time pad
        runtime_env["env_vars"] = secrets.mask_env(env_vars)
        shown: dict[str, Any] = {
            "entrypoint": self.entrypoint,
            "entrypoint_num_cpus": self.entrypoint_num_cpus,
            "entrypoint_num_gpus": self.entrypoint_num_gpus,
            "runtime_env": runtime_env,
            "metadata": dict(self.metadata),
        }
        if self.secrets:
            shown["secrets"] = secrets.mask_env(dict(self.secrets))
        if self.nnodes > 1:
            shown["placement_group"] = {"strategy": "STRICT_SPREAD", "bundles": [dict(self.bundle)] * self.nnodes}
        return shown


def shown_address(where: str) -> str:
    """The address as every message and record shows it: a password masked.

    >>> shown_address("http://me:pa@ss@head:8265/")
    'http://me:***@head:8265/'
    >>> shown_address("http://head:8265")
    'http://head:8265'
    """
    return CREDENTIALS.sub(r"\1:***@", where, count=1)


def nproc(cfg: TrainConfig) -> int:
    """The ranks per node: a number, since Ray reserves their resources before the job starts.

    >>> from launcher.config.schema import TrainConfig
    >>> cfg = TrainConfig(); cfg.launcher.nproc_per_node = "2"; nproc(cfg)
    2
    """
    why = "submit=ray reserves every rank's CPUs/GPUs on the cluster before the job starts"
    return _count("nproc_per_node", cfg.launcher.nproc_per_node, why, "e.g. launcher.nproc_per_node=2")


def nnodes(cfg: TrainConfig) -> int:
    why = "submit=ray reserves a fixed number of nodes (one placement-group bundle each)"
    return _count("nnodes", cfg.launcher.nnodes, why, HINT)


def _count(key: str, value, why: str, hint: str) -> int:
    """``launcher.<key>`` as a fixed count >= 1 (Ray reserves it), or the error saying why it must be."""
    text = str(value)
    if not text.isdigit() or int(text) < 1:
        raise UserError(f"launcher.{key}", text, f"{why}: an integer >= 1", hint)
    return int(text)


def gpus_per_rank(cfg: TrainConfig) -> float:
    if cfg.ray.num_gpus_per_rank is not None:
        return cfg.ray.num_gpus_per_rank
    return 1.0 if cfg.device is Device.cuda else 0.0


def check(cfg: TrainConfig) -> None:
    """The ``ray.*`` keys and what Ray must be told (before any directory exists)."""
    if cfg.launcher.from_slurm:
        name = "slurm_jax" if cfg.launcher.topology is Topology.skrl_jax else "slurm"
        raise UserError(
            "launcher",
            name,
            "reads its topology from a SLURM allocation; a Ray job runs on a Ray cluster",
            "drop launcher=; launcher.nnodes=N gives several nodes",
        )
    nproc(cfg)
    nodes = nnodes(cfg)
    if cfg.ray.num_cpus_per_rank < 0:
        raise UserError("ray.num_cpus_per_rank", cfg.ray.num_cpus_per_rank, "a number >= 0", HINT)
    if cfg.ray.num_gpus_per_rank is not None and cfg.ray.num_gpus_per_rank < 0:
        raise UserError("ray.num_gpus_per_rank", cfg.ray.num_gpus_per_rank, "a number >= 0", HINT)
    if not str(cfg.ray.python).strip():
        raise UserError("ray.python", cfg.ray.python, "the interpreter that runs train_multigpu on the cluster", HINT)
    env_vars = cfg.ray.runtime_env.get("env_vars", {})
    if not isinstance(env_vars, Mapping):
        raise UserError("ray.runtime_env.env_vars", env_vars, "a map of variable names to strings", HINT)
    for name in (CONFIG_VAR, ORDER_VAR, SECRETS_VAR):
        if name in env_vars:
            raise UserError(f"ray.runtime_env.env_vars.{name}", secrets.MASK, "set by train_multigpu itself", HINT)
    if nodes > 1:
        chosen = ("rdzv_endpoint", "master_addr", "master_port", "coordinator_address")
        for key in chosen:
            value = getattr(cfg.launcher, key)
            if value is not None:
                raise UserError(
                    f"launcher.{key}",
                    value,
                    "submit=ray chooses node 0's address and a free port on the cluster",
                    "leave it out (docs/ray.md)",
                )
        if cfg.launcher.node_rank not in (None, 0):
            raise UserError(
                "launcher.node_rank", cfg.launcher.node_rank, "submit=ray gives every node its rank", "leave it out"
            )


def planned_facts(cfg: TrainConfig, facts):
    """A cluster node's facts as far as the reservation says: the GPUs and CPUs reserved for its ranks."""
    import math

    ranks = nproc(cfg)
    gpus = math.floor(ranks * gpus_per_rank(cfg))
    return replace(
        facts,
        visible_gpus=gpus,
        gpus_source=f"ray: {ranks} rank(s) x ray.num_gpus_per_rank={gpus_per_rank(cfg):g}",
        usable_cpus=max(ranks, math.ceil(ranks * cfg.ray.num_cpus_per_rank)),
        env={k: v for k, v in facts.env.items() if k != "CUDA_VISIBLE_DEVICES"},
    )


def job_config(cfg: TrainConfig, run_dir: str) -> TrainConfig:
    """The config the job launches from: runs on the cluster (submit=none), into ``run_dir``;
    ``launcher.nnodes>1`` on torchrun's single-node topology becomes ``launcher=multinode``."""
    job = copy.deepcopy(cfg)
    job.submit = type(cfg.submit).none
    job.dry_run = False
    job.run_dir = run_dir
    if job.ray.address:  # unused there (submit=none), and the runtime_env it travels in is logged
        job.ray.address = shown_address(str(job.ray.address))
    if nnodes(cfg) > 1 and job.launcher.topology is Topology.single_node:
        job.launcher.topology = Topology.multinode
    return job


def secret_env(cfg: TrainConfig) -> dict[str, str]:
    """The secret values, by variable name, to travel apart from the config and the runtime_env:
    ``profile.env``, then ``ray.runtime_env.env_vars``, then ``worker_env`` (which wins, as in the
    workers' environment).

    >>> from launcher.config.schema import TrainConfig
    >>> cfg = TrainConfig(worker_env={"HF_TOKEN": "abc", "X": "1"}); secret_env(cfg)
    {'HF_TOKEN': 'abc'}
    """
    out: dict[str, str] = {}
    for section in ("profile.env", "ray.runtime_env.env_vars", "worker_env"):
        for name, value in secrets.section_env(cfg, section).items():
            if secrets.is_secret(name) and value is not None and str(value):
                out[str(name)] = str(value)
    return out


def config_text(job: TrainConfig) -> str:
    """The job's resolved config as YAML that composes back to the same values: secrets masked, and
    every ``${`` escaped, so that text the user typed (a forwarded argument) is never interpolated."""
    from omegaconf import OmegaConf

    data = OmegaConf.to_container(OmegaConf.structured(secrets.mask_config(job)), enum_to_str=True)
    return OmegaConf.to_yaml(OmegaConf.create(_escaped(data)))


def _escaped(value):
    if isinstance(value, str):
        return value.replace("\\${", "\\\\${").replace("${", "\\${")
    if isinstance(value, dict):
        return {key: _escaped(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_escaped(item) for item in value]
    return value


def build(cfg: TrainConfig, run_dir: str, order: Sequence[str] = ()) -> JobSpec:
    """The job for ``cfg`` (checked by :func:`check`), recording into ``run_dir`` on the cluster;
    ``order``: the session's typed order (grammar.CommandLine.order)."""
    import json

    job = job_config(cfg, run_dir)
    ranks, nodes = nproc(cfg), nnodes(cfg)
    cpus, gpus = ranks * cfg.ray.num_cpus_per_rank, ranks * gpus_per_rank(cfg)
    runtime_env = copy.deepcopy(dict(cfg.ray.runtime_env))
    hidden = secret_env(cfg)
    env_vars = {str(k): str(v) for k, v in dict(runtime_env.get("env_vars") or {}).items()}
    env_vars = {k: v for k, v in env_vars.items() if not (secrets.is_secret(k) and k in hidden)}
    env_vars.setdefault(STOP_WAIT_VAR, str(int(cfg.launcher.grace_period) + STOP_WAIT_MARGIN_S))
    env_vars[CONFIG_VAR] = config_text(job)
    env_vars[ORDER_VAR] = json.dumps(list(order))
    runtime_env["env_vars"] = env_vars
    entrypoint = shlex.join([str(cfg.ray.python), "-m", JOB_MODULE])
    metadata = {"train_multigpu_run_dir": run_dir}
    if cfg.run_name:
        metadata["train_multigpu_run_name"] = cfg.run_name
    if nodes == 1:
        return JobSpec(entrypoint, runtime_env, cpus, gpus, metadata, secrets=hidden)
    bundle = {"CPU": cpus} | ({"GPU": gpus} if gpus else {})
    return JobSpec(entrypoint, runtime_env, 0, 0, metadata, nodes, bundle, secrets=hidden)


def node_overrides(cfg: TrainConfig, node_rank: int, host: str, port: int, rdzv_id: str) -> list[str]:
    """What one node of a multi-node job adds to the carried config (launcher/ray_submit/job.py).

    >>> from launcher.config.schema import TrainConfig, Topology
    >>> cfg = TrainConfig(); cfg.launcher.topology = Topology.multinode
    >>> node_overrides(cfg, 1, "10.0.0.5", 29400, "raysubmit_x")
    ['launcher.node_rank=1', 'launcher.rdzv_endpoint=10.0.0.5:29400', 'launcher.rdzv_id=raysubmit_x']
    """
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    out = [f"launcher.node_rank={node_rank}"]
    if cfg.launcher.topology is Topology.skrl_jax:
        return out + [f"launcher.coordinator_address={address}"]
    out.append(f"launcher.rdzv_endpoint={address}")
    if cfg.launcher.rdzv_id is None:
        out.append(f"launcher.rdzv_id={rdzv_id}")
    return out


def node0_check_config(cfg: TrainConfig) -> TrainConfig:
    """Node 0's config as the cluster will make it, to validate before submitting (the address is a
    placeholder: checks.validate resolves nothing)."""
    job = job_config(cfg, cfg.run_dir or "/")
    if nnodes(cfg) == 1:
        return job
    launcher = replace(job.launcher, node_rank=0)
    if job.launcher.topology is Topology.skrl_jax:
        launcher = replace(launcher, coordinator_address="ray-node-0:1")
    else:
        launcher = replace(launcher, rdzv_endpoint="ray-node-0:1")
    return replace(job, launcher=launcher)


def describe(spec: JobSpec, run_dir: str) -> str:
    """The dry run's text: the job specification, then the config it carries."""
    import json

    lines = [
        f"# {PROG}: Ray job (dry run: nothing written, nothing submitted); run directory: {run_dir}",
        json.dumps(spec.shown(), indent=2),
    ]
    if spec.nnodes > 1:
        lines.append(
            f"# on the cluster: a STRICT_SPREAD placement group of {spec.nnodes} bundles {dict(spec.bundle)}; "
            f"node R runs {spec.entrypoint} launcher.node_rank=R with node 0's address and a free port "
            "as the rendezvous endpoint / JAX coordinator"
        )
    lines.append(f"# {CONFIG_VAR} (the resolved config the job launches from):")
    lines.append(spec.runtime_env["env_vars"][CONFIG_VAR].rstrip("\n"))
    return "\n".join(lines)
