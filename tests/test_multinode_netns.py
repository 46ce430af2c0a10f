"""Real multi-node rendezvous across network namespaces, with bare commands.

Each test starts plain ``torchrun`` / JAX processes (no launcher) on separate network "hosts"
(tests/netns.py) and checks a gloo all-reduce in which every rank contributes 2**rank, so the
sum proves that every rank of every node took part. These pin down exactly which flags and
environment the launcher must emit (docs/notes/multinode_facts.md).

Two host set-ups:
- shared hostname (``Hosts(n)``): every node has the machine's hostname, which resolves to
  127.0.0.1 -- the container / Debian-``127.0.1.1`` case in which defaults pick loopback;
- own hostnames (``Hosts(n, hostnames=True)``): ``node<i>`` resolving to the node's address,
  like a well-configured cluster.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import off_checkout
from netns import Hosts
from ports import free_port

WORKERS = Path(__file__).parent / "workers"
TORCH_WORKER = str(WORKERS / "torch_allreduce.py")
JAX_WORKER = str(WORKERS / "jax_allreduce.py")
PY = sys.executable
RESULT = re.compile(r"RESULT rank=(\d+) [^\n]*?world=(\d+) [^\n]*?sum=(\d+) expected=(\d+) [^\n]*?ok=(True|False)")

# Variables an outer torchrun/skrl run may have left in our environment.
_SCRUB = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
    "GLOO_SOCKET_IFNAME",
    "JAX_RANK",
    "JAX_LOCAL_RANK",
    "JAX_WORLD_SIZE",
    "JAX_COORDINATOR_ADDR",
    "JAX_COORDINATOR_PORT",
)


def env(**extra: str) -> dict[str, str]:
    e = {k: v for k, v in off_checkout(os.environ).items() if k not in _SCRUB}
    e.update(PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", **extra)
    return e


def torchrun(nnodes: int, *flags: str, nproc: int = 2, worker_args: tuple = ()) -> list[str]:
    return [
        PY,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        str(nnodes),
        "--nproc_per_node",
        str(nproc),
        *flags,
        TORCH_WORKER,
        *worker_args,
    ]


class Proc:
    """A started process whose combined output is collected in the background."""

    def __init__(self, popen: subprocess.Popen) -> None:
        self.popen = popen
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        for line in self.popen.stdout:
            self.lines.append(line)

    @property
    def out(self) -> str:
        return "".join(self.lines)

    def wait(self, timeout: float) -> int:
        try:
            rc = self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"still running after {timeout}s; output tail:\n{self.out[-3000:]}")
        self._thread.join(5)
        return rc

    def wait_for(self, text: str, timeout: float) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if text in self.out:
                return
            if self.popen.poll() is not None:
                break
            time.sleep(0.1)
        pytest.fail(f"{text!r} not seen; output tail:\n{self.out[-3000:]}")


def listening_at(host, port: int, proc: Proc, timeout: float = 60) -> float:
    """The monotonic time by which ``port`` listens in ``host``'s namespace (``ss -N``: nothing
    connects to it). A server that listens there starts its wait for peers then (a rendezvous store,
    JAX's coordinator), so a bound measured from this instant counts the wait, not the interpreter's
    start-up. Taken after the look that found it: never earlier than the listening began."""
    end = time.monotonic() + timeout
    while time.monotonic() < end and proc.popen.poll() is None:
        found = subprocess.run(
            ["ss", "-N", host.ns, "-Hltn", f"sport = :{port}"], capture_output=True, text=True, timeout=30
        ).stdout
        if found.strip():
            return time.monotonic()
        time.sleep(0.1)
    pytest.fail(f"port {port} of {host.addr} not listening; output tail:\n{proc.out[-3000:]}")


def start(host, argv, environ=None) -> Proc:
    return Proc(host.run(argv, env=environ or env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))


def sums(out: str) -> dict[int, tuple[int, int, int, bool]]:
    return {int(m[1]): (int(m[2]), int(m[3]), int(m[4]), m[5] == "True") for m in RESULT.finditer(out)}


def assert_all_reduced(procs: list[Proc], ranks_per_proc: list[int], world: int) -> None:
    seen = {}
    for p, n in zip(procs, ranks_per_proc):
        got = sums(p.out)
        assert len(got) == n, p.out[-3000:]
        seen.update(got)
    assert sorted(seen) == list(range(world))
    assert all(v == (world, 2**world - 1, 2**world - 1, True) for v in seen.values()), seen


def run_nodes(hosts, argvs, environ=None, timeout=90) -> list[Proc]:
    procs = [start(h, argv, environ) for h, argv in zip(hosts, argvs)]
    for p in procs:
        assert p.wait(timeout) == 0, p.out[-3000:]
    return procs


# --- torchrun c10d --------------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_c10d_shared_hostname_needs_is_host_local_addr_and_gloo_ifname():
    with Hosts(2) as hosts:
        rdzv = ["--rdzv_backend", "c10d", "--rdzv_endpoint", f"{hosts[0].addr}:29400", "--rdzv_id", "c10d-shared"]
        argvs = [
            torchrun(
                2,
                "--node_rank",
                str(h.index),
                *rdzv,
                "--local_addr",
                h.addr,
                "--rdzv_conf",
                f"is_host={int(h.index == 0)}",
            )
            for h in hosts
        ]
        procs = run_nodes(hosts, argvs, env(GLOO_SOCKET_IFNAME="eth0"))
        assert_all_reduced(procs, [2, 2], 4)
        # Workers were told node 0's real address, not the shared hostname ("localhost").
        assert f"master={hosts[0].addr}:" in procs[1].out


@pytest.mark.timeout(120)
def test_c10d_own_hostnames_bare_command():
    with Hosts(2, hostnames=True) as hosts:
        rdzv = ["--rdzv_backend", "c10d", "--rdzv_endpoint", f"{hosts[0].addr}:29400", "--rdzv_id", "c10d-bare"]
        procs = run_nodes(hosts, [torchrun(2, *rdzv) for _ in hosts])
        assert_all_reduced(procs, [2, 2], 4)
        assert "master=node0:" in procs[1].out  # torch elastic advertises the FQDN


# --- torchrun static ------------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_static_shared_hostname_needs_gloo_ifname():
    with Hosts(2) as hosts:
        argvs = [
            torchrun(2, "--node_rank", str(h.index), "--master_addr", hosts[0].addr, "--master_port", "29500")
            for h in hosts
        ]
        procs = run_nodes(hosts, argvs, env(GLOO_SOCKET_IFNAME="eth0"))
        assert_all_reduced(procs, [2, 2], 4)


# --- loopback: two torchrun "nodes" on one host ---------------------------------------------


@pytest.mark.timeout(120)
def test_c10d_two_nodes_on_loopback():
    port = free_port()
    rdzv = ["--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{port}", "--rdzv_id", f"loop-{os.getpid()}"]
    procs = [
        Proc(
            subprocess.Popen(
                torchrun(2, "--node_rank", str(r), *rdzv),
                env=env(),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
            )
        )
        for r in (0, 1)
    ]
    try:
        for p in procs:
            assert p.wait(90) == 0, p.out[-3000:]
    finally:
        for p in procs:
            if p.popen.poll() is None:
                os.killpg(p.popen.pid, 9)
    assert_all_reduced(procs, [2, 2], 4)


# --- JAX (skrl's variables, CPU gloo collectives) -------------------------------------------


def jax_env(rank: int, local_rank: int, world: int, coord: str, port: int = 5123) -> dict:
    return env(
        JAX_RANK=str(rank),
        JAX_LOCAL_RANK=str(local_rank),
        JAX_WORLD_SIZE=str(world),
        JAX_COORDINATOR_ADDR=coord,
        JAX_COORDINATOR_PORT=str(port),
    )


@pytest.mark.timeout(90)
@pytest.mark.parametrize("per_node", [1, 2])
def test_jax_two_nodes_via_skrl_variables(per_node):
    world = 2 * per_node
    with Hosts(2, hostnames=True) as hosts:
        procs = [
            start(h, [PY, JAX_WORKER], jax_env(h.index * per_node + lr, lr, world, hosts[0].addr))
            for h in hosts
            for lr in range(per_node)
        ]
        for p in procs:
            assert p.wait(60) == 0, p.out[-3000:]
        assert_all_reduced(procs, [1] * world, world)


# --- failure timing -------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_c10d_missing_node_bounded_by_join_timeout():
    with Hosts(2, hostnames=True) as hosts:
        t0 = time.monotonic()
        p = start(
            hosts[0],
            torchrun(
                2,
                "--rdzv_backend",
                "c10d",
                "--rdzv_endpoint",
                f"{hosts[0].addr}:29400",
                "--rdzv_id",
                "lonely",
                "--rdzv_conf",
                "join_timeout=2",
            ),
        )
        waiting = listening_at(hosts[0], 29400, p)  # the store is up: node 0's join begins
        assert p.wait(45) == 1
        waited, elapsed = time.monotonic() - waiting, time.monotonic() - t0
    assert "RendezvousTimeoutError" in p.out
    assert 2 <= waited and elapsed < 30, (waited, elapsed)


@pytest.mark.timeout(60)
def test_static_missing_node_bounded_by_rdzv_conf_timeout():
    with Hosts(2, hostnames=True) as hosts:
        t0 = time.monotonic()
        p = start(
            hosts[0],
            torchrun(
                2,
                "--node_rank",
                "0",
                "--master_addr",
                hosts[0].addr,
                "--master_port",
                "29500",
                "--rdzv_conf",
                "timeout=2",
            ),
        )
        waiting = listening_at(hosts[0], 29500, p)  # the master's store is up: its wait for clients begins
        assert p.wait(45) == 1
        waited, elapsed = time.monotonic() - waiting, time.monotonic() - t0
    assert "waiting for clients. 1/2 clients joined" in p.out
    assert 2 <= waited and elapsed < 30, (waited, elapsed)


@pytest.mark.timeout(60)
def test_jax_missing_process_bounded_by_initialization_timeout():
    with Hosts(2, hostnames=True) as hosts:
        t0 = time.monotonic()
        p = start(hosts[0], [PY, JAX_WORKER, "--init-timeout", "2"], jax_env(0, 0, 2, hosts[0].addr))
        waiting = listening_at(hosts[0], 5123, p)  # the coordinator is up: rank 0's registration begins
        rc = p.wait(45)
        waited, elapsed = time.monotonic() - waiting, time.monotonic() - t0
    assert rc == -6, p.out[-2000:]  # SIGABRT from XLA's LOG(FATAL): 134 under a shell
    assert "DEADLINE_EXCEEDED" in p.out and "RegisterTask" in p.out
    assert 2 <= waited and elapsed < 30, (waited, elapsed)


@pytest.mark.timeout(90)
def test_c10d_node_crash_mid_run_stops_survivor_quickly():
    with Hosts(2, hostnames=True) as hosts:
        rdzv = ["--rdzv_backend", "c10d", "--rdzv_endpoint", f"{hosts[0].addr}:29400", "--rdzv_id", "crash"]
        procs = [start(h, torchrun(2, *rdzv, worker_args=("--hold", "60"))) for h in hosts]
        for p in procs:
            p.wait_for("HOLDING", 60)
        t0 = time.monotonic()
        hosts[1].crash()
        rc = procs[0].wait(30)
        elapsed = time.monotonic() - t0
    assert rc == 1
    assert "ChildFailedError" in procs[0].out
    assert re.search(r"Connection (closed|reset) by peer", procs[0].out)
    assert elapsed < 15, elapsed


@pytest.mark.timeout(90)
def test_jax_node_crash_mid_run_raises_quickly_but_survivor_hangs_at_exit():
    """The survivor's collective fails within seconds, but the process then hangs in
    jax.distributed's shutdown (coordination service), so a launcher must kill it."""
    with Hosts(2, hostnames=True) as hosts:
        procs = [start(h, [PY, JAX_WORKER, "--hold", "60"], jax_env(h.index, 0, 2, hosts[0].addr)) for h in hosts]
        for p in procs:
            p.wait_for("HOLDING", 60)
        t0 = time.monotonic()
        hosts[1].crash()
        procs[0].wait_for("JaxRuntimeError", 15)
        elapsed = time.monotonic() - t0
        assert re.search(r"Gloo all-reduce failed: .*Connection (closed|reset) by peer", procs[0].out)
        time.sleep(5)
        still_running = procs[0].popen.poll() is None
    assert elapsed < 15, elapsed
    assert still_running, "JAX survivor exited by itself: update docs/notes/multinode_facts.md"


# --- a fresh node whose hosts file lacks its own name (issue 18 item 8) ---------------------


@pytest.mark.timeout(120)
def test_c10d_without_is_host_fails_where_a_nodes_own_name_does_not_resolve():
    """torch guesses is_host by resolving this machine's own host name: a gaierror in
    _matches_machine_hostname, on every node, before any worker starts. Told is_host, they meet
    (the launcher's own two-node launch: test_multinode_launcher.py)."""
    with Hosts(2, hostnames=True, own_name_resolves=False) as hosts:
        rdzv = ["--rdzv_backend", "c10d", "--rdzv_endpoint", f"{hosts[0].addr}:29400", "--rdzv_id", "no-own-name"]
        flags = [["--node_rank", str(h.index), "--local_addr", h.addr] for h in hosts]
        procs = [
            start(h, torchrun(2, *rdzv, *f, nproc=1), env(GLOO_SOCKET_IFNAME="eth0")) for h, f in zip(hosts, flags)
        ]
        for p in procs:
            assert p.wait(90) == 1, p.out[-3000:]
            assert "_matches_machine_hostname" in p.out and "socket.gaierror" in p.out, p.out[-3000:]
        told = [f + ["--rdzv_conf", f"is_host={int(h.index == 0)}"] for h, f in zip(hosts, flags)]
        procs = run_nodes(hosts, [torchrun(2, *rdzv, *f, nproc=1) for f in told], env(GLOO_SOCKET_IFNAME="eth0"))
        assert_all_reduced(procs, [1, 1], 2)


@pytest.mark.timeout(90)
def test_jax_on_cpu_refuses_a_node_whose_own_name_does_not_resolve(tmp_path):
    """JAX's gloo CPU collectives resolve this machine's host name (jax passes gloo no interface): every
    rank would die in gloo's device.cc ("rv == 0. -3 vs 0"). Nothing can tell it otherwise, so the
    launcher refuses before anything starts, naming the fix; its dry run warns."""
    worker = str(WORKERS / "jax_allreduce.py")
    with Hosts(1, hostnames=True, own_name_resolves=False) as (node,):
        base = [PY, "-m", "launcher", "device=cpu", f"run_root={tmp_path / 'runs'}", "launcher=skrl_jax"]
        base += ["launcher.nnodes=2", "launcher.node_rank=1", "launcher.coordinator_address=10.77.31.9:5123"]
        base += ["launcher.nproc_per_node=1", "rl_library=skrl", f"script={worker}"]
        environ = env(CUDA_VISIBLE_DEVICES="")
        real = start(node, base, environ)
        assert real.wait(60) == 2, real.out
        dry = start(node, [*base, "dry_run=true"], environ)
        assert dry.wait(60) == 0, dry.out
    refused = (
        "launcher.coordinator_address=10.77.31.9:5123: this host's name 'node0' does not resolve here, and JAX's CPU "
        "(gloo) collectives resolve it to find this node's address (every rank would fail in gloo's device.cc) "
        "(add 'node0' with this node's own address to /etc/hosts (or DNS); see docs/multinode.md)"
    )
    assert real.out == f"train_multigpu: error: {refused}\n"
    assert f"train_multigpu: warning: {refused}; a real launch on this host refuses it\n" in dry.out
    assert not (tmp_path / "runs").exists()
