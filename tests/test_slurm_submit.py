"""submit=slurm without a cluster: the job's command, the script (dry run), one-line errors, profiles."""

from __future__ import annotations

import copy
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
    launch = copy.deepcopy(cfg)
    assert job_config(cfg, typed, "/r/1", nodes) == composed
    assert cfg == launch  # the launch's own config is not changed (the job's shares what it does not set)


FAKE_SRUN = """#!/bin/sh
# srun's stand-in: what the task would start, and the variables it would start it with
printf 'ARG %s\\n' "$@"
echo "T=${T-unset} T_0=${T_0-unset} T_1=${T_1-unset}"
"""


def _run_task(script, tmp_path, task: int) -> subprocess.CompletedProcess:
    """The array script as SLURM's task ``task`` runs it: bash, SLURM_ARRAY_TASK_ID set, ``srun`` the
    stand-in above, every task's secret copy in the environment (sbatch's --export=ALL)."""
    bin_dir = tmp_path / "bin"
    if not bin_dir.exists():
        bin_dir.mkdir()
        (bin_dir / "srun").write_text(FAKE_SRUN)
        (bin_dir / "srun").chmod(0o755)
    env = clean_env(PATH=f"{bin_dir}:/usr/bin:/bin", SLURM_ARRAY_TASK_ID=str(task), T_0="zero", T_1="one")
    return subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=30)


def test_array_script_runs_each_tasks_own_command_from_its_own_file(tmp_path):
    """Issue 28: the array script holds no point's command (it held all of them: every task read
    every point's, quadratic in the points); task i reads its own file, runs its command and exports
    its own secret copy, the others' unset; a task whose file is missing or is another task's fails
    with a message naming the file, and runs nothing."""
    slurm = compose.compose(["slurm.array_parallelism=2", "slurm.cpus_per_task=1"]).slurm
    task_file = (f"{tmp_path}/", "/job.task")
    text = batch.render_array(slurm, 3, task_file, "T_", str(tmp_path), "j", "/r/%a/slurm-%A_%a.out")
    assert "#SBATCH --array=0-2%2" in text and "#SBATCH --output=/r/%a/slurm-%A_%a.out" in text
    assert 'srun --nodes 1 --ntasks-per-node=1 --kill-on-bad-exit=1 --cpus-per-task=1 -- "$@" &' in text
    assert "set --" not in text  # no command: the script is given none
    for point in (2, 20, 1000):  # the same script at any size but for its --array line
        other = batch.render_array(slurm, point, task_file, "T_", str(tmp_path), "j", "/r/%a/slurm-%A_%a.out")
        assert other.replace(f"--array=0-{point - 1}%2", "--array=0-2%2") == text
    script = tmp_path / "job.sbatch"
    script.write_text(text)
    for task in (0, 1):
        (tmp_path / str(task)).mkdir()
        command = ["/py", "-m", "launcher", f"seed={task + 1}", "run_dir=/r/a b"]
        (tmp_path / str(task) / "job.task").write_text(batch.render_task(task, command, {"T": f"T_{task}"}))
    assert batch.render_task(1, ["/py"], {}).startswith("# train_multigpu: the command of task 1 of a job array")

    for task, value in ((0, "zero"), (1, "one")):
        ran = _run_task(script, tmp_path, task)
        assert ran.returncode == 0, ran.stderr
        args = [line[4:] for line in ran.stdout.splitlines() if line.startswith("ARG ")]
        assert args == ["--nodes", "1", "--ntasks-per-node=1", "--kill-on-bad-exit=1", "--cpus-per-task=1", "--"] + [
            "/py",
            "-m",
            "launcher",
            f"seed={task + 1}",
            "run_dir=/r/a b",
        ], ran.stdout
        assert f"T={value} T_0=unset T_1=unset" in ran.stdout

    missing = _run_task(script, tmp_path, 2)
    assert (missing.returncode, missing.stdout) == (2, ""), missing
    assert missing.stderr == (
        f"train_multigpu: task 2 of this job array: cannot read its command file {tmp_path}/2/job.task\n"
    )
    (tmp_path / "1" / "job.task").write_text((tmp_path / "0" / "job.task").read_text())
    mixed = _run_task(script, tmp_path, 1)
    assert (mixed.returncode, mixed.stdout) == (2, ""), mixed
    assert mixed.stderr == (f"train_multigpu: {tmp_path}/1/job.task holds the command of task 0, not of task 1\n")


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


