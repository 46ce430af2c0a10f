"""The plan is pure: config + host facts in, exact argv and environment out."""

from __future__ import annotations

import pytest

from conftest import build
from launcher import plan
from launcher.addresses import Endpoint
from launcher.config.compose import with_default_profile
from launcher.config.schema import Topology
from launcher.errors import UserError

PY = "/usr/bin/python3"


def argv_of(p: plan.LaunchPlan, index: int = 0) -> list[str]:
    return list(p.processes[index].argv)


def test_isaaclab_single_node_command_equals_isaaclabs(isaaclab):
    # The command line from Isaac Lab's pull request, typed verbatim.
    p = build(
        "--num_gpus 4 --master_port 29504 --task=Isaac-Dexsuite-Kuka-Allegro-Reorient-v0 "
        "--num_envs=4096 --max_iterations=100 --run_name=gpu4_vis presets=newton_mjwarp".split(),
        gpus=4,
    )
    script = str(isaaclab / "scripts/reinforcement_learning/train.py")
    assert argv_of(p) == [
        PY,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "4",
        "--master_port",
        "29504",
        script,
        "--rl_library",
        "rsl_rl",
        "--task=Isaac-Dexsuite-Kuka-Allegro-Reorient-v0",
        "--num_envs=4096",
        "--max_iterations=100",
        "--run_name=gpu4_vis",
        "presets=newton_mjwarp",
        "--distributed",
    ]
    assert p.profile == "isaaclab" and p.device == "cuda" and p.env["TRAIN_MULTIGPU_DIST_BACKEND"] == "nccl"


def test_isaaclab_multinode_example(isaaclab):
    p = build(
        "--rl_library skrl --nnodes 2 --node_rank 1 --rdzv_backend c10d "
        "--rdzv_endpoint host.example.com:5555 --rdzv_id job-1".split(),
        gpus=8,
    )
    assert argv_of(p) == [
        PY,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "8",
        "--nnodes",
        "2",
        "--node_rank",
        "1",
        "--rdzv_backend",
        "c10d",
        "--rdzv_endpoint",
        "host.example.com:5555",
        "--rdzv_id",
        "job-1",
        str(isaaclab / "scripts/reinforcement_learning/train.py"),
        "--rl_library",
        "skrl",
        "--distributed",
    ]
    assert p.topology is Topology.multinode


def test_hydra_grammar_multinode_matches_isaaclab_grammar(isaaclab):
    hydra_style = build(
        "launcher=multinode launcher.nnodes=2 launcher.node_rank=0 launcher.rdzv_endpoint=10.0.0.10:29400 "
        "rl_library=skrl task=Isaac-Cartpole-v0 -- --headless".split(),
        gpus=2,
    )
    isaac_style = build(
        "--nnodes=2 --node_rank=0 --rdzv_endpoint 10.0.0.10:29400 --rl_library=skrl --task Isaac-Cartpole-v0 "
        "--headless".split(),
        gpus=2,
    )
    assert argv_of(hydra_style) == argv_of(isaac_style)
    assert argv_of(hydra_style)[3:13] == [
        "--nproc_per_node",
        "2",
        "--nnodes",
        "2",
        "--node_rank",
        "0",
        "--rdzv_backend",
        "c10d",
        "--rdzv_endpoint",
        "10.0.0.10:29400",
    ]
    assert (
        argv_of(hydra_style)[-4:]
        == ["--rl_library", "skrl", "--task=Isaac-Cartpole-v0", "--headless", "--distributed"][-4:]
    )


def test_mixed_grammars_in_one_line(isaaclab):
    p = build(
        "launcher=multinode --nnodes 2 launcher.master_addr=10.0.0.1 --master_port=29501 seed=7 -- --headless".split()
    )
    args = argv_of(p)
    assert args[3:13] == [
        "--nproc_per_node",
        "2",
        "--nnodes",
        "2",
        "--node_rank",
        "0",
        "--master_addr",
        "10.0.0.1",
        "--master_port",
        "29501",
    ]
    assert args[-3:] == ["--seed=7", "--headless", "--distributed"]


