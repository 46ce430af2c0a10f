"""Isaac Lab compatibility through the real command line (issue 13, items 18-22): Isaac Lab's presets
are an open set, the dry run prints the argv a real launch starts, and Isaac Lab is found without
ISAACLAB_PATH when its package is importable from a source checkout."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from conftest import clean_env
from launcher.config import compose
from launcher.config.isaaclab import IsaacLabCheckout, isaaclab_checkout
from launcher.run.supervise import WORKER_WRAPPER
from test_cli import assert_usage_error

ISAACLAB_TRAIN = "scripts/reinforcement_learning/train.py"
UNKNOWN_PRESET = (
    "presets=newton: no such presets option; available: debug, newton_mjwarp "
    "(train_multigpu --info searchpath shows where presets/ configs are looked up)"
)


def command_of(stdout: str) -> list[str]:
    return shlex.split(stdout.splitlines()[-1])


# -- item 18: presets we do not ship are Isaac Lab's ----------------------------------------------


@pytest.mark.parametrize("preset", ["newton", "isaacsim_physx"])
def test_isaaclab_presets_we_do_not_ship_are_forwarded(run_cli, isaaclab, preset):
    env = clean_env(ISAACLAB_PATH=str(isaaclab), CUDA_VISIBLE_DEVICES="0,1,2,3")  # GPUs cannot exist here
    result = run_cli("--num_gpus", "4", "--task=Isaac-Cartpole-v0", f"presets={preset}", "--dry_run", env=env)
    assert result.returncode == 0, result.stderr
    assert command_of(result.stdout)[-5:] == [
        "--rl_library",
        "rsl_rl",
        "--task=Isaac-Cartpole-v0",
        f"presets={preset}",
        "--distributed",
    ]
    assert f"# presets: applied -; forwarded to the training script as presets=NAME: {preset}" in result.stdout


def test_ours_still_apply_next_to_forwarded_ones(run_cli, isaaclab):
    env = clean_env(ISAACLAB_PATH=str(isaaclab))
    result = run_cli("--task=X", "presets=[debug,newton]", "--headless", "dry_run=true", env=env)
    assert result.returncode == 0, result.stderr
    # debug's values (not typed) come first; the forwarded preset where presets= was typed
    assert command_of(result.stdout)[-8:] == [
        "--rl_library",
        "rsl_rl",
        "--num_envs=8",
        "--max_iterations=5",
        "--task=X",
        "presets=newton",
        "--headless",
        "--distributed",
    ]
    assert "# presets: applied debug; forwarded to the training script as presets=NAME: newton" in result.stdout


def test_isaaclabs_comma_list_is_one_list_of_presets_passed_on_as_typed(run_cli, isaaclab):
    env = clean_env(ISAACLAB_PATH=str(isaaclab))
    result = run_cli("presets=newton_mjwarp,ovrtx", "dry_run=true", env=env)
    assert result.returncode == 0, result.stderr
    assert command_of(result.stdout)[-2:] == ["presets=newton_mjwarp,ovrtx", "--distributed"]
    assert "# presets: applied newton_mjwarp; forwarded to the training script as presets=NAME: ovrtx" in result.stdout


def test_a_sweep_over_isaaclab_presets_forwards_one_per_job(run_cli, isaaclab):
    env = clean_env(ISAACLAB_PATH=str(isaaclab))
    result = run_cli("-m", "presets=newton,isaacsim_physx", "dry_run=true", env=env)
    assert result.returncode == 0, result.stderr
    commands = [shlex.split(line) for line in result.stdout.splitlines() if "torch.distributed.run" in line]
    assert [c[-2] for c in commands] == ["presets=newton", "presets=isaacsim_physx"]


def test_the_examples_profile_keeps_refusing_unknown_presets(run_cli, tmp_path):
    assert_usage_error(run_cli("presets=newton", "dry_run=true"), UNKNOWN_PRESET)
    assert_usage_error(run_cli("presets=[debug,newton]", "dry_run=true"), UNKNOWN_PRESET)
    assert_usage_error(run_cli("save_profile=mine", "presets=newton"), UNKNOWN_PRESET)
    assert not (tmp_path / ".train_multigpu").exists() and not (tmp_path / "runs").exists()


@pytest.mark.parametrize("value", ["1", "null", "[a,[b]]", "x,2.5"])
def test_a_presets_value_without_plain_names_is_one_line(run_cli, isaaclab, value):
    result = run_cli(f"presets={value}", "dry_run=true", env=clean_env(ISAACLAB_PATH=str(isaaclab)))
    assert_usage_error(
        result,
        f"presets={value}: preset names: letters, digits, '_', '.', '-' (not a number, true, false or null) "
        "(one name, a list presets=[a,b], or Isaac Lab's presets=a,b)",
    )
    assert len(result.stderr.splitlines()) == 1


# -- item 21: the dry run prints what really runs -------------------------------------------------

CAPTURE = """
import os, sys
rank = os.environ.get("RANK", os.environ.get("JAX_RANK"))
pid = os.getppid() if "RANK" in os.environ else os.getpid()  # torchrun's agent, or the JAX rank itself
with open(os.path.join(os.environ["TRAIN_MULTIGPU_RUN_DIR"], f"cmdline{rank}"), "wb") as out:
    out.write(open(f"/proc/{pid}/cmdline", "rb").read())
