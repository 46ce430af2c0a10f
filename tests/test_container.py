"""The ``container`` group (launcher/container.py): each runtime's exact argv, the dry run that prints
it, the refusals (one line, exit 2, nothing written), ``k8s.image`` as the old spelling of
``container.image``, ``submit=ray`` refused. Pure or in-process: no runtime runs here (the real
podman launches are tests/test_container_podman.py)."""

from __future__ import annotations

import shlex

import pytest

from conftest import build
from inproc import environment, run_main
from launcher import container, paths, plan
from launcher.run import supervise

IMAGE = "nvcr.io/nvidia/isaac-lab:2.3.0"


def dry(tmp_path, *args: str, env: dict | None = None):
    return run_main(["dry_run=true", *args], str(tmp_path), environment(str(tmp_path), **(env or {})))


def command_line(out: str) -> list[str]:
    """The dry run's one command (the line that is not a comment nor an export)."""
    lines = [line for line in out.splitlines() if line and not line.startswith(("#", "export "))]
    assert len(lines) == 1, out
    return shlex.split(lines[0])


def dry_argv(tmp_path, *args: str, env: dict | None = None):
    """A dry run that succeeds: its result and its one command's argv."""
    result = dry(tmp_path, *args, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    return result, command_line(result.stdout)


def test_podman_wraps_the_node_launch_exactly(tmp_path):
    result, argv = dry_argv(
        tmp_path,
        f"container.image={IMAGE}",
        "container.runtime=podman",
        "container.runtime_flags=['--runtime=runc']",
        "container.mounts=['/data:/data:ro','~/.cache/ov:/root/.cache/ov']",
        "container.workdir=/workspace",
        "container.env=['WANDB_API_KEY','ACCEPT_EULA=Y']",
        "container.options=['--shm-size=8g']",
        "python=/opt/py/bin/python",
        "launcher.nproc_per_node=2",
        "+worker_env.HF_TOKEN=abc",
        env={"HOME": str(tmp_path)},
    )
    runs, wrapper = str(tmp_path / "runs"), paths.WORKER_WRAPPER
    at = argv.index(IMAGE)
    entry = paths.CONTAINER_ENTRY
    assert argv[:at] == [
        "podman", "--runtime=runc", "run", "--rm", "--name", "tmg-<launch id>-n0-a0", "--init",
        "--network", "host", "--ipc", "host", "-i",
        "-v", f"{runs}:{runs}", "-v", f"{wrapper}:{wrapper}:ro", "-v", f"{entry}:{entry}:ro", "-v", "/data:/data:ro",
        "-v", f"{tmp_path}/.cache/ov:/root/.cache/ov",
        "-w", "/workspace",
        "-e", "PYTHONUNBUFFERED", "-e", "TRAIN_MULTIGPU_DIST_BACKEND", "-e", "OMP_NUM_THREADS",
        "-e", "ACCEPT_EULA", "-e", "TRAIN_MULTIGPU_RUN_DIR", "-e", "TRAIN_MULTIGPU_LOG_DIR",
        "-e", "TRAIN_MULTIGPU_RANK_LOGS", "-e", "TRAIN_MULTIGPU_NODE_RANK", "-e", "TRAIN_MULTIGPU_LAUNCH_ID",
        "-e", "TRAIN_MULTIGPU_ATTEMPT",
        "--shm-size=8g",
    ]  # fmt: skip
    # the secrets (HF_TOKEN, WANDB_API_KEY) on stdin: the entry program sets them, then execs the launch
    assert argv[at + 1 : at + 6] == ["/opt/py/bin/python", entry, "/opt/py/bin/python", "-m", "torch.distributed.run"]
    assert argv[argv.index("--standalone") + 1] == wrapper  # the rank wrapper, from the launcher's install
    assert "abc" not in result.stdout + result.stderr  # a secret: by name only
    assert "export ACCEPT_EULA=Y" in result.stdout  # a container.env value: in the environment, not argv
    assert "host network and IPC namespaces" in result.stdout
    assert not (tmp_path / "runs").exists()  # a dry run writes nothing


def test_docker_gpus_and_default_python(tmp_path):
    result, argv = dry_argv(tmp_path, "container.image=img", "container.gpus=true")
    assert argv[:3] == ["docker", "run", "--rm"]  # auto outside SLURM: docker
    at = argv.index("img")
    assert argv[at - 2 : at] == ["--gpus", "all"] and argv[at + 1] == "python3"  # the image's interpreter


def test_the_dry_run_passes_the_names_in_the_real_launchs_order(tmp_path):
    """The dry run's container command is the real one: the variables the supervisor adds later
    (run directory, log directory, launch id, attempt) come in the same place in both."""
    args = ["container.image=img", "container.runtime=podman", "device=cpu", "container.env=['A=1']"]
    result, shown = dry_argv(tmp_path, *args)
    real = supervise.prepare(build(args), tmp_path / "logs")
    started = plan.started(real, real.processes[0])

    def names(argv) -> list[str]:
        return [argv[i + 1] for i, word in enumerate(argv) if word == "-e"]

    assert names(shown) == names(started)


def test_podman_gpus_are_cdi_devices():
    c = container.Container("podman", "img", (), (), ("/r", "/w"), None, (), (), (), True)
    argv = container.argv(c, ("python3",), (), "n")
    assert argv[argv.index("img") - 2 : argv.index("img")] == ("--device", "nvidia.com/gpu=all")


def test_apptainer_argv_and_names_by_apptainerenv(tmp_path):
    result, argv = dry_argv(
        tmp_path,
        "container.image=/images/isaac-lab.sif",
        "container.mounts=[/data:/data]",
        "container.workdir=/workspace",
        "container.gpus=true",
        "+worker_env.HF_TOKEN=abc",
    )
    runs, wrapper = str(tmp_path / "runs"), paths.WORKER_WRAPPER
    assert argv[: argv.index("/images/isaac-lab.sif") + 2] == [
        "apptainer", "exec", "--cleanenv", "--nv",
        "--bind", f"{runs}:{runs}", "--bind", f"{wrapper}:{wrapper}:ro", "--bind", "/data:/data",
        "--pwd", "/workspace", "/images/isaac-lab.sif", "python3",
    ]  # fmt: skip
    assert "APPTAINERENV_NAME" in result.stdout
    c = container.Container("apptainer", "a.sif", (), (), ("/r", "/w"), None, ("WANDB_API_KEY",), (), (), False)
    env = {"HF_TOKEN": "abc", "WANDB_API_KEY": "k", "PATH": "/bin"}
    assert container.env_for(c, env, ["HF_TOKEN"]) == {
        "APPTAINERENV_HF_TOKEN": "abc",
        "APPTAINERENV_WANDB_API_KEY": "k",
    }


SLURM_ENV = {
    "SLURM_JOB_ID": "42",
    "SLURM_NNODES": "1",
    "SLURM_NODEID": "0",
    "SLURM_PROCID": "0",
    "SLURM_NTASKS": "1",
    "SLURM_JOB_NODELIST": "gpu-a",
    "SLURM_STEP_NODELIST": "gpu-a",
    "SLURMD_NODENAME": "gpu-a",
}


def test_pyxis_argv_inside_a_slurm_allocation(tmp_path):
    slurm = SLURM_ENV
    result, argv = dry_argv(
        tmp_path,
        "launcher=slurm",
        "container.image='nvcr.io#nvidia/isaac-lab:2.3.0'",
        "container.mounts=['/data:/data:ro']",
        "container.workdir=/workspace",
        "+worker_env.HF_TOKEN=abc",
        "launcher.nproc_per_node=1",
        env=slurm,
    )
    runs, wrapper = str(tmp_path / "runs"), paths.WORKER_WRAPPER
    at = argv.index("python3")
    assert argv[:at] == [
        "srun", "--overlap", "--nodes=1", "--ntasks=1", "--kill-on-bad-exit=1", "--nodelist=gpu-a",
        "--container-image=nvcr.io#nvidia/isaac-lab:2.3.0", "--container-name=tmg-<launch id>-n0",
        f"--container-mounts={runs}:{runs},{wrapper}:{wrapper}:ro,/data:/data:ro",
        "--container-workdir=/workspace",
        "--container-env=HF_TOKEN,PYTHONUNBUFFERED,TRAIN_MULTIGPU_DIST_BACKEND,OMP_NUM_THREADS,"
        "TRAIN_MULTIGPU_RUN_DIR,TRAIN_MULTIGPU_LOG_DIR,TRAIN_MULTIGPU_RANK_LOGS,TRAIN_MULTIGPU_NODE_RANK,"
        "TRAIN_MULTIGPU_LAUNCH_ID,TRAIN_MULTIGPU_ATTEMPT",
    ]  # fmt: skip
    assert "abc" not in result.stdout


def test_jax_ranks_each_in_their_container(tmp_path):
    result = dry(tmp_path, "launcher=skrl_jax", "launcher.nproc_per_node=2", "container.image=img")
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith("JAX_LOCAL_RANK")]
    assert len(lines) == 2
    assert "--name 'tmg-<launch id>-n0-a0-r0'" in lines[0] and "--name 'tmg-<launch id>-n0-a0-r1'" in lines[1]
    assert "-e JAX_RANK" in lines[1]


