"""``submit=ray``, the submitter's side: the job (spec.py) through Ray's Job Submission API.

:class:`Submitter` lives in the session (one per invocation). For every launch -- a sweep's point
too: one Ray job per point, so each has its own state, logs, resources and ``ray job stop``, and
Ray's scheduler runs the points as the cluster's resources allow -- it checks the ``ray.*`` keys and
node 0's config, writes the run directory's record (``config.yaml``, ``ray_job.json``), submits, and
prints the job id with how to follow and stop it. ``ray.follow=true`` then waits: one job streams
its output; a sweep prints each point's end and a summary table. Ctrl+C stops the job(s) and waits
until Ray says they stopped.

Ray is imported here, when ``submit=ray`` is used, never by the rest of the launcher.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from .. import record, tables
from ..config.schema import TrainConfig
from ..errors import UserError
from ..names import PROG, swept
from . import spec as spec_mod

RECORD = "ray_job.json"
ADDRESS_VAR = "RAY_ADDRESS"  # Ray's own convention (its CLI reads it too)
DRY_RUN = "dry run"
EXTRA_HINT = "pip install 'train_multigpu[ray]' (the Job Submission API needs ray[default])"


@dataclass
class RayJob:
    """One submitted (or refused) job, for the follow loop and the summary table."""

    overrides: tuple[str, ...]
    run_dir: str
    job_id: str | None = None
    error: str | None = None
    state: str = ""  # the last state seen (SUCCEEDED, FAILED, STOPPED, ...)
    exit_code: int | None = None
    address: str = ""


def address(cfg: TrainConfig, env) -> tuple[str, str]:
    """(key, address): ``ray.address``, else ``$RAY_ADDRESS``."""
    if cfg.ray.address:
        return "ray.address", str(cfg.ray.address)
    if env.get(ADDRESS_VAR):
        return ADDRESS_VAR, env[ADDRESS_VAR]
    raise UserError(
        "ray.address",
        None,
        f"needs the Ray dashboard's address (or {ADDRESS_VAR})",
        "e.g. ray.address=http://HEAD:8265 (`ray start --head` prints it)",
    )


def _ray_client_class():
    try:
        from ray.job_submission import JobSubmissionClient
    except ImportError as err:
        raise UserError("submit", "ray", f"Ray's Job Submission API is not installed ({err.msg})", EXTRA_HINT) from None
    return JobSubmissionClient


class Submitter:
    """The session's Ray jobs and clients (one client per address)."""

    def __init__(self) -> None:
        self.jobs: list[RayJob] = []
        self.clients: dict[str, object] = {}
        self.followed = False  # a single launch followed its job already
        self.follow = False  # ray.follow of the last launch (a sweep's points share it)

    def client(self, key: str, where: str):
        if where not in self.clients:
            client_class = _ray_client_class()
            try:
                self.clients[where] = client_class(where)
            except Exception as err:  # ConnectionError, ValueError (a malformed address), ...
                why = (str(err).strip().splitlines() or [type(err).__name__])[0]
                raise UserError(
                    key,
                    where,
                    f"no Ray Job Submission API answers there ({why})",
                    "the dashboard's address, e.g. http://HEAD:8265; is the cluster up (`ray status`)?",
                ) from None
        return self.clients[where]

    # -- one launch ------------------------------------------------------------------------------
    def launch(
        self,
        cfg: TrainConfig,
        overrides: Sequence[str],
        make_run_dir,
        resolved_yaml: str,
        check_only: bool = False,
        follow_now: bool = True,
        order: Sequence[str] = (),
        composed: dict | None = None,
    ) -> int:
        """Submit one job for ``cfg`` (``check_only``: check, write and submit nothing). ``make_run_dir(cfg,
        create)`` gives the run directory. With ``ray.follow`` and ``follow_now`` (not a sweep): wait for
        the job and return the launch's exit code. ``composed``: the run's composition.json (what was
        typed, record.composition), so ``train_multigpu runs rerun`` submits it again."""
        from .. import checks, probe

        overrides = tuple(overrides)
        self.follow = cfg.ray.follow
        try:
            spec_mod.check(cfg)
            node0 = spec_mod.node0_check_config(cfg)
            settled = checks.validate(node0, spec_mod.planned_facts(cfg, probe.gather()))
            probe.script_exists(node0, settled.script, before_submit=True)
            if check_only:
                return 0
            # the job's one directory (a multi-node job's nodes record into node<R> inside it)
            one = replace(cfg, launcher=replace(cfg.launcher, nnodes="1", node_rank=0))
            planned_dir = str(make_run_dir(one, False))
            if cfg.dry_run:
                print(spec_mod.describe(spec_mod.build(cfg, planned_dir, order), planned_dir), flush=True)
                self.jobs.append(RayJob(overrides, planned_dir, None, DRY_RUN))
                return 0
            key, where = address(cfg, os.environ)
            client = self.client(key, where)
            # what a refused job removes: the run directory, and the run root too when this made it
            missing = [p for p in (Path(planned_dir).parent, *Path(planned_dir).parent.parents) if not p.exists()]
            run_dir = str(make_run_dir(one, True))
            job = spec_mod.build(cfg, run_dir, order)
            (Path(run_dir) / "config.yaml").write_text(resolved_yaml)
            if composed is not None:
                record.write_json(Path(run_dir) / record.COMPOSITION, composed)
            try:
                job_id = client.submit_job(**job.submit_kwargs())
            except Exception as err:  # nothing was submitted: leave no directory behind
                import shutil

                shutil.rmtree(missing[-1] if missing else run_dir, ignore_errors=True)
                why = (str(err).strip().splitlines() or [type(err).__name__])[-1]
                raise UserError("submit", "ray", f"Ray refused the job: {why}", f"address {where}") from None
            record.write_json(
                Path(run_dir) / RECORD,
                {"job_id": job_id, "address": where, "job": job.shown(), "overrides": list(overrides)},
            )
        except UserError as err:
            if not check_only:
                self.jobs.append(RayJob(overrides, "", None, str(err)))
            raise
        submitted = RayJob(overrides, run_dir, job_id, address=where)
        self.jobs.append(submitted)
        print(announce(submitted), flush=True)
        if cfg.ray.follow and follow_now:
            self.followed = True
            return follow(client, submitted)
        return 0

    # -- after the last job ----------------------------------------------------------------------
    def finish(self, interrupts=None, fail_fast: bool = False) -> list[int]:
        """A sweep: follow every job (``ray.follow=true``), print the table; the exit codes."""
        codes: list[int] = []
        if self.follow and not self.followed:
            codes = follow_many(self, interrupts, fail_fast)
        print(summary(self.jobs), flush=True)
        return codes


