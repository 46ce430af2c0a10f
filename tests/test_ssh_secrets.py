"""``submit=ssh``'s secrets against real OpenSSH hosts (tests/sshd.py): a secret reaches each host's
ranks and nothing else -- no command line of the whole launch on any host (every ``execve`` traced:
the preflight's clients, remote shells and dry runs included), no console, no file -- whatever the
user's ssh configuration says (a terminal would echo the channel), and a secret given by reference
(``${oc.env:NAME}``) is resolved where the command is typed, as on every back end.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest

from sshd import SshHosts, execve_argvs, strace
from supervise_util import env, finish

REPO = Path(__file__).resolve().parents[1]
PROBE = REPO / "tests" / "workers" / "secret_probe.py"
TYPED = "tmg-typed-s3cr3t-0xC0FFEE"
EXPORTED = "tmg-exported-s3cr3t-0xFEED"


def sha(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def probe_launch(lab: SshHosts, tmp: Path, *overrides: str, names: tuple[str, ...], wrap=None) -> tuple:
    """One rank per host probing ``names`` (no sleep: the launch ends by itself); (exit code, stdout,
    stderr, the probes' digests by file name). ``wrap(argv)``: how the launcher is started in host 0."""
    out = tmp / "out"
    out.mkdir()
    given = {o.split("=", 1)[0] for o in overrides}  # an override given here replaces the lab's
    lab_overrides = [o for o in lab.overrides if o.split("=", 1)[0] not in given]
    argv = [sys.executable, "-m", "launcher", "submit=ssh", *lab_overrides, "device=cpu", f"run_root={tmp / 'runs'}"]
    argv += ["launcher=skrl_jax", "launcher.nproc_per_node=1", f"script={PROBE}", *overrides, "--", "--out", str(out)]
    for name in names:
        argv += ["--name", name]
    run_env = {**env(), "API_TOKEN": EXPORTED}  # exported where the command is typed, on no host
    proc = lab.hosts[0].run(
        wrap(argv) if wrap else argv, env=run_env, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    code, stdout, stderr = finish(proc, timeout=300)
    return code, stdout, stderr, {p.name: p.read_text() for p in out.glob("*.sha")}


def nowhere(tmp: Path, stdout: str, stderr: str, *secrets: str) -> None:
    """No secret on the console, nor in any file under ``tmp`` (run records, every host's node
    records: the hosts share this disk), but the execve traces (checked on their own)."""
    for secret in secrets:
        assert secret not in stdout + stderr, (stdout, stderr)
        written = [
            p for p in tmp.rglob("*") if p.is_file() and ".execve." not in p.name and secret.encode() in p.read_bytes()
        ]
        assert written == [], written


@pytest.mark.parametrize("exported", [True, False], ids=["typed_and_exported", "typed_only_early_start"])
def test_no_secret_in_any_execve_of_the_whole_launch_on_any_host(tmp_path, exported):
    """Every process of the launch -- here: the launcher, its ssh clients; on each host: sshd's
    sessions, the remote shells, the node launchers (which answer the preflight too), their ranks
    -- is traced from its execve on (strace -f under the launcher here and under every sshd): no
    argv holds a secret, typed or exported. A typed one only: the ssh clients start before the
    composition (launcher/ssh/early.py), the same holds."""
    trace = tmp_path / "launcher.execve"
    exported_args = ["+worker_env.API_TOKEN=${oc.env:API_TOKEN}"] if exported else []
    with SshHosts(2, tmp_path / "ssh", hostnames=True, trace=True) as lab:
        code, stdout, stderr, shas = probe_launch(
            lab,
            tmp_path,
            f"+worker_env.HF_TOKEN={TYPED}",
            *exported_args,
            names=("HF_TOKEN", "API_TOKEN") if exported else ("HF_TOKEN",),
            wrap=lambda argv: strace(trace, argv),
        )
        assert code == 0, (stdout, stderr)
        digests = f"{sha(TYPED)} {sha(EXPORTED)}" if exported else sha(TYPED)
        assert shas == {f"node{i}-rank{i}.sha": digests for i in (0, 1)}
        traces = [trace, *lab.traced()]
        execs = {path.name: execve_argvs(path) for path in traces}
        # the trace saw the whole launch: both ssh clients, both node launchers, both ranks
        ran = [line for line in execs["launcher.execve"] if line.endswith("= 0")]  # (not PATH's misses)
        assert sum(line.startswith('execve("/usr/bin/ssh"') for line in ran) == 2, ran
        for index in (0, 1):
            remote = execs[f"sshd{index}.execve"]
            assert any('"-m", "launcher"]' in line for line in remote), remote  # its arguments: the channel's
            assert any(str(PROBE) in line for line in remote), remote
        # the user's own command line holds it as typed: that one execve alone
        (typed,) = [line for line in execs["launcher.execve"] if TYPED in line and '"submit=ssh"' in line]
        assert f'"+worker_env.HF_TOKEN={TYPED}"' in typed
        execs["launcher.execve"].remove(typed)
        for name, lines in execs.items():
            for secret in (TYPED, EXPORTED):
                assert not [line for line in lines if secret in line], (name, secret)
    nowhere(tmp_path, stdout, stderr, TYPED, EXPORTED)


def user_ssh_config(text: str, folder: Path):
    """A wrapper: the command run with ``text`` as the user's ``~/.ssh/config``. ssh reads it from the
    home directory of the user's passwd entry (not $HOME): in a mount namespace of the command's own,
    a copy of /etc/passwd names ``folder/home`` as this user's home. Nothing of this machine's
    configuration is touched."""
    home = folder / "home"
    (home / ".ssh").mkdir(parents=True, mode=0o700)
    (home / ".ssh" / "config").write_text(text)
    me = pwd.getpwuid(os.getuid())
    lines = []
    for line in Path("/etc/passwd").read_text().splitlines():
        fields = line.split(":")
        if len(fields) == 7 and fields[0] == me.pw_name:
            fields[5] = str(home)
        lines.append(":".join(fields))
    passwd = folder / "passwd"
    passwd.write_text("\n".join(lines) + "\n")
    script = 'mount --bind "$1" /etc/passwd && shift && exec "$@"'

    def wrap(argv: list[str]) -> list[str]:
        return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", str(passwd), *argv]

    return wrap


def test_request_tty_in_the_users_ssh_config_echoes_no_secret(tmp_path):
    """``RequestTTY force`` for every host in ~/.ssh/config: a remote terminal would echo the channel's
    first line -- the secrets -- on the console. The launch's -T wins; the secret reaches the ranks
    and nothing else."""
    with SshHosts(2, tmp_path / "ssh", hostnames=True) as lab:
        # and a LocalCommand that would print the channel's first line (ssh's stdin) on the console
        config = "Host *\n    RequestTTY force\n    PermitLocalCommand yes\n    LocalCommand head -n 1 >&2\n"
        wrap = user_ssh_config(config, tmp_path)
        code, stdout, stderr, shas = probe_launch(
            lab, tmp_path, f"+worker_env.HF_TOKEN={TYPED}", names=("HF_TOKEN",), wrap=wrap
        )
        assert code == 0, (stdout, stderr)
        assert sorted(shas.values()) == [sha(TYPED)] * 2
    nowhere(tmp_path, stdout, stderr, TYPED)


def test_send_env_and_a_debug_log_level_in_the_users_ssh_config_print_no_secret(tmp_path):
    """A secret given by reference (``${oc.env:API_TOKEN}``) is in the environment where the command
    is typed. Before: every ssh client (the preflight's and the launch's) inherited it, so ``SendEnv
    API_TOKEN`` in ~/.ssh/config sent it to each host's sshd, and ``LogLevel DEBUG1`` printed it on
    the console (``Sending env API_TOKEN = ...``). The clients' environment now holds no secret's
    value: it travels on the channel alone."""
    with SshHosts(2, tmp_path / "ssh", hostnames=True) as lab:
        wrap = user_ssh_config("Host *\n    LogLevel DEBUG1\n    SendEnv API_TOKEN\n", tmp_path)
        options = f"ssh.options=[{','.join(repr(o) for o in lab.options if not o.startswith('LogLevel'))}]"
        code, stdout, stderr, shas = probe_launch(
            lab, tmp_path, options, "+worker_env.API_TOKEN=${oc.env:API_TOKEN}", names=("API_TOKEN",), wrap=wrap
        )
        assert code == 0, (stdout, stderr)
        assert sorted(shas.values()) == [sha(EXPORTED)] * 2
        assert "debug1: Sending command" in stderr  # the user's log level held: ssh said what it sent
    nowhere(tmp_path, stdout, stderr, EXPORTED)


def test_request_tty_in_ssh_options_is_refused_before_anything_connects(tmp_path):
    with SshHosts(2, tmp_path / "ssh", hostnames=True) as lab:
        code, stdout, stderr, shas = probe_launch(
            lab,
            tmp_path,
            f"ssh.options=[{','.join(repr(o) for o in [*lab.options, 'RequestTTY=force'])}]",
            f"+worker_env.HF_TOKEN={TYPED}",
            names=("HF_TOKEN",),
        )
        assert (code, stdout, shas) == (2, "", {})
        assert stderr == (
            "train_multigpu: error: ssh.options=RequestTTY=force: the launch runs without a terminal (ssh -T): "
            "a terminal would echo the secrets (docs/ssh.md)\n"
        )
        for index in (0, 1):
            assert "Accepted publickey" not in lab.log(index)
    nowhere(tmp_path, stdout, stderr, TYPED)
