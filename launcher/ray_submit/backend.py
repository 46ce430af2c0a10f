"""``submit=ray`` as a :class:`~launcher.backends.base.Backend`: one Ray job per launch.

- ``dryrun``: the job spec (:mod:`.spec`, the pure renderer) from the session's finished launch,
  after the checks a real submission makes (the ``ray.*`` keys, node 0's config against the resources
  Ray will reserve); ``Request.shown`` is what the dry run prints. Nothing is composed again.
- ``submit``: the Job Submission API (:mod:`.submit`): the run directory and its record, the secrets
  apart from the spec, then ``submit.json`` = the :class:`Handle` (the address without its password).
- ``wait``: follows the jobs with ``ray.follow=true`` (one: its output streamed; several: one line as
  each ends, ``sweep.fail_fast``, Ctrl+C stops them); 0 for a job nobody follows.
- ``describe`` / ``logs`` / ``cancel``: from a Handle alone (``runs``), through the dashboard's HTTP
  API with the standard library: no Ray, no Hydra, every request bounded (a silent address answers
  "unknown" within :data:`TIMEOUT_S`, never hangs).

Only this module's ``dryrun``/``submit``/``wait`` import the rest of the launcher (lazily).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..backends.base import SUBMIT_RECORD, Handle, Launch, Point, Refused, Request, State, Status, submit_each
from ..backends.job_dir import JobDir

NAME = "ray"
OLD_RECORD = "ray_job.json"  # the record before submit.json format 2 (read, never written)
ADDRESS_VAR = "RAY_ADDRESS"
TIMEOUT_S = 3.0  # one request of describe/logs/cancel
POLL_S = 1.0  # logs(follow=True): how often the job's log is read again
STATES = {
    "PENDING": State.PENDING,
    "RUNNING": State.RUNNING,
    "STOPPED": State.STOPPED,
    "FAILED": State.FAILED,
    "SUCCEEDED": State.SUCCEEDED,
}


@dataclass(frozen=True)
class Payload:
    """What ``submit`` needs beyond the request: the spec (secret values inside, never shown), the
    address as given (a password too), and what to rebuild the spec from if the run directory's name
    is taken by the time it is made."""

    spec: Any  # spec.JobSpec (its secrets kept out of its repr)
    cfg: Any = field(repr=False)  # the TrainConfig (secrets revealed: never shown)
    order: tuple[str, ...] = ()
    key: str | None = None  # ray.address or RAY_ADDRESS; None in a dry run
    where: str | None = field(default=None, repr=False)  # may hold a password
    job_dir: JobDir | None = None  # where submit makes the run directory
    follow: bool = False


def without_userinfo(where: str) -> str:
    """The address as submit.json records it: no user, no password.

    >>> without_userinfo("http://me:pa@ss@head:8265/x")
    'http://head:8265/x'
    >>> without_userinfo("http://head:8265")
    'http://head:8265'
    """
    from urllib.parse import urlsplit

    parts = urlsplit(where.strip())
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()


def read_record(run_dir: str | os.PathLike) -> Handle | None:
    """A Ray run's handle from its directory: ``submit.json`` (format 2), or the ``ray_job.json`` of
    runs submitted before it (``{"job_id", "address", "state"}``); None if neither names a Ray job."""
    for name in (SUBMIT_RECORD, OLD_RECORD):
        try:
            data = json.loads((Path(run_dir) / name).read_text())
        except (OSError, ValueError):
            continue
        if name == SUBMIT_RECORD:
            handle = Handle.from_record(data, str(run_dir))
            return handle if handle is not None and handle.backend == NAME else None
        if isinstance(data, dict) and isinstance(data.get("job_id"), str):
            extra = {"address": without_userinfo(data["address"])} if isinstance(data.get("address"), str) else {}
            if isinstance(data.get("state"), str):
                extra["state"] = data["state"]
            return Handle(NAME, data["job_id"], str(run_dir), extra)
    return None


# -- the dashboard's HTTP API, bounded (describe, logs, cancel; runs' listing) ----------------------


def addresses(recorded: str | None, env=os.environ) -> list[str]:
    """Where to ask about a recorded job: ``$RAY_ADDRESS`` first when it names the same dashboard (it
    may carry the password the record leaves out), then the recorded address."""
    out = []
    given = env.get(ADDRESS_VAR, "")
    if given.startswith(("http://", "https://")):
        if not recorded or without_userinfo(given).rstrip("/") == without_userinfo(recorded).rstrip("/"):
            out.append(given)
    if isinstance(recorded, str) and recorded.startswith(("http://", "https://")) and "***" not in recorded:
        out.append(recorded)
    return out


def _request(where: str, path: str, timeout: float, method: str = "GET") -> Any:
    """The JSON answer of the dashboard at ``where`` (None: no answer in time, an error, not JSON)."""
    import base64
    import urllib.request
    from urllib.parse import unquote, urlsplit

    parts = urlsplit(where.strip())
    url = parts._replace(netloc=parts.netloc.rpartition("@")[2], path=parts.path.rstrip("/") + path).geturl()
    request = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    if parts.username is not None:  # basic auth, as Ray's client sends it for http://USER:PASSWORD@HOST
        token = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
        request.add_header("Authorization", "Basic " + base64.b64encode(token).decode())
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 (http(s) checked)
            return json.loads(response.read(64 << 20))
    except (OSError, ValueError):
        return None


def _job_path(job_id: str, tail: str = "") -> str:
    from urllib.parse import quote

    return f"/api/jobs/{quote(job_id, safe='')}{tail}"


def job_info(recorded: str | None, job_id: str, timeout: float = TIMEOUT_S) -> dict | None:
    """The dashboard's answer about ``job_id`` (None: no answer within ``timeout`` per address)."""
    for where in addresses(recorded):
        data = _request(where, _job_path(job_id), timeout)
        if isinstance(data, dict) and isinstance(data.get("status"), str):
            return data
    return None


