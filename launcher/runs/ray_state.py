"""What Ray says about submitted runs (``submit=ray``; ray_job.json holds the job id) that have no
launcher record: a job stopped or failed before its launcher started, or one still waiting for its
resources. The submitter writes the job's final state into ray_job.json when it saw it (following, or
stopping it); otherwise the cluster is asked (its Jobs API over plain HTTP, no Ray import: the listing
imports no third-party module), each request bounded, all of them together too."""

from __future__ import annotations

import json
import os
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


def _ask(address: str, job_id: str, timeout: float) -> str | None:
    """The job's state from the dashboard at ``address`` (None: no answer, or no such job)."""
    import urllib.parse  # here: only a Ray run without its state asks (urllib.request is ~40 modules)
    import urllib.request

    url = f"{address.rstrip('/')}/api/jobs/{urllib.parse.quote(job_id, safe='')}"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 (http(s) checked)
            data = json.loads(response.read(1 << 20))
    except (OSError, ValueError):
        return None
    state = data.get("status") if isinstance(data, dict) else None
    return state if isinstance(state, str) and state in _STATUSES else None


def _address(recorded) -> str | None:
    """Where to ask: the recorded address, unless its password was masked there (then $RAY_ADDRESS)."""
    if isinstance(recorded, str) and recorded.startswith(("http://", "https://")) and "***" not in recorded:
        return recorded
    env = os.environ.get("RAY_ADDRESS", "")
    return env if env.startswith(("http://", "https://")) else None


def apply(runs: list[RunInfo]) -> None:
    """The status of Ray runs that have no launcher record yet (``submitted``): the state the submitter
    recorded, else the cluster's."""
    deadline = time.monotonic() + BUDGET_S
    for run in runs:
        if not run.ray or run.status != read.SUBMITTED:
            continue
        state = run.ray.get("state")
        if state not in _STATUSES and run.ray.get("job_id"):
            left = deadline - time.monotonic()
            address = _address(run.ray.get("address"))
            state = _ask(address, run.ray["job_id"], min(TIMEOUT_S, left)) if address and left > 0.1 else None
            run.ray["state"] = state
        if state in _STATUSES:
            run.status = _STATUSES[state]
