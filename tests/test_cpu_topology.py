"""launcher.cpu_binding's lists on machines this one is not: sysfs trees of real shapes written into
tmp_path (tests/sysfs_trees.py), read by launcher/cpu_topology.py, placed by launcher/cpu_binding.py --
and, for the torchrun modes, the same lists as torch's own --numa-binding computes on that tree."""

from __future__ import annotations

import os
import types
from pathlib import Path

import pytest

import sysfs_trees
from launcher import cgroups, cpu_binding, cpu_topology
from launcher.cpu_topology import Allowed, format_cpulist, parse_cpulist
from launcher.errors import UserError
from sysfs_trees import CPU_HOST, DGX_H100, EPYC_NPS2, FLAT

_TREES: dict = {}


@pytest.fixture(scope="module")
def trees(tmp_path_factory):
    """Each shape's tree written once for the module (a 256-CPU tree is thousands of files)."""
    _TREES.clear()
    _TREES["root"] = tmp_path_factory.mktemp("sysfs")
    yield
    _TREES.clear()


def machine(_tmp_path, shape):
    if shape not in _TREES:
        folder = _TREES["root"] / f"shape{len(_TREES)}"
        _TREES[shape] = cpu_topology.read(str(sysfs_trees.write(folder, shape)))
    return _TREES[shape]


pytestmark = pytest.mark.usefixtures("trees")


def every(shape) -> Allowed:
    return Allowed(tuple(range(shape.cores * shape.smt)), "test: every CPU")


def lists(value, m, allowed, nproc, gpus=None) -> list[str]:
    return [format_cpulist(c) for c in cpu_binding.masks(cpu_binding.parse(value), m, allowed, nproc, gpus)]


def test_reads_a_dgx_h100(tmp_path):
    m = machine(tmp_path, DGX_H100)
    assert len(m.cpus) == 224 and m.core[112] == 0 and m.core[0] == 0 and m.package[60] == 1
    assert {node: format_cpulist(cpus) for node, cpus in m.nodes.items()} == {0: "0-55,112-167", 1: "56-111,168-223"}
    assert [gpu.node for gpu in m.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]  # the NIC and the NVSwitch are no GPUs
    assert m.gpus[0].address == "0000:18:00.0"
    assert m.complex[100] == 56  # the socket's L3


def test_dgx_h100_modes(tmp_path):
    m, gpus = machine(tmp_path, DGX_H100), tuple(range(8))
    assert lists("node", m, every(DGX_H100), 8, gpus) == ["0-55,112-167"] * 4 + ["56-111,168-223"] * 4
    assert lists("socket", m, every(DGX_H100), 8, gpus) == lists("node", m, every(DGX_H100), 8, gpus)
    # 56 cores per node over its 4 GPUs: 14 cores each, with their SMT siblings
    assert lists("exclusive", m, every(DGX_H100), 8, gpus) == [
        "0-13,112-125",
        "14-27,126-139",
        "28-41,140-153",
        "42-55,154-167",
        "56-69,168-181",
        "70-83,182-195",
        "84-97,196-209",
        "98-111,210-223",
    ]
    # one L3 per socket: every rank of a node gets the whole node
    assert lists("core-complex", m, every(DGX_H100), 8, gpus) == lists("node", m, every(DGX_H100), 8, gpus)


def test_epyc_core_complexes_and_sockets(tmp_path):
    m, gpus = machine(tmp_path, EPYC_NPS2), tuple(range(8))
    assert len(m.nodes) == 4
    assert lists("core-complex", m, every(EPYC_NPS2), 8, gpus)[:3] == ["0-7,128-135", "8-15,136-143", "32-39,160-167"]
    assert lists("socket", m, every(EPYC_NPS2), 8, gpus)[2] == "0-63,128-191"  # GPU 2: node 1, socket 0
    assert lists("node", m, every(EPYC_NPS2), 8, gpus)[2] == "32-63,160-191"
    assert lists("exclusive", m, every(EPYC_NPS2), 8, gpus)[7] == "112-127,240-255"


