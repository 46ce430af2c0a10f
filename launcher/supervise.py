"""Runs a launch plan and supervises it: the only place that starts processes or touches signals
(with its helpers: procs, watchdog, worker, logs, failure).

Processes
    Every process the launcher starts (torchrun, or one per JAX rank) runs in its own session, so a
    Ctrl+C on the terminal reaches the launcher alone, and it dies with the launcher
    (``PR_SET_PDEATHSIG``). Each rank runs behind the worker wrapper (launcher/worker.py), which
    also dies with its parent, writes the rank's log and records a non-zero exit.

Signals
    SIGINT, SIGTERM and SIGHUP are forwarded once, to each started process's group. For torchrun
    that group is torchrun alone: torchrun puts every worker in a session of its own and forwards the
    signal to each worker group itself, so a worker gets it exactly once and torch elastic shuts its
    workers down in its own order. JAX ranks get it directly, group-wide. ``launcher.grace_period``
    seconds later (default 30) every process left in the launch gets SIGKILL; a second Ctrl+C does
    that at once. Exit code 128+N after signal N (130 SIGINT, 143 SIGTERM, 129 SIGHUP), unless a
    rank failed first.

Fail fast
    The first rank that exits non-zero (seen through its exit record, its exit status or torchrun's
    report) ends the launch: the other ranks get SIGTERM (torchrun sends it itself, every
    ``--monitor_interval``, 0.1 s by default) and, ``FAILURE_KILL_S`` later, everything left gets
    SIGKILL. The launch exits with that rank's own exit code, and prints the failure summary.

SIGUSR1
    SLURM's time-limit / preemption warning (docs/slurm.md) is not a stop: every process starts
    with USR1 ignored (an ignored disposition survives exec, so a worker that does not handle it is
    not killed by it; one that installs a handler gets it), and, with ``relay_usr1``, a USR1 to the
    launcher is passed on to every group. Under SLURM the step's signal reaches every process
    directly, so the CLI turns the relay off there.

Sweeps
    A sweep (``-m``) holds the signals for its whole length (:class:`Interrupts`), not job by job:
    the first SIGINT/SIGTERM/SIGHUP stops the running job(s) as above and the sweep starts no
    more; a second Ctrl+C kills at once. ``sweep.fail_fast`` stops a parallel sweep's other jobs
    with :meth:`Supervisor.halt`: their outcome says so instead of reporting a failure.

No orphans
    The launcher is a child subreaper, so descendants whose parent died are re-parented to it; at
    the end every descendant, and every process carrying the launch's marker, is killed. A watchdog
    process (launcher/watchdog.py) does the same if the launcher itself is SIGKILLed.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Optional

from . import failure as failure_mod
from . import logs, procs
from .errors import UserError
from .failure import Failure, exit_code_of  # noqa: F401  (exit_code_of: re-exported)
from .plan import LAUNCH_ID_VAR, LaunchPlan, supervised

FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
RELAYED_SIGNALS = (signal.SIGUSR1,)  # passed on to every group, never a reason to stop
POLL_S = 0.05
FAILURE_KILL_S = 1.0  # after a rank failed, the others get this long before SIGKILL
REAP_EVERY_S = 1.0
WORKER_WRAPPER = str(Path(__file__).resolve().parent / "worker.py")
PROG = "train_multigpu"


def _max_restarts(argv: tuple[str, ...]) -> int:
    if "--max_restarts" in argv:
        value = argv[argv.index("--max_restarts") + 1]
        return int(value) if value.isdigit() else 0
    return 0


# torchrun could not bind its store's port (TCPStore: "failed to listen ... port: P ... EADDRINUSE"):
# another process took it after the preflight check; the launch ends as that check would have
_PORT_IN_USE = re.compile(rb"failed to listen on any local network address\. port: (\d+),[^\n]*EADDRINUSE")
# the same for a JAX rank 0 whose coordinator service (gRPC) could not bind (then it segfaults)
_COORDINATOR_PORT_IN_USE = re.compile(rb"Failed to add port to server: No address added [^\n]*:(\d+)'")
EXIT_PORT_IN_USE = 2  # the same code as the preflight check's (a user error, nothing trained)


@dataclass(frozen=True)
class Outcome:
    exit_code: int
    reason: str
    failure: Optional[Failure] = None
    summary: str = ""  # the failure summary as printed
    port_in_use: Optional[int] = None  # torchrun found this port taken (the CLI names the key)
    halted: bool = False  # stopped by the caller (Supervisor.halt), not failed

    def failure_record(self) -> Optional[dict]:
        """What status.json keeps of the failure (None after a success or a signal)."""
        return None if self.failure is None else {**self.failure.as_dict(), "summary": self.summary}


def prepare(plan: LaunchPlan, log_dir: Path) -> LaunchPlan:
    """The plan with the worker wrapper and a fresh launch id (what command.sh should show)."""
    return supervised(plan, WORKER_WRAPPER, str(log_dir), uuid.uuid4().hex)


class Supervisor:
    """One launch. ``exclusive``: the only launch of this process, so every descendant of the
    launcher belongs to it; a parallel sweep's launches (run_many) share the launcher and own only
    their processes' trees and their marker."""

    def __init__(
        self, plan: LaunchPlan, log_dir: Path, console: Optional[IO[bytes]] = None, exclusive: bool = True
    ) -> None:
        self.exclusive = exclusive
        if LAUNCH_ID_VAR not in plan.env:
            plan = prepare(plan, log_dir)
        self.plan = plan
        self.launch_id = plan.env[LAUNCH_ID_VAR]
        self.log_dir = log_dir
        self.console = console if console is not None else sys.stdout.buffer
        self.procs: list[subprocess.Popen] = []
        self.pumps = []
        self.tail: Optional[logs.ConsoleTail] = None
        self.watchdog: Optional[subprocess.Popen] = None
        self.signal_received: Optional[int] = None
        self.failure: Optional[Failure] = None
        self.kill_at: Optional[float] = None
        self.stopping = False
        self.stop_signal: Optional[int] = None  # what stop() sent (processes started later get it too)
        self.halted: Optional[str] = None  # why the sweep stopped this launch (halt)
        self.torchrun = plan.processes[0].name == "torchrun"
        self._held: Optional[list[bytes]] = None  # a traceback of torchrun's, being read
        self._port_taken = False
        # with --max_restarts > 0 torchrun restarts failed workers itself: only its exit ends the launch
        self.elastic_restarts = self.torchrun and _max_restarts(plan.processes[0].argv) > 0

    # -- starting -------------------------------------------------------------------------
    def _shown(self, rank: int) -> bool:
        if self.plan.log_all_ranks:
            return True
        if self.plan.console_local_ranks is not None:
            return rank - self.plan.node_rank * self.plan.nproc_per_node in self.plan.console_local_ranks
        return rank == 0

    def _ranks_by_rendezvous(self) -> bool:
        """A multi-node torchrun launch with an endpoint rendezvous (c10d): which node gets which
        global ranks is decided when the nodes meet, not by node_rank (static only)."""
        return self.torchrun and self.plan.nnodes != "1" and "--rdzv_endpoint" in self.plan.processes[0].argv

    def _shows_any_local_rank(self) -> bool:
        first = self.plan.node_rank * self.plan.nproc_per_node
        return any(self._shown(rank) for rank in range(first, first + self.plan.nproc_per_node))

    def _say(self, text: str) -> None:
        try:
            self.console.write(f"[{PROG}] {text}\n".encode())
            self.console.flush()
        except (OSError, ValueError):
            pass

    def _start_watchdog(self) -> None:
        package_parent = str(Path(__file__).resolve().parent.parent)
        env = dict(os.environ)  # an outer launch's marker, if any, stays: its sweep covers this watchdog
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_parent, env.get("PYTHONPATH")]))
        # the run record next to the logs (<run_dir>/status.json), closed by the watchdog if this
        # launcher is killed; it touches only a record this process opened (record.write_killed)
        status = str(self.log_dir.parent / "status.json")
        self.watchdog = subprocess.Popen(
            [sys.executable, "-S", "-m", "launcher.watchdog", self.launch_id, status],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env=env, start_new_session=True,
        )

    def _tell_watchdog(self, line: str) -> None:
        if self.watchdog is not None and self.watchdog.stdin is not None:
            try:
                self.watchdog.stdin.write(line.encode() + b"\n")
                self.watchdog.stdin.flush()
            except (BrokenPipeError, ValueError):
                pass

    def _echo_agent(self, line: bytes) -> None:
        """torchrun's own lines: shown while it owns the output, or until the launch is ending. A
        traceback is held until its last line: one for a port found taken is not shown (the CLI
        prints the port's one-line error instead; torchrun.log keeps it), nor anything after it."""
        if self.plan.rank_logs and (self.stopping or self.failure is not None):
            return
        if self._port_taken:
            return
        if self._held is None and line.startswith(b"Traceback (most recent call last):"):
            self._held = []
        if self._held is not None:
            self._held.append(line)
            if len(self._held) == 1 or line.startswith((b" ", b"\t")):
                return
            block, self._held = b"".join(self._held), None
            if _PORT_IN_USE.search(block):
                self._port_taken = True
                return
            line = block
        self._write_console(line)

    def _write_console(self, data: bytes) -> None:
        try:
            self.console.write(data)
            self.console.flush()
        except (OSError, ValueError):
            pass

    def _flush_held(self) -> None:
        if self._held:
            block, self._held = b"".join(self._held), None
            self._write_console(block)

    def _port_in_use(self) -> Optional[int]:
        """The port torchrun's store (its log says EADDRINUSE) or the failed JAX rank's coordinator
        service could not bind, or None."""
        if self.torchrun:
            for pump in self.pumps:  # torchrun has exited: its last lines are on their way to the log
                pump.join(timeout=5)
            path, pattern = self.log_dir / logs.TORCHRUN_LOG, _PORT_IN_USE
        elif self.failure is not None and self.failure.log:
            path, pattern = Path(self.failure.log), _COORDINATOR_PORT_IN_USE
        else:
            return None
        match = pattern.search("\n".join(logs.last_lines(path, 200)).encode())
        return int(match.group(1)) if match else None

    def start(self) -> None:
        procs.become_subreaper()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        base_env = {**os.environ, **self.plan.env}
        preexec = procs.die_with_parent_preexec(os.getpid())
        for spec in self.plan.processes:
            env = {**base_env, **spec.env}
            common = dict(env=env, start_new_session=True, preexec_fn=preexec, stdin=subprocess.DEVNULL)
            try:
                if spec.global_rank is None:  # torchrun: its own output goes to logs/torchrun.log
                    proc = subprocess.Popen(spec.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **common)
                    log = open(self.log_dir / logs.TORCHRUN_LOG, "ab")
                    self.pumps.append(logs.pump(proc.stdout, log, self._echo_agent))
                else:  # a JAX rank: what the interpreter prints before the wrapper runs lands in its log too
                    with open(logs.rank_log(self.log_dir, spec.global_rank), "ab") as log:
                        proc = subprocess.Popen(spec.argv, stdout=log, stderr=subprocess.STDOUT, **common)
            except OSError as err:
                raise UserError("python", spec.argv[0], f"cannot start it: {err.strerror or err}",
                                "set python= to an interpreter that exists, or leave it unset") from None
            self.procs.append(proc)
            if self.stop_signal is not None:  # a signal (or a halt) came before or while starting
                procs.signal_group(proc.pid, self.stop_signal)
        # after the children, so they get the CPU first; they die with the launcher anyway
        # (PDEATHSIG), the watchdog is for their descendants, which need longer than this to appear
        self._start_watchdog()
        for proc in self.procs:
            self._tell_watchdog(f"pgid {proc.pid}")
        if self.plan.rank_logs and self._ranks_by_rendezvous() and not self.plan.log_all_ranks:
            # c10d (any endpoint rendezvous) ranks the nodes in rendezvous order, not by node_rank:
            # global rank 0 may land on any node, so every node says where its ranks' logs are
            self._say("the console shows global rank 0 if the rendezvous gives it to this node (c10d ranks "
                      f"nodes by rendezvous order, not node_rank); this node's ranks log to {self.log_dir}"
                      " (log_all_ranks=true shows them here)")
        elif self.plan.rank_logs and not self._shows_any_local_rank():
            self._say(f"the console shows global rank 0 (on node 0); this node's ranks log to {self.log_dir}"
                      " (log_all_ranks=true shows them here)")
        if self.plan.rank_logs:
            prefix = self.plan.log_all_ranks
            self.tail = logs.ConsoleTail(self.log_dir, self.console, self._shown, self.plan.node_rank, prefix).start()

    # -- stopping -------------------------------------------------------------------------
    def _signal_groups(self, signum: int, skip: Optional[subprocess.Popen] = None) -> None:
        for proc in self.procs:
            if proc is not skip and proc.poll() is None:
                procs.signal_group(proc.pid, signum)

    def _launch_pids(self) -> set[int]:
        """The launch's live processes: every descendant of this process (the launcher process belongs
        to its launch; as a subreaper it also holds the re-parented orphans) and every process
        carrying the launch's marker; never the watchdog."""
        if self.exclusive:
            pids = procs.descendants(os.getpid())
        else:
            own = [proc.pid for proc in self.procs]
            pids = procs.descendants(*own) | {pid for pid in own if procs.alive(pid)}
        pids |= procs.marked(self.launch_id)
        if self.watchdog is not None:
            pids.discard(self.watchdog.pid)
        return pids

    def kill_all(self) -> None:
        """SIGKILL every process of the launch, until none is left (new ones may appear meanwhile)."""
        own = {proc.pid for proc in self.procs}
        for _ in range(100):
            pids = self._launch_pids()
            if not pids:
                return
            procs.kill(pids)
            time.sleep(0.01)
            procs.reap(pids - own)

    def stop(self, signum: int, kill_after: float) -> None:
        """Forward ``signum`` once to every group; everything left gets SIGKILL ``kill_after`` s later."""
        if self.stopping:
            return
        self.stopping = True
        self.stop_signal = signum
        self.kill_at = time.monotonic() + kill_after
        self._signal_groups(signum)

    def halt(self, reason: str) -> None:
        """Stop the launch for a reason of the caller's (a sweep's fail_fast): SIGTERM, SIGKILL after
        the grace period; its outcome is ``reason``, not a failure of its own."""
        if self.halted is None and self.signal_received is None and self.failure is None:
            self.halted = reason
        self.stop(signal.SIGTERM, self.plan.grace_period)

    def _relay(self, signum: int, _frame: object) -> None:
        """USR1 to every process of the launch, torch workers included (torchrun does not forward it)."""
        procs.kill(self._launch_pids(), signum)

    def _on_signal(self, signum: int, _frame: object) -> None:
        if self.signal_received is not None and signum == signal.SIGINT:
            self.kill_at = 0.0  # second Ctrl+C: now (done by the wait loop)
            return
        if self.signal_received is None:
            self.signal_received = signum
        self.stop(signum, self.plan.grace_period)

    # -- failures ------------------------------------------------------------------------
    def _first_failure(self, codes: list[Optional[int]]) -> Optional[Failure]:
        records = failure_mod.read_exit_records(self.log_dir) if self.plan.rank_logs or self.torchrun else []
        by_rank = {record.rank: record for record in records}
        if not self.torchrun:
            # a rank that recorded a non-zero exit has failed even while it still hangs in its exit
            # (jax.distributed's shutdown barrier waits for the other ranks at interpreter exit)
            if records:
                return records[0]
            failed = [(spec, code) for spec, code in zip(self.plan.processes, codes) if code not in (None, 0)]
            if not failed:
                return None
            spec, code = failed[0]
            return Failure(
                node=self.plan.node_rank, rank=spec.global_rank, local_rank=spec.local_rank,
                exit_code=exit_code_of(code), signal=failure_mod.signal_name(code), time=time.time(),
                source="exit status", log=str(logs.rank_log(self.log_dir, spec.global_rank)),
            )
        if self.elastic_restarts:
            if codes[0] in (None, 0):
                return None
            return records[-1] if records else self._torchrun_failure(codes[0])
        if records:
            return records[0]
        if codes[0] not in (None, 0):
            return self._torchrun_failure(codes[0])
        return None

    def _torchrun_failure(self, code: int) -> Failure:
        text = "\n".join(logs.last_lines(self.log_dir / logs.TORCHRUN_LOG, 200))
        found = failure_mod.parse_torchrun_report(text, self.plan.node_rank, self.log_dir)
        if found is not None:
            if not self.plan.rank_logs:
                found = Failure(**{**found.as_dict(), "log": str(self.log_dir / logs.TORCHRUN_LOG)})
            return found
        return Failure(
            node=self.plan.node_rank, rank=None, local_rank=None, exit_code=exit_code_of(code),
            signal=failure_mod.signal_name(code), source="exit status",
            log=str(self.log_dir / logs.TORCHRUN_LOG),
        )

    def _on_failure(self) -> None:
        kill_after = min(self.plan.grace_period, FAILURE_KILL_S)
        if self.torchrun:  # torchrun stops its workers itself (and reports); it gets the same short time
            self.stopping = True
            self.kill_at = time.monotonic() + kill_after
        else:
            self.stop(signal.SIGTERM, kill_after)

    # -- waiting --------------------------------------------------------------------------
    def _reap_orphans(self) -> None:
        if not self.exclusive:  # another launch's child might be reaped before its Popen sees it
            return
        own = {proc.pid for proc in self.procs}
        if self.watchdog is not None:
            own.add(self.watchdog.pid)
        procs.reap_zombie_children(exclude=own)

    def wait(self) -> Outcome:
        next_reap = time.monotonic() + REAP_EVERY_S
        while True:
            codes = [proc.poll() for proc in self.procs]
            if self.failure is None and self.signal_received is None and self.halted is None:
                self.failure = self._first_failure(codes)
                if self.failure is not None:
                    self._on_failure()
            if all(code is not None for code in codes):
                break
            now = time.monotonic()
            if self.kill_at is not None and now >= self.kill_at:
                self.kill_all()
                self.kill_at = now + 1.0
            if now >= next_reap:
                self._reap_orphans()
                next_reap = now + REAP_EVERY_S
            time.sleep(POLL_S)
        self.kill_all()  # descendants that outlived their process: setsid'd helpers, re-parented orphans
        return self._outcome([proc.returncode for proc in self.procs])

    def _outcome(self, codes: list[int]) -> Outcome:
        if self.failure is not None and (self.failure.rank is None or not self.torchrun):
            port = self._port_in_use()
            if port is not None:
                return Outcome(EXIT_PORT_IN_USE, f"port {port} in use", port_in_use=port)
        if self.failure is not None:
            return Outcome(self.failure.exit_code, "rank failed" if self.failure.rank is not None else "torchrun failed", self.failure)
        if self.signal_received is not None:
            name = signal.Signals(self.signal_received).name
            return Outcome(128 + self.signal_received, f"stopped by {name}")
        if self.halted is not None:
            return Outcome(128 + signal.SIGTERM, self.halted, halted=True)
        return Outcome(0, "success")

    def close(self) -> None:
        for pump in self.pumps:
            pump.join(timeout=5)
        self._flush_held()  # a traceback torchrun left unfinished
        if self.tail is not None:
            self.tail.stop()
        if self.watchdog is not None:
            self._tell_watchdog("done")
            try:
                self.watchdog.stdin.close()
                self.watchdog.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass


