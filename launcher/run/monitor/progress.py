"""The hang watchdog: every rank's progress on this node, and what happens when one stops.

A rank shows progress by a heartbeat (a write to ``logs/rank<R>.beat``, see run/monitor/beats.py) or
by new output in its log ``logs/rank<R>.log`` (a script that never beats). The monitor is a policy
over the observer's snapshot (run/monitor/observer.py: both files read once a second, shared with
the straggler detection) and keeps per rank:

- ``startup``: no beat and no output yet. After ``launcher.startup_timeout`` seconds of that (counted
  from when the rank's process started: the launch's start for JAX ranks, its log file appearing
  for torchrun's workers) the rank has stalled.
- ``running``: after its first sign of life. ``launcher.hang_timeout`` seconds without a new one and
  the rank has stalled.

A stalled rank ends the launch as a failure (:class:`launcher.run.postmortem.failure.Failure` with source
``hang``): every rank's stack is taken with py-spy (run/postmortem/stacks.py) into
``<run_dir>/stacks/<stamp>_hang/``, the summary names the stalled rank(s) and where each rank waits,
and the supervisor tears the launch down with exit code :data:`EXIT_HANG` (status.json reason
``hang``). A rank whose process has ended is never stalled (its exit is the failure detector's).

Each node's launcher watches only its own ranks; a hang found on any node makes every node take its
own ranks' stacks (:meth:`ProgressMonitor.hang_elsewhere`, told through run/monitor/liveness.py) before any
node stops a rank. On CUDA launches every rank's NCCL flight recorder is asked for a dump first, and
waited for (run/postmortem/flight_recorder.py). With torchrun's own output handling
(``--tee``/``--redirects``/``--log_dir``) the rank logs do not exist: only heartbeats count, and a
rank is watched from its first beat on.

With both keys null the watchdog is off: no file is looked at and no progress.json is written.
Every ~2 s the monitor writes ``logs/progress.json`` (per rank: phase, last beat, last output,
iteration, total, iterations per second, stalled). :meth:`ProgressMonitor.request_stacks` (SIGUSR2
to the launcher) takes every rank's stack into ``stacks/<stamp>/`` on a thread, without stopping
anything.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ... import files
from ...plan import LaunchPlan
from ...rundir import PROGRESS, Source
from .. import logs
from ..postmortem import flight_recorder, stacks
from ..postmortem.failure import Failure
from ..process import procs
from .observer import Observer, RankSeen, Snapshot

EXIT_HANG = 124  # as timeout(1): the launch ran past a limit (docs/hangs.md)
HANG_SOURCE = Source.HANG


def hang_failure(
    node: int, headline: str, now: float, *, rank: int | None = None, local_rank: int | None = None, log: str = ""
) -> Failure:
    """How a hang ends a launch (exit 124, source ``hang``); the stalled rank where this node found it."""
    return Failure(
        node=node,
        rank=rank,
        local_rank=local_rank,
        exit_code=EXIT_HANG,
        exception=headline,
        time=now,
        source=HANG_SOURCE,
        log=log,
    )


HANG_REASON = "hang"
PROGRESS_FILE = PROGRESS  # in the log directory
WRITE_S = 2.0  # how often progress.json is written


@dataclass
class RankProgress:
    rank: int
    first_seen: float  # epoch seconds: the rank's process started (about)
    last_beat: float | None = None
    last_output: float | None = None
    iteration: int | None = None
    total: int | None = None
    iter_per_s: float | None = None
    stalled: bool = False
    ended: bool = False  # its process is gone: not watched any more
    quiet_s: float = 0.0  # seconds without progress, as last judged
    limit_key: str = "hang_timeout"  # the key it was judged by

    @property
    def phase(self) -> str:
        return "startup" if self.last_beat is None and self.last_output is None else "running"

    def last_sign(self) -> float:
        return max(t for t in (self.last_beat, self.last_output, self.first_seen) if t is not None)

    def see(self, seen: RankSeen) -> None:
        """What the observer saw of it on this tick."""
        self.last_beat, self.last_output = seen.last_beat, seen.last_output
        self.iteration, self.total, self.iter_per_s = seen.iteration, seen.total, seen.iter_per_s

    def as_dict(self) -> dict:
        return {
            "phase": self.phase,
            "last_beat": self.last_beat,
            "last_output": self.last_output,
            "iteration": self.iteration,
            "total": self.total,
            "iter_per_s": self.iter_per_s,
            "stalled": self.stalled,
        }


def write_json(path: Path, data: dict) -> None:
    """Atomically, as launcher.record.write_json (run/ does not import the record). The temporary
    name is in a directory the ranks can write into: whatever is there (a FIFO would block the open
    for good, a symlink would be written through) is removed and the file created afresh."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.unlink()
    except FileNotFoundError:
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(json.dumps(data, indent=2) + "\n")
        tmp.replace(path)
    except OSError:  # a full disk: nothing half written left behind
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


