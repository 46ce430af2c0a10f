"""The restart policy (launcher/restarts.py, pure), its keys (checks.restart_keys: one error line per
bad value) and the policy table in docs/recovery.md (issue 20). The attempts themselves, with real
launches: tests/test_recovery.py."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import clean_env
from launcher import restarts
from launcher.checks import restart_keys
from launcher.config.schema import TrainConfig
from launcher.errors import UserError
from launcher.rundir import Reason, RunPaths, reason_of

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_the_docs_table_lists_every_class_with_its_default():
    text = (DOCS / "recovery.md").read_text()
    rows = dict(re.findall(r"^\| `([a-z-]+)` \| (yes|no) \|", text, re.M))
    assert rows == {name: "yes" if retried else "no" for name, (retried, _) in restarts.CLASSES.items()}


def test_a_crash_loop_stops_after_the_first_restart_without_progress():
    """Attempt 0 fails before any iteration (not counted: a start-up failure gets its restart), attempt
    1 too: stalled 1 >= max_without_progress 1, the launch ends with reason no progress."""
    policy = restarts.Policy.of(5, ["default", "exit-code"], 1)
    stalled, decisions = 0, []
    for attempt in range(6):
        progress = restarts.progressed(None, None, False)
        if attempt > 0:
            stalled = 0 if progress else stalled + 1
        decisions.append(restarts.decide(policy, attempt, "exit-code", stalled))
        if not decisions[-1].restart:
            break
    assert [d.restart for d in decisions] == [True, False]
    assert decisions[-1].ended is Reason.NO_PROGRESS


def test_progress_resets_the_count_and_the_max_bounds_the_restarts():
    policy = restarts.Policy.of(2, None, 1)
    assert restarts.decide(policy, 1, "hang", 0).restart  # attempt 1 made progress
    assert restarts.decide(policy, 2, "hang", 0).why == "restart.max=2 reached"


@pytest.mark.parametrize(
    "ended, cause, code, signal, cls",
    [
        (Reason.NODE_LOST, None, 125, None, "node-lost"),
        (Reason.FAILED, "SIGTERM", 143, "SIGTERM", "killed"),
        (Reason.FAILED, "SIGABRT", 134, "SIGABRT", "crash"),
        (Reason.FAILED, "exception", 2, None, "usage"),
        (Reason.FAILED, "cuda-oom", 1, None, "cuda-oom"),
        (Reason.INTERRUPTED, None, 130, None, None),
        (Reason.FAIL_FAST_STOP, None, 143, None, None),
    ],
)
def test_failure_class(ended, cause, code, signal, cls):
    assert restarts.failure_class(ended, cause, code, signal) == cls


def test_no_progress_is_a_reason_old_records_read_from_their_text():
    assert reason_of({"exit_code": 3, "reason": "no progress"}) is Reason.NO_PROGRESS


def test_run_paths_know_the_attempts(tmp_path):
    (tmp_path / "attempt2").mkdir()
    (tmp_path / "attempt1").mkdir()
    (tmp_path / "attempt0").mkdir()  # not an attempt directory: attempt 0 is the run directory itself
    (tmp_path / "attemptx").mkdir()
    assert [p.root for p in RunPaths(tmp_path).attempts()] == [tmp_path, tmp_path / "attempt1", tmp_path / "attempt2"]


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("max", -1, "restart.max=-1: an integer in 0..1000 (0: no restarts)"),
        ("max", 1001, "restart.max=1001: an integer in 0..1000 (0: no restarts)"),
        (
            "max_without_progress",
            0,
            "restart.max_without_progress=0: an integer in 1..1000 (restarted attempts in a row without progress "
            "before the launch stops)",
        ),
        ("classes", ["hang", "oom"], "restart.classes=oom: a failure class (hang, node-lost"),
    ],
)
def test_each_bad_value_is_one_error_naming_the_key(key, value, message):
    cfg = TrainConfig()
    setattr(cfg.restart, key, value)
    with pytest.raises(UserError) as err:
        restart_keys(cfg)
    assert str(err.value).startswith(message)


def test_restarts_and_torchruns_own_restarts_are_not_combined():
    cfg = TrainConfig()
    cfg.restart.max, cfg.launcher.max_restarts = 2, 1
    with pytest.raises(UserError, match=r"^restart.max=2: cannot be combined with launcher.max_restarts=1 "):
        restart_keys(cfg)
    cfg.launcher.max_restarts = 0  # torchrun's 0 is no restart: allowed
    restart_keys(cfg)


def test_restarts_across_nodes_are_allowed():
    """(branch nodes: every node restarts together, node 0 deciding: tests/test_coordinator.py,
    tests/test_restarts_nodes.py; this test refused them before)"""
    cfg = TrainConfig()
    cfg.restart.max, cfg.launcher.nnodes = 1, "2"
    restart_keys(cfg)


def test_restarts_in_a_parallel_sweep_are_refused_in_this_version():
    cfg = TrainConfig()
    cfg.restart.max, cfg.sweep.parallel = 1, 2
    with pytest.raises(UserError, match=r"^restart.max=1: a parallel sweep \(sweep.parallel=2\) runs each job once"):
        restart_keys(cfg)


def test_a_bad_value_on_the_command_line_is_one_line_exit_2(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "launcher", "restart.classes=[hang,segfault]", "dry_run=true"],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2
    assert r.stderr.startswith("train_multigpu: error: restart.classes=segfault: a failure class (")
    assert len(r.stderr.splitlines()) == 1 and "Traceback" not in r.stderr
    assert not any(tmp_path.iterdir())  # no failed check leaves a file behind


@pytest.mark.parametrize("restart_max", [0, 2])
def test_the_dry_run_shows_the_attempt_variable_and_the_restarts_only_when_they_are_on(tmp_path, restart_max):
    r = subprocess.run(
        [sys.executable, "-m", "launcher", f"restart.max={restart_max}", "dry_run=true", "launcher.nproc_per_node=2"],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert ("export TRAIN_MULTIGPU_ATTEMPT=0" in r.stdout) is bool(restart_max)
    assert ("# restarts: up to 2 after follower, hang, " in r.stdout) is bool(restart_max)