class Interrupts:
    """A sweep's hold on SIGINT/SIGTERM/SIGHUP, from its first job to its summary (a context
    manager). The first signal is passed to every running launch (each stops as on its own) and
    stays in ``received``: the sweep starts nothing more. A second SIGINT reaches the running
    launches too, which kill at once. Between jobs a signal is only noted."""

    def __init__(self) -> None:
        import threading

        self.received: Optional[int] = None
        self._active: list[Supervisor] = []
        self._lock = threading.RLock()  # the handler runs in the main thread, which may hold it
        self._previous: dict = {}

    def __enter__(self) -> "Interrupts":
        self._previous = {sig: signal.getsignal(sig) for sig in FORWARDED_SIGNALS}
        for sig in FORWARDED_SIGNALS:
            signal.signal(sig, self._on_signal)
        return self

    def __exit__(self, *_exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _on_signal(self, signum: int, frame: object) -> None:
        if self.received is None:
            self.received = signum
        with self._lock:
            for supervisor in list(self._active):
                supervisor._on_signal(signum, frame)

    def attach(self, supervisor: Supervisor) -> None:
        """``supervisor``'s launch is running: signals reach it (one that came already, at once)."""
        with self._lock:
            self._active.append(supervisor)
            if self.received is not None:
                supervisor._on_signal(self.received, None)

    def detach(self, supervisor: Supervisor) -> None:
        with self._lock:
            if supervisor in self._active:
                self._active.remove(supervisor)

    def running(self) -> list[Supervisor]:
        with self._lock:
            return list(self._active)


def run(
    plan: LaunchPlan, log_dir: Path, console: Optional[IO[bytes]] = None, relay_usr1: bool = True,
    interrupts: Optional[Interrupts] = None,
) -> Outcome:
    """Start the plan, supervise it to the end, print the failure summary; return the outcome.
    With ``interrupts`` (a sweep), the sweep's handler passes SIGINT/SIGTERM/SIGHUP on."""
    supervisor = Supervisor(plan, log_dir, console)
    forwarded = () if interrupts is not None else FORWARDED_SIGNALS
    previous = {sig: signal.getsignal(sig) for sig in forwarded + RELAYED_SIGNALS}
    for sig in forwarded:
        signal.signal(sig, supervisor._on_signal)
    if interrupts is not None:
        interrupts.attach(supervisor)
    for sig in RELAYED_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)  # inherited by every process started below
    try:
        supervisor.start()
        if relay_usr1:
            for sig in RELAYED_SIGNALS:
                signal.signal(sig, supervisor._relay)
        outcome = supervisor.wait()
    except BaseException:
        supervisor.kill_all()
        raise
    finally:
        if interrupts is not None:
            interrupts.detach(supervisor)
        supervisor.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return _summarised(outcome)


