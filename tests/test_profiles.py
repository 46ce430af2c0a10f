"""Cluster profiles: the search path, the shipped example profiles, save_profile, secret masking."""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

import pytest

from conftest import ROOT, clean_env, without_local_addr
from launcher import secrets
from launcher.config import profiles
from launcher.config.compose import compose_dict, to_typed
from launcher.errors import UserError
from launcher.run.supervise import WORKER_WRAPPER
from test_cli import assert_usage_error

EXAMPLES = ROOT / "examples" / "profiles"
# the example profiles' node 0, given an address of TEST-NET-2 (RFC 5737): every host name is
# resolved before launch (docs/multinode.md), and a dry run checks what a launch checks
CLUSTER_HOSTS = {"node0.cluster.example": "198.51.100.10"}
# This machine has no GPU: the tests declare 8 visible ones, which is all the launcher looks at.
EIGHT_GPUS = "0,1,2,3,4,5,6,7"


def write_profile(root: Path, name: str, text: str) -> Path:
    path = root / "profile" / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def global_profile(name: str, extra: str = "") -> str:
    return f"# @package _global_\nprofile:\n  name: {name}\n  script_root: /opt/{name}\n  entry: t.py\n{extra}"


# -- search path ------------------------------------------------------------------------------


def test_search_order_config_path_then_project_then_user(tmp_path):
    a, b, home = tmp_path / "a", tmp_path / "b", tmp_path / "home"
    for d in (a, b, tmp_path / ".train_multigpu", home / ".config" / "train_multigpu"):
        d.mkdir(parents=True)
    env = {"TRAIN_MULTIGPU_CONFIG_PATH": f"{a}:{b}"}
    dirs = profiles.search_dirs(env, str(tmp_path), home=str(home))
    assert dirs == [a, b, tmp_path / ".train_multigpu", home / ".config" / "train_multigpu"]
    xdg = tmp_path / "xdg"
    (xdg / "train_multigpu").mkdir(parents=True)
    assert (
        profiles.search_dirs({"XDG_CONFIG_HOME": str(xdg)}, str(tmp_path), home=str(home))[-1] == xdg / "train_multigpu"
    )


def test_missing_config_path_directory_is_an_error(tmp_path):
    with pytest.raises(UserError, match=r"TRAIN_MULTIGPU_CONFIG_PATH=.*nope is not a directory"):
        profiles.search_dirs({"TRAIN_MULTIGPU_CONFIG_PATH": str(tmp_path / "nope")}, str(tmp_path))