def announce(job: RayJob) -> str:
    at = f" --address {job.address}"
    lines = [
        f"[{PROG}] submitted Ray job {job.job_id} to {job.address}",
        f"[{PROG}]   run directory: {job.run_dir} (on the cluster; per-rank logs under logs/)",
        f"[{PROG}]   follow: ray job logs -f {job.job_id}{at}   status: ray job status {job.job_id}{at}",
        f"[{PROG}]   stop:   ray job stop {job.job_id}{at}",
    ]
    if _has_runs_command():
        lines.append(f"[{PROG}]   record: {PROG} runs (the run directory above)")
    return "\n".join(lines)


def _has_runs_command() -> bool:
    import importlib.util

    return importlib.util.find_spec("launcher.runs") is not None


# -- following ------------------------------------------------------------------------------------

TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")


def exit_code(info) -> int:
    """The launch's exit code from Ray's job info: SUCCEEDED 0, FAILED the entrypoint's code."""
    state = str(getattr(info.status, "value", info.status))
    if state == "SUCCEEDED":
        return 0
    if state == "STOPPED":
        return 128 + signal.SIGTERM
    code = getattr(info, "driver_exit_code", None)
    return code if isinstance(code, int) and code > 0 else 1


def _state(client, job_id: str):
    info = client.get_job_info(job_id)
    return str(getattr(info.status, "value", info.status)), info


def _stop(client, jobs: Sequence[RayJob], timeout: float = 120.0) -> None:
    """Stop the jobs and wait until Ray reports each terminal (the launcher's grace period included)."""
    for job in jobs:
        try:
            client.stop_job(job.job_id)
        except Exception:  # already ended
            pass
    deadline = time.monotonic() + timeout
    pending = list(jobs)
    while pending and time.monotonic() < deadline:
        time.sleep(0.5)
        for job in list(pending):
            job.state, info = _state(client, job.job_id)
            if job.state in TERMINAL:
                job.exit_code = exit_code(info)
                pending.remove(job)


class _TermAsInterrupt:
    """While following: SIGTERM/SIGHUP to train_multigpu stop the job like Ctrl+C."""

    def __enter__(self):
        self.saved = {}
        for signum in (signal.SIGTERM, signal.SIGHUP):
            self.saved[signum] = signal.signal(signum, self._raise)
        return self

    def _raise(self, signum, frame):
        self.received = signum
        raise KeyboardInterrupt

    def __exit__(self, *exc):
        for signum, handler in self.saved.items():
            signal.signal(signum, handler)


