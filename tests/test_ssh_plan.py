"""``submit=ssh``'s pure side: the hosts (``ssh.hosts``, DeepSpeed hostfiles), the ``ssh.*`` checks and
their messages, and each node's ssh and remote command (launcher/ssh/hosts.py, checks.py, command.py),
through ``SshBackend.dryrun`` on a launch composed as the session composes it."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.backends.base import Launch, Typed
from launcher.config import compose, grammar
from launcher.errors import UserError
from launcher.ssh import preflight
from launcher.ssh.backend import SshBackend
from launcher.ssh.command import GUARD, SshNode

SECRET = "s3cr3t-ssh-plan-value"
PY = "/opt/venv/bin/python"
CWD = "/home/me/project"


def dryrun(*typed: str, script_args: tuple[str, ...] = (), hydra_flags: tuple[str, ...] = (), cwd: str = CWD):
    """The request for ``typed`` (secrets hidden and revealed as the session does), this machine's
    interpreter and working directory pinned."""
    masked, vault = grammar.hide(list(typed), False)
    cfg = vault.reveal(compose.compose(masked))
    launch = Launch(
        cfg,
        Typed(overrides=tuple(masked), script_args=script_args, hydra_flags=hydra_flags),
        Path("/runs/2026-12-01_10-00-00_x"),
        vault,
    )
    return SshBackend(python=PY, cwd=cwd).dryrun(launch)


def refused(*typed: str, cwd: str = CWD) -> str:
    with pytest.raises(UserError) as err:
        dryrun(*typed, cwd=cwd)
    return str(err.value)


TWO = ("submit=ssh", "ssh.hosts=[gpu-a,gpu-b]")


# -- each node's commands ----------------------------------------------------------------------------
def test_each_node_runs_the_composition_as_typed_with_its_rank_and_node0_as_the_endpoint():
    request = dryrun(
        *TWO,
        "launcher.nproc_per_node=4",
        "task=CartPole-v1",
        "seed=3",
        "dry_run=true",
        script_args=("--headless",),
    )
    plan = request.payload
    assert [n.host for n in plan.nodes] == ["gpu-a", "gpu-b"]
    for rank, node in enumerate(plan.nodes):
        assert node.ssh_argv == (
            "ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-T", "-o", "PermitLocalCommand=no",
            "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3", node.host,
        )  # fmt: skip
        assert node.entry == f"{PY} -m launcher" and node.workdir == CWD
        assert node.remote_argv == (
            "launcher.nproc_per_node=4", "task=CartPole-v1", "seed=3",  # as typed, in that order
            "launcher.topology=multinode", "launcher.nnodes=2", f"launcher.node_rank={rank}",
            "launcher.rdzv_endpoint=gpu-a:29400", "launcher.rdzv_id=2026-12-01_10-00-00_x",
            "submit=none", "run_dir=/runs/2026-12-01_10-00-00_x", "--", "--headless",
        )  # fmt: skip
        # the arguments go on the channel, not on the command line (its first line: run/leash.py)
        assert node.argv[-1] == f"cd {CWD} || exit 96; {GUARD} export TRAIN_MULTIGPU_SSH_CHANNEL=$! && {PY} -m launcher"
        assert preflight.remote_nodes(plan)[rank].args == node.remote_argv
    assert plan.endpoint == "gpu-a:29400" and plan.secrets == ()


def test_the_dry_run_prints_every_ssh_command_line_as_it_is_run():
    request = dryrun(*TWO, "ssh.user=me", "ssh.port=2222", "ssh.identity=/k/id", "launcher.nproc_per_node=2")
    shown = request.shown.splitlines()
    for node in request.payload.nodes:
        at = shown.index(shlex.join(node.argv))  # the command line, then what goes on its channel
        assert shown[at + 1] == f"#   its arguments, on the channel: {shlex.join(node.remote_argv)}"
        assert (
            f"# node {node.rank}: {node.host}, ranks {2 * node.rank}-{2 * node.rank + 1} of 4, in {CWD}, "
            f"recording in /runs/2026-12-01_10-00-00_x/node{node.rank}"
        ) in request.shown
    auto = dryrun(*TWO).shown
    assert "# node 1: gpu-b, launcher.nproc_per_node=auto ranks (counted there), in" in auto
    assert "-l me -p 2222 -i /k/id" in request.shown
    assert request.files == {}  # nothing to write: each node records on its own disk


def test_the_remote_shell_gets_the_directory_and_the_entry_back_exactly(tmp_path):
    # the remote line as a real sh parses it: an entry that prints where it runs and its arguments
    # (none: they go on the channel, tests/test_ssh_channel.py)
    odd = tmp_path / "it's a $HOME `x` d"
    odd.mkdir()
    printer = shlex.join([sys.executable, "-c", "import json, os, sys; print(json.dumps([os.getcwd(), sys.argv[1:]]))"])
    node = SshNode(0, "h", ("ssh", "h"), printer, str(odd), ("task=x",))
    out = subprocess.run(["sh", "-c", node.remote_line], capture_output=True, text=True, timeout=60, check=True).stdout
    assert json.loads(out) == [str(odd), []]


@pytest.mark.parametrize(
    "argv",
    [
        ["task=CartPole-v1", "seed=2", "--", "--headless"],
        ["--headless", "task=CartPole-v1", "--lr", "3", "seed=2", "--", "--extra", "a b"],
        [
            "--task",
            "Pendulum-v1",
            "--ml_framework",
            "jax",
            "env.scene.num_envs=4",
            "--seed=1",
            "presets=[debug]",
            "--flag",
        ],
        ["presets=debug", "--video", "--device", "cpu", "agent.lr=1e-3", "--", "--headless"],
    ],
)
def test_each_node_parses_the_arguments_back_in_the_typed_order(argv):
    # what the training script gets, and in which order, is the same on every node as it would be here
    line = grammar.parse([*TWO, *argv])
    masked, vault = grammar.hide(line.overrides, False)
    cfg = vault.reveal(compose.compose(compose.with_default_profile(masked, {})))
    typed = Typed(overrides=tuple(masked), script_args=tuple(line.script_args), order=tuple(line.order))
    plan = SshBackend(python=PY, cwd=CWD).dryrun(Launch(cfg, typed, Path("/r/x"), vault)).payload
    for node in plan.nodes:
        there = grammar.parse(list(node.remote_argv))
        assert (there.order, there.script_args) == (line.order, line.script_args), node.remote_argv


def test_one_host_runs_a_single_node_launch_there():
    request = dryrun("submit=ssh", "ssh.hosts=[gpu-a]", "task=CartPole-v1")
    (node,) = request.payload.nodes
    assert node.remote_argv == (
        "task=CartPole-v1", "launcher.nnodes=1", "launcher.node_rank=0", "submit=none",
        "run_dir=/runs/2026-12-01_10-00-00_x/node0",
    )  # fmt: skip
    assert (
        request.shown.splitlines()[1]
        == "# submit=ssh: 1 node, no rendezvous; run directory: /runs/2026-12-01_10-00-00_x"
    )
    # launcher=multinode typed: a multi-node launch of one node, meeting on that host
    multi = dryrun("submit=ssh", "ssh.hosts=[gpu-a]", "launcher=multinode").payload
    assert "launcher.rdzv_endpoint=gpu-a:29400" in multi.nodes[0].remote_argv


def test_jax_meets_at_a_coordinator_on_node0_and_a_given_endpoint_is_kept():
    jax = dryrun(*TWO, "launcher=skrl_jax", "launcher.nproc_per_node=2").payload
    assert "launcher.coordinator_address=gpu-a:29400" in jax.nodes[1].remote_argv
    assert not any(a.startswith(("launcher.rdzv", "launcher.topology")) for a in jax.nodes[1].remote_argv)
    given = dryrun(*TWO, "launcher.rdzv_endpoint=10.0.0.9:4000", "ssh.rendezvous_port=5000").payload
    assert given.endpoint == "10.0.0.9:4000"
    assert [a for a in given.nodes[1].remote_argv if "rdzv" in a] == ["launcher.rdzv_endpoint=10.0.0.9:4000"]
    port = dryrun(*TWO, "ssh.rendezvous_port=5000").payload
    assert "launcher.rdzv_endpoint=gpu-a:5000" in port.nodes[0].remote_argv
    v6 = dryrun("submit=ssh", "ssh.hosts=['fd00::1','fd00::2']").payload
    assert "launcher.rdzv_endpoint=[fd00::1]:29400" in v6.nodes[1].remote_argv
    assert v6.nodes[1].ssh_argv[-1] == "fd00::2"


def test_only_this_machines_keys_are_dropped_and_config_dirs_made_absolute(tmp_path):
    (tmp_path / "lab").mkdir()
    request = dryrun(
        *TWO, "ssh.connect_timeout=3", "run_dir=/elsewhere", "launcher.nnodes=2", "seed=1",
        hydra_flags=("--config-dir", "lab"), cwd=str(tmp_path),
    )  # fmt: skip
    argv = request.payload.nodes[0].remote_argv
    assert argv[:3] == ("--config-dir", str(tmp_path / "lab"), "seed=1")
    assert not any(a.startswith(("ssh.", "submit=ssh", "run_dir=/elsewhere")) for a in argv)
    assert argv.count("launcher.nnodes=2") == 1
    assert "ConnectTimeout=3" in request.payload.nodes[0].ssh_argv


def test_ssh_keys_reach_the_ssh_command_only():
    plan = dryrun(
        *TWO, "ssh.user=lab", "ssh.identity=/keys/lab", "ssh.workdir=/srv/rl",
        "ssh.command=conda run -n rl train_multigpu",
        "+ssh.options=['ProxyJump=gw','StrictHostKeyChecking=accept-new']",
    ).payload  # fmt: skip
    node = plan.nodes[1]
    assert node.ssh_argv[8:-1] == (
        "-l", "lab", "-i", "/keys/lab", "-o", "ProxyJump=gw", "-o", "StrictHostKeyChecking=accept-new",
        "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3",
    )  # fmt: skip
    assert node.argv[-1] == (
        f"cd /srv/rl || exit 96; {GUARD} export TRAIN_MULTIGPU_SSH_CHANNEL=$! && conda run -n rl train_multigpu"
    )
    assert node.remote_argv[0] == "launcher.topology=multinode"


def test_no_secret_value_in_any_command_the_dry_run_or_the_payload():
    request = dryrun(*TWO, f"+worker_env.HF_TOKEN={SECRET}", "task=CartPole-v1")
    plan = request.payload
    assert plan.secrets == ("worker_env.HF_TOKEN",)
    for node in plan.nodes:
        assert SECRET not in " ".join(node.argv)
        assert "+worker_env.HF_TOKEN=***" in node.remote_argv  # the placeholder; the value goes on stdin
    assert SECRET not in request.shown and SECRET not in repr(plan)
    assert plan.vault.values == {"worker_env.HF_TOKEN": {"***": SECRET}}  # for the submitter, never shown
    assert "secrets on each ssh client's stdin (never on a command line): worker_env.HF_TOKEN" in request.shown


# -- hostfiles ---------------------------------------------------------------------------------------
def test_a_deepspeed_hostfile_names_the_hosts_and_slots_set_the_ranks_per_node(tmp_path):
    (tmp_path / "hosts.txt").write_text("# the lab\ngpu-a slots=4\n\n  gpu-b slots=4   # under the desk\n")
    plan = dryrun("submit=ssh", "ssh.hostfile=hosts.txt", cwd=str(tmp_path)).payload
    assert [n.host for n in plan.nodes] == ["gpu-a", "gpu-b"]
    assert "launcher.nproc_per_node=4" in plan.nodes[0].remote_argv
    agree = dryrun("submit=ssh", "ssh.hostfile=hosts.txt", "launcher.nproc_per_node=4", cwd=str(tmp_path)).payload
    assert agree.nodes[0].remote_argv.count("launcher.nproc_per_node=4") == 1


@pytest.mark.parametrize(
    ("text", "typed", "message"),
    [
        (
            "gpu-a slots=4\ngpu-b slots=2\n",
            (),
            "ssh.hostfile=gpu-a slots=4, gpu-b slots=2: the same slots on every host (each node runs "
            "launcher.nproc_per_node ranks) (docs/ssh.md#the-hostfile)",
        ),
        (
            "gpu-a slots=4\n",
            ("launcher.nproc_per_node=2",),
            "ssh.hostfile=gpu-a slots=4: must agree with launcher.nproc_per_node=2 (drop one of them) "
            "(docs/ssh.md#the-hostfile)",
        ),
        (
            "gpu-a slots=4 max_slots=8\n",
            (),
            "ssh.hostfile=line 1 'gpu-a slots=4 max_slots=8': each line is 'HOST slots=N' (N from 1 to 4096), "
            "'HOST', a # comment or blank (docs/ssh.md#the-hostfile)",
        ),
        (
            "gpu-a slots=99999999999999999999\n",
            (),
            "ssh.hostfile=line 1 'gpu-a slots=99999999999999999999': each line is 'HOST slots=N' "
            "(N from 1 to 4096), 'HOST', a # comment or blank (docs/ssh.md#the-hostfile)",
        ),
        (
            "# nobody yet\n",
            (),
            "ssh.hostfile=hosts.txt: a hostfile naming at least one host ('HOST slots=N' per line) "
            "(docs/ssh.md#the-hostfile)",
        ),
        ("a\nb\na\n", (), "ssh.hostfile=hosts.txt: each host once (a is given twice)"),
    ],
)
def test_hostfile_mistakes(tmp_path, text, typed, message):
    (tmp_path / "hosts.txt").write_text(text)
    assert refused("submit=ssh", "ssh.hostfile=hosts.txt", *typed, cwd=str(tmp_path)) == message


def test_an_unreadable_hostfile(tmp_path):
    assert refused("submit=ssh", "ssh.hostfile=nope.txt", cwd=str(tmp_path)) == (
        "ssh.hostfile=nope.txt: a readable hostfile (No such file or directory) (docs/ssh.md#the-hostfile)"
    )


# -- every other mistake: one line naming the key, the value, what is allowed -------------------------
@pytest.mark.parametrize(
    ("typed", "message"),
    [
        (
            ("submit=ssh",),
            "ssh.hosts=[]: submit=ssh needs the hosts, node 0 first: 'ssh.hosts=[gpu-a,gpu-b]' or "
            "ssh.hostfile=FILE (docs/ssh.md)",
        ),
        (
            (*TWO, "ssh.hostfile=h.txt"),
            "ssh.hostfile=h.txt: either ssh.hosts or ssh.hostfile, not both (drop one of them)",
        ),
        (
            ("submit=ssh", "ssh.hosts=[me@gpu-a]"),
            "ssh.hosts=me@gpu-a: a host name or address (gpu-a, 10.0.0.2, fd00::2) (the user goes in ssh.user=NAME)",
        ),
        (
            ("submit=ssh", "ssh.hosts=[gpu-a,'-oProxyCommand=x']"),
            "ssh.hosts=-oProxyCommand=x: a host name or address (gpu-a, 10.0.0.2, fd00::2) (docs/ssh.md#the-hostfile)",
        ),
        (("submit=ssh", "ssh.hosts=[a,a]"), "ssh.hosts=['a', 'a']: each host once (a is given twice)"),
        (
            (*TWO, "launcher.nnodes=3"),
            "launcher.nnodes=3: submit=ssh runs one node per host: 2 hosts (gpu-a, gpu-b) "
            "(drop launcher.nnodes, or name 3 hosts)",
        ),
        (
            (*TWO, "launcher.nnodes=1:2"),
            "launcher.nnodes=1:2: submit=ssh runs one node per host: 2 hosts (gpu-a, gpu-b) (drop launcher.nnodes)",
        ),
        (
            (*TWO, "launcher.node_rank=1"),
            "launcher.node_rank=1: submit=ssh gives every host its own (node 0 is the first host) "
            "(drop launcher.node_rank; reorder the hosts to choose node 0)",
        ),
        # node 0's and the last node's composition is checked here, before anything connects
        (
            ("submit=ssh", "ssh.hosts=[127.0.0.1,10.0.0.2]"),
            "launcher.rdzv_endpoint=127.0.0.1:29400: a loopback address in a launch of nnodes=2: the other nodes "
            "cannot reach it (use node 0's network address or hostname; if every node runs on this host, add "
            "launcher.local_nodes=true)",
        ),
        (
            (*TWO, "launcher.rdzv_backend=static"),
            "launcher.rdzv_backend=static: static rendezvous uses master_addr/master_port, not rdzv_endpoint",
        ),
        (
            (*TWO, "launcher=skrl_jax", "launcher.max_restarts=2"),
            "launcher.max_restarts=2: torchrun only; launcher=skrl_jax does not take it (it belongs to "
            "launcher=single_node or launcher=multinode)",
        ),
        (
            (*TWO, "ssh.connect_timeout=0"),
            "ssh.connect_timeout=0: whole seconds from 1 to 600 (how long ssh waits for each host to answer)",
        ),
        ((*TWO, "ssh.port=0"), "ssh.port=0: a port is an integer in 1..65535"),
        ((*TWO, "ssh.rendezvous_port=70000"), "ssh.rendezvous_port=70000: a port is an integer in 1..65535"),
        (
            (*TWO, "ssh.options=[-v]"),
            "ssh.options=-v: each an ssh -o option as Name=value, e.g. StrictHostKeyChecking=accept-new "
            "(ssh_config(5))",
        ),
        (
            (*TWO, "ssh.options=['BatchMode=no']"),
            "ssh.options=BatchMode=no: the launch sets BatchMode=yes itself (a password prompt would wait forever) "
            "(docs/ssh.md)",
        ),
        (
            (*TWO, "ssh.options=['ConnectTimeout=3']"),
            "ssh.options=ConnectTimeout=3: the connect timeout is ssh.connect_timeout=N (docs/ssh.md)",
        ),
        # what would break the channel (a terminal echoes the secrets): one line each, never overridden silently
        (
            (*TWO, "ssh.options=['RequestTTY=force']"),
            "ssh.options=RequestTTY=force: the launch runs without a terminal (ssh -T): a terminal would echo "
            "the secrets (docs/ssh.md)",
        ),
        (
            (*TWO, "ssh.options=['requesttty yes']"),
            "ssh.options=requesttty yes: the launch runs without a terminal (ssh -T): a terminal would echo "
            "the secrets (docs/ssh.md)",
        ),
        (
            (*TWO, "ssh.options=['PermitLocalCommand=yes']"),
            "ssh.options=PermitLocalCommand=yes: the launch sets PermitLocalCommand=no: a LocalCommand shares "
            "ssh's stdin, the secrets (docs/ssh.md)",
        ),
        (
            (*TWO, "ssh.options=['RemoteCommand=bash']"),
            "ssh.options=RemoteCommand=bash: the launch runs its own command on each host (docs/ssh.md)",
        ),
        (
            (*TWO, "ssh.options=['SessionType=none']"),
            "ssh.options=SessionType=none: the launch runs its own command on each host (docs/ssh.md)",
        ),
        (
            (*TWO, "ssh.options=['StdinNull=yes']"),
            "ssh.options=StdinNull=yes: the launch speaks on ssh's stdin (the secrets, then a beat every second) "
            "(docs/ssh.md)",
        ),
        (
            (*TWO, "ssh.options=['ForkAfterAuthentication=yes']"),
            "ssh.options=ForkAfterAuthentication=yes: the launch stays with every ssh client to the end "
            "(one Ctrl+C, one exit code) (docs/ssh.md)",
        ),
        (
            ("submit=ssh", "ssh.hosts=[':']"),
            "ssh.hosts=:: a host name or address (gpu-a, 10.0.0.2, fd00::2) (docs/ssh.md#the-hostfile)",
        ),
        (
            ("submit=ssh", "ssh.hosts=['[fd00::1']"),
            "ssh.hosts=[fd00::1: a host name or address (gpu-a, 10.0.0.2, fd00::2) (docs/ssh.md#the-hostfile)",
        ),
        (
            (*TWO, "ssh.python=python3", "ssh.command=train_multigpu"),
            "ssh.command=train_multigpu: either ssh.python or ssh.command, not both "
            "(ssh.command runs the launcher itself; drop ssh.python)",
        ),
        (
            (*TWO, "ssh.workdir=project"),
            "ssh.workdir=project: an absolute directory that exists on every host (the launcher runs there) "
            "(docs/ssh.md)",
        ),
        ((*TWO, "ssh.user='me@x'"), "ssh.user=me@x: the login name on every host (ssh -l) (docs/ssh.md)"),
        (
            (*TWO, "ssh.identity=-i"),
            "ssh.identity=-i: the private key file ssh uses (ssh -i) (docs/ssh.md)",
        ),
    ],
)
def test_mistakes_are_one_line(typed, message):
    assert refused(*typed) == message


def test_this_machine_needs_no_gpu_for_the_hosts_gpus(monkeypatch):
    # a laptop without GPUs submits to GPU workstations: their GPUs are theirs to check (preflight)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    plan = dryrun(*TWO, "device=cuda", "launcher.nproc_per_node=gpu").payload
    assert plan.nodes[1].remote_argv[:2] == ("device=cuda", "launcher.nproc_per_node=gpu")


def test_a_typed_nproc_meets_no_slots():
    plan = dryrun(*TWO, "launcher.nproc_per_node=3").payload
    assert plan.nodes[0].remote_argv.count("launcher.nproc_per_node=3") == 1


def test_the_timeouts_the_submitter_needs_travel_in_the_plan():
    plan = dryrun(*TWO, "launcher.grace_period=5", "launcher.node_timeout=12", "ssh.connect_timeout=4").payload
    assert (plan.grace_period, plan.node_timeout, plan.connect_timeout) == (5.0, 12.0, 4)


def test_one_host_may_be_written_bare(run_cli):
    result = run_cli("submit=ssh", "ssh.hosts=gpu-a", "dry_run=true")
    assert result.returncode == 0, result.stderr
    assert "# node 0: gpu-a," in result.stdout


def test_the_example_lab_profile(tmp_path, monkeypatch, isaaclab):
    # examples/profiles/lab_ssh.yaml as a lab commits it (.train_multigpu/profile/ of the project)
    import shutil

    target = tmp_path / ".train_multigpu" / "profile"
    target.mkdir(parents=True)
    shutil.copy(Path(__file__).resolve().parents[1] / "examples" / "profiles" / "lab_ssh.yaml", target)
    monkeypatch.chdir(tmp_path)
    masked, vault = grammar.hide(["profile=lab_ssh", "task=Isaac-Cartpole-v0"], False)
    cfg = vault.reveal(compose.compose(compose.with_default_profile(masked, {})))
    launch = Launch(cfg, Typed(overrides=tuple(masked), script_args=("--headless",)), Path("/r/x"), vault)
    plan = SshBackend(python=PY, cwd=str(tmp_path)).dryrun(launch).payload
    node = plan.nodes[1]
    assert node.ssh_argv == (
        "ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", "-T", "-o", "PermitLocalCommand=no",
        "-l", "rl", "-i", "~/.ssh/id_lab",
        "-o", "StrictHostKeyChecking=accept-new", "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3",
        "gpu-b",
    )  # fmt: skip
    assert node.entry == "/opt/rl/venv/bin/python -m launcher" and node.workdir == "/home/rl/projects/cartpole"
    # the profile travels by name (the project holds it on every machine); the node never submits
    assert node.remote_argv == (
        "profile=lab_ssh", "task=Isaac-Cartpole-v0", "launcher.topology=multinode", "launcher.nnodes=2",
        "launcher.node_rank=1", "launcher.rdzv_endpoint=gpu-a:29400", "launcher.rdzv_id=x", "submit=none",
        "run_dir=/r/x", "--", "--headless",
    )  # fmt: skip


# -- through the command line (the session's one path) ------------------------------------------------
def test_the_command_lines_dry_run_shows_every_node_and_writes_nothing(run_cli, tmp_path):
    before = sorted(tmp_path.rglob("*"))
    result = run_cli(
        "submit=ssh", "ssh.hosts=[gpu-a,gpu-b]", "launcher.nproc_per_node=2", "task=Pendulum-v1",
        f"+worker_env.HF_TOKEN={SECRET}", "dry_run=true", "--", "--headless",
    )  # fmt: skip
    assert (result.returncode, result.stderr) == (0, ""), result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "# ssh (dry run: nothing connected, nothing written)"
    at = [i for i, line in enumerate(lines) if line.startswith("ssh ")]
    commands = [shlex.split(lines[i]) for i in at]
    assert [c[-2] for c in commands] == ["gpu-a", "gpu-b"]
    for rank, argv in enumerate(commands):
        assert argv[-1] == (
            f"cd {tmp_path} || exit 96; {GUARD} export TRAIN_MULTIGPU_SSH_CHANNEL=$! && "
            f"{shlex.join([sys.executable, '-m', 'launcher'])}"
        )
        said = lines[at[rank] + 1].removeprefix("#   its arguments, on the channel: ")
        remote = shlex.split(said)
        assert f"launcher.node_rank={rank}" in remote and remote[-2:] == ["--", "--headless"]
    assert SECRET not in result.stdout
    assert sorted(tmp_path.rglob("*")) == before  # no run directory, no file


def test_a_mistake_on_the_command_line_is_one_line_exit_2(run_cli):
    result = run_cli("submit=ssh", "ssh.hosts=[gpu-a,gpu-b]", "launcher.nnodes=3", "dry_run=true")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == (
        "train_multigpu: error: launcher.nnodes=3: submit=ssh runs one node per host: 2 hosts (gpu-a, gpu-b) "
        "(drop launcher.nnodes, or name 3 hosts)\n"
    )


def test_help_names_the_ssh_keys(run_cli):
    result = run_cli("--help")
    assert result.returncode == 0
    for text in ("SSH (docs/ssh.md): submit=ssh 'ssh.hosts=[gpu-a,gpu-b]'", "ssh.hostfile=FILE", "ssh.workdir"):
        assert text in result.stdout


def test_the_safe_values_of_the_channel_options_are_taken():
    options = ["RequestTTY=no", "PermitLocalCommand=no", "RemoteCommand=none", "StdinNull=no", "SessionType=default"]
    plan = dryrun(*TWO, f"ssh.options=[{','.join(repr(o) for o in options)}]").payload
    assert plan.nodes[0].ssh_argv[4:8] == ("ConnectTimeout=10", "-T", "-o", "PermitLocalCommand=no")
    assert plan.nodes[0].ssh_argv.count("-o") == 5 + len(options)  # the lab's own, and ours


def test_a_secret_given_by_reference_is_resolved_here_and_travels_on_the_channel(run_cli, monkeypatch):
    """``${oc.env:NAME}`` means what it means on every back end: read where the command is typed. Its
    value goes on the channel, each node's command carries the placeholder (a typed reference in its
    place; a profile's appended)."""
    monkeypatch.setenv("API_TOKEN", SECRET)
    monkeypatch.setenv("WANDB_API_KEY", SECRET + "-wandb")
    result = run_cli(
        *TWO, "+worker_env.API_TOKEN=${oc.env:API_TOKEN}", "+profile.env.WANDB_API_KEY=${oc.env:WANDB_API_KEY}",
        "task=Pendulum-v1", "dry_run=true",
    )  # fmt: skip
    assert (result.returncode, result.stderr) == (0, ""), result.stderr
    assert SECRET not in result.stdout
    assert (
        "# secrets on each ssh client's stdin (never on a command line): worker_env.API_TOKEN, "
        "profile.env.WANDB_API_KEY" in result.stdout
    )
    said = [line for line in result.stdout.splitlines() if line.startswith("#   its arguments, on the channel: ")]
    assert len(said) == 2, result.stdout
    for line in said:
        remote = shlex.split(line.split(": ", 1)[1])
        assert "+worker_env.API_TOKEN=***" in remote and "+profile.env.WANDB_API_KEY=***" in remote, remote
        assert not any("oc.env" in word for word in remote), remote


