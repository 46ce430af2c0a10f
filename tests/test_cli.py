"""The real command line, in a subprocess: exit codes, one-line errors, dry run, Hydra's flags."""

from __future__ import annotations

import shlex
import subprocess
import sys

from conftest import clean_env
from launcher.run.supervise import WORKER_WRAPPER


def assert_usage_error(result, *fragments: str) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr


def test_dry_run_prints_the_plan_and_starts_nothing(run_cli, tmp_path):
    result = run_cli("--dry_run", "presets=debug")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("# profile: examples   topology: single_node   device: cpu (gloo)")
    command = shlex.split(lines[-1])
    assert command[1:6] == ["-m", "torch.distributed.run", "--nproc_per_node", "2", "--standalone"]
    assert command[-3:] == ["--num_envs=8", "--max_iterations=5", "--distributed"]
    assert not (tmp_path / "runs").exists()


def test_dry_run_hydra_grammar_jax(run_cli):
    result = run_cli("launcher=skrl_jax", "launcher.nproc_per_node=2", "task=Pendulum-v1", "dry_run=true")
    assert result.returncode == 0, result.stderr
    ranks = [line for line in result.stdout.splitlines() if line.startswith("JAX_LOCAL_RANK=")]
    assert len(ranks) == 2 and "JAX_RANK=1 JAX_WORLD_SIZE=2 JAX_COORDINATOR_ADDR=127.0.0.1" in ranks[1]
    assert ranks[0].endswith("--ml_framework jax --task=Pendulum-v1 --distributed")


def test_isaaclab_path_selects_the_isaaclab_profile(run_cli, isaaclab):
    env = clean_env(ISAACLAB_PATH=str(isaaclab), CUDA_VISIBLE_DEVICES="0,1,2,3")
    result = run_cli(
        "--num_gpus",
        "4",
        "--master_port",
        "29504",
        "--task=Isaac-Dexsuite-Kuka-Allegro-Reorient-v0",
        "--num_envs=4096",
        "--max_iterations=100",
        "--run_name=gpu4_vis",
        "presets=newton_mjwarp",
        "--dry_run",
        env=env,
    )
    assert result.returncode == 0, result.stderr
    assert "# profile: isaaclab" in result.stdout
    assert result.stdout.splitlines()[-1].endswith(
        f"-m torch.distributed.run --nproc_per_node 4 --master_port 29504 {WORKER_WRAPPER} {isaaclab}/scripts/reinforcement_learning/train.py "  # noqa: E501
        "--rl_library rsl_rl --task=Isaac-Dexsuite-Kuka-Allegro-Reorient-v0 --num_envs=4096 --max_iterations=100 "
        "--run_name=gpu4_vis presets=newton_mjwarp --distributed"
    )


def test_hydra_cfg_flag_works(run_cli):
    result = run_cli("--cfg", "job", "launcher=single_node", "seed=3")
    assert result.returncode == 0, result.stderr
    assert "topology: single_node" in result.stdout and "seed: 3" in result.stdout


def test_help_documents_both_grammars(run_cli):
    result = run_cli("--help")
    assert result.returncode == 0
    for text in ("train_multigpu", "--num_gpus", "launcher=multinode", "dry_run", "Isaac Lab", "presets"):
        assert text in result.stdout


