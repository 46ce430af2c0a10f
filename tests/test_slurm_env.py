"""Unit tests for launcher.slurm_env (pure: environments are dicts)."""

import pytest

from launcher.slurm.env import (
    NotInAllocationError,
    SlurmAllocation,
    SlurmEnvError,
    expand_hostlist,
    expand_tasks_per_node,
)


@pytest.mark.parametrize(
    "text, hosts",
    [
        ("login", ["login"]),
        ("a,b", ["a", "b"]),
        ("node[01-03,07],gpu-a[1-2],login", ["node01", "node02", "node03", "node07", "gpu-a1", "gpu-a2", "login"]),
        ("rack[1-2]-n[01-02]", ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"]),
        ("n[9-0010]", ["n9", "n10"]),  # width is the first number's width, as in SLURM
        ("n[001-3]", ["n001", "n002", "n003"]),
        ("n[1,1]", ["n1", "n1"]),
        ("[1-2]", ["1", "2"]),
        ("n[1-2]-ib", ["n1-ib", "n2-ib"]),
        ("gpu-node.x[1-2]", ["gpu-node.x1", "gpu-node.x2"]),
        ("a[1]b[2]c[3]", ["a1b2c3"]),  # more than two bracket groups: no longer refused
    ],
)
def test_expand_hostlist(text, hosts):
    assert expand_hostlist(text) == hosts


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "hostlist is empty"),
        ("a,,b", "empty host name"),
        ("a,", "empty host name"),
        ("n[1-2", "unbalanced brackets"),
        ("n1-2]", "unbalanced brackets"),
        ("n[[1]]", "nested brackets"),
        ("n[]", "bad range"),
        ("n[1-]", "bad range"),
        ("n[1-2-3]", "bad range"),
        ("n[a-b]", "bad range"),
        ("n[3-1]", "start > stop"),
        ("a b", "contains whitespace"),
    ],
)
def test_expand_hostlist_errors(text, message):
    with pytest.raises(SlurmEnvError) as info:
        expand_hostlist(text)
    assert message in str(info.value)
    assert isinstance(info.value, ValueError)


def test_tasks_per_node():
    assert expand_tasks_per_node("2(x3),1") == [2, 2, 2, 1]
    with pytest.raises(SlurmEnvError, match="bad entry 'x'"):
        expand_tasks_per_node("1,x")


BASE = {"SLURM_JOB_ID": "77", "SLURM_JOB_NUM_NODES": "3", "SLURM_JOB_NODELIST": "n[1-3]", "SLURM_NODEID": "2"}


def alloc(**extra):
    return SlurmAllocation.from_env({**BASE, **extra})


def test_basic_fields():
    a = alloc(SLURM_CPUS_PER_TASK="8", SLURM_TASKS_PER_NODE="2(x2),1", SLURM_RESTART_COUNT="1", SLURM_STEP_ID="0")
    assert (a.job_id, a.nnodes, a.node_rank, a.first_host) == ("77", 3, 2, "n1")
    assert a.hosts == ("n1", "n2", "n3")
    assert (a.cpus_per_task, a.ntasks_per_node, a.restart_count) == (8, 1, 1)
    assert a.step_id == "0"
    assert a.gpus_on_node is None and a.gpu_ids == ()


def test_old_names_and_defaults():
    a = SlurmAllocation.from_env({"SLURM_JOBID": "5", "SLURM_NNODES": "1", "SLURM_NODELIST": "vm"})
    assert (a.job_id, a.nnodes, a.node_rank, a.first_host, a.restart_count) == ("5", 1, 0, "vm", 0)


def test_node_rank_from_slurmd_nodename():
    env = {**BASE, "SLURMD_NODENAME": "n2"}
    del env["SLURM_NODEID"]
    assert SlurmAllocation.from_env(env).node_rank == 1
    del env["SLURMD_NODENAME"]
    with pytest.raises(SlurmEnvError, match="SLURM_NODEID is not set"):
        SlurmAllocation.from_env(env)


@pytest.mark.parametrize(
    "extra, gpus, ids",
    [
        ({"SLURM_GPUS_ON_NODE": "4", "SLURM_JOB_GPUS": "4,5,6,7"}, 4, ("4", "5", "6", "7")),
        ({"SLURM_GPUS_PER_NODE": "a100:4"}, 4, ()),
        ({"SLURM_GPUS_PER_NODE": "2"}, 2, ()),
        ({"SLURM_GPUS_PER_NODE": "a100:2,v100:1"}, 3, ()),
        ({"SLURM_JOB_GPUS": "0,2"}, 2, ("0", "2")),
        ({"CUDA_VISIBLE_DEVICES": "0,1,2"}, 3, ("0", "1", "2")),
        ({"CUDA_VISIBLE_DEVICES": "GPU-1a2b,GPU-3c4d"}, 2, ("GPU-1a2b", "GPU-3c4d")),
        ({"CUDA_VISIBLE_DEVICES": "NoDevFiles"}, 0, ()),
        ({"CUDA_VISIBLE_DEVICES": ""}, 0, ()),
        ({}, None, ()),
    ],
)
def test_gpus(extra, gpus, ids):
    a = alloc(**extra)
    assert (a.gpus_on_node, a.gpu_ids) == (gpus, ids)


@pytest.mark.parametrize(
    "extra, message",
    [
        ({"SLURM_JOB_NUM_NODES": "two"}, "SLURM_JOB_NUM_NODES='two': expected an integer"),
        ({"SLURM_JOB_NUM_NODES": "0"}, "SLURM_JOB_NUM_NODES='0': must be >= 1"),
        ({"SLURM_JOB_NUM_NODES": "2"}, "2 nodes but the node list 'n[1-3]' names 3"),
        ({"SLURM_NODEID": "3"}, "SLURM_NODEID=3: must be < the 3 nodes"),
        ({"SLURM_JOB_NODELIST": "n[1-3"}, "unbalanced brackets"),
        ({"SLURM_GPUS_PER_NODE": "a100:"}, "SLURM_GPUS_PER_NODE='a100:': expected [type:]count"),
        ({"SLURM_JOB_GPUS": "0,,1"}, "SLURM_JOB_GPUS='0,,1': bad device entry ''"),
        ({"SLURM_TASKS_PER_NODE": "1(x2)"}, "2 entries for 3 nodes"),
        ({"SLURM_CPUS_PER_TASK": "0"}, "SLURM_CPUS_PER_TASK='0': must be >= 1"),
    ],
)
def test_errors(extra, message):
    with pytest.raises(SlurmEnvError) as info:
        alloc(**extra)
    assert message in str(info.value)


def test_not_in_allocation():
    with pytest.raises(NotInAllocationError, match="SLURM_JOB_ID is not set"):
        SlurmAllocation.from_env({"HOME": "/root"})
    with pytest.raises(SlurmEnvError, match="neither SLURM_JOB_NODELIST nor SLURM_NODELIST"):
        SlurmAllocation.from_env({"SLURM_JOB_ID": "1"})


def test_frozen():
    a = alloc()
    with pytest.raises(AttributeError):
        a.nnodes = 4
