"""The local launch as a back end (launcher/backends/local.py): ``describe``, ``logs`` and ``cancel``
from a :class:`Handle` alone, on a real launch (real launcher, real rank process, real signals)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import clean_env
from launcher import backends
from launcher.backends.base import Handle, State
from launcher.errors import UserError

pytestmark = pytest.mark.timeout(120)

# prints a numbered line every 0.05 s until stopped (or 60 s)
WORKER = """
import sys, time
for i in range(1200):
    print("line", i, flush=True)
    time.sleep(0.05)
"""


def _launch(tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    argv = [sys.executable, "-m", "launcher", "launcher=skrl_jax", "launcher.nproc_per_node=1", f"script={script}"]
    proc = subprocess.Popen(
        [*argv, f"run_root={tmp_path / 'runs'}"], cwd=tmp_path, env=clean_env(), stdout=subprocess.PIPE, text=True
    )
    first = proc.stdout.readline()
    assert first.startswith("[train_multigpu] run directory: "), first
    return proc, Path(first.split(": ", 1)[1].strip())


def _lines(local, handle: Handle) -> list[str]:
    """Rank 0's lines so far; none while its log does not exist yet (logs says so: a UserError)."""
    try:
        return list(local.logs(handle, rank=0))
    except UserError:
        return []


def _until(predicate, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("not within the time")


def test_describe_logs_and_cancel_a_real_local_launch(tmp_path):
    proc, run_dir = _launch(tmp_path)
    local = backends.get("none")
    try:
        handle = Handle("none", str(proc.pid), str(run_dir))
        assert local.describe(handle).state is State.RUNNING
        _until(lambda: "line 3\n" in _lines(local, handle))
        lines = local.logs(handle, rank=0, follow=True)
        assert next(lines) == "line 0\n"
        local.cancel(handle)  # what one Ctrl+C does: the launcher stops the rank and closes the record
        assert proc.wait(timeout=60) == 130
        rest = list(lines)  # follow ends once status.json has the launch's end
        assert rest and rest[0] == "line 1\n"
    finally:
        if proc.poll() is None:
            proc.kill()
    status = local.describe(handle)
    assert status.state is State.STOPPED and status.exit_code == 130, status
    assert "SIGINT" in status.detail
    assert local.describe(Handle("none", "1", str(tmp_path / "no-such-run"))).state is State.UNKNOWN


def test_cancel_signals_only_the_launcher_the_record_names(tmp_path):
    """A pid reused by another process (its start time is not the recorded one) is left alone."""
    other = subprocess.Popen(["sleep", "60"])
    try:
        (tmp_path / "status.json").write_text(
            json.dumps({"started": "2026-01-01T00:00:00+00:00", "pid": other.pid, "pid_start": 1, "exit_code": None})
        )
        with pytest.raises(UserError) as refused:
            backends.get("none").cancel(Handle("none", str(other.pid), str(tmp_path)))
        assert str(refused.value).endswith("already ended (lost: its launcher is gone): nothing to stop")
        time.sleep(0.2)
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


def test_the_record_side_imports_no_hydra():
    code = (
        "import sys; from launcher.backends import local; "
        "assert not {'hydra', 'omegaconf'} & set(sys.modules), sorted(m for m in sys.modules if 'hydra' in m)"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "PYTHONPATH": ""})


def test_logs_without_a_rank_are_every_ranks_lines(tmp_path):
    """``logs(handle)`` (rank None) is every rank's output, as on every back end (base.Backend.logs):
    each line names its rank, rank after rank; following an ended launch gives the same and ends. A
    real two-rank launch, run to its end."""
    script = tmp_path / "worker.py"
    script.write_text('import os\nfor i in range(3):\n    print("rank", os.environ["JAX_RANK"], "line", i)\n')
    argv = [sys.executable, "-m", "launcher", "launcher=skrl_jax", "launcher.nproc_per_node=2", f"script={script}"]
    done = subprocess.run(
        [*argv, f"run_root={tmp_path / 'runs'}"], cwd=tmp_path, env=clean_env(), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    local = backends.get("none")
    handle = Handle("none", "1", str(run_dir))
    expected = [f"[rank {r}] rank {r} line {i}\n" for r in (0, 1) for i in range(3)]
    assert list(local.logs(handle)) == expected
    assert list(local.logs(handle, follow=True)) == expected
    assert list(local.logs(handle, rank=1)) == [f"rank 1 line {i}\n" for i in range(3)]
    with pytest.raises(UserError, match="--rank=all: no readable rank log in"):
        list(local.logs(Handle("none", "1", str(tmp_path))))
