"""The sshd hosts the ``submit=ssh`` tests stand on (tests/sshd.py): real OpenSSH, one sshd per
network namespace, keys made by the test, the project's environment at the same path on every host."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

from sshd import SshHosts

REPO = Path(__file__).resolve().parents[1]


def test_a_client_in_host0_logs_into_host1_and_finds_the_project_there(ssh_hosts):
    host0, host1 = ssh_hosts.hosts
    # what answers is host 1's network stack (its addresses: host 1's, not host 0's), and this
    # interpreter, at the same path there, imports the project from this worktree
    script = "import launcher; print(launcher.__file__); print(open('/proc/net/fib_trie').read())"
    out = host0.check_output(ssh_hosts.ssh_argv(1, shlex.join([sys.executable, "-c", script])))
    assert str(REPO / "launcher") in out
    assert host1.addr in out and host0.addr not in out, out
    assert "Accepted publickey for root" in ssh_hosts.log(1)


def test_the_host_key_is_checked(ssh_hosts, tmp_path):
    # a known_hosts that names host 1 with another key: ssh refuses to connect (real host key checking)
    host0 = ssh_hosts.hosts[0]
    other = (tmp_path / "other_ed25519").as_posix()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", other], check=True, timeout=30)
    wrong = tmp_path / "wrong_known_hosts"
    wrong.write_text(f"{ssh_hosts.hosts[1].addr} {' '.join(Path(other + '.pub').read_text().split()[:2])}\n")
    argv = ssh_hosts.ssh_argv(1, "true")
    argv[argv.index(f"UserKnownHostsFile={ssh_hosts.known_hosts}")] = f"UserKnownHostsFile={wrong}"
    proc = host0.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 255, err
    assert "HOST IDENTIFICATION HAS CHANGED" in err or "Host key verification failed" in err, err


def test_a_host_without_sshd_refuses_the_connection(tmp_path):
    with SshHosts(2, tmp_path / "ssh", without_sshd=(1,)) as lab:
        proc = lab.hosts[0].run(lab.ssh_argv(1, "true"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 255
    assert "Connection refused" in err, err


def test_a_separate_client_reaches_every_host(tmp_path):
    with SshHosts(2, tmp_path / "ssh", client=True) as lab:
        assert lab.client is not None
        for index in range(2):
            out = lab.client.check_output(lab.ssh_argv(index, "echo", "hello"))
            assert out.strip() == "hello"
