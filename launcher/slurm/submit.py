"""``submit=slurm``: from a login node, write a batch script into the run directory and ``sbatch`` it.

The job runs ``<this python> -m launcher launcher=slurm <the same overrides> submit=none
run_dir=<run dir> [-- <script args>]`` once per node (``srun --ntasks-per-node=1``), so every node's
launcher derives its topology from SLURM (launcher/slurm/launch.py). A JAX launch
(``launcher=skrl_jax``) becomes ``launcher=slurm_jax``.

Before submitting, the job's own config is composed and validated against the allocation the
``slurm.*`` keys ask for, so a mistake (more workers than ``slurm.gpus_per_node``, a missing
script, a bad ``#SBATCH`` value) fails here, in one line, not in the queue.

Everything but :func:`submit` is pure. ``sbatch`` is the only process started here: a short,
synchronous query-like call, not a launch (launches belong to launcher/run/supervise.py).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from .. import probe, record, secrets
from ..backends import summary as sweep_summary
from ..backends.base import DRY_RUN
from ..config import grammar
from ..config.schema import SlurmConfig, Topology, TrainConfig
from ..errors import UserError
from ..names import PROG, override_key
from ..probe import HostFacts
from . import batch
from .env import SlurmAllocation

SCRIPT_NAME = "job.sbatch"
# overrides the job must not inherit: it picks its own launcher, never submits, writes into run_dir
_DROPPED = ("launcher", "submit", "dry_run", "run_dir")
# Hydra flags that change which configs exist: the job needs them too
_PLAIN_PATH = re.compile(r"/[A-Za-z0-9_./-]*\Z")  # a path Hydra reads back as the same string
CONFIG_FLAGS = ("--config-dir", "-cd", "--config-path", "-cp", "--config-name", "-cn")


@dataclass(frozen=True)
class Submission:
    """One submitted (or refused) job, for the summary table."""

    overrides: tuple[str, ...]
    run_dir: str
    job_id: str | None = None
    error: str | None = None

    @property
    def log(self) -> str:
        return f"{self.run_dir}/slurm-{self.job_id or '%j'}.out"


def job_overrides(overrides: Sequence[str], jax: bool, run_dir: str) -> list[str]:
    """The job's overrides: the user's, with the launcher replaced and the submission removed.

    >>> job_overrides(["launcher=skrl_jax", "seed=3", "submit=slurm", "slurm.nodes=2"], True, "/r/1")
    ['launcher=slurm_jax', 'seed=3', 'slurm.nodes=2', 'submit=none', 'run_dir=/r/1']
    """
    kept = [o for o in overrides if override_key(o) not in _DROPPED]
    value = run_dir if _PLAIN_PATH.match(run_dir) else grammar.quote(run_dir)
    return ["launcher=slurm_jax" if jax else "launcher=slurm", *kept, "submit=none", f"run_dir={value}"]


def config_flags(hydra_flags: Sequence[str]) -> list[str]:
    """The Hydra flags the job needs (--config-dir and friends), with their values.

    >>> config_flags(["-m", "--config-dir", "/etc/tmg", "--cfg", "job"])
    ['--config-dir', '/etc/tmg']
    """
    out: list[str] = []
    for i, flag in enumerate(hydra_flags):
        if flag in CONFIG_FLAGS and i + 1 < len(hydra_flags):
            value = hydra_flags[i + 1]
            if flag in ("--config-dir", "-cd", "--config-path", "-cp"):
                value = os.path.abspath(value)
            out += [flag, value]
    return out


def job_command(python: str, flags: Sequence[str], overrides: Sequence[str], script_args: Sequence[str]) -> list[str]:
    """``<python> -m launcher [config flags] overrides [-- script args]``."""
    command = [python, "-m", "launcher", *flags, *overrides]
    return command + (["--", *script_args] if script_args else [])


def planned_allocation(slurm: SlurmConfig) -> SlurmAllocation:
    """The allocation ``slurm.*`` asks for, as node 0 of the job will see it."""
    return SlurmAllocation(
        job_id="to be submitted",
        nnodes=slurm.nodes,
        node_rank=0,
        hosts=tuple(f"node{i}" for i in range(slurm.nodes)),
        cpus_per_task=slurm.cpus_per_task,
        ntasks_per_node=1,  # GPUs: planned_facts says how many
    )


def planned_facts(slurm: SlurmConfig, facts: HostFacts) -> HostFacts:
    """A compute node's facts as far as the request says (GPUs asked for; CPUs unknown: not limiting)."""
    return replace(
        facts,
        visible_gpus=slurm.gpus_per_node,
        gpus_source=f"slurm.gpus_per_node={slurm.gpus_per_node}",
        usable_cpus=slurm.cpus_per_task or facts.usable_cpus,
    )