def test_visible_gpus_pick_their_nodes(tmp_path):
    """CUDA_VISIBLE_DEVICES=4,5,6,7: local rank 0 drives GPU 4 (node 1); the node's 4 visible GPUs share it."""
    m = machine(tmp_path, DGX_H100)
    gpus = cpu_binding.visible_gpus({"CUDA_VISIBLE_DEVICES": "4,5,6,7"}, 8)
    assert lists("exclusive", m, every(DGX_H100), 4, gpus) == [
        "56-69,168-181",
        "70-83,182-195",
        "84-97,196-209",
        "98-111,210-223",
    ]
    # two GPUs visible on node 0: they split its 56 cores
    gpus = cpu_binding.visible_gpus({"CUDA_VISIBLE_DEVICES": "2,3"}, 8)
    assert lists("exclusive", m, every(DGX_H100), 2, gpus) == ["0-27,112-139", "28-55,140-167"]


def test_cpu_launch_splits_ranks_over_the_nodes(tmp_path):
    m = machine(tmp_path, CPU_HOST)
    assert lists("node", m, every(CPU_HOST), 4) == ["0-7,16-23"] * 2 + ["8-15,24-31"] * 2
    assert lists("exclusive", m, every(CPU_HOST), 4) == ["0-3,16-19", "4-7,20-23", "8-11,24-27", "12-15,28-31"]
    # an odd split: the lowest ranks of a node take one core more
    assert lists("exclusive", m, every(CPU_HOST), 6) == [
        "0-2,16-18",
        "3-5,19-21",
        "6-7,22-23",
        "8-10,24-26",
        "11-13,27-29",
        "14-15,30-31",
    ]
    assert cpu_binding.omp_threads(cpu_binding.masks(cpu_binding.parse("node"), m, every(CPU_HOST), 4)) == (8, 8, 8, 8)


def test_only_allowed_cpus_count(tmp_path):
    """A cgroup cpuset or SLURM's allocation of 0-3 and their siblings: the ranks split those."""
    m = machine(tmp_path, CPU_HOST)
    allowed = Allowed(parse_cpulist("0-3,16-19"), "test: cpuset")
    assert lists("exclusive", m, allowed, 2) == ["0-1,16-17", "2-3,18-19"]
    assert lists("node", m, allowed, 2) == ["0-3,16-19"] * 2  # node 1 holds none: every rank on node 0


def test_a_flat_machine_is_one_node(tmp_path):
    m = machine(tmp_path, FLAT)
    assert m.nodes == {0: (0, 1, 2, 3)} and [g.node for g in m.gpus] == [0, 0]
    assert lists("exclusive", m, every(FLAT), 2, (0, 1)) == ["0-1", "2-3"]


@pytest.mark.parametrize(
    ("value", "nproc", "gpus", "allowed", "message"),
    [
        (
            "exclusive",
            3,
            None,
            "0-1",
            "launcher.cpu_binding=exclusive: 3 local ranks share NUMA node 0's 2 usable physical core(s) (0-1): "
            "each needs one of its own (fewer ranks, launcher.cpu_binding=node, or an explicit list per local rank)",
        ),
        (
            "node",
            2,
            (0, 7),
            "0-15",
            "launcher.cpu_binding=node: GPU 0 is not among the 0 NVIDIA GPU(s) that {sys}/bus/pci/devices lists "
            "(give an explicit list per local rank)",
        ),
        (
            ["0-1", "40"],
            2,
            None,
            "0-31",
            "launcher.cpu_binding=[0-1,40]: local rank 1's CPU(s) 40 are not among those this launcher may use "
            "(0-31: test)",
        ),
        (
            ["0"],
            2,
            None,
            "0-31",
            "launcher.cpu_binding=[0]: 1 CPU list(s) for 2 local rank(s): one list per local rank "
            "(launcher.nproc_per_node sets the local ranks)",
        ),
    ],
)
def test_a_binding_that_cannot_apply_is_one_line(tmp_path, value, nproc, gpus, allowed, message):
    m = machine(tmp_path, CPU_HOST)
    with pytest.raises(UserError) as raised:
        cpu_binding.masks(cpu_binding.parse(value), m, Allowed(parse_cpulist(allowed), "test"), nproc, gpus)
    assert str(raised.value) == message.format(sys=m.source)