def test_a_profiles_secret_reference_is_resolved_here_too(tmp_path, monkeypatch, isaaclab):
    """examples/profiles/lab_ssh.yaml reads WANDB_API_KEY as ``${oc.env:WANDB_API_KEY,''}``: the value
    here travels on the channel, the node's command names the placeholder after the overrides."""
    import shutil

    from launcher import secrets

    target = tmp_path / ".train_multigpu" / "profile"
    target.mkdir(parents=True)
    shutil.copy(Path(__file__).resolve().parents[1] / "examples" / "profiles" / "lab_ssh.yaml", target)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WANDB_API_KEY", SECRET)
    masked, vault = grammar.hide(["profile=lab_ssh", "task=Isaac-Cartpole-v0"], False)
    dict_cfg = compose.compose_dict(compose.with_default_profile(masked, {}))
    assert secrets.references(dict_cfg) == ["profile.env.WANDB_API_KEY"]
    cfg = vault.reveal(compose.to_typed(dict_cfg))
    resolved = vault.resolved_here(secrets.references(dict_cfg), cfg)  # as the session does for every launch
    launch = Launch(cfg, Typed(overrides=tuple(masked)), Path("/r/x"), resolved)
    plan = SshBackend(python=PY, cwd=str(tmp_path)).dryrun(launch).payload
    assert "profile.env.WANDB_API_KEY=***" in plan.nodes[1].remote_argv
    assert plan.secrets == ("profile.env.WANDB_API_KEY",)
    assert plan.vault.values == {"profile.env.WANDB_API_KEY": {"***": SECRET}}


