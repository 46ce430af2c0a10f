"""Every mistake a user can make gets one message naming the key, the value and what is allowed."""

from __future__ import annotations

import socket

import pytest

from conftest import build, make_facts
from launcher import checks, probe
from launcher.config import grammar
from launcher.config.compose import compose
from launcher.errors import UserError


def error_of(argv: list[str], **facts) -> str:
    with pytest.raises(UserError) as caught:
        build(argv, **facts)
    return str(caught.value)


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["launcher.nproc_per_node=0"],
            "launcher.nproc_per_node=0: an integer >= 1, or auto (all visible GPUs, else all usable CPU cores), gpu or cpu",  # noqa: E501
        ),
        (["--num_gpus", "0"], "launcher.nproc_per_node=0: an integer >= 1"),
        (["launcher.nproc_per_node=-2"], "launcher.nproc_per_node=-2: an integer >= 1"),
        (["launcher.nproc_per_node=many"], "launcher.nproc_per_node=many: an integer >= 1, or auto"),
        (["launcher=skrl_jax", "launcher.nproc_per_node=many"], "launcher.nproc_per_node=many: an integer >= 1"),
        (
            ["launcher=multinode", "launcher.nnodes=0", "launcher.master_addr=h"],
            "launcher.nnodes=0: an integer >= 1, or MIN:MAX with 1 <= MIN <= MAX",
        ),
        (
            ["launcher=multinode", "launcher.nnodes=4:2", "launcher.master_addr=h"],
            "launcher.nnodes=4:2: an integer >= 1, or MIN:MAX",
        ),
        (
            ["launcher=multinode", "launcher.nnodes=two", "launcher.master_addr=h"],
            "launcher.nnodes=two: an integer >= 1",
        ),
        (
            ["launcher=skrl_jax", "launcher.nnodes=1:2"],
            "launcher.nnodes=1:2: an integer >= 1 (elastic MIN:MAX is torchrun only)",
        ),
        (
            ["launcher=multinode", "launcher.nnodes=2", "launcher.node_rank=2", "launcher.master_addr=h"],
            "launcher.node_rank=2: an integer in 0..1 (nnodes=2)",
        ),
        (
            ["launcher=multinode", "launcher.nnodes=2", "launcher.node_rank=-1", "launcher.master_addr=h"],
            "launcher.node_rank=-1: an integer in 0..1",
        ),
        (["launcher.nnodes=2"], "launcher.nnodes=2: launcher=single_node runs 1 node (use launcher=multinode)"),
        (["launcher.master_port=0"], "launcher.master_port=0: a port is an integer in 1..65535"),
        (["--master_port", "70000"], "launcher.master_port=70000: a port is an integer in 1..65535"),
        (
            ["launcher=multinode", "launcher.rdzv_endpoint=node0:99999"],
            "launcher.rdzv_endpoint=node0:99999: a port is an integer in 1..65535",
        ),
        (
            ["launcher=multinode", "launcher.rdzv_endpoint=node0:http"],
            "launcher.rdzv_endpoint=node0:http: the port 'http' is not a number",
        ),
        (["launcher=multinode", "launcher.rdzv_endpoint='::1:29400'"], "write an IPv6 host in brackets: [::1]:29400"),
        (["launcher=multinode", "launcher.rdzv_endpoint='[::1:29400'"], "expected [IPv6]:port, the ']' is missing"),
        (
            ["launcher=multinode", "launcher.rdzv_endpoint='[node0]:29400'"],
            "'node0' in brackets is not an IPv6 address",
        ),
        (
            ["launcher=skrl_jax", "launcher.nnodes=2", "launcher.coordinator_address=node0"],
            "launcher.coordinator_address=node0: expected host:port, the port is missing (e.g. node0:29400",
        ),
        (
            ["launcher=multinode", "launcher.nnodes=2"],
            "launcher.rdzv_endpoint=None: launcher=multinode with nnodes=2 needs the address of node 0 (set launcher.rdzv_endpoint=<host>:<port> (c10d) or launcher.master_addr=<host> (static))",  # noqa: E501
        ),
        (
            ["launcher=skrl_jax", "launcher.nnodes=2"],
            "launcher.coordinator_address=None: launcher=skrl_jax with nnodes=2 needs the JAX coordinator as host:port",
        ),
        (
            ["launcher.coordinator_address=h:1"],
            "launcher.coordinator_address=h:1: JAX only; launcher=single_node (torchrun) does not take it (it belongs to launcher=skrl_jax",  # noqa: E501
        ),
        (
            ["launcher=skrl_jax", "rl_library=rsl_rl"],
            "rl_library=rsl_rl: launcher=skrl_jax runs skrl only (use rl_library=skrl)",
        ),
        (
            ["rl_library.ml_framework=jax"],
            "rl_library.ml_framework=jax: JAX runs through launcher=skrl_jax (add launcher=skrl_jax)",
        ),
        (["rl_library=rsl_rl"], "rl_library=rsl_rl: profile=examples runs skrl only (choose profile=isaaclab"),
        (["launcher.rdzv_backend=zookeeper"], "launcher.rdzv_backend=zookeeper: one of static, c10d, etcd, etcd-v2"),
        (
            ["launcher=multinode", "launcher.rdzv_backend=static", "launcher.rdzv_endpoint=h:1"],
            "launcher.rdzv_backend=static: static rendezvous uses master_addr/master_port, not rdzv_endpoint",
        ),
        (["launcher.start_method=thread"], "launcher.start_method=thread: one of spawn, fork, forkserver"),
        (["launcher.max_restarts=-1"], "launcher.max_restarts=-1: an integer >= 0"),
        (["launcher.monitor_interval=0"], "launcher.monitor_interval=0.0: finite seconds > 0 and <= 3600"),
        (["launcher.grace_period=-1"], "launcher.grace_period=-1.0: finite seconds in 0..86400"),
        # issue 13 item 8: nan and inf passed the range checks (grace_period=nan: no SIGKILL ever)
        (["launcher.grace_period=nan"], "launcher.grace_period=nan: finite seconds in 0..86400"),
        (["launcher.grace_period=inf"], "launcher.grace_period=inf: finite seconds in 0..86400"),
        (["launcher.grace_period=1e12"], "launcher.grace_period=1000000000000.0: finite seconds in 0..86400"),
        (["launcher.monitor_interval=nan"], "launcher.monitor_interval=nan: finite seconds > 0 and <= 3600"),
        # issue 12: the hang watchdog's limits (null turns each off)
        (
            ["launcher.hang_timeout=0"],
            "launcher.hang_timeout=0.0: finite seconds > 0 and <= 604800 (null turns it off)",
        ),
        (
            ["launcher.hang_timeout=nan"],
            "launcher.hang_timeout=nan: finite seconds > 0 and <= 604800 (null turns it off)",
        ),
        (
            ["launcher.startup_timeout=-5"],
            "launcher.startup_timeout=-5.0: finite seconds > 0 and <= 604800 (null turns it off)",
        ),
        (
            ["launcher.startup_timeout=inf"],
            "launcher.startup_timeout=inf: finite seconds > 0 and <= 604800 (null turns it off)",
        ),
        (["launcher.monitor_interval=-inf"], "launcher.monitor_interval=-inf: finite seconds > 0 and <= 3600"),
        # issue 12 item 6: the straggler factor (null turns it off)
        (
            ["launcher.straggler_factor=1"],
            "launcher.straggler_factor=1.0: a finite number > 1 and <= 1000 (times the other ranks' median "
            "iteration time; null turns straggler detection off)",
        ),
        (
            ["launcher.straggler_factor=nan"],
            "launcher.straggler_factor=nan: a finite number > 1 and <= 1000 (times the other ranks' median "
            "iteration time; null turns straggler detection off)",
        ),
        (
            ["launcher=multinode", "launcher.nnodes=2", "launcher.master_addr=h", "launcher.join_timeout=99999999999"],
            "launcher.join_timeout=99999999999: finite seconds in 1..604800 (how long a node waits for the other nodes to join)",  # noqa: E501
        ),
        (
            [
                "launcher=multinode",
                "launcher.nnodes=2",
                "launcher.rdzv_endpoint=h:1",
                "launcher.rdzv_conf='read_timeout=-5'",
            ],
            "launcher.rdzv_conf=read_timeout=-5: read_timeout takes whole seconds in 1..604800 (torch reads it as an integer)",  # noqa: E501
        ),
        (
            ["launcher=multinode", "launcher.nnodes=2", "launcher.master_addr=h", "launcher.rdzv_conf='timeout=inf'"],
            "launcher.rdzv_conf=timeout=inf: timeout takes whole seconds in 1..604800",
        ),
        (["device=cuda"], "device=cuda: no GPU is visible on this machine (from test: 0 GPU(s))"),
        (["launcher.nproc_per_node=gpu"], "launcher.nproc_per_node=gpu: no GPU is visible on this machine"),
    ],
)
def test_message(argv, message):
    assert message in error_of(argv)


