"""The learning target (slow, ~2 minutes on 2 cores): the default job -- 2 torch workers under torchrun,
CartPole-v1, default hyperparameters -- reaches a deterministic evaluation return >= 475 for the default
seed and 3 others, each job well under 2 minutes start to exit.

Chosen: the real default job (2 workers) for all 4 seeds, run one after another (parallel runs would
share the 2 cores and measure nothing).  Deselect with `-m "not slow"`.
"""

import json
import time

import pytest

from trainer_procs import clean_env, torchrun

SEEDS = [None, 1, 2, 3]  # None = the default seed from examples/agents/CartPole-v1.yaml


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_default_job_solves_cartpole_for_four_seeds(tmp_path):
    results = {}
    for seed in SEEDS:
        run = tmp_path / f"seed_{seed}"
        args = [] if seed is None else ["--seed", str(seed)]
        t0 = time.monotonic()
        r = torchrun(2, args, env=clean_env(TRAIN_MULTIGPU_RUN_DIR=run), cwd=tmp_path, timeout=180)
        wall = time.monotonic() - t0
        assert r.returncode == 0, r.stderr[-3000:]
        results[seed] = (json.loads((run / "evaluation.json").read_text())["mean_return"], wall)
    print("seed -> (eval mean return, wall s):", results)
    for seed, (ret, wall) in results.items():
        assert ret >= 475, f"seed {seed}: evaluation return {ret} < 475 ({results})"
        assert wall < 120, f"seed {seed}: {wall:.0f}s start to exit ({results})"
