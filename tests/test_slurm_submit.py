"""submit=slurm without a cluster: the job's command, the script (dry run), one-line errors, profiles."""

from __future__ import annotations

import shlex
import subprocess
import sys

import pytest

from conftest import clean_env
from launcher.config import compose
from launcher.slurm import batch
from launcher.slurm.backend import job_config, job_nodes
from launcher.slurm.submit import Submission, config_flags, job_command, job_overrides, summary

PROFILE = """\
# @package _global_
# A cluster profile: where the scripts are, and what to ask SLURM for.
defaults:
  - override /rl_library@_global_.rl_library: skrl

profile:
  name: mycluster
  script_root: ${tmg_examples_dir:}
  entry: allreduce.py
  rl_libraries: [skrl]
submit: slurm
slurm:
  partition: gpu
  account: rl-team
  gpus_per_node: 8
  gpu_type: a100
  time: "4:00:00"
  extra:
    constraint: ib
"""


def test_job_overrides_and_command():
    overrides = [
        "launcher=multinode",
        "launcher.nproc_per_node='2'",
        "dry_run=true",
        "submit=slurm",
        "+slurm.extra.x=1",
    ]
    job = job_overrides(overrides, jax=False, run_dir="/runs/a b")
    assert job == [
        "launcher=slurm",
        "launcher.nproc_per_node='2'",
        "+slurm.extra.x=1",
        "submit=none",
        "run_dir='/runs/a b'",
    ]
    assert job_command("/py", [], job, ["--x", "1"])[:3] == ["/py", "-m", "launcher"]
    assert job_command("/py", [], job, ["--x", "1"])[-3:] == ["--", "--x", "1"]
    assert job_command("/py", [], job, [])[-1] == "run_dir='/runs/a b'"
    assert config_flags(["-cd", "rel"])[1].startswith("/")


@pytest.mark.parametrize(
    "typed",
    [
        ["seed=3"],
        ["launcher=multinode", "launcher.nnodes=2", "launcher.nproc_per_node=2"],
        ["launcher=skrl_jax", "launcher.nproc_per_node=2", "slurm.cpus_per_task=2"],
        ["launcher=slurm", "slurm.nodes=2", "launcher.node_rank=0"],
        ["launcher.nproc_per_node=1", "launcher.hang_timeout=60", "run_name=x"],
    ],
)
def test_the_jobs_config_is_derived_as_hydra_composes_it(typed):
    """The back end derives the job's config from the launch's (nothing composed again): it is the
    config the job's own launcher composes from its overrides, with the node count resolved."""
    cfg = compose.compose([*typed, "submit=slurm", "dry_run=true"])
    nodes = job_nodes(cfg, typed)
    jax = cfg.launcher.topology.value == "skrl_jax"
    composed = compose.compose(job_overrides([*typed, "submit=slurm", "dry_run=true"], jax, "/r/1"))
    composed.slurm.nodes = nodes
    assert job_config(cfg, typed, "/r/1", nodes) == composed


def test_array_script_picks_each_tasks_command():
    slurm = compose.compose(["slurm.array_parallelism=2", "slurm.cpus_per_task=1"]).slurm
    text = batch.render_array(
        slurm,
        [["/py", "-m", "launcher", "seed=1"], ["/py", "-m", "launcher", "seed=2"]],
        [{}, {"T": "T_1"}],
        "/w",
        "j",
        "/r/%a/slurm-%A_%a.out",
    )
    assert "#SBATCH --array=0-1%2" in text and "#SBATCH --output=/r/%a/slurm-%A_%a.out" in text
    assert "  0) set -- /py -m launcher seed=1" in text and "  1) set -- /py -m launcher seed=2" in text
    assert 'export T="${T_1}"' in text and "unset T_1" in text
    assert 'srun --nodes 1 --ntasks-per-node=1 --kill-on-bad-exit=1 --cpus-per-task=1 -- "$@" &' in text


