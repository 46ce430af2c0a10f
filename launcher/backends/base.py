"""The one back-end interface: every ``submit=`` value (and the local launch) is a :class:`Backend`.

The model is TorchX's ``Scheduler``: a pure ``dryrun`` that turns a finished launch into a *request*
(the batch script, the Ray job spec, the manifest, the local plan: nothing written, nothing started),
then ``submit`` (the only step that writes or starts anything), and, for a run already under way,
``describe``, ``logs`` and ``cancel`` from its :class:`Handle` alone -- which is what ``runs`` has,
read back from the run directory's ``submit.json``.

Import rule: this module and every back end's ``describe``/``logs``/``cancel`` side import no Hydra
(``runs`` calls them); ``dryrun`` imports what it needs lazily.
"""

from __future__ import annotations

import enum
import os
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..names import PROG
from ..rundir import SUBMIT

if TYPE_CHECKING:
    from ..config.schema import TrainConfig
    from ..secrets import Vault

SUBMIT_RECORD = SUBMIT  # <run dir>/submit.json: the handle of a submitted run
FORMAT = 2  # submit.json's format; format 1 (no "format" key) was SLURM's job_id record
DRY_RUN = "dry run"  # a sweep summary's note on a point that was only shown


class State(str, enum.Enum):
    """A run's state as its back end reports it (sacct/squeue, Ray's job status, kubectl, status.json)."""

    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"
    UNKNOWN = "unknown"

    @property
    def ended(self) -> bool:
        return self in (State.SUCCEEDED, State.FAILED, State.STOPPED)


@dataclass(frozen=True)
class Typed:
    """What the user typed, as one frozen value: nothing here is ever resolved or rewritten."""

    overrides: tuple[str, ...] = ()  # Hydra's task overrides as typed (interpolations unresolved)
    hydra_flags: tuple[str, ...] = ()  # --config-dir and friends
    script_args: tuple[str, ...] = ()  # after `--`
    order: tuple[str, ...] = ()  # grammar.CommandLine.order
    command: tuple[str, ...] = ()  # argv as typed
    presets: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # forwarded presets
    num_gpus: str | None = None  # Isaac Lab's --num_gpus, when given (checks.num_gpus_flag)
    # ``runs resume`` (launcher/runs/again.py): the script's resume flags (last) and the run
    # directory the training script continues in
    resume_args: tuple[str, ...] = ()
    trainer_dir: str | None = None
    # the back end that started this launcher on its node (``ssh``: the channel, ``ray``: the job's
    # carried config), for what the run is tagged with; None: started here (or by a SLURM job or a
    # pod, which their launcher= says)
    submitted_by: str | None = None

    @property
    def script_order(self) -> tuple[str, ...]:
        """The order of what reaches the training script: as typed, the resume flags last."""
        from ..plan import ARG_ENTRY

        return (*self.order, *[ARG_ENTRY] * len(self.resume_args))


@dataclass(frozen=True)
class Launch:
    """One finished launch, ready for a back end: the composed, typed config (secrets revealed:
    a back end masks them in anything it shows or writes), what was typed, and where it records."""

    cfg: TrainConfig
    typed: Typed
    run_dir: Path  # where the run's record goes (not created by dryrun)
    vault: Vault
    job: int | None = None  # a -m sweep's point number
    composed: dict | None = None  # composition.json

    def __repr__(self) -> str:  # the config holds the revealed secret values: shown masked, as everywhere
        from ..secrets import mask_config

        return (
            f"Launch(cfg={mask_config(self.cfg)!r}, typed={self.typed!r}, run_dir={self.run_dir!r}, job={self.job!r})"
        )


@dataclass(frozen=True)
class Request:
    """``dryrun``'s result: everything ``submit`` will do, and what the dry run prints."""

    backend: str
    run_dir: str
    shown: str  # what the dry run prints: secrets masked, exactly what submit sends
    files: Mapping[str, str] = field(default_factory=dict)  # written into run_dir by submit: name -> text
    payload: Any = None  # the back end's own: argv, Ray job spec, manifest dict, LaunchPlan


