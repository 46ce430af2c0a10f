"""launcher=k8s / k8s_jax, pure: a Kubeflow pod's environment in, the same plan as multinode/skrl_jax out.

No Kubernetes cluster exists here: the pods' environments are faked, variable for variable, as the
operators' source sets them (launcher/k8s/env.py names the files)."""

from __future__ import annotations

import functools

import pytest

from conftest import clean_env, make_facts
from launcher import checks, plan
from launcher.addresses import Endpoint
from launcher.config import grammar
from launcher.config.compose import compose
from launcher.errors import UserError
from launcher.k8s import launch as k8s_launch
from launcher.k8s.env import NotInPodError, PodTopology


def trainjob_pod(rank: int, nodes: int = 2, nproc: str = "4") -> dict[str, str]:
    """A pod of TrainJob ``ppo`` on the torch-distributed runtime (Trainer v2's torch plugin)."""
    return {
        "PET_NNODES": str(nodes),
        "PET_NPROC_PER_NODE": nproc,
        "PET_NODE_RANK": str(rank),
        "PET_MASTER_ADDR": "ppo-node-0-0.ppo",
        "PET_MASTER_PORT": "29400",
    }


def pytorchjob_pod(rank: int, nodes: int = 2, nproc: str = "4") -> dict[str, str]:
    """A pod of PyTorchJob ``ppo`` (training operator 1.7+: Master rank 0, Worker i rank i+1)."""
    return {
        "MASTER_ADDR": "ppo-master-0",
        "MASTER_PORT": "23456",
        "PET_MASTER_ADDR": "ppo-master-0",
        "PET_MASTER_PORT": "23456",
        "WORLD_SIZE": str(nodes * int(nproc)),  # processes, not pods
        "RANK": str(rank),
        "PET_NODE_RANK": str(rank),
        "PET_NPROC_PER_NODE": nproc,
        "PET_NNODES": str(nodes),
        "PYTHONUNBUFFERED": "0",
    }


@functools.cache
def composed(argv: tuple[str, ...]):
    """Composed once per command line (k8s_launch.settle works on a copy)."""
    line = grammar.parse(list(argv))
    return compose(line.overrides, line.script_args)


def k8s_plan(argv, env, gpus=4, cpus=8):
    cfg = composed(tuple(argv))
    facts = make_facts(gpus=gpus, cpus=cpus, env=env)
    cfg, facts, pod = k8s_launch.from_environment(cfg, facts)
    settled = checks.validate(cfg, facts)
    return plan.build(cfg, settled, facts, run_dir="/runs/r1")


def torchrun_flags(p):
    argv = list(p.processes[0].argv)
    return argv[argv.index("torch.distributed.run") + 1 : argv.index(p.script)]


@pytest.mark.parametrize("pod", [trainjob_pod, pytorchjob_pod], ids=["TrainJob", "PyTorchJob"])
@pytest.mark.parametrize("rank", [0, 1])
def test_torchrun_in_each_pod_as_multinode(pod, rank):
    env = pod(rank)
    endpoint = f"{env['PET_MASTER_ADDR']}:{env['PET_MASTER_PORT']}"
    p = k8s_plan(["launcher=k8s", "seed=3"], env)
    assert torchrun_flags(p) == [
        "--nproc_per_node",
        "4",
        "--nnodes",
        "2",
        "--node_rank",
        str(rank),
        "--rdzv_backend",
        "c10d",
        "--rdzv_endpoint",
        endpoint,
        "--rdzv_id",
        f"k8s-{env['PET_MASTER_ADDR'].split('.')[0]}",
    ]
    assert p.device == "cuda" and p.topology.value == "multinode"


def test_the_same_plan_as_multinode_by_hand():
    p = k8s_plan(["launcher=k8s", "seed=3"], trainjob_pod(1))
    by_hand = k8s_plan(
        [
            "launcher=multinode",
            "launcher.nnodes=2",
            "launcher.node_rank=1",
            "launcher.nproc_per_node=4",
            "launcher.rdzv_endpoint=ppo-node-0-0.ppo:29400",
            "launcher.rdzv_id=k8s-ppo-node-0-0",
            "seed=3",
        ],
        {},
    )
    assert p.processes == by_hand.processes and dict(p.env) == dict(by_hand.env)


