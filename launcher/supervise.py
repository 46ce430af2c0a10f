"""Runs a launch plan and supervises it: the only module that starts processes or touches signals.

- Every process starts in its own session (its own process group), so a signal can reach all of
  its descendants at once.
- SIGINT, SIGTERM and SIGHUP to the launcher are forwarded once to every group; after
  ``grace_period`` seconds whatever is left gets SIGKILL; a second Ctrl+C kills at once.
- SIGUSR1 (SLURM's time-limit / preemption warning, docs/slurm.md) is not a stop: every process
  starts with USR1 ignored (an ignored disposition survives exec, so a worker that does not handle
  it is not killed by it; one that installs a handler gets it), and, with ``relay_usr1``, a USR1 to
  the launcher is passed on to every group. Under SLURM the step's signal reaches every process
  directly, so the CLI turns the relay off there.
- The first process that exits non-zero ends the launch: the others are stopped the same way.
- Each process's output goes to its own log file; the console shows rank 0 (or all ranks, each
  line prefixed, with ``log_all_ranks``).
- Exit code: the failing process's code (128+N when a signal N killed it), else 128+N after
  signal N reached the launcher, else 0.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Optional

from .plan import LaunchPlan, ProcessSpec

FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
RELAYED_SIGNALS = (signal.SIGUSR1,)  # passed on to every group, never a reason to stop
POLL_S = 0.05


def exit_code_of(returncode: int) -> int:
    """Shell convention: a process killed by signal N reports 128+N."""
    return 128 - returncode if returncode < 0 else returncode


def _log_name(spec: ProcessSpec) -> str:
    return f"rank{spec.global_rank}.log" if spec.global_rank is not None else f"{spec.name}.log"


def _pump(stream: IO[bytes], log: IO[bytes], console: Optional[IO[bytes]], prefix: bytes) -> None:
    for line in iter(stream.readline, b""):
        log.write(line)
        log.flush()
        if console is not None:
            console.write(prefix + line)
            console.flush()
    stream.close()
    log.close()


class Supervisor:
    def __init__(self, plan: LaunchPlan, log_dir: Optional[Path]) -> None:
        self.plan = plan
        self.log_dir = log_dir
        self.procs: list[subprocess.Popen] = []
        self.pumps: list[threading.Thread] = []
        self.signal_received: Optional[int] = None
        self.stop_deadline: Optional[float] = None

    # -- starting -------------------------------------------------------------------------
    def _shown(self, spec: ProcessSpec) -> bool:
        return self.plan.log_all_ranks or spec.global_rank in (None, 0)

    def start(self) -> None:
        base_env = {**os.environ, **self.plan.env}
        console = sys.stdout.buffer
        multi = len(self.plan.processes) > 1
        for spec in self.plan.processes:
            env = {**base_env, **spec.env}
            if self.log_dir is None:
                proc = subprocess.Popen(spec.argv, env=env, start_new_session=True)
            else:
                proc = subprocess.Popen(
                    spec.argv, env=env, start_new_session=True,
                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                )
                prefix = f"[{self.plan.node_rank}:{spec.global_rank}] ".encode() if multi and self.plan.log_all_ranks else b""
                log = open(self.log_dir / _log_name(spec), "wb")
                pump = threading.Thread(
                    target=_pump, args=(proc.stdout, log, console if self._shown(spec) else None, prefix), daemon=True
                )
                pump.start()
                self.pumps.append(pump)
            self.procs.append(proc)

    # -- stopping -------------------------------------------------------------------------
    def _signal_all(self, signum: int) -> None:
        for proc in self.procs:
            try:
                os.killpg(proc.pid, signum)
            except ProcessLookupError:
                pass

    def stop(self, signum: int = signal.SIGTERM) -> None:
        """Ask every group to stop once; SIGKILL follows after the grace period."""
        if self.stop_deadline is None:
            self.stop_deadline = time.monotonic() + self.plan.grace_period
            self._signal_all(signum)

    def _relay(self, signum: int, _frame: object) -> None:
        self._signal_all(signum)

    def _on_signal(self, signum: int, _frame: object) -> None:
        if self.signal_received is not None and signum == signal.SIGINT:
            self._signal_all(signal.SIGKILL)  # second Ctrl+C: now
            return
        if self.signal_received is None:
            self.signal_received = signum
        self.stop(signum)

    # -- waiting --------------------------------------------------------------------------
    def wait(self) -> int:
        failure: Optional[int] = None
        while True:
            codes = [proc.poll() for proc in self.procs]
            if failure is None:
                failed = [c for c in codes if c not in (None, 0)]
                if failed:
                    failure = exit_code_of(failed[0])
                    self.stop(signal.SIGTERM)
            if all(c is not None for c in codes):
                break
            if self.stop_deadline is not None and time.monotonic() > self.stop_deadline:
                self._signal_all(signal.SIGKILL)
            time.sleep(POLL_S)
        # descendants that outlived their process (same group) go too
        self._signal_all(signal.SIGKILL)
        for pump in self.pumps:
            pump.join(timeout=5)
        if failure is not None:
            return failure
        if self.signal_received is not None:
            return 128 + self.signal_received
        return 0


def run(plan: LaunchPlan, log_dir: Optional[Path], relay_usr1: bool = True) -> int:
    """Start the plan, supervise it to the end, and return the launch's exit code."""
    supervisor = Supervisor(plan, log_dir)
    previous = {sig: signal.getsignal(sig) for sig in FORWARDED_SIGNALS + RELAYED_SIGNALS}
    for sig in FORWARDED_SIGNALS:
        signal.signal(sig, supervisor._on_signal)
    for sig in RELAYED_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)  # inherited by every process started below
    try:
        supervisor.start()
        if relay_usr1:
            for sig in RELAYED_SIGNALS:
                signal.signal(sig, supervisor._relay)
        return supervisor.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run_many(
    jobs: "list[tuple[LaunchPlan, Optional[Path], tuple[int, ...]]]",
    lanes: "list[list[int]]",
    fail_fast: bool = False,
    on_start=None,
    on_end=None,
) -> list[Optional[int]]:
    """Run a parallel sweep: each lane (a list of job indexes) runs its jobs one after another, all
    lanes at once. A job given CPU cores runs pinned to them: its lane's thread sets its own CPU
    affinity before starting the job, and processes inherit the mask of the thread that starts
    them (no preexec_fn, which is unsafe next to the log threads). Signals to the launcher reach
    every running job; with ``fail_fast`` the first failure stops the running jobs and skips the
    rest. Returns each job's exit code (None: skipped). ``on_start(i)``/``on_end(i, code)`` are
    called from the lane threads."""
    codes: list[Optional[int]] = [None] * len(jobs)
    active: dict[int, Supervisor] = {}
    lock = threading.Lock()
    stopping = threading.Event()

    def lane(indexes: list[int]) -> None:
        for index in indexes:
            plan, log_dir, cpus = jobs[index]
            with lock:
                if stopping.is_set():
                    continue
                supervisor = Supervisor(plan, log_dir)
                active[index] = supervisor
            if cpus:
                os.sched_setaffinity(0, cpus)  # this thread only; the job's processes inherit it
            if on_start is not None:
                on_start(index)
            try:
                supervisor.start()
                code = supervisor.wait()
            except OSError as err:  # the program could not be started
                print(f"[train_multigpu] job {index}: {err}", file=sys.stderr, flush=True)
                code = 127
            codes[index] = code
            with lock:
                active.pop(index, None)
                if code != 0 and fail_fast and not stopping.is_set():
                    stopping.set()
                    for other in active.values():
                        other.stop(signal.SIGTERM)
            if on_end is not None:
                on_end(index, code)

    def on_signal(signum: int, frame: object) -> None:
        stopping.set()
        with lock:
            for supervisor in active.values():
                supervisor._on_signal(signum, frame)

    previous = {sig: signal.getsignal(sig) for sig in FORWARDED_SIGNALS}
    for sig in FORWARDED_SIGNALS:
        signal.signal(sig, on_signal)
    threads = [threading.Thread(target=lane, args=(indexes,), daemon=True) for indexes in lanes]
    try:
        for thread in threads:
            thread.start()
        while any(thread.is_alive() for thread in threads):
            for thread in threads:
                thread.join(timeout=POLL_S)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return codes
