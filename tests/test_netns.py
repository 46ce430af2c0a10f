"""Self-test of the network-namespace hosts used by the multi-node tests."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import netns
from netns import PREFIX, Hosts, netns_unavailable, skip_unavailable, sweep_stale

pytestmark = pytest.mark.timeout(60)

SERVE = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(4)
print("listening", flush=True)
while True:
    c, peer = s.accept(); c.sendall(b"hello from " + sys.argv[1].encode()); c.close()
"""

CONNECT = """
import socket, sys
try:
    c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3)
    print("got:", c.recv(100).decode())
except OSError as e:
    print("error:", type(e).__name__, e); sys.exit(1)
"""


def _serve(host, bind, port):
    p = host.run([sys.executable, "-c", SERVE, bind, str(port)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "listening"
    return p


def _connect(host, addr, port):
    return subprocess.run(
        ["ip", "netns", "exec", host.ns, sys.executable, "-c", CONNECT, addr, str(port)],
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_nodes_reach_each_other_but_not_each_others_loopback():
    with Hosts(2) as (n0, n1):
        assert (n0.addr, n1.addr) != (None, None) and n0.addr != n1.addr
        _serve(n0, "0.0.0.0", 4242)
        _serve(n0, "127.0.0.1", 4243)

        # Across the bridge.
        r = _connect(n1, n0.addr, 4242)
        assert r.returncode == 0 and "hello from 0.0.0.0" in r.stdout, r

        # Node 0's own loopback reaches its loopback-only service ...
        r = _connect(n0, "127.0.0.1", 4243)
        assert r.returncode == 0, r
        # ... node 1's 127.0.0.1 is its own loopback, where nothing listens.
        r = _connect(n1, "127.0.0.1", 4243)
        assert r.returncode == 1 and "ConnectionRefused" in r.stdout, r
        # Node 0's loopback-only service is not reachable through its eth0 address either.
        r = _connect(n1, n0.addr, 4243)
        assert r.returncode == 1, r


def test_hostnames_mode_gives_each_node_its_own_resolvable_name():
    probe = (
        "import socket; print(socket.gethostname(), socket.gethostbyname(socket.gethostname()),"
        " socket.gethostbyname('node0'))"
    )
    with Hosts(2, hostnames=True) as (n0, n1):
        assert n1.check_output([sys.executable, "-c", probe]).split() == ["node1", n1.addr, n0.addr]
        etc = [os.path.join("/etc/netns", h.ns) for h in (n0, n1)]
        assert all(os.path.isdir(d) for d in etc)
    assert not any(os.path.exists(d) for d in etc)


def test_no_route_outside():
    with Hosts(1) as (n0,):
        routes = n0.check_output(["ip", "route", "show", "table", "all"])
        assert "default" not in routes
        links = n0.check_output(["ip", "-o", "link"])
        assert sorted(line.split(":")[1].split("@")[0].strip() for line in links.splitlines()) == ["eth0", "lo"]
        r = _connect(n0, "192.0.2.1", 9)  # any non-namespace address: unreachable
        assert r.returncode == 1 and ("unreachable" in r.stdout.lower() or "Errno 101" in r.stdout), r


def test_cleanup_kills_processes_and_deletes_namespaces():
    with Hosts(2) as hosts:
        names = [h.ns for h in hosts]
        p = hosts[1].run(["sleep", "600"])
    assert p.wait(timeout=10) != 0
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(name in listed for name in names)


def test_cleanup_on_error():
    names = []
    with pytest.raises(RuntimeError, match="boom"):
        with Hosts(1) as hosts:
            names = [h.ns for h in hosts]
            raise RuntimeError("boom")
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert names and not any(name in listed for name in names)


def test_sweep_removes_namespaces_of_dead_sessions():
    reason = netns_unavailable()
    if reason:
        skip_unavailable(reason)
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = f"{PREFIX}-{dead.pid}-1-n0"
    subprocess.run(["ip", "netns", "add", stale], check=True)
    try:
        assert stale in sweep_stale()
    finally:
        subprocess.run(["ip", "netns", "del", stale], capture_output=True)


def test_require_switch_turns_the_skip_into_a_failure(monkeypatch):
    """CI sets TRAIN_MULTIGPU_REQUIRE_NETNS=1: a machine without namespaces fails the multi-node
    tests instead of skipping them quietly."""
    monkeypatch.setattr(netns, "netns_unavailable", lambda: "no namespaces in this test")
    monkeypatch.setenv(netns.REQUIRE_VAR, "1")
    with pytest.raises(
        pytest.fail.Exception, match="unavailable: no namespaces in this test .*REQUIRE_NETNS=1: required here"
    ):
        with Hosts(1):
            pass
    monkeypatch.delenv(netns.REQUIRE_VAR)
    with pytest.raises(pytest.skip.Exception, match="no namespaces in this test"):
        with Hosts(1):
            pass
