"""A run's checkpoints and the arguments that resume a training script from them: the bundled
trainers' ``checkpoints/iter_NNNNNN.ckpt`` (``--resume``), Isaac Lab's per library (its run folder as
its rank 0 log names it). ``runs resume`` (runs/again.py) and a restarted attempt
(backends/local_resume.py) both resume through these.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

from .errors import UserError

CHECKPOINTS = "checkpoints"  # the bundled trainers' checkpoints/iter_NNNNNN.ckpt
_BUNDLED_CKPT = re.compile(r"^iter_\d{6,}\.ckpt$")
# Isaac Lab's train.py prints where it logs ("[INFO] Logging experiment in directory: <root>") and
# the run folder ("Exact experiment name requested from command line: <name>")
_ISAACLAB_ROOT = re.compile(r"Logging experiment in directory: (\S.*?)\s*$", re.M)
_ISAACLAB_NAME = re.compile(r"Exact experiment name requested from command line:? (\S.*?)\s*$", re.M)
# per RL library: the checkpoints inside Isaac Lab's run folder
_ISAACLAB_CKPTS = {"rsl_rl": "model_*.pt", "skrl": "checkpoints/*.pt", "rl_games": "nn/*.pth"}


def latest_checkpoint(trainer_dir: Path) -> Path | None:
    """The bundled trainers' newest ``checkpoints/iter_NNNNNN.ckpt`` that the trainer resumes from:
    a regular file (not a link, a FIFO, a device or a directory under that name) that is not empty
    (the trainer passes an empty one over, as it does, for the one before it)."""
    found = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(trainer_dir / CHECKPOINTS):
            with contextlib.suppress(OSError):
                if _BUNDLED_CKPT.match(entry.name) and entry.is_file(follow_symlinks=False):
                    if entry.stat(follow_symlinks=False).st_size > 0:
                        found.append(entry.name)
    return trainer_dir / CHECKPOINTS / max(found, key=lambda name: (len(name), name)) if found else None


def isaaclab_resume_args(library: str | None, rank0_log: str, ident: str) -> list[str]:
    """Isaac Lab's train.py resumes through its own flags: rsl_rl ``--resume --load_run <run folder>``
    (its newest ``model_*.pt``), skrl and rl_games ``--checkpoint <newest checkpoint file>``. The run
    folder is the one its rank 0 log names.

    >>> log = "[INFO] Logging experiment in directory: /nonexistent/logs/rsl_rl/cartpole\\n"
    >>> log += "Exact experiment name requested from command line: 2025-01-01_10-00-00_a\\n"
    >>> isaaclab_resume_args("rsl_rl", log, "r")
    Traceback (most recent call last):
    ...
    launcher.errors.UserError: id=r: has no checkpoint to resume from (no model_*.pt in /nonexistent/logs/rsl_rl/cartpole/2025-01-01_10-00-00_a) (rerun it from the start: train_multigpu runs rerun ID)
    """  # noqa: E501
    roots, names = _ISAACLAB_ROOT.findall(rank0_log), _ISAACLAB_NAME.findall(rank0_log)
    pattern = _ISAACLAB_CKPTS.get(library or "")
    if pattern is None:
        raise UserError("rl_library", library, "Isaac Lab resumes rsl_rl, skrl and rl_games runs", "rerun it instead")
    if not roots or not names:
        raise UserError(
            "id",
            ident,
            "its rank 0 log does not say where Isaac Lab logged the run (no 'Logging experiment in directory')",
            "resume by hand with train.py's --resume/--load_run/--checkpoint",
        )
    folder = Path(roots[-1]) / names[-1]
    # rsl_rl picks by name as rsl_rl does (model_50.pt before model_100.pt); the others: the newest file
    newest = _numbered if library == "rsl_rl" else (lambda p: (_mtime(p), _numbered(p)))
    try:
        found = sorted((p for p in folder.glob(pattern) if p.is_file()), key=newest)
    except (OSError, ValueError):
        found = []
    if not found:
        raise UserError(
            "id",
            ident,
            f"has no checkpoint to resume from (no {pattern} in {folder})",
            "rerun it from the start: train_multigpu runs rerun ID",
        )
    if library == "rsl_rl":
        return ["--resume", "--load_run", names[-1], "--checkpoint", found[-1].name]
    return ["--checkpoint", str(found[-1])]


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:  # removed, or a link to nothing
        return 0.0


def _numbered(path: Path) -> list:
    """A file name's natural order (numbers compared as numbers)."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", path.name)]