def script_text(cfg: TrainConfig, command: Sequence[str], run_dir: str, workdir: str) -> str:
    job_name = cfg.slurm.job_name or cfg.run_name or PROG
    return batch.render(cfg.slurm, command, {}, workdir, job_name, f"{run_dir}/slurm-%j.out")


def submit(
    script: str, run_dir: Path, overrides: Sequence[str], resolved_yaml: str, secret_env: dict | None = None
) -> Submission:
    """Write ``job.sbatch`` (and the resolved config) into ``run_dir``; ``sbatch --parsable`` it.
    ``secret_env``: secret values the job reads from its environment (``${oc.env:NAME}`` in its
    command): given to sbatch's environment only, which passes it to the job (``--export=ALL``)."""
    path = run_dir / SCRIPT_NAME
    path.write_text(script)
    path.chmod(0o755)
    (run_dir / "config.yaml").write_text(resolved_yaml)
    sbatch = shutil.which("sbatch")
    if sbatch is None:
        raise UserError(
            "submit", "slurm", "sbatch is not on PATH", f"submit from a SLURM login node; the script is {path}"
        )
    try:
        out = subprocess.run(
            [sbatch, "--parsable", str(path)],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, **(secret_env or {})},
        )
    except subprocess.TimeoutExpired:
        raise UserError("submit", "slurm", "sbatch did not answer within 120 s", f"script: {path}") from None
    if out.returncode != 0:
        why = " ".join(line.strip() for line in out.stderr.strip().splitlines()[-2:]) or f"exit code {out.returncode}"
        raise UserError("submit", "slurm", f"sbatch refused the job: {why}", f"script: {path}")
    job_id = out.stdout.strip().split(";")[0]
    submission = Submission(tuple(overrides), str(run_dir), job_id)
    record.write_json(
        run_dir / "submit.json",
        {"job_id": job_id, "script": str(path), "log": submission.log, "overrides": list(overrides)},
    )
    return submission


def announce(submission: Submission) -> str:
    job = submission.job_id
    return "\n".join(
        [
            f"[{PROG}] submitted SLURM job {job}",
            f"[{PROG}]   script: {submission.run_dir}/{SCRIPT_NAME}",
            f"[{PROG}]   log:    {submission.log}   (per-rank logs under {submission.run_dir}/logs)",
            f"[{PROG}]   follow: squeue -j {job}   scontrol show job {job}   tail -f {submission.log}",
        ]
    )


def summary(submissions: Sequence[Submission]) -> str:
    """The sweep's table (launcher/backends/summary.py)."""
    return sweep_summary.table(submissions)


def interpreter() -> str:
    """The interpreter the job re-invokes the launcher with: this one."""
    return sys.executable


def _job_config(
    job_overrides_: Sequence[str], script_args: Sequence[str], presets: dict[str, list[str]] | None = None
) -> TrainConfig:
    """The job's config, composed as the job will compose it (inside the running Hydra app)."""
    from hydra import compose as hydra_compose
    from omegaconf.errors import OmegaConfBaseException

    from ..config import compose, profiles

    # the same profile search path the CLI gives Hydra (--config-dir is already in the app's)
    searchpath = profiles.searchpath_override(os.environ, os.getcwd())
    try:
        job = compose.to_typed(hydra_compose(compose.CONFIG_NAME, overrides=[searchpath, *job_overrides_]), presets)
    except OmegaConfBaseException as err:
        raise UserError.from_omegaconf(err) from err
    job.script_args += list(script_args)
    return job


