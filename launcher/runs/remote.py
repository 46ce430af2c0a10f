"""Each run's back end, asked: a run's :class:`~launcher.backends.base.Handle` (read.handle_of reads
it back from the run directory; a local launch's from its status.json), its back end found
(:func:`backend`: the one dispatch), and its state asked (:func:`apply`).

Remote states are fetched **lazily** (docs/runs.md): the listing asks a back end only about the runs
whose own record cannot say how they ended (no launcher record yet, or an open one); a run whose
launcher wrote its end is never asked. ``runs show`` asks about its one run always. Every question is
bounded: each back end bounds its own queries, and a listing stops waiting after :data:`BUDGET_S`
(questions run on daemon threads: a silent scheduler or address never holds ``runs``); what was not
answered in time is shown as not known, with a note.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator, Sequence

from ..backends import REGISTRY, get
from ..backends.base import SUBMIT_RECORD, Handle, State, Status
from ..errors import UserError
from . import read
from .read import RunInfo

BUDGET_S = 8.0  # every back-end question of one listing, together
WORKERS = 8  # questions asked at the same time
LOCAL = "none"
SSH = "ssh"  # stopped through its launcher here, as a local launch (ssh/state.py)
# back-end states -> runs' statuses (docs/runs.md)
STATUSES = {
    State.PENDING: read.QUEUED,
    State.RUNNING: read.RUNNING,
    State.SUCCEEDED: read.SUCCESS,
    State.FAILED: read.FAILED,
    State.STOPPED: read.INTERRUPTED,
}


class Unreachable(Exception):
    """A back end that cannot be asked (its module, its scheduler, its address)."""


def handle(info: RunInfo) -> Handle | None:
    """The run's handle: a submitted run's from its record, a local launch's from its status.json."""
    from ..backends import local_state

    if info.handle is not None:
        return info.handle
    record = info.record_dirs[0] if info.record_dirs else info.run_dir
    return local_state.handle(record, info.within)


def backend(name: str):
    """The one dispatch: the back end registered for ``name`` (describe/logs/cancel). Raises
    Unreachable for a name no back end has, or a module that cannot be imported."""
    if name not in REGISTRY:
        raise Unreachable(f"{name!r} is no back end ({', '.join(REGISTRY)})")
    try:
        return get(name)
    except ImportError as err:
        raise Unreachable(f"{REGISTRY[name].split(':')[0]} cannot be imported: {err}") from None


