"""The bundled trainer across a world size that changes between attempts (issue 20 item 6): an
elastic launch (``launcher.nnodes=MIN:MAX``) that lost a node resumes the same run directory with
fewer workers, one whose node came back with more. Real torchrun / JAX rank processes: the
checkpoint written at one world size is loaded at another, every iteration is in metrics.csv once
and in order, the per-worker env count stays (the total follows the world size) and the trainer
says so (docs/recovery.md, "Elastic nodes")."""

import csv
import json

import pytest

from trainer_procs import clean_env, iteration_lines, jax_ranks, torchrun

pytestmark = pytest.mark.timeout(400)
ENVS, ROLLOUTS = 4, 64  # --num_envs (per worker), CartPole's rollout steps per iteration


def _metrics(run) -> list[tuple[int, int]]:
    with open(run / "metrics.csv") as f:
        return [(int(row["iteration"]), int(row["env_steps"])) for row in csv.DictReader(f)]


def test_torch_resumes_at_a_smaller_then_a_larger_world_size(tmp_path):
    run = tmp_path / "run"
    env = clean_env(TRAIN_MULTIGPU_RUN_DIR=run)
    args = ["--num_envs", str(ENVS)]
    first = torchrun(2, [*args, "--max_iterations", "2"], env=env, cwd=tmp_path, timeout=180)
    assert first.returncode == 0, first.stderr[-3000:]
    smaller = torchrun(1, [*args, "--max_iterations", "3", "--resume"], env=env, cwd=tmp_path, timeout=180)
    assert smaller.returncode == 0, smaller.stderr[-3000:]
    said = "world size 2 -> 1 since the checkpoint: 4 envs per worker as before, 4 in all (was 8)"
    assert said in smaller.stdout and len(iteration_lines(smaller.stdout)) == 1, smaller.stdout[-3000:]
    assert json.loads((run / "run_info.json").read_text())["checkpoint_world_size"] == 2
    larger = torchrun(2, [*args, "--max_iterations", "4", "--resume"], env=env, cwd=tmp_path, timeout=180)
    assert larger.returncode == 0, larger.stderr[-3000:]
    assert "world size 1 -> 2 since the checkpoint: 4 envs per worker as before, 8 in all (was 4)" in larger.stdout
    step = ENVS * ROLLOUTS
    assert _metrics(run) == [(1, 2 * step), (2, 4 * step), (3, 5 * step), (4, 7 * step)]


def test_jax_resumes_at_a_smaller_world_size(tmp_path):
    run = tmp_path / "run"
    env = clean_env(TRAIN_MULTIGPU_RUN_DIR=run)
    args = ["--num_envs", str(ENVS)]
    for rank in jax_ranks(2, [*args, "--max_iterations", "1"], env=env, cwd=tmp_path, timeout=300):
        assert rank.returncode == 0, rank.stderr[-3000:]
    (alone,) = jax_ranks(1, [*args, "--max_iterations", "2", "--resume"], env=env, cwd=tmp_path, timeout=300)
    assert alone.returncode == 0, alone.stderr[-3000:]
    assert "world size 2 -> 1 since the checkpoint: 4 envs per worker as before, 4 in all (was 8)" in alone.stdout
    step = ENVS * ROLLOUTS
    assert _metrics(run) == [(1, 2 * step), (2, 3 * step)]
