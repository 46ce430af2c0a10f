"""Sweeps (-m): per-job run directories and rendezvous values, the summary, fail_fast, and the
parallel mode that packs jobs onto disjoint device sets (real processes, pinned CPU cores)."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest

from conftest import clean_env, make_facts
from launcher.config.compose import compose
from launcher.errors import UserError
from launcher.sweep import lanes as sweep
from require import unavailable
from supervise_util import finish, spawner, survivors, wait_for_files

pytestmark = pytest.mark.timeout(180)

# Prints, from inside the worker, its CPU affinity, rank and seed; seed 2 fails when asked to.
# With MEET_DIR: leaves <seed>.up there and waits (up to 60 s) until two workers are up; prints
# when it began and ended waiting.
WORKER = """
import os, sys, time
seed = [a for a in sys.argv if a.startswith("--seed=")]
begin = time.time()
meet = os.environ.get("MEET_DIR")
if meet:
    open(os.path.join(meet, seed[0] + ".up"), "w").close()
    while len(os.listdir(meet)) < 2 and time.time() < begin + 60:
        time.sleep(0.02)
print("WORKER", seed[0] if seed else "-", "cpus=" + ",".join(map(str, sorted(os.sched_getaffinity(0)))),
      "port=" + os.environ.get("JAX_COORDINATOR_PORT", os.environ.get("MASTER_PORT", "")),
      f"begin={begin!r}", f"end={time.time()!r}", flush=True)
if "--seed=2" in sys.argv and os.environ.get("FAIL_SEED2"):
    sys.exit(3)
