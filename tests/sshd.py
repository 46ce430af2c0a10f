"""Real OpenSSH "hosts" for the ``submit=ssh`` tests: one Debian ``sshd`` per network namespace.

``SshHosts(n, folder)`` makes ``n`` namespaces with tests/netns.py's :class:`~netns.Hosts` (node i at
``SUBNET.<i+1>``) and starts ``/usr/sbin/sshd`` in each (port 22 of its own network stack), with
everything made by the test under ``folder``: a host key per host, one client key, the
``authorized_keys`` that admits it, and a ``known_hosts`` naming every host's key (so ssh checks
host keys for real: ``StrictHostKeyChecking=yes``). Nothing under ``~/.ssh`` or ``/etc/ssh`` is
read or written. The namespaces share the filesystem: the project's environment (``.venv``, the
worktree) is at the same path on every "host", as the launcher expects of a lab's machines.

    with SshHosts(2, tmp_path / "ssh") as lab:
        lab.overrides            # ssh.identity=..., ssh.options=[...]: what train_multigpu needs
        lab.ssh_argv(1)          # ssh ... 10.77.31.2: a ready client command for host 1
        lab.hosts[0].run([...])  # run the launcher (the ssh client) inside host 0's namespace

The test process itself sits outside the namespaces and cannot reach their addresses: a client runs
inside one of them (``lab.hosts[i].run`` / ``check_output``), typically host 0, as a user's
workstation that is also node 0; ``without_sshd=(i,)`` leaves host i with no sshd (a host that
refuses SSH), ``client=True`` adds one more namespace (``lab.client``) with no sshd: a machine that
only submits.

Needs root, iproute2, util-linux and openssh-server/-client (``.ci/run`` installs them):
:func:`sshd_unavailable` names what is missing, and :class:`SshHosts` skips -- or fails under
``TRAIN_MULTIGPU_REQUIRE_SSH=1`` (CI sets it: these tests must not skip there).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

import require
from netns import Host, Hosts, netns_unavailable

SSHD = "/usr/sbin/sshd"
PORT = 22
USER = "root"  # the tests run as root (namespaces need it): the remote user is the same
START_TIMEOUT_S = 20
# sshd's privilege separation directory: Debian's service creates it at start, a bare sshd needs it
PRIVSEP_DIR = "/run/sshd"


def sshd_unavailable() -> str | None:
    """Why real sshd "hosts" cannot be made here, or None."""
    for tool, package in ((SSHD, "openssh-server"), ("ssh", "openssh-client"), ("ssh-keygen", "openssh-client")):
        if shutil.which(tool) is None:
            return f"{tool} not found (apt-get install {package})"
    return netns_unavailable()


def skip_unavailable(reason: str) -> None:
    require.unavailable("SSH", f"sshd hosts unavailable: {reason}")


def keygen(path: Path, comment: str) -> str:
    """A new ed25519 key pair at ``path`` (no passphrase); the public key's text."""
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        capture_output=True,
        timeout=30,
    )
    return path.with_suffix(".pub").read_text().strip()


def sshd_config(folder: Path, index: int, address: str) -> str:
    """One host's sshd_config: key logins of the client key only, everything in ``folder``."""
    return "\n".join(
        [
            f"Port {PORT}",
            f"ListenAddress {address}",
            f"HostKey {folder / f'host{index}_ed25519'}",
            f"PidFile {folder / f'sshd{index}.pid'}",
            f"AuthorizedKeysFile {folder / 'authorized_keys'}",
            "PermitRootLogin prohibit-password",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            "StrictModes no",  # the test's temporary folder is not ~/.ssh
            "PrintMotd no",
            "PrintLastLog no",
            "MaxStartups 100",  # a preflight and a launch connect to every host at once
            "MaxSessions 100",
            "LogLevel VERBOSE",
            "",
        ]
    )


def strace(out: Path, argv: Sequence[str]) -> list[str]:
    """``argv`` under ``strace -ff``: every ``execve`` of it and all it starts, written to
    ``out.<pid>`` (one file per process: no line split by another's; each with its whole argv, the
    environment not written)."""
    if shutil.which("strace") is None:
        require.unavailable("SSH", "strace not found (apt-get install strace)")
    trace = ["strace", "-ff", "--seccomp-bpf", "-qq", "-e", "trace=execve", "-e", "signal=none", "-s", "1000000"]
    return [*trace, "-o", str(out), *argv]


def execve_argvs(trace: Path) -> list[str]:
    """Every ``execve`` line of an strace (the files ``trace.<pid>``), as the trace writes it: the
    program, its whole argv, the result (``= 0``; a miss of the PATH search ``= -1 ENOENT``)."""
    lines = []
    for path in sorted(trace.parent.glob(f"{trace.name}.*")):
        lines += [line for line in path.read_text(errors="replace").splitlines() if "execve(" in line]
    return lines


