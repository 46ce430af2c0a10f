"""End to end with real processes: torchrun with 2 CPU workers doing a gloo all-reduce, 2 JAX ranks
doing a psum through skrl's config, and a failing rank's exit code reaching the user."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(180)


def run_dir_of(stdout: str) -> Path:
    line = [l for l in stdout.splitlines() if "run directory:" in l][-1]
    return Path(line.rsplit("run directory:", 1)[1].strip())


def test_torchrun_two_workers_all_reduce(run_cli):
    result = run_cli("log_all_ranks=true", "run_name=ar")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("all_reduce sum=3 expected=3") == 2, result.stdout
    run_dir = run_dir_of(result.stdout)
    assert run_dir.name.endswith("_ar")
    status = json.loads((run_dir / "status.json").read_text())
    assert status["exit_code"] == 0
    assert "torch.distributed.run" in (run_dir / "command.sh").read_text()
    assert "topology: single_node" in (run_dir / "config.yaml").read_text()


def test_jax_two_ranks_psum_through_skrl(run_cli):
    result = run_cli("launcher=skrl_jax", "launcher.nproc_per_node=2", "log_all_ranks=true")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("psum=3 expected=3") == 2, result.stdout


def test_torchrun_failing_rank_fails_the_launch(run_cli):
    result = run_cli("--", "--exit_code_on_rank", "1:7")
    assert result.returncode != 0
    status = json.loads((run_dir_of(result.stdout) / "status.json").read_text())
    assert status["exit_code"] == result.returncode


def test_jax_failing_rank_exit_code_reaches_the_user(run_cli):
    result = run_cli("launcher=skrl_jax", "launcher.nproc_per_node=2", "--", "--exit_code_on_rank", "1:7")
    assert result.returncode == 7, result.stdout + result.stderr