def job_state(recorded: str | None, job_id: str, timeout: float = TIMEOUT_S) -> str | None:
    """Ray's state of the job (PENDING, RUNNING, ...), None when nobody answers in time."""
    info = job_info(recorded, job_id, timeout)
    state = info.get("status") if info else None
    return state if state in STATES else None


def _log_text(handle: Handle) -> str | None:
    """The job's whole log as the dashboard keeps it (None: no answer in time)."""
    for where in addresses(handle.extra.get("address")):
        data = _request(where, _job_path(handle.id, "/logs"), TIMEOUT_S)
        if isinstance(data, dict) and isinstance(data.get("logs"), str):
            return data["logs"]
    return None


class RayBackend:
    """``submit=ray``. One instance follows the jobs it submitted (their clients, their progress)."""

    name = NAME

    def __init__(self) -> None:
        self._clients = None  # submit.Clients, made by the first submission
        self._jobs: dict[str, Any] = {}  # submission id -> submit.RayJob (what wait follows)
        self._follow: dict[str, bool] = {}

    # -- building ----------------------------------------------------------------------------------
    def dryrun(self, launch: Launch) -> Request:
        from .. import checks, probe, record
        from ..config import dump
        from ..errors import UserError
        from . import spec as spec_mod
        from .submit import address, given_address, shown_address

        cfg = launch.cfg
        if cfg.container.image is not None:
            raise UserError(
                "container.image",
                cfg.container.image,
                "submit=ray does not run a launch in a container image: Ray's own runtime_env image_uri is "
                "experimental and untested here",
                "give the Ray cluster's nodes the image (start Ray inside it), or use submit=slurm, submit=ssh, "
                "submit=k8s or a local launch",
            )
        if cfg.dry_run:  # a real submission checks it below, with the address required
            given_address(cfg, os.environ)
        spec_mod.check(cfg)
        node0 = spec_mod.node0_check_config(cfg)
        settled = checks.validate(node0, spec_mod.planned_facts(cfg, probe.gather()))
        probe.script_exists(node0, settled.script, before_submit=True)
        run_dir = str(launch.run_dir)
        order = tuple(launch.typed.script_order)
        job = spec_mod.build(cfg, run_dir, order)
        key, where = (None, None) if cfg.dry_run else address(cfg, os.environ)
        config_yaml = dump.config_yaml(cfg)
        if where:
            config_yaml = config_yaml.replace(where, shown_address(where))
        files = {"config.yaml": config_yaml}
        if launch.composed is not None:
            files[record.COMPOSITION] = json.dumps(launch.composed, indent=2) + "\n"
        payload = Payload(job, cfg, order, key, where, JobDir.of(launch), bool(cfg.ray.follow))
        return Request(NAME, run_dir, spec_mod.describe(job, run_dir), files, payload)

    # -- submitting --------------------------------------------------------------------------------
    def submit(self, request: Request) -> Handle:
        import shutil

        from .. import record
        from .submit import Clients, RayJob, announce, submit_job

        payload: Payload = request.payload
        if payload.where is None:
            raise ValueError("a dry run's request is shown, never submitted")
        if self._clients is None:
            self._clients = Clients()
        client = self._clients.client(payload.key, payload.where)  # a silent address: one line, nothing written
        planned = Path(request.run_dir)
        # what a refused job removes: the run directory, and the run root too when this made it
        missing = [p for p in (planned.parent, *planned.parent.parents) if not p.exists()]
        run_dir, job = self._make_run_dir(request)
        made = Path(run_dir)
        try:
            for name, text in request.files.items():
                (made / name).write_text(text)
            job_id = submit_job(client, job, payload.where)
        except BaseException:  # nothing was submitted: leave no directory behind
            shutil.rmtree(missing[-1] if missing else made, ignore_errors=True)
            raise
        handle = Handle(NAME, job_id, run_dir, {"address": without_userinfo(payload.where)})
        record.write_json(made / SUBMIT_RECORD, handle.as_record())
        submitted = RayJob((), run_dir, job_id, address=payload.where)
        self._jobs[job_id], self._follow[job_id] = submitted, payload.follow
        print(announce(submitted), flush=True)
        return handle

    def _make_run_dir(self, request: Request) -> tuple[str, Any]:
        """The run directory, made now; the spec rebuilt if its name was taken since the dry run."""
        from . import spec as spec_mod

        payload: Payload = request.payload
        made = str(payload.job_dir.create())
        if made == request.run_dir:
            return made, payload.spec
        return made, spec_mod.build(payload.cfg, made, payload.order)

    def submit_all(
        self, requests: Sequence[Request], interrupts=None, fail_fast: bool = False
    ) -> list[Handle | Refused | None]:
        return submit_each(self, requests, interrupts, fail_fast)

    def show(self, requests: Sequence[Request]) -> None:
        """Each job spec, as submit sends it (secret values apart, never shown)."""
        for request in requests:
            print(request.shown, flush=True)

    def wait(self, handles: Sequence[Handle | Refused | None], interrupts=None, fail_fast: bool = False) -> list[int]:
        """The launches' exit codes for the jobs followed (``ray.follow=true``; one job: its output
        streamed; several: one line as each ends, ``fail_fast`` stopping the rest, the sweep's
        ``interrupts`` or Ctrl+C stopping them all), 0 for the others."""
        from .submit import follow, follow_many

        handles = [h for h in handles if h is not None]
        followed = [
            self._jobs[h.id] for h in handles if isinstance(h, Handle) and self._follow.get(h.id) and h.id in self._jobs
        ]
        if len(handles) == 1 and followed:
            codes = {followed[0].job_id: follow(self._clients[followed[0].address], followed[0])}
        elif followed:
            codes = dict(
                zip((job.job_id for job in followed), follow_many(followed, self._clients, interrupts, fail_fast))
            )
        else:
            codes = {}
        return [h.exit_code if isinstance(h, Refused) else codes.get(h.id, 0) for h in handles]

    def summary(self, points: Sequence[Point]) -> str | None:
        """The sweep's table (launcher/backends/summary.py): each job's id, and its state and exit
        code once followed."""
        from ..backends import summary

        def followed(handle: Handle) -> tuple[str | None, int | None]:
            job = self._jobs.get(handle.id)
            return (job.state or None, job.exit_code) if job is not None else (None, None)

        return summary.submitted(points, followed=followed, title="Ray", none="NOT SUBMITTED")

    # -- from a handle alone (runs) ---------------------------------------------------------------
    def describe(self, handle: Handle) -> Status:
        info = job_info(handle.extra.get("address"), handle.id)
        if info is None:
            recorded = handle.extra.get("state")  # the end the submitter saw, if it did
            if recorded in STATES:
                return Status(STATES[recorded], f"{recorded} (recorded; the cluster did not answer)")
            return Status(State.UNKNOWN, f"no answer from {handle.extra.get('address') or 'the cluster'}")
        state = info["status"]
        code = info.get("driver_exit_code")
        detail = " ".join(str(part) for part in (state, info.get("message") or "") if part).strip()
        return Status(STATES.get(state, State.UNKNOWN), detail, code if isinstance(code, int) else None)

    def logs(self, handle: Handle, rank: int | None = None, follow: bool = False) -> Iterator[str]:
        """The job's log (the launcher's console on the cluster: rank 0's lines, the failure summary);
        ``rank``: that rank's log file in the run directory, where this machine sees it (a shared file
        system), else the job's log. ``follow``: until the job ends, each request bounded."""
        if rank is not None:
            path = Path(handle.run_dir) / "logs" / f"rank{rank}.log"
            if path.is_file():
                yield from path.read_text(errors="replace").splitlines(keepends=True)
                return
        shown = 0
        while True:
            ended = follow and job_state(handle.extra.get("address"), handle.id) in ("STOPPED", "FAILED", "SUCCEEDED")
            text = _log_text(handle)  # after the state: an ended job's log is whole
            if text is None:
                raise OSError(f"Ray job {handle.id}: no answer from {handle.extra.get('address') or 'the cluster'}")
            if len(text) > shown:
                yield from text[shown:].splitlines(keepends=True)
                shown = len(text)
            if not follow or ended:
                return
            time.sleep(POLL_S)

    def cancel(self, handle: Handle) -> None:
        """``ray job stop``: Ray sends the launcher SIGTERM; it stops its ranks and writes its record."""
        for where in addresses(handle.extra.get("address")):
            data = _request(where, _job_path(handle.id, "/stop"), TIMEOUT_S, method="POST")
            if isinstance(data, dict):
                return
        raise OSError(f"Ray job {handle.id}: no answer from {handle.extra.get('address') or 'the cluster'}")