# torchrun's flags as Isaac Lab's launcher emits them (design notes), and the launcher's own multi-node
# keys that become torchrun flags: written here, not read from launcher.schema.TORCHRUN_ONLY_KEYS
TORCHRUN_ONLY = (
    "master_addr",
    "master_port",
    "rdzv_backend",
    "rdzv_endpoint",
    "rdzv_id",
    "rdzv_conf",
    "max_restarts",
    "monitor_interval",
    "start_method",
    "role",
    "tee",
    "redirects",
    "local_ranks_filter",
    "log_dir",
    "join_timeout",
    "local_addr",
    "is_host",
)


@pytest.mark.parametrize("key", TORCHRUN_ONLY)
def test_torchrun_only_keys_are_impossible_on_jax(key):
    value = {
        "master_port": "29500",
        "max_restarts": "1",
        "monitor_interval": "1",
        "join_timeout": "5",
        "is_host": "true",
        "virtual_local_rank": "true",
    }.get(key, "x")
    message = error_of(["launcher=skrl_jax", f"launcher.{key}={value}"])
    assert message.startswith(f"launcher.{key}=")
    assert (
        "torchrun only; launcher=skrl_jax does not take it (it belongs to launcher=single_node or launcher=multinode)"
        in message
    )


@pytest.mark.parametrize(
    "override",
    [
        "launcher.nnodes=1",
        "launcher.node_rank=0",
        "launcher.nproc_per_node=2",
        "launcher.coordinator_address=127.0.0.1:5123",
        "launcher.grace_period=5",
        "launcher.network_interface=lo",
        "launcher.hang_timeout=null",
        "launcher.startup_timeout=null",
    ],
)
def test_keys_jax_takes_are_not_refused_as_torchrun_only(override):
    from launcher.addresses import Endpoint

    assert build(["launcher=skrl_jax", override], coordinator=Endpoint("127.0.0.1", 5123)).processes  # no UserError