"""


@pytest.fixture
def worker(tmp_path) -> Path:
    path = tmp_path / "worker.py"
    path.write_text(WORKER)
    return path


def worker_lines(run_dir: Path) -> list[str]:
    return [
        line
        for log in sorted((run_dir / "logs").glob("*.log"))
        for line in log.read_text().splitlines()
        if line.startswith("WORKER")
    ]


def summary_rows(stdout: str) -> list[list[str]]:
    table = stdout.split("sweep summary\n", 1)[1].splitlines()
    return [re.split(r"\s{2,}", line) for line in table[2:-1]]


# -- pure -------------------------------------------------------------------------------------


def test_slots_pack_eight_gpus_into_four_pairs():
    facts = make_facts(gpus=8, env={"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"})
    cfg = compose(["sweep.parallel=4"])
    slots = [sweep.job_slot(cfg, facts, n, [0, 1]) for n in range(5)]
    assert [s.gpus for s in slots] == [("0", "1"), ("2", "3"), ("4", "5"), ("6", "7"), ("0", "1")]
    job_facts = sweep.job_facts(facts, slots[2])
    assert job_facts.visible_gpus == 2 and job_facts.env["CUDA_VISIBLE_DEVICES"] == "4,5"


def test_parallel_errors_name_the_key():
    with pytest.raises(UserError, match=r"sweep.parallel=3: at most 2, the usable CPU cores"):
        sweep.make_slots(3, False, [], [0, 1])
    with pytest.raises(UserError, match=r"sweep.parallel=0: an integer >= 1"):
        sweep.make_slots(0, True, ["0"], [0])
    cfg = compose(["launcher=multinode", "launcher.nnodes=2", "launcher.master_addr=h", "sweep.parallel=2"])
    with pytest.raises(UserError, match=r"sweep.parallel=2: packs jobs on one node; launcher.nnodes must be 1"):
        sweep.job_slot(cfg, make_facts(cpus=2), 0, [0, 1])


def test_job_config_rdzv_id_and_ports():
    cfg = compose(["launcher=multinode", "launcher.nnodes=2", "launcher.rdzv_endpoint=h:29400", "launcher.rdzv_id=exp"])
    assert sweep.job_config(cfg, 3, None).launcher.rdzv_id == "exp-3"
    assert sweep.job_config(cfg, 3, None).launcher.rdzv_endpoint == "h:29400"  # one job at a time: as given
    single = compose(["launcher.master_port=29504"])
    assert sweep.job_config(single, 1, sweep.Slot(1, cpus=(1,))).launcher.master_port == 29505
    jax = compose(["launcher=skrl_jax", "launcher.coordinator_address=127.0.0.1:5000"])
    assert sweep.job_config(jax, 2, sweep.Slot(2, cpus=(2,))).launcher.coordinator_address == "127.0.0.1:5002"


def test_summary_table():
    shared = ("task=CartPole-v1", "+worker_env.HF_TOKEN=x")  # on every job: not a swept value
    text = sweep.summary(
        [
            sweep.JobResult(1, ("seed=2", *shared), 3, 1.25, "/r/1", goodput="40%"),
            sweep.JobResult(0, ("seed=1", *shared), 0, 2.0, "/r/0", goodput="91%"),
            sweep.JobResult(2, ("seed=3", *shared), None, 0.0, "", "skipped (sweep.fail_fast)"),
            sweep.JobResult(3, ("seed=4", *shared), 143, 0.5, "/r/3", "stopped (sweep.fail_fast)"),
        ]
    )
    lines = text.splitlines()
    assert lines[0].split() == ["job", "overrides", "exit", "duration", "goodput", "run", "directory"]
    # the swept values only, as docs/sweeps.md shows; each job's goodput (its ledger, docs/goodput.md)
    assert lines[2].split() == ["0", "seed=1", "0", "2.0s", "91%", "/r/0"]
    assert lines[3].split() == ["1", "seed=2", "3", "1.2s", "40%", "/r/1"]
    assert re.split(r"\s{2,}", lines[4]) == ["2", "seed=3", "skipped (sweep.fail_fast)", "0.0s", "-", "-"]
    assert re.split(r"\s{2,}", lines[5]) == ["3", "seed=4", "stopped (sweep.fail_fast)", "0.5s", "-", "/r/3"]
    assert lines[-1] == "4 job(s): 1 succeeded, 1 failed, 1 stopped, 1 skipped"
    assert sweep.summary([sweep.JobResult(0, ("seed=1",), 0)]).splitlines()[2].split()[1] == "seed=1"  # one job: all
    # a parallel sweep plans every job's directory up front: a job that never started has none
    parallel = sweep.summary(
        [
            sweep.JobResult(0, ("seed=1",), 7, 1.0, "/r/0"),
            sweep.JobResult(1, ("seed=2",), None, 0.0, "/r/1", "skipped (interrupted)"),
        ]
    )
    assert re.split(r"\s{2,}", parallel.splitlines()[3]) == ["1", "seed=2", "skipped (interrupted)", "0.0s", "-", "-"]


# -- real processes -----------------------------------------------------------------------------


def test_sequential_sweep_runs_every_job_and_summarises(run_cli, worker):
    env = clean_env(FAIL_SEED2="1")
    result = run_cli("-m", "seed=1,2,3", "launcher=skrl_jax", "launcher.nproc_per_node=1", f"script={worker}", env=env)
    assert result.returncode == 3, result.stdout + result.stderr  # the failing job's code
    rows = summary_rows(result.stdout)
    assert [(r[0], r[2]) for r in rows] == [("0", "0"), ("1", "3"), ("2", "0")]  # a failure does not stop the others
    run_dirs = [Path(r[-1]) for r in rows]
    assert len(set(run_dirs)) == 3 and all((d / "status.json").is_file() for d in run_dirs)
    ports = {line.split("port=")[1] for d in run_dirs for line in worker_lines(d)}
    assert len(ports) == 3  # each JAX job its own coordinator port
    assert "3 job(s): 2 succeeded, 1 failed, 0 skipped" in result.stdout


def test_fail_fast_skips_the_rest(run_cli, worker):
    result = run_cli(
        "-m",
        "seed=2,1,3",
        "sweep.fail_fast=true",
        "launcher=skrl_jax",
        "launcher.nproc_per_node=1",
        f"script={worker}",
        env=clean_env(FAIL_SEED2="1"),
    )
    assert result.returncode == 3
    rows = summary_rows(result.stdout)
    assert [r[2] for r in rows] == ["3", "skipped (sweep.fail_fast)", "skipped (sweep.fail_fast)"]


def two_cores_or_unavailable() -> None:
    """A parallel sweep's lanes need two usable cores (one each). Fewer: skipped saying so -- or a
    failure where TRAIN_MULTIGPU_REQUIRE_CORES=1 (CI, whose machine has two: nothing skips there)."""
    if len(os.sched_getaffinity(0)) < 2:
        unavailable("CORES", f"needs 2 usable CPU cores ({len(os.sched_getaffinity(0))} here)")


@pytest.fixture
def two_cores() -> None:
    two_cores_or_unavailable()


@pytest.mark.usefixtures("two_cores")
def test_parallel_sweep_pins_each_job_to_its_own_core(run_cli, worker, tmp_path):
    # 2 jobs x 1 torchrun worker on this 2-core machine; the worker reads its own affinity, and
    # waits until the other job's worker is up too (run one after the other, it would wait 60 s)
    meet = tmp_path / "meet"
    meet.mkdir()
    result = run_cli(
        "-m",
        "seed=1,2",
        "sweep.parallel=2",
        "launcher.nproc_per_node=1",
        f"script={worker}",
        env=clean_env(MEET_DIR=str(meet)),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    rows = summary_rows(result.stdout)
    assert [r[2] for r in rows] == ["0", "0"]
    cores = sorted(os.sched_getaffinity(0))
    lines = {line.split()[1]: line.split() for row in rows for line in worker_lines(Path(row[-1]))}
    assert {seed: fields[2] for seed, fields in lines.items()} == {
        "--seed=1": f"cpus={cores[0]}",
        "--seed=2": f"cpus={cores[1]}",
    }
    # the lanes overlapped: each worker began before the other ended, and neither waited long
    (b1, e1), (b2, e2) = ([float(f.split("=")[1]) for f in lines[seed][4:6]] for seed in ("--seed=1", "--seed=2"))
    assert b1 < e2 and b2 < e1, lines
    assert e1 - b1 < 30 and e2 - b2 < 30, lines


@pytest.mark.usefixtures("two_cores")
def test_parallel_sweep_failure_does_not_stop_the_other_lane(run_cli, worker):
    result = run_cli(
        "-m",
        "seed=1,2,3",
        "sweep.parallel=2",
        "launcher=skrl_jax",
        "launcher.nproc_per_node=1",
        f"script={worker}",
        env=clean_env(FAIL_SEED2="1"),
    )
    assert result.returncode == 3, result.stdout + result.stderr
    assert [r[2] for r in summary_rows(result.stdout)] == ["0", "3", "0"]


@pytest.mark.parametrize("parallel", ["1", "2"], ids=["serial", "parallel"])
def test_a_job_that_cannot_start_exits_2_in_either_sweep(run_cli, worker, tmp_path, parallel):
    """Issue 19: a job whose program could not be started exited 2 in a serial sweep but 127 in a
    parallel one (with its own message format). The interpreter passes the checks (an executable
    file) and cannot be exec'd (its #! names no program): both print the one error line and exit 2."""
    python = tmp_path / "python-that-cannot-start"
    python.write_text("#!/nonexistent/interpreter\n")
    python.chmod(0o755)
    result = run_cli(
        "-m",
        "seed=1,2",
        f"sweep.parallel={parallel}",
        "launcher.nproc_per_node=1",
        f"python={python}",
        f"script={worker}",
        env=clean_env(),
    )
    assert result.returncode == 2, result.stdout + result.stderr
    line = (
        f"train_multigpu: error: python={python}: cannot start it: No such file or directory "
        "(set python= to an interpreter that exists, or leave it unset)"
    )
    assert result.stderr.splitlines() == [line, line], result.stderr
    rows = summary_rows(result.stdout)
    assert [r[2] for r in rows] == ["2", "2"]
    assert all(
        json.loads((Path(r[-1]) / "status.json").read_text())["reason"].startswith("not started: ") for r in rows
    )


