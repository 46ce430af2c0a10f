"""A secret value reaches the worker's environment and nothing else.

Every test below starts the real launcher with a sentinel value that exists nowhere else (unique per
test), then sweeps the whole console output and every file under its working directory (the run
root ``./runs`` and whatever Hydra writes into the working directory) for it. The real runs prove
the value did reach the workers: the worker prints a hash of what it found, never the value.
"""

from __future__ import annotations

import hashlib
import os
import stat
import uuid
from pathlib import Path

import pytest

from conftest import ALLREDUCE, clean_env

pytestmark = pytest.mark.timeout(240)

# the worker: the SHA-256 of each secret variable it sees (never the value)
WORKER = """
import hashlib, os, sys
seed = [a for a in sys.argv if a.startswith("--seed=")]
for name in ("HF_TOKEN", "MY_API_TOKEN"):
    value = os.environ.get(name)
    if value is not None:
        print("SECRET_SHA", name, seed[0] if seed else "-", hashlib.sha256(value.encode()).hexdigest(), flush=True)
"""


@pytest.fixture
def sentinel() -> str:
    return f"tmgSENTINEL{uuid.uuid4().hex}"


@pytest.fixture
def worker(tmp_path) -> Path:
    path = tmp_path / "worker.py"
    path.write_text(WORKER)
    return path


