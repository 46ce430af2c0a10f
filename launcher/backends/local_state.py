"""The local launch's handle side: ``describe``, ``logs`` and ``cancel`` of a run from its
:class:`~.base.Handle` alone (``runs`` calls them; ``LocalBackend`` delegates to them).

A local run's truth is its record: ``status.json`` (the launcher's pid, its start time in clock ticks,
its host; the exit code and reason once it ended) and ``logs/rank<R>.log``. Read with ``runs/read.py``'s
readers (regular files only, capped); no Hydra, no third-party module, nothing that waits unbounded.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

from .. import files
from ..errors import UserError
from ..rundir import RANK_LOG, RunPaths
from ..runs import read
from .base import Handle, State, Status

BACKEND = "none"
POLL_S = 0.1
# runs/read.py's statuses -> the back-end vocabulary
_STATES = {
    read.RUNNING: State.RUNNING,
    read.SUCCESS: State.SUCCEEDED,
    read.FAILED: State.FAILED,
    read.HANG: State.FAILED,
    read.LOST: State.FAILED,
    read.INTERRUPTED: State.STOPPED,
    read.QUEUED: State.PENDING,
}


def handle(run_dir: str | Path, within: str | None = None) -> Handle | None:
    """The handle of the local launch recorded in ``run_dir`` (its status.json), None without one."""
    status = read._read_json(os.path.join(run_dir, read.STATUS), [], within)
    pid = status.get("pid") if status else None
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return None
    extra = {key: str(status[key]) for key in ("host", "pid_start") if status.get(key) is not None}
    return Handle(BACKEND, str(pid), str(run_dir), extra)


def _status(handle: Handle) -> tuple[dict | None, list[str]]:
    problems: list[str] = []
    return read._read_json(os.path.join(handle.run_dir, read.STATUS), problems, handle.run_dir), problems


def describe(handle: Handle) -> Status:
    """The run's state from its status.json (runs/read.py's reading: the launcher checked by pid and
    start time, never by pid alone)."""
    status, problems = _status(handle)
    text = read.status_of(status, problems)
    code = status.get("exit_code") if status else None
    code = code if isinstance(code, int) and not isinstance(code, bool) else None
    detail = str(status.get("reason") or "") if status else "no status.json"
    if problems:
        detail = "; ".join([detail, *problems]) if detail else "; ".join(problems)
    return Status(_STATES.get(text, State.UNKNOWN), detail or text, code)


def _log(handle: Handle, rank: int) -> Path:
    """A rank's log: its latest attempt's (attempt<N>/logs, a launch restarted)."""
    return RunPaths(handle.run_dir).attempts()[-1].rank_log(rank)


def logs(handle: Handle, rank: int | None = None, follow: bool = False) -> Iterator[str]:
    """One rank's log lines; ``rank`` None: every rank's (Backend.logs' one meaning: the launch's
    whole output), each line prefixed ``[rank R]``, rank after rank for what is written, then as they
    come. ``follow``: until the launch's record ends."""
    if rank is None:
        yield from _every_rank(handle, follow)
        return
    path = _log(handle, rank)
    try:
        stream = files.open_regular(path, handle.run_dir)
    except OSError as err:
        raise UserError("--rank", rank, f"no readable log {path}: {err.strerror or err}") from None
    try:
        yield from _lines(stream, handle, follow)
    finally:
        stream.close()


def _lines(stream, handle: Handle, follow: bool, prefix: str = "") -> Iterator[str]:
    partial = b""
    while True:
        data = stream.read(1 << 20)
        if data:
            *lines, partial = (partial + data).split(b"\n")
            yield from (prefix + line.decode(errors="replace") + "\n" for line in lines)
            continue
        if not follow or describe(handle).state is not State.RUNNING:
            break
        time.sleep(POLL_S)
    *lines, partial = (partial + stream.read()).split(b"\n")  # what came before the end was seen
    yield from (prefix + line.decode(errors="replace") + "\n" for line in lines)
    if partial:
        yield prefix + partial.decode(errors="replace")


def _every_rank(handle: Handle, follow: bool) -> Iterator[str]:
    """Every rank's lines: each log read to its end in rank order, then (``follow``) the new lines of
    any rank, a rank's log that appears later included, until the launch's record ends."""
    logs_dir = RunPaths(handle.run_dir).attempts()[-1].logs  # the latest attempt's (a launch restarted)
    streams: dict[int, list] = {}  # rank -> [stream, partial line]

    def discover() -> None:
        try:
            names = os.listdir(logs_dir)
        except OSError:
            return
        for name in names:
            match = RANK_LOG.match(name)
            if match and int(match.group(1)) not in streams:
                try:
                    streams[int(match.group(1))] = [files.open_regular(logs_dir / name, handle.run_dir), b""]
                except OSError:  # not a regular file (runs/read names those): not read
                    pass

    discover()
    if not streams and not follow:
        raise UserError("--rank", "all", f"no readable rank log in {logs_dir}")
    try:
        while True:
            progressed = False
            for rank in sorted(streams):
                entry = streams[rank]
                while data := entry[0].read(1 << 20):
                    progressed = True
                    *lines, entry[1] = (entry[1] + data).split(b"\n")
                    yield from (f"[rank {rank}] " + line.decode(errors="replace") + "\n" for line in lines)
            if not follow or (not progressed and describe(handle).state is not State.RUNNING):
                break
            if not progressed:
                time.sleep(POLL_S)
            discover()
        for rank in sorted(streams):  # what came before the end was seen
            stream, partial = streams[rank]
            *lines, partial = (partial + stream.read()).split(b"\n")
            yield from (f"[rank {rank}] " + line.decode(errors="replace") + "\n" for line in lines)
            if partial:
                yield f"[rank {rank}] " + partial.decode(errors="replace")
    finally:
        for stream, _ in streams.values():
            stream.close()


def cancel(handle: Handle) -> None:
    """Stop the launch as Ctrl+C does: SIGINT to its launcher, which stops its whole process group.
    Only the launcher that opened the record is signalled (read.verified_launcher: its pid, start
    time, user, and the record's directory held open by it), only on this host; a run that already
    ended, and a record that does not prove its launcher, are one UserError."""
    status, problems = _status(handle)
    if status is None:
        raise UserError("id", handle.run_dir, "has no launcher record (status.json): nothing here to stop")
    if status.get("exit_code") is not None:
        raise UserError("id", handle.run_dir, f"already ended ({read.status_of(status, problems)}): nothing to stop")
    alive = read.launcher_alive(status)
    if alive is None:
        raise UserError(
            "id", handle.run_dir, f"was launched on {status.get('host')}: stop it there (this is {read.HOST})"
        )
    if not alive:
        raise UserError("id", handle.run_dir, "already ended (lost: its launcher is gone): nothing to stop")
    try:  # the launcher that wrote this record, proven (a record can be copied or forged): else no signal
        pid, pidfd = read.verified_launcher(status, handle.run_dir)
    except read.NotItsLauncher as err:
        raise UserError("id", handle.run_dir, str(err)) from None
    send(pid, pidfd, signal.SIGINT)


def send(pid: int, pidfd: int | None, signum: int) -> None:
    """``signum`` to the launcher read.verified_launcher proved: through its pidfd (no process that
    reused its pid since), which is closed; one that ended meanwhile is not an error (run/process/
    procs.send: the one way a launcher is signalled, for ``runs stop`` and ``runs stacks`` alike)."""
    from ..run.process import procs

    procs.send(pid, pidfd, signum)
