"""Flags: the launcher's debug preset is fast; unknown flags fail clearly; Isaac Lab's extra flags pass."""

import csv
import time

import pytest

from trainer_procs import bare, clean_env, iteration_lines

pytestmark = pytest.mark.timeout(120)


def test_debug_sized_run_is_fast_and_accepts_isaac_lab_flags(tmp_path):
    t0 = time.monotonic()
    r = bare(
        ["--max_iterations", "5", "--num_envs", "4", "--rl_library", "skrl", "--headless", "--run_name", "dbg"],
        env=clean_env(),
        cwd=tmp_path,
    )
    elapsed = time.monotonic() - t0
    assert r.returncode == 0, r.stderr[-3000:]
    assert len(iteration_lines(r.stdout)) == 5
    assert "evaluation: mean_return=" in r.stdout
    run_dir = tmp_path / "runs" / "CartPole-v1" / "dbg"  # default layout under the cwd
    assert r.stdout.strip().splitlines()[-1] == f"run_dir: {run_dir}"
    assert (run_dir / "trainer_config.yaml").exists()
    assert elapsed < 30, f"debug-sized run took {elapsed:.1f}s"
    # metrics.csv splits each iteration: rollout, PPO update, all-gather, checkpoint write (what
    # benchmarks/trainer_scaling.py reports separately); together they are the iteration
    with open(run_dir / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(row["iteration"]) for row in rows] == [1, 2, 3, 4, 5]
    for row in rows:
        parts = [float(row[name]) for name in ("rollout_s", "update_s", "sync_s", "checkpoint_s")]
        assert all(part >= 0 for part in parts) and float(row["checkpoint_s"]) > 0, row
        # (the few bookkeeping lines between the parts are not counted: "most of", generous under load)
        assert 0.5 * float(row["iteration_s"]) <= sum(parts) <= float(row["iteration_s"]), row


def test_unknown_flag_is_an_argparse_error(tmp_path):
    r = bare(["--num_env", "4"], env=clean_env(), cwd=tmp_path, timeout=60)
    assert r.returncode == 2
    assert "unrecognized arguments: --num_env 4" in r.stderr


def test_resume_without_checkpoint_fails_clearly(tmp_path):
    r = bare(["--resume", "--run_name", "nothing", "--max_iterations", "2"], env=clean_env(), cwd=tmp_path)
    assert r.returncode == 2
    assert "no usable checkpoint" in r.stderr


def test_pendulum_continuous_runs(tmp_path):
    r = bare(["--task", "Pendulum-v1", "--max_iterations", "3", "--num_envs", "4"], env=clean_env(), cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "evaluation: mean_return=" in r.stdout