def _summarised(outcome: Outcome) -> Outcome:
    if outcome.failure is not None:
        text = failure_mod.summary(outcome.failure)
        outcome = replace(outcome, summary=text)
        try:
            print(f"[{PROG}] " + text, file=sys.stderr, flush=True)
        except OSError:  # the terminal is gone (SIGHUP)
            pass
    return outcome


FAIL_FAST_STOP = "stopped (sweep.fail_fast)"
SKIPPED_FAIL_FAST = "skipped (sweep.fail_fast)"
SKIPPED_INTERRUPTED = "skipped (interrupted)"


def run_many(
    jobs: "list[tuple[LaunchPlan, Path, tuple[int, ...]]]",
    lanes: "list[list[int]]",
    fail_fast: bool = False,
    on_start=None,
    on_end=None,
    interrupts: Optional[Interrupts] = None,
    on_skip=None,
) -> list[Optional[Outcome]]:
    """Run a parallel sweep: each lane (a list of job indexes) runs its jobs one after another, all
    lanes at once. A job given CPU cores runs pinned to them: its lane's thread sets its own CPU
    affinity before starting the job, and processes inherit the mask of the thread that starts
    them. A signal to the launcher stops every running job and starts no more (``interrupts``: the
    sweep's, else one held for this call); with ``fail_fast`` the first failure halts the running
    jobs (outcome ``stopped (sweep.fail_fast)``) and skips the rest. Returns each job's outcome
    (None: skipped). ``on_start(i)``, ``on_end(i, outcome)`` and ``on_skip(i, reason)`` are called
    from the lane threads, ``on_end`` in the order the jobs end."""
    import contextlib
    import threading

    outcomes: list[Optional[Outcome]] = [None] * len(jobs)
    lock = threading.Lock()
    failed = threading.Event()

    def lane(indexes: list[int]) -> None:
        for index in indexes:
            plan, log_dir, cpus = jobs[index]
            with lock:  # decided and attached at once: a failure or a signal from now on reaches it
                skip = SKIPPED_INTERRUPTED if hub.received is not None else SKIPPED_FAIL_FAST if failed.is_set() else None
                if skip is None:
                    supervisor = Supervisor(plan, log_dir, exclusive=False)
                    hub.attach(supervisor)
            if skip is not None:
                if on_skip is not None:
                    on_skip(index, skip)
                continue
            if cpus:
                os.sched_setaffinity(0, cpus)  # this thread only; the job's processes inherit it
            if on_start is not None:
                on_start(index)
            try:
                supervisor.start()
                outcome = supervisor.wait()
            except UserError as err:  # the program could not be started
                print(f"[{PROG}] job {index}: {err}", file=sys.stderr, flush=True)
                outcome = Outcome(127, "could not start")
            finally:
                hub.detach(supervisor)
                supervisor.close()
            outcomes[index] = outcome = _summarised(outcome)
            with lock:
                if outcome.exit_code != 0 and not outcome.halted and fail_fast and not failed.is_set():
                    failed.set()
                    for other in hub.running():
                        other.halt(FAIL_FAST_STOP)
                if on_end is not None:  # under the lock: the first failure is reported first
                    on_end(index, outcome)

    procs.become_subreaper()
    threads = [threading.Thread(target=lane, args=(indexes,), daemon=True) for indexes in lanes]
    with contextlib.ExitStack() as stack:
        hub = interrupts if interrupts is not None else stack.enter_context(Interrupts())
        for thread in threads:
            thread.start()
        while any(thread.is_alive() for thread in threads):
            for thread in threads:
                thread.join(timeout=POLL_S)
    return outcomes
