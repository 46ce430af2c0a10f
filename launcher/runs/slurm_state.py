"""What SLURM says about submitted runs (``submit=slurm``; submit.json holds the job id): ``squeue``
for jobs in the queue, then ``sacct`` (needs an accounting database), then ``scontrol show job``
(kept for MinJobAge after the end). Asked only when there are such runs and the commands exist;
one short, read-only query per command for all jobs."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence

from . import read
from .read import RunInfo

TIMEOUT_S = 5.0
# SLURM job states → our statuses, when the launcher's record does not say (docs/runs.md)
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


def _query(argv: Sequence[str]) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout


def states(job_ids: Sequence[str]) -> dict[str, str]:
    """job id → SLURM state (first word, e.g. ``RUNNING``, ``CANCELLED``) for the jobs SLURM knows."""
    found: dict[str, str] = {}
    ids = [j for j in dict.fromkeys(job_ids) if j and j.replace("_", "").isdigit()]
    if not ids:
        return found
    if shutil.which("squeue"):
        for line in _query(["squeue", "-h", "-o", "%i %T", "-j", ",".join(ids)]).splitlines():
            words = line.split()
            if len(words) == 2 and words[0] in ids:
                found[words[0]] = words[1]
    left = [j for j in ids if j not in found]
    if left and shutil.which("sacct"):
        for line in _query(["sacct", "-n", "-X", "-P", "-o", "JobID,State", "-j", ",".join(left)]).splitlines():
            job, _, state = line.partition("|")
            if job in left and state:
                found[job] = state.split()[0]
    left = [j for j in ids if j not in found]
    if left and shutil.which("scontrol"):
        for job in left[:20]:  # one call per job: only a few
            for word in _query(["scontrol", "show", "job", "-o", job]).split():
                if word.startswith("JobState="):
                    found[job] = word.split("=", 1)[1]
    return found


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