def test_isaaclab_flags_for_torchrun_rejected_with_jax():
    message = error_of(["--ml_framework", "jax", "--rdzv_endpoint", "h:1"])
    assert "launcher.rdzv_endpoint=h:1: torchrun only; launcher=skrl_jax does not take it" in message


def test_virtual_local_rank_is_torchrun_only():
    message = error_of(["--ml_framework", "jax", "--num_gpus", "2", "--virtual_local_rank"])
    assert message == (
        "launcher.virtual_local_rank=true: torchrun only; launcher=skrl_jax does not take it "
        "(it belongs to launcher=single_node or launcher=multinode)"
    )
    # off is the switch's default, not a torchrun flag given
    checks.validate(compose(["launcher=skrl_jax", "launcher.virtual_local_rank=false"]), make_facts())


def test_more_workers_than_visible_gpus():
    # GPUs cannot exist on this machine: the host facts say two are visible.
    message = error_of(["--num_gpus", "4"], gpus=2)
    assert message == (
        "launcher.nproc_per_node=4: more workers than the 2 visible GPU(s) "
        "(from test: 2 GPU(s); use at most 2 or device=cpu)"
    )


def test_cpu_workers_beyond_the_oversubscription_factor_are_refused():
    """Issue 13 item 6: launcher.nproc_per_node=100000 on a 2-core machine was accepted."""
    assert error_of(["launcher.nproc_per_node=100000"], cpus=2) == (
        "launcher.nproc_per_node=100000: more than 4 CPU workers per usable core: 2 core(s) here allow at most 8 "
        "(every worker is a process with its own environments and model; use fewer workers or more cores)"
    )
    assert "allow at most 8" in error_of(["launcher.nproc_per_node=9", "device=cpu"], cpus=2)
    assert build(["launcher.nproc_per_node=8"], cpus=2).nproc_per_node == 8  # the factor itself is allowed
    # GPUs cannot exist here: the host facts say 8 are visible; GPU workers are bounded by GPUs, not cores
    assert build(["launcher.nproc_per_node=8"], gpus=8, cpus=1).nproc_per_node == 8


