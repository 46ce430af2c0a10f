"""launcher/rundir.py, the run directory's one contract: every path in it (RunPaths) and how a launch
ended (Reason, status.json's ``outcome``), read back by ``runs`` for new records and old ones alike.

The real launches' records (a success, a failure, one stopped by SIGINT, one whose launcher was
SIGKILLed) are checked in tests/test_runs.py (its shared launches); here: the names the readers use
against a real failed launch of this module's own, and old status.json files without ``outcome``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from launcher import record, rundir
from launcher.rundir import Reason, RunPaths, Source
from launcher.runs import read
from require import unavailable
from supervise_util import env as launch_env

REPO = Path(__file__).resolve().parents[1]
WORKER = str(REPO / "tests" / "workers" / "runs_worker.py")


def test_every_name_under_one_root():
    p = RunPaths("/r/x")
    assert {
        "config": p.config,
        "command": p.command,
        "env": p.env,
        "composition": p.composition,
        "status": p.status,
        "submit": p.submit,
        "ray_job": p.ray_job,
        "sbatch": p.sbatch,
        "logs": p.logs,
        "torchrun_log": p.torchrun_log,
        "progress": p.progress,
        "stacks": p.stacks,
        "flight_recorder": p.flight_recorder,
        "metrics": p.metrics,
        "run_info": p.run_info,
        "evaluation": p.evaluation,
        "rank_log": p.rank_log(3),
        "exit_record": p.exit_record(3),
        "beat": p.beat(3),
        "slurm_out": p.slurm_out("42"),
        "manifest": p.manifest("PyTorchJob"),
        "restart_node": p.restart(2).node(1).status,
    } == {
        "config": Path("/r/x/config.yaml"),
        "command": Path("/r/x/command.sh"),
        "env": Path("/r/x/env.json"),
        "composition": Path("/r/x/composition.json"),
        "status": Path("/r/x/status.json"),
        "submit": Path("/r/x/submit.json"),
        "ray_job": Path("/r/x/ray_job.json"),
        "sbatch": Path("/r/x/job.sbatch"),
        "logs": Path("/r/x/logs"),
        "torchrun_log": Path("/r/x/logs/torchrun.log"),
        "progress": Path("/r/x/logs/progress.json"),
        "stacks": Path("/r/x/stacks"),
        "flight_recorder": Path("/r/x/nccl"),
        "metrics": Path("/r/x/metrics.csv"),
        "run_info": Path("/r/x/run_info.json"),
        "evaluation": Path("/r/x/evaluation.json"),
        "rank_log": Path("/r/x/logs/rank3.log"),
        "exit_record": Path("/r/x/logs/rank3.exit.json"),
        "beat": Path("/r/x/logs/rank3.beat"),
        "slurm_out": Path("/r/x/slurm-42.out"),
        "manifest": Path("/r/x/pytorchjob.yaml"),
        "restart_node": Path("/r/x/restart2/node1/status.json"),
    }
    with pytest.raises(AttributeError):
        p.root = Path("/elsewhere")  # frozen


def test_the_patterns_match_the_names_they_read():
    for pattern, name in (
        (rundir.RANK_LOG, rundir.rank_log_name),
        (rundir.EXIT_RECORD, rundir.exit_record_name),
        (rundir.BEAT_FILE, rundir.beat_name),
        (rundir.RANK_FILE, rundir.rank_log_name),
        (rundir.RANK_FILE, rundir.beat_name),
        (rundir.RESTART_DIR, rundir.restart_name),
        (rundir.NODE_DIR, rundir.node_name),
    ):
        assert int(pattern.match(name(12)).group(1)) == 12, name(12)
    assert rundir.RANK_LOG.match(rundir.exit_record_name(1)) is None
    assert rundir.EXIT_RECORD.match(rundir.rank_log_name(1)) is None


@pytest.fixture(scope="module")
def failed(tmp_path_factory) -> Path:
    """One real launch under torchrun whose rank 1 exits 7 (tests/workers/runs_worker.py)."""
    tmp = tmp_path_factory.mktemp("rundir")
    argv = [sys.executable, "-m", "launcher", "device=cpu", f"run_root={tmp / 'runs'}", f"script={WORKER}"]
    argv += ["launcher.nproc_per_node=2", "run_name=fail", "--", "--fail", "1:7"]
    out = subprocess.run(argv, cwd=tmp, env=launch_env(), capture_output=True, text=True, timeout=180)
    assert out.returncode == 7, out.stderr
    (run_dir,) = (tmp / "runs").iterdir()
    return run_dir


def test_a_failed_launch_writes_every_name_the_readers_use(failed):
    p = RunPaths(failed)
    for path in (p.config, p.command, p.env, p.composition, p.status, p.torchrun_log, p.rank_log(0), p.rank_log(1)):
        assert path.is_file(), path
    assert p.exit_record(1).is_file() and not p.exit_record(0).exists()
    status = json.loads(p.status.read_text())
    assert (status["exit_code"], status["reason"], status["outcome"]) == (7, "rank failed", "failed")
    assert status["failure"]["rank"] == 1 and Source(status["failure"]["source"]) is Source.EXIT_RECORD
    assert status["failure"]["log"] == str(p.rank_log(1))
    info = read.read(failed)
    assert (info.status, info.exit_code, info.reason) == (read.FAILED, 7, "rank failed")


# status.json as launchers before ``outcome`` wrote it (reason text only): read as they always were
OLD = [
    ({"exit_code": 0, "reason": "success"}, read.SUCCESS),
    ({"exit_code": 7, "reason": "rank failed"}, read.FAILED),
    ({"exit_code": 130, "reason": "stopped by SIGINT"}, read.INTERRUPTED),
    ({"exit_code": 143, "reason": "stopped (sweep.fail_fast)"}, read.INTERRUPTED),
    ({"exit_code": 124, "reason": "hang"}, read.HANG),
    ({"exit_code": 137, "reason": "launcher killed"}, read.LOST),
    ({"exit_code": 2, "reason": "not started: launcher.nproc_per_node=9: ..."}, read.FAILED),
    ({"exit_code": 0}, read.SUCCESS),
]


def _write(root: Path, name: str, status: dict) -> Path:
    run_dir = RunPaths(root / name)
    run_dir.logs.mkdir(parents=True)
    stamped = {"started": "2026-01-01T10:00:00+00:00", "ended": "2026-01-01T10:00:02+00:00", **status}
    run_dir.status.write_text(json.dumps(stamped))
    run_dir.config.write_text("launcher:\n  topology: single_node\n  nnodes: '1'\n  nproc_per_node: '2'\n")
    return run_dir.root


def test_old_status_files_without_an_outcome_read_as_before(tmp_path):
    for number, (status, _) in enumerate(OLD):
        _write(tmp_path, f"2026-01-01_10-00-{number:02d}_old", status)
    found = {info.id: info for info in read.read_all(tmp_path)}
    for number, (status, expected) in enumerate(OLD):
        info = found[f"2026-01-01_10-00-{number:02d}_old"]
        assert (info.status, info.exit_code, info.reason) == (expected, status["exit_code"], status.get("reason"))


@pytest.mark.parametrize("status, _", OLD)
def test_an_old_reason_text_names_the_reason_a_new_record_writes(status, _):
    assert read.status_of(status, []) == read.status_of({**status, "outcome": rundir.reason_of(status).value}, [])


@pytest.mark.parametrize(
    "outcome, status",
    [
        (Reason.SUCCEEDED, read.SUCCESS),
        (Reason.FAILED, read.FAILED),
        (Reason.PORT_IN_USE, read.FAILED),
        (Reason.NOT_STARTED, read.FAILED),
        (Reason.INTERRUPTED, read.INTERRUPTED),
        (Reason.FAIL_FAST_STOP, read.INTERRUPTED),
        (Reason.HANG, read.HANG),
        (Reason.NODE_LOST, read.FAILED),
        (Reason.NODE_FAILED, read.FAILED),
        (Reason.LAUNCHER_KILLED, read.LOST),
    ],
)
def test_the_outcome_decides_not_the_text(outcome, status):
    """The reason text is for people: a reworded one changes nothing."""
    assert read.status_of({"exit_code": 3, "reason": "reworded for people", "outcome": outcome.value}, []) == status


def test_every_reason_has_a_status():
    statuses = {read.status_of({"exit_code": 1, "outcome": reason.value}, []) for reason in Reason}
    assert statuses <= {read.SUCCESS, read.FAILED, read.INTERRUPTED, read.HANG, read.LOST}


def test_an_outcome_this_version_does_not_know_falls_back_to_the_text(tmp_path):
    run_dir = _write(tmp_path, "2026-01-01_10-00-00_new", {"exit_code": 130, "reason": "stopped by SIGINT"})
    status = json.loads((run_dir / rundir.STATUS).read_text())
    for outcome in ("from_a_newer_launcher", None, ["a", "list"], 3):
        assert read.status_of({**status, "outcome": outcome}, []) == read.INTERRUPTED, outcome


def test_write_end_and_write_killed_write_the_outcome(tmp_path):
    record.write_end(tmp_path, 0.0, 130, "stopped by SIGINT", Reason.INTERRUPTED)
    status = json.loads(RunPaths(tmp_path).status.read_text())
    assert (status["reason"], status["outcome"]) == ("stopped by SIGINT", "interrupted")
    RunPaths(tmp_path).status.write_text(json.dumps({"started": "2026-01-01T10:00:00+00:00", "pid": 4321}))
    assert record.write_killed(str(RunPaths(tmp_path).status), 4321)
    status = json.loads(RunPaths(tmp_path).status.read_text())
    assert (status["exit_code"], status["reason"], status["outcome"]) == (137, "launcher killed", "launcher_killed")


def _node_cfg(job_dir: Path, node_rank: int = 1):
    from types import SimpleNamespace as NS

    launcher = NS(nnodes="2", node_rank=node_rank)
    return NS(run_dir=str(job_dir), run_root=str(job_dir.parent), run_name=None, launcher=launcher)


def test_a_node_launcher_started_again_keeps_its_lost_predecessors_record(tmp_path, capsys):
    """Before: node 1's second launcher in the same ``run_dir=`` overwrote ``node1/status.json`` (the
    lost predecessor's record then read ``success``). Now the predecessor's record (status.json, its
    config, command, logs, attempts) moves whole into ``node1/previous1/`` (``previous2/`` the next
    time); what is not a record (a file the trainer wrote there) stays."""
    from launcher.backends import local

    job = tmp_path / "job"
    node = job / "node1"
    (node / "logs").mkdir(parents=True)
    (node / "attempt1" / "logs").mkdir(parents=True)
    lost = {"started": "2026-01-01T00:00:00+00:00", "pid": 999999999, "pid_start": 1, "exit_code": None}
    record.write_json(node / "status.json", {**lost, "host": read.HOST})
    (node / "logs" / "rank0.log").write_text("the predecessor's last words\n")
    (node / "config.yaml").write_text("launcher:\n  topology: multinode\n")
    (node / "trainer.txt").write_text("not a record\n")
    assert local.run_dir(_node_cfg(job)) == node.resolve()
    kept = node / "previous1"
    assert json.loads((kept / "status.json").read_text()) == {**lost, "host": read.HOST}
    assert (kept / "logs" / "rank0.log").read_text() == "the predecessor's last words\n"
    assert sorted(p.name for p in kept.iterdir()) == ["attempt1", "config.yaml", "logs", "status.json"]
    assert sorted(p.name for p in node.iterdir()) == ["previous1", "trainer.txt"]
    assert capsys.readouterr().out == f"[train_multigpu] {node} held an earlier launcher's record: kept in {kept}\n"
    record.write_json(node / "status.json", {**lost, "exit_code": 0})  # the second one's, ended
    local.run_dir(_node_cfg(job))
    assert json.loads((node / "previous2" / "status.json").read_text())["exit_code"] == 0
    assert not (node / "status.json").exists() and (kept / "status.json").exists()
    assert local.run_dir(_node_cfg(job, node_rank=0)) == (job / "node0").resolve()  # nothing there: nothing moved


def test_a_node_launcher_refuses_a_directory_whose_launcher_still_records_there(tmp_path):
    """Two launchers for one node: the second is refused in one line and moves nothing."""
    from launcher.backends import local
    from launcher.errors import UserError

    node = tmp_path / "job" / "node1"
    node.mkdir(parents=True)
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        status = {"started": "2026-01-01T00:00:00+00:00", "pid": sleeper.pid, "host": read.HOST, "exit_code": None}
        record.write_json(node / "status.json", {**status, "pid_start": record.process_start(sleeper.pid)})
        with pytest.raises(UserError) as refused:
            local.run_dir(_node_cfg(tmp_path / "job"))
        assert str(refused.value) == (
            f"run_dir={node}: a launcher that still runs (pid {sleeper.pid}) records here: two launchers for one "
            "node (give this one its own launcher.node_rank, or stop the other first)"
        )
        assert sorted(p.name for p in node.iterdir()) == ["status.json"]
    finally:
        sleeper.kill()
        sleeper.wait()


@pytest.mark.parametrize(
    ("mode", "group", "warned"),
    [
        (0o777, None, "is writable by every user without the sticky bit"),
        (0o1777, None, None),
        (0o770, 65534, "is writable by its group without the sticky bit"),  # a team's group (nogroup here)
        (0o3770, 65534, None),
        (0o755, None, None),
    ],
)
def test_a_run_root_others_may_rename_entries_in_is_said_once(tmp_path, capsys, mode, group, warned):
    """A co-user who may rename entries of the run root can swap a new run directory for one of theirs
    (its links then written through): said as the directory is made, the launch goes on."""
    import os

    root = tmp_path / "shared"
    root.mkdir()
    if group is not None:
        if os.geteuid() != 0:
            unavailable("ROOT", "giving a directory another group needs root")
        os.chown(root, -1, group)
    os.chmod(root, mode)
    made = record.create_run_dir(str(root), "x", 0, False)
    assert made.parent == root.resolve() and made.is_dir()
    err = capsys.readouterr().err
    if warned is None:
        assert err == ""
    else:
        assert err.count("warning: run_root") == 1 and warned in err and f"chmod +t {root}" in err, err
