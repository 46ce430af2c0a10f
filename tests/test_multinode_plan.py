"""Multi-node keys, pure: join_timeout, local_addr, is_host, network_interface, rdzv_conf merging,
elastic MIN:MAX (docs/multinode.md). The real launches are in tests/test_multinode_launcher.py."""

from __future__ import annotations

from dataclasses import replace

import pytest

from conftest import make_facts
from launcher import checks, plan, probe, rendezvous
from launcher.config import grammar
from launcher.config.compose import compose, with_default_profile
from launcher.errors import UserError
from launcher.facts import Facing

C10D = ["launcher=multinode", "launcher.nnodes=2", "launcher.rdzv_endpoint=10.0.0.1:29400"]
STATIC = ["launcher=multinode", "launcher.nnodes=2", "launcher.master_addr=10.0.0.1", "launcher.master_port=29500"]


def build(argv: list[str], here: bool | None = None, local_addr: str | None = None) -> plan.LaunchPlan:
    """As conftest.build, with what probe.locate would find on the machine given explicitly."""
    import os

    line = grammar.parse(argv)
    cfg = compose(with_default_profile(line.overrides, os.environ), line.script_args)
    facts = make_facts()
    settled = checks.validate(cfg, facts)
    if here is not None:
        settled = replace(settled, endpoint_here=here)
    if local_addr is not None:
        settled = replace(settled, local_addr=local_addr)
    return plan.build(cfg, settled, facts, run_dir="/runs/r1")


def flags(p: plan.LaunchPlan) -> list[str]:
    argv = list(p.processes[0].argv)
    return argv[argv.index("torch.distributed.run") + 1 : argv.index(p.script)]


def error_of(argv: list[str]) -> str:
    with pytest.raises(UserError) as caught:
        build(argv)
    return str(caught.value)


def test_c10d_keeps_torchruns_join_timeout_unless_one_is_set():
    """Issue 13 item 17: no join_timeout of the launcher's own (it was 300 s, half of torch's 600 s)."""
    assert flags(build(C10D + ["launcher.node_rank=1"])) == [
        "--nproc_per_node",
        "2",
        "--nnodes",
        "2",
        "--node_rank",
        "1",
        "--rdzv_backend",
        "c10d",
        "--rdzv_endpoint",
        "10.0.0.1:29400",
    ]
    assert flags(build(C10D + ["launcher.join_timeout=45"]))[-2:] == ["--rdzv_conf", "join_timeout=45"]


def test_static_bounds_its_wait_with_timeout():
    assert "--rdzv_conf" not in flags(build(STATIC))  # torchrun's own 900 s
    assert flags(build(STATIC + ["launcher.join_timeout=20"]))[-4:] == [
        "--master_port",
        "29500",
        "--rdzv_conf",
        "timeout=20",
    ]


def test_single_node_gets_no_rendezvous_options():
    assert "--rdzv_conf" not in flags(build([]))
    assert "--rdzv_conf" not in flags(build(["launcher.master_port=29504"]))


def test_endpoint_node_hosts_the_store_others_do_not():
    assert flags(build(C10D + ["launcher.node_rank=0"], here=True))[-2:] == ["--rdzv_conf", "is_host=1"]
    # a second launch on the same machine (loopback multi-node) must not race node 0 for the store
    assert flags(build(C10D + ["launcher.node_rank=1"], here=True))[-2:] == ["--rdzv_conf", "is_host=0"]
    # elsewhere: torch's own guess (it finds the endpoint is not this machine)
    assert "--rdzv_conf" not in flags(build(C10D + ["launcher.node_rank=1"], here=False))
    assert flags(build(C10D + ["launcher.is_host=false"], here=True))[-2:] == ["--rdzv_conf", "is_host=0"]


def test_user_rdzv_conf_is_merged_never_duplicated():
    got = flags(build(C10D + ["launcher.rdzv_conf='read_timeout=30,join_timeout=90'"], here=True))
    assert got[-2:] == ["--rdzv_conf", "read_timeout=30,join_timeout=90,is_host=1"]
    assert got.count("--rdzv_conf") == 1
    got = flags(build(C10D + ["launcher.rdzv_conf='is_host=0'"], here=True))
    assert got[-2:] == ["--rdzv_conf", "is_host=0"]


def test_local_addr_comes_after_isaaclabs_flags():
    got = flags(build(C10D + ["launcher.rdzv_id=job", "launcher.max_restarts=1"], here=False, local_addr="10.0.0.2"))
    assert got[-6:] == [
        "--rdzv_id",
        "job",
        "--max_restarts",
        "1",
        "--local_addr",
        "10.0.0.2",
    ]
    assert flags(build(C10D + ["launcher.local_addr=10.0.0.2"]))[-2:] == ["--local_addr", "10.0.0.2"]


