"""``submit=ssh``'s preflight against real OpenSSH (tests/sshd.py: one sshd per network namespace).

``train_multigpu submit=ssh ...`` runs inside host 0's namespace, as on a workstation that is also
node 0. Each host that is not ready is one line naming it and the fix, exit 2, and nothing was
started or written on any host (no run directory here either); a ready pair of hosts passes the
preflight (tests/workers/ssh_preflight.py: the dry run and the preflight alone, since a real launch
would then start).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from netns import _ip
from sshd import SshHosts

REPO = Path(__file__).resolve().parents[1]
WORKER = str(REPO / "tests" / "workers" / "ssh_preflight.py")
RUNS_WORKER = str(REPO / "tests" / "workers" / "runs_worker.py")
ERROR = "train_multigpu: error: "


def preflight(
    lab: SshHosts, tmp: Path, *args: str, timeout: float = 240, cli: bool = True
) -> tuple[int, list[str], str, float]:
    """(exit code, the error lines, stdout, seconds) of ``train_multigpu submit=ssh ...`` run in host 0
    (``cli=False``: the dry run and preflight alone, tests/workers/ssh_preflight.py)."""
    given = {a.split("=", 1)[0] for a in args}  # an override given here replaces the lab's
    entry = [sys.executable, "-m", "launcher", "submit=ssh"] if cli else [sys.executable, WORKER]
    argv = [*entry, *[o for o in lab.overrides if o.split("=", 1)[0] not in given]]
    defaults = ["device=cpu", "launcher.nproc_per_node=1", f"script={RUNS_WORKER}", f"run_root={tmp / 'runs'}"]
    argv += [*[o for o in defaults if o.split("=", 1)[0] not in given], *args]
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES",)}
    env["CUDA_VISIBLE_DEVICES"] = ""
    started = time.monotonic()
    proc = lab.hosts[0].run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp, env=env)
    out, err = proc.communicate(timeout=timeout)
    took = time.monotonic() - started
    assert "Traceback" not in err, err
    return proc.returncode, [line for line in err.splitlines() if line.startswith(ERROR)], out, took


def only_sshd_left(lab: SshHosts) -> None:
    """Nothing the preflight ran is still running in any host's namespace: only the sshds."""
    for host in lab.hosts:
        for pid in _ip("netns", "pids", host.ns, check=False).stdout.split():
            try:
                command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            assert command.startswith("/usr/sbin/sshd -D") or "sshd:" in command, (host, command)


def assert_nothing_written(tmp: Path) -> None:
    assert not (tmp / "runs").exists(), list((tmp / "runs").rglob("*"))


def test_two_ready_hosts_pass(tmp_path):
    with SshHosts(2, tmp_path / "ssh") as lab:
        code, errors, out, _ = preflight(lab, tmp_path, cli=False)  # a real launch would start
        assert (code, errors) == (0, []), (out, errors)
        assert out.startswith("ready"), out
        # each host ran our --version and node i's dry run, once, over one connection
        for index in range(2):
            assert lab.log(index).count("Accepted publickey for root") == 1, lab.log(index)
        only_sshd_left(lab)
    assert_nothing_written(tmp_path)


def test_a_host_that_refuses_ssh_is_one_line_and_nothing_starts(tmp_path):
    with SshHosts(2, tmp_path / "ssh", without_sshd=(1,)) as lab:
        code, errors, _, _ = preflight(lab, tmp_path)
        only_sshd_left(lab)
    host1 = lab.hosts[1].addr
    assert code == 2
    assert errors == [
        f"{ERROR}ssh.hosts={host1}: cannot log in (ssh: connect to host {host1} port 22: Connection refused) "
        "(is sshd running there, on port 22? ssh.port=N names another)"
    ]
    assert_nothing_written(tmp_path)


def test_a_key_the_hosts_do_not_take_is_one_line_per_host(tmp_path):
    with SshHosts(2, tmp_path / "ssh") as lab:
        other = tmp_path / "other_key"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True, timeout=30)
        code, errors, _, _ = preflight(lab, tmp_path, f"ssh.identity={other}", "ssh.user=root")
    assert code == 2 and len(errors) == 2, errors
    for host, line in zip(lab.hosts, errors):
        assert line.startswith(f"{ERROR}ssh.hosts={host.addr}: cannot log in ("), line
        assert "Permission denied" in line and f"ssh-copy-id root@{host.addr}" in line, line
    assert_nothing_written(tmp_path)


