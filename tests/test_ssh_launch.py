"""``submit=ssh`` for real (issue 21): two "hosts" (network namespaces, each with a real Debian sshd:
tests/sshd.py), this machine's launcher started inside host 0's namespace (a workstation that is
also node 0) and every node's launcher started over ssh. What runs: one console, one exit code, one
Ctrl+C, the leash, the secret on the channel, the record.

"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import supervise_util
from sshd import SshHosts
from supervise_util import env, wait_for

REPO = Path(__file__).resolve().parents[1]
ALLREDUCE = REPO / "examples" / "allreduce.py"
PROBE = REPO / "tests" / "workers" / "secret_probe.py"
SPAWNER = REPO / "tests" / "workers" / "spawner.py"
SECRET = "tmg-ssh-s3cr3t-value-0xC0FFEE"


@pytest.fixture
def lab(tmp_path):
    with SshHosts(2, tmp_path / "ssh", hostnames=True) as hosts:
        yield hosts


def launch(lab, tmp: Path, *overrides: str, script_args: tuple = (), ssh_options: tuple = ()) -> subprocess.Popen:
    """``train_multigpu submit=ssh <lab's hosts> device=cpu run_root=<tmp>/runs ...`` in host 0's namespace;
    ``ssh_options``: more ``ssh -o`` options after the lab's."""
    hosts = lab.overrides_with(*ssh_options)
    argv = [sys.executable, "-m", "launcher", "submit=ssh", *hosts, "device=cpu", f"run_root={tmp / 'runs'}"]
    argv += [*overrides, "--", *script_args] if script_args else list(overrides)
    return lab.hosts[0].run(argv, env=env(), cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finish(proc: subprocess.Popen, timeout: float = 240) -> tuple[int, str, str]:
    return supervise_util.finish(proc, timeout)


def record(tmp: Path) -> Path:
    """The launch's run directory here (the only one under the run root)."""
    found = [p for p in (tmp / "runs").iterdir() if p.is_dir()]
    assert len(found) == 1, found
    return found[0]


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
    assert [n["run_dir"] for n in nodes] == [str(record(tmp_path) / "node0"), str(record(tmp_path) / "node1")]
    submit = json.loads((record(tmp_path) / "submit.json").read_text())
    assert submit["backend"] == "ssh"
    # runs: the launch listed once, with its nodes; a rank's log from the node that ran it
    runs = [sys.executable, "-m", "launcher", "runs"]
    root = ["--root", str(tmp_path / "runs")]
    listed = subprocess.run([*runs, *root, "--json", "list"], capture_output=True, text=True, env=env())
    assert listed.returncode == 0, listed.stderr
    (only,) = json.loads(listed.stdout)
    assert only["status"] == "success" and len(only["record_dirs"]) == 2, only
    rank3 = next(node for node, _, rank, _ in sums if rank == "3")
    logs = [*runs, *root, "logs", only["id"], "--rank", "3"]
    shown = subprocess.run(logs, capture_output=True, text=True, env=env())
    assert shown.returncode == 0, shown.stderr
    assert "rank 3/4" in shown.stdout, (shown.stdout, rank3)
    every = subprocess.run(
        [*runs, *root, "logs", only["id"], "--rank", "all"], capture_output=True, text=True, env=env()
    )
    assert every.returncode == 0, every.stderr
    assert sorted(re.findall(r"^\[rank (\d)\] rank \1/4 ", every.stdout, re.M)) == ["0", "1", "2", "3"], every.stdout
    missing = subprocess.run(
        [*runs, *root, "logs", only["id"], "--rank", "9"], capture_output=True, text=True, env=env()
    )
    hosts = ", ".join(f"node {i} ({address})" for i, address in enumerate(lab.addresses))
    assert missing.returncode == 2
    assert missing.stderr == (
        f"train_multigpu: error: --rank=9: no node of this launch has a log for rank 9 (nodes: {hosts})\n"
    )


def test_runs_logs_asks_a_node_over_ssh_for_a_log_on_that_nodes_own_disk(tmp_path):
    """Each host writes its node directory on a disk of its own (tests/sshd.py ``own_disk``): the
    record here names them, ``runs logs`` (on the workstation, host 0) reads them over each node's
    ssh command, one rank or every rank."""
    disk = tmp_path / "disk"
    disk.mkdir()
    with SshHosts(2, tmp_path / "ssh", hostnames=True, own_disk=disk) as lab:
        argv = [sys.executable, "-m", "launcher", "submit=ssh", *lab.overrides, "device=cpu", f"run_root={disk}"]
        argv += ["launcher.nproc_per_node=1", f"script={ALLREDUCE}"]
        code, out, err = finish(
            lab.hosts[0].run(argv, env=env(), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        )
        assert code == 0, (out, err)
        (here,) = [p for p in disk.iterdir() if p.is_dir()]
        nodes = json.loads((here / "nodes.json").read_text())["nodes"]
        assert [n["run_dir"] for n in nodes] == [str(here / "node0"), str(here / "node1")]
        assert not (here / "node0").exists() and not (here / "node1").exists()  # on the hosts' own disks only

        def runs_logs(rank: str) -> subprocess.CompletedProcess:
            command = [sys.executable, "-m", "launcher", "runs", "--root", str(disk), "logs", here.name, "--rank", rank]
            proc = lab.hosts[0].run(command, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            out, err = proc.communicate(timeout=120)
            return subprocess.CompletedProcess(command, proc.returncode, out, err)

        for rank in ("0", "1"):
            shown = runs_logs(rank)
            assert shown.returncode == 0, shown.stderr
            assert re.search(rf"^rank {rank}/2 .*all_reduce sum=3 expected=3$", shown.stdout, re.M), shown.stdout
        every = runs_logs("all")
        assert every.returncode == 0, every.stderr
        assert sorted(re.findall(r"^\[rank (\d)\] rank \1/2 ", every.stdout, re.M)) == ["0", "1"], every.stdout


def ns_pids(host) -> set[int]:
    out = subprocess.run(["ip", "netns", "pids", host.ns], capture_output=True, text=True, timeout=30).stdout
    return {int(tok) for tok in out.split()}


def left_in(lab) -> dict[int, list[str]]:
    """What still runs in each host's namespace besides its sshd (and the sshd sessions' own)."""
    sshd = {p.pid for p in lab.sshd.values()}
    left = {}
    for host in lab.hosts:
        names = []
        for pid in ns_pids(host) - sshd:
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if not cmd.startswith("sshd"):
                names.append(f"{pid}: {cmd[:120]}")
        if names:
            left[host.index] = names
    return left


def sleeping(
    lab, tmp: Path, *overrides: str, script_args: tuple = (), ssh_options: tuple = ()
) -> tuple[subprocess.Popen, Path]:
    """Two JAX-topology ranks per host running the spawner (no JAX imported: a quick start), asleep."""
    pid_dir = tmp / "pids"
    pid_dir.mkdir()
    proc = launch(
        lab,
        tmp,
        "launcher=skrl_jax",
        "launcher.nproc_per_node=2",
        f"script={SPAWNER}",
        *overrides,
        script_args=("--pid_dir", str(pid_dir), *script_args),
        ssh_options=ssh_options,
    )
    return proc, pid_dir


def test_a_rank_exiting_7_on_node_1_gives_exit_7_here(lab, tmp_path):
    proc, _ = sleeping(lab, tmp_path, "launcher.grace_period=5", script_args=("--mode", "sleep", "--fail", "3:7"))
    code, out, err = finish(proc)
    assert code == 7, (out, err)
    assert f"node 1 ({lab.addresses[1]}) failed: exit code 7 (rank failed)" in err
    status = json.loads((record(tmp_path) / "status.json").read_text())
    assert status["exit_code"] == 7 and status["failure"]["node"] == 1
    assert left_in(lab) == {}


def test_ctrl_c_leaves_nothing_running_on_either_host(lab, tmp_path):
    from supervise_util import survivors, wait_for_files

    proc, pid_dir = sleeping(lab, tmp_path, script_args=("--mode", "sleep"))
    wait_for_files(pid_dir, 12, timeout=120)  # four ranks, two helpers each
    proc.send_signal(signal.SIGINT)
    code, out, err = finish(proc)
    assert code == 130, (out, err)
    assert survivors(pid_dir) == []
    assert wait_for(lambda: left_in(lab) == {} or None, 10, f"nothing left: {left_in(lab)}") is not None
    status = json.loads((record(tmp_path) / "status.json").read_text())
    assert status["reason"] == "stopped by SIGINT"
    nodes = json.loads((record(tmp_path) / "nodes.json").read_text())["nodes"]
    assert [n["reason"] for n in nodes] == ["stopped by SIGINT", "stopped by SIGINT"]


def test_a_secret_reaches_both_hosts_workers_and_no_command_line_or_file(lab, tmp_path):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    proc = launch(
        lab,
        tmp_path,
        "launcher=skrl_jax",
        "launcher.nproc_per_node=1",
        f"script={PROBE}",
        f"+worker_env.HF_TOKEN={SECRET}",
        script_args=("--name", "HF_TOKEN", "--out", str(out_dir), "--sleep"),
    )
    shas = wait_for(lambda: len(found := sorted(out_dir.glob("*.sha"))) == 2 and found, 120, "both ranks' probes")
    assert {p.name for p in shas} == {"node0-rank0.sha", "node1-rank1.sha"}  # one rank on each host
    assert {p.read_text() for p in shas} == {hashlib.sha256(SECRET.encode()).hexdigest()}
    # every host's processes (one pid namespace), but the command typed here (the user's own line)
    for pid in set(filter(str.isdigit, os.listdir("/proc"))) - {str(proc.pid)}:
        try:
            assert SECRET.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes(), pid
        except OSError:
            continue
    proc.send_signal(signal.SIGINT)
    code, out, err = finish(proc)
    assert code == 130, (out, err)
    assert SECRET not in out + err
    written = [p for p in tmp_path.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
    assert written == []


def test_node_1_link_down_ends_its_ranks_by_themselves(lab, tmp_path):
    from supervise_util import survivors, wait_for_files

    # this machine's client to node 1 gives up on the silent connection after 3 x 2 s instead of ssh's
    # 3 x 5 s (docs/ssh.md): the launch here ends sooner; node 1's launcher must still notice by itself
    proc, pid_dir = sleeping(
        lab,
        tmp_path,
        "launcher.node_timeout=5",
        "launcher.grace_period=5",
        script_args=("--mode", "sleep"),
        ssh_options=("ServerAliveInterval=2",),
    )
    wait_for_files(pid_dir, 12, timeout=120)
    node1 = [int(p.read_text()) for p in (pid_dir / "rank2.pid", pid_dir / "rank3.pid")]
    lab.hosts[1].unplug()  # silence: no FIN, no RST reaches anyone
    # node 1's launcher notices by itself (its liveness beat and its channel go silent) and stops its ranks
    wait_for(lambda: not any(Path(f"/proc/{pid}").exists() for pid in node1) or None, 60, "node 1's ranks ended")
    code, out, err = finish(proc, timeout=180)
    assert code == 125, (out, err)
    assert survivors(pid_dir) == []


def test_two_hosts_jax_meet(lab, tmp_path):
    proc = launch(
        lab,
        tmp_path,
        "launcher=skrl_jax",
        "launcher.nproc_per_node=2",
        f"script={ALLREDUCE}",
        "log_all_ranks=true",
        "+worker_env.JAX_PLATFORMS=cpu",
        script_args=("--ml_framework", "jax"),
    )
    code, out, err = finish(proc, timeout=400)
    assert code == 0, (out, err)
    sums = re.findall(r"^\[(\d):(\d)\] rank (\d)/4 local_rank \d psum=(\d+) expected=15$", out, re.M)
    assert sorted((node, rank) for node, _, rank, _ in sums) == [("0", "0"), ("0", "1"), ("1", "2"), ("1", "3")], out
    assert {total for *_, total in sums} == {"15"}


def test_the_bundled_trainer_trains_across_two_hosts(lab, tmp_path):
    # one iteration: the two ranks meet, train (the update's all-reduce crosses the hosts) and checkpoint
    proc = launch(lab, tmp_path, "launcher.nproc_per_node=1", "max_iterations=1", "num_envs=4", "seed=7")
    code, out, err = finish(proc, timeout=400)
    assert code == 0, (out, err)
    trained = record(tmp_path)  # run_dir: every node trains there (rank 0 writes), as a SLURM job's nodes
    info = json.loads((trained / "run_info.json").read_text())
    assert info["world_size"] == 2 and info["dist_backend"] == "gloo"
    assert list((trained / "checkpoints").glob("iter_000001.ckpt"))


def node_statuses(tmp: Path) -> list[dict]:
    """Each node's own record (node<i>/status.json: the hosts share this disk)."""
    here = record(tmp)
    return [json.loads((here / f"node{i}" / "status.json").read_text()) for i in (0, 1)]


def test_sigkill_of_the_launching_side_leaves_nothing_on_any_host(lab, tmp_path):
    """The machine that typed the command dies (its launcher and its ssh clients SIGKILLed): every
    remote launcher sees its channel close and stops its launch -- no launcher, torchrun or rank is
    left on any host, and each node's record is closed."""
    from netns import kill_group
    from supervise_util import survivors, wait_for_files

    proc, pid_dir = sleeping(lab, tmp_path, "launcher.grace_period=5", script_args=("--mode", "sleep"))
    wait_for_files(pid_dir, 12, timeout=120)  # four ranks, two helpers each
    clients = [p for p in ns_pids(lab.hosts[0]) if _cmdline(p).startswith(b"ssh\0")]
    assert len(clients) == 2, clients
    kill_group(proc)
    for pid in clients:  # the ssh clients are in sessions of their own: as the machine dies, they do
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.wait(timeout=30)
    wait_for(lambda: left_in(lab) == {} or None, 40, "nothing left on any host")
    assert survivors(pid_dir) == []
    for status in node_statuses(tmp_path):
        assert status["exit_code"] == 130 and status["reason"] == "stopped by SIGINT", status


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def remote(lab, text: bytes) -> dict[int, list[int]]:
    """The processes of each host (by its namespace) whose command line holds ``text``."""
    return {h.index: [p for p in ns_pids(h) if text in _cmdline(p)] for h in lab.hosts}


def test_sigkill_while_the_remote_launchers_start_leaves_nothing(lab, tmp_path):
    """The launching side dies while each host's launcher is still starting (here: its shell line
    waits 3 s before the launcher, as a slow import would): each launcher finds its channel closed
    as it starts, and nothing is left -- no launcher, no torchrun, no rank."""
    from netns import kill_group
    from supervise_util import survivors

    slow = f"ssh.command='sleep 3.5 && exec {sys.executable} -m launcher'"
    proc, pid_dir = sleeping(lab, tmp_path, slow, script_args=("--mode", "sleep"))
    launching = b"TRAIN_MULTIGPU_SSH_CHANNEL="  # the launch's clients (one per host: the preflight's too)
    wait_for(lambda: len(remote(lab, launching)[0]) == 2 or None, 120, "the launch's ssh clients")
    clients = remote(lab, launching)[0]
    wait_for(lambda: all(remote(lab, b"sleep\x003.5").values()) or None, 30, "both hosts starting")
    kill_group(proc)
    for pid in clients:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.wait(timeout=30)
    wait_for(lambda: left_in(lab) == {} or None, 40, "nothing left on any host")
    time.sleep(3)  # nothing comes back either
    assert left_in(lab) == {}
    assert survivors(pid_dir) == []


def test_ctrl_c_during_a_slow_preflight_stops_it_on_every_host(lab, tmp_path):
    """A Ctrl+C while the hosts answer the preflight (here: each host's launcher takes a minute to
    start): the launch ends at once, exit 130, and nothing of the preflight runs on any host after."""
    slow = f"ssh.command='sleep 60 && exec {sys.executable} -m launcher'"
    proc, _ = sleeping(lab, tmp_path, slow, script_args=("--mode", "sleep"))
    wait_for(lambda: all(remote(lab, b"sleep\x0060").values()) or None, 120, "both hosts' preflight")
    proc.send_signal(signal.SIGINT)
    code, out, err = finish(proc, timeout=20)
    assert code == 130, (out, err)
    assert "Traceback" not in err, err
    wait_for(lambda: left_in(lab) == {} or None, 10, f"nothing left: {left_in(lab)}")
    assert not (tmp_path / "runs").exists()  # nothing started: no record either


def test_one_connection_and_one_launcher_start_per_host(tmp_path):
    """The preflight is the launch's own start: each host takes one ssh login and starts the
    launcher once (every execve under its sshd traced), which checks node i's launch there, says
    ready, and runs the node once every host is ready. The command line names the hosts: that one
    connection is the one opened before this machine composed (launcher/ssh/early.py), and the
    launcher there is started with no arguments -- its arguments came on the channel."""
    from sshd import execve_argvs
    from supervise_util import wait_for_files

    with SshHosts(2, tmp_path / "ssh", hostnames=True, trace=True) as lab:
        proc, pid_dir = sleeping(lab, tmp_path, script_args=("--mode", "sleep"))
        wait_for_files(pid_dir, 12, timeout=180)  # four ranks, two helpers each
        proc.send_signal(signal.SIGINT)
        code, out, err = finish(proc)
        assert code == 130, (out, err)
        for index, trace in enumerate(lab.traced()):
            assert lab.log(index).count("Accepted publickey for root") == 1, lab.log(index)
            started = [line for line in execve_argvs(trace) if '"-m", "launcher"' in line and line.endswith("= 0")]
            assert len(started) == 1, started
            assert '"-m", "launcher"]' in started[0], started  # nothing after it: the arguments are the channel's


# -- the clients started before this machine composes (launcher/ssh/early.py) ----------------------------
def ssh_clients(lab) -> list[int]:
    """This machine's ssh clients (host 0's namespace is this machine's)."""
    return [p for p in ns_pids(lab.hosts[0]) if _cmdline(p).startswith(b"ssh\0")]


def test_a_bad_override_stops_the_hosts_started_before_composing(lab, tmp_path):
    """The command line names the hosts: their ssh clients start before Hydra composes. The
    composition then fails (a value of the wrong type): one clear line, exit 2, and every host's
    launcher -- still waiting for its arguments, or still importing -- ends with nothing started
    there or written anywhere."""
    from sshd import execve_argvs, strace

    trace = tmp_path / "trace" / "here"
    trace.parent.mkdir()
    argv = [
        sys.executable,
        "-m",
        "launcher",
        "submit=ssh",
        *lab.overrides,
        "device=cpu",
        f"run_root={tmp_path / 'runs'}",
    ]
    argv += ["launcher=skrl_jax", f"script={SPAWNER}", "launcher.grace_period=soon"]
    proc = lab.hosts[0].run(
        strace(trace, argv), env=env(), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    code, out, err = finish(proc, timeout=120)
    assert (code, err) == (2, "train_multigpu: error: launcher.grace_period=soon: a number\n"), (out, err)
    clients = [line for line in execve_argvs(trace) if 'execve("/usr/bin/ssh", ["ssh", ' in line]
    assert len(clients) == 2, clients  # both hosts were asked before the composition failed
    for index in (0, 1):  # and each took the login: its launcher started there and was ended
        wait_for(lambda i=index: "Accepted publickey for root" in lab.log(i) or None, 30, f"host {index}'s login")
    assert wait_for(lambda: left_in(lab) == {} or None, 15, f"nothing left: {left_in(lab)}") is not None
    assert not (tmp_path / "runs").exists()


def test_ctrl_c_while_this_machine_composes_stops_the_hosts_started_early(lab, tmp_path):
    """A Ctrl+C once the early ssh clients run (this machine still composing, or the preflight):
    exit 130, no traceback, nothing left on any host, nothing written."""
    proc, pid_dir = sleeping(lab, tmp_path, script_args=("--mode", "sleep"))
    wait_for(lambda: len(ssh_clients(lab)) == 2 or None, 60, "the early ssh clients")
    proc.send_signal(signal.SIGINT)
    code, out, err = finish(proc, timeout=60)
    assert code == 130, (code, out, err)  # not killed by SIGINT: launcher/__main__.py's _forget_caught_interrupts
    assert "Traceback" not in err, err
    assert wait_for(lambda: left_in(lab) == {} or None, 15, f"nothing left: {left_in(lab)}") is not None
    assert list(pid_dir.iterdir()) == []  # no rank started
    assert not (tmp_path / "runs").exists()


def test_a_composition_that_changes_the_ssh_command_connects_again(lab, tmp_path):
    """The command line names the hosts, but a config group it picks sets ssh.connect_timeout: the
    clients started early do not run the composed command, so they are closed (nothing sent on their
    channels, nothing started) and the launch connects again with its own; it runs as usual."""
    from supervise_util import survivors, wait_for_files

    group = tmp_path / ".train_multigpu" / "lab"
    group.mkdir(parents=True)
    (group / "wide.yaml").write_text("# @package _global_\nssh:\n  connect_timeout: 7\n")
    proc, pid_dir = sleeping(lab, tmp_path, "+lab=wide", script_args=("--mode", "sleep"))
    wait_for_files(pid_dir, 12, timeout=120)  # four ranks, two helpers each
    proc.send_signal(signal.SIGINT)
    code, out, err = finish(proc)
    assert code == 130, (out, err)
    assert survivors(pid_dir) == []
    nodes = json.loads((record(tmp_path) / "nodes.json").read_text())["nodes"]
    assert all("ConnectTimeout=7" in node["ssh"] for node in nodes), nodes
    for index in (0, 1):  # the early login, closed, and the launch's own
        assert lab.log(index).count("Accepted publickey for root") == 2, lab.log(index)
    assert wait_for(lambda: left_in(lab) == {} or None, 15, f"nothing left: {left_in(lab)}") is not None
