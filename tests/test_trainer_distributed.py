"""Real multi-process runs of examples/train.py: gradients are averaged so every rank ends with the
same parameters, which moved away from the initial ones; each rank's envs are seeded differently."""

import json

import numpy as np
import pytest

from trainer_procs import clean_env, iteration_lines, jax_ranks, torchrun

pytestmark = pytest.mark.timeout(240)


def _check_dump(dump, world: int) -> list[dict]:
    finals = [np.load(dump / f"rank{r}_final.npy") for r in range(world)]
    initials = [np.load(dump / f"rank{r}_initial.npy") for r in range(world)]
    for r in range(1, world):
        np.testing.assert_array_equal(initials[r], initials[0])  # rank 0's parameters were broadcast
        np.testing.assert_array_equal(finals[r], finals[0])  # averaged gradients keep ranks identical
    assert not np.allclose(finals[0], initials[0]), "training did not change the parameters"
    infos = [json.loads((dump / f"rank{r}_info.json").read_text()) for r in range(world)]
    assert [i["rank_seed"] for i in infos] == [infos[0]["rank_seed"] + r for r in range(world)]
    assert not set(infos[0]["env_seeds"]) & set(infos[1]["env_seeds"]), "ranks share env seeds"
    assert infos[0]["first_obs"] != infos[1]["first_obs"], "ranks' envs start identically"
    # start-up (the framework's and skrl's imports, the agent) ran no full garbage collection, and what
    # it built is frozen: no later collection, the interpreter's at exit included, walks it again (a
    # second of CPU per rank: examples/train.py, trainer_loop.run)
    for info in infos:
        assert info["startup_full_collections"] == 0 and info["frozen_objects"] > 100_000, info
    return infos


def test_torchrun_two_ranks_gloo_identical_params(tmp_path):
    dump = tmp_path / "dump"
    env = clean_env(TRAIN_MULTIGPU_EXAMPLE_DUMP_PARAMS=dump, TRAIN_MULTIGPU_RUN_DIR=tmp_path / "run")
    r = torchrun(2, ["--max_iterations", "3", "--num_envs", "4", "--seed", "7"], env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    _check_dump(dump, 2)
    assert len(iteration_lines(r.stdout)) == 3  # rank 0 only: one line per iteration
    assert r.stdout.strip().splitlines()[-1] == f"run_dir: {tmp_path / 'run'}"
    # rank 1 says a little in its own stream (its log, logs/rank1.log under the launcher), never on rank 0's
    assert "rank 1:" not in r.stdout
    own = [line for line in r.stderr.splitlines() if line.startswith("rank 1: ")]
    assert own == ["rank 1: CartPole-v1 | torch | worker 1 of 2 x 4 envs | device cpu | iterations 1..3",
                   "rank 1: done: 3 iterations"], r.stderr[-3000:]  # fmt: skip
    cfg = json.loads((tmp_path / "run" / "run_info.json").read_text())
    assert cfg["world_size"] == 2 and cfg["dist_backend"] == "gloo" and cfg["seed"] == 7
    assert (tmp_path / "run" / "learning_curve.png").stat().st_size > 0
    assert list((tmp_path / "run" / "tensorboard").glob("events.out.tfevents.*"))
    assert list((tmp_path / "run" / "checkpoints").glob("iter_000003.ckpt"))


def test_jax_two_ranks_identical_params(tmp_path):
    """... and every rank keeps the programs it compiled in JAX's persistent compilation cache (JAX
    writes it from process 0 only: rank 1's programs, which name its own device, were compiled again
    at every restart; docs/recovery.md), rank 1 in a folder of its own."""
    dump, cache = tmp_path / "dump", tmp_path / "cache"
    env = clean_env(
        TRAIN_MULTIGPU_EXAMPLE_DUMP_PARAMS=dump,
        TRAIN_MULTIGPU_RUN_DIR=tmp_path / "run",
        JAX_COMPILATION_CACHE_DIR=cache,
        JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0,
    )
    results = jax_ranks(2, ["--max_iterations", "3", "--num_envs", "4", "--seed", "7"], env=env, cwd=tmp_path)
    for rank, r in enumerate(results):
        assert r.returncode == 0, f"rank {rank}: {r.stderr[-3000:]}"
    _check_dump(dump, 2)
    assert len(iteration_lines(results[0].stdout)) == 3
    assert results[1].stdout.strip() == "", "non-zero ranks must stay quiet on stdout"
    # entries are <program>-<key>-cache; rank 0 runs a few programs more (evaluation, checkpoints)
    rank0, rank1 = (
        {p.name.rsplit("-", 2)[0]: p.name for p in folder.glob("*-cache")} for folder in (cache, cache / "rank1")
    )
    assert "jit__act_fn" in rank1 and set(rank1) <= set(rank0), (sorted(rank0), sorted(rank1))
    assert rank1["jit__act_fn"] != rank0["jit__act_fn"]  # the rollout step's key names the rank's device
