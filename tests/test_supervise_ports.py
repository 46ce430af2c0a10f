"""Ports, addresses and threads: what preflight refuses before anything starts, and the OMP default."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from require import unavailable
from supervise_util import REPO, env, finish, run_dir, spawner, start, status

HINT = "choose a free port, or stop what holds it; ss -ltnp names it"
LOOPBACK = (
    "a loopback address in a launch of nnodes=2: the other nodes cannot reach it (use node 0's network address "
    "or hostname; if every node runs on this host, add launcher.local_nodes=true)"
)


@pytest.fixture
def taken_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def dry_run(*overrides: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "launcher", "device=cpu", "launcher.nproc_per_node=1", "dry_run=true", *overrides]
    with tempfile.TemporaryDirectory() as folder:  # a folder of its own, not the checkout
        return subprocess.run(argv, capture_output=True, text=True, env=env(), cwd=folder, timeout=60)


def refused(taken: str, *overrides: str) -> str:
    """A port in use is a fact of this host: the dry run prints the plan and warns (issue 18 item 9),
    the real launch (its run root under a temporary folder) refuses it. Returns the real launch's stderr."""
    import tempfile

    dry = dry_run(*overrides)
    assert dry.returncode == 0 and "command(s):" in dry.stdout, dry.stderr
    assert dry.stderr == f"train_multigpu: warning: {taken}; a real launch on this host refuses it\n"
    with tempfile.TemporaryDirectory() as folder:
        argv = [sys.executable, "-m", "launcher", "device=cpu", "launcher.nproc_per_node=1", f"run_root={folder}/runs"]
        real = subprocess.run([*argv, *overrides], capture_output=True, text=True, env=env(), cwd=folder, timeout=60)
        assert real.returncode == 2 and not (Path(folder) / "runs").exists(), real.stderr
    return real.stderr.strip()


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "overrides, key, value",
    [
        (["launcher.master_port={port}"], "launcher.master_port", "{port}"),
        (
            [
                "launcher=multinode",
                "launcher.nnodes=2",
                "launcher.local_nodes=true",
                "launcher.rdzv_endpoint=localhost:{port}",
            ],
            "launcher.rdzv_endpoint",
            "localhost:{port}",
        ),
        (
            ["launcher=skrl_jax", "launcher.coordinator_address=127.0.0.1:{port}"],
            "launcher.coordinator_address",
            "127.0.0.1:{port}",
        ),
    ],
    ids=["master_port", "rdzv_endpoint", "jax-coordinator"],
)
def test_a_taken_port_fails_before_launch_naming_it(taken_port, overrides, key, value):
    taken = f"{key}={value.format(port=taken_port)}: port {taken_port} is already in use on this host ({HINT})"
    assert refused(taken, *(o.format(port=taken_port) for o in overrides)) == f"train_multigpu: error: {taken}"


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "overrides, key, value",
    [
        (["launcher=multinode", "launcher.master_addr=127.0.0.1"], "launcher.master_addr", "127.0.0.1"),
        (
            ["launcher=multinode", "launcher.node_rank=1", "launcher.rdzv_endpoint=localhost:29400"],
            "launcher.rdzv_endpoint",
            "localhost:29400",
        ),
        (
            ["launcher=skrl_jax", "launcher.coordinator_address=127.0.0.1:1234"],
            "launcher.coordinator_address",
            "127.0.0.1:1234",
        ),
    ],
    ids=["master_addr", "rdzv_endpoint-node1", "jax-coordinator"],
)
def test_loopback_in_a_multinode_launch_is_an_error(overrides, key, value):
    result = dry_run("launcher.nnodes=2", *overrides)
    assert result.returncode == 2
    assert result.stderr.strip() == f"train_multigpu: error: {key}={value}: {LOOPBACK}"
    # ... unless every node is on this host
    assert dry_run("launcher.nnodes=2", "launcher.local_nodes=true", *overrides).returncode == 0


