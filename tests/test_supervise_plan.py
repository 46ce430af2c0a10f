"""plan.supervised: the pure step that puts the worker wrapper in front of each rank's script."""

from __future__ import annotations

from launcher import checks
from launcher import plan as plan_mod
from launcher.config.schema import Device, LauncherConfig, Topology, TrainConfig
from launcher.facts import HostFacts

WRAPPER = "/pkg/launcher/run/worker.py"


def _plan(**launcher) -> plan_mod.LaunchPlan:
    cfg = TrainConfig(launcher=LauncherConfig(nproc_per_node="2", **launcher), device=Device.cpu, script="/s/train.py")
    facts = HostFacts(python="/py", visible_gpus=0, gpus_source="test", usable_cpus=4, examples_dir="/e", env={})
    settled = checks.validate(cfg, facts)
    if cfg.launcher.topology is Topology.skrl_jax:
        from dataclasses import replace

        from launcher.addresses import Endpoint

        settled = replace(settled, coordinator=Endpoint("127.0.0.1", 1234))
    return plan_mod.build(cfg, settled, facts, run_dir="/run")


def test_torchrun_runs_the_script_behind_the_wrapper():
    plan = plan_mod.supervised(_plan(), WRAPPER, "/run/logs", "id1")
    argv = plan.processes[0].argv
    assert argv[:6] == ("/py", "-m", "torch.distributed.run", "--nproc_per_node", "2", "--standalone")
    assert argv[6:8] == (WRAPPER, "/s/train.py")
    assert argv[-1] == "--distributed"
    assert plan.rank_logs and plan.console_local_ranks is None
    assert plan.env["TRAIN_MULTIGPU_LOG_DIR"] == "/run/logs"
    assert plan.env["TRAIN_MULTIGPU_LAUNCH_ID"] == "id1"
    assert plan.env["TRAIN_MULTIGPU_NODE_RANK"] == "0"


def test_jax_ranks_run_behind_the_wrapper():
    plan = plan_mod.supervised(_plan(topology=Topology.skrl_jax), WRAPPER, "/run/logs", "id1")
    assert [p.argv[:3] for p in plan.processes] == [("/py", WRAPPER, "/s/train.py")] * 2
    assert [p.env["JAX_RANK"] for p in plan.processes] == ["0", "1"]


def test_torchrun_output_flags_leave_the_output_to_torchrun():
    assert not plan_mod.supervised(_plan(tee="3"), WRAPPER, "/l", "i").rank_logs
    assert not plan_mod.supervised(_plan(log_dir="/x"), WRAPPER, "/l", "i").rank_logs
    filtered = plan_mod.supervised(_plan(local_ranks_filter="0,1"), WRAPPER, "/l", "i")
    assert filtered.rank_logs and filtered.console_local_ranks == (0, 1)
    assert filtered.env["TRAIN_MULTIGPU_RANK_LOGS"] == "1"