def test_a_gpu_node_without_allowed_cpus_is_refused(tmp_path):
    m = machine(tmp_path, DGX_H100)
    with pytest.raises(UserError, match=r"GPU 4's NUMA node 1 has none of the CPUs this launcher may use \(0-7: t\)"):
        cpu_binding.masks(cpu_binding.parse("node"), m, Allowed(tuple(range(8)), "t"), 8, tuple(range(8)))


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("numa", "one of none, node, socket, exclusive, core-complex, or a CPU list per local rank"),
        ("0-3", "(a list per local rank: launcher.cpu_binding=[0-3] binds one rank)"),
        (["0-3", "x"], "local rank 1: 'x' is not a CPU or a range of CPUs"),
        (["3-1"], "local rank 0: '3-1' is not a CPU"),
        ([-1], "local rank 0's CPU -1 is negative"),
        ([True], "local rank 0's entry True is not a CPU list"),
        ([], "one of none"),
        (4, "launcher.cpu_binding=4: one of none"),
    ],
)
def test_bad_values(value, message):
    with pytest.raises(UserError) as raised:
        cpu_binding.parse(value)
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_this_machine(tmp_path):
    """The real /sys and the real affinity: every CPU this process may use is a CPU of the machine."""
    m = cpu_topology.read()
    allowed = cpu_topology.allowed()
    assert allowed.cpus and set(allowed.cpus) <= set(m.cpus)
    assert set(allowed.cpus) == os.sched_getaffinity(0)


def _mounts(proc: Path, *lines: str) -> None:
    (proc / "mountinfo").write_text("".join(f"{30 + n} 25 0:{26 + n} {line}\n" for n, line in enumerate(lines)))


def test_allowed_reads_the_cgroup_cpuset(tmp_path):
    """A container's --cpuset-cpus (cgroup v2) and SLURM's task/cgroup (v1) shrink what counts."""
    proc = tmp_path / "proc" / "self"
    proc.mkdir(parents=True)
    cgroup = tmp_path / "cgroup"
    _mounts(proc, f"/ {cgroup} rw,nosuid - cgroup2 cgroup2 rw")
    (proc / "cgroup").write_text("0::/machine.slice/libpod-abc.scope\n")
    scope = cgroup / "machine.slice" / "libpod-abc.scope"
    scope.mkdir(parents=True)
    (scope / "cpuset.cpus.effective").write_text("2-3\n")
    got = cpu_topology.allowed(range(8), str(tmp_path / "proc"))
    assert got.cpus == (2, 3) and "cpuset 2-3" in got.source and "affinity 0-7" in got.source
    _mounts(
        proc,
        f"/ {cgroup}/cpuset rw,nosuid - cgroup cgroup rw,cpuset",
        f"/ {cgroup}/memory rw - cgroup cgroup rw,memory",
    )
    (proc / "cgroup").write_text("12:cpuset:/slurm/uid_0/job_7/step_0\n3:memory:/x\n")
    step = cgroup / "cpuset" / "slurm" / "uid_0" / "job_7" / "step_0"
    step.mkdir(parents=True)
    (step / "cpuset.effective_cpus").write_text("0,5\n")
    assert cpu_topology.allowed(range(8), str(tmp_path / "proc")).cpus == (0, 5)
    (proc / "cgroup").write_text("")  # nothing to read: the affinity alone
    assert cpu_topology.allowed((1, 2), str(tmp_path / "proc")).cpus == (1, 2)


