"""The experiment trackers the launcher chose (``tracker=wandb``, ``tracker=mlflow``: the launcher
names them in TRAIN_MULTIGPU_TRACKERS and puts each run's identity in the environment: WANDB_RUN_ID,
WANDB_RUN_GROUP, MLFLOW_RUN_ID, ...; docs/trackers.md). Rank 0 only: what it writes to TensorBoard
goes to them too. A tracker whose library is missing costs one line, never the training.
"""

from __future__ import annotations

import os
import sys

TRACKERS_VAR = "TRAIN_MULTIGPU_TRACKERS"


def chosen() -> list[str]:
    return [name for name in os.environ.get(TRACKERS_VAR, "").split(",") if name]


class Logged:
    """TensorBoard's scalars (``scalars``), and the same values to each chosen tracker."""

    def __init__(self, scalars, config: dict) -> None:
        self.scalars = scalars
        self.wandb = None
        self.mlflow = None
        names = chosen()
        if "wandb" in names:
            try:
                import wandb

                # project, group, id, resume, name, dir and mode come from the launcher's WANDB_* variables
                self.wandb = wandb.init(config=config)
            except Exception as err:  # noqa: BLE001 - no wandb, or it failed: training goes on
                print(f"train.py: W&B: not logging ({type(err).__name__}: {err})", file=sys.stderr, flush=True)
        if "mlflow" in names:
            try:
                import mlflow

                # MLFLOW_RUN_ID: the run the launcher created; it ends it with the launch's outcome
                self.mlflow = mlflow
                mlflow.start_run()
            except Exception as err:  # noqa: BLE001
                self.mlflow = None
                print(f"train.py: MLflow: not logging ({type(err).__name__}: {err})", file=sys.stderr, flush=True)

    def add(self, step: int, values: dict[str, float]) -> None:
        self.scalars.add(step, values)
        finite = {k: float(v) for k, v in values.items() if v == v}  # NaN: no episode ended yet
        if self.wandb is not None:
            self.wandb.log({**finite, "env_steps": step})
        if self.mlflow is not None and finite:
            try:
                self.mlflow.log_metrics(finite, step=step)
            except Exception as err:  # noqa: BLE001 - the server went away: the curve stops, training goes on
                print(f"train.py: MLflow: not logging ({type(err).__name__}: {err})", file=sys.stderr, flush=True)
                self.mlflow = None

    def close(self) -> None:
        self.scalars.close()

    def finish(self, values: dict[str, float] | None = None) -> None:
        """The last values (the evaluation), then the trackers' own end (W&B syncs or closes its
        offline run; the MLflow run stays open: the launcher records the launch's outcome)."""
        if values and self.wandb is not None:
            self.wandb.summary.update(values)
        if values and self.mlflow is not None:
            try:
                self.mlflow.log_metrics(values)
            except Exception:  # noqa: BLE001
                pass
        if self.wandb is not None:
            self.wandb.finish()
            self.wandb = None