class ProgressMonitor:
    """A :class:`launcher.run.postmortem.detect.Monitor`: progress per rank, progress.json, the hang watchdog
    and stacks on demand. ``rank_pids()``: global rank -> pid of this node's live rank processes
    (run/process/group.py); ``say(text)``: a line of the launcher's own on the console; ``observer``: the
    ranks' files, shared with the straggler detection (its own when not given)."""

    def __init__(
        self,
        plan: LaunchPlan,
        log_dir: Path,
        rank_pids: Callable[[], dict[int, int]],
        say: Callable[[str], None],
        stragglers: Callable[[], list[dict]] = list,
        on_hang: Callable[[str], None] = lambda headline: None,
        observer: Observer | None = None,
    ) -> None:
        self.plan, self.log_dir, self.rank_pids, self.say = plan, log_dir, rank_pids, say
        self.observer = observer if observer is not None else Observer(log_dir)
        self.seen = Snapshot()  # the last snapshot judged
        self.on_hang = on_hang  # a hang found here, before the stacks are taken (liveness.py tells the nodes)
        self.stragglers = stragglers  # the straggler monitor's entries, kept in progress.json
        self.run_dir = log_dir.parent
        self.hang_timeout, self.startup_timeout = plan.hang_timeout, plan.startup_timeout
        # both keys null: the watchdog is off (no file is looked at, no progress.json); stacks on demand stay
        self.active = self.hang_timeout is not None or self.startup_timeout is not None
        self.ranks: dict[int, RankProgress] = {}
        self.started = time.time()
        self.jax_ranks = {spec.global_rank: i for i, spec in enumerate(plan.processes) if spec.global_rank is not None}
        for rank in self.jax_ranks:  # started by the launcher itself: their clock runs from now
            self.ranks[rank] = RankProgress(rank, self.started)
        self.next_write = 0.0
        self.summary = ""  # the hang's summary, once there was one
        self.stacks_dir: Path | None = None
        self._requested = threading.Event()
        self._lock = threading.Lock()  # one capture at a time
        self._threads: list[threading.Thread] = []
        self._queued = threading.Semaphore(1)  # held by the one capture on demand that waits for its turn

    # -- observing -----------------------------------------------------------------------
    def _ended(self, codes: Sequence[int | None]) -> None:
        for rank, index in self.jax_ranks.items():
            if index < len(codes) and codes[index] is not None:
                self.ranks[rank].ended = True

    def _see(self, snapshot: Snapshot) -> None:
        self.seen = snapshot
        for rank, seen in snapshot.ranks.items():
            progress = self.ranks.get(rank)
            if progress is None:
                progress = self.ranks[rank] = RankProgress(rank, seen.first_seen)
            progress.see(seen)

    def _stalled(self, now: float) -> list[RankProgress]:
        """A rank that beats is judged alone: ``hang_timeout`` since its last beat or output. A rank
        that has not beaten is judged with its node, since many scripts print on rank 0 only: it
        has stalled when no rank of this node has shown a sign of life (or started) for
        ``hang_timeout``, or for ``startup_timeout`` while a rank of the node is still starting."""
        watched = [p for p in self.ranks.values() if not p.ended]
        if not self.plan.rank_logs and not self.jax_ranks:
            watched = [p for p in watched if p.last_beat is not None]  # no rank logs: watched from the first beat
        if not watched:
            return []
        node_quiet = now - max(p.last_sign() for p in watched)
        starting = any(p.phase == "startup" for p in watched)
        node_key = "startup_timeout" if starting else "hang_timeout"
        found = []
        for progress in watched:
            if progress.last_beat is not None:
                key, quiet = "hang_timeout", now - progress.last_sign()
            else:
                key, quiet = node_key, node_quiet
            limit = getattr(self, key)
            progress.stalled = limit is not None and quiet > limit
            progress.quiet_s, progress.limit_key = quiet, key
            if progress.stalled:
                found.append(progress)
        return found

    def write(self, now: float) -> None:
        data = {
            "updated": round(now, 3),
            "node": self.plan.node_rank,
            "ranks": {str(rank): self.ranks[rank].as_dict() for rank in sorted(self.ranks)},
        }
        named = self.stragglers()
        if named:
            data["stragglers"] = named
        try:
            write_json(self.log_dir / PROGRESS_FILE, data)
        except OSError as err:
            if files.out_of_space(err):
                files.say_out_of_space(self.log_dir / PROGRESS_FILE, err)

    # -- the Monitor protocol -------------------------------------------------------------
    def check(self, codes: Sequence[int | None]) -> Failure | None:
        if self._requested.is_set():
            self._requested.clear()
            # a capture that waits for its turn serves this request too: a flood of SIGUSR2 takes at
            # most one capture running and one waiting, not one per signal queued for ever
            if self._queued.acquire(blocking=False):
                thread = threading.Thread(target=self._on_demand, daemon=True)
                thread.start()
                self._threads = [*(t for t in self._threads if t.is_alive()), thread]
        if not self.active:
            return None
        snapshot = self.observer.look()
        if snapshot.tick == self.seen.tick:  # judged already: the next tick reads the files again
            return None
        mono, now = time.monotonic(), snapshot.time
        self._ended(codes)
        self._see(snapshot)
        stalled = self._stalled(now)
        if stalled:
            live = self.rank_pids()
            for progress in stalled:  # a rank whose process is gone has ended, not stalled
                if self.jax_ranks or live:
                    progress.ended = progress.rank not in live
            stalled = [p for p in stalled if not p.ended]
        if mono >= self.next_write or stalled:
            self.next_write = mono + WRITE_S
            self.write(now)
        if stalled:
            return self._hang(stalled, now)
        return None

    # -- a hang ----------------------------------------------------------------------------
    def _headline(self, stalled: list[RankProgress]) -> str:
        names = ", ".join(str(p.rank) for p in sorted(stalled, key=lambda p: p.rank))
        plural = "s" if len(stalled) > 1 else ""
        first = max(stalled, key=lambda p: p.quiet_s)
        key = f"launcher.{first.limit_key}={getattr(self, first.limit_key):g}"
        if all(p.phase == "startup" for p in stalled):
            return (
                f"HANG on node {self.plan.node_rank}: rank{plural} {names} showed no sign of life (no heartbeat, no "
                f"output) {first.quiet_s:.0f} s after starting ({key})"
            )
        quiet = f"{first.quiet_s:.0f} s"
        return f"HANG on node {self.plan.node_rank}: no progress from rank{plural} {names} for {quiet} ({key})"

    def _progress_lines(self, now: float) -> list[str]:
        lines = []
        for rank in sorted(self.ranks):
            p = self.ranks[rank]
            if p.ended:
                state = "ended"
            elif p.phase == "startup":
                state = f"no sign of life since it started {now - p.first_seen:.0f} s ago"
            else:
                state = f"last progress {now - p.last_sign():.0f} s ago"
                if p.iteration is not None:
                    state += f", iteration {p.iteration}" + (f"/{p.total}" if p.total is not None else "")
            lines.append(f"  rank {rank}: {state}{' (stalled)' if p.stalled else ''}")
        return lines

    def _hang(self, stalled: list[RankProgress], now: float) -> Failure:
        headline = self._headline(stalled)
        self.say(headline.replace("HANG on", "hang on", 1) + ": taking every rank's stack (py-spy)")
        self.on_hang(headline)
        pids = self._take(headline, now)
        first = max(stalled, key=lambda p: p.quiet_s)
        env = procs.environ(pids[first.rank]) if first.rank in pids else {}
        local = env.get("LOCAL_RANK", env.get("JAX_LOCAL_RANK", ""))
        return hang_failure(
            self.plan.node_rank,
            headline,
            now,
            rank=first.rank,
            local_rank=int(local) if local.isdigit() else None,
            log=str(logs.rank_log(self.log_dir, first.rank)),
        )

    def hang_elsewhere(self, found: Failure) -> Failure:
        """Another node found a hang (run/monitor/liveness.py relayed it): this node's ranks' stacks are taken
        all the same (the rank that stalled may be one of them), and the launch ends as a hang here too."""
        now = time.time()
        node = self.plan.node_rank
        said = found.exception.split(": ", 1)[-1] if found.exception.startswith("HANG on node ") else found.exception
        headline = f"HANG on node {found.node} (found there; these are node {node}'s ranks): {said}"
        self.say(f"node {found.node} found a hang: taking the stack of every rank of node {node} (py-spy)")
        self._see(self.observer.read())
        self._take(headline, now)
        return hang_failure(found.node, headline, now)

    def _take(self, headline: str, now: float) -> dict[int, int]:
        """Every rank's stack (and NCCL flight-recorder dump) into ``stacks/<stamp>_hang``; the pids."""
        pids = self.rank_pids()
        # CUDA launches: every rank's NCCL flight recorder dumps too (a no-op where no rank opened its pipe)
        dumps = flight_recorder.request_dumps({**os.environ, **self.plan.env}, self.run_dir)
        with self._lock:
            self.stacks_dir, self.summary = stacks.capture(
                self.run_dir, pids, self.plan.node_rank, True, headline, (*self._progress_lines(now), *dumps)
            )
        return pids

    # -- stacks on demand ------------------------------------------------------------------
    def request_stacks(self) -> None:
        """Take every rank's stack soon (from a signal handler: only sets a flag)."""
        self._requested.set()

    def _on_demand(self) -> None:
        with self._lock:
            self._queued.release()  # its turn: a request from now on needs a capture of its own
            try:
                target, said = stacks.capture(
                    self.run_dir, self.rank_pids(), self.plan.node_rank, False, "stacks on demand (SIGUSR2)"
                )
            except OSError as err:
                self.say(f"could not write the stacks: {err}")
                return
        if target is None:
            self.say(f"could not write the stacks: {said.splitlines()[-1]}")
            return
        self.say(f"stacks of every rank of node {self.plan.node_rank}: {target}")

    def close(self) -> None:
        """Wait for a capture on demand that is still being written; leave a last progress.json."""
        for thread in self._threads:
            thread.join(timeout=stacks.DUMP_TIMEOUT_S + 5)
        if self.active:
            self.write(time.time())