def test_network_interface_reaches_gloo_and_nccl_unless_a_profile_says_otherwise():
    p = build(C10D + ["launcher.network_interface=eth0"])
    assert p.env["GLOO_SOCKET_IFNAME"] == "eth0" and p.env["NCCL_SOCKET_IFNAME"] == "eth0"
    p = build(C10D + ["launcher.network_interface=eth0", "+worker_env.NCCL_SOCKET_IFNAME=ib0"])
    assert p.env["GLOO_SOCKET_IFNAME"] == "eth0" and p.env["NCCL_SOCKET_IFNAME"] == "ib0"
    p = build(
        [
            "launcher=skrl_jax",
            "launcher.nnodes=2",
            "launcher.coordinator_address=10.0.0.1:5123",
            "launcher.network_interface='ib0,ib1'",
        ]
    )
    assert p.env["NCCL_SOCKET_IFNAME"] == "ib0,ib1"


def test_the_interface_facing_node_0_reaches_gloo_nccl_and_local_addr():
    """Issue 13 item 23, pure: what probe.locate found (probe.source_address) is passed in."""
    facing = Facing("eth1", "10.0.0.2", "the rendezvous endpoint 10.0.0.1:29400")
    cfg = compose(C10D + ["launcher.node_rank=1"])
    settled = replace(checks.validate(cfg, make_facts()), facing=facing, local_addr="10.0.0.2")
    p = plan.build(cfg, settled, make_facts())
    assert p.env["GLOO_SOCKET_IFNAME"] == "eth1" and p.env["NCCL_SOCKET_IFNAME"] == "eth1"
    assert p.notes == (
        "network: eth1 (10.0.0.2) faces the rendezvous endpoint 10.0.0.1:29400: GLOO_SOCKET_IFNAME, "
        "NCCL_SOCKET_IFNAME, --local_addr 10.0.0.2 set to it (launcher.network_interface=NAME chooses another)",
    )
    assert "# network: eth1 (10.0.0.2) faces" in plan.describe(p)
    # a variable the user exported, a profile's or worker_env's wins; the note names only what was set
    facts = make_facts(env={"NCCL_SOCKET_IFNAME": "ib0"})
    cfg = compose(C10D + ["+worker_env.GLOO_SOCKET_IFNAME=eth7"])
    p = plan.build(cfg, replace(checks.validate(cfg, facts), facing=facing), facts)
    assert "NCCL_SOCKET_IFNAME" not in p.env and p.env["GLOO_SOCKET_IFNAME"] == "eth7" and p.notes == ()


def test_elastic_min_max_nodes():
    p = build(["launcher=multinode", "launcher.nnodes=1:4", "launcher.rdzv_endpoint=10.0.0.1:29400"])
    assert flags(p)[:4] == ["--nproc_per_node", "2", "--nnodes", "1:4"]
    assert flags(p)[-2:] == ["--rdzv_endpoint", "10.0.0.1:29400"] and p.nnodes == "1:4"
    assert "launcher.nnodes=1:4: an integer >= 1 (elastic MIN:MAX is torchrun only)" in error_of(
        ["launcher=skrl_jax", "launcher.nnodes=1:4", "launcher.coordinator_address=h:1"]
    )


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            C10D + ["launcher.join_timeout=0"],
            "launcher.join_timeout=0: finite seconds in 1..604800 (how long a node waits for the other nodes to join)",
        ),
        (
            C10D + ["launcher.join_timeout=30", "launcher.rdzv_conf='join_timeout=60'"],
            "launcher.join_timeout=30: also given as join_timeout=60 in launcher.rdzv_conf (give it once)",
        ),
        (
            STATIC + ["launcher.join_timeout=30", "launcher.rdzv_conf='timeout=60'"],
            "launcher.join_timeout=30: also given as timeout=60 in launcher.rdzv_conf (give it once)",
        ),
        (
            C10D + ["launcher.rdzv_conf=join_timeout"],
            "launcher.rdzv_conf=join_timeout: comma-separated key=value pairs (e.g. join_timeout=300,read_timeout=60)",
        ),
        (C10D + ["launcher.rdzv_conf='a=1,a=2'"], "launcher.rdzv_conf=a=1,a=2: a is given twice"),
        (
            STATIC + ["launcher.is_host=true"],
            "launcher.is_host=true: c10d rendezvous only (this launch uses static) (static: the node with node_rank 0 hosts the store at master_addr:master_port)",  # noqa: E501
        ),
        (
            C10D + ["launcher.is_host=true", "launcher.rdzv_conf='is_host=1'"],
            "launcher.is_host=true: also given as is_host=1 in launcher.rdzv_conf (give it once)",
        ),
        (
            C10D + ["launcher.rdzv_backend=etcd", "launcher.join_timeout=9"],
            "launcher.join_timeout=9: c10d or static rendezvous only (rdzv_backend=etcd) (set the timeout in launcher.rdzv_conf)",  # noqa: E501
        ),
        (
            C10D + ["launcher.network_interface='eth 0'"],
            "launcher.network_interface=eth 0: a network interface name like eth0 or ib0, or a comma list of them",
        ),
        (
            C10D + ["launcher.local_addr=10.0.0.2:29400/x"],
            "launcher.local_addr=10.0.0.2:29400/x: this node's address or host name as the other nodes reach it (no port)",  # noqa: E501
        ),
        (
            ["launcher=skrl_jax", "launcher.join_timeout=5"],
            "launcher.join_timeout=5: torchrun only; launcher=skrl_jax does not take it",
        ),
    ],
)
def test_messages(argv, message):
    assert message in error_of(argv)