BAD = [
    (("container.image=img", "container.runtime=pyxis"), "container.runtime=pyxis: pyxis is SLURM's plugin"),
    (("container.image=x.sif", "container.runtime=docker"), "a .sif file runs under apptainer or singularity"),
    (("container.image=x.sqsh",), "container.runtime=auto (pyxis, for x.sqsh): pyxis is SLURM's plugin"),
    (("container.image=img", "container.mounts=[data:/data]"), "container.mounts=data:/data: SRC:DST[:ro|rw]"),
    (("container.image=img", "container.mounts=['/a:/b:rx']"), "container.mounts=/a:/b:rx: SRC:DST[:ro|rw]"),
    (("container.image=img", "container.env=[1BAD]"), "container.env=1BAD: NAME (passed through"),
    (("container.image=img", "container.workdir=work"), "container.workdir=work: an absolute path"),
    (("container.image=img", "container.env=['HF_TOKEN=abc']"), "container.env=HF_TOKEN=***: a secret's value does"),
    (("container.image=img", "container.runtime_flags=[runc]"), "container.runtime_flags=runc: the runtime's"),
    (("container.image=-v",), "container.image=-v: an image"),
    (("container.image=img", "container.runtime=rkt"), "container.runtime=rkt: Invalid value 'rkt'"),
    (("container.image=img", "submit=ray"), "container.image=img: submit=ray does not run a launch in a container"),
    (("container.image=img", "submit=k8s", "k8s.image=other"), "container.image=img: k8s.image=other says otherwise"),
    (("container.image=img", "submit=k8s", "container.runtime=podman"), "container.runtime=podman: submit=k8s runs"),
]


