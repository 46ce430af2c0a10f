"""Restarts across nodes and elastic nodes (issue 20 items 5 and 6): whole launches of the bundled
trainer, one ``python -m launcher`` per network-namespace host (tests/netns.py), every node's run
record under one shared ``run_dir`` (the trainer's checkpoints there: the c10d rendezvous may give
global rank 0 to any node).

- two nodes, node 1's launcher SIGKILLed, ``restart.max=0``: both end, exit 125 (as before issue 20);
- ``launcher.nnodes=1:2``: node 0 goes on alone from the checkpoint and completes;
- three nodes ``2:3``: one killed, the two left complete;
- a rank crash on node 1 with restarts on: both nodes restart together and complete (torch, JAX).
"""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from netns import Hosts
from test_multinode_launcher import ROOT, launch

TRAINER = str(ROOT / "examples" / "train.py")
ITER = re.compile(r"\[iter +(\d+)/")
NODE_TIMEOUT = 3
RDZV_PORT = 29400


def trainer(run_dir: Path, *extra: str) -> list[str]:
    """What every node of these launches runs: one rank of the bundled trainer, watched by its peers."""
    return [
        "launcher.nproc_per_node=1",
        f"launcher.node_timeout={NODE_TIMEOUT}",
        f"script={TRAINER}",
        "task=CartPole-v1",
        "num_envs=4",
        "seed=1",
        f"run_dir={run_dir}",
        *extra,
    ]


def torch_node(hosts, index: int, run_dir: Path, nnodes: str, *extra: str, static: bool = False) -> list[str]:
    """A node of a torch launch: c10d, or ``static`` (node 1 holds global rank 1: ranks by node)."""
    rendezvous = (
        [f"launcher.master_addr={hosts[0].addr}", "launcher.master_port=29500"]
        if static
        else [
            f"launcher.rdzv_endpoint={hosts[0].addr}:{RDZV_PORT}",
            # elastic: the survivors' rendezvous starts MIN nodes 2 s after they met, not torch's 30 s
            "launcher.rdzv_conf='last_call_timeout=2,join_timeout=60'",
        ]
    )
    return [
        "launcher=multinode",
        f"launcher.nnodes={nnodes}",
        f"launcher.node_rank={index}",
        *rendezvous,
        "launcher.network_interface=eth0",
        *trainer(run_dir, *extra),
    ]


def jax_node(hosts, index: int, run_dir: Path, *extra: str) -> list[str]:
    return [
        "launcher=skrl_jax",
        "launcher.nnodes=2",
        f"launcher.node_rank={index}",
        f"launcher.coordinator_address={hosts[0].addr}:5127",
        *trainer(run_dir, *extra),
    ]


def metrics(run_dir: Path) -> list[int]:
    with open(run_dir / "metrics.csv") as f:
        return [int(row["iteration"]) for row in csv.DictReader(f)]


def status(run_dir: Path, node: int) -> dict:
    return json.loads((run_dir / f"node{node}" / "status.json").read_text())


def wait_for_iteration(procs, n: int, seconds: float) -> None:
    """Some node's console showed iteration ``n`` (the one holding global rank 0)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if any(n in [int(m) for m in ITER.findall(p.out)] for p in procs):
            return
        time.sleep(0.2)
    tails = "\n---\n".join(p.out[-2000:] for p in procs)
    pytest.fail(f"iteration {n} not reached; tails:\n{tails}")


@pytest.mark.timeout(240)
def test_a_killed_node_ends_both_nodes_without_restarts(tmp_path):
    run_dir = tmp_path / "shared"
    with Hosts(2) as hosts:
        extra = ("max_iterations=400", "restart.max=0")
        procs = [launch(h, tmp_path / f"n{h.index}", *torch_node(hosts, h.index, run_dir, "2", *extra)) for h in hosts]
        wait_for_iteration(procs, 2, 150)
        os.kill(procs[1].popen.pid, signal.SIGKILL)  # node 1's launcher only (its watchdog ends its ranks)
        assert procs[0].wait(60) == 125, procs[0].out[-3000:]
    assert "[train_multigpu] exit code 125 (node lost)" in procs[0].out
    assert status(run_dir, 0)["reason"] == "node lost"


def ranks_in(host) -> list[int]:
    """The rank processes in ``host``'s namespace (the worker wrapper's, run/worker.py, among the
    first words of its command line; torchrun's names it only after its own flags)."""
    out = subprocess.run(["ip", "netns", "pids", host.ns], capture_output=True, text=True, timeout=30).stdout
    ranks = []
    for pid in map(int, out.split()):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(word.endswith(b"run/worker.py") for word in argv[1:3]):
            ranks.append(pid)
    return ranks


