"""How a restarted attempt of a local launch resumes (run/attempts.py's ``Resume``): the same plan
(plan.attempt: ``TRAIN_MULTIGPU_ATTEMPT=<N>``), pointed at the newest checkpoint the way ``runs
resume`` points a run (launcher/checkpoints.py's helpers, as runs/again.py uses them):

- the bundled trainers (profile ``examples``): ``--resume`` in the same trainer directory
  (``TRAIN_MULTIGPU_RUN_DIR``), as a requeued SLURM job does, once a checkpoint exists;
- Isaac Lab (profile ``isaaclab``): rsl_rl ``--resume --load_run <run> --checkpoint <model>``, skrl
  and rl_games ``--checkpoint <file>``, from the run folder the previous attempt's rank 0 log names;
- any other script: no argument; it reads ``TRAIN_MULTIGPU_ATTEMPT`` (> 0: resume) and finds its
  own checkpoint (docs/recovery.md).

No checkpoint yet: the attempt starts over, without resume arguments.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

from .. import checkpoints
from .. import plan as plan_mod
from ..errors import UserError
from ..names import RUN_DIR_VAR
from ..plan import LaunchPlan
from ..rundir import RunPaths

BUNDLED, ISAACLAB = "examples", "isaaclab"


@dataclass
class LocalResume:
    """``first``: attempt 0's plan (supervised); ``profile`` and ``library``: the config's names."""

    first: LaunchPlan
    profile: str
    library: str
    current: RunPaths | None = None  # the attempt running (Isaac Lab: its rank 0 log names the run folder)

    @property
    def trainer_dir(self) -> Path | None:
        value = self.first.env.get(RUN_DIR_VAR)
        return Path(value) if value else None

    def checkpoint(self) -> str | None:
        if self.profile == BUNDLED and self.trainer_dir is not None:
            found = checkpoints.latest_checkpoint(self.trainer_dir)
            return str(found) if found is not None else None
        if self.profile == ISAACLAB and self.current is not None:
            args = self._isaaclab_args()
            return args[args.index("--checkpoint") + 1] if "--checkpoint" in args else None
        return None

    def _isaaclab_args(self) -> list[str]:
        from .. import files

        with contextlib.suppress(OSError, UserError):
            log = files.read_head(self.current.rank_log(0), files.TEXT_MAX)
            return checkpoints.isaaclab_resume_args(self.library, log, "-")
        return []

    def plan(self, number: int, previous: RunPaths, paths: RunPaths) -> tuple[LaunchPlan, str | None]:
        from ..run import supervise

        self.current = previous
        args: list[str] = []
        checkpoint = self.checkpoint()
        if checkpoint is not None:
            args = ["--resume"] if self.profile == BUNDLED else self._isaaclab_args()
        self.current = paths
        planned = plan_mod.attempt(self.first, number, args)
        return supervise.prepare(planned, paths.logs), checkpoint

    def shown(self, checkpoint: str | None) -> str | None:
        """A checkpoint's path as the console shows it: under the trainer directory, relative to it."""
        if checkpoint is None or self.trainer_dir is None:
            return checkpoint
        if not Path(checkpoint).is_relative_to(self.trainer_dir):
            return checkpoint
        return os.path.relpath(checkpoint, self.trainer_dir)
