"""launcher.cpu_binding end to end: its bad values (one line, exit 2, nothing written), who binds
(torchrun's --numa-binding on GPUs, else the rank wrapper), and real launches on this machine's CPUs
(torch and JAX): each rank's Cpus_allowed_list is its own CPU. The larger shapes: test_cpu_topology.py."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

import sysfs_trees
from conftest import clean_env, make_facts
from inproc import environment, run_main
from launcher import checks, cpu_placement, cpu_topology, names, paths, plan
from launcher.addresses import Endpoint
from launcher.config import grammar
from launcher.config.compose import compose, with_default_profile
from launcher.cpu_topology import Allowed
from require import unavailable

# prints what the kernel says of this process and of a child it starts, and the OMP threads it got
PROBE = """\
import os, subprocess
def allowed(status):
    return next(l.split(":", 1)[1].strip() for l in status.splitlines() if l.startswith("Cpus_allowed_list"))
mine = allowed(open("/proc/self/status").read())
child = allowed(subprocess.run(["cat", "/proc/self/status"], capture_output=True, text=True).stdout)
rank = os.environ.get("RANK", os.environ.get("JAX_RANK"))
print(f"PROBE rank={rank} cpus={mine} child={child} omp={os.environ.get('OMP_NUM_THREADS')}", flush=True)
"""


def bad(tmp_path, *argv: str):
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return run_main(list(argv), str(tmp_path), environment(str(home), HOME=str(home)))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["launcher.cpu_binding=numa"],
            "launcher.cpu_binding=numa: one of none, node, socket, exclusive, core-complex, or a CPU list per local "
            "rank like [0-3,4-7] or ['0,2','1,3'] (docs/cpu_placement.md)",
        ),
        (
            ["launcher.cpu_binding=0-1"],
            "launcher.cpu_binding=0-1: one of none, node, socket, exclusive, core-complex, or a CPU list per local "
            "rank like [0-3,4-7] or ['0,2','1,3'] (docs/cpu_placement.md) (a list per local rank: "
            "launcher.cpu_binding=[0-1] binds one rank)",
        ),
        (
            ["launcher.cpu_binding=[0,x]", "launcher.nproc_per_node=2"],
            "launcher.cpu_binding=[0,x]: local rank 1: 'x' is not a CPU or a range of CPUs (like 0-3, 8 or 0-15:2) "
            "(one of none, node, socket, exclusive, core-complex, or a CPU list per local rank like [0-3,4-7] or "
            "['0,2','1,3'] (docs/cpu_placement.md))",
        ),
        (
            ["launcher.cpu_binding=[0]", "launcher.nproc_per_node=2"],
            "launcher.cpu_binding=[0]: 1 CPU list(s) for 2 local rank(s) (launcher.nproc_per_node=2): one per local "
            "rank",
        ),
        (
            ["launcher.cpu_binding=[0,4095]", "launcher.nproc_per_node=2"],
            "launcher.cpu_binding=[0,4095]: local rank 1's CPU(s) 4095 are not among those this launcher may use",
        ),
        (
            ["+worker_env.TRAIN_MULTIGPU_CPU_BIND=0"],
            "worker_env.TRAIN_MULTIGPU_CPU_BIND",
        ),
    ],
)
def test_a_bad_value_is_one_line_exit_2_nothing_written(tmp_path, argv, message):
    result = bad(tmp_path, *argv, "run_root=runs")
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stdout + result.stderr
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("submit", ["slurm", "k8s", "ray"])
def test_a_submitted_launch_checks_the_value_before_submitting(tmp_path, submit):
    """Placed on each node when it launches; the form is checked where it is submitted from."""
    extra = {"k8s": ["k8s.image=img:1"], "ray": ["ray.address=http://127.0.0.1:9", "launcher.nproc_per_node=2"]}.get(
        submit, []
    )
    result = bad(tmp_path, f"submit={submit}", *extra, "launcher.cpu_binding=[0,x]", "dry_run=true")
    assert result.returncode == 2, result.stdout + result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("train_multigpu: error: launcher.cpu_binding=[0,x]: local rank 1: 'x' is not a CPU")


def test_exclusive_with_more_ranks_than_cpus_is_refused(tmp_path):
    """A real launch: one line, exit 2, nothing written; a dry run prints the plan and warns."""
    ranks = str(len(os.sched_getaffinity(0)) + 1)
    result = bad(tmp_path, "launcher.cpu_binding=exclusive", f"launcher.nproc_per_node={ranks}", "run_root=runs")
    assert result.returncode == 2, result.stdout + result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert f"launcher.cpu_binding=exclusive: {ranks} local ranks share NUMA node" in line
    assert "each needs one of its own (fewer ranks, launcher.cpu_binding=node, or an explicit list" in line
    assert not (tmp_path / "runs").exists()
    dry = bad(tmp_path, "launcher.cpu_binding=exclusive", f"launcher.nproc_per_node={ranks}", "dry_run=true")
    assert dry.returncode == 0 and "warning: launcher.cpu_binding=exclusive" in dry.stderr


# -- who binds: torchrun's --numa-binding on GPUs, else the rank wrapper ------------------------------


@pytest.fixture(scope="module")
def dgx(tmp_path_factory) -> cpu_topology.Machine:
    root = tmp_path_factory.mktemp("sysfs")
    return cpu_topology.read(str(sysfs_trees.write(root, sysfs_trees.Shape(2, 4, 2, 1, None, (0, 0, 1, 1)))))


def placed(argv, machine, by_torchrun, gpus=4, env=None):
    line = grammar.parse(argv)
    cfg = compose(with_default_profile(line.overrides, {}), line.script_args)
    facts = replace(make_facts(gpus=gpus, cpus=16, env=env), cpus=Allowed(tuple(range(16)), "test"))
    settled = checks.validate(cfg, facts)
    settled = cpu_placement.place(cfg, settled, facts, machine=machine, can_bind=by_torchrun)
    if settled.coordinator is None and argv[0] == "launcher=skrl_jax":
        settled = replace(settled, coordinator=Endpoint("127.0.0.1", 29400))
    return plan.wrapped(plan.build(cfg, settled, facts, order=line.order), paths.WORKER_WRAPPER)


def test_torchrun_binds_on_gpus(dgx):
    launch = placed(["launcher.cpu_binding=exclusive", "device=cuda", "launcher.nproc_per_node=4"], dgx, True)
    argv = launch.processes[0].argv
    assert argv[argv.index("--numa-binding") + 1] == "exclusive"
    assert names.CPU_BIND_VAR not in launch.env  # torchrun binds; the wrapper only sets OMP_NUM_THREADS
    assert launch.env[names.OMP_THREADS_VAR] == "4;4;4;4" and launch.env["OMP_NUM_THREADS"] == "4"
    text = plan.describe(launch)
    assert "# cpu binding: launcher.cpu_binding=exclusive: torchrun --numa-binding exclusive binds them" in text
    assert "# local rank 0: CPUs 0-1,8-9 (OMP_NUM_THREADS=4)" in text
    assert "# local rank 3: CPUs 6-7,14-15 (OMP_NUM_THREADS=4)" in text


def test_the_wrapper_binds_where_torchrun_cannot(dgx):
    """An older torchrun (or no numactl), a JAX launch, an explicit list: the rank wrapper binds."""
    old = placed(["launcher.cpu_binding=node", "device=cuda", "launcher.nproc_per_node=4"], dgx, False)
    assert "--numa-binding" not in old.processes[0].argv
    assert old.env[names.CPU_BIND_VAR] == "0-3,8-11;0-3,8-11;4-7,12-15;4-7,12-15"
    assert old.env[names.OMP_THREADS_VAR] == "4;4;4;4"
    jax = placed(["launcher=skrl_jax", "launcher.cpu_binding=socket", "launcher.nproc_per_node=2"], dgx, True, 0)
    assert jax.env[names.CPU_BIND_VAR] == "0-3,8-11;4-7,12-15"
    listed = placed(
        ["launcher.cpu_binding=[0,'1,9']", "launcher.nproc_per_node=2", "+worker_env.OMP_NUM_THREADS=3"], dgx, True, 0
    )
    assert listed.env[names.CPU_BIND_VAR] == "0;1,9" and names.OMP_THREADS_VAR not in listed.env  # the user's OMP
    none = placed(["launcher.nproc_per_node=2"], dgx, True, 0)
    assert names.CPU_BIND_VAR not in none.env and "--numa-binding" not in none.processes[0].argv


def test_gpus_named_by_uuid_cannot_be_placed(dgx):
    env = {"CUDA_VISIBLE_DEVICES": "GPU-5a3c,GPU-77ff"}
    line = grammar.parse(["launcher.cpu_binding=node", "device=cuda", "launcher.nproc_per_node=2"])
    cfg = compose(with_default_profile(line.overrides, {}), line.script_args)
    facts = make_facts(gpus=2, env=env)
    refused = []
    cpu_placement.place(cfg, checks.validate(cfg, facts), facts, refused.append, machine=dgx, can_bind=True)
    assert [str(e) for e in refused] == [
        "launcher.cpu_binding=node: binds each rank near its GPU, and CUDA_VISIBLE_DEVICES names GPUs by UUID (no "
        "PCI address to find their NUMA node by) (GPU indices in CUDA_VISIBLE_DEVICES, or an explicit list per local "
        "rank)"
    ]


def test_a_dry_run_warns_once_of_a_list_count_auto_got_wrong(dgx):
    """nproc_per_node=auto counted this host's CPUs: checks.validate warns of the count, placing does not again."""
    line = grammar.parse(["launcher.cpu_binding=[0]", "launcher.nproc_per_node=auto"])
    cfg = compose(with_default_profile(line.overrides, {}), line.script_args)
    facts = replace(make_facts(cpus=2), cpus=Allowed((0, 1), "test"))
    refused = []
    settled = cpu_placement.place(cfg, checks.validate(cfg, facts, refused.append), facts, refused.append, dgx, False)
    assert [str(e) for e in refused] == [
        "launcher.cpu_binding=[0]: 1 CPU list(s) for 2 local rank(s) (launcher.nproc_per_node=auto): one per local rank"
    ]
    assert settled.cpu_lists == ()


