"""A launch's identity in its trackers: ``trackers.json`` in the training script's directory
(``TRAIN_MULTIGPU_RUN_DIR``: the job's for a SLURM job and all its requeues, the resumed run's for
``runs resume``), made the first time and read back by every later launcher of the same run, so a
restart, a requeue and a resume log to the same W&B run id and the same MLflow run. A copy in the
launch's record directory is what ``runs show`` reads (the same file when both are one directory).

::

    {"wandb": {"id", "project", "entity", "group", "name", "mode", "dir", "url"},
     "mlflow": {"tracking_uri", "experiment", "experiment_id", "run_id", "parent_run_id", "url"}}
"""

from __future__ import annotations

import contextlib
import time
import uuid
from pathlib import Path

from .. import record
from ..rundir import TRACKERS

FILE = TRACKERS


def new_id() -> str:
    """A W&B run id: 12 characters of [0-9a-f] (W&B allows letters, digits, ``-`` and ``_``).

    >>> len(new_id()), new_id() != new_id()
    (12, True)
    """
    return uuid.uuid4().hex[:12]


def read(directory: str | Path) -> dict:
    """The identity recorded in ``directory`` (``{}``: none, or unreadable: a launch starts a new one)."""
    return record.read_trackers(directory, directory)


def await_node0(directory: str | Path, timeout_s: float, every_s: float = 0.2) -> dict:
    """The identity node 0's launcher writes in ``directory`` (the one every node trains in), once it
    is there; ``{}`` after ``timeout_s`` (a directory the nodes do not share)."""
    deadline = time.monotonic() + timeout_s
    while True:
        known = read(directory)
        if known or time.monotonic() >= deadline:
            return known
        time.sleep(every_s)


def write(directory: str | Path, data: dict) -> None:
    """Atomically (record.write_json: readers see the old file or the new one); an unwritable
    directory is left alone: the launch goes on, its trackers only lose the record."""
    with contextlib.suppress(OSError):
        record.write_json(Path(directory) / FILE, data)