def test_a_job_arrays_script_is_the_same_at_any_size_and_each_point_has_its_own_command(run_cli, tmp_path):
    """Issue 28: the array script held every point's command (186 KB at 1,000 points of this sweep),
    and SLURM hands the whole script to every task: bytes quadratic in the points. It is now the
    same at 2 and 20 points but for its --array line; each point's command is in its own directory
    (job.task), written before sbatch (a stand-in that answers an id: nothing reaches a cluster)."""
    import os

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text("#!/bin/sh\necho 4242\n")
    (bin_dir / "sbatch").chmod(0o755)
    env = clean_env(PATH=f"{bin_dir}:{os.environ['PATH']}")
    scripts = {}
    for points in (2, 20):
        sweep = tmp_path / f"sweep{points}"
        args = ("-m", f"seed=range(0,{points})", "presets=[debug]", "submit=slurm", f"hydra.sweep.dir={sweep}")
        result = run_cli(*args, env=env)
        assert result.returncode == 0, result.stderr
        text = (sweep / "0" / "job.sbatch").read_text()
        scripts[points] = text.replace(str(sweep), "SWEEP").replace(f"--array=0-{points - 1}", "--array=0-N")
        for task in range(points):
            own = (sweep / str(task) / "job.task").read_text()
            assert f"\ntask={task}\n" in own and f" seed={task} " in own and f"run_dir={sweep}/{task}\n" in own
            assert os.stat(sweep / str(task) / "job.task").st_nlink == 1  # its own file, not a shared one
    assert scripts[2] == scripts[20]
    assert 'task_file=SWEEP/"${SLURM_ARRAY_TASK_ID:?not a task of a job array}"/job.task' in scripts[20]


def test_arrays_whose_directories_are_not_numbered_by_task_read_links_by_task(run_cli, tmp_path):
    """A swept slurm.* key makes two arrays (points 0, 2 and 1, 3): their run directories are not
    <sweep dir>/<task>, so each script reads task i's command from links by task number in its
    first point's job.tasks/; run by bash (an srun stand-in), task 1 of the second array runs point
    3's command."""
    import os

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text("#!/bin/sh\necho 4242\n")
    (bin_dir / "sbatch").chmod(0o755)
    sweep = tmp_path / "sweep"
    args = ("-m", "seed=1,2", "slurm.time=5,10", "presets=[debug]", "submit=slurm", f"hydra.sweep.dir={sweep}")
    result = run_cli(*args, env=clean_env(PATH=f"{bin_dir}:{os.environ['PATH']}"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("submitted SLURM job array 4242: 2 task(s)") == 2
    for first, points in (("0", ("0", "2")), ("1", ("1", "3"))):
        script = (sweep / first / "job.sbatch").read_text()
        assert f'task_file={sweep}/{first}/job.tasks/"${{SLURM_ARRAY_TASK_ID:?' in script
        for task, point in enumerate(points):
            assert os.path.samefile(sweep / first / "job.tasks" / str(task), sweep / point / "job.task")
    (tmp_path / "bin" / "srun").write_text(FAKE_SRUN)
    (tmp_path / "bin" / "srun").chmod(0o755)
    ran = _run_task(sweep / "1" / "job.sbatch", tmp_path, 1)
    assert ran.returncode == 0, ran.stderr
    assert f"ARG run_dir={sweep}/3" in ran.stdout and "ARG seed=2" in ran.stdout and "ARG slurm.time=10" in ran.stdout