def test_first_directory_wins_and_may_shadow_a_shipped_profile(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    write_profile(first, "team", global_profile("team_first"))
    write_profile(second, "team", global_profile("team_second"))
    write_profile(tmp_path / ".train_multigpu", "examples", global_profile("examples_local"))
    env = {"TRAIN_MULTIGPU_CONFIG_PATH": f"{first}:{second}", "HOME": str(tmp_path)}
    assert compose_dict(["profile=team"], env=env, cwd=str(tmp_path)).profile.name == "team_first"
    assert compose_dict([], env=env, cwd=str(tmp_path)).profile.name == "examples_local"


def test_profile_extends_another_and_sets_launcher_presets_env(tmp_path):
    conf = tmp_path / ".train_multigpu"
    write_profile(conf, "base", global_profile("base", "  env: {NCCL_DEBUG: INFO}\nlauncher:\n  nproc_per_node: '4'\n"))
    write_profile(
        conf,
        "child",
        "# @package _global_\ndefaults:\n  - /profile/base\n  - /presets/debug\n  - _self_\n"
        "profile:\n  name: child\n  env: {NCCL_SOCKET_IFNAME: eth0}\nlauncher:\n  topology: multinode\n  nnodes: '2'\n",
    )
    cfg = to_typed(compose_dict(["profile=child"], env={"HOME": str(tmp_path)}, cwd=str(tmp_path)))
    assert cfg.profile.name == "child" and cfg.profile.script_root == "/opt/base"
    assert cfg.profile.env == {"NCCL_DEBUG": "INFO", "NCCL_SOCKET_IFNAME": "eth0"}
    assert cfg.launcher.topology.value == "multinode" and cfg.launcher.nproc_per_node == "4"
    assert cfg.num_envs == 8  # the preset inside the profile
    # command-line presets apply after the profile
    cfg = to_typed(compose_dict(["profile=child", "num_envs=64"], env={"HOME": str(tmp_path)}, cwd=str(tmp_path)))
    assert cfg.num_envs == 64


def test_unknown_profile_lists_user_profiles(run_cli, tmp_path):
    write_profile(tmp_path / ".train_multigpu", "mine", global_profile("mine"))
    assert_usage_error(run_cli("profile=nope"), "profile=nope: no such profile option", "examples", "mine")


def test_bad_config_path_env_exit_2(run_cli, tmp_path):
    result = run_cli("dry_run=true", env=clean_env(TRAIN_MULTIGPU_CONFIG_PATH=str(tmp_path / "missing")))
    assert_usage_error(
        result,
        f"train_multigpu: error: TRAIN_MULTIGPU_CONFIG_PATH={tmp_path}/missing: {tmp_path}/missing is not a directory",
    )


def test_help_lists_profiles_from_every_directory(run_cli, tmp_path):
    write_profile(tmp_path / ".train_multigpu", "mine", global_profile("mine"))
    result = run_cli("--help")
    assert result.returncode == 0 and "profile: examples, isaaclab, mine" in result.stdout


def test_config_dir_flag_is_searched_first(run_cli, tmp_path):
    write_profile(tmp_path / "cd", "examples", global_profile("from_config_dir"))
    write_profile(tmp_path / ".train_multigpu", "examples", global_profile("from_project"))
    script = tmp_path / "t.py"
    script.write_text("")
    result = run_cli("--config-dir", str(tmp_path / "cd"), f"script={script}", "dry_run=true")
    assert result.returncode == 0, result.stderr
    assert "# profile: from_config_dir" in result.stdout


# -- the shipped example profiles ---------------------------------------------------------------


@pytest.fixture
def example_profiles(tmp_path, isaaclab):
    """The example profiles copied into the project folder, as a team would commit them."""
    target = tmp_path / ".train_multigpu" / "profile"
    target.mkdir(parents=True)
    for path in EXAMPLES.glob("*.yaml"):
        shutil.copy(path, target)
    return isaaclab


def gpu_env(isaaclab, **extra):
    return clean_env(ISAACLAB_PATH=str(isaaclab), CUDA_VISIBLE_DEVICES=EIGHT_GPUS, **extra)


def test_example_one_node_8gpu(run_cli, example_profiles):
    result = run_cli("profile=one_node_8gpu", "task=Isaac-Cartpole-v0", "dry_run=true", env=gpu_env(example_profiles))
    assert result.returncode == 0, result.stderr
    script = example_profiles / "scripts/reinforcement_learning/train.py"
    assert result.stdout.splitlines()[0] == "# profile: one_node_8gpu   topology: single_node   device: cuda (nccl)"
    assert "export NCCL_DEBUG=WARN" in result.stdout
    assert shlex.split(result.stdout.splitlines()[-1])[1:] == [
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "8",
        "--standalone",
        WORKER_WRAPPER,
        str(script),
        "--rl_library",
        "rsl_rl",
        "--task=Isaac-Cartpole-v0",
        "--distributed",
    ]


@pytest.mark.parametrize("node_rank", [0, 1])
def test_example_two_node_c10d(run_cli, example_profiles, node_rank):
    result = run_cli(
        "profile=two_node_c10d",
        f"launcher.node_rank={node_rank}",
        "dry_run=true",
        env=gpu_env(example_profiles),
        hosts=CLUSTER_HOSTS,
    )
    assert result.returncode == 0, result.stderr
    assert "export NCCL_SOCKET_IFNAME=ib0" in result.stdout and "export NCCL_IB_HCA=mlx5" in result.stdout
    assert without_local_addr(shlex.split(result.stdout.splitlines()[-1]))[1:] == [
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "8",
        "--nnodes",
        "2",
        "--node_rank",
        str(node_rank),
        "--rdzv_backend",
        "c10d",
        "--rdzv_endpoint",
        "node0.cluster.example:29400",
        "--rdzv_id",
        "two_node_c10d",
        "--shutdown_timeout",  # the profile's grace_period (60 s): torchrun's own wait after a stop
        "60",
        WORKER_WRAPPER,
        str(example_profiles / "scripts/reinforcement_learning/train.py"),
        "--rl_library",
        "rsl_rl",
        "presets=newton_mjwarp",
        "--distributed",
    ]


def test_example_two_node_jax(run_cli, example_profiles):
    result = run_cli(
        "profile=two_node_jax",
        "launcher.node_rank=1",
        "dry_run=true",
        env=gpu_env(example_profiles),
        hosts=CLUSTER_HOSTS,
    )
    assert result.returncode == 0, result.stderr
    ranks = [line for line in result.stdout.splitlines() if line.startswith("JAX_LOCAL_RANK=")]
    assert len(ranks) == 8
    assert ranks[3].startswith(
        "JAX_LOCAL_RANK=3 JAX_RANK=11 JAX_WORLD_SIZE=16 JAX_COORDINATOR_ADDR=node0.cluster.example JAX_COORDINATOR_PORT=29500 "  # noqa: E501
    )
    assert ranks[3].endswith("train.py --rl_library skrl --ml_framework jax --distributed")


def test_example_profile_too_many_gpus_for_this_host(run_cli, example_profiles):
    """A fact of this host: the dry run prints the plan and warns; the real launch refuses (issue 18 item 9)."""
    env = clean_env(ISAACLAB_PATH=str(example_profiles), CUDA_VISIBLE_DEVICES="0,1")
    result = run_cli("profile=one_node_8gpu", "dry_run=true", env=env)
    assert result.returncode == 0, result.stderr
    assert "--nproc_per_node 8 " in result.stdout.splitlines()[-1]
    assert result.stderr.startswith(
        "train_multigpu: warning: launcher.nproc_per_node=8: more workers than the 2 visible GPU(s)"
    )
    assert_usage_error(
        run_cli("profile=one_node_8gpu", env=env), "launcher.nproc_per_node=8: more workers than the 2 visible GPU(s)"
    )


# -- save_profile -----------------------------------------------------------------------------


def test_save_profile_round_trip(run_cli, tmp_path, example_profiles):
    env = gpu_env(example_profiles, HF_TOKEN="hf-secret-value")
    args = (
        "profile=two_node_c10d",
        "presets=debug",
        "seed=3",
        "launcher.node_rank=1",
        "+worker_env.HF_TOKEN=hf-secret-value",
    )
    result = run_cli("save_profile=team2", *args, env=env)
    assert result.returncode == 0, result.stderr
    saved = tmp_path / ".train_multigpu" / "profile" / "team2.yaml"
    text = saved.read_text()
    assert text.startswith("# @package _global_\n") and "override /rl_library: rsl_rl" in text
    assert "hf-secret-value" not in text and "HF_TOKEN: ${oc.env:HF_TOKEN}" in text
    assert "seed" not in text.split("defaults:")[1] and "node_rank" not in text.split("defaults:")[1]
    # the saved profile reproduces the composition, minus the per-run values
    again = run_cli("profile=team2", "launcher.node_rank=1", "seed=3", "dry_run=true", env=env, hosts=CLUSTER_HOSTS)
    original = run_cli(*args, "dry_run=true", env=env, hosts=CLUSTER_HOSTS)
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[-1] == original.stdout.splitlines()[-1]
    assert "--num_envs=8" in again.stdout


def test_save_profile_errors(run_cli, tmp_path):
    assert run_cli("save_profile=mine").returncode == 0
    assert_usage_error(
        run_cli("save_profile=mine"), "train_multigpu: error: save_profile=mine:", "mine.yaml already exists"
    )
    assert_usage_error(
        run_cli("save_profile=a/b"),
        "save_profile=a/b: a name of letters, digits, '_', '.', '-' (or a path ending in .yaml)",
    )
    assert_usage_error(run_cli("save_profile="), "save_profile=: a profile name or a path ending in .yaml")
    assert_usage_error(
        run_cli("-m", "save_profile=other", "seed=1,2"), "save_profile=other: saves one composition, not a -m sweep"
    )
    assert_usage_error(run_cli("save_profile=bad", "num_envs=many"), "num_envs", "many")
    assert not (tmp_path / ".train_multigpu" / "profile" / "bad.yaml").exists()


def test_save_profile_to_a_path_and_to_config_dir(run_cli, tmp_path):
    assert run_cli("save_profile=out/x.yaml").returncode == 0
    assert (tmp_path / "out" / "x.yaml").is_file()
    (tmp_path / "cd").mkdir()
    assert run_cli("--config-dir", str(tmp_path / "cd"), "save_profile=y").returncode == 0
    assert (tmp_path / "cd" / "profile" / "y.yaml").is_file()
    assert run_cli("--config-dir", str(tmp_path / "cd"), "profile=y", "dry_run=true").returncode == 0


# -- secrets ----------------------------------------------------------------------------------


def test_secret_rule():
    assert secrets.mask_env({"WANDB_API_KEY": "k", "NCCL_DEBUG": "INFO", "HF_TOKEN": ""}) == {
        "WANDB_API_KEY": "***",
        "NCCL_DEBUG": "INFO",
        "HF_TOKEN": "",
    }


PRINT_ENV = """
import hashlib, os
value = os.environ.get("MY_API_TOKEN", "")
print("TOKEN_SHA", hashlib.sha256(value.encode()).hexdigest(), flush=True)
"""


def test_secrets_are_masked_in_dry_run_and_records_but_reach_workers(run_cli, tmp_path):
    import hashlib

    secret = "s3cr3t-value-123"
    script = tmp_path / "print_env.py"
    script.write_text(PRINT_ENV)
    args = (
        "launcher=skrl_jax",
        "launcher.nproc_per_node=1",
        f"script={script}",
        f"+worker_env.MY_API_TOKEN={secret}",
        "+worker_env.NCCL_DEBUG=INFO",
    )
    dry = run_cli(*args, "dry_run=true")
    assert dry.returncode == 0, dry.stderr
    assert (
        secret not in dry.stdout
        and "export MY_API_TOKEN='***'" in dry.stdout
        and "export NCCL_DEBUG=INFO" in dry.stdout
    )
    result = run_cli(*args, "run_name=sec")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"TOKEN_SHA {hashlib.sha256(secret.encode()).hexdigest()}" in result.stdout
    run_dir = next((tmp_path / "runs").glob("*_sec"))
    for name in ("env.json", "command.sh", "config.yaml", "status.json"):
        assert secret not in (run_dir / name).read_text(), name
    assert json.loads((run_dir / "env.json").read_text())["MY_API_TOKEN"] == "***"
    assert 'export MY_API_TOKEN="${MY_API_TOKEN:?' in (run_dir / "command.sh").read_text()
    assert "MY_API_TOKEN: '***'" in (run_dir / "config.yaml").read_text()
