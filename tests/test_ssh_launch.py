"""``submit=ssh`` for real (issue 21): two "hosts" (network namespaces, each with a real Debian sshd:
tests/sshd.py), this machine's launcher started inside host 0's namespace (a workstation that is
also node 0) and every node's launcher started over ssh. What runs: one console, one exit code, one
Ctrl+C, the leash, the secret on the channel, the record.

Until the generic session routes ``submit=ssh`` (branch ``session``), the launch is driven through
tests/ssh_driver.py: the CLI's parsing and the session's dryrun -> submit -> wait, on SshBackend.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sshd import SshHosts
from supervise_util import env

REPO = Path(__file__).resolve().parents[1]
DRIVER = REPO / "tests" / "ssh_driver.py"
ALLREDUCE = REPO / "examples" / "allreduce.py"
PROBE = REPO / "tests" / "workers" / "secret_probe.py"
SPAWNER = REPO / "tests" / "workers" / "spawner.py"
SECRET = "tmg-ssh-s3cr3t-value-0xC0FFEE"


@pytest.fixture
def lab(tmp_path):
    with SshHosts(2, tmp_path / "ssh", hostnames=True) as hosts:
        yield hosts


def lab_overrides(lab) -> list[str]:
    """The lab's hosts, key and options (each option quoted: Hydra's grammar reads ``=`` in a list item)."""
    options = ",".join(f"'{option}'" for option in lab.options)
    return [f"ssh.hosts=[{','.join(lab.addresses)}]", f"ssh.identity={lab.identity}", f"ssh.options=[{options}]"]


def launch(lab, tmp: Path, *overrides: str, script_args: tuple = ()) -> subprocess.Popen:
    """``train_multigpu submit=ssh <lab's hosts> device=cpu run_root=<tmp>/runs ...`` in host 0's namespace."""
    argv = [sys.executable, str(DRIVER), "submit=ssh", *lab_overrides(lab), "device=cpu", f"run_root={tmp / 'runs'}"]
    argv += [*overrides, "--", *script_args] if script_args else list(overrides)
    return lab.hosts[0].run(argv, env=env(), cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finish(proc: subprocess.Popen, timeout: float = 240) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"the launch did not end in {timeout} s:\n{out.decode()}\n{err.decode()}") from None
    return proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")


def record(tmp: Path) -> Path:
    return tmp / "runs" / "ssh_launch"


def test_two_hosts_torch_c10d_meet(lab, tmp_path):
    proc = launch(lab, tmp_path, "launcher.nproc_per_node=2", f"script={ALLREDUCE}", "log_all_ranks=true")
    code, out, err = finish(proc)
    assert code == 0, (out, err)
    sums = re.findall(r"^\[(\d):(\d)\] rank (\d)/4 .*all_reduce sum=(\d+) expected=15$", out, re.M)
    assert sorted(int(rank) for _, _, rank, _ in sums) == [0, 1, 2, 3], out
    assert {total for *_, total in sums} == {"15"}
    assert {node for node, *_ in sums} == {"0", "1"}  # both hosts' ranks, each line named by its node
    status = json.loads((record(tmp_path) / "status.json").read_text())
    assert status["exit_code"] == 0 and status["outcome"] == "succeeded"
    nodes = json.loads((record(tmp_path) / "nodes.json").read_text())["nodes"]
    assert [(n["node"], n["host"], n["exit_code"]) for n in nodes] == [
        (0, lab.addresses[0], 0),
        (1, lab.addresses[1], 0),
    ]
    assert all(n["run_dir"] for n in nodes)
    submit = json.loads((record(tmp_path) / "submit.json").read_text())
    assert submit["backend"] == "ssh"
