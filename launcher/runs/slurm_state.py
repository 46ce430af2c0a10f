"""What SLURM says about submitted runs (``submit=slurm``; submit.json holds the job id): ``squeue``
for jobs in the queue, then ``sacct`` (needs an accounting database), then ``scontrol show job``
(kept for MinJobAge after the end), through the back end (launcher/slurm/backend.states). Asked
only when there are such runs and the commands exist; one short, read-only query per command for
all jobs."""

from __future__ import annotations

from ..slurm.backend import states  # the back end asks SLURM (bounded queries, no Hydra)
from . import read
from .read import RunInfo

# SLURM job states -> our statuses, when the launcher's record does not say (docs/runs.md)
_PENDING = {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "SUSPENDED", "RESV_DEL_HOLD"}
_RUNNING = {"RUNNING", "COMPLETING", "STAGE_OUT", "SIGNALING", "RESIZING"}
_ENDED = {
    "COMPLETED": read.SUCCESS,
    "CANCELLED": read.INTERRUPTED,
    "PREEMPTED": read.INTERRUPTED,
    "DEADLINE": read.FAILED,
    "TIMEOUT": read.FAILED,
    "FAILED": read.FAILED,
    "NODE_FAIL": read.FAILED,
    "OUT_OF_MEMORY": read.FAILED,
    "BOOT_FAIL": read.FAILED,
}


def apply(runs: list[RunInfo]) -> None:
    """Add SLURM's state to the submitted runs; decide the status of those the record cannot."""
    submitted = [r for r in runs if r.slurm and r.slurm.get("job_id")]
    if not submitted:
        return
    known = states([r.slurm["job_id"] for r in submitted])
    for run in submitted:
        state = known.get(run.slurm["job_id"])
        run.slurm["state"] = state
        if state is None:
            continue
        if run.status == read.SUBMITTED:  # no launcher record yet (or ever)
            if state in _PENDING:
                run.status = read.QUEUED
            elif state in _RUNNING:
                run.status = read.RUNNING
            else:
                run.status = _ENDED.get(state, read.UNKNOWN)
        elif run.status == read.UNKNOWN and run.exit_code is None:  # an open record on another host
            run.status = read.RUNNING if state in _RUNNING else read.LOST