@dataclass(frozen=True)
class Handle:
    """A submitted run, as ``submit.json`` records it: enough for describe/logs/cancel, nothing secret."""

    backend: str
    id: str  # SLURM job id, Ray submission id, Kubernetes job name, the local launcher's pid
    run_dir: str
    extra: Mapping[str, str] = field(default_factory=dict)  # address, namespace, kind, log path, ...

    def as_record(self) -> dict:
        return {"format": FORMAT, "backend": self.backend, "id": self.id, "run_dir": self.run_dir, **self.extra}

    @classmethod
    def from_record(cls, data: Mapping, run_dir: str) -> Handle | None:
        """A handle from submit.json (this format, or format 1: SLURM's ``{"job_id": ...}``); None if
        it names no run."""
        if not isinstance(data, Mapping):
            return None
        if "format" not in data and isinstance(data.get("job_id"), str):  # format 1: submit=slurm only
            extra = {k: str(v) for k, v in data.items() if k in ("script", "log") and isinstance(v, str)}
            return cls("slurm", data["job_id"], run_dir, extra)
        if not known_format(data):  # a format this version does not know: never read as one it does
            return None
        backend, id_ = data.get("backend"), data.get("id")
        if not isinstance(backend, str) or not isinstance(id_, str):
            return None
        reserved = ("format", "backend", "id", "run_dir")
        extra = {k: v for k, v in data.items() if k not in reserved and isinstance(v, str)}
        return cls(backend, id_, run_dir, extra)


