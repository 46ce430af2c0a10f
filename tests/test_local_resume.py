"""How a restarted attempt of a local launch resumes (backends/local_resume.py): the bundled trainer's
--resume once a checkpoint exists, Isaac Lab's flags from the previous attempt's rank 0 log, nothing
for a script of one's own; every attempt's TRAIN_MULTIGPU_ATTEMPT and log directory."""

from __future__ import annotations

import os

from launcher.backends.local_resume import LocalResume
from launcher.config.schema import Topology
from launcher.names import ATTEMPT_VAR, LOG_DIR_VAR, RUN_DIR_VAR
from launcher.plan import LaunchPlan, ProcessSpec
from launcher.rundir import RunPaths


def first_plan(trainer_dir) -> LaunchPlan:
    spec = ProcessSpec("torchrun", ("py", "-m", "torch.distributed.run", "w.py", "train.py", "--x=1", "--distributed"))
    env = {RUN_DIR_VAR: str(trainer_dir), ATTEMPT_VAR: "0"}
    return LaunchPlan(Topology.single_node, "examples", "cpu", "gloo", 2, "1", 0, "train.py", env, (spec,), 30.0, False)


def test_the_bundled_trainer_resumes_with_resume_once_a_checkpoint_exists(tmp_path):
    paths = RunPaths(tmp_path)
    resume = LocalResume(first_plan(tmp_path), "examples", "skrl", paths)
    plan, checkpoint = resume.plan(1, paths, paths.attempt(1))
    assert checkpoint is None and plan.processes[0].argv[-2:] == ("--x=1", "--distributed")  # none yet: over
    (tmp_path / "checkpoints").mkdir()
    for name in ("iter_000002.ckpt", "iter_000010.ckpt", "notes.txt"):
        (tmp_path / "checkpoints" / name).write_bytes(b"state")
    # newer names the trainer does not resume from: empty, a link to a device, a FIFO, a directory
    (tmp_path / "checkpoints" / "iter_000011.ckpt").write_bytes(b"")
    os.symlink("/dev/zero", tmp_path / "checkpoints" / "iter_000012.ckpt")
    os.mkfifo(tmp_path / "checkpoints" / "iter_000013.ckpt")
    (tmp_path / "checkpoints" / "iter_000014.ckpt").mkdir()
    plan, checkpoint = resume.plan(2, paths.attempt(1), paths.attempt(2))
    assert checkpoint == str(tmp_path / "checkpoints" / "iter_000010.ckpt")
    assert plan.processes[0].argv[-3:] == ("--x=1", "--resume", "--distributed")
    assert plan.env[ATTEMPT_VAR] == "2" and plan.env[LOG_DIR_VAR] == str(tmp_path / "attempt2" / "logs")
    assert resume.shown(checkpoint) == "checkpoints/iter_000010.ckpt"


def test_isaac_lab_resumes_from_the_run_folder_the_previous_attempts_rank_0_log_names(tmp_path):
    folder = tmp_path / "logs" / "rsl_rl" / "cartpole" / "2025-01-01_10-00-00"
    folder.mkdir(parents=True)
    for n in (50, 100):
        (folder / f"model_{n}.pt").write_bytes(b"")
    paths = RunPaths(tmp_path / "run")
    paths.logs.mkdir(parents=True)
    paths.rank_log(0).write_text(
        f"[INFO] Logging experiment in directory: {folder.parent}\n"
        "Exact experiment name requested from command line: 2025-01-01_10-00-00\n"
    )
    resume = LocalResume(first_plan(tmp_path / "run"), "isaaclab", "rsl_rl", paths)
    assert resume.checkpoint() == "model_100.pt"
    plan, checkpoint = resume.plan(1, paths, paths.attempt(1))
    assert checkpoint == "model_100.pt"
    argv = plan.processes[0].argv
    assert argv[-6:] == (
        "--resume",
        "--load_run",
        "2025-01-01_10-00-00",
        "--checkpoint",
        "model_100.pt",
        "--distributed",
    )
    assert resume.checkpoint() is None  # attempt 1 has no log yet: nothing new


def test_a_script_of_ones_own_gets_no_argument_only_its_attempt(tmp_path):
    paths = RunPaths(tmp_path)
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "iter_000002.ckpt").write_bytes(b"")
    resume = LocalResume(first_plan(tmp_path), "mine", "skrl", paths)
    plan, checkpoint = resume.plan(1, paths, paths.attempt(1))
    assert checkpoint is None and plan.processes[0].argv[-2:] == ("--x=1", "--distributed")
    assert plan.env[ATTEMPT_VAR] == "1"