def follow(client, job: RayJob) -> int:
    """Stream the job's output until it ends; its launch's exit code. Ctrl+C stops it (130)."""
    import asyncio
    import logging

    logging.getLogger("ray.dashboard.modules.job.sdk").setLevel(logging.WARNING)  # "WebSocket closed ..."

    async def tail() -> None:
        async for lines in client.tail_job_logs(job.job_id):
            sys.stdout.write(lines)
            sys.stdout.flush()

    with _TermAsInterrupt() as handler:
        try:
            try:
                asyncio.run(tail())
            except Exception as err:  # the stream broke (the dashboard restarted, a proxy): the state still tells
                why = (str(err).strip().splitlines() or [type(err).__name__])[0]
                print(f"[{PROG}] the job's log stream ended ({why}); waiting for its state", flush=True)
            while True:  # the log stream ends with the job; its state follows soon after
                job.state, info = _state(client, job.job_id)
                if job.state in TERMINAL:
                    break
                time.sleep(0.5)
        except KeyboardInterrupt:
            signum = getattr(handler, "received", signal.SIGINT)
            print(f"\n[{PROG}] stopping Ray job {job.job_id} ...", flush=True)
            _stop(client, [job])
            print(f"[{PROG}] Ray job {job.job_id}: {job.state or 'not stopped yet'}", flush=True)
            job.exit_code = 128 + signum
            return job.exit_code
    job.exit_code = exit_code(info)
    print(f"[{PROG}] Ray job {job.job_id} {job.state} (exit code {job.exit_code}); run directory: {job.run_dir}")
    return job.exit_code


def follow_many(submitter: Submitter, interrupts=None, fail_fast: bool = False) -> list[int]:
    """A sweep's jobs: one line as each ends; Ctrl+C (the sweep's Interrupts) or fail_fast stops the rest."""
    running = [job for job in submitter.jobs if job.job_id]
    codes: list[int] = []
    with _TermAsInterrupt():
        try:
            while running:
                if interrupts is not None and interrupts.received is not None:
                    raise KeyboardInterrupt
                for job in list(running):
                    client = submitter.clients[job.address]
                    job.state, info = _state(client, job.job_id)
                    if job.state in TERMINAL:
                        running.remove(job)
                        job.exit_code = exit_code(info)
                        codes.append(job.exit_code)
                        print(f"[{PROG}] Ray job {job.job_id} {job.state} (exit code {job.exit_code})", flush=True)
                        if job.exit_code != 0 and fail_fast and running:
                            print(f"[{PROG}] sweep.fail_fast: stopping the other jobs", flush=True)
                            for other in running:
                                _stop(submitter.clients[other.address], [other])
                                codes.append(other.exit_code or 0)
                            running = []
                time.sleep(0.5)
        except KeyboardInterrupt:
            print(f"\n[{PROG}] stopping {len(running)} Ray job(s) ...", flush=True)
            for job in running:
                _stop(submitter.clients[job.address], [job])
            codes.append(128 + signal.SIGINT)
    return codes


def summary(jobs: Sequence[RayJob]) -> str:
    """The table: one row per job, its own overrides (those not shared by all), state and exit code."""
    rows = [("#", "job id", "state", "exit", "overrides", "run directory / error")]
    for number, (job, own) in enumerate(zip(jobs, swept([job.overrides for job in jobs]))):
        dry = job.error == DRY_RUN
        job_id = job.job_id or (DRY_RUN if dry else "NOT SUBMITTED")
        code = "" if job.exit_code is None else str(job.exit_code)
        where = job.run_dir if job.job_id or dry else job.error or ""
        rows.append(
            (
                str(number),
                job_id,
                job.state or ("" if dry or not job.job_id else "SUBMITTED"),
                code,
                " ".join(own) or "-",
                where,
            )
        )
    if jobs and all(job.error == DRY_RUN for job in jobs):
        head = f"[{PROG}] Ray: {len(jobs)} job(s), dry run: nothing written, nothing submitted"
    else:
        head = f"[{PROG}] Ray: {sum(job.job_id is not None for job in jobs)} of {len(jobs)} job(s) submitted"
        failed = [str(n) for n, job in enumerate(jobs) if job.exit_code not in (None, 0) or job.job_id is None]
        if failed:
            head += f"; failed: {', '.join(failed)}"
    return "\n".join([head] + tables.table(rows, indent="  "))


def as_json(job: RayJob) -> str:
    return json.dumps(job.__dict__)
