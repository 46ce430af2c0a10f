"""What Ray says about submitted runs (``submit=ray``; submit.json, or an older run's ray_job.json, holds
the job id) that have no launcher record: a job stopped or failed before its launcher started, or one
still waiting for its resources. The submitter writes the job's final state into submit.json when it saw
it (following, or stopping it); otherwise the cluster is asked through the back end's bounded query
(ray_submit/backend.py: the Jobs API over plain HTTP, no Ray import), each request bounded, all of them
together too."""

from __future__ import annotations

import time

from . import read
from .read import RunInfo

TIMEOUT_S = 3.0  # one request
BUDGET_S = 6.0  # every request of one listing
# Ray job states -> our statuses, when the launcher's record does not say (docs/runs.md)
_STATUSES = {
    "PENDING": read.QUEUED,
    "RUNNING": read.RUNNING,
    "STOPPED": read.INTERRUPTED,
    "FAILED": read.FAILED,
    "SUCCEEDED": read.SUCCESS,
}


def apply(runs: list[RunInfo]) -> None:
    """The status of Ray runs that have no launcher record yet (``submitted``): the state the submitter
    recorded, else the cluster's."""
    deadline = time.monotonic() + BUDGET_S
    for run in runs:
        if not run.ray or run.status != read.SUBMITTED:
            continue
        state = run.ray.get("state")
        if state not in _STATUSES and run.ray.get("job_id"):
            from ..ray_submit.backend import job_state  # here: only a Ray run without its state asks

            left = deadline - time.monotonic()
            address = run.ray.get("address")
            state = job_state(address, run.ray["job_id"], min(TIMEOUT_S, left)) if left > 0.1 else None
            run.ray["state"] = state
        if state in _STATUSES:
            run.status = _STATUSES[state]
