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
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

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
        backend, id_ = data.get("backend"), data.get("id")
        if not isinstance(backend, str) or not isinstance(id_, str):
            return None
        reserved = ("format", "backend", "id", "run_dir")
        extra = {k: v for k, v in data.items() if k not in reserved and isinstance(v, str)}
        return cls(backend, id_, run_dir, extra)


@dataclass(frozen=True)
class Status:
    state: State
    detail: str = ""  # the back end's own words: "COMPLETED 0:0", "RUNNING on node-3", ...
    exit_code: int | None = None


class Backend(Protocol):
    """One ``submit=`` value. ``dryrun`` is pure; ``submit`` is the only step that writes or starts.

    The session's one path, for a single launch and for every point of a ``-m`` sweep alike:
    ``dryrun`` every point (that *is* the sweep's pre-check: a mistake in any point stops everything
    before anything is written), print the requests (dry run) or ``submit_all`` them, then ``wait``
    for what the back end waits for (local launches and Ray jobs end; SLURM and Kubernetes return at
    submission), then ``summary`` for a sweep."""

    name: str

    def dryrun(self, launch: Launch) -> Request: ...

    def submit(self, request: Request) -> Handle: ...

    def submit_all(self, requests: Sequence[Request]) -> list[Handle | Refused]:
        """Every point of a sweep (SLURM: one job array); default: one submit each, a refusal recorded."""
        ...

    def wait(self, handles: Sequence[Handle | Refused], interrupts=None, fail_fast: bool = False) -> list[int]:
        """Exit codes, one per handle: what the run ended with where the back end follows it, 0 for a
        submitted job nobody waits for, the refusal's code for a refused one."""
        ...

    def describe(self, handle: Handle) -> Status: ...

    def logs(self, handle: Handle, rank: int | None = None, follow: bool = False) -> Iterator[str]: ...

    def cancel(self, handle: Handle) -> None: ...


@dataclass(frozen=True)
class Refused:
    """A sweep point its back end refused at submission (sbatch said no): its row in the summary."""

    run_dir: str
    error: str
    exit_code: int = 2


def submit_each(backend: Backend, requests: Sequence[Request]) -> list[Handle | Refused]:
    """``submit_all`` where every point is its own job: one ``submit`` each, a refusal recorded as
    its sweep row (the back ends that have nothing better: Ray, Kubernetes)."""
    from ..errors import UserError

    out: list[Handle | Refused] = []
    for request in requests:
        try:
            out.append(backend.submit(request))
        except UserError as err:
            out.append(Refused(request.run_dir, str(err)))
    return out