def test_machine_checks_name_the_key(monkeypatch):
    from launcher import probe as host

    cfg = compose(C10D + ["launcher.network_interface=eth9"])
    settled = checks.validate(cfg, make_facts())
    monkeypatch.setattr(host, "interface_names", lambda: ["lo", "eth0"])
    with pytest.raises(
        UserError,
        match=r"^launcher.network_interface=eth9: no network interface eth9 on this host \(available: lo, eth0\)$",
    ):
        probe.locate(cfg, settled)
    cfg = compose(C10D + ["launcher.network_interface=eth0"])
    monkeypatch.setattr(host, "interface_ipv4", lambda name: "10.0.0.7")
    monkeypatch.setattr(host, "is_local_address", lambda name: False)
    located = probe.locate(cfg, checks.validate(cfg, make_facts()))
    assert located.local_addr == "10.0.0.7" and located.endpoint_here is False


def test_jax_on_cpu_refuses_a_hostname_on_loopback(monkeypatch, tmp_path):
    from launcher import probe as host

    script = tmp_path / "train.py"
    script.write_text("")
    cfg = compose(
        ["launcher=skrl_jax", "launcher.nnodes=2", "launcher.coordinator_address=10.0.0.1:5123", f"script={script}"]
    )
    settled = checks.validate(cfg, make_facts())
    monkeypatch.setattr(host, "hostname_addresses", lambda: ("box", ["127.0.1.1"]))
    with pytest.raises(UserError) as caught:
        probe.preflight(cfg, settled)
    assert str(caught.value) == (
        "launcher.coordinator_address=10.0.0.1:5123: this host's name 'box' resolves to 127.0.1.1, so JAX's CPU "
        "(gloo) collectives would offer the other nodes a loopback address (make 'box' resolve to this node's own "
        "address (/etc/hosts or DNS); see docs/multinode.md)"
    )
    monkeypatch.setattr(host, "hostname_addresses", lambda: ("box", ["10.0.0.2"]))
    probe.preflight(cfg, settled)


def test_the_hint_names_the_timeout_in_force():
    """Issue 13 item 17: with no join_timeout of the launcher's own, torch's defaults are in force."""
    assert rendezvous.waited_timeout({}, "c10d", None) == 600
    assert rendezvous.waited_timeout({}, "static", None) == 900
    assert rendezvous.waited_timeout({"join_timeout": "90"}, "c10d", None) == 90
    assert rendezvous.waited_timeout({}, "c10d", 45) == 45
    hint = rendezvous.failure_hint(
        "RendezvousTimeoutError", "c10d", "10.0.0.1:29400", "2", 1, None, rendezvous.waited_timeout({}, "c10d", None)
    )
    assert hint.startswith("node 1 waited 600 s for 2 nodes at 10.0.0.1:29400 (c10d rendezvous, rdzv_id none)")


def test_failure_hint_static_and_unreachable():
    hint = rendezvous.failure_hint(
        "DistStoreError: ... waiting for clients. 1/2 clients joined.", "static", "10.0.0.1:29500", "2", 0, None, 20
    )
    assert hint.startswith(
        "node 0 waited 20 s for 2 nodes at 10.0.0.1:29500 (static rendezvous) and not all of them joined"
    )
    assert "same launcher.master_addr, launcher.master_port and launcher.nnodes" in hint
    hint = rendezvous.failure_hint("RendezvousConnectionError: ...", "c10d", "10.0.0.1:29400", "2", 1, None, 300)
    assert hint.startswith("node 1 could not reach the c10d rendezvous at 10.0.0.1:29400")
    assert rendezvous.failure_hint("ChildFailedError", "c10d", "10.0.0.1:29400", "2", 1, None, 300) is None