# what a recorded job id looks like per back end: a record is a file anyone who can write the run root
# can forge, and an id goes on a scheduler's command line (``scancel ID``, ``kubectl delete KIND ID``)
# or into a URL: ``--me`` or ``--all`` there would cancel every job the user has
_IDS = {
    "slurm": re.compile(r"\d{1,18}(?:[_+]\d{1,18})?"),  # 42, an array task 42_3, a het job part 42+1
    "k8s": re.compile(r"[a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?"),  # a DNS-1123 subdomain (the job's name)
    "ray": re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"),  # a submission id: one URL path segment
    "none": re.compile(r"[1-9]\d{0,9}"),  # the launcher's pid
    "ssh": re.compile(r"[1-9]\d{0,9}"),
}
_NAMESPACE = re.compile(r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?")  # a DNS-1123 label


def id_problem(handle: Handle) -> str | None:
    """Why a recorded handle cannot be asked or stopped (its id, or its namespace, is not one its back
    end makes); None: it can.

    >>> id_problem(Handle("slurm", "42_3", "/r")), id_problem(Handle("slurm", "--me", "/r"))
    (None, "id '--me' is not a slurm job id")
    >>> id_problem(Handle("k8s", "--all", "/r")), id_problem(Handle("k8s", "ppo", "/r", {"namespace": "-A"}))
    ("id '--all' is not a k8s job id", "namespace '-A' is not a Kubernetes namespace")
    """
    pattern = _IDS.get(handle.backend)
    if pattern is not None and not pattern.fullmatch(handle.id):
        return f"id {handle.id[:40]!r} is not a {handle.backend} job id"
    namespace = handle.extra.get("namespace")
    if handle.backend == "k8s" and namespace and not _NAMESPACE.fullmatch(namespace):  # "": kubectl's default
        return f"namespace {namespace[:40]!r} is not a Kubernetes namespace"
    return None


def known_format(data: Mapping) -> bool:
    """submit.json's ``format`` is one this version reads (2; none: format 1 or the older records).

    >>> known_format({"format": 2}), known_format({}), known_format({"format": 99}), known_format({"format": True})
    (True, True, False, False)
    """
    value = data.get("format", FORMAT)
    return isinstance(value, int) and not isinstance(value, bool) and value == FORMAT


@dataclass(frozen=True)
class Status:
    state: State
    detail: str = ""  # the back end's own words: "COMPLETED 0:0", "RUNNING on node-3", ...
    exit_code: int | None = None


class Backend(Protocol):
    """One ``submit=`` value. ``dryrun`` is pure; ``submit`` is the only step that writes or starts.

    The session's one path (launcher/session.py), for a single launch and for every point of a ``-m``
    sweep alike, with no code of its own for any back end:

    1. *prepare*: ``dryrun`` every point (that *is* the sweep's pre-check: a mistake in any point
       stops everything before anything is written);
    2. *execute*: the points that are dry runs go to ``show`` (all at once), the others to
       ``submit_all`` and then ``wait`` (local launches and followed Ray jobs end there; SLURM and
       Kubernetes return at submission);
    3. after the last point of a sweep: ``summary`` of every point, printed.

    A back end that has nothing better takes :func:`submit_each` for ``submit_all`` and
    :func:`summary.submitted <launcher.backends.summary.submitted>` for ``summary``. Where a submitted
    job records: :class:`launcher.backends.job_dir.JobDir` (one directory for the job, never a node's)."""

    name: str

    def dryrun(self, launch: Launch) -> Request: ...

    def show(self, requests: Sequence[Request]) -> None:
        """Print what a dry run of these requests shows -- exactly what ``submit_all`` would write
        and run: a local launch its plan (and, on stderr, what this host would refuse), SLURM its
        batch script (a sweep's job array once), Ray its job spec, Kubernetes its manifest. Writes
        and starts nothing; may raise ``UserError`` (the session prints it, exit 2)."""
        ...

    def submit(self, request: Request) -> Handle: ...

    def submit_all(
        self, requests: Sequence[Request], interrupts=None, fail_fast: bool = False
    ) -> list[Handle | Refused | None]:
        """Every point of a sweep (SLURM: one job array); ONE outcome per request, in order: its
        :class:`Handle`, a :class:`Refused` (the back end has printed why, or its summary row says
        it), or None: not submitted (the sweep was interrupted, ``interrupts.received``; or an earlier
        point failed and ``fail_fast``)."""
        ...

    def wait(self, handles: Sequence[Handle | Refused | None], interrupts=None, fail_fast: bool = False) -> list[int]:
        """The exit codes that count, in the order the runs ended: a run's where the back end follows
        it (a local launch; a Ray job with ``ray.follow=true``, Ctrl+C stopping it), 0 for a submitted
        job nobody waits for, the refusal's code for a refused one; none for a point not submitted
        (None) or one stopped by the sweep's ``fail_fast``. The invocation exits with the first failure."""
        ...

    def summary(self, points: Sequence[Point]) -> str | None:
        """A ``-m`` sweep's table, one row per point (the session prints it after the last point):
        local launches their exit codes and durations (launcher/sweep/lanes.py), submitted jobs their
        ids or why they have none (launcher/backends/summary.py; Ray's their state and exit code once
        followed). None: nothing to print."""
        ...

    def describe(self, handle: Handle) -> Status: ...

    def logs(self, handle: Handle, rank: int | None = None, follow: bool = False) -> Iterator[str]:
        """The run's log lines; ``follow``: and new ones as they come, until the run ends.

        ``rank`` None (``runs logs --rank all``) means EVERY rank: the run's whole output, as the back
        end keeps it -- a local launch every rank's log, each line prefixed ``[rank R]``; SLURM the
        job's ``slurm-<id>.out`` (every node's launcher); Ray the job's log; Kubernetes every pod's
        output (kubectl's ``[pod/NAME/container]`` prefix). An int: that rank's own log (SLURM and
        Ray: its ``rank<R>.log`` where this machine sees the run directory; Kubernetes: that node's
        pod). A log that cannot be read is one ``UserError``."""
        ...

    def cancel(self, handle: Handle) -> None: ...


@dataclass(frozen=True)
class Point:
    """One launch as the session ran it, for :meth:`Backend.summary`: its launch, its request and
    what became of it (``outcome`` None: only shown, a dry run; or not submitted)."""

    launch: Launch
    request: Request
    outcome: Handle | Refused | None = None

    @property
    def shown(self) -> bool:
        return bool(self.launch.cfg.dry_run)


@dataclass(frozen=True)
class Refused:
    """A sweep point its back end refused at submission (sbatch said no): its row in the summary."""

    run_dir: str
    error: str
    exit_code: int = 2


def submit_each(
    backend: Backend, requests: Sequence[Request], interrupts=None, fail_fast: bool = False, report: bool = True
) -> list[Handle | Refused | None]:
    """``submit_all`` where every point is its own job (Ray, Kubernetes): one ``submit`` each, in
    order; a refusal is its point's :class:`Refused` (``report``: its one error line printed, each
    distinct message once); after the sweep's signal (``interrupts``), or a refusal with
    ``fail_fast``, the rest are not submitted (None)."""
    from ..errors import UserError

    out: list[Handle | Refused | None] = []
    stopped = False
    for number, request in enumerate(requests):
        if interrupts is not None and interrupts.received is not None:
            out.append(None)
            continue
        if stopped:
            print(f"[{PROG}] job {number} skipped: an earlier job failed and sweep.fail_fast=true", flush=True)
            out.append(None)
            continue
        try:
            out.append(backend.submit(request))
        except UserError as err:
            out.append(refused(request, err))
            stopped = fail_fast
    if report:
        report_refusals(out)
    return out


def refused(request: Request, err: Exception) -> Refused:
    """A point its back end refused, as its outcome; with the user's ``HYDRA_FULL_ERROR=1`` (the
    session restores it while points run) the traceback instead."""
    if os.environ.get("HYDRA_FULL_ERROR") == "1":
        raise err
    return Refused(request.run_dir, str(err))


def report_refusals(outcomes: Sequence[Handle | Refused | None]) -> None:
    """Each distinct refusal once, as the one error path prints it: one line on stderr."""
    from .. import errors

    for message in dict.fromkeys(o.error for o in outcomes if isinstance(o, Refused)):
        print(f"{PROG}: error: {errors.one_line(message)}", file=sys.stderr, flush=True)