@pytest.mark.timeout(60)
def test_free_ports_are_chosen_when_none_is_given(taken_port):
    single = dry_run().stdout
    assert "--standalone" in single  # torchrun picks a free port itself
    jax = dry_run("launcher=skrl_jax").stdout
    ports = {
        line.split("JAX_COORDINATOR_PORT=")[1].split()[0]
        for line in jax.splitlines()
        if "JAX_COORDINATOR_PORT=" in line
    }
    assert len(ports) == 1 and int(ports.pop()) != taken_port


@pytest.mark.timeout(60)
def test_omp_threads_follow_the_affinity_mask_and_torchrun_prints_no_banner(tmp_path):
    if shutil.which("taskset") is None:
        unavailable("ROOT", "needs taskset (util-linux)")
    proc, _ = spawner(tmp_path, nproc=1, args=("--mode", "ok"))
    code, out, err = finish(proc)
    assert code == 0, err
    import os

    cores = len(os.sched_getaffinity(0))
    assert f"rank 0 OMP_NUM_THREADS={cores}" in out
    torchrun_log = (run_dir(tmp_path) / "logs" / "torchrun.log").read_text()
    assert "Setting OMP_NUM_THREADS" not in torchrun_log + out + err  # torchrun's banner
    # one core allowed: one thread, whatever the machine has
    pinned = subprocess.run(
        [
            "taskset",
            "-c",
            "0",
            sys.executable,
            "-m",
            "launcher",
            "device=cpu",
            "launcher.nproc_per_node=1",
            "dry_run=true",
        ],
        capture_output=True,
        text=True,
        env=env(),
        cwd=tmp_path,
        timeout=60,
    )
    assert "export OMP_NUM_THREADS=1" in pinned.stdout


@pytest.mark.timeout(60)
def test_torchruns_default_master_port_is_checked_and_named():
    holder = socket.socket()
    try:
        holder.bind(("127.0.0.1", 29500))
        holder.listen()
    except OSError:
        pass  # someone else holds it already: taken either way
    taken = f"launcher.master_port=29500 (torchrun's default): port 29500 is already in use on this host ({HINT})"
    try:
        stderr = refused(
            taken,
            *("launcher=multinode", "launcher.nnodes=2", "launcher.master_addr=127.0.0.1", "launcher.local_nodes=true"),
        )
    finally:
        holder.close()
    assert stderr == f"train_multigpu: error: {taken}"


TORCH_WORKER = str(REPO / "tests" / "workers" / "torch_allreduce.py")
JAX_WORKER = str(REPO / "tests" / "workers" / "jax_allreduce.py")


