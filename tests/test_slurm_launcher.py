"""train_multigpu against a REAL one-host SLURM cluster: submit=slurm, launcher=slurm under
salloc/srun, failures, sweeps, the USR1 warning and requeue. The node is CPU-only (2 cores), so
workers count from the CPUs per task. Skipped where tests/infra/slurm_up.sh cannot bring it up.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from conftest import ALLREDUCE, clean_env
from launcher.backends.base import Handle, State, Status
from launcher.slurm.backend import SlurmBackend
from slurm_cluster import job_info, wait_job

pytestmark = pytest.mark.timeout(240)

USR1_WORKER = """\
import os, signal, sys, time
got = []
signal.signal(signal.SIGUSR1, lambda s, f: got.append(s))
rank = os.environ.get("RANK") or os.environ.get("JAX_RANK")
resumed = "--resume" in sys.argv
print(f"READY rank={rank} resume={resumed}", flush=True)
if resumed:
    sys.exit(0)
deadline = time.time() + 60
while not got and time.time() < deadline:
    time.sleep(0.05)
time.sleep(1.0)  # a second copy would arrive now
print(f"rank={rank} USR1 x{len(got)}", flush=True)
time.sleep(120)  # "training" goes on until the job is requeued
"""


def env() -> dict[str, str]:
    """sbatch passes the submitter's environment on: the job runs this interpreter's train_multigpu (the
    checkout's, installed), found as a user's is, with no PYTHONPATH into the checkout."""
    return clean_env(OMP_NUM_THREADS="1")


def submitted(stdout: str) -> list[tuple[str, Path]]:
    jobs = re.findall(r"submitted SLURM job (\d+)\n.*script: (\S+)/job.sbatch", stdout)
    return [(job, Path(run_dir)) for job, run_dir in jobs]


def log_of(run_dir: Path, job: str) -> str:
    return (run_dir / f"slurm-{job}.out").read_text()


def test_submit_two_cpu_workers_completes(slurm_cluster, run_cli):
    result = run_cli(
        "submit=slurm",
        "slurm.cpus_per_task=2",
        "slurm.time=5",
        f"script={ALLREDUCE}",
        "log_all_ranks=true",
        "run_name=sub",
        env=env(),
    )
    assert result.returncode == 0, result.stderr
    [(job, run_dir)] = submitted(result.stdout)
    assert f"log:    {run_dir}/slurm-{job}.out" in result.stdout
    info = wait_job(job, timeout=120)
    out = log_of(run_dir, job)
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", out
    assert out.count("all_reduce sum=3 expected=3") == 2, out
    assert (run_dir / "job.sbatch").is_file() and '"exit_code": 0' in (run_dir / "status.json").read_text()
    assert "launcher=slurm" in (run_dir / "job.sbatch").read_text()
    # the goodput ledger's queue: the job's wait, as SLURM tells it (whole seconds)
    queue = json.loads((run_dir / "status.json").read_text())["goodput"]["queue"]
    submit, start = (datetime.fromisoformat(info[key]) for key in ("SubmitTime", "StartTime"))
    assert queue == (start - submit).total_seconds(), (queue, info["SubmitTime"], info["StartTime"])


def test_launcher_slurm_inside_salloc_and_srun(slurm_cluster, tmp_path):
    for launcher, expect in (("slurm", "all_reduce sum=3 expected=3"), ("slurm_jax", "psum=3 expected=3")):
        argv = [
            "salloc",
            "--nodes=1",
            "--cpus-per-task=2",
            "srun",
            "--ntasks-per-node=1",
            "--cpus-per-task=2",
            sys.executable,
            "-m",
            "launcher",
            f"launcher={launcher}",
            f"script={ALLREDUCE}",
            "log_all_ranks=true",
        ]
        result = subprocess.run(argv, cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stdout + result.stderr
        assert result.stdout.count(expect) == 2, result.stdout


def test_failing_job_reports_failed_with_the_ranks_exit_code(slurm_cluster, run_cli):
    jobs = []
    for launcher in ("launcher=single_node", "launcher=skrl_jax"):
        result = run_cli(
            "submit=slurm",
            "slurm.cpus_per_task=2",
            "slurm.time=5",
            launcher,
            f"script={ALLREDUCE}",
            "--",
            "--exit_code_on_rank",
            "1:7",
            env=env(),
        )
        assert result.returncode == 0, result.stderr
        jobs += submitted(result.stdout)
    (torch_job, torch_dir), (jax_job, jax_dir) = jobs
    info = wait_job(torch_job, timeout=120)
    out = log_of(torch_dir, torch_job)
    assert info["JobState"] == "FAILED", out
    assert "FAILED: node 0, rank 1 (local rank 1): exit code 7" in out, out  # the launcher's failure summary
    info = wait_job(jax_job, timeout=120)
    assert info["JobState"] == "FAILED" and info["ExitCode"] == "7:0", log_of(jax_dir, jax_job)


def test_sweep_is_one_job_array(slurm_cluster, run_cli):
    """Issue 19 changed this test (it was test_sweep_submits_one_job_per_point): a -m sweep is ONE job
    array, throttled by slurm.array_parallelism; each task runs its point in its own run directory."""
    result = run_cli(
        "-m",
        "seed=1,2,3",
        "submit=slurm",
        "slurm.cpus_per_task=1",
        "slurm.array_parallelism=2",
        "launcher.nproc_per_node=1",
        f"script={ALLREDUCE}",
        "slurm.time=5",
        env=env(),
    )
    assert result.returncode == 0, result.stderr
    [array] = re.findall(r"submitted SLURM job array (\d+): 3 task\(s\), at most 2 at once", result.stdout)
    jobs = re.findall(r"submitted SLURM job (\d+_\d+)\n.*script: (\S+)/job.sbatch", result.stdout)
    assert [job for job, _ in jobs] == [f"{array}_{task}" for task in range(3)], result.stdout
    assert len({run_dir for _, run_dir in jobs}) == 3
    assert "sweep: 3 of 3 job(s) submitted" in result.stdout
    throttle = subprocess.run(["scontrol", "show", "job", array], capture_output=True, text=True, timeout=30)
    assert "ArrayTaskThrottle=2" in throttle.stdout, throttle.stdout
    for point, (job, run_dir) in enumerate(jobs):
        assert re.search(rf"^  {point}  {job}\s+seed={point + 1}\s+{run_dir}$", result.stdout, re.M), result.stdout
    for point, (job, run_dir) in enumerate(jobs):
        run_dir = Path(run_dir)
        info = wait_job(job, timeout=180)
        out = log_of(run_dir, job)
        assert info["JobState"] == "COMPLETED", out
        assert "all_reduce sum=1 expected=1" in out
        assert f"--seed={point + 1}" in (run_dir / "command.sh").read_text()
        assert '"exit_code": 0' in (run_dir / "status.json").read_text()
        record = json.loads((run_dir / "submit.json").read_text())
        assert (record["format"], record["backend"], record["id"]) == (2, "slurm", job)
        # what `runs` has: the handle alone -> the back end's state and logs
        handle = Handle.from_record(record, str(run_dir))
        status = SlurmBackend().describe(handle)
        assert (status.state, status.detail, status.exit_code) == (State.SUCCEEDED, "COMPLETED", 0)
        assert "all_reduce sum=1 expected=1" in "\n".join(SlurmBackend().logs(handle))
        assert any("all_reduce" in line for line in SlurmBackend().logs(handle, rank=0))
    accounted = subprocess.run(
        ["sacct", "-n", "-X", "-P", "-o", "JobID,State", "-j", array], capture_output=True, text=True, timeout=30
    )
    if accounted.returncode == 0 and accounted.stdout.strip():  # sacct needs an accounting database
        states = dict(line.split("|") for line in accounted.stdout.split())
        assert all(states.get(job) == "COMPLETED" for job, _ in jobs), accounted.stdout


def test_launcher_nnodes_2_asks_sbatch_for_two_nodes(slurm_cluster, run_cli, tmp_path):
    """One vocabulary (issue 19): launcher.nnodes=2 is a two-node job (before: refused, "node count 1
    (... slurm.nodes=)"). The test cluster has ONE node (sinfo), so the job cannot start: SLURM holds
    it (PartitionNodeLimit) as a two-node job, which shows that --nodes=2 reached it; the job's own
    node-count check passed on the way (test_slurm_submit.test_launcher_nnodes_makes_a_two_node_job)."""
    nodes = subprocess.run(["sinfo", "-h", "-o", "%D"], capture_output=True, text=True, timeout=30).stdout.split()
    if sum(int(n) for n in nodes) >= 2:
        pytest.skip("this cluster has room for two nodes: a real two-node job belongs here")
    result = run_cli(
        "submit=slurm",
        "launcher=multinode",
        "launcher.nnodes=2",
        "launcher.nproc_per_node=1",
        "slurm.cpus_per_task=1",
        "slurm.time=5",
        f"script={ALLREDUCE}",
        env=env(),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    [(job, run_dir)] = submitted(result.stdout)
    try:
        info = job_info(job)
        assert info["NumNodes"].split("-")[0] == "2", info
        # the partition cannot hold two nodes: SLURM says PartitionNodeLimit or, on a freshly started
        # controller, PartitionConfig (both: held for the partition's size, never run on one node)
        assert info["JobState"] == "PENDING" and info["Reason"] in ("PartitionNodeLimit", "PartitionConfig"), info
    finally:
        subprocess.run(["scancel", job], timeout=30)
    text = (run_dir / "job.sbatch").read_text()
    assert "#SBATCH --nodes=2" in text and "srun --nodes 2 " in text and "launcher.nnodes=2" in text
    assert "_node0" not in run_dir.name  # one directory for the job; its nodes' records go inside


def test_backend_describes_and_cancels_a_queued_job(slurm_cluster, run_cli):
    """The back end's describe/cancel from submit.json's handle alone, on the real cluster: a job
    held in the queue is PENDING; cancelled, it is STOPPED (CANCELLED)."""
    result = run_cli(
        "submit=slurm",
        "slurm.cpus_per_task=1",
        "launcher.nproc_per_node=1",
        "slurm.time=5",
        "+slurm.extra.begin=now+3600",
        f"script={ALLREDUCE}",
        env=env(),
    )
    assert result.returncode == 0, result.stderr
    [(job, run_dir)] = submitted(result.stdout)
    handle = Handle.from_record(json.loads((run_dir / "submit.json").read_text()), str(run_dir))
    backend = SlurmBackend()
    try:
        assert handle.id == job and backend.describe(handle).state is State.PENDING
    finally:
        backend.cancel(handle)
    assert wait_job(job, timeout=60)["JobState"] == "CANCELLED"
    assert backend.describe(handle) == Status(State.STOPPED, "CANCELLED", 0)


def _wait_for(path: Path, text: str, job: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().count(text) >= 2:
            return
        time.sleep(0.2)
    raise AssertionError(f"{text!r} not seen twice in {path}: {wait_job(job, timeout=1)}")


def _requeue_now(job: str) -> None:
    """What preemption or a node failure does: SLURM requeues the job (SIGTERM to the step, then
    PENDING with BeginTime pushed back; start it again now)."""
    subprocess.run(["scontrol", "requeue", job], check=True, timeout=30)
    deadline = time.monotonic() + 60
    while (
        "JobState=PENDING"
        not in subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True, text=True).stdout
    ):
        assert time.monotonic() < deadline, f"job not requeued: {wait_job(job, timeout=1)}"
        time.sleep(0.2)
    subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], check=True, timeout=30)


def test_usr1_warning_reaches_each_worker_once_and_requeue_passes_resume(slurm_cluster, run_cli, tmp_path):
    script = tmp_path / "usr1_worker.py"
    script.write_text(USR1_WORKER)
    result = run_cli(
        "submit=slurm", "slurm.cpus_per_task=2", "slurm.time=5", f"script={script}", "log_all_ranks=true", env=env()
    )
    assert result.returncode == 0, result.stderr
    [(job, run_dir)] = submitted(result.stdout)
    log = run_dir / f"slurm-{job}.out"
    _wait_for(log, "READY", job)
    # what --signal=B:USR1@120 does before the time limit, now
    subprocess.run(["scancel", "--signal=USR1", "--batch", job], check=True, timeout=30)
    _wait_for(log, "USR1 x", job)
    out = log.read_text()
    assert "forwarding USR1 to srun" in out
    assert sorted(re.findall(r"rank=(\d) USR1 x(\d)", out)) == [("0", "1"), ("1", "1")], out
    _requeue_now(job)
    info = wait_job(job, timeout=90)
    out = log.read_text()
    assert info["JobState"] == "COMPLETED" and info["Restarts"] == "1", out
    assert out.count("resume=True") == 2 and out.count("READY rank=0 resume=False") == 1, out  # log appended
    assert (run_dir / "restart1" / "status.json").is_file()


def _metric_iterations(path: Path) -> list[int]:
    lines = path.read_text().splitlines() if path.exists() else []
    return [int(line.split(",")[0]) for line in lines[1:] if line]


@pytest.mark.timeout(480)
def test_requeue_resumes_the_bundled_trainer_where_it_stopped(slurm_cluster, run_cli):
    """The bundled trainer, requeued by SLURM mid-run: the restart continues from the checkpoint the
    SIGTERM wrote, in the same run directory; no iteration is lost or run twice."""
    # ~0.15 s an iteration here (2 workers x 8 envs x 64 steps): the requeue, asked for after iteration 5,
    # stops it a few iterations later (after iteration 7 at load 9), long before the last
    total = 50
    result = run_cli(
        "submit=slurm",
        "slurm.cpus_per_task=2",
        "slurm.time=10",
        "task=CartPole-v1",
        f"max_iterations={total}",
        "run_name=requeue",
        env=env(),
    )
    assert result.returncode == 0, result.stderr
    [(job, run_dir)] = submitted(result.stdout)
    metrics = run_dir / "metrics.csv"
    deadline = time.monotonic() + 180
    while len(_metric_iterations(metrics)) < 5:
        assert time.monotonic() < deadline, f"no 5 iterations: {wait_job(job, timeout=1)}"
        time.sleep(0.2)
    _requeue_now(job)
    info = wait_job(job, timeout=300)
    out = log_of(run_dir, job)
    assert info["JobState"] == "COMPLETED" and info["Restarts"] == "1", out
    said = re.search(r"stopped by SIGTERM after iteration (\d+)", out)
    assert said, out
    stopped = int(said.group(1))
    assert 5 <= stopped < total, out
    assert f"resuming from {run_dir}/checkpoints/iter_{stopped:06d}.ckpt" in out, out
    # every iteration once, in order: 1..stopped from the first start, the rest from the restart
    assert _metric_iterations(metrics) == list(range(1, total + 1))
    rows = [line.split(",") for line in metrics.read_text().splitlines()[1:]]
    assert [int(row[1]) for row in rows] == [i * 2 * 8 * 64 for i in range(1, total + 1)]  # env steps continue
    assert json.loads((run_dir / "run_info.json").read_text())["start_iteration"] == stopped
    assert json.loads((run_dir / "evaluation.json").read_text())["iterations"] == total
    assert (run_dir / "checkpoints" / f"iter_{total:06d}.ckpt").is_file()
    # the launcher's record is per restart; the trainer's files are not
    assert json.loads((run_dir / "status.json").read_text())["exit_code"] == 143
    assert json.loads((run_dir / "restart1" / "status.json").read_text())["exit_code"] == 0
    assert "--resume" in (run_dir / "restart1" / "command.sh").read_text()
    assert not (run_dir / "restart1" / "checkpoints").exists() and not (run_dir / "restart1" / "metrics.csv").exists()


def test_a_big_sweep_is_one_job_and_each_point_has_its_record(slurm_cluster, run_cli):
    """Issue 28: 120 points are ONE job array on the real cluster (held, cancelled at once: it never
    runs), and each point's directory has what its task needs and `runs` reads: its config (its own
    seed), the array's one script (the same file, linked) and submit.json naming its task."""
    import os

    points = 120
    result = run_cli(
        "-m",
        f"seed=range(0,{points})",
        "presets=[debug]",
        "submit=slurm",
        "+slurm.extra.hold=true",
        "slurm.time=0:05:00",
        env=env(),
        timeout=600,
    )
    arrays = re.findall(r"submitted SLURM job array (\d+): (\d+) task\(s\)", result.stdout)
    try:
        assert result.returncode == 0, result.stderr
        [(array, tasks)] = arrays
        assert int(tasks) == points
        queued = subprocess.run(
            ["squeue", "-h", "-r", "-j", array, "-o", "%i %T %r"], capture_output=True, text=True, timeout=30
        ).stdout.split("\n")
        assert sorted(line for line in queued if line) == sorted(
            f"{array}_{task} PENDING JobHeldUser" for task in range(points)
        ), queued
        jobs = [
            (job, Path(run_dir))
            for job, run_dir in re.findall(r"submitted SLURM job (\d+_\d+)\n.*script: (\S+)/job.sbatch", result.stdout)
        ]
        assert [job for job, _ in jobs] == [f"{array}_{task}" for task in range(points)]
        scripts = {os.stat(run_dir / "job.sbatch").st_ino for _, run_dir in jobs}
        assert len(scripts) == 1
        for task, (job, run_dir) in enumerate(jobs):
            assert f"\nseed: {task}\n" in (run_dir / "config.yaml").read_text()
            record = json.loads((run_dir / "submit.json").read_text())
            assert (record["backend"], record["id"]) == ("slurm", job)
        assert f"sweep: {points} of {points} job(s) submitted" in result.stdout
    finally:
        for array, _ in arrays:
            subprocess.run(["scancel", array], capture_output=True, timeout=30)


POINT_WORKER = "import sys\nprint('POINT', *sys.argv[1:], flush=True)\n"


def test_each_array_task_runs_its_own_points_command_and_reads_it_again_when_requeued(slurm_cluster, run_cli, tmp_path):
    """Issue 28: the array script is the same for every point (it held every point's command, which
    SLURM hands to every task: quadratic in the points); each task reads its own point's job.task.
    On the real cluster, a held 3-point array: point 2's file is removed before the array is
    released, so that task alone fails (exit 2, naming the file) and runs nothing; tasks 0 and 1 run
    their own seeds; task 1, requeued as preemption does, reads its file again and resumes."""
    import os

    worker = tmp_path / "point_worker.py"
    worker.write_text(POINT_WORKER)
    result = run_cli(
        "-m",
        "seed=1,2,3",
        "submit=slurm",
        "+slurm.extra.hold=true",
        "slurm.cpus_per_task=1",
        "launcher.nproc_per_node=1",
        f"script={worker}",
        "slurm.time=5",
        env=env(),
    )
    arrays = re.findall(r"submitted SLURM job array (\d+): 3 task\(s\)", result.stdout)
    try:
        assert result.returncode == 0, result.stderr
        [array] = arrays
        jobs = [
            (job, Path(run_dir))
            for job, run_dir in re.findall(r"submitted SLURM job (\d+_\d+)\n.*script: (\S+)/job.sbatch", result.stdout)
        ]
        assert [job for job, _ in jobs] == [f"{array}_{task}" for task in range(3)]
        assert len({os.stat(run_dir / "job.sbatch").st_ino for _, run_dir in jobs}) == 1
        assert "seed=" not in (jobs[0][1] / "job.sbatch").read_text()
        (jobs[2][1] / "job.task").unlink()
        subprocess.run(["scontrol", "release", array], check=True, timeout=30)
        for point, (job, run_dir) in enumerate(jobs[:2]):
            info = wait_job(job, timeout=180)
            out = log_of(run_dir, job)
            assert info["JobState"] == "COMPLETED", out
            assert re.findall(r"^POINT .*$", out, re.M) == [f"POINT --seed={point + 1} --distributed"], out
        job, run_dir = jobs[2]
        info = wait_job(job, timeout=180)
        out = log_of(run_dir, job)
        assert (info["JobState"], info["ExitCode"]) == ("FAILED", "2:0"), out
        assert out == f"train_multigpu: task 2 of this job array: cannot read its command file {run_dir}/job.task\n"
        job, run_dir = jobs[1]
        _requeue_now(job)
        info = wait_job(job, timeout=180)
        out = log_of(run_dir, job)
        assert info["JobState"] == "COMPLETED" and info["Restarts"] == "1", out
        assert re.findall(r"^POINT .*$", out, re.M) == [
            "POINT --seed=2 --distributed",
            "POINT --resume --seed=2 --distributed",
        ], out
        assert (run_dir / "restart1" / "status.json").is_file()
    finally:
        for array in arrays:
            subprocess.run(["scancel", array], capture_output=True, timeout=30)