@pytest.mark.parametrize(("args", "message"), BAD, ids=[m.split(":")[0] + str(i) for i, (_, m) in enumerate(BAD)])
@pytest.mark.parametrize("dry_run", [True, False], ids=["dry", "real"])
def test_bad_values_are_one_line_exit_2_nothing_written(tmp_path, args, message, dry_run):
    env = environment(str(tmp_path))
    result = run_main([*args, f"dry_run={str(dry_run).lower()}"], str(tmp_path), env)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == []


def test_a_runtime_not_installed_is_one_line_exit_2_nothing_written(tmp_path):
    """A real launch asks the image first (launcher/container_probe.py): a runtime missing from PATH
    is said as such, before anything is written."""
    (tmp_path / "bin").mkdir()
    env = environment(str(tmp_path), PATH=str(tmp_path / "bin"))
    result = run_main(["container.image=img", "container.runtime=podman", "device=cpu"], str(tmp_path), env)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr == (
        "train_multigpu: error: container.runtime=podman: podman is not installed here "
        "(install it, or choose another container.runtime)\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == ["bin"]


def test_k8s_image_is_the_old_spelling_of_container_image(tmp_path):
    for args in (("container.image=img:1",), ("k8s.image=img:1",), ("container.image=img:1", "k8s.image=img:1")):
        result = dry(tmp_path, "submit=k8s", *args)
        assert result.returncode == 0, result.stderr
        assert "image: img:1" in result.stdout


def test_a_kubeflow_pod_checks_the_script_in_itself(tmp_path):
    """launcher=k8s: the pod is the container (container.image, carried into the pods, is its image), so
    its launcher checks the script where it runs, as without an image."""
    pod = {
        "PET_NNODES": "1",
        "PET_NPROC_PER_NODE": "1",
        "PET_NODE_RANK": "0",
        "PET_MASTER_ADDR": "127.0.0.1",
        "PET_MASTER_PORT": "29400",
    }
    script = tmp_path / "missing.py"
    result = dry(tmp_path, "launcher=k8s", "container.image=img", f"script={script}", "device=cpu", env=pod)
    assert result.returncode == 0, result.stderr
    assert f"script={script}: the training script does not exist" in result.stderr


def test_the_keys_are_ignored_without_an_image(tmp_path):
    result = dry(tmp_path, "container.mounts=['/a:/b']", "container.runtime=pyxis")
    assert result.returncode == 0, result.stderr
    assert "container:" not in result.stdout


def test_names_are_unique_per_node_attempt_and_rank():
    names = {
        container.name_of("abcdef0123456789", node, attempt, rank, "podman")
        for node in (0, 1)
        for attempt in ("0", "1")
        for rank in (None, 0, 1)
    }
    assert len(names) == 12


def test_submit_ssh_gives_every_host_the_container_keys(tmp_path):
    """Each host's launcher composes the same container.* overrides, so each runs its own container
    (its dry run, in the SSH preflight, prints the wrapped command); the secret stays masked."""
    result = dry(
        tmp_path, "container.image=img", "container.runtime=podman", "submit=ssh", "ssh.hosts=[10.0.0.1,10.0.0.2]"
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    nodes = [line for line in lines if line.startswith("ssh ")]
    # each node's arguments travel on its channel, shown under its ssh line (docs/ssh.md)
    sent = [line for line in lines if line.startswith("#   its arguments, on the channel: ")]
    assert len(nodes) == 2 and len(sent) == 2, result.stdout
    assert all("container.image=img container.runtime=podman" in line for line in sent), result.stdout


def test_submit_slurm_carries_the_container_keys_into_the_job(tmp_path):
    result = dry(tmp_path, "container.image=/shared/isaac-lab.sif", "submit=slurm", "+worker_env.HF_TOKEN=abc")
    assert result.returncode == 0, result.stderr
    (srun,) = [line for line in result.stdout.splitlines() if line.startswith("srun ")]
    assert "launcher=slurm container.image=/shared/isaac-lab.sif" in srun and "abc" not in result.stdout
    # in the job, each node's launcher wraps its launch: apptainer for a .sif (the dry run there shows it)
    inside = dry(tmp_path, "launcher=slurm", "container.image=/shared/isaac-lab.sif", env=SLURM_ENV)
    assert inside.returncode == 0, inside.stderr
    assert command_line(inside.stdout)[:3] == ["apptainer", "exec", "--cleanenv"]


@pytest.mark.parametrize("runtime", ["auto", "podman"])
def test_submit_slurms_dry_run_shows_the_container_node_0_runs(tmp_path, runtime):
    """The batch script starts each node's launcher; inside the job that launcher starts the container.
    The dry run of ``submit=slurm`` showed only the batch script: it now shows node 0's container
    command as planned, the one ``launcher=slurm`` inside the allocation runs, up to what SLURM gives
    at run time (the job id and host in the rendezvous, pyxis's --nodelist)."""
    args = [f"container.image={IMAGE}", f"container.runtime={runtime}", "launcher.nproc_per_node=2"]
    args += ["+worker_env.HF_TOKEN=abc", f"run_dir={tmp_path / 'job'}"]
    submitted = dry(tmp_path, "submit=slurm", *args)
    assert submitted.returncode == 0, submitted.stderr
    script, node0 = submitted.stdout.split("\n# profile: ", 1)
    node0 = "# profile: " + node0
    assert "srun --nodes 1" in script and "in the job, each node's launcher runs its ranks in the container" in node0
    inside = dry(tmp_path, "launcher=slurm", *args, env=SLURM_ENV)
    assert inside.returncode == 0, inside.stderr

    def planned(argv: list[str]) -> list[str]:
        drop = {"--rdzv_endpoint", "--rdzv_id"}
        return [w for i, w in enumerate(argv) if w not in drop and argv[i - 1] not in drop and "--nodelist" not in w]

    assert planned(command_line(node0)) == planned(command_line(inside.stdout))
    assert command_line(node0)[0] == ("srun" if runtime == "auto" else "podman")  # pyxis: SLURM's own
    assert "abc" not in submitted.stdout + submitted.stderr


def test_the_isaaclab_preset(tmp_path):
    result, argv = dry_argv(
        tmp_path,
        "profile=isaaclab",
        "container=isaaclab",
        "container.image=nvcr.io/nvidia/isaac-lab:2.3.0",
        "task=Isaac-Cartpole-v0",
        env={"HOME": str(tmp_path)},
    )
    for name in ("ACCEPT_EULA", "PRIVACY_CONSENT", "OMNI_KIT_ACCEPT_EULA"):
        assert argv[argv.index(name) - 1] == "-e"
    assert "export ACCEPT_EULA=Y" in result.stdout and "export PRIVACY_CONSENT=Y" in result.stdout
    assert f"{tmp_path}/.cache/train_multigpu/isaac-sim/ov:/root/.cache/ov" in argv
    at = argv.index("nvcr.io/nvidia/isaac-lab:2.3.0")
    assert argv[at + 1] == "/isaac-sim/python.sh"
    assert "/workspace/isaaclab/scripts/reinforcement_learning/train.py" in argv
    assert not (tmp_path / ".cache").exists()  # made by a real launch only