def _ask_all(asker, handles: Sequence[Handle], deadline: float) -> list[Status | Exception | None]:
    """``asker.describe`` for every handle, a few at a time on daemon threads, until ``deadline``
    (None: not answered in time)."""
    results: list[Status | Exception | None] = [None] * len(handles)
    todo, lock = iter(range(len(handles))), threading.Lock()

    def work() -> None:
        while time.monotonic() < deadline:
            with lock:
                index = next(todo, None)
            if index is None:
                return
            try:
                results[index] = asker.describe(handles[index])
            except Exception as err:  # noqa: BLE001 (a back end's failure is one run's note, never the listing's end)
                results[index] = err

    threads = [threading.Thread(target=work, daemon=True) for _ in range(min(WORKERS, len(handles)))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return list(results)


def unresolved(run: RunInfo) -> bool:
    """The run's own record cannot say how it is: no launcher record yet, or an open one elsewhere."""
    return run.status == read.SUBMITTED or (run.status == read.UNKNOWN and run.exit_code is None)


def apply(runs: list[RunInfo], every: bool = False) -> None:
    """Ask each remote run's back end for its state (``every``: even where the record says; else only
    the unresolved ones) and decide the status of those the record cannot."""
    deadline = time.monotonic() + BUDGET_S
    groups: dict[str, list[RunInfo]] = {}
    for run in runs:
        if run.handle is not None and run.handle.backend != LOCAL:
            groups.setdefault(run.handle.backend, []).append(run)
    for name, members in groups.items():
        wanted = [run for run in members if every or unresolved(run)]
        if not wanted and name in REGISTRY:  # nothing to ask (runs that ended): its module is not even imported
            continue
        try:
            asker = backend(name)
        except Unreachable as err:
            for run in members:
                run.problems.append(f"{SUBMIT_RECORD}: {err}")
            continue
        answers = _ask_all(asker, [run.handle for run in wanted], deadline)
        for run, answer in zip(wanted, answers):
            _take(run, name, answer)


def _take(run: RunInfo, name: str, answer: Status | Exception | None) -> None:
    if answer is None:
        run.problems.append(f"{name}: no answer within the listing's {BUDGET_S:g} s: state not known")
        return
    if isinstance(answer, Exception):
        run.problems.append(f"{name}: cannot be asked: {answer}")
        return
    run.remote.update(state=answer.state.value, detail=answer.detail or None)
    if run.slurm is not None:
        run.slurm["state"] = answer.detail.split()[0] if answer.detail else None
    if run.ray is not None:
        run.ray["state"] = answer.detail.split()[0] if answer.detail else None
    status = STATUSES.get(answer.state)
    if status is None:
        return
    if run.status == read.SUBMITTED:  # no launcher record yet (or ever)
        run.status = status
        if run.exit_code is None and answer.exit_code is not None:
            run.exit_code = answer.exit_code
    elif run.status == read.UNKNOWN and run.exit_code is None:  # an open record on another host
        run.status = read.RUNNING if answer.state in (State.RUNNING, State.PENDING) else read.LOST


# -- runs stop / runs logs: one run, through its back end -------------------------------------------
ENDED = (read.SUCCESS, read.FAILED, read.HANG, read.INTERRUPTED, read.LOST)


def cancel(info: RunInfo, ident: str) -> str:
    """Stop the run ``info`` (what ``ident`` named) on its back end; what was done, in words. One
    UserError for a run with nothing to stop, one that ended, a back end that cannot be reached."""
    if info.status in ENDED:  # (an ended local record keeps no pid)
        raise UserError("id", ident, f"already ended ({info.status}): nothing to stop")
    found = handle(info)
    if found is None:
        raise UserError("id", ident, f"has no launcher record and no submitted job in {info.run_dir}: nothing to stop")
    if found.backend not in (LOCAL, SSH) and info.handle_uid != os.geteuid():
        # a scheduler cancels whatever job id it is given, as whoever asks (a local launch, and
        # submit=ssh's, are stopped only through the launcher proven to hold the record)
        name = read.SUBMIT if os.path.exists(os.path.join(found.run_dir, read.SUBMIT)) else read.RAY_JOB
        raise UserError(
            "id",
            ident,
            f"its record ({name}) belongs to uid {info.handle_uid}, not to you (uid {os.geteuid()}): a job another "
            "user's record names is never stopped as you",
            "stop it as that user, or through its back end",
        )
    try:
        backend(found.backend).cancel(found)
    except UserError as err:
        raise UserError("id", ident, err.allowed, err.hint) from None
    except Exception as err:  # noqa: BLE001 (a scheduler's or an address's failure, as one line)
        why = str(err) or type(err).__name__
        raise UserError("id", ident, f"its {found.backend} back end cannot be reached: {why}") from None
    if found.backend == LOCAL:
        return f"SIGINT to its launcher (pid {found.id}), as Ctrl+C: it stops every process of the launch"
    return f"{found.backend}: cancelled {found.id}"


def logs(info: RunInfo, ident: str, rank: int | None, follow: bool) -> Iterator[str] | None:
    """A remote run's lines from its back end (``rank`` None: every rank). None: a local run, whose
    files are read here."""
    found = info.handle
    if found is None or found.backend == LOCAL:
        return None
    try:
        asker = backend(found.backend)
    except Unreachable as err:
        raise UserError("id", ident, f"its {found.backend} back end cannot be reached: {err}") from None
    return _guarded(asker.logs(found, rank, follow), found.backend, ident)


def _guarded(lines: Iterator[str], name: str, ident: str) -> Iterator[str]:
    try:
        yield from lines
    except UserError:
        raise
    except Exception as err:  # noqa: BLE001 (a scheduler's or an address's failure, as one line)
        raise UserError("id", ident, f"its {name} back end cannot be reached: {err or type(err).__name__}") from None
