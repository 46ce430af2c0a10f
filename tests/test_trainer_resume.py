"""Checkpoints under failure: SIGKILL then --resume, SIGTERM/SIGUSR1 exit codes, injected rank crash
with and without a torch-elastic restart."""

import json
import signal
import subprocess

import numpy as np
import pytest
import torch

from launcher.paths import WORKER_WRAPPER
from ports import free_port
from trainer_procs import PY, TRAIN, clean_env, iteration_lines, torchrun

pytestmark = pytest.mark.timeout(240)
SMALL = ["--num_envs", "4"]


def _start(tmp_path, args, **env):
    return subprocess.Popen(
        [PY, str(TRAIN), *SMALL, *args],
        cwd=tmp_path,
        env=clean_env(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_iteration(proc, n: int) -> list[str]:
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if line.startswith(f"[iter {n:4d}/"):
            return seen
    raise AssertionError(f"trainer ended before iteration {n}: {proc.stderr.read()[-3000:]}")


def _iterations(lines: list[str]) -> list[int]:
    return [int(line.split("/")[0].split()[-1]) for line in iteration_lines("".join(lines))]


def test_sigkill_then_resume_keeps_every_completed_iteration(tmp_path):
    run = tmp_path / "run"
    proc = _start(tmp_path, ["--max_iterations", "1000"], TRAIN_MULTIGPU_RUN_DIR=run)
    seen = _wait_for_iteration(proc, 3)
    proc.kill()
    rest, _ = proc.communicate(timeout=30)
    printed = _iterations(seen + rest.splitlines(keepends=True))  # every line it printed, to the kill
    assert printed == list(range(1, len(printed) + 1)) and len(printed) >= 3, printed
    ckpts = sorted((run / "checkpoints").glob("iter_*.ckpt"))
    done = int(ckpts[-1].stem.split("_")[1])
    # every printed iteration has its checkpoint (the checkpoint is written before the line), and
    # at most one more was checkpointed before the kill
    assert printed[-1] <= done <= printed[-1] + 1, (printed, done)
    saved = torch.load(ckpts[-1], weights_only=False)
    assert saved["iteration"] == done
    per_iteration = 4 * 64  # --num_envs 4, 64 rollout steps, one worker
    assert [steps for steps, _ in saved["history"]] == [i * per_iteration for i in range(1, done + 1)]

    dump = tmp_path / "dump"
    r = subprocess.run(
        [PY, str(TRAIN), *SMALL, "--resume", "--max_iterations", str(done + 2)],
        cwd=tmp_path,
        env=clean_env(TRAIN_MULTIGPU_RUN_DIR=run, TRAIN_MULTIGPU_EXAMPLE_DUMP_PARAMS=dump),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert _iterations(r.stdout.splitlines(keepends=True)) == [done + 1, done + 2]
    info = json.loads((dump / "rank0_info.json").read_text())
    assert info["start_iteration"] == done
    steps_per_iteration = 5 * 1  # CartPole's PPO: 5 learning epochs of 1 mini-batch (one Adam step each)
    assert info["optimizer_steps_start"] == done * steps_per_iteration  # Adam state came back
    assert info["optimizer_steps_end"] == (done + 2) * steps_per_iteration
    # the resumed policy starts from the checkpoint's parameters, element for element, in order
    saved_params = torch.cat([v.reshape(-1) for k, v in saved["agent"]["model"].items()]).numpy()
    np.testing.assert_array_equal(np.load(dump / "rank0_initial.npy"), saved_params)
    final = torch.load(run / "checkpoints" / f"iter_{done + 2:06d}.ckpt", weights_only=False)
    assert final["iteration"] == done + 2
    # the history continues: iterations 1..done from the killed run, then done+1, done+2
    assert [steps for steps, _ in final["history"]] == [i * per_iteration for i in range(1, done + 3)]
    assert final["history"][:done] == saved["history"]


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGUSR1, 138)])
def test_signal_finishes_iteration_checkpoints_and_exits(tmp_path, sig, code):
    run = tmp_path / "run"
    proc = _start(tmp_path, ["--max_iterations", "1000"], TRAIN_MULTIGPU_RUN_DIR=run)
    _wait_for_iteration(proc, 2)
    proc.send_signal(sig)
    rest, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err[-3000:]
    stopped = [line for line in rest.splitlines() if line.startswith("stopped by")]
    assert stopped and sig.name in stopped[0]
    last = int(iteration_lines(rest)[-1].split("/")[0].split()[-1]) if iteration_lines(rest) else 2
    assert (run / "checkpoints" / f"iter_{last:06d}.ckpt").exists()
    assert rest.strip().splitlines()[-1] == f"run_dir: {run}"