def test_parallel_dry_run_shows_each_jobs_gpus(run_cli, tmp_path):
    # No GPU here: 8 are declared visible through CUDA_VISIBLE_DEVICES, which is all the launcher reads.
    result = run_cli(
        "-m", "seed=1,2,3,4", "sweep.parallel=4", "dry_run=true", env=clean_env(CUDA_VISIBLE_DEVICES="0,1,2,3,4,5,6,7")
    )
    assert result.returncode == 0, result.stderr
    assert re.findall(r"export CUDA_VISIBLE_DEVICES=(\S+)", result.stdout) == ["0,1", "2,3", "4,5", "6,7"]
    assert result.stdout.count("--nproc_per_node 2 --standalone") == 4


def test_parallel_too_many_jobs_at_once_is_a_usage_error(run_cli):
    result = run_cli("-m", "seed=1,2", "sweep.parallel=3", "dry_run=true")
    assert result.returncode == 2
    assert (
        "train_multigpu: error: sweep.parallel=3: at most 2, the usable CPU cores: each job needs its own"
        in result.stderr
    )


def test_help_mentions_profiles_and_sweep_keys(run_cli):
    result = run_cli("--help")
    assert result.returncode == 0
    for text in (
        "save_profile=NAME",
        "TRAIN_MULTIGPU_CONFIG_PATH",
        "sweep.fail_fast=true",
        "sweep.parallel=N",
        ".train_multigpu",
    ):
        assert text in result.stdout, text


