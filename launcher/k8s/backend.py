"""``submit=k8s`` as a :class:`~launcher.backends.base.Backend`: a Kubeflow TrainJob / PyTorchJob.

- ``dryrun``: the checks and the manifest (launcher/k8s/submit.py, manifest.py): what the dry run
  prints is the manifest's path and the manifest, exactly what ``submit`` writes and creates;
- ``submit``: the manifest and ``config.yaml`` into the run directory, ``kubectl create`` in the current
  context, then ``submit.json`` (the :class:`Handle`: kind, name, namespace, context, manifest);
- ``describe`` / ``logs`` / ``cancel``: ``kubectl get -o json`` / ``kubectl logs`` / ``kubectl delete``
  in the job's namespace and context, each bounded in time (``logs -f`` follows until the job's pods
  end or the caller stops reading).

The describe/logs/cancel side imports no Hydra (``runs`` calls it); ``dryrun`` imports what it needs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from ..backends.base import SUBMIT_RECORD, Handle, Launch, Point, Refused, Request, State, Status, submit_each
from ..backends.job_dir import JobDir
from ..errors import UserError
from . import kubectl

NAME = "k8s"


@dataclass(frozen=True)
class Manifest:
    """A request's payload: the job ``submit`` creates."""

    kind: str  # TrainJob / PyTorchJob
    name: str
    namespace: str | None
    file: str  # its name in the run directory
    manifest: dict
    job_dir: JobDir | None = None  # where submit makes the run directory


class K8sBackend:
    name = NAME

    def __init__(self, facts=None, now: datetime | None = None) -> None:
        self._facts, self._now = facts, now  # tests pin the host and the clock; else probed, now

    # -- the launch ----------------------------------------------------------------------------
    def dryrun(self, launch: Launch) -> Request:
        from .. import probe
        from ..config import dump
        from . import manifest, submit

        cfg = launch.cfg
        submit.refuse_secret_values(launch.vault, launch.typed.overrides)
        facts = self._facts if self._facts is not None else probe.gather()
        name, rendered = submit.build(cfg, launch.typed, facts, self._now or datetime.now(), launch.job)
        text = manifest.to_yaml(rendered)
        file = submit.manifest_file(cfg)
        run_dir = Path(launch.run_dir)
        submit.refuse_unwritable(run_dir, file)
        config_yaml = dump.config_yaml(cfg)
        return Request(
            NAME,
            str(run_dir),
            f"# {run_dir}/{file} (dry run: nothing written, nothing created)\n{text}",
            {file: text, "config.yaml": config_yaml},
            Manifest(cfg.k8s.kind.value, name, cfg.k8s.namespace, file, rendered, JobDir.of(launch)),
        )

    def submit(self, request: Request) -> Handle:
        """Write the manifest and config.yaml (through: ``run_dir=`` may name an existing directory),
        create the job; submit.json only once kubectl created it. A refusal keeps the manifest."""
        from .. import files, record
        from . import submit

        job: Manifest = request.payload
        if job.job_dir is not None:
            run_dir = job.job_dir.create()  # the planned one; another if its name was taken since
        else:
            run_dir = Path(request.run_dir)
            run_dir.mkdir(parents=True, exist_ok=True)
        submit.refuse_unwritable(run_dir, job.file)
        for name, text in request.files.items():
            files.write_through(run_dir / name, text.encode(), "run_dir")
        path = run_dir / job.file
        context, created = submit.create(path)
        extra = {"kind": job.kind, "namespace": job.namespace or "", "context": context, "manifest": str(path)}
        handle = Handle(NAME, job.name, str(run_dir), {**extra, "created": created})
        record.write_json(run_dir / SUBMIT_RECORD, handle.as_record())
        print(submit.announce(job.kind, job.name, job.namespace, path), flush=True)
        return handle

    def submit_all(
        self, requests: Sequence[Request], interrupts=None, fail_fast: bool = False
    ) -> list[Handle | Refused | None]:
        """One job per point. A sweep's refusals are said by its table alone (each names its point's
        saved manifest); a single launch's is its error line."""
        return submit_each(self, requests, interrupts, fail_fast, report=len(requests) == 1)

    def show(self, requests: Sequence[Request]) -> None:
        """Each manifest, under the path submit writes it to."""
        for request in requests:
            print(request.shown, end="", flush=True)

    def wait(self, handles: Sequence[Handle | Refused | None], interrupts=None, fail_fast: bool = False) -> list[int]:
        """Nobody waits for a Kubernetes job here: 0 for each created, the refusal's code otherwise."""
        return [h.exit_code if isinstance(h, Refused) else 0 for h in handles if h is not None]

    def summary(self, points: Sequence[Point]) -> str | None:
        """The sweep's table (launcher/backends/summary.py): each job's name (a dry run's too), or why
        it was not created."""
        from ..backends import summary

        return summary.submitted(
            points, shown_id=lambda request: request.payload.name, id_header="job name", done="created"
        )

    # -- a job under way: from its handle alone ------------------------------------------------
    def _scope(self, handle: Handle) -> list[str]:
        return kubectl.scope(handle.extra.get("namespace"), handle.extra.get("context"))

    def describe(self, handle: Handle) -> Status:
        """``kubectl get KIND NAME -o json``, its conditions as a :class:`State`; never raises."""
        kind = handle.extra.get("kind", "")
        resource = kubectl.RESOURCE.get(kind)
        if resource is None:
            return Status(State.UNKNOWN, f"submit.json names no job kind kubectl knows ({kind!r})")
        try:
            out = kubectl.run(["get", resource, handle.id, *self._scope(handle), "-o", "json"], kubectl.QUERY_TIMEOUT_S)
        except kubectl.KubectlError as err:
            return Status(State.UNKNOWN, str(err))
        if out.returncode != 0:
            why = kubectl.why(out)
            if "NotFound" in why or "not found" in why:
                return Status(State.UNKNOWN, f"{kind} {handle.id} not found (deleted, or another cluster)")
            return Status(State.UNKNOWN, why)
        try:
            job = json.loads(out.stdout)
        except ValueError:
            return Status(State.UNKNOWN, "kubectl get printed no JSON")
        return job_status(job if isinstance(job, dict) else {})

    def logs(self, handle: Handle, rank: int | None = None, follow: bool = False) -> Iterator[str]:
        """The job's pods' output (``rank``: node ``rank``'s pod alone), line by line; all pods' lines
        carry kubectl's ``[pod/NAME/container]`` prefix."""
        kind = handle.extra.get("kind", "")
        _resource(handle, "logs")
        selector = kubectl.pod_selector(kind, handle.id, rank)
        args = ["logs", "-l", selector, *self._scope(handle), "--tail=-1", "--max-log-requests=64"]
        args += ["--prefix"] if rank is None else []
        if not follow:
            yield from _kubectl(args, "logs", handle).stdout.splitlines(keepends=True)
            return
        try:
            argv = [kubectl.find(), *args, "-f"]
        except kubectl.KubectlError as err:
            raise UserError("logs", handle.id, str(err)) from None
        from ..run.process.procs import follow_lines

        yield from follow_lines(argv)

    def cancel(self, handle: Handle) -> None:
        """``kubectl delete``: the operator stops and removes the pods. One already gone is no error."""
        resource = _resource(handle, "cancel")
        _kubectl(
            ["delete", resource, handle.id, *self._scope(handle), "--ignore-not-found", "--wait=false"],
            "cancel",
            handle,
        )