@pytest.mark.timeout(240)
def test_a_rank_that_only_lost_its_peer_waits_for_the_silent_node_and_the_launch_ends_node_lost(tmp_path):
    """restart.max=0: node 1's launcher stopped (SIGSTOP: silent, its connections open), then its
    rank killed: node 0's rank fails at once of the reset connection (a follower); node 1 is found
    silent a node_timeout later. Node 0's launch ends as node 1 lost (125), not as its follower (1)."""
    run_dir = tmp_path / "shared"
    with Hosts(2) as hosts:
        extra = ("max_iterations=400", "restart.max=0")
        procs = [launch(h, tmp_path / f"n{h.index}", *torch_node(hosts, h.index, run_dir, "2", *extra)) for h in hosts]
        wait_for_iteration(procs, 2, 150)
        os.kill(procs[1].popen.pid, signal.SIGSTOP)
        try:
            (rank,) = ranks_in(hosts[1])
            os.kill(rank, signal.SIGKILL)
            assert procs[0].wait(60) == 125, procs[0].out[-3000:]
        finally:
            os.kill(procs[1].popen.pid, signal.SIGKILL)
    assert "[train_multigpu] exit code 125 (node lost)" in procs[0].out, procs[0].out[-3000:]
    assert status(run_dir, 0)["reason"] == "node lost"


@dataclass
class NodeLost:
    """An elastic launch of which one node's launcher was SIGKILLed after iteration 3 (restarts on):
    the others go on from the checkpoint. ``codes``: the exit codes of the nodes left (by node);
    ``back``: node 1's launcher started again after the others' restart (``come_back``)."""

    run_dir: Path
    procs: list
    codes: dict[int, int]
    back: object = None


ITERATIONS = 12


def lose_a_node(tmp: Path, nnodes: str, killed: int, come_back: bool = False) -> NodeLost:
    count = int(nnodes.split(":")[1])
    run_dir = tmp / "shared"
    extra = (f"max_iterations={ITERATIONS}", "restart.max=2")
    with Hosts(count) as hosts:
        procs = [launch(h, tmp / f"n{h.index}", *torch_node(hosts, h.index, run_dir, nnodes, *extra)) for h in hosts]
        wait_for_iteration(procs, 3, 200)
        os.kill(procs[killed].popen.pid, signal.SIGKILL)
        back = None
        if come_back:
            procs[0].wait_for("restart 1 of 2 after node-lost", 60)
            back = launch(hosts[killed], tmp / "n1-again", *torch_node(hosts, killed, run_dir, nnodes, *extra))
            back.wait_for("this node joins at their next restart", 60)
        codes = {node: p.wait(240) for node, p in enumerate(procs) if node != killed}
        if back is not None:
            back.wait(60)
    return NodeLost(run_dir, procs, codes, back)


@pytest.fixture(scope="module")
def came_back(tmp_path_factory) -> NodeLost:
    """One launch that two tests read (each its own claim): ``1:2``, node 1's launcher killed, node 0
    goes on alone from the checkpoint; node 1's launcher, started again (the same command) once node 0
    restarted, stands by for a next restart that never comes."""
    return lose_a_node(tmp_path_factory.mktemp("came_back"), "1:2", 1, come_back=True)


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("nnodes", "killed"), [("1:2", 1), ("2:3", 2)])
def test_an_elastic_launch_goes_on_without_a_lost_node_from_its_checkpoint(tmp_path, request, nnodes, killed):
    # 1:2 is the launch test_a_node_that_comes_back_stands_by_for_the_next_restart reads too (node 1's
    # launcher started again only stands by: node 0's attempt 1 runs without it)
    lost = request.getfixturevalue("came_back") if nnodes == "1:2" else lose_a_node(tmp_path, nnodes, killed)
    count = int(nnodes.split(":")[1])
    run_dir, procs = lost.run_dir, lost.procs
    for node, code in lost.codes.items():
        assert code == 0, procs[node].out[-3000:]
    assert metrics(run_dir) == list(range(1, ITERATIONS + 1))  # every iteration once, in order: resumed, not redone
    world = json.loads((run_dir / "run_info.json").read_text())
    assert (world["world_size"], world["checkpoint_world_size"]) == (count - 1, count)
    for node, p in enumerate(procs):
        if node != killed:
            # its ranks failed at once (connection reset: follower), the node was found lost later
            assert "restart 1 of 2 after node-lost" in p.out, p.out[-3000:]
            assert [a["cause"] for a in status(run_dir, node)["attempts"]] == ["node-lost", None]


