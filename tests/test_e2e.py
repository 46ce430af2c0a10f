"""End to end with real processes: torchrun with 2 CPU workers doing a gloo all-reduce, 2 JAX ranks
doing a psum through skrl's config, and a failing rank's exit code reaching the user."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ALLREDUCE, clean_env
from ports import free_port

pytestmark = pytest.mark.timeout(180)


def run_dir_of(stdout: str) -> Path:
    line = [text for text in stdout.splitlines() if "run directory:" in text][-1]
    return Path(line.rsplit("run directory:", 1)[1].strip())


# examples/allreduce.py as its own rank 0 of 1, then what its process's garbage collector holds
FROZEN_PROBE = """
import gc, runpy, sys
sys.argv = [sys.argv[1]]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
except SystemExit as done:
    print("exit", done.code)
print("frozen", gc.get_freeze_count())
"""


def test_the_all_reduce_check_leaves_what_torch_built_to_no_collection_at_exit(tmp_path):
    """A check of seconds, started by most launch tests: torch's import ran without the cyclic
    collector, and what it built is frozen, so the interpreter's exit walks none of it (a third of a
    second of CPU per rank)."""
    env = clean_env(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    r = subprocess.run(
        [sys.executable, "-c", FROZEN_PROBE, ALLREDUCE], capture_output=True, text=True, timeout=120, env=env
    )
    assert r.returncode == 0 and "all_reduce sum=1 expected=1" in r.stdout, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines[-2] == "exit 0" and int(lines[-1].split()[1]) > 100_000, r.stdout


def test_torchrun_two_workers_all_reduce(run_cli):
    result = run_cli(f"script={ALLREDUCE}", "log_all_ranks=true", "run_name=ar")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("all_reduce sum=3 expected=3") == 2, result.stdout
    run_dir = run_dir_of(result.stdout)
    assert run_dir.name.endswith("_ar")
    status = json.loads((run_dir / "status.json").read_text())
    assert status["exit_code"] == 0
    assert "torch.distributed.run" in (run_dir / "command.sh").read_text()
    assert "topology: single_node" in (run_dir / "config.yaml").read_text()


def test_jax_two_ranks_psum_through_skrl(run_cli):
    result = run_cli(f"script={ALLREDUCE}", "launcher=skrl_jax", "launcher.nproc_per_node=2", "log_all_ranks=true")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("psum=3 expected=3") == 2, result.stdout


def test_torchrun_failing_rank_fails_the_launch(run_cli):
    result = run_cli(f"script={ALLREDUCE}", "--", "--exit_code_on_rank", "1:7")
    assert result.returncode == 7, result.stdout + result.stderr  # the rank's own code, not torchrun's 1
    assert "FAILED: node 0, rank 1 (local rank 1): exit code 7" in result.stderr
    status = json.loads((run_dir_of(result.stdout) / "status.json").read_text())
    assert status["exit_code"] == result.returncode


def test_jax_failing_rank_exit_code_reaches_the_user(run_cli):
    result = run_cli(
        f"script={ALLREDUCE}", "launcher=skrl_jax", "launcher.nproc_per_node=2", "--", "--exit_code_on_rank", "1:7"
    )
    assert result.returncode == 7, result.stdout + result.stderr


@pytest.mark.parametrize("topology", ["single_node", "skrl_jax"])
def test_the_main_job_trains_the_bundled_trainer(run_cli, topology):
    """The default target is the bundled skrl PPO trainer; presets=debug keeps it tiny."""
    result = run_cli(f"launcher={topology}", "presets=debug", "launcher.nproc_per_node=2")
    assert result.returncode == 0, result.stdout + result.stderr
    run_dir = run_dir_of(result.stdout)
    trainer_dir = Path(result.stdout.split("run_dir:")[-1].split()[0])
    assert trainer_dir == run_dir  # the trainer writes into the launcher's run directory
    assert list(run_dir.glob("checkpoints/*")) and (run_dir / "logs" / "rank1.log").is_file()
    # every rank beat once per iteration for the hang watchdog (docs/hangs.md): "<iteration> <total>"
    iterations, total = (run_dir / "logs" / "rank1.beat").read_text().split()
    assert iterations == total and int(total) > 0
