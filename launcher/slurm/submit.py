"""``submit=slurm``'s pure helpers: the job's command (its overrides, its Hydra flags), the allocation
the request plans for node 0, the secrets check, and a sweep's summary table. The back end that
uses them (dryrun, sbatch, squeue, scancel) is launcher/slurm/backend.py.

The job runs ``<this python> -m launcher launcher=slurm <the same overrides> submit=none
run_dir=<run dir> [-- <script args>]`` once per node (``srun --ntasks-per-node=1``), so every node's
launcher derives its topology from SLURM (launcher/slurm/launch.py). A JAX launch
(``launcher=skrl_jax``) becomes ``launcher=slurm_jax``.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ..backends import summary as sweep_summary
from ..config import grammar
from ..config.schema import SlurmConfig
from ..errors import UserError
from ..facts import HostFacts
from ..names import override_key
from ..rundir import SBATCH, slurm_out_name
from .env import SlurmAllocation

SCRIPT_NAME = SBATCH
# overrides the job must not inherit: it picks its own launcher, never submits, writes into run_dir
_DROPPED = ("launcher", "submit", "dry_run", "run_dir")
# Hydra flags that change which configs exist: the job needs them too
_PLAIN_PATH = re.compile(r"/[A-Za-z0-9_./-]*\Z")  # a path Hydra reads back as the same string
CONFIG_FLAGS = ("--config-dir", "-cd", "--config-path", "-cp", "--config-name", "-cn")


@dataclass(frozen=True)
class Submission(sweep_summary.Submission):
    """One submitted (or refused, or shown) job: the sweep table's row, and its SLURM log."""

    @property
    def log(self) -> str:
        return f"{self.run_dir}/{slurm_out_name(self.job_id)}"


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
        nnodes=slurm.nodes or 1,
        node_rank=0,
        hosts=tuple(f"node{i}" for i in range(slurm.nodes or 1)),
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


def summary(submissions: Sequence[Submission]) -> str:
    """The sweep's table (launcher/backends/summary.py)."""
    return sweep_summary.table(submissions)


def interpreter() -> str:
    """The interpreter the job re-invokes the launcher with: this one."""
    return sys.executable


def check_export(slurm: SlurmConfig, names: Sequence[str]) -> None:
    """Secrets reach the job through sbatch's environment: ``slurm.extra.export`` must pass them.

    >>> check_export(SlurmConfig(extra={"export": "NONE"}), ["HF_TOKEN"])
    Traceback (most recent call last):
    ...
    launcher.errors.UserError: slurm.extra.export=NONE: must pass HF_TOKEN to the job: secret values reach it through sbatch's environment, never the batch script (e.g. ++slurm.extra.export=ALL, or '++slurm.extra.export="NONE,HF_TOKEN"')
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
            f"""e.g. ++slurm.extra.export=ALL, or '++slurm.extra.export="{value},{",".join(missing)}"'""",
        )