def test_gpu_count_comes_from_cuda_visible_devices_without_torch():
    from launcher import probe as host

    assert host.count_gpus({"CUDA_VISIBLE_DEVICES": "0,1"}) == (2, "CUDA_VISIBLE_DEVICES='0,1'")
    assert host.count_gpus({"CUDA_VISIBLE_DEVICES": ""})[0] == 0


def test_ipv6_endpoints_parse():
    p = build(["launcher=multinode", "launcher.rdzv_endpoint='[::1]:29400'"])
    assert "[::1]:29400" in p.processes[0].argv
    p = build(["launcher=multinode", "launcher.rdzv_endpoint=node0"])  # c10d's default port
    assert "node0:29400" in p.processes[0].argv


def test_grammar_errors():
    with pytest.raises(UserError, match=r"--master_port=: this flag needs a value \(e.g. --master_port=VALUE\)"):
        grammar.parse(["--master_port"])
    with pytest.raises(UserError, match=r"argument=stray: expected key=value, a --flag, or script arguments after --"):
        grammar.parse(["stray"])
    with pytest.raises(UserError, match=r"--ml_framework=tensorflow: jax or torch"):
        grammar.parse(["--ml_framework", "tensorflow"])
    with pytest.raises(UserError, match=r"--dry_run=yes: a switch without a value \(write --dry_run\)"):
        grammar.parse(["--dry_run=yes"])


def test_missing_script(tmp_path):
    cfg = compose([f"script={tmp_path}/nope.py"])
    settled = checks.validate(cfg, make_facts())
    with pytest.raises(UserError) as caught:
        probe.preflight(cfg, settled)
    assert str(caught.value) == f"script={tmp_path}/nope.py: the training script does not exist (profile=examples)"


def test_explicit_port_in_use_fails_before_launch():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        cfg = compose([f"launcher.master_port={port}"])
        settled = checks.validate(cfg, make_facts())
        with pytest.raises(UserError) as caught:
            probe.preflight(cfg, settled)
    assert str(caught.value) == (
        f"launcher.master_port={port}: port {port} is already in use on this host "
        "(choose a free port, or stop what holds it; ss -ltnp names it)"
    )


def test_a_port_picked_for_a_rendezvous_leaves_the_next_one_free_for_the_nodes_liveness_channel():
    """submit=ray picks node 0's rendezvous port on the node; the liveness channel takes the next port
    (launcher.node_port unset), so a pick whose next port is taken is passed over (a CI run failed
    with "port N+1 is already in use")."""
    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        held = busy.getsockname()[1]
        picks = iter([held - 1, held - 1 + 3])
        assert probe.free_port_pair("127.0.0.1", pick=lambda host: next(picks)) == held + 2


@pytest.mark.parametrize(
    "overrides, expected",
    [([], (900.0, 1800.0)), (["launcher.hang_timeout=null", "launcher.startup_timeout=60"], (None, 60.0))],
)
def test_the_hang_watchdog_is_on_by_default_and_null_turns_it_off(overrides, expected):
    plan = build(overrides)
    assert (plan.hang_timeout, plan.startup_timeout) == expected


# -- a dry run shows the plan even where this host cannot run it (issue 18 item 9) ----------------

UNRESOLVABLE = "host0.invalid"  # RFC 6761: .invalid never resolves