@pytest.mark.parametrize("pod", [trainjob_pod, pytorchjob_pod], ids=["TrainJob", "PyTorchJob"])
@pytest.mark.parametrize("rank", [0, 1])
def test_jax_ranks_in_each_pod(pod, rank):
    env = pod(rank, nproc="2")
    p = k8s_plan(["launcher=k8s_jax"], env, gpus=0, cpus=2)
    assert [dict(spec.env) for spec in p.processes] == [
        {
            "JAX_LOCAL_RANK": str(local),
            "JAX_RANK": str(rank * 2 + local),
            "JAX_WORLD_SIZE": "4",
            "JAX_COORDINATOR_ADDR": env["PET_MASTER_ADDR"],
            "JAX_COORDINATOR_PORT": env["PET_MASTER_PORT"],
        }
        for local in (0, 1)
    ]
    # a PyTorchJob's WORLD_SIZE (processes of the job) would make skrl's torch side start an NCCL
    # group in every JAX rank at import: the ranks see WORLD_SIZE=1; a TrainJob pod sets none
    assert p.env.get("WORLD_SIZE") == ("1" if "WORLD_SIZE" in env else None)


def test_older_pytorchjob_counts_pods_in_world_size():
    """Before PET_NNODES (operators older than 1.7), WORLD_SIZE was the pod count and RANK the pod's."""
    env = {"MASTER_ADDR": "ppo-master-0", "MASTER_PORT": "23456", "WORLD_SIZE": "3", "RANK": "2"}
    p = k8s_plan(["launcher=k8s", "launcher.nproc_per_node=1"], env, gpus=1)
    assert torchrun_flags(p)[:6] == ["--nproc_per_node", "1", "--nnodes", "3", "--node_rank", "2"]


def test_explicit_keys_win():
    env = trainjob_pod(1, nproc="auto")
    p = k8s_plan(
        [
            "launcher=k8s",
            "launcher.nproc_per_node=2",
            "launcher.rdzv_endpoint=10.0.0.5:29500",
            "launcher.rdzv_id=mine",
            "launcher.nnodes=2",
        ],
        env,
    )
    flags = torchrun_flags(p)
    assert flags[:2] == ["--nproc_per_node", "2"]
    assert "10.0.0.5:29500" in flags and "mine" in flags and "ppo-node-0-0.ppo:29400" not in flags
    # PET_NPROC_PER_NODE=auto: the launcher counts the pod's GPUs, as torchrun's auto would
    assert torchrun_flags(k8s_plan(["launcher=k8s"], env, gpus=8))[:2] == ["--nproc_per_node", "8"]
    jax = k8s_plan(["launcher=k8s_jax", "launcher.coordinator_address=10.0.0.5:7000"], env, gpus=0)
    assert dict(jax.processes[0].env)["JAX_COORDINATOR_ADDR"] == "10.0.0.5"


@pytest.mark.parametrize(
    "argv, env, message",
    [
        (
            ["launcher=k8s", "launcher.nnodes=3"],
            trainjob_pod(1),
            "launcher.nnodes=3: the pod's PET_NNODES is 2 "
            "(leave launcher.nnodes unset under launcher=k8s, or change the job (submit=k8s launcher.nnodes=N))",
        ),
        (
            ["launcher=k8s", "launcher.node_rank=0"],
            pytorchjob_pod(1),
            "launcher.node_rank=0: the pod's PET_NODE_RANK is 1 "
            "(leave launcher.node_rank unset under launcher=k8s, or change the job (submit=k8s launcher.nnodes=N))",
        ),
        (
            ["launcher=k8s", "launcher.nproc_per_node=2"],
            trainjob_pod(0),
            "launcher.nproc_per_node=2: the pod's PET_NPROC_PER_NODE is 4 "
            "(leave launcher.nproc_per_node unset under launcher=k8s, or change the job)",
        ),
    ],
)
def test_contradictions_are_one_clear_error(argv, env, message):
    with pytest.raises(UserError) as err:
        k8s_plan(argv, env)
    assert str(err.value) == message