def test_the_installed_torchrun_is_asked_by_its_parser(tmp_path):
    """torch 2.13 here has --numa-binding; an interpreter whose torchrun lacks it (older torch) does not."""
    assert cpu_placement.torchrun_has_numa_binding(sys.executable)
    old = tmp_path / "python"
    old.write_text("#!/bin/sh\necho False\n")
    old.chmod(old.stat().st_mode | stat.S_IXUSR)
    assert not cpu_placement.torchrun_has_numa_binding(str(old))


def test_a_list_the_kernel_refuses_ends_the_rank_with_one_line(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("print('ran')\n")
    env = {**clean_env(), names.CPU_BIND_VAR: "0;4095", "JAX_LOCAL_RANK": "1", "JAX_RANK": "1"}
    done = subprocess.run(
        [sys.executable, paths.WORKER_WRAPPER, str(script)], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and "ran" not in done.stdout
    assert done.stderr.startswith("train_multigpu: error: launcher.cpu_binding: local rank 1 cannot run on CPUs 4095")


# -- real launches on this machine's CPUs ----------------------------------------------------------


@pytest.fixture
def two_cores() -> list[int]:
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        unavailable("CORES", f"needs 2 usable CPU cores ({len(cores)} here)")
    return cores[:2]


def probe_lines(run_dir: Path) -> dict[str, str]:
    out = {}
    for log in sorted((run_dir / "logs").glob("rank*.log")):
        for line in log.read_text().splitlines():
            if line.startswith("PROBE"):
                fields = dict(item.split("=", 1) for item in line.split()[1:])
                out[fields.pop("rank")] = fields
    return out


@pytest.mark.parametrize("topology", ["single_node", "skrl_jax"])
def test_exclusive_gives_each_rank_its_own_cpu(run_cli, tmp_path, two_cores, topology):
    """Two ranks on this machine's first two usable CPUs (torchrun's ranks and the JAX ranks alike):
    each rank and its children run on its own CPU, with OMP_NUM_THREADS=1; runs show prints them."""
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    # exactly two usable CPUs: exclusive gives one each; more: an explicit list of the first two
    exact = len(os.sched_getaffinity(0)) == 2
    value = "exclusive" if exact else f"[{two_cores[0]},{two_cores[1]}]"
    result = run_cli(
        f"launcher={topology}", f"launcher.cpu_binding={value}", "launcher.nproc_per_node=2", f"script={script}"
    )
    expected = [str(two_cores[0]), str(two_cores[1])]
    assert result.returncode == 0, result.stdout + result.stderr
    run_dir = Path(result.stdout.split("run directory: ")[1].split()[0])
    seen = probe_lines(run_dir)
    assert seen == {str(r): {"cpus": expected[r], "child": expected[r], "omp": "1"} for r in range(2)}, seen
    assert [(run_dir / "logs" / f"rank{r}.cpus").read_text() for r in range(2)] == [c + "\n" for c in expected]
    shown = run_cli("runs", "show", "last").stdout
    assert f"  rank 0: {expected[0]}\n  rank 1: {expected[1]}\n" in shown
    # what anyone may write into a shared run root cannot hang or crash it: a FIFO, text, a large file
    os.mkfifo(run_dir / "logs" / "rank5.cpus")
    (run_dir / "logs" / "rank6.cpus").write_text("$(reboot)\n")
    (run_dir / "logs" / "rank7.cpus").write_text("0," * 5000)
    again = run_cli("runs", "show", "last", timeout=60)
    assert again.returncode == 0 and again.stdout == shown, again.stdout + again.stderr


def test_a_sweep_lane_binds_within_its_own_cores(dgx):
    """sweep.parallel=N: a job's ranks are placed within its lane's cores (and a local node's within its share)."""
    from launcher.sweep import lanes

    facts = lanes.job_facts(make_facts(cpus=16), lanes.Slot(1, cpus=(4, 5, 12, 13)))
    assert facts.cpus == Allowed((4, 5, 12, 13), "sweep lane 1's cores")
    line = grammar.parse(["launcher.cpu_binding=exclusive", "launcher.nproc_per_node=2"])
    cfg = compose(with_default_profile(line.overrides, {}), line.script_args)
    settled = cpu_placement.place(cfg, checks.validate(cfg, facts), facts, machine=dgx, can_bind=False)
    assert settled.cpu_lists == ((4, 12), (5, 13))
    share = lanes.node_facts(make_facts(cpus=16), lanes.Slot(0, cpus=(0, 1)))
    assert share.cpus == Allowed((0, 1), "local node 0's share of this host")