# -- the clients started before composing (launcher/ssh/early.py) ----------------------------------------
EARLY_HOSTS = ("submit=ssh", "ssh.hosts=[gpu-a,'fd00::2']", "ssh.identity=/k/id", "ssh.options=['ProxyJump=gw']")


def test_the_command_line_alone_predicts_every_nodes_ssh_command_as_composed():
    from launcher.ssh import early

    argv = [*EARLY_HOSTS, "ssh.user=me", "ssh.port=2222", "ssh.connect_timeout=4", "task=CartPole-v1", "--", "-x"]
    nodes, hidden = early.predict(argv, {}, CWD, PY)
    plan = dryrun(*[a for a in argv if a not in ("--", "-x")])
    assert [n.argv for n in nodes] == [n.argv for n in plan.payload.nodes]
    assert hidden == []
    _, hidden = early.predict([*EARLY_HOSTS, "+worker_env.HF_TOKEN=abc"], {}, CWD, PY)
    assert hidden == ["abc"]  # no early client's environment holds it


@pytest.mark.parametrize(
    "extra",
    [
        "profile=lab_ssh",  # a profile may set any ssh.* key
        "presets=debug",
        "dry_run=true",  # connects to nothing
        "ssh.hostfile=hosts.txt",
        "+worker_env.A_TOKEN=${oc.env:A}",  # resolved from the environment the clients run in
        "ssh.user=${oc.env:USER}",
        "ssh.port=twenty",  # the composition says what is wrong
        "ssh.connect_timeout=0",
        "~ssh.user",
        "save_profile=mine",
    ],
)
def test_no_early_start_where_more_than_the_command_line_decides(extra):
    from launcher.ssh import early

    assert early.predict([*EARLY_HOSTS, extra], {}, CWD, PY) is None
    assert early.predict(["-m", *EARLY_HOSTS], {}, CWD, PY) is None  # a sweep
    assert early.predict(["ssh.hosts=[a]"], {}, CWD, PY) is None  # not submit=ssh
    assert early.predict([*EARLY_HOSTS], {"ISAACLAB_PATH": "/opt/IsaacLab"}, CWD, PY) is None  # its default profile