# -- signals and fail_fast: real launches of tests/workers/spawner.py (each rank leaves two helpers
# that ignore signals; none may survive), one pid directory per job (<pids>/seed<S>/) ------------

JOB_FILES = 3  # rank0.pid + two helpers (one torchrun worker per job)


def sweep_status(stdout: str, job: int) -> dict:
    import json

    row = summary_rows(stdout)[job]
    return json.loads((Path(row[-1]) / "status.json").read_text())


@pytest.mark.parametrize(
    "signum, parallel",
    [(signal.SIGINT, 1), (signal.SIGTERM, 1), (signal.SIGINT, 2), (signal.SIGTERM, 2)],
    ids=["SIGINT-sequential", "SIGTERM-sequential", "SIGINT-parallel", "SIGTERM-parallel"],
)
def test_one_signal_stops_the_whole_sweep(tmp_path, signum, parallel):
    if parallel > len(os.sched_getaffinity(0)):
        two_cores_or_unavailable()
    proc, pids = spawner(tmp_path, "-m", "seed=1,2,3", f"sweep.parallel={parallel}", nproc=1)
    running = [1, 2][:parallel]  # the jobs started at once: seed 1 (and seed 2 in the other lane)
    for seed in running:
        wait_for_files(pids / f"seed{seed}", JOB_FILES)
    proc.send_signal(signum)
    code, out, err = finish(proc, timeout=60)
    assert code == 128 + signum, out + err
    for seed in running:
        assert survivors(pids / f"seed{seed}", settle=0) == []
    assert sorted(p.name for p in pids.iterdir()) == [f"seed{s}" for s in running]  # no further job started
    rows = summary_rows(out)
    assert [r[2] for r in rows] == [
        "130 (interrupted)" if signum == signal.SIGINT else "143 (interrupted)"
    ] * parallel + ["skipped (interrupted)"] * (3 - parallel), out
    for job in range(parallel):
        status = sweep_status(out, job)
        assert (status["reason"], status["outcome"]) == (f"stopped by {signal.Signals(signum).name}", "interrupted")
    assert f"3 job(s): 0 succeeded, 0 failed, {parallel} stopped, {3 - parallel} skipped" in out
    assert "sweep.fail_fast" not in out + err