def test_version_names_train_multigpu_then_hydra(run_cli):
    # submit=ssh's preflight compares it with every host's (launcher/ssh/preflight.py); Hydra's own
    # --version printed only "Hydra 1.3.8"
    import hydra

    from launcher import __version__

    for args in (["--version", "seed=3"], ["--version"]):
        result = run_cli(*args)
        assert (result.returncode, result.stderr) == (0, "")
        assert result.stdout == f"train_multigpu {__version__} (Hydra {hydra.__version__})\n"
    # the plain question is answered before Hydra is imported (every host of a submit=ssh launch is asked)
    probe = (
        "import sys; sys.argv = ['train_multigpu', '--version']; from launcher.__main__ import entry\n"
        "try:\n    entry()\nexcept SystemExit:\n    pass\nprint('hydra' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.splitlines()[-1] == "False", out.stdout


def test_semantic_error_is_one_line_exit_2(run_cli):
    result = run_cli("--num_gpus", "0")
    assert_usage_error(result, "train_multigpu: error: launcher.nproc_per_node=0: an integer >= 1")
    assert len(result.stderr.strip().splitlines()) == 1


def test_unknown_key_fails_at_composition_exit_2(run_cli):
    assert_usage_error(
        run_cli("launcher.nproc_per_nod=2"), "launcher.nproc_per_nod=2: Key 'nproc_per_nod' not in 'LauncherConfig'"
    )


def test_wrong_type_fails_at_composition_exit_2(run_cli):
    assert_usage_error(run_cli("num_envs=many"), "num_envs", "many")


def test_unknown_group_option_lists_the_choices(run_cli):
    assert_usage_error(run_cli("launcher=cluster9"), "launcher", "single_node", "skrl_jax")


def test_isaaclab_profile_without_isaaclab_path(run_cli):
    assert_usage_error(run_cli("profile=isaaclab"), "ISAACLAB_PATH")


def test_grammar_error_exit_2(run_cli):
    assert_usage_error(run_cli("stray"), "train_multigpu: error: argument=stray")


def test_full_error_shows_the_traceback(run_cli):
    result = run_cli("--num_gpus", "0", env=clean_env(HYDRA_FULL_ERROR="1"))
    assert result.returncode != 0 and "Traceback" in result.stderr and "UserError" in result.stderr


def test_missing_script_is_reported(run_cli, tmp_path):
    assert_usage_error(
        run_cli(f"script={tmp_path}/none.py"), f"script={tmp_path}/none.py: the training script does not exist"
    )


def test_unknown_key_added_with_plus_is_rejected(run_cli):
    assert_usage_error(
        run_cli("+launcher.nproc=2"), "train_multigpu: error: launcher.nproc=2: not a train_multigpu key"
    )


def test_launcher_never_imports_torch_jax_or_ray(tmp_path):
    import subprocess
    import sys

    code = (
        "import sys; from launcher.cli import main; rc = main(['dry_run=true', 'launcher=skrl_jax']);"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('torch', 'jax', 'jaxlib', 'numpy', 'skrl', 'ray'));"
        "print('HEAVY', heavy); sys.exit(rc)"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=clean_env(), capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "HEAVY []" in result.stdout


def test_the_dry_run_imports_no_http_client(tmp_path):
    """The webhook (notify.url) and the MLflow server's probe need urllib.request, and with it
    http.client, email and ssl: 2.4 % of a dry run's instructions (benchmarks/startup.py), and a dry
    run posts nothing and probes no store that is not a server. (MLflow's own default store is
    MLflow's to say: with no tracking_uri the dry run imports mlflow to print it.)"""
    code = (
        "import sys; sys.argv[0] = 'train_multigpu'; from launcher.__main__ import entry\n"
        "try:\n    entry()\nexcept SystemExit as e:\n    rc = e.code\n"
        "print('HEAVY', sorted(m for m in sys.modules if m.split('.')[0] in "
        "('http', 'email', 'ssl', 'mlflow', 'wandb', 'torch', 'jax', 'ray') or m == 'urllib.request'))\n"
        "sys.exit(rc)"
    )
    for extra in (
        [],
        ["notify.url=https://hooks.example/x", "tracker=mlflow", "tracker.mlflow.tracking_uri=sqlite:///m.db"],
    ):
        argv = [sys.executable, "-c", code, "dry_run=true", *extra]
        result = subprocess.run(argv, cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        assert "HEAVY []" in result.stdout, result.stdout[-2000:]


def test_num_gpus_with_no_visible_gpu_is_refused(run_cli):
    """Issue 13 item 6: Isaac Lab's --num_gpus 4 on a machine without GPUs silently became 4 CPU
    workers. This machine has no GPU; the count comes from CUDA_VISIBLE_DEVICES='' (clean_env)."""
    result = run_cli("--num_gpus", "4", "--dry_run")
    assert result.returncode == 2
    assert result.stderr == (
        "train_multigpu: error: --num_gpus=4: no GPU is visible on this machine (from CUDA_VISIBLE_DEVICES=''; "
        "for CPU workers write launcher.nproc_per_node=4 or add device=cpu)\n"
    )
    # device=cpu says CPU workers are meant
    result = run_cli("--num_gpus", "2", "device=cpu", "--dry_run")
    assert result.returncode == 0, result.stderr
    assert "--nproc_per_node 2" in result.stdout.splitlines()[-1]


def test_num_gpus_counts_visible_gpus(run_cli):
    # No GPU exists here: CUDA_VISIBLE_DEVICES (one of the launcher's GPU-count inputs) says 4 are visible.
    result = run_cli("--num_gpus", "4", "--dry_run", env=clean_env(CUDA_VISIBLE_DEVICES="0,1,2,3"))
    assert result.returncode == 0, result.stderr
    assert "device: cuda (nccl)" in result.stdout and "--nproc_per_node 4" in result.stdout


def test_cpu_oversubscription_is_refused_with_the_numbers(run_cli):
    import os

    cores = len(os.sched_getaffinity(0))
    result = run_cli("launcher.nproc_per_node=100000", "dry_run=true")
    assert result.returncode == 2
    assert result.stderr.startswith(
        f"train_multigpu: error: launcher.nproc_per_node=100000: more than 4 CPU workers per usable core: "
        f"{cores} core(s) here allow at most {4 * cores} ("
    )