def test_the_cpuset_is_found_where_mountinfo_says_the_hierarchy_is(tmp_path):
    """The cgroup mount is read from mountinfo, as run/postmortem/oom.py reads the memory one
    (launcher/cgroups.py, one way): a v1 cpuset co-mounted as ``cpu,cpuset`` somewhere else than
    /sys/fs/cgroup/cpuset, and a cgroup namespace (the cgroup shown as ``/``, the mount's root the
    job's), were missed by the path guessed under /sys/fs/cgroup."""
    proc = tmp_path / "proc" / "self"
    proc.mkdir(parents=True)
    mnt = tmp_path / "mnt" / "cpu,cpuset"
    _mounts(proc, f"/ {mnt} rw,nosuid - cgroup cgroup rw,cpu,cpuset")
    (proc / "cgroup").write_text("5:cpu,cpuset:/slurm/job_9\n")
    (mnt / "slurm" / "job_9").mkdir(parents=True)
    (mnt / "slurm" / "job_9" / "cpuset.effective_cpus").write_text("1,3\n")
    got = cpu_topology.allowed(range(4), str(tmp_path / "proc"))
    assert got.cpus == (1, 3) and f"({mnt}/slurm/job_9/cpuset.effective_cpus)" in got.source
    inner = tmp_path / "ns"
    inner.mkdir()
    (inner / "cpuset.cpus.effective").write_text("2\n")
    _mounts(proc, f"/kubepods/pod1 {inner} rw - cgroup2 cgroup2 rw")
    (proc / "cgroup").write_text("0::/\n")
    assert cpu_topology.allowed(range(4), str(tmp_path / "proc")).cpus == (2,)
    assert cgroups.dirs("cpuset", str(proc / "cgroup"), str(proc / "mountinfo")) == [str(inner)]


# -- the same lists as torch's own --numa-binding (torch/numa/binding.py) on the same trees ----------


def _torch_on(monkeypatch, root: str, gpu_nodes, allowed):
    """torch's NUMA binding module reading ``root`` instead of /sys, its GPUs' nodes from the tree."""
    binding = pytest.importorskip("torch.numa.binding")

    def moved(path: str) -> str:
        return root + path[len("/sys") :] if str(path).startswith("/sys/") else path

    shim = types.SimpleNamespace(
        listdir=lambda path: os.listdir(moved(path)), path=os.path, sched_getaffinity=lambda pid: set(allowed)
    )
    monkeypatch.setattr(binding, "os", shim)
    monkeypatch.setattr(binding, "open", lambda path, *a, **k: open(moved(path), *a, **k), raising=False)
    monkeypatch.setattr(binding, "_get_gpu_count", lambda: len(gpu_nodes))
    monkeypatch.setattr(
        binding, "_get_numa_node_index_for_gpu_index", lambda *, gpu_index: max(gpu_nodes[gpu_index], 0)
    )
    return binding


@pytest.mark.parametrize("shape", [DGX_H100, EPYC_NPS2], ids=["dgx-h100", "epyc-nps2"])
@pytest.mark.parametrize("mode", cpu_binding.TORCH_MODES)
def test_the_same_lists_as_torchrun(tmp_path, monkeypatch, shape, mode):
    m = machine(tmp_path, shape)
    allowed = every(shape)
    gpus = tuple(range(len(shape.gpu_nodes)))
    ours = cpu_binding.masks(cpu_binding.parse(mode), m, allowed, len(gpus), gpus)
    binding = _torch_on(monkeypatch, m.source, shape.gpu_nodes, allowed.cpus)
    options = binding.NumaOptions(affinity_mode=binding.AffinityMode(mode))
    theirs = [binding._get_logical_cpus_to_bind_to(gpu_index=g, numa_options=options) for g in gpus]
    assert [format_cpulist(c) for c in ours] == [format_cpulist(c) for c in theirs]