def sha(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def assert_nowhere(result, root: Path, *values: str) -> list[Path]:
    """No value in the console output, nor in any file (name or content) under ``root``.
    Returns the files looked at, so a test can also say that there were some."""
    console = result.stdout + result.stderr
    files = [p for p in root.rglob("*") if p.is_file() and not p.is_symlink()]
    for value in values:
        assert value not in console, f"secret on the console:\n{console}"
        for path in files:
            assert value not in str(path.relative_to(root)), path
            assert value.encode() not in path.read_bytes(), f"secret written to {path}"
    return files


def one_error_line(result) -> str:
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


# -- single runs ------------------------------------------------------------------------------


def test_single_run_secret_reaches_the_worker_and_no_file(run_cli, tmp_path, worker, sentinel):
    from_env = sentinel + "-from-env"
    env = clean_env(MY_API_TOKEN=from_env)
    args = (
        "launcher.nproc_per_node=1",
        f"script={worker}",
        f"+worker_env.HF_TOKEN={sentinel}",
        "+worker_env.MY_API_TOKEN=${oc.env:MY_API_TOKEN}",
        "run_name=sec",
    )
    dry = run_cli(*args, "dry_run=true", env=env)
    assert dry.returncode == 0, dry.stderr
    assert "export HF_TOKEN='***'" in dry.stdout and "export MY_API_TOKEN='***'" in dry.stdout
    result = run_cli(*args, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SECRET_SHA HF_TOKEN - {sha(sentinel)}" in result.stdout
    assert f"SECRET_SHA MY_API_TOKEN - {sha(from_env)}" in result.stdout
    files = assert_nowhere(result, tmp_path, sentinel, from_env)
    assert assert_nowhere(dry, tmp_path, sentinel, from_env)
    names = {p.name for p in files}
    assert {"config.yaml", "command.sh", "env.json", "status.json", "rank0.log", "torchrun.log"} <= names, names
    run_dir = next((tmp_path / "runs").glob("*_sec"))
    assert 'export HF_TOKEN="${HF_TOKEN:?' in (run_dir / "command.sh").read_text()


def test_hydra_outputs_show_the_masked_form(run_cli, tmp_path, sentinel):
    """Hydra writes .hydra/ into the working directory when asked to (hydra.output_subdir); --cfg
    prints the config: both see only the placeholder, since Hydra never receives the value."""
    (tmp_path / "cd").mkdir()
    result = run_cli(
        "--config-dir",
        str(tmp_path / "cd"),
        "hydra.output_subdir=.hydra",
        f"+worker_env.HF_TOKEN={sentinel}",
        "dry_run=true",
    )
    assert result.returncode == 0, result.stderr
    written = (tmp_path / ".hydra" / "overrides.yaml").read_text()
    assert "+worker_env.HF_TOKEN=***" in written
    cfg = run_cli("--cfg", "job", f"+worker_env.HF_TOKEN={sentinel}")
    assert cfg.returncode == 0 and "HF_TOKEN: '***'" in cfg.stdout, cfg.stdout + cfg.stderr
    for each in (result, cfg):
        assert_nowhere(each, tmp_path, sentinel)


def test_rerun_takes_the_secret_from_the_environment_and_writes_it_nowhere(run_cli, tmp_path, worker, sentinel):
    """composition.json (what ``runs rerun`` launches again) masks the value like every other file;
    the rerun takes it from the variable of the same name, or stops with one line naming it."""
    import json

    args = ("launcher.nproc_per_node=1", f"script={worker}", f"+worker_env.HF_TOKEN={sentinel}", "run_name=sec")
    first = run_cli(*args)
    assert first.returncode == 0, first.stdout + first.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert json.loads((run_dir / "composition.json").read_text())["overrides"][2] == "+worker_env.HF_TOKEN=***"
    missing = run_cli("runs", "rerun", "last")
    assert one_error_line(missing) == (
        "train_multigpu: error: worker_env.HF_TOKEN=***: the record keeps no secret values: set them in the "
        "environment before the rerun (export HF_TOKEN=..., or give +KEY=VALUE on the rerun's line)"
    )
    assert len(list((tmp_path / "runs").iterdir())) == 1  # nothing started
    again = sentinel + "again"
    rerun = run_cli("runs", "rerun", "last", env=clean_env(HF_TOKEN=again))
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert f"SECRET_SHA HF_TOKEN - {sha(again)}" in rerun.stdout  # not the mask: the value reached the worker
    for result in (first, missing, rerun):
        files = assert_nowhere(result, tmp_path, sentinel, again)
    assert sum(p.name == "composition.json" for p in files) == 2


# -- sweeps -----------------------------------------------------------------------------------


def test_sequential_sweep(run_cli, tmp_path, worker, sentinel):
    result = run_cli(
        "-m",
        "seed=1,2",
        "launcher=skrl_jax",
        "launcher.nproc_per_node=1",
        f"script={worker}",
        f"+worker_env.HF_TOKEN={sentinel}",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for seed in (1, 2):
        assert f"SECRET_SHA HF_TOKEN --seed={seed} {sha(sentinel)}" in "".join(
            p.read_text() for p in (tmp_path / "runs").rglob("rank0.log")
        ), seed
    files = assert_nowhere(result, tmp_path, sentinel)
    assert sum(p.name == "config.yaml" for p in files) == 2


def test_parallel_sweep(run_cli, tmp_path, worker, sentinel):
    result = run_cli(
        "-m",
        "seed=1,2",
        "sweep.parallel=2",
        "launcher=skrl_jax",
        "launcher.nproc_per_node=1",
        f"script={worker}",
        f"+worker_env.HF_TOKEN={sentinel}",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    logs = "".join(p.read_text() for p in (tmp_path / "runs").rglob("rank0.log"))
    for seed in (1, 2):
        assert f"SECRET_SHA HF_TOKEN --seed={seed} {sha(sentinel)}" in logs, seed
    assert_nowhere(result, tmp_path, sentinel)


def test_sweep_over_secret_values_gives_each_job_its_own(run_cli, tmp_path, worker, sentinel):
    first, second = sentinel + "a", sentinel + "b"
    result = run_cli(
        "-m",
        "launcher=skrl_jax",
        "launcher.nproc_per_node=1",
        f"script={worker}",
        f"+worker_env.HF_TOKEN={first},{second}",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    logs = "".join(p.read_text() for p in (tmp_path / "runs").rglob("rank0.log"))
    assert sha(first) in logs and sha(second) in logs
    assert "+worker_env.HF_TOKEN=***1" in result.stdout and "+worker_env.HF_TOKEN=***2" in result.stdout
    assert_nowhere(result, tmp_path, first, second)


def test_dry_run_sweep(run_cli, tmp_path, sentinel):
    """What the before-stop hook checks: -m seed=1,2 +worker_env.HOOK_API_TOKEN=... dry_run=true."""
    result = run_cli("-m", "seed=1,2", f"+worker_env.HOOK_API_TOKEN={sentinel}", "dry_run=true")
    assert result.returncode == 0, result.stderr
    assert "export HOOK_API_TOKEN='***'" in result.stdout
    assert_nowhere(result, tmp_path, sentinel)


# -- SLURM submission -------------------------------------------------------------------------

# sbatch is faked here: what is under test is what the launcher writes and hands to sbatch, not
# SLURM (the real one-host cluster runs in test_slurm_cluster.py). The fake records the SHA-256 of
# the variable it received in its environment -- the job gets sbatch's environment (--export=ALL).
FAKE_SBATCH = """#!/bin/sh
script="$2"
printf %s "${HF_TOKEN-unset}" | sha256sum | cut -d' ' -f1 > "$(dirname "$script")/sbatch_saw_hf_token.sha256"
for task in 0 1; do  # a job array over secret values: each task's own copy
  eval "value=\\${TRAIN_MULTIGPU_TASK${task}_HF_TOKEN-unset}"
  printf %s "$value" | sha256sum | cut -d' ' -f1 >> "$(dirname "$script")/sbatch_saw_task_tokens.sha256"
done
echo "4242;cluster"
"""


@pytest.fixture
def fake_sbatch(tmp_path) -> dict:
    bin_dir = tmp_path.parent / f"{tmp_path.name}-bin"
    bin_dir.mkdir()
    path = bin_dir / "sbatch"
    path.write_text(FAKE_SBATCH)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    env = clean_env()
    env.pop("HF_TOKEN", None)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    return env


def test_slurm_submit(run_cli, tmp_path, sentinel, fake_sbatch):
    result = run_cli("-m", "seed=1,2", "submit=slurm", f"+worker_env.HF_TOKEN={sentinel}", env=fake_sbatch)
    assert result.returncode == 0, result.stdout + result.stderr
    scripts = sorted((tmp_path / "runs").rglob("job.sbatch"))
    assert len(scripts) == 2
    for script in scripts:  # a sweep's command: in its point's job.task (issue 28)
        assert "'+worker_env.HF_TOKEN=${oc.env:HF_TOKEN}'" in (script.parent / "job.task").read_text()
        assert "+worker_env.HF_TOKEN=***" in (script.parent / "submit.json").read_text()
    # one job array (issue 19): sbatch runs once, with the first point's copy of the script
    assert (scripts[0].parent / "sbatch_saw_hf_token.sha256").read_text().strip() == sha(sentinel)
    assert not (scripts[1].parent / "sbatch_saw_hf_token.sha256").exists()
    dry = run_cli("submit=slurm", f"+worker_env.HF_TOKEN={sentinel}", "dry_run=true", env=fake_sbatch)
    assert dry.returncode == 0 and "${oc.env:HF_TOKEN}" in dry.stdout, dry.stderr
    for each in (result, dry):
        assert_nowhere(each, tmp_path, sentinel)


def test_slurm_submit_keeps_a_typed_env_reference_unresolved(run_cli, tmp_path, sentinel, fake_sbatch):
    """``+worker_env.X=${oc.env:X}`` typed by the user stays a reference in the batch script: the value
    is read on the node, never written (Hydra's override list resolves it when read naively)."""
    env = {**fake_sbatch, "HF_TOKEN": sentinel}
    typed = "+worker_env.HF_TOKEN=${oc.env:HF_TOKEN}"
    result = run_cli("submit=slurm", typed, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    (script,) = (tmp_path / "runs").rglob("job.sbatch")
    assert "'+worker_env.HF_TOKEN=${oc.env:HF_TOKEN}'" in script.read_text()
    dry = run_cli("submit=slurm", typed, "dry_run=true", env=env)
    assert dry.returncode == 0 and "${oc.env:HF_TOKEN}" in dry.stdout, dry.stderr
    for each in (result, dry):
        assert_nowhere(each, tmp_path, sentinel)


def test_slurm_sweep_over_secret_values(run_cli, tmp_path, sentinel, fake_sbatch):
    first, second = sentinel + "a", sentinel + "b"
    result = run_cli("-m", "submit=slurm", f"+worker_env.HF_TOKEN={first},{second}", env=fake_sbatch)
    assert result.returncode == 0, result.stdout + result.stderr
    # one job array (issue 19): each task reads its own value from sbatch's environment
    (seen,) = (tmp_path / "runs").rglob("sbatch_saw_task_tokens.sha256")
    assert seen.read_text().split() == [sha(first), sha(second)]
    # issue 28: each task's command, and the name it reads its value from, in its point's job.task
    tasks = sorted((tmp_path / "runs").rglob("job.task"))
    assert len(tasks) == 2 and seen.parent == tasks[0].parent
    assert 'export HF_TOKEN="${TRAIN_MULTIGPU_TASK1_HF_TOKEN}"' in tasks[1].read_text()
    assert "for name in ${!TRAIN_MULTIGPU_TASK@}; do unset" in (seen.parent / "job.sbatch").read_text()
    dry = run_cli("-m", "submit=slurm", f"+worker_env.HF_TOKEN={first},{second}", "dry_run=true", env=fake_sbatch)
    assert dry.returncode == 0 and 'export HF_TOKEN="${TRAIN_MULTIGPU_TASK1_HF_TOKEN}"' in dry.stdout, dry.stderr
    for each in (result, dry):
        assert_nowhere(each, tmp_path, first, second)


def test_slurm_job_on_the_real_cluster_gets_the_secret(slurm_cluster, run_cli, tmp_path, worker, sentinel):
    """The same, end to end on the real one-host cluster: the job's workers see the value."""
    from slurm_cluster import wait_job

    env = clean_env(OMP_NUM_THREADS="1")
    env.pop("HF_TOKEN", None)
    result = run_cli(
        "submit=slurm",
        "slurm.cpus_per_task=1",
        "slurm.time=5",
        "launcher.nproc_per_node=1",
        f"script={worker}",
        f"+worker_env.HF_TOKEN={sentinel}",
        env=env,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    job = result.stdout.split("submitted SLURM job ", 1)[1].split()[0]
    info = wait_job(job, timeout=180)
    (log,) = (tmp_path / "runs").rglob(f"slurm-{job}.out")
    assert info["JobState"] == "COMPLETED", log.read_text()
    assert f"SECRET_SHA HF_TOKEN - {sha(sentinel)}" in log.read_text()
    assert_nowhere(result, tmp_path, sentinel)


def _ray_submit(tmp_path) -> list[str]:
    """``train_multigpu submit=ray`` into this test's run root, the job run by this interpreter."""
    import sys

    return [
        sys.executable,
        "-m",
        "launcher",
        f"run_root={tmp_path / 'runs'}",
        "submit=ray",
        f"ray.python={sys.executable}",
    ]


def test_ray_job_on_the_real_cluster_gets_the_secrets(ray_cluster, tmp_path, worker, sentinel):
    """submit=ray: a worker_env secret travels as a runtime_env variable of its own (never inside the
    carried config), a ray.runtime_env.env_vars secret as Ray's own; the job's ranks see both, and
    neither reaches the console (the followed job's output included) nor any file of the run."""
    import subprocess

    from_ray = sentinel + "-ray"
    env = clean_env(RAY_ADDRESS=ray_cluster.address)
    argv = _ray_submit(tmp_path)
    argv += ["ray.follow=true", "launcher.nproc_per_node=1", f"script={worker}", f"+worker_env.HF_TOKEN={sentinel}"]
    argv += [f"+ray.runtime_env.env_vars.MY_API_TOKEN={from_ray}"]
    result = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SECRET_SHA HF_TOKEN - {sha(sentinel)}" in result.stdout
    assert f"SECRET_SHA MY_API_TOKEN - {sha(from_ray)}" in result.stdout
    files = assert_nowhere(result, tmp_path, sentinel, from_ray)
    assert {"config.yaml", "submit.json", "status.json", "rank0.log"} <= {p.name for p in files}
    assert_not_on_the_head(ray_cluster, result, sentinel, from_ray)


def test_ray_two_node_job_gets_the_secret(ray_cluster, tmp_path, worker, sentinel):
    """The same on two nodes: the driver takes the values and hands them to each node's launcher
    (in its actor's call, not the runtime_env); both ranks see the value, Ray's logs do not."""
    import subprocess

    env = clean_env(RAY_ADDRESS=ray_cluster.address)
    argv = _ray_submit(tmp_path)
    argv += ["ray.follow=true", "launcher.nnodes=2", "launcher.nproc_per_node=1", "launcher.local_nodes=true"]
    argv += ["log_all_ranks=true", f"script={worker}", f"+worker_env.HF_TOKEN={sentinel}"]
    result = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=200)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count(f"SECRET_SHA HF_TOKEN - {sha(sentinel)}") == 2, result.stdout
    assert_nowhere(result, tmp_path, sentinel)
    assert_not_on_the_head(ray_cluster, result, sentinel)


def assert_not_on_the_head(ray_cluster, result, *values: str) -> None:
    """No value in Ray's session directories (its logs -- the runtime_env agent's --, the job's driver
    log, runtime_resources), in what the GCS keeps and the dashboard shows of the job, nor in any
    process's command line."""
    ray_files = [p for p in ray_cluster.temp_dir.rglob("*") if p.is_file() and not p.is_symlink() and not p.is_socket()]
    assert any(p.name == "runtime_env_agent.log" for p in ray_files)
    for path in ray_files:
        data = path.read_bytes()
        for value in values:
            assert value.encode() not in data, f"secret in Ray's {path}"
    from ray.job_submission import JobSubmissionClient

    (job_id,) = [line.split()[4] for line in result.stdout.splitlines() if "submitted Ray job" in line]
    client = JobSubmissionClient(ray_cluster.address)
    shown = repr(client.get_job_info(job_id)) + repr(client.list_jobs())
    assert job_id in shown
    for value in values:
        assert value not in shown, "secret in the job's details (the GCS, the dashboard)"
        for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
            try:
                assert value.encode() not in cmdline.read_bytes(), f"secret in {cmdline}"
            except OSError:  # ended meanwhile
                pass


def test_slurm_array_over_secret_values_on_the_real_cluster(slurm_cluster, run_cli, tmp_path, worker, sentinel):
    """A -m sweep over secret values is one job array (issue 19): each task's workers see their own
    value, carried by sbatch's environment under the task's own name, never written."""
    from slurm_cluster import wait_job

    env = clean_env(OMP_NUM_THREADS="1")
    env.pop("HF_TOKEN", None)
    first, second = sentinel + "a", sentinel + "b"
    result = run_cli(
        "-m",
        "submit=slurm",
        "slurm.cpus_per_task=1",
        "slurm.time=5",
        "launcher.nproc_per_node=1",
        f"script={worker}",
        f"+worker_env.HF_TOKEN={first},{second}",
        env=env,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    array = result.stdout.split("submitted SLURM job array ", 1)[1].split(":")[0]
    for task, value in enumerate((first, second)):
        job = f"{array}_{task}"
        info = wait_job(job, timeout=180)
        (log,) = (tmp_path / "runs").rglob(f"slurm-{job}.out")
        assert info["JobState"] == "COMPLETED", log.read_text()
        assert f"SECRET_SHA HF_TOKEN - {sha(value)}" in log.read_text()
        assert sha(first if task else second) not in log.read_text()
    assert_nowhere(result, tmp_path, first, second)


def test_slurm_export_must_pass_the_secret(run_cli, tmp_path, sentinel, fake_sbatch):
    result = run_cli("submit=slurm", "+slurm.extra.export=NONE", f"+worker_env.HF_TOKEN={sentinel}", env=fake_sbatch)
    assert one_error_line(result) == (
        "train_multigpu: error: slurm.extra.export=NONE: must pass HF_TOKEN to the job: secret values reach it through "
        "sbatch's environment, never the batch script (e.g. ++slurm.extra.export=ALL, or '++slurm.extra.export=\"NONE,HF_TOKEN\"')"  # noqa: E501
    )
    ok = run_cli(
        "submit=slurm", '+slurm.extra.export="NONE,HF_TOKEN"', f"+worker_env.HF_TOKEN={sentinel}", env=fake_sbatch
    )
    assert ok.returncode == 0, ok.stderr
    assert_nowhere(result, tmp_path, sentinel)
    assert_nowhere(ok, tmp_path, sentinel)


# -- Kubernetes submission (submit=k8s) ---------------------------------------------------------

# kubectl is stood in for (no cluster exists here); it keeps a copy of what it was given to create.
FAKE_KUBECTL = """#!/bin/sh
case "$1" in
config) echo fake-context ;;
create) cp "$3" "$(dirname "$3")/kubectl_got.yaml"; echo "trainjob.trainer.kubeflow.org/x" ;;
esac
"""


def test_k8s_submit(run_cli, tmp_path, sentinel, fake_sbatch):
    """A value typed here is refused (a manifest would carry it); a Secret reference travels instead,
    and the submitting machine's own value of the variable is written nowhere."""
    (Path(fake_sbatch["PATH"].split(os.pathsep)[0]) / "kubectl").write_text(FAKE_KUBECTL)
    (Path(fake_sbatch["PATH"].split(os.pathsep)[0]) / "kubectl").chmod(0o755)
    k8s = ("submit=k8s", "k8s.image=img:1")
    refused = run_cli(*k8s, f"+worker_env.HF_TOKEN={sentinel}", env=fake_sbatch)
    assert one_error_line(refused).startswith(
        "train_multigpu: error: worker_env.HF_TOKEN=***: a secret value cannot travel in a Kubernetes manifest"
    )
    assert not (tmp_path / "runs").exists()
    env = {**fake_sbatch, "HF_TOKEN": sentinel}
    made = run_cli(
        "-m", "seed=1,2", *k8s, "k8s.secret_env=[HF_TOKEN:hf/token]", "+worker_env.HF_TOKEN=${oc.env:HF_TOKEN}", env=env
    )
    assert made.returncode == 0, made.stdout + made.stderr
    manifests = sorted((tmp_path / "runs").rglob("kubectl_got.yaml"))
    assert len(manifests) == 2
    for path in manifests:
        text = path.read_text()
        assert "secretKeyRef:\n          name: hf\n          key: token" in text
        # the reference, resolved in the pod from the Secret (a sweep's point writes it escaped: $\\{oc.env\\:...\\})
        assert "+worker_env.HF_TOKEN=$\\{oc.env\\:HF_TOKEN\\}" in text
    dry = run_cli(
        *k8s, "k8s.secret_env=[HF_TOKEN:hf/token]", "+worker_env.HF_TOKEN=${oc.env:HF_TOKEN}", "dry_run=true", env=env
    )
    assert dry.returncode == 0 and "- +worker_env.HF_TOKEN=${oc.env:HF_TOKEN}\n" in dry.stdout, dry.stderr
    for each in (refused, made, dry):
        assert_nowhere(each, tmp_path, sentinel)


# -- save_profile -----------------------------------------------------------------------------


def test_save_profile(run_cli, tmp_path, sentinel):
    result = run_cli("save_profile=team", f"+worker_env.HF_TOKEN={sentinel}", f"+profile.env.WANDB_API_KEY={sentinel}")
    assert result.returncode == 0, result.stderr
    text = (tmp_path / ".train_multigpu" / "profile" / "team.yaml").read_text()
    assert "HF_TOKEN: ${oc.env:HF_TOKEN}" in text and "WANDB_API_KEY: ${oc.env:WANDB_API_KEY}" in text
    assert_nowhere(result, tmp_path, sentinel)


def test_save_profile_keeps_env_references_unresolved(run_cli, tmp_path):
    """docs/profiles.md's example: profile=isaaclab saved on a laptop without ISAACLAB_PATH."""
    result = run_cli(
        "save_profile=team_a",
        "profile=isaaclab",
        "launcher=multinode",
        "launcher.nnodes=2",
        "launcher.rdzv_endpoint=node0:29400",
        "+worker_env.NCCL_SOCKET_IFNAME=ib0",
        "presets=debug",
    )
    assert result.returncode == 0, result.stderr
    text = (tmp_path / ".train_multigpu" / "profile" / "team_a.yaml").read_text()
    assert "script_root: ${tmg_isaaclab_root:}/scripts/reinforcement_learning" in text
    # the reference resolves where the profile is used
    used = run_cli("--cfg", "job", "--resolve", "profile=team_a", env=clean_env(ISAACLAB_PATH="/opt/IsaacLab"))
    assert used.returncode == 0, used.stderr
    assert "script_root: /opt/IsaacLab/scripts/reinforcement_learning" in used.stdout


# -- error paths ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["+worker_env.AWS_SECRET_ACCESS_KEY={s},def"],
            "worker_env.AWS_SECRET_ACCESS_KEY=***: one value (a ',' outside quotes makes a list of values to sweep with -m)",  # noqa: E501
        ),
        (["+worker_env.HF_TOKEN=[{s}]"], "worker_env.HF_TOKEN=***: a string"),
        (["+worker_env.HF_TOKEN={s}]"], "worker_env.HF_TOKEN=***: not a value Hydra's override grammar can read"),
        (
            ["+worker_env={{HF_TOKEN:{s}}}"],
            "worker_env=***: secrets are given one by one, never as a map (e.g. +worker_env.NAME=VALUE)",
        ),
        (
            ["submit=ray", "launcher.nproc_per_node=1", "+ray.runtime_env={{env_vars: {{HF_TOKEN: {s}}}}}"],
            "ray.runtime_env=***: secrets are given one by one, never as a map (e.g. +ray.runtime_env.env_vars.NAME=VALUE)",  # noqa: E501
        ),
        (
            ["+ray.runtime_env={{env_vars: {{HF_TOKEN: {s}}}, x: [1}}"],
            "ray.runtime_env=***: secrets are given one by one, never as a map",
        ),
        (["+worker_env.BAD-TOKEN={s}"], "worker_env.BAD-TOKEN=***: not an environment variable name"),
        (
            ["+worker_env.HF_TOKEN={s}", "num_envs=many"],
            "num_envs=many: an integer",
        ),
        (["+worker_env.HF_TOKEN={s}", "launcher.nproc_per_node=0"], "launcher.nproc_per_node=0"),
        (["-m", "seed=1,2", "+worker_env.HF_TOKEN={s}", "num_envs=many"], "num_envs=many"),
        (["+worker_env.HF_TOKEN={s}", "stray"], "argument=stray"),
        (["+worker_env.MY TOKEN={s}"], "argument=+worker_env.MY TOKEN=***: expected key=value"),
    ],
)
def test_error_paths_never_echo_the_secret(run_cli, tmp_path, sentinel, args, message):
    for extra in (["dry_run=true"], []):
        result = run_cli(*[a.format(s=sentinel) for a in args], *extra)
        assert result.returncode == 2, result.stdout + result.stderr
        assert message in result.stderr, result.stderr
        assert "Traceback" not in result.stderr
        assert_nowhere(result, tmp_path, sentinel)


def test_failed_start_never_echoes_the_secret(run_cli, tmp_path, sentinel):
    """An interpreter that cannot start: the error names it; the run record masks the secret."""
    result = run_cli(f"+worker_env.HF_TOKEN={sentinel}", "python=/nonexistent/python")
    assert result.returncode == 2 and "python=/nonexistent/python" in result.stderr, result.stdout + result.stderr
    assert_nowhere(result, tmp_path, sentinel)


# -- worker_env names (item 11) ---------------------------------------------------------------


@pytest.mark.parametrize(
    "override, message",
    [
        (
            "+worker_env.BAD-NAME=1",
            "worker_env.BAD-NAME=1: not an environment variable name: letters, digits and '_', not starting with a digit",  # noqa: E501
        ),
        (
            "+worker_env.1ABC=x",
            "worker_env.1ABC=x: not an environment variable name: letters, digits and '_', not starting with a digit",
        ),
        (
            "+worker_env.1_TOKEN=x",
            "worker_env.1_TOKEN=***: not an environment variable name: letters, digits and '_', not starting with a digit",  # noqa: E501
        ),
        (
            "+worker_env.TRAIN_MULTIGPU_LAUNCH_ID=x",
            "worker_env.TRAIN_MULTIGPU_LAUNCH_ID=x: the launch sets this variable for every worker itself (the real run would overwrite it) (docs/errors.md lists the launch's own variables)",  # noqa: E501
        ),
        (
            "+worker_env.TRAIN_MULTIGPU_RUN_DIR=/tmp",
            "worker_env.TRAIN_MULTIGPU_RUN_DIR=/tmp: the launch sets this variable",
        ),
        ("+worker_env.PYTHONUNBUFFERED=0", "worker_env.PYTHONUNBUFFERED=0: the launch sets this variable"),
        ("+worker_env.RANK=3", "worker_env.RANK=3: the launch sets this variable"),
        ("+worker_env.MASTER_PORT=1234", "worker_env.MASTER_PORT=1234: the launch sets this variable"),
        ("+worker_env.JAX_COORDINATOR_PORT=1", "worker_env.JAX_COORDINATOR_PORT=1: the launch sets this variable"),
        (
            "+profile.env.CUDA_VISIBLE_DEVICES=1",
            "profile.env.CUDA_VISIBLE_DEVICES=1: the launch sets this variable for every worker itself (the real run would overwrite it) (give it to the launcher instead: CUDA_VISIBLE_DEVICES=... train_multigpu ...)",  # noqa: E501
        ),
    ],
)
def test_worker_env_names_are_checked(run_cli, tmp_path, override, message):
    for extra in (["dry_run=true"], []):
        result = run_cli(override, *extra)
        assert message in one_error_line(result)
    assert not (tmp_path / "runs").exists()


NEW_VARS = """
import json, os, sys
before = set(json.load(open(next(a for a in sys.argv if a.endswith(".json")))))
print("NEW_VARS", " ".join(sorted(set(os.environ) - before)), flush=True)
"""


@pytest.mark.parametrize("topology", ["launcher=single_node", "launcher=skrl_jax"])
def test_every_variable_the_launch_sets_is_refused(run_cli, tmp_path, topology):
    """The list checks.worker_env_names refuses covers every variable a real launch (torchrun
    included) gives its workers beyond the launcher's own environment, but the ones a user's value
    wins over (OMP_NUM_THREADS, JAX_PLATFORMS, the JAX compilation cache's two,
    TORCH_NCCL_ASYNC_ERROR_HANDLING). The launcher's HYDRA_FULL_ERROR=1 (how it catches Hydra's
    errors) must not reach the workers either."""
    import json

    from launcher import plan

    env = clean_env()
    (tmp_path / "before.json").write_text(json.dumps(sorted(env)))
    (tmp_path / "new_vars.py").write_text(NEW_VARS)
    result = run_cli(
        topology,
        "launcher.nproc_per_node=1",
        f"script={tmp_path / 'new_vars.py'}",
        "--",
        str(tmp_path / "before.json"),
        env=env,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    line = next(line for line in result.stdout.splitlines() if line.startswith("NEW_VARS"))
    new = set(line.split()[1:]) - {
        "OMP_NUM_THREADS",
        "JAX_PLATFORMS",
        "JAX_COMPILATION_CACHE_DIR",
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING",
    }
    assert "TRAIN_MULTIGPU_LAUNCH_ID" in new and ("RANK" in new or "JAX_RANK" in new), new
    assert new <= set(plan.LAUNCH_VARS), new - set(plan.LAUNCH_VARS)


# -- a secret key given twice, and every other error that could show a value (issue #18, item 2) --

TWICE = "contradicts {first}=*** (give each key once)"


@pytest.mark.parametrize(
    "first, second, shown",
    [
        ("+worker_env.API_TOKEN", "+worker_env.API_TOKEN", "worker_env.API_TOKEN"),
        ("worker_env.API_TOKEN", "worker_env.API_TOKEN", "worker_env.API_TOKEN"),
        ("++worker_env.API_TOKEN", "++worker_env.API_TOKEN", "worker_env.API_TOKEN"),
        ("+worker_env.API_TOKEN", "++worker_env.API_TOKEN", "worker_env.API_TOKEN"),
        ("+profile.env.DB_PASSWORD", "+profile.env.DB_PASSWORD", "profile.env.DB_PASSWORD"),
        (
            "+ray.runtime_env.env_vars.HF_TOKEN",
            "+ray.runtime_env.env_vars.HF_TOKEN",
            "ray.runtime_env.env_vars.HF_TOKEN",
        ),
    ],
)
@pytest.mark.parametrize("extra", [["dry_run=true"], ["-m", "seed=1,2"], ["--cfg", "job"], ["save_profile=team"]])
def test_a_secret_key_given_twice_shows_neither_value(run_cli, tmp_path, sentinel, first, second, shown, extra):
    """Both orders: the secret first (the message quotes it as what the second contradicts), and
    second (the value the message is about). A value with a space is still one value."""
    for values in ([sentinel, "other"], ["other", sentinel], [f"a {sentinel}", "b"]):
        result = run_cli(*extra, f"{first}={values[0]}", f"{second}={values[1]}")
        line = one_error_line(result)
        assert line == f"train_multigpu: error: {shown}=***: " + TWICE.format(first=first), line
        assert not list(tmp_path.iterdir())
        assert_nowhere(result, tmp_path, sentinel)


@pytest.mark.parametrize(
    "args, message",
    [
        # a -m sweep over secret values, given again
        (
            ["-m", "+worker_env.HF_TOKEN={s},b", "+worker_env.HF_TOKEN=c"],
            "worker_env.HF_TOKEN=***: contradicts +worker_env.HF_TOKEN=*** (give each key once)",
        ),
        # maps holding a secret, given twice (either one the secret)
        (
            ["+worker_env={{HF_TOKEN: {s}}}", "+worker_env={{A: 1}}"],
            "worker_env={{A: 1}}: contradicts +worker_env=*** (give each key once)",
        ),
        (
            ["+worker_env={{A: 1}}", "+worker_env={{HF_TOKEN: {s}}}"],
            "worker_env=***: contradicts +worker_env={{A: 1}} (give each key once)",
        ),
        (
            ["+ray.runtime_env={{env_vars: {{HF_TOKEN: {s}}}}}", "+ray.runtime_env={{x: 1}}"],
            "ray.runtime_env={{x: 1}}: contradicts +ray.runtime_env=*** (give each key once)",
        ),
        # a secret-named key outside the worker environment: not a key, and its value shown nowhere
        (["+HF_TOKEN={s}"], "HF_TOKEN=***: not a train_multigpu key"),
        (["HF_TOKEN={s}"], "HF_TOKEN=***: Key 'HF_TOKEN' not in 'TrainConfig'"),
        (["+foo.HF_TOKEN={s}"], "foo=***: not a train_multigpu key"),
        (["+foo.HF_TOKEN='{s}"], "foo.HF_TOKEN=***: Hydra's override grammar needs this value quoted"),
        (["+foo.HF_TOKEN={s},b"], "foo.HF_TOKEN=***: a comma list is a sweep: one job per value"),
        # a sweep function over a secret: one line, not Hydra's traceback
        (
            ["-m", "+worker_env.HF_TOKEN=glob(*{s})"],
            "worker_env.HF_TOKEN=***: one value, or values to sweep: a,b, choice(a,b) or range(1,3)",
        ),
    ],
)
def test_every_error_masks_a_secret(run_cli, tmp_path, sentinel, args, message):
    result = run_cli(*[a.format(s=sentinel) for a in args], "dry_run=true")
    line = one_error_line(result)
    assert line.startswith("train_multigpu: error: " + message.format(s=sentinel)), line
    assert "*" * 4 not in line.replace("***1", "").replace("***2", ""), line
    assert not list(tmp_path.iterdir())
    assert_nowhere(result, tmp_path, sentinel)


def test_the_before_stop_hook_commands(run_cli, tmp_path, sentinel):
    """What /work/shared/hooks/before-stop runs, in an empty folder: no value shown, no file written."""
    twice = run_cli(f"+worker_env.HOOK_API_TOKEN={sentinel}", "+worker_env.HOOK_API_TOKEN=other", "dry_run=true")
    assert one_error_line(twice) == (
        "train_multigpu: error: worker_env.HOOK_API_TOKEN=***: contradicts +worker_env.HOOK_API_TOKEN=*** "
        "(give each key once)"
    )
    sweep = run_cli("-m", "seed=1,2", f"+worker_env.HOOK_API_TOKEN={sentinel}", "dry_run=true")
    assert sweep.returncode == 0, sweep.stderr
    for result in (twice, sweep):
        assert_nowhere(result, tmp_path, sentinel)
    assert not list(tmp_path.iterdir())


def test_rerun_with_a_secret_given_twice(run_cli, tmp_path, sentinel):
    first = run_cli("run_name=r", "launcher.nproc_per_node=1", f"script={ALLREDUCE}")
    assert first.returncode == 0, first.stdout + first.stderr
    for typed in (
        [f"+worker_env.HF_TOKEN={sentinel}", "+worker_env.HF_TOKEN=x"],
        ["+worker_env.HF_TOKEN=x", f"+worker_env.HF_TOKEN={sentinel}"],
    ):
        result = run_cli("runs", "rerun", "last", *typed)
        assert one_error_line(result) == (
            "train_multigpu: error: worker_env.HF_TOKEN=***: contradicts +worker_env.HF_TOKEN=*** (give each key once)"
        )
        assert_nowhere(result, tmp_path, sentinel)
    assert len(list((tmp_path / "runs").iterdir())) == 1


PROFILE_WITH_SECRETS = """# @package _global_
defaults:
  - examples
  - _self_
profile:
  name: withsecret
  env:
    DB_PASSWORD: {s}
worker_env:
  HF_TOKEN: {s}
"""


@pytest.mark.parametrize(
    "flags",
    [["--cfg", "job"], ["--cfg", "all"], ["--cfg", "job", "--resolve"], ["--info", "config"], ["--info"], ["--help"]],
)
def test_hydra_shows_no_secret_of_a_profile_or_a_resolved_reference(run_cli, tmp_path, sentinel, flags):
    """Hydra prints the composed config itself (--cfg, --info, --help): a profile file's secret values
    and a reference it resolves (--resolve) show as ***, like the dry run shows them; a reference
    unresolved stays as typed."""
    folder = tmp_path / ".train_multigpu" / "profile"
    folder.mkdir(parents=True)
    (folder / "withsecret.yaml").write_text(PROFILE_WITH_SECRETS.format(s=sentinel))
    env = clean_env(MY_API_TOKEN=sentinel + "env")
    result = run_cli(*flags, "profile=withsecret", "+worker_env.MY_API_TOKEN=${oc.env:MY_API_TOKEN}", env=env)
    assert result.returncode == 0, result.stderr
    assert "HF_TOKEN: '***'" in result.stdout and "DB_PASSWORD: '***'" in result.stdout, result.stdout
    if "--resolve" in flags:
        assert "MY_API_TOKEN: '***'" in result.stdout
    else:
        assert "MY_API_TOKEN: ${oc.env:MY_API_TOKEN}" in result.stdout
    assert_nowhere(result, tmp_path / "runs", sentinel, sentinel + "env")
    assert sentinel not in result.stdout + result.stderr
    assert {p.name for p in tmp_path.iterdir()} == {".train_multigpu"}


def test_names_of_secrets_are_not_secrets(run_cli, tmp_path):
    """k8s.secret_env names Kubernetes Secrets and profile.pass_rl_library is a switch: their values are
    shown in errors and recorded as typed (runs rerun launches them again), though their names read as
    secret ones. Every such key of the schema is listed in secrets.NOT_SECRET_KEYS."""
    import dataclasses

    from launcher import secrets
    from launcher.config import schema

    def keys(cls, prefix=""):
        for f in dataclasses.fields(cls):
            kind = getattr(schema, f.type, None) if isinstance(f.type, str) else f.type
            if dataclasses.is_dataclass(kind):
                yield from keys(kind, f"{prefix}{f.name}.")
            else:
                yield prefix + f.name

    named = {key for key in keys(schema.TrainConfig) if secrets.is_secret(key.rsplit(".", 1)[-1])}
    assert named == set(secrets.NOT_SECRET_KEYS)
    assert secrets.mask_override("k8s.secret_env=[HF_TOKEN:hf/token]") == "k8s.secret_env=[HF_TOKEN:hf/token]"
    result = run_cli("profile.pass_rl_library=maybe", "dry_run=true")
    assert "profile.pass_rl_library=maybe: " in one_error_line(result)