def test_second_ctrl_c_kills_a_sweep_at_once(tmp_path):
    proc, pids = spawner(tmp_path, "-m", "seed=1,2", nproc=1, args=("--ignore_signals",))  # grace period 30 s
    wait_for_files(pids / "seed1", JOB_FILES)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.3)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    code, out, err = finish(proc, timeout=20)
    assert code == 130, out + err
    assert time.monotonic() - sent < 3.0
    assert survivors(pids / "seed1", settle=0) == []
    assert not (pids / "seed2").exists()
    assert [r[2] for r in summary_rows(out)] == ["130 (interrupted)", "skipped (interrupted)"]


@pytest.mark.usefixtures("two_cores")
def test_parallel_fail_fast_exits_with_the_failure_and_marks_the_stopped_job(tmp_path):
    # job 0 (seed 1) runs; job 1 (seed 2, the other lane) fails with 3 once job 0's rank is up
    proc, pids = spawner(
        tmp_path,
        "-m",
        "seed=1,2,3",
        "sweep.parallel=2",
        "sweep.fail_fast=true",
        nproc=1,
        args=("--fail_seed", "2:3:seed1/rank0.pid"),
    )
    code, out, err = finish(proc, timeout=90)
    assert code == 3, out + err  # the failing job's code, not the stopped job's 143
    assert survivors(pids / "seed1", settle=0) == [] and survivors(pids / "seed2", settle=0) == []
    assert not (pids / "seed3").exists()
    assert [r[2] for r in summary_rows(out)] == ["stopped (sweep.fail_fast)", "3", "skipped (sweep.fail_fast)"]
    stopped = sweep_status(out, 0)
    assert stopped["reason"] == "stopped (sweep.fail_fast)" and stopped["failure"] is None
    assert stopped["outcome"] == "fail_fast_stop" and sweep_status(out, 1)["outcome"] == "failed"
    assert "torchrun failed" not in out + err
    assert "3 job(s): 0 succeeded, 1 failed, 1 stopped, 1 skipped" in out


# -- what a sweep writes: nothing, until a job starts ----------------------------------------------


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize("extra", [[], ["sweep.parallel=2"]], ids=["sequential", "parallel"])
def test_dry_run_sweep_writes_nothing(run_cli, tmp_path, extra):
    before = files_under(tmp_path)
    result = run_cli("-m", "seed=1,2", "+worker_env.HOOK_API_TOKEN=x", "dry_run=true", *extra)
    assert result.returncode == 0, result.stderr
    assert files_under(tmp_path) == before  # no runs/multirun/<t>/multirun.yaml, no job directories
    rows = summary_rows(result.stdout)
    assert [(r[1], r[2]) for r in rows] == [("seed=1", "dry run"), ("seed=2", "dry run")]
    parents = {Path(r[-1]).parent for r in rows}  # where the real sweep would put them: one sweep directory
    assert len(parents) == 1 and parents.pop().parent == tmp_path / "runs" / "multirun"
    assert "2 job(s): dry run, nothing started" in result.stdout


@pytest.mark.parametrize("dry_run", [False, True], ids=["real", "dry-run"])
def test_sweep_error_is_printed_once_and_writes_nothing(run_cli, tmp_path, dry_run):
    before = files_under(tmp_path)
    result = run_cli("-m", "seed=1,2,3", "sweep.parallel=3", *(["dry_run=true"] if dry_run else []))
    assert result.returncode == 2
    assert (
        result.stderr
        == "train_multigpu: error: sweep.parallel=3: at most 2, the usable CPU cores: each job needs its own\n"
    )
    assert files_under(tmp_path) == before