def test_a_wrong_remote_command_is_one_line_per_host(tmp_path):
    with SshHosts(2, tmp_path / "ssh") as lab:
        code, errors, _, _ = preflight(lab, tmp_path, "ssh.python=/opt/nowhere/bin/python")
        only_sshd_left(lab)
    assert code == 2 and len(errors) == 2, errors
    for host, line in zip(lab.hosts, errors):
        assert line.startswith(
            f"{ERROR}ssh.hosts={host.addr}: '/opt/nowhere/bin/python -m launcher' is not found there ("
        ), line
        assert line.endswith(
            "(install train_multigpu there, or point ssh.python at its interpreter "
            "(or ssh.command at a line that runs it))"
        ), line
    assert_nothing_written(tmp_path)


def test_another_version_on_one_host_is_named(tmp_path):
    # host 1 runs another train_multigpu version: ssh.command is a wrapper that runs the launcher
    # with another __version__ on the host whose address is host 1's (the namespaces share the
    # filesystem, not their addresses)
    from launcher import __version__
    from launcher.names import version_line

    other = "import sys, launcher; launcher.__version__ = '0.0.1'; from launcher.__main__ import entry; entry()"
    with SshHosts(2, tmp_path / "ssh") as lab:
        wrapper = tmp_path / "train_multigpu_wrapper"
        wrapper.write_text(
            "#!/bin/sh\n"
            f"if grep -q ' {lab.hosts[1].addr}$' /proc/net/fib_trie; then\n"
            f'  exec {sys.executable} -c "{other}" "$@"\n'
            "fi\n"
            f'exec {sys.executable} -m launcher "$@"\n'
        )
        wrapper.chmod(0o755)
        code, errors, _, _ = preflight(lab, tmp_path, f"ssh.command={wrapper}")
        only_sshd_left(lab)
    assert code == 2
    theirs = version_line().replace(__version__, "0.0.1", 1)
    assert errors == [
        f"{ERROR}ssh.hosts={lab.hosts[1].addr}: runs {theirs}, this machine "
        f"train_multigpu {__version__} (install the same version on every host)"
    ]
    assert_nothing_written(tmp_path)


def test_a_script_missing_there_is_named_by_each_node(tmp_path):
    with SshHosts(2, tmp_path / "ssh") as lab:
        code, errors, _, _ = preflight(lab, tmp_path, "script=/opt/nowhere/train.py")
        only_sshd_left(lab)
    assert code == 2 and len(errors) == 2, errors
    for rank, (host, line) in enumerate(zip(lab.hosts, errors)):
        assert line.startswith(
            f"{ERROR}ssh.hosts={host.addr}: node {rank}'s launcher there would refuse to start: "
            "script=/opt/nowhere/train.py: the training script does not exist"
        ), line
    assert_nothing_written(tmp_path)


def test_a_missing_working_directory_is_named(tmp_path):
    with SshHosts(2, tmp_path / "ssh") as lab:
        code, errors, _, _ = preflight(lab, tmp_path, "ssh.workdir=/opt/nowhere")
    assert code == 2 and len(errors) == 2, errors
    assert errors[0] == (
        f"{ERROR}ssh.hosts={lab.hosts[0].addr}: no directory /opt/nowhere there, where the launcher runs "
        "(create it, or name another with ssh.workdir=DIR (the same on every host))"
    )
    assert_nothing_written(tmp_path)


def test_a_host_gone_silent_is_bounded_by_the_connect_timeout(tmp_path):
    with SshHosts(2, tmp_path / "ssh") as lab:
        lab.hosts[1].unplug()  # no reset, only silence: ssh waits for ConnectTimeout
        code, errors, _, took = preflight(lab, tmp_path, "ssh.connect_timeout=2")
    assert code == 2 and len(errors) == 1, errors
    assert errors[0].startswith(f"{ERROR}ssh.hosts={lab.hosts[1].addr}: cannot log in ("), errors
    assert "timed out" in errors[0] and "ssh.connect_timeout=2 s" in errors[0], errors
    # host 0 was asked meanwhile (in parallel): the whole preflight is about the slower of the two
    assert took < 60, took
    assert_nothing_written(tmp_path)
