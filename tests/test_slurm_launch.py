"""launcher=slurm / slurm_jax, pure: the allocation's environment in, the same plan as multinode out."""

from __future__ import annotations

import shlex

import pytest

from conftest import clean_env, make_facts
from launcher import checks, plan
from launcher.config import grammar
from launcher.config.compose import compose, with_default_profile
from launcher.errors import UserError
from launcher.slurm import launch as slurm_launch
from launcher.slurm.env import SlurmAllocation

TWO_NODES = {
    "SLURM_JOB_ID": "4242",
    "SLURM_JOB_NUM_NODES": "2",
    "SLURM_JOB_NODELIST": "gpu[07-08]",
    "SLURM_NODEID": "1",
    "SLURM_STEP_ID": "0",
    "SLURM_NTASKS_PER_NODE": "1",
}


def slurm_plan(argv, env, gpus=0, cpus=8):
    line = grammar.parse(argv)
    cfg = compose(with_default_profile(line.overrides, {}), line.script_args)
    facts = make_facts(gpus=gpus, cpus=cpus, env=env)
    cfg, facts, alloc = slurm_launch.from_environment(cfg, facts)
    settled = checks.validate(cfg, facts)
    return plan.build(cfg, settled, facts, run_dir="/runs/r1")


def torchrun_flags(p):
    argv = list(p.processes[0].argv)
    return argv[argv.index("torch.distributed.run") + 1 : argv.index(p.script)]


def test_torchrun_across_the_allocation_as_multinode():
    p = slurm_plan(["launcher=slurm"], {**TWO_NODES, "SLURM_GPUS_ON_NODE": "4"}, gpus=8)
    assert torchrun_flags(p) == [
        "--nproc_per_node",
        "4",
        "--nnodes",
        "2",
        "--node_rank",
        "1",
        "--rdzv_backend",
        "c10d",
        "--rdzv_endpoint",
        "gpu07:24242",
        "--rdzv_id",
        "slurm-4242",
    ]
    assert p.device == "cuda" and p.topology.value == "multinode"
    same = slurm_plan(
        [
            "launcher=multinode",
            "launcher.nnodes=2",
            "launcher.node_rank=1",
            "launcher.rdzv_endpoint=gpu07:24242",
            "launcher.rdzv_id=slurm-4242",
            "launcher.nproc_per_node=4",
        ],
        {},
        gpus=4,
    )
    assert p.processes == same.processes


def test_cpu_cluster_takes_cpus_per_task():
    p = slurm_plan(["launcher=slurm"], {**TWO_NODES, "SLURM_CPUS_PER_TASK": "3"}, cpus=64)
    assert p.nproc_per_node == 3 and p.device == "cpu" and p.env["OMP_NUM_THREADS"] == "1"


def test_jax_path_coordinator_on_the_first_host():
    p = slurm_plan(["launcher=slurm_jax"], {**TWO_NODES, "SLURM_CPUS_PER_TASK": "2"})
    assert [s.env["JAX_RANK"] for s in p.processes] == ["2", "3"]
    assert {s.env["JAX_COORDINATOR_ADDR"] + ":" + s.env["JAX_COORDINATOR_PORT"] for s in p.processes} == {"gpu07:24242"}
    assert {s.env["JAX_WORLD_SIZE"] for s in p.processes} == {"4"}
    assert p.processes[0].argv[-3:] == ("--ml_framework", "jax", "--distributed")


def test_explicit_keys_win():
    p = slurm_plan(
        [
            "launcher=slurm",
            "launcher.nproc_per_node=2",
            "launcher.rdzv_endpoint=10.0.0.1:29400",
            "launcher.rdzv_id=mine",
        ],
        {**TWO_NODES, "SLURM_GPUS_ON_NODE": "4"},
        gpus=4,
    )
    flags = torchrun_flags(p)
    assert flags[:2] == ["--nproc_per_node", "2"]
    assert "10.0.0.1:29400" in flags and "mine" in flags


def test_requeued_job_resumes():
    p = slurm_plan(
        ["launcher=slurm", "run_dir=/r/job"], {**TWO_NODES, "SLURM_RESTART_COUNT": "2", "SLURM_CPUS_PER_TASK": "1"}
    )
    assert p.processes[0].argv[-2:] == ("--resume", "--distributed")
    p = slurm_plan(
        ["launcher=slurm", "slurm.resume_arg=null"],
        {**TWO_NODES, "SLURM_RESTART_COUNT": "1", "SLURM_CPUS_PER_TASK": "1"},
    )
    assert "--resume" not in p.processes[0].argv


def test_restart_keeps_the_jobs_run_directory_and_records_apart():
    cfg = compose(["launcher=slurm", "run_dir=/r/job"])
    alloc = SlurmAllocation.from_env({**TWO_NODES, "SLURM_RESTART_COUNT": "1"})
    cfg, _ = slurm_launch.settle(cfg, alloc, make_facts())
    assert cfg.run_dir == "/r/job"  # the training script resumes from the job's directory
    assert slurm_launch.record_subdir(alloc) == "restart1"  # only the launcher's record is per restart
    assert slurm_launch.record_subdir(SlurmAllocation.from_env(TWO_NODES)) == ""