def test_single_node_without_port_is_standalone():
    p = build([])
    args = argv_of(p)
    assert args[:6] == [PY, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--standalone"]
    assert args[6].endswith("examples/train.py") and args[-1] == "--distributed"
    assert p.profile == "examples" and p.device == "cpu"
    assert p.env["TRAIN_MULTIGPU_DIST_BACKEND"] == "gloo"
    assert p.env["TRAIN_MULTIGPU_RUN_DIR"] == "/runs/r1"


def test_explicit_master_port_replaces_standalone():
    args = argv_of(build(["launcher.master_port=29504"]))
    assert "--standalone" not in args and args[5:7] == ["--master_port", "29504"]


def test_distributed_exactly_once_and_last():
    args = argv_of(build(["--", "--distributed", "--foo", "--distributed", "bar"]))
    assert args.count("--distributed") == 1 and args[-3:] == ["--foo", "bar", "--distributed"]


def test_unset_training_fields_are_not_forwarded():
    args = argv_of(build([]))
    assert not [a for a in args if a.startswith(("--task", "--num_envs", "--seed", "--run_name", "--max_iterations"))]


def test_training_fields_in_both_grammars():
    hydra_args = argv_of(build("task=Pendulum-v1 num_envs=16 max_iterations=3 seed=1 run_name=a".split()))
    flag_args = argv_of(build("--task Pendulum-v1 --num_envs 16 --max_iterations=3 --seed 1 --run_name=a".split()))
    assert hydra_args == flag_args
    assert hydra_args[-6:] == [
        "--task=Pendulum-v1",
        "--num_envs=16",
        "--max_iterations=3",
        "--seed=1",
        "--run_name=a",
        "--distributed",
    ]


def test_forwarded_values_keep_their_text():
    args = argv_of(build(["--run_name", "it's a run", "--", "--note", "${x} 'q'"]))
    assert "--run_name=it's a run" in args and args[-3:] == ["--note", "${x} 'q'", "--distributed"]


def test_presets_apply_in_order_and_forward_their_args():
    args = argv_of(build(["presets=[debug,newton_mjwarp]"]))
    assert args[-4:] == ["--num_envs=8", "--max_iterations=5", "presets=newton_mjwarp", "--distributed"]
    assert argv_of(build(["presets=newton_mjwarp"]))[-2:] == ["presets=newton_mjwarp", "--distributed"]


def test_preset_values_yield_to_the_command_line():
    args = argv_of(build(["presets=debug", "num_envs=64"]))
    assert "--num_envs=64" in args and "--max_iterations=5" in args


def test_unknown_flags_and_isaaclab_script_overrides_are_forwarded(isaaclab):
    args = argv_of(build("--video --video_length 200 env.scene.num_envs=32 agent.seed=3 --headless".split()))
    assert args[-7:] == [
        "--video",
        "--video_length",
        "200",
        "env.scene.num_envs=32",
        "agent.seed=3",
        "--headless",
        "--distributed",
    ]


def test_script_and_python_overrides(tmp_path):
    p = build([f"script={tmp_path}/mine.py", "python=/opt/isaac-sim/python.sh"])
    assert argv_of(p)[:3] == ["/opt/isaac-sim/python.sh", "-m", "torch.distributed.run"]
    assert f"{tmp_path}/mine.py" in argv_of(p)


def test_explicit_device_is_forwarded_auto_is_not():
    assert "--device" not in argv_of(build([]))
    args = argv_of(build(["device=cpu"], gpus=2))
    assert args[-3:] == ["--device", "cpu", "--distributed"]


def test_nproc_auto_counts_gpus_or_cpu_cores():
    assert build([], gpus=4).nproc_per_node == 4
    assert build([], gpus=0, cpus=6).nproc_per_node == 6
    assert build(["launcher.nproc_per_node=cpu"], gpus=4, cpus=3).nproc_per_node == 3
    assert build(["launcher.nproc_per_node=gpu"], gpus=3).nproc_per_node == 3


def test_threads_split_usable_cores_unless_user_set_them():
    assert build(["launcher.nproc_per_node=2"], cpus=8).env["OMP_NUM_THREADS"] == "4"
    assert build([], cpus=8).env["OMP_NUM_THREADS"] == "1"  # auto on CPU: a worker per core
    assert build(["launcher.nproc_per_node=16"], cpus=8).env["OMP_NUM_THREADS"] == "1"
    assert "OMP_NUM_THREADS" not in build([], env={"OMP_NUM_THREADS": "3"}).env


def test_jax_ranks_get_skrls_variables():
    p = build(
        ["launcher=skrl_jax", "launcher.nproc_per_node=2", "task=Pendulum-v1"],
        coordinator=Endpoint("127.0.0.1", 4321),
    )
    assert [dict(proc.env) for proc in p.processes] == [
        {
            "JAX_LOCAL_RANK": str(i),
            "JAX_RANK": str(i),
            "JAX_WORLD_SIZE": "2",
            "JAX_COORDINATOR_ADDR": "127.0.0.1",
            "JAX_COORDINATOR_PORT": "4321",
        }
        for i in range(2)
    ]
    args = argv_of(p)
    assert args[0] == PY and args[1].endswith("examples/train.py")
    # --ml_framework jax follows from launcher=skrl_jax (not typed): ahead of what the line typed
    assert args[2:] == ["--ml_framework", "jax", "--task=Pendulum-v1", "--distributed"]
    assert p.env["JAX_PLATFORMS"] == "cpu"
    # JAX's compilation cache in the run directory, every program in it (a restart loads them)
    assert (p.env["JAX_COMPILATION_CACHE_DIR"], p.env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"]) == (
        "/runs/r1/jax_cache",
        "0",
    )


@pytest.mark.parametrize(
    ("argv", "env"),
    [
        (["+worker_env.JAX_COMPILATION_CACHE_DIR=/cache/mine"], None),
        ([], {"JAX_COMPILATION_CACHE_DIR": "/cache/mine"}),
    ],
)
def test_a_jax_compilation_cache_of_ones_own_wins_with_jaxs_own_threshold(argv, env):
    p = build(["launcher=skrl_jax", *argv], env=env, coordinator=Endpoint("127.0.0.1", 4321))
    assert p.env.get("JAX_COMPILATION_CACHE_DIR", (env or {}).get("JAX_COMPILATION_CACHE_DIR")) == "/cache/mine"
    assert "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in p.env


def test_a_torch_launch_sets_no_jax_cache():
    assert not [name for name in build(["launcher=single_node"]).env if name.startswith("JAX_")]


def test_jax_multinode_ranks_and_isaaclab_grammar(isaaclab):
    p = build(
        "--rl_library skrl --ml_framework jax --num_gpus 2 --nnodes 2 --node_rank 1 "
        "--coordinator_address [fd00::1]:5000".split(),
        gpus=2,
    )
    assert p.topology is Topology.skrl_jax
    assert [(proc.env["JAX_RANK"], proc.env["JAX_LOCAL_RANK"]) for proc in p.processes] == [("2", "0"), ("3", "1")]
    assert {proc.env["JAX_COORDINATOR_ADDR"] for proc in p.processes} == {"fd00::1"}
    assert argv_of(p)[2:] == ["--rl_library", "skrl", "--ml_framework", "jax", "--distributed"]


def test_skrl_jax_implies_skrl_even_where_the_profile_defaults_to_rsl_rl(isaaclab):
    p = build(["launcher=skrl_jax"], coordinator=Endpoint("127.0.0.1", 1))
    assert argv_of(p)[2:4] == ["--rl_library", "skrl"]


def test_isaaclab_profile_is_default_when_isaaclab_path_is_set(isaaclab):
    assert with_default_profile([], {"ISAACLAB_PATH": str(isaaclab)}) == ["profile=isaaclab"]
    assert with_default_profile(["profile=examples"], {"ISAACLAB_PATH": "x"}) == ["profile=examples"]
    assert with_default_profile([], {}) == []


def test_profile_and_user_environment_reach_workers():
    p = build(["+worker_env.NCCL_DEBUG=INFO"])
    assert p.env["NCCL_DEBUG"] == "INFO"


def test_describe_shows_profile_environment_and_pasteable_commands():
    text = plan.describe(build(["--run_name", "a b"]))
    assert "# profile: examples" in text and "export TRAIN_MULTIGPU_DIST_BACKEND=gloo" in text
    assert "'--run_name=a b'" in text


@pytest.mark.parametrize("value", ["1", "4"])
def test_single_node_nnodes_flag_one_stays_single_node(value):
    if value == "1":
        assert build(["--nnodes", "1"]).topology is Topology.single_node
    else:
        assert build(["--nnodes", value, "--master_addr", "10.0.0.1"]).topology is Topology.multinode


def test_bracketed_ipv6_endpoint_needs_no_quoting_in_the_hydra_grammar():
    p = build(["launcher=multinode", "launcher.rdzv_endpoint=[::1]:29400", "launcher.local_nodes=true"])
    assert "[::1]:29400" in p.processes[0].argv


# -- issue 13 item 20: forwarded arguments keep the order typed -------------------------------------


def test_script_arguments_keep_the_order_typed_as_isaaclab_forwards_them(isaaclab):
    # Isaac Lab's launcher parses its own flags and forwards every other token in order (argparse's
    # parse_known_args); the script then gets --rl_library first and --distributed last.
    line = (
        "--num_gpus 4 --task=X --headless presets=newton_mjwarp --master_port 29504 --num_envs=64 "
        "env.scene.num_envs=3 --max_iterations=5 --run_name=r --video_length 200 agent.seed=3"
    )
    script = str(isaaclab / "scripts/reinforcement_learning/train.py")
    assert argv_of(build(line.split(), gpus=4)) == [
        PY,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "4",
        "--master_port",
        "29504",
        script,
        "--rl_library",
        "rsl_rl",
        "--task=X",
        "--headless",
        "presets=newton_mjwarp",
        "--num_envs=64",
        "env.scene.num_envs=3",
        "--max_iterations=5",
        "--run_name=r",
        "--video_length",
        "200",
        "agent.seed=3",
        "--distributed",
    ]


def test_typed_order_covers_both_grammars_and_values_not_typed_come_first():
    args = argv_of(
        build("seed=3 --headless presets=debug num_envs=64 --device cpu --foo -- --bar --distributed".split())
    )
    # max_iterations=5 comes from presets=debug (not typed): ahead of everything typed
    assert args[-9:] == [
        "--max_iterations=5",
        "--seed=3",
        "--headless",
        "--num_envs=64",
        "--device",
        "cpu",
        "--foo",
        "--bar",
        "--distributed",
    ]
    # a key typed twice: where it was first typed, once (two different values are an error: issue 13
    # item 12, tests/test_inputs.py::test_contradictions_and_impossible_values)
    args = argv_of(build("num_envs=2 --headless --num_envs=2".split()))
    assert args[-3:] == ["--num_envs=2", "--headless", "--distributed"] and args.count("--num_envs=2") == 1
    with pytest.raises(UserError, match="num_envs=2: contradicts num_envs=1"):
        build("num_envs=1 --headless --num_envs=2".split())


def test_typed_ml_framework_keeps_its_place(isaaclab):
    p = build(
        "--rl_library skrl --task=X --ml_framework jax --num_gpus 2 --headless".split(),
        gpus=2,
        coordinator=Endpoint("127.0.0.1", 1),
    )
    assert argv_of(p)[2:] == [
        "--rl_library",
        "skrl",
        "--task=X",
        "--ml_framework",
        "jax",
        "--headless",
        "--distributed",
    ]


# -- issue 13 item 19: --virtual_local_rank is torchrun's ---------------------------------------------


def test_virtual_local_rank_reaches_torchrun_not_the_script(isaaclab):
    for line in (
        "--num_gpus 2 --virtual_local_rank --task=X",
        "--num_gpus 2 --virtual-local-rank --task=X",
        "launcher.nproc_per_node=2 launcher.virtual_local_rank=true task=X",
    ):
        args = argv_of(build(line.split(), gpus=2))
        at = args.index(str(isaaclab / "scripts/reinforcement_learning/train.py"))
        # a bare switch, after Isaac Lab's torchrun flags (torch/distributed/run.py declares it last)
        assert args[:at] == [
            PY,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            "2",
            "--standalone",
            "--virtual_local_rank",
        ], line
        assert "--virtual_local_rank" not in args[at:] and "--virtual-local-rank" not in args[at:]
    assert "--virtual_local_rank" not in argv_of(build(["launcher.virtual_local_rank=false"]))


def test_virtual_local_rank_follows_local_addr_as_torchrun_declares_them():
    from dataclasses import replace

    from conftest import make_facts
    from launcher.checks import validate
    from launcher.config.compose import compose

    cfg = compose(
        [
            "launcher=multinode",
            "launcher.nnodes=2",
            "launcher.rdzv_endpoint=10.0.0.1:29400",
            "launcher.local_addr=10.0.0.2",
            "launcher.virtual_local_rank=true",
        ]
    )
    facts = make_facts()
    settled = replace(validate(cfg, facts), local_addr="10.0.0.2")
    args = list(plan.build(cfg, settled, facts).processes[0].argv)
    assert args[args.index("--local_addr") : args.index("--local_addr") + 3] == [
        "--local_addr",
        "10.0.0.2",
        "--virtual_local_rank",
    ]


def test_a_node_whose_own_name_does_not_resolve_is_told_is_host():
    """Issue 18 item 8: torch's is_host guess resolves this machine's own host name (a gaierror on a
    fresh node whose /etc/hosts lacks it); the launcher knows whether it holds node 0's address."""
    from dataclasses import replace

    from conftest import make_facts
    from launcher import checks
    from launcher.config.compose import compose

    def rdzv_conf(node_rank: int, here: bool, own_name_resolves: bool | None) -> str | None:
        cfg = compose(["launcher=multinode", "launcher.nnodes=2", f"launcher.node_rank={node_rank}",
                       "launcher.rdzv_endpoint=10.0.0.1:29400"])  # fmt: skip
        settled = checks.validate(cfg, make_facts())
        settled = replace(settled, endpoint_here=here, own_name_resolves=own_name_resolves)
        argv = list(plan.build(cfg, settled, make_facts()).processes[0].argv)
        return argv[argv.index("--rdzv_conf") + 1] if "--rdzv_conf" in argv else None

    assert rdzv_conf(1, here=False, own_name_resolves=False) == "is_host=0"
    assert rdzv_conf(1, here=False, own_name_resolves=True) is None  # torch's guess works there
    assert rdzv_conf(0, here=True, own_name_resolves=None) == "is_host=1"


@pytest.mark.parametrize(
    "grace, expected",
    [
        ("launcher.grace_period=15", ["--shutdown_timeout", "15"]),
        ("launcher.grace_period=0.5", ["--shutdown_timeout", "1"]),
    ],
)
def test_torchrun_waits_for_its_workers_the_grace_period(grace, expected):
    """Issue 25 item 9: after a worker failed torchrun waited its own 30 s for the others (SIGTERM to
    SIGKILL), not launcher.grace_period: --shutdown_timeout carries it (torch 2.13), before the script."""
    argv = argv_of(build(["launcher.nproc_per_node=2", grace]))
    at = argv.index("--shutdown_timeout")
    assert argv[at : at + 2] == expected and at < argv.index(next(a for a in argv if a.endswith(".py")))


def test_torchruns_own_default_grace_period_adds_no_flag():
    assert "--shutdown_timeout" not in argv_of(build(["launcher.nproc_per_node=2"]))
    assert "--shutdown_timeout" not in argv_of(build(["launcher.nproc_per_node=2", "launcher.grace_period=30"]))


def test_the_dry_run_shows_the_shutdown_timeout(run_cli):
    r = run_cli("launcher.nproc_per_node=2", "launcher.grace_period=15", "dry_run=true")
    assert r.returncode == 0, r.stderr
    assert "--shutdown_timeout 15 " in r.stdout.strip().splitlines()[-1]