@pytest.mark.timeout(360)
@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_a_rank_crash_on_node_1_restarts_both_nodes_together(tmp_path, framework):
    """Global rank 1 (the rank on the node that is not rank 0's) exits 3 after iteration 2, once
    (TRAIN_MULTIGPU_EXAMPLE_CRASH); its class (exit-code) is retried on request: both nodes restart,
    the trainer resumes from iteration 2, every iteration is in metrics.csv once."""
    run_dir = tmp_path / "shared"
    crash = ("+worker_env.TRAIN_MULTIGPU_EXAMPLE_CRASH='2:1'", "restart.max=1", "restart.classes=[all]")
    with Hosts(2, hostnames=framework == "jax") as hosts:
        procs = []
        for h in hosts:
            overrides = (
                torch_node(hosts, h.index, run_dir, "2", "max_iterations=5", *crash, static=True)
                if framework == "torch"
                else jax_node(hosts, h.index, run_dir, "max_iterations=5", *crash)
            )
            procs.append(launch(h, tmp_path / f"n{h.index}", *overrides))
        for p in procs:
            assert p.wait(300) == 0, p.out[-3000:]
    assert metrics(run_dir) == [1, 2, 3, 4, 5]
    for node in (0, 1):
        attempts = status(run_dir, node)["attempts"]
        assert len(attempts) == 2, attempts
    # the crash was node 1's (attempt 0 writes where a launch without restarts does)
    assert "rank 1 exits 3 after iteration 2" in (run_dir / "node1" / "logs" / "rank1.log").read_text()
    for node, p in enumerate(procs):  # both nodes restart after node 1's class (node 0's own: it only followed)
        assert "[train_multigpu] restart 1 of 1 after exit-code" in p.out, p.out[-3000:]
        assert status(run_dir, node)["attempts"][0]["cause"] == "exit-code"


@pytest.mark.timeout(300)
def test_a_node_that_comes_back_stands_by_for_the_next_restart(came_back):
    """1:2, node 1's launcher killed: node 0 restarts alone; node 1's launcher started again (the
    same command) is told to stand by for the next restart. None comes (node 0 completes): node 1
    ends with node 0's word, having started nothing."""
    node0, back = came_back.procs[0], came_back.back
    assert came_back.codes[0] == 0, node0.out[-3000:]
    assert back.popen.returncode == 0, back.out[-3000:]
    assert "this node joins at their next restart" in back.out, back.out[-3000:]
    assert "[train_multigpu] exit code 0 (success)" in back.out, back.out[-3000:]
    assert metrics(came_back.run_dir) == list(range(1, ITERATIONS + 1))


@pytest.mark.timeout(400)
def test_a_node_that_comes_back_joins_a_later_restart(tmp_path):
    """Issue 25 (a claim tested only against a stand-in): 1:2, node 1's launcher killed, node 0
    restarts alone; node 1's launcher started again stands by; node 0's rank then fails (its own
    crash, retried): the next attempt runs on both nodes, node 1's real launcher included, and completes."""
    run_dir = tmp_path / "shared"
    with Hosts(2) as hosts:
        extra = (
            "max_iterations=12",
            "restart.max=3",
            "restart.classes=[default,exit-code]",
            # global rank 0 fails after iteration 10, in whichever attempt reaches it (attempt 0 is
            # stopped after iteration 2, attempt 1 long after node 1's launcher stands by)
            "+worker_env.TRAIN_MULTIGPU_EXAMPLE_CRASH='10:0:always'",
        )
        procs = [
            launch(h, tmp_path / f"n{h.index}", *torch_node(hosts, h.index, run_dir, "1:2", *extra)) for h in hosts
        ]
        wait_for_iteration(procs, 2, 200)
        os.kill(procs[1].popen.pid, signal.SIGKILL)
        procs[0].wait_for("restart 1 of 3 after node-lost", 60)
        back = launch(hosts[1], tmp_path / "n1-again", *torch_node(hosts, 1, run_dir, "1:2", *extra))
        back.wait_for("this node joins at their next restart", 60)
        assert procs[0].wait(300) == 0, procs[0].out[-3000:]
        assert back.wait(60) == 0, back.out[-3000:]
    assert "restart 2 of 3 after exit-code, iteration 10 done" in procs[0].out, procs[0].out[-3000:]
    assert "this node joins at their next restart" in back.out and "exit code 0 (success)" in back.out
    node0 = status(run_dir, 0)["attempts"]
    assert [a["cause"] for a in node0] == ["node-lost", "exit-code", None]
    # node 1's returning launcher took part in attempt 2: its ranks logged there
    assert (run_dir / "node1" / "attempt2" / "logs").is_dir(), sorted(p.name for p in (run_dir / "node1").iterdir())
    assert metrics(run_dir) == list(range(1, 13))