@pytest.mark.parametrize(
    "env, message",
    [
        (
            {**pytorchjob_pod(1), "RANK": "2"},
            "PET_NODE_RANK=1 and RANK=2 disagree (both are this pod's rank)",
        ),
        (
            {**pytorchjob_pod(0), "MASTER_ADDR": "other-master-0"},
            "PET_MASTER_ADDR='ppo-master-0' and MASTER_ADDR='other-master-0' disagree",
        ),
        (
            {**trainjob_pod(0), "PET_NNODES": "1:4"},
            "PET_NNODES='1:4': an elastic node range; train_multigpu runs a fixed number of pods",
        ),
        (trainjob_pod(2), "node rank 2: must be < the 2 nodes"),
        (
            {k: v for k, v in trainjob_pod(1).items() if k != "PET_MASTER_ADDR"},
            "neither PET_MASTER_ADDR nor MASTER_ADDR is set: node 0's address is unknown",
        ),
        ({**trainjob_pod(0), "PET_MASTER_PORT": "http"}, "master port 'http': expected 1..65535"),
        (
            {**trainjob_pod(0), "PET_NPROC_PER_NODE": "0"},
            "PET_NPROC_PER_NODE='0': expected an integer >= 1, auto, cpu or gpu",
        ),
    ],
)
def test_a_broken_pod_environment_is_one_clear_error(env, message):
    with pytest.raises(UserError) as err:
        k8s_launch.topology(env, "k8s_jax")
    assert str(err.value) == f"launcher=k8s_jax: cannot read the operator's environment: {message}"


def test_pod_topology_reader():
    assert PodTopology.from_env(trainjob_pod(0, nodes=1)).node_rank == 0
    one = PodTopology.from_env({"PET_NNODES": "1", "PET_MASTER_ADDR": "a", "PET_MASTER_PORT": "29400"})
    assert (one.nnodes, one.node_rank, one.operator) == (1, 0, "TrainJob")
    with pytest.raises(NotInPodError):
        PodTopology.from_env({"HOME": "/root"})
    assert str(Endpoint("fd00::1", 29400)) in k8s_launch.describe(
        PodTopology.from_env({**trainjob_pod(0), "PET_MASTER_ADDR": "fd00::1"})
    )


def test_outside_a_pod_the_cli_says_so(run_cli):
    result = run_cli("launcher=k8s_jax", "dry_run=true", env=clean_env())
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "train_multigpu: error: launcher=k8s_jax: only runs inside a pod of a Kubeflow TrainJob or PyTorchJob "
        "(not inside a Kubeflow training pod: none of PET_NNODES, PET_NODE_RANK, PET_MASTER_ADDR, MASTER_ADDR, "
        "WORLD_SIZE is set) (create the job with submit=k8s, or run launcher=multinode with the topology given by hand)"
    )


def test_dry_run_inside_a_faked_pod(run_cli):
    """The real CLI in node 1's environment of a TrainJob: the address of node 0's pod resolves through
    a private /etc/hosts (TEST-NET-2), as the job's headless service makes it resolve in a cluster."""
    env = clean_env(**trainjob_pod(1, nproc="2"))
    result = run_cli("launcher=k8s", "dry_run=true", env=env, hosts={"ppo-node-0-0.ppo": "198.51.100.7"})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "# k8s: TrainJob pod   node 1 of 2   master ppo-node-0-0.ppo:29400   PET_NPROC_PER_NODE: 2"
    command = lines[-1].split()
    at = command.index("--nproc_per_node")
    assert command[at : at + 12] == [
        "--nproc_per_node",
        "2",
        "--nnodes",
        "2",
        "--node_rank",
        "1",
        "--rdzv_backend",
        "c10d",
        "--rdzv_endpoint",
        "ppo-node-0-0.ppo:29400",
        "--rdzv_id",
        "k8s-ppo-node-0-0",
    ]


def test_a_pod_waits_for_node0_then_gives_up(capsys):
    """Node 0's name resolves only once its pod exists: a pod waits (join timeout), then probe's own
    error follows. The clock and the resolver are stand-ins; the waiting logic is the real one."""
    from launcher.k8s import startup

    now = [0.0]

    def never(name):
        raise LookupError(name)

    found = startup.wait_for_node0(
        "ppo-master-0", 10, never, LookupError, lambda s: now.__setitem__(0, now[0] + s), lambda: now[0]
    )
    assert found is False and now[0] == 10.0
    assert capsys.readouterr().out.count("does not resolve yet") == 1
