"""Separate network "hosts" for multi-node tests, made with ``ip netns`` and veth pairs.

``Hosts(n)`` creates one bridge namespace and ``n`` node namespaces. Each node has ``lo`` up
and one interface ``eth0`` (a veth whose peer sits on the bridge) holding ``SUBNET.<i+1>/24``.
There is no default route, no NAT and nothing attached to the machine's real interfaces:
a node can reach its own loopback and the other nodes' ``eth0`` addresses, nothing else.

By default all namespaces share the machine's hostname and ``/etc/hosts`` (where the hostname
often resolves to 127.0.0.1 or 127.0.1.1), exactly the situation in which torch elastic and gloo
pick a wrong address unless told otherwise (see docs/notes/multinode_facts.md).
``Hosts(n, hostnames=True)`` emulates a well-configured cluster instead: processes started by
``Host.run`` get their own UTS namespace with hostname ``node<i>`` and an ``/etc/hosts`` (via
``/etc/netns/<ns>/hosts``, which ``ip netns exec`` bind-mounts) naming every node's address.
``Hosts(n, hostnames=True, own_name_resolves=False)`` is the fresh node whose hosts file lacks its
own name: each node's ``/etc/hosts`` names the other nodes only, so ``socket.getaddrinfo(
socket.gethostname())`` fails there (DNS is unreachable: the namespaces have no route out).

    with Hosts(2) as (node0, node1):
        p = node0.run([sys.executable, "-c", "print(1)"], stdout=subprocess.PIPE)

Processes started with ``Host.run`` get their own session; on exit every process still
living inside the namespaces is SIGKILLed (``ip netns pids``) and the namespaces are deleted,
also when the body raised. Namespaces left behind by a dead test session (same prefix, pid no
longer alive) are swept on the next ``Hosts`` creation.

Needs root (CAP_SYS_ADMIN + CAP_NET_ADMIN), iproute2 (and util-linux ``unshare`` for
``hostnames=True``); ``netns_unavailable()`` names the
reason when not, and ``Hosts`` calls ``pytest.skip`` with it -- or ``pytest.fail`` when
``TRAIN_MULTIGPU_REQUIRE_NETNS=1`` (CI sets it: there the multi-node tests must not skip).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence

import require

PREFIX = "tmgns"
"""Every namespace this module creates is named ``<PREFIX>-<pid>-<counter>-<role>``."""

SUBNET = "10.77.31"
"""Private /24 used only inside these namespaces; node i is ``SUBNET.<i+1>``."""

ETC_NETNS = "/etc/netns"
"""``ip netns exec NS`` bind-mounts ``/etc/netns/NS/*`` over ``/etc/*``."""

_counter = 0


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def netns_unavailable() -> str | None:
    """Why namespaces cannot be made here, or None when they can (probes once per call)."""
    if shutil.which("ip") is None:
        return "iproute2 'ip' not found (apt-get install iproute2)"
    if shutil.which("unshare") is None:
        return "util-linux 'unshare' not found"
    if os.geteuid() != 0:
        return "network namespaces need root (CAP_SYS_ADMIN/CAP_NET_ADMIN)"
    name = f"{PREFIX}-{os.getpid()}-probe"
    res = _ip("netns", "add", name, check=False)
    if res.returncode != 0:
        return f"'ip netns add' failed: {res.stderr.strip() or res.returncode}"
    try:
        res = _ip(
            "link",
            "add",
            "tmgprobe0",
            "netns",
            name,
            "type",
            "veth",
            "peer",
            "name",
            "tmgprobe1",
            "netns",
            name,
            check=False,
        )
        if res.returncode != 0:
            return f"cannot create veth pairs: {res.stderr.strip() or res.returncode}"
    finally:
        _ip("netns", "del", name, check=False)
    return None


REQUIRE_VAR = require.variable("NETNS")


def skip_unavailable(reason: str) -> None:
    """Skip the calling test because namespaces cannot be made; fail it instead under REQUIRE_VAR=1."""
    require.unavailable("NETNS", f"network namespaces unavailable: {reason}")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_all_in(ns: str) -> None:
    res = _ip("netns", "pids", ns, check=False)
    for tok in res.stdout.split():
        try:
            os.kill(int(tok), signal.SIGKILL)
        except (ValueError, ProcessLookupError):
            pass


def _delete(ns: str) -> None:
    shutil.rmtree(os.path.join(ETC_NETNS, ns), ignore_errors=True)
    _kill_all_in(ns)
    # Deleting a namespace with processes still in it only unlinks the name; wait briefly.
    for _ in range(50):
        if not _ip("netns", "pids", ns, check=False).stdout.split():
            break
        time.sleep(0.1)
    _ip("netns", "del", ns, check=False)


def sweep_stale() -> list[str]:
    """Delete namespaces of this prefix whose creating pid is dead; return their names."""
    res = _ip("netns", "list", check=False)
    swept = []
    for line in res.stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        parts = name.split("-")
        if len(parts) >= 3 and parts[0] == PREFIX and parts[1].isdigit():
            if not _pid_alive(int(parts[1])):
                _delete(name)
                swept.append(name)
    return swept


class Host:
    """One node: a namespace with ``lo`` and ``eth0`` at ``addr``."""

    def __init__(self, ns: str, index: int, addr: str, hostname: str | None = None) -> None:
        self.ns = ns
        self.index = index
        self.addr = addr
        self.hostname = hostname
        """Own hostname (``node<i>``) when made with ``hostnames=True``, else None (shared)."""
        self.procs: list[subprocess.Popen] = []

    def _wrap(self, argv: Sequence[str]) -> list[str]:
        prefix = ["ip", "netns", "exec", self.ns]
        if self.hostname:
            prefix += ["unshare", "--uts", "--", "sh", "-c", 'hostname "$0" && exec "$@"', self.hostname]
        return [*prefix, *argv]

    def run(self, argv: Sequence[str], env: dict[str, str] | None = None, **popen_kwargs) -> subprocess.Popen:
        """Start ``argv`` inside this namespace (``ip netns exec`` execs it: same pid).

        ``env`` replaces the environment when given (like Popen). The process gets its own
        session so that ``kill_group`` reaches its children too.
        """
        popen_kwargs.setdefault("start_new_session", True)
        proc = subprocess.Popen(self._wrap(argv), env=env, **popen_kwargs)
        self.procs.append(proc)
        return proc

    def check_output(self, argv: Sequence[str], timeout: float = 30, **kw) -> str:
        return subprocess.run(
            self._wrap(argv), capture_output=True, text=True, check=True, timeout=timeout, **kw
        ).stdout

    def crash(self) -> None:
        """SIGKILL every process in this namespace: the node dies, its sockets get reset.

        (SIGKILL on torchrun alone is not a node crash: torchrun starts each worker in its own
        session, so its workers live on.)
        """
        _kill_all_in(self.ns)

    def unplug(self) -> None:
        """Take ``eth0`` down: peers get no reset, only silence (a pulled cable / dead host)."""
        _ip("-n", self.ns, "link", "set", "eth0", "down")

    def __repr__(self) -> str:
        return f"Host({self.ns!r}, addr={self.addr!r})"


def kill_group(proc: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
    """Signal the whole session/process group led by ``proc`` (started by ``Host.run``)."""
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


class Hosts:
    """Context manager: ``n`` hosts joined through a bridge in its own namespace."""

    def __init__(self, n: int = 2, skip: bool = True, hostnames: bool = False, own_name_resolves: bool = True) -> None:
        self.n = n
        self.hostnames = hostnames
        self.own_name_resolves = own_name_resolves
        self.skip = skip
        self.hosts: list[Host] = []
        self.namespaces: list[str] = []

    def __enter__(self) -> list[Host]:
        reason = netns_unavailable()
        if reason:
            if self.skip:
                skip_unavailable(reason)
            raise RuntimeError(reason)
        sweep_stale()
        global _counter
        _counter += 1
        base = f"{PREFIX}-{os.getpid()}-{_counter}"
        try:
            self._create(base)
        except BaseException:
            self._cleanup()
            raise
        return self.hosts

    def _create(self, base: str) -> None:
        br = f"{base}-br"
        _ip("netns", "add", br)
        self.namespaces.append(br)
        _ip("-n", br, "link", "add", "br0", "type", "bridge")
        _ip("-n", br, "link", "set", "br0", "up")
        for i in range(self.n):
            ns = f"{base}-n{i}"
            _ip("netns", "add", ns)
            self.namespaces.append(ns)
            # Both ends are born inside our namespaces: nothing ever touches the host's links.
            _ip("link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", f"p{i}", "netns", br)
            _ip("-n", br, "link", "set", f"p{i}", "master", "br0")
            _ip("-n", br, "link", "set", f"p{i}", "up")
            addr = f"{SUBNET}.{i + 1}"
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            self.hosts.append(Host(ns, i, addr, f"node{i}" if self.hostnames else None))
        if self.hostnames:
            common = ["127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback"]
            for h in self.hosts:
                named = [o for o in self.hosts if self.own_name_resolves or o is not h]
                lines = common + [f"{o.addr} {o.hostname}" for o in named]
                os.makedirs(os.path.join(ETC_NETNS, h.ns), exist_ok=True)
                with open(os.path.join(ETC_NETNS, h.ns, "hosts"), "w") as f:
                    f.write("\n".join(lines) + "\n")

    def _cleanup(self) -> None:
        for host in self.hosts:
            for proc in host.procs:
                if proc.poll() is None:
                    kill_group(proc)
        for ns in reversed(self.namespaces):
            _delete(ns)
        for host in self.hosts:
            for proc in host.procs:
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass

    def __exit__(self, *exc) -> None:
        self._cleanup()