def test_summary_lists_each_point_by_its_own_overrides():
    rows = [
        Submission(("seed=1", "submit=slurm"), "/r/0", "11"),
        Submission(("seed=2", "submit=slurm"), "/r/1", None, "boom"),
    ]
    text = summary(rows)
    assert "1 of 2 job(s) submitted" in text
    assert "0  11      seed=1" in text and "1  FAILED  seed=2" in text and "boom" in text


def test_dry_run_prints_the_script_and_submits_nothing(run_cli, tmp_path):
    result = run_cli(
        "submit=slurm",
        "slurm.nodes=2",
        "slurm.time=1:00:00",
        "slurm.partition=cpu",
        "seed=7",
        "+slurm.extra.mail_type=END",
        "dry_run=true",
        "--",
        "--lr",
        "3e-4",
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for line in (
        "#SBATCH --nodes=2",
        "#SBATCH --time=1:00:00",
        "#SBATCH --partition=cpu",
        "#SBATCH --signal=B:USR1@120",
        "#SBATCH --requeue",
        "#SBATCH --mail-type=END",
        f"#SBATCH --chdir={tmp_path}",
        "trap forward_usr1 USR1",
    ):
        assert line in out, out
    srun = next(line for line in out.splitlines() if line.startswith("srun "))
    command = shlex.split(srun.rstrip(" &"))
    job = command[command.index("--") + 1 :]
    assert job[1:4] == ["-m", "launcher", "launcher=slurm"]
    assert "seed=7" in job and "submit=none" in job and "dry_run=true" not in job
    assert job[-3:] == ["--", "--lr", "3e-4"]
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("nodes", [["launcher=multinode", "launcher.nnodes=2"], ["slurm.nodes=2"]])
def test_launcher_nnodes_makes_a_two_node_job(run_cli, nodes):
    """One vocabulary: launcher.nnodes=2 (before issue 19: refused, "node count 1 (... slurm.nodes=)"),
    or its alias slurm.nodes=2, asks SLURM for two nodes; the job's own node-count check passes."""
    result = run_cli("submit=slurm", *nodes, "launcher.nproc_per_node=1", "dry_run=true")
    assert result.returncode == 0, result.stderr
    assert "#SBATCH --nodes=2" in result.stdout and "srun --nodes 2 " in result.stdout


def test_jax_launch_becomes_slurm_jax(run_cli):
    result = run_cli("submit=slurm", "launcher=skrl_jax", "dry_run=true")
    assert result.returncode == 0, result.stderr
    assert "-m launcher launcher=slurm_jax submit=none" in result.stdout


def test_cluster_profile_carries_the_slurm_settings(run_cli, tmp_path):
    (tmp_path / "conf" / "profile").mkdir(parents=True)
    (tmp_path / "conf" / "profile" / "mycluster.yaml").write_text(PROFILE)
    result = run_cli("--config-dir", str(tmp_path / "conf"), "profile=mycluster", "dry_run=true")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for line in (
        "#SBATCH --gpus-per-node=a100:8",
        "#SBATCH --partition=gpu",
        "#SBATCH --account=rl-team",
        "#SBATCH --time=4:00:00",
        "#SBATCH --constraint=ib",
    ):
        assert line in out, out
    assert f"--config-dir {tmp_path / 'conf'}" in out and "profile=mycluster" in out


@pytest.mark.parametrize(
    "args, message",
    [
        (["slurm.time=soon"], "slurm.time=soon: expected minutes, MM:SS, HH:MM:SS"),
        (["slurm.nodes=0"], "slurm.nodes=0: a node count from 1 to 65536"),
        (["+slurm.extra.colour=red"], "slurm.extra.colour=red: not a known sbatch long option"),
        (["+slurm.extra.time=5"], "slurm.extra.time=5: set slurm.time instead of an extra option"),
        (["slurm.gpu_type=a100"], "slurm.gpu_type=a100: needs gpus_per_node >= 1"),
        (
            ["slurm.time=5", "slurm.signal_seconds=600"],
            "slurm.signal_seconds=600: must be shorter than time='5' (300 s)",
        ),
        (
            ["slurm.gpus_per_node=2", "launcher.nproc_per_node=4"],
            "launcher.nproc_per_node=4: more workers than the 2 visible GPU(s) (from slurm.gpus_per_node=2",
        ),
        (
            ["slurm.cpus_per_task=1", "launcher.nproc_per_node=2"],
            "launcher.nproc_per_node=2: more workers than the 1 CPU(s) SLURM allocated per node",
        ),
        (
            # issue 19 changed this: launcher.nnodes is the job's node count, slurm.nodes its alias
            ["slurm.nodes=2", "launcher=multinode", "launcher.nnodes=3"],
            "launcher.nnodes=3: slurm.nodes=2 says otherwise: slurm.nodes is the old spelling of launcher.nnodes",
        ),
        (["launcher.nnodes=1", "slurm.nodes=2"], "launcher.nnodes=1: slurm.nodes=2 says otherwise"),
        (
            ["launcher=multinode", "launcher.nnodes=1:2"],
            "launcher.nnodes=1:2: submit=slurm asks SLURM for a fixed node count: a whole number >= 1",
        ),
        (
            ["slurm.array_parallelism=0"],
            "slurm.array_parallelism=0: must be a positive integer: the most tasks of a sweep's job array running",
        ),
        (["script=/no/such/train.py"], "script=/no/such/train.py: the training script does not exist"),
    ],
)
def test_submit_errors_are_one_line(run_cli, args, message):
    result = run_cli("submit=slurm", *args, "dry_run=true")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith(f"train_multigpu: error: {message}"), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_no_sbatch_on_path_is_a_clear_error(run_cli, tmp_path):
    env = clean_env(PATH="/nonexistent")
    result = run_cli("submit=slurm", env=env)
    assert result.returncode == 2
    assert "train_multigpu: error: submit=slurm: sbatch is not on PATH (submit from a SLURM login node" in result.stderr


def test_help_mentions_the_slurm_keys(run_cli):
    result = run_cli("--help")
    for text in (
        "submit=slurm",
        "slurm.nodes",
        "slurm.gpus_per_node",
        "+slurm.extra.NAME=VALUE",
        "launcher=slurm",
        "slurm_jax",
    ):
        assert text in result.stdout, text


def test_the_describe_side_imports_no_hydra_and_answers_for_an_unknown_job(tmp_path):
    """`runs` calls describe/logs from a handle alone: no Hydra imported, and a job SLURM does not
    know (or no SLURM at all) is UNKNOWN, not an error."""
    probe = (
        "import sys; from launcher.slurm.backend import SlurmBackend; from launcher.backends.base import Handle; "
        "h = Handle('slurm', '999999999', '/nonexistent'); s = SlurmBackend().describe(h); "
        "print(s.state.value, list(SlurmBackend().logs(h)), "
        "sorted({m.split('.')[0] for m in sys.modules} & {'hydra', 'omegaconf', 'yaml'}))"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "unknown [] []", out.stdout + out.stderr


def test_a_job_arrays_script_is_written_once_and_linked_into_every_points_directory(run_cli, tmp_path):
    """The array script holds every point's command: a copy per point grew as the points squared
    (224 KB x 1,000 points: 231 MB). Here one file, hard-linked into each point's directory (an
    sbatch that only answers an id: what is measured is what the launcher writes)."""
    import os

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text("#!/bin/sh\necho 4242\n")
    (bin_dir / "sbatch").chmod(0o755)
    env = clean_env(PATH=f"{bin_dir}:{os.environ['PATH']}")
    result = run_cli("-m", "seed=1,2,3", "presets=[debug]", "submit=slurm", env=env)
    assert result.returncode == 0, result.stderr
    scripts = sorted(tmp_path.glob("runs/multirun/*/*/job.sbatch"))
    assert len(scripts) == 3
    assert len({os.stat(s).st_ino for s in scripts}) == 1
    assert all(s.read_text() == scripts[0].read_text() and "SLURM_ARRAY_TASK_ID" in s.read_text() for s in scripts)