def _resource(handle: Handle, key: str) -> str:
    """kubectl's resource for the job's kind; a record naming no job kind is one UserError."""
    resource = kubectl.RESOURCE.get(handle.extra.get("kind", ""))
    if resource is None:
        raise UserError(key, handle.id, "submit.json names no TrainJob or PyTorchJob")
    return resource


def _kubectl(args: list[str], key: str, handle: Handle):
    """``kubectl ARGS``, bounded (:data:`kubectl.QUERY_TIMEOUT_S`); kubectl missing, silent or failing
    as one UserError naming the job (``key``: what was asked, logs or cancel)."""
    try:
        out = kubectl.run(args, kubectl.QUERY_TIMEOUT_S)
    except kubectl.KubectlError as err:
        raise UserError(key, handle.id, str(err)) from None
    if out.returncode != 0:
        raise UserError(key, handle.id, f"kubectl {args[0]} failed: {kubectl.why(out)}")
    return out


def _true(conditions: object) -> list[str]:
    """The types of the conditions whose status is True."""
    if not isinstance(conditions, list):
        return []
    return [str(c.get("type")) for c in conditions if isinstance(c, dict) and c.get("status") == "True"]


def _message(conditions: object, kind: str) -> str:
    for c in conditions if isinstance(conditions, list) else []:
        if isinstance(c, dict) and c.get("type") == kind:
            return str(c.get("message") or c.get("reason") or "")
    return ""


def job_status(job: dict) -> Status:
    """A TrainJob's / PyTorchJob's ``status`` as a :class:`Status`.

    TrainJob (Trainer v2): conditions Complete, Failed, Suspended; ``jobsStatus`` counts the JobSet's
    active jobs. PyTorchJob (training operator v1): conditions Created, Running, Restarting, Succeeded,
    Failed, Suspended."""
    status = job.get("status") if isinstance(job.get("status"), dict) else {}
    conditions = status.get("conditions")
    true = _true(conditions)
    if "Failed" in true:
        return Status(State.FAILED, f"Failed: {_message(conditions, 'Failed')}".rstrip(": "))
    if "Complete" in true or "Succeeded" in true:
        return Status(State.SUCCEEDED, "Complete" if "Complete" in true else "Succeeded", 0)
    if "Suspended" in true:
        return Status(State.PENDING, "Suspended")
    if job.get("kind") == "TrainJob":
        jobs = status.get("jobsStatus") if isinstance(status.get("jobsStatus"), list) else []
        active = sum(int(j.get("active") or 0) for j in jobs if isinstance(j, dict))
        return Status(State.RUNNING, f"{active} active job(s)") if active else Status(State.PENDING, "no pod running")
    if "Running" in true or "Restarting" in true:
        return Status(State.RUNNING, "Restarting" if "Restarting" in true and "Running" not in true else "Running")
    return Status(State.PENDING, "Created" if "Created" in true else "no condition yet")