def test_injected_crash_exits_3_and_elastic_restart_resumes(tmp_path):
    args = ["--max_iterations", "4", *SMALL]
    env = clean_env(TRAIN_MULTIGPU_EXAMPLE_CRASH="2:1", TRAIN_MULTIGPU_RUN_DIR=tmp_path / "a")
    r = torchrun(2, args, env=env, cwd=tmp_path)
    assert r.returncode != 0
    assert "rank 1 exits 3 after iteration 2" in r.stderr
    assert "exitcode  : 3" in r.stderr  # torchrun's failure report for the crashed rank
    assert iteration_lines(r.stdout)[-1].startswith("[iter    2/")
    assert (tmp_path / "a" / "checkpoints" / "iter_000002.ckpt").exists()

    env = clean_env(TRAIN_MULTIGPU_EXAMPLE_CRASH="2:1", TRAIN_MULTIGPU_RUN_DIR=tmp_path / "b")
    r = torchrun(2, args, env=env, cwd=tmp_path, extra=("--max_restarts", "1"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "resuming from" in r.stdout and "iter_000002.ckpt" in r.stdout
    assert [line.split("/")[0] for line in iteration_lines(r.stdout)] == [
        "[iter    1",
        "[iter    2",
        "[iter    3",
        "[iter    4",
    ]


def test_an_empty_newest_checkpoint_is_named_and_the_one_before_it_resumed(tmp_path):
    """Issue 25 (low): an empty newest checkpoint (a disk that filled up) ended --resume with exit 2
    and no word; a link to /dev/zero, a FIFO or a directory under a checkpoint's name were taken as
    the newest (the trainer then read /dev/zero until memory ran out). Regular files only."""
    import os

    run = tmp_path / "run"
    first = subprocess.run(
        [PY, str(TRAIN), *SMALL, "--max_iterations", "3"],
        cwd=tmp_path,
        env=clean_env(TRAIN_MULTIGPU_RUN_DIR=run),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert first.returncode == 0, first.stderr[-3000:]
    ckpts = run / "checkpoints"
    (ckpts / "iter_000003.ckpt").write_bytes(b"")  # the newest, empty
    os.symlink("/dev/zero", ckpts / "iter_000009.ckpt")
    os.mkfifo(ckpts / "iter_000008.ckpt")
    (ckpts / "iter_000007.ckpt").mkdir()
    r = subprocess.run(
        [PY, str(TRAIN), *SMALL, "--resume", "--max_iterations", "4"],
        cwd=tmp_path,
        env=clean_env(TRAIN_MULTIGPU_RUN_DIR=run),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    empty = ckpts / "iter_000003.ckpt"
    assert f"train.py: checkpoint {empty} is empty (0 bytes); trying the one before it" in r.stderr
    assert f"resuming from {ckpts / 'iter_000002.ckpt'}" in r.stdout
    assert _iterations(r.stdout.splitlines(keepends=True)) == [3, 4]


def test_resume_with_only_an_empty_checkpoint_says_so(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "iter_000002.ckpt").write_bytes(b"")
    r = subprocess.run(
        [PY, str(TRAIN), *SMALL, "--resume", "--max_iterations", "3"],
        cwd=tmp_path,
        env=clean_env(TRAIN_MULTIGPU_RUN_DIR=run),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2
    assert f"checkpoint {run / 'checkpoints' / 'iter_000002.ckpt'} is empty (0 bytes)" in r.stderr
    assert f"train.py: --resume: no usable checkpoint in {run / 'checkpoints'}" in r.stderr


def test_a_jax_rank_whose_peer_died_leaves_at_once_with_its_exit_record(tmp_path):
    """A JAX rank whose collective failed because its peer died (rank 1 exits 3) used to wait in JAX's
    own exit handler (the distributed client's shutdown waits for every process: the dead one too,
    for minutes) until the launcher's SIGKILL a second later: the trainer leaves without it after a
    failure, with exit code 1, and the record the worker wrote (the exception) is kept."""
    logs, port = tmp_path / "logs", free_port()
    env = clean_env(
        TRAIN_MULTIGPU_EXAMPLE_CRASH="1:1",
        TRAIN_MULTIGPU_RUN_DIR=tmp_path / "run",
        TRAIN_MULTIGPU_LOG_DIR=logs,
        JAX_PLATFORMS="cpu",
        JAX_WORLD_SIZE=2,
        JAX_COORDINATOR_ADDR="127.0.0.1",
        JAX_COORDINATOR_PORT=port,
    )
    argv = [PY, str(WORKER_WRAPPER), str(TRAIN), *SMALL, "--max_iterations", "3", "--ml_framework", "jax"]
    ranks = [
        subprocess.Popen(
            [*argv, "--distributed"],
            env=dict(env, JAX_RANK=str(rank), JAX_LOCAL_RANK=str(rank)),
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for rank in (0, 1)
    ]
    try:
        assert ranks[1].wait(timeout=180) == 3
        assert ranks[0].wait(timeout=30) == 1  # before: still waiting for rank 1 after 30 s
    finally:
        for proc in ranks:
            proc.kill()
            proc.wait()
    record = json.loads((logs / "rank0.exit.json").read_text())
    assert record["exit_code"] == 1 and record["exception"].startswith("JaxRuntimeError"), record