def warnings_of(stderr: str) -> list[str]:
    lines = stderr.splitlines()
    assert all(line.startswith("train_multigpu: warning: ") for line in lines), stderr
    return [line.removeprefix("train_multigpu: warning: ") for line in lines]


def test_a_dry_run_prints_the_plan_and_warns_where_this_host_cannot_resolve_node_0(run_cli, tmp_path):
    args = ("launcher=multinode", "launcher.nnodes=2", "launcher.node_rank=1", f"launcher.rdzv_endpoint={UNRESOLVABLE}")
    dry = run_cli(*args, "dry_run=true")
    assert dry.returncode == 0, dry.stderr
    command = dry.stdout.splitlines()[-1].split()
    assert command[command.index("--rdzv_endpoint") + 1] == f"{UNRESOLVABLE}:29400"
    assert "--rdzv_conf" not in command and "--local_addr" not in command  # unknown where the name does not resolve
    refused = f"launcher.rdzv_endpoint={UNRESOLVABLE}: the host '{UNRESOLVABLE}' does not resolve on this machine ("
    (line,) = warnings_of(dry.stderr)
    assert line.startswith(refused) and line.endswith(
        "(give node 0's address, or a host name every node resolves (/etc/hosts or DNS)); "
        "a real launch on this host refuses it"
    ), line
    real = run_cli(*args)
    assert real.returncode == 2 and real.stderr.startswith(f"train_multigpu: error: {refused}"), real.stderr
    assert len(real.stderr.splitlines()) == 1 and not (tmp_path / "runs").exists()


def test_a_dry_run_warns_once_per_fact_of_this_host_and_a_real_launch_refuses_the_first(run_cli, tmp_path):
    """GPUs cannot exist here: CUDA_VISIBLE_DEVICES declares one."""
    from conftest import clean_env

    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        port = busy.getsockname()[1]
        args = (
            "device=cuda",
            "launcher.nproc_per_node=2",
            f"launcher.master_port={port}",
            f"script={tmp_path}/missing.py",
            "python=/nonexistent/python3",
        )
        env = clean_env(CUDA_VISIBLE_DEVICES="0")
        dry = run_cli(*args, "dry_run=true", env=env)
        real = run_cli(*args, env=env)
    assert dry.returncode == 0, dry.stderr
    command = dry.stdout.splitlines()[-1].split()
    assert command[:5] == ["/nonexistent/python3", "-m", "torch.distributed.run", "--nproc_per_node", "2"]
    assert f"{tmp_path}/missing.py" in command
    found = warnings_of(dry.stderr)
    assert [line.split(":", 1)[0] for line in found] == [
        "launcher.nproc_per_node=2",
        "python=/nonexistent/python3",
        f"script={tmp_path}/missing.py",
        f"launcher.master_port={port}",
    ], found
    assert found[0].startswith("launcher.nproc_per_node=2: more workers than the 1 visible GPU(s)")
    assert found[3].startswith(f"launcher.master_port={port}: port {port} is already in use on this host")
    assert real.returncode == 2, real.stderr
    assert real.stderr == f"train_multigpu: error: {found[0].removesuffix('; a real launch on this host refuses it')}\n"
    assert not (tmp_path / "runs").exists()


def test_a_dry_run_of_cuda_without_a_gpu_has_no_count_to_plan(run_cli):
    """device=cuda with nproc_per_node=auto on a host without GPUs: one line, never a traceback
    (the plan divided the cores by 0 workers)."""
    from conftest import clean_env

    result = run_cli("device=cuda", "dry_run=true", env=clean_env(CUDA_VISIBLE_DEVICES=""))
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines()[-1].startswith(
        "train_multigpu: error: device=cuda: no GPU is visible on this machine"
    ), result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_a_mistake_in_the_config_is_still_an_error_in_a_dry_run(run_cli):
    result = run_cli("launcher.nproc_per_node=0", "dry_run=true")
    assert (
        result.returncode == 2 and "train_multigpu: error: launcher.nproc_per_node=0: an integer >= 1" in result.stderr
    )
    assert result.stdout == ""