def check_job(job: TrainConfig, facts: HostFacts) -> None:
    """Validate the job's config against the allocation it asks for, as node 0 will."""
    from .. import checks
    from . import launch as slurm_launch

    job, node_facts = slurm_launch.settle(job, planned_allocation(job.slurm), planned_facts(job.slurm, facts))
    settled = checks.validate(job, node_facts)
    probe.script_exists(job, settled.script, before_submit=True)


def check_export(slurm: SlurmConfig, names: Sequence[str]) -> None:
    """Secrets reach the job through sbatch's environment: ``slurm.extra.export`` must pass them.

    >>> check_export(SlurmConfig(extra={"export": "NONE"}), ["HF_TOKEN"])
    Traceback (most recent call last):
    ...
    launcher.errors.UserError: slurm.extra.export=NONE: must pass HF_TOKEN to the job: secret values reach it through sbatch's environment, never the batch script (e.g. slurm.extra.export=ALL, or 'slurm.extra.export="NONE,HF_TOKEN"')
    """  # noqa: E501
    value = slurm.extra.get("export")
    if not names or value is None or isinstance(value, bool):  # false: no directive, sbatch's default ALL
        return
    items = [item.strip().split("=", 1)[0] for item in str(value).split(",")]
    missing = [name for name in names if "ALL" not in items and name not in items]
    if missing:
        raise UserError(
            "slurm.extra.export",
            value,
            f"must pass {', '.join(missing)} to the job: secret values reach it "
            "through sbatch's environment, never the batch script",
            f"""e.g. slurm.extra.export=ALL, or 'slurm.extra.export="{value},{",".join(missing)}"'""",
        )


def run(
    cfg: TrainConfig,
    overrides: Sequence[str],
    hydra_flags: Sequence[str],
    script_args: Sequence[str],
    make_run_dir,
    facts: HostFacts,
    submissions: list,
    resolved_yaml: str,
    vault: secrets.Vault | None = None,
    presets: dict[str, list[str]] | None = None,
    check_only: bool = False,
) -> int:
    """Submit one job for ``cfg`` (one sweep point); append its :class:`Submission` to ``submissions``.
    ``make_run_dir(cfg, create)`` gives the job's run directory (``create=False``: the one a real
    submission would create, for the dry run). ``check_only``: validate, write and submit nothing.
    ``overrides`` show secrets masked (see launcher/secrets.py); the job's command names them as
    ``${oc.env:NAME}`` and sbatch's environment carries their values (``vault``). ``presets``: the
    forwarded presets (compose.open_presets), for the job's own check."""
    overrides = tuple(overrides)
    by_reference, secret_env = (vault or secrets.Vault()).by_reference(overrides)
    try:
        check_export(cfg.slurm, list(secret_env))
        jax = cfg.launcher.topology is Topology.skrl_jax
        planned_dir = str(make_run_dir(cfg, False))
        batch.check(cfg.slurm)  # names a bad slurm.* key before any directory exists
        check_job(_job_config(job_overrides(overrides, jax, planned_dir), script_args, presets), facts)
        if check_only:
            return 0
        run_dir = planned_dir if cfg.dry_run else str(make_run_dir(cfg, True))
        command = job_command(
            interpreter(), config_flags(hydra_flags), job_overrides(by_reference, jax, run_dir), script_args
        )
        text = script_text(cfg, command, run_dir, os.getcwd())
        if cfg.dry_run:
            print(f"# {run_dir}/{SCRIPT_NAME} (dry run: nothing written, nothing submitted)")
            print(text, end="")
            submissions.append(Submission(overrides, run_dir, None, DRY_RUN))
            return 0
        submission = submit(text, Path(run_dir), overrides, resolved_yaml, secret_env)
    except UserError as err:
        if not check_only:
            submissions.append(Submission(overrides, "", None, str(err)))
        raise
    submissions.append(submission)
    print(announce(submission), flush=True)
    return 0