"""


def _without_env_prefix(tokens: list[str]) -> list[str]:
    at = 0
    while at < len(tokens) and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", tokens[at]):
        at += 1
    return tokens[at:]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("topology", ["single_node", "skrl_jax"])
def test_the_dry_run_prints_the_argv_the_supervisor_starts(run_cli, tmp_path, topology):
    script = tmp_path / "capture.py"
    script.write_text(CAPTURE)
    args = (
        f"script={script}",
        f"launcher={topology}",
        "launcher.nproc_per_node=2",
        "--task=X",
        "--headless",
        "presets=debug",
        "--",
        "--x",
    )
    dry = run_cli("dry_run=true", *args)
    assert dry.returncode == 0, dry.stderr
    lines = dry.stdout.splitlines()
    printed = [
        _without_env_prefix(shlex.split(line)) for line in lines if line and not line.startswith(("#", "export "))
    ]
    assert f"# {WORKER_WRAPPER} runs each rank's script as __main__, unchanged" in dry.stdout

    real = run_cli(*args)
    assert real.returncode == 0, real.stdout + real.stderr
    run_dir = Path(
        [text for text in real.stdout.splitlines() if "run directory:" in text][-1]
        .rsplit("run directory:", 1)[1]
        .strip()
    )
    if topology == "single_node":  # one torchrun, seen by both ranks as their parent
        started = [(run_dir / "cmdline0").read_bytes().split(b"\0")[:-1]]
        assert (run_dir / "cmdline1").read_bytes() == (run_dir / "cmdline0").read_bytes()
    else:  # one process per JAX rank
        started = [(run_dir / f"cmdline{rank}").read_bytes().split(b"\0")[:-1] for rank in (0, 1)]
    assert printed == [[token.decode() for token in argv] for argv in started]
    assert printed[0][printed[0].index(WORKER_WRAPPER) + 1] == str(script)
    # command.sh, the run's re-runnable record, holds the same command lines
    recorded = [
        _without_env_prefix(shlex.split(line.rstrip(" &")))
        for line in (run_dir / "command.sh").read_text().splitlines()
        if line and not line.startswith(("#", "export ", "set ", "wait "))
    ]
    assert recorded == printed


# -- item 22: Isaac Lab found without ISAACLAB_PATH -----------------------------------------------


def fake_isaaclab(root: Path, checkout: bool = True) -> Path:
    """An Isaac Lab source tree: source/isaaclab/isaaclab/ (the package, whose import would leave a
    mark) and, for a checkout, scripts/reinforcement_learning/train.py. Returns the PYTHONPATH entry."""
    package = root / "source" / "isaaclab" / "isaaclab"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(f"open({str(root / 'IMPORTED')!r}, 'w').close()\n")
    if checkout:
        (root / ISAACLAB_TRAIN).parent.mkdir(parents=True)
        (root / ISAACLAB_TRAIN).write_text("print('isaac lab train.py')\n")
    return package.parent


def test_isaaclab_is_found_through_its_importable_package(run_cli, tmp_path):
    lab = tmp_path / "IsaacLab"
    env = clean_env(PYTHONPATH=str(fake_isaaclab(lab)))
    result = run_cli("--task=X", "presets=newton", "dry_run=true", env=env)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("# profile: isaaclab ")  # selected as ISAACLAB_PATH selects it
    assert (
        f"# Isaac Lab: {lab} (ISAACLAB_PATH unset; found through the isaaclab package at {lab}/source/isaaclab/isaaclab)"  # noqa: E501
        in lines
    )
    assert command_of(result.stdout)[-6:] == [
        str(lab / ISAACLAB_TRAIN),
        "--rl_library",
        "rsl_rl",
        "--task=X",
        "presets=newton",
        "--distributed",
    ]
    assert not (lab / "IMPORTED").exists()  # located, never imported


def test_isaaclab_path_wins_over_the_importable_package(run_cli, tmp_path, isaaclab):
    env = clean_env(PYTHONPATH=str(fake_isaaclab(tmp_path / "Other")), ISAACLAB_PATH=str(isaaclab))
    result = run_cli("dry_run=true", env=env)
    assert result.returncode == 0, result.stderr
    assert str(isaaclab / ISAACLAB_TRAIN) in command_of(result.stdout) and "# Isaac Lab:" not in result.stdout


def test_a_package_outside_a_checkout_selects_nothing(run_cli, tmp_path):
    env = clean_env(PYTHONPATH=str(fake_isaaclab(tmp_path / "site", checkout=False)))
    result = run_cli("dry_run=true", env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("# profile: examples ")
    assert_usage_error(
        run_cli("profile=isaaclab", "dry_run=true", env=env),
        "profile.script_root=: Environment variable 'ISAACLAB_PATH' not found, and no importable isaaclab package "
        "lives in an Isaac Lab checkout",
    )


def test_checkout_lookup_is_pure_and_reads_isaaclab_path_first(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(fake_isaaclab(tmp_path / "Lab")))
    found = isaaclab_checkout({})
    assert (
        found is not None and found.root == str(tmp_path / "Lab") and "found through the isaaclab package" in found.how
    )
    assert isaaclab_checkout({"ISAACLAB_PATH": "/x"}) == IsaacLabCheckout("/x", "ISAACLAB_PATH")
    assert compose.with_default_profile([], {}) == ["profile=isaaclab"]
    assert compose.with_default_profile(["profile=examples"], {}) == ["profile=examples"]
    assert not (tmp_path / "Lab" / "IMPORTED").exists()


# -- issue 18 item 9: a dry run shows the plan where this host cannot resolve node 0 --------------
# Isaac Lab's own launcher tests build the command for `--rdzv_endpoint host0:29400` on a machine that
# has no host0: the dry run prints the command, then one warning line; a real launch still refuses.


def _resolves(name: str) -> bool:
    import socket

    try:
        socket.getaddrinfo(name, None)
    except OSError:
        return False
    return True


@pytest.mark.parametrize(
    "argv",
    [
        ["--num_gpus", "2", "--nnodes", "3", "--node_rank", "1", "--rdzv_endpoint", "host0:29400", "--task", "X"],
        [
            *("--num_gpus", "2", "--nnodes", "3", "--node_rank", "1", "--rdzv_backend", "c10d"),
            *("--rdzv_endpoint", "host0:29400", "--rdzv_id", "bench", "--task", "X"),
        ],
    ],
    ids=["multi_node_rendezvous_options_reach_torchrun", "launcher_forwards_multi_node_rendezvous"],
)
def test_isaaclabs_multinode_cases_print_the_command_where_host0_does_not_resolve(run_cli, isaaclab, argv):
    env = clean_env(ISAACLAB_PATH=str(isaaclab), CUDA_VISIBLE_DEVICES="0,1")  # GPUs cannot exist here
    result = run_cli(*argv, "--dry_run", env=env)
    assert result.returncode == 0, result.stderr
    command = command_of(result.stdout)
    assert command[command.index("--nnodes") + 1] == "3"
    assert command[command.index("--node_rank") + 1] == "1"
    assert command[command.index("--rdzv_endpoint") + 1] == "host0:29400"
    if "--rdzv_id" in argv:
        assert command[command.index("--rdzv_id") + 1] == "bench"
    assert command[-3:] == ["--rl_library", "rsl_rl", "--task=X", "--distributed"][-3:]
    warned = [line for line in result.stderr.splitlines() if line.startswith("train_multigpu: warning: ")]
    if _resolves("host0"):  # a machine that knows a host0 has nothing to warn about
        assert warned == [], result.stderr
    else:
        assert len(warned) == 1 and warned[0].startswith(
            "train_multigpu: warning: launcher.rdzv_endpoint=host0:29400: the host 'host0' does not resolve"
        ), result.stderr
        real = run_cli(*argv, env=env)
        assert real.returncode == 2, real.stderr
        assert real.stderr.startswith(
            "train_multigpu: error: launcher.rdzv_endpoint=host0:29400: the host 'host0' does not resolve"
        )


def test_a_committed_cluster_profile_dry_runs_on_a_login_node(run_cli, isaaclab, tmp_path):
    """examples/profiles/two_node_c10d.yaml on a machine that cannot resolve node0.cluster.example and
    has no GPU: the plan, then one warning per fact of this host; exit 0."""
    from test_profiles import EXAMPLES

    target = tmp_path / ".train_multigpu" / "profile"
    target.mkdir(parents=True)
    (target / "two_node_c10d.yaml").write_text((EXAMPLES / "two_node_c10d.yaml").read_text())
    env = clean_env(ISAACLAB_PATH=str(isaaclab))  # CUDA_VISIBLE_DEVICES="": no GPU visible
    result = run_cli("profile=two_node_c10d", "launcher.node_rank=1", "dry_run=true", env=env)
    assert result.returncode == 0, result.stderr
    command = command_of(result.stdout)
    assert command[command.index("--rdzv_endpoint") + 1] == "node0.cluster.example:29400"
    assert command[-3:] == ["--rl_library", "rsl_rl", "presets=newton_mjwarp", "--distributed"][-3:]
    warned = result.stderr.splitlines()
    assert all(line.startswith("train_multigpu: warning: ") for line in warned), result.stderr
    assert any("launcher.rdzv_endpoint=node0.cluster.example:29400: the host" in line for line in warned)