@pytest.mark.parametrize(
    "argv, env, message",
    [
        (["launcher.nnodes=3"], TWO_NODES, "launcher.nnodes=3: SLURM job 4242 has node count 2"),
        (["launcher.node_rank=0"], TWO_NODES, "launcher.node_rank=0: SLURM job 4242 has this node at rank 1"),
        (
            ["launcher.nproc_per_node=8"],
            {**TWO_NODES, "SLURM_GPUS_ON_NODE": "4"},
            "launcher.nproc_per_node=8: more workers than the 4 visible GPU(s) (from the SLURM allocation (4 GPU(s) on this node)",  # noqa: E501
        ),
        (
            ["launcher.nproc_per_node=4"],
            {**TWO_NODES, "SLURM_CPUS_PER_TASK": "2", "CUDA_VISIBLE_DEVICES": ""},
            "launcher.nproc_per_node=4: more workers than the 2 CPU(s) SLURM allocated per node (SLURM_CPUS_PER_TASK=2)",  # noqa: E501
        ),
        (
            [],
            {**TWO_NODES, "SLURM_NTASKS_PER_NODE": "4"},
            "launcher=slurm: runs one launcher per node, but this srun step has 4 tasks per node",
        ),
        ([], {"PATH": "/bin"}, "launcher=slurm: only runs inside a SLURM allocation (SLURM_JOB_ID is not set)"),
        (
            [],
            {"SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "n[1-"},
            "launcher=slurm: cannot read the SLURM environment: hostlist 'n[1-'",
        ),
    ],
)
def test_mismatch_is_one_clear_error(argv, env, message):
    with pytest.raises(UserError) as err:
        slurm_plan(["launcher=slurm", *argv], env, gpus=4)
    assert str(err.value).startswith(message), str(err.value)


def test_nnodes_null_outside_slurm_is_an_error():
    with pytest.raises(UserError, match=r"launcher.nnodes=None: needs a value \(only launcher=slurm"):
        slurm_plan(["launcher=multinode", "launcher.nnodes=null"], {})


def test_outside_an_allocation_the_cli_says_so(run_cli):
    result = run_cli("launcher=slurm", "dry_run=true", env=clean_env())
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "train_multigpu: error: launcher=slurm: only runs inside a SLURM allocation (SLURM_JOB_ID is not set) "
        "(submit with submit=slurm, or start it under sbatch/salloc with srun --ntasks-per-node=1)"
    )


def test_dry_run_inside_a_faked_allocation(run_cli):
    env = clean_env(**TWO_NODES, SLURM_CPUS_PER_TASK="2")
    env = {k: v for k, v in env.items() if not k.startswith("SLURM") or k in TWO_NODES or k == "SLURM_CPUS_PER_TASK"}
    # gpu07 gets an address (TEST-NET-2): the launcher resolves the rendezvous host before launch
    result = run_cli(
        "launcher=slurm", "dry_run=true", env=env, hosts={"gpu07": "198.51.100.7", "gpu08": "198.51.100.8"}
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("# slurm: job 4242   node 1 of 2 (gpu07,gpu08)")
    command = shlex.split(result.stdout.splitlines()[-1])
    assert "--rdzv_endpoint" in command and "gpu07:24242" in command


RELAY_WORKER = """\
import os, signal, sys, time
got = []
signal.signal(signal.SIGUSR1, lambda s, f: got.append(s))
print("READY", flush=True)
deadline = time.time() + 30
while not got and time.time() < deadline:
    time.sleep(0.05)
time.sleep(0.5)
print(f"rank={os.environ['JAX_RANK']} USR1 x{len(got)}", flush=True)
"""


@pytest.mark.timeout(60)
def test_outside_slurm_the_launcher_relays_usr1_without_stopping(tmp_path):
    """kill -USR1 <launcher>: each rank's group gets it once; the launch goes on and ends 0."""
    import signal
    import subprocess
    import sys
    import time

    (tmp_path / "w.py").write_text(RELAY_WORKER)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "launcher",
            "launcher=skrl_jax",
            "launcher.nproc_per_node=2",
            f"script={tmp_path / 'w.py'}",
            "log_all_ranks=true",
        ],
        cwd=tmp_path,
        env=clean_env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    seen = []
    deadline = time.monotonic() + 40
    while sum("READY" in line for line in seen) < 2 and time.monotonic() < deadline:
        seen.append(proc.stdout.readline())
    proc.send_signal(signal.SIGUSR1)
    out = "".join(seen) + proc.communicate(timeout=40)[0]
    assert proc.returncode == 0, out
    assert sorted(line.split("] ", 1)[-1] for line in out.splitlines() if "USR1 x" in line) == [
        "rank=0 USR1 x1",
        "rank=1 USR1 x1",
    ], out