class SshHosts:
    """Context manager: ``n`` namespace hosts, an sshd on each (but ``without_sshd``), and the client
    side (key, known_hosts) under ``folder``."""

    def __init__(
        self,
        n: int,
        folder: Path,
        without_sshd: Sequence[int] = (),
        client: bool = False,
        hostnames: bool = False,
        own_disk: Path | None = None,
        trace: bool = False,
    ) -> None:
        """``own_disk``: a directory each sshd host sees as a disk of its own (an empty tmpfs mounted
        there in that sshd's mount namespace, so in its sessions): what a node writes there is not
        visible here, nor on another host (a workstation's local disk). ``trace``: each sshd runs
        under ``strace -f``, every ``execve`` of everything it starts (sessions, shells, what they
        run) written to ``folder/sshd<i>.execve`` (:meth:`traced`)."""
        self.n, self.folder, self.without_sshd, self.with_client = n, Path(folder), tuple(without_sshd), client
        self.own_disk = own_disk
        self.trace = trace
        self._hosts = Hosts(n + (1 if client else 0), hostnames=hostnames)
        self.hosts: list[Host] = []
        self.client: Host | None = None
        self.sshd: dict[int, subprocess.Popen] = {}
        self.identity = self.folder / "id_ed25519"
        self.known_hosts = self.folder / "known_hosts"

    # -- what a client needs ----------------------------------------------------------------------
    @property
    def addresses(self) -> list[str]:
        return [h.addr for h in self.hosts]

    @property
    def options(self) -> list[str]:
        """The ``ssh -o`` options every client uses: the test's known_hosts, checked strictly."""
        return [f"UserKnownHostsFile={self.known_hosts}", "StrictHostKeyChecking=yes", "LogLevel=ERROR"]

    @property
    def overrides(self) -> list[str]:
        """train_multigpu's overrides for these hosts: the hosts, the client key and options."""
        return self.overrides_with()

    def overrides_with(self, *options: str) -> list[str]:
        """:attr:`overrides` with more ``ssh -o`` options after the lab's (one ``ssh.options=``: Hydra
        refuses a second)."""
        return [
            f"ssh.hosts=[{','.join(self.addresses)}]",
            f"ssh.identity={self.identity}",
            f"ssh.options=[{','.join(repr(o) for o in [*self.options, *options])}]",  # quoted: '=' inside a list
        ]

    def ssh_argv(self, index: int, *command: str) -> list[str]:
        """A plain ssh command to host ``index`` (run it inside a namespace: ``hosts[j].run``)."""
        argv = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", "-i", str(self.identity)]
        for option in self.options:
            argv += ["-o", option]
        return [*argv, "-l", USER, self.hosts[index].addr, *command]

    def traced(self) -> list[Path]:
        """The execve traces of the sshds (``trace=True``; read them with :func:`execve_argvs`)."""
        return [self.folder / f"sshd{index}.execve" for index in sorted(self.sshd)]

    def log(self, index: int) -> str:
        """Host ``index``'s sshd log (its -E file): who logged in, what failed."""
        path = self.folder / f"sshd{index}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    # -- setting up and tearing down --------------------------------------------------------------
    def __enter__(self) -> SshHosts:
        reason = sshd_unavailable()
        if reason:
            skip_unavailable(reason)
        self.folder.mkdir(parents=True, exist_ok=True)
        os.chmod(self.folder, 0o700)
        all_hosts = self._hosts.__enter__()
        try:
            self.hosts = all_hosts[: self.n]
            self.client = all_hosts[self.n] if self.with_client else None
            self._start()
        except BaseException:
            self._hosts.__exit__(None, None, None)
            raise
        return self

    def _start(self) -> None:
        os.makedirs(PRIVSEP_DIR, mode=0o755, exist_ok=True)
        client_key = keygen(self.identity, "train_multigpu-tests-client")
        (self.folder / "authorized_keys").write_text(client_key + "\n")
        known = []
        for host in self.hosts:
            if host.index in self.without_sshd:
                continue
            public = keygen(self.folder / f"host{host.index}_ed25519", f"host{host.index}")
            known.append(f"{host.addr} {' '.join(public.split()[:2])}")
            config = self.folder / f"sshd{host.index}_config"
            config.write_text(sshd_config(self.folder, host.index, host.addr))
            log = self.folder / f"sshd{host.index}.log"
            # -D: stay in the foreground (Host.run's process: killed with the namespace), -E: log file
            argv = [SSHD, "-D", "-f", str(config), "-E", str(log)]
            if self.trace:
                argv = strace(self.folder / f"sshd{host.index}.execve", argv)
            if self.own_disk is not None:
                mount = 'mount -t tmpfs tmpfs "$0" && exec "$@"'
                argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", mount, str(self.own_disk), *argv]
            self.sshd[host.index] = host.run(argv)
        self.known_hosts.write_text("\n".join(known) + "\n")
        deadline = time.monotonic() + START_TIMEOUT_S
        for index, proc in self.sshd.items():
            while f"Server listening on {self.hosts[index].addr} port {PORT}" not in self.log(index):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"sshd on host {index} did not start (exit {proc.poll()}):\n{self.log(index)}")
                time.sleep(0.05)

    def __exit__(self, *exc) -> None:
        self._hosts.__exit__(*exc)  # kills every process in the namespaces: the sshds and their sessions


@pytest.fixture
def ssh_hosts(tmp_path):
    """Two sshd hosts (tests/sshd.py :class:`SshHosts`): ``ssh_hosts.overrides`` for train_multigpu,
    ``ssh_hosts.hosts[0].run(argv)`` to start the client inside host 0's namespace."""
    with SshHosts(2, tmp_path / "ssh") as lab:
        yield lab
