"""The torch back end's per-step cost, and its arithmetic kept: one real process
(tests/workers/torch_rollout_probe.py) runs the trainer's back end and the plain way of driving skrl's
PPO (the modules called, ``torch.no_grad``) side by side, CartPole (discrete) and Pendulum
(continuous), three iterations each with their PPO updates (docs/example_trainers.md, "Performance
notes")."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from trainer_procs import clean_env

PROBE = Path(__file__).resolve().parent / "workers" / "torch_rollout_probe.py"


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    r = subprocess.run(
        [sys.executable, str(PROBE)],
        env=clean_env(),
        cwd=tmp_path_factory.mktemp("probe"),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("task", ["CartPole-v1", "Pendulum-v1"])
def test_same_actions_parameters_and_evaluation_as_plain_skrl(report, task):
    got = report[task]
    assert got["params_moved"], got
    assert got["same_actions"] and got["same_params"] and got["same_eval"], got


@pytest.mark.parametrize("task", ["CartPole-v1", "Pendulum-v1"])
def test_rollout_update_and_evaluation_make_no_module_calls(report, task):
    """The networks run layer by layer through ``forward``: ``nn.Module.__call__``'s hook dispatch was
    12 calls per environment step (two networks: a Sequential of 4 layers and a head each), as many
    per forward pass of the update."""
    got = report[task]
    assert got["reference_calls_training"] > 0, got  # the counter counts
    assert got["calls_training"] == 0 and got["calls_eval"] == 0, got


@pytest.mark.parametrize("task", ["CartPole-v1", "Pendulum-v1"])
def test_rollout_runs_in_inference_mode_and_evaluation_draws_nothing(report, task):
    got = report[task]
    assert got["inference_tensors"], got  # no autograd bookkeeping on the rollout's tensors
    assert not got["eval_drew_random_numbers"], got  # no distribution built, no sample drawn