@pytest.mark.parametrize("sweep", ["seed=range(0)", "seed=range(5,1)", "+x=glob(nothing*)"])
def test_a_sweep_over_no_values_is_refused(run_cli, tmp_path, sweep):
    """It ran no job and exited 0, as if every job had succeeded."""
    before = files_under(tmp_path)
    result = run_cli("-m", "run_name=a,b", sweep)
    key, value = sweep.split("=", 1)
    assert (result.returncode, result.stdout) == (2, ""), result.stdout + result.stderr
    assert result.stderr == (
        f"train_multigpu: error: {key}={value}: sweeps over no values: the -m sweep would run no job "
        "(give it at least one value)\n"
    )
    assert files_under(tmp_path) == before


def test_a_bad_point_stops_the_sweep_before_any_job_starts(run_cli, tmp_path, worker):
    before = files_under(tmp_path)
    missing = tmp_path / "missing.py"
    result = run_cli("-m", f"script={worker},{missing}", "launcher.nproc_per_node=1")
    assert result.returncode == 2, result.stdout + result.stderr
    assert len(result.stderr.splitlines()) == 1 and f"script={missing}" in result.stderr, result.stderr
    assert "WORKER" not in result.stdout  # the good point did not run either
    assert files_under(tmp_path) == before


def test_slurm_sweep_dry_run_shows_what_the_submission_writes(run_cli, tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text("#!/bin/sh\necho 4242\n")  # a fake sbatch: no cluster needed here
    (bin_dir / "sbatch").chmod(0o755)
    env = clean_env(PATH=f"{bin_dir}:{os.environ['PATH']}")
    args = ("-m", "seed=1,2", "submit=slurm", "slurm.gpus_per_node=1", "+worker_env.HOOK_API_TOKEN=x")
    stamp = re.compile(r"\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d")

    dry = run_cli(*args, "dry_run=true", env=env)
    assert dry.returncode == 0, dry.stderr
    assert files_under(tmp_path) == ["bin", "bin/sbatch"]
    # issue 19: a SLURM sweep is one job array: its script is shown once, with every point's path;
    # issue 28: then each task's own file (its point's command), each once, as written
    head, script, tasks = re.search(
        r"^# job array of 2 task\(s\), written to each point's directory \(dry run: nothing written, "
        r"nothing submitted\):\n((?:#   \S+\n)+)(#!/bin/bash\n.*?)\n# each task's command, in its point's "
        r"directory \(task <task>'s shell reads \S+/<task>/job.task\):\n(.*?)(?=^\[train_multigpu\])",
        dry.stdout,
        re.M | re.S,
    ).groups()
    paths = [line[len("#   ") :] for line in head.splitlines()]
    shown_tasks = re.findall(r"^# (\S+/job.task)\n(# train_multigpu: .*?\n(?:[^#].*\n)+)", tasks, re.M)
    assert [path for path, _ in shown_tasks] == [p.replace("job.sbatch", "job.task") for p in paths], tasks
    assert "".join(f"# {path}\n{text}" for path, text in shown_tasks) == tasks
    assert "sweep summary" not in dry.stdout  # one table
    assert re.findall(r"^  \d  (.*)$", dry.stdout, re.M) == [
        f"dry run  seed={n + 1}     {path[: -len('/job.sbatch')]}" for n, path in enumerate(paths)
    ], dry.stdout

    real = run_cli(*args, env=env)
    assert real.returncode == 0, real.stderr
    assert "sweep summary" not in real.stdout
    written = sorted((tmp_path / "runs" / "multirun").glob("*/*/job.sbatch"))
    assert [stamp.sub("T", str(p)) for p in written] == [stamp.sub("T", p) for p in paths]
    assert [stamp.sub("T", p.read_text()) for p in written] == [stamp.sub("T", script)] * 2
    assert [stamp.sub("T", (p.parent / "job.task").read_text()) for p in written] == [
        stamp.sub("T", text) for _, text in shown_tasks
    ]