@pytest.mark.timeout(150)
@pytest.mark.parametrize("jax", [False, True], ids=["master_port", "jax-coordinator"])
def test_two_launches_on_one_port_the_loser_gets_the_port_message(tmp_path, jax):
    """Issue 13 item 10: two launches with the same explicit master_port both passed the port check;
    the loser got torchrun's EADDRINUSE traceback and exit 1. Made deterministic: the loser passes
    its check first, and its interpreter (python=) waits until the winner's torchrun listens on the
    port before it starts the loser's torchrun. Both are real launches on loopback. (JAX: the port
    is taken by another program between the check and the coordinator's bind.)"""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    wrapper = tmp_path / "python-after-the-winner"
    wrapper.write_text(
        "#!/bin/sh\n"
        f"while ! {sys.executable} -c \"import socket, sys; sys.exit(socket.socket().connect_ex(('127.0.0.1', {port})))\"; "  # noqa: E501
        "do sleep 0.1; done\n"
        f'exec {sys.executable} "$@"\n'
    )
    wrapper.chmod(0o755)
    loser_dir, winner_dir = tmp_path / "loser", tmp_path / "winner"
    loser_dir.mkdir()
    winner_dir.mkdir()
    if jax:  # the JAX coordinator service, started by rank 0 (jax.distributed.initialize)
        key, value = "launcher.coordinator_address", f"127.0.0.1:{port}"
        common = ("launcher=skrl_jax", f"{key}={value}", "launcher.nproc_per_node=1", f"script={JAX_WORKER}")
        args: tuple = ("--init-timeout", "60")
    else:
        key, value = "launcher.master_port", str(port)
        common = (f"{key}={value}", "launcher.nproc_per_node=1", f"script={TORCH_WORKER}")
        args = ()
    loser = start(loser_dir, *common, f"python={wrapper}", script_args=args)
    winner = holder = None
    try:
        first = loser.stdout.readline().decode()
        assert first.startswith("[train_multigpu] run directory:"), first  # the loser passed the port check
        if jax:
            # JAX's coordinator (gRPC) binds with SO_REUSEPORT, so a second coordinator would share
            # the port rather than fail: here the port is taken by a plain listener instead
            holder = socket.socket()
            holder.bind(("0.0.0.0", port))
            holder.listen()
        else:
            winner = start(winner_dir, *common, script_args=(*args, "--hold", "60"))
        code, out, err = finish(loser, timeout=120)
    finally:
        if winner is not None:
            winner.send_signal(2)
            finish(winner, timeout=60)
        if holder is not None:
            holder.close()
    assert code == 2, out + err
    assert err == f"train_multigpu: error: {key}={value}: port {port} is already in use on this host ({HINT})\n", (
        out + err
    )
    if not jax:  # torchrun's traceback is not shown; a JAX rank 0's output is on the console as always
        assert "Traceback" not in out and "EADDRINUSE" not in out
    assert out.strip().endswith(f"exit code 2 (port {port} in use); run directory: {run_dir(loser_dir)}")
    record = status(loser_dir)
    assert record["exit_code"] == 2 and record["reason"] == f"port {port} in use" and record["failure"] is None
    assert record["outcome"] == "port_in_use"
    # torchrun's / gRPC's own words are kept in the logs
    log, words = ("rank0.log", "Failed to add port") if jax else ("torchrun.log", "EADDRINUSE")
    assert words in (run_dir(loser_dir) / "logs" / log).read_text()


@pytest.mark.timeout(150)
def test_a_parallel_sweeps_job_gets_the_port_message_too(tmp_path):
    """Issue 19: the port taken between the check and the bind was named (exit 2 and the key) only
    for a single launch; a job of a parallel sweep ended with the bare outcome. The same real JAX
    launch as above, as job 0 of a ``sweep.parallel=2`` sweep."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    wrapper = tmp_path / "python-after-the-holder"
    wrapper.write_text(
        "#!/bin/sh\n"
        f"while ! {sys.executable} -c \"import socket, sys; sys.exit(socket.socket().connect_ex(('127.0.0.1', {port})))\"; "  # noqa: E501
        "do sleep 0.1; done\n"
        f'exec {sys.executable} "$@"\n'
    )
    wrapper.chmod(0o755)
    key, value = "launcher.coordinator_address", f"127.0.0.1:{port}"
    sweep = start(
        tmp_path,
        "-m",
        "seed=1",
        "sweep.parallel=2",
        "launcher=skrl_jax",
        f"{key}={value}",
        "launcher.nproc_per_node=1",
        f"script={JAX_WORKER}",
        f"python={wrapper}",
        script_args=("--init-timeout", "60"),
    )
    holder = socket.socket()
    try:
        while "job 0 started" not in (line := sweep.stdout.readline().decode()):  # the port check passed
            assert line, "the sweep ended before its job started"
        holder.bind(("0.0.0.0", port))
        holder.listen()
        code, out, err = finish(sweep, timeout=120)
    finally:
        holder.close()
    assert code == 2, out + err
    assert f"train_multigpu: error: {key}={value}: port {port} is already in use on this host ({HINT})\n" in err, (
        out + err
    )
    assert f"job 0 exit code 2 (port {port} in use)" in out
