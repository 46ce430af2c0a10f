"""A launch's processes: start them, signal them, kill them, reap them.

Every process the launcher starts (torchrun, or one per JAX rank) runs in its own session, so a
Ctrl+C on the terminal reaches the launcher alone, and it dies with the launcher
(``PR_SET_PDEATHSIG``). The launcher is a child subreaper, so descendants whose parent died are
re-parented to it; :meth:`ProcessGroup.kill_all` kills every descendant and every process carrying
the launch's marker. A watchdog process (run/watchdog.py) does the same if the launcher itself is
SIGKILLed.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from ... import container as container_mod
from ... import plan as plan_mod
from ...errors import UserError
from ...paths import PACKAGE_PARENT  # the watchdog runs as python -S -m launcher.run.watchdog
from ...plan import LaunchPlan
from ...rundir import RunPaths, record_root
from .. import logs
from . import procs


class ProcessGroup:
    """The processes of one launch. ``exclusive``: the only launch of this process, so every
    descendant of the launcher belongs to it; a parallel sweep's launches share the launcher and own
    only their processes' trees and their marker."""

    def __init__(self, plan: LaunchPlan, launch_id: str, log_dir: Path, exclusive: bool = True) -> None:
        self.plan, self.launch_id, self.log_dir, self.exclusive = plan, launch_id, log_dir, exclusive
        self.procs: list[subprocess.Popen] = []
        self.pumps = []
        self.watchdog: subprocess.Popen | None = None

    # -- start -------------------------------------------------------------------------------
    def start(self, echo_agent: Callable[[bytes], None], pending_signal: Callable[[], int | None]) -> None:
        """Start every process of the plan. torchrun's own output goes through ``echo_agent`` (and
        to logs/torchrun.log); ``pending_signal()`` names a signal that came while starting (each
        process started after it gets it at once)."""
        procs.become_subreaper()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        base_env = {**os.environ, **self.plan.env}
        preexec = procs.die_with_parent_preexec(os.getpid())
        for spec in self.plan.processes:
            env = {**base_env, **spec.env}
            env.update(plan_mod.runtime_env(self.plan, spec, env))  # a container runtime's own (apptainer)
            argv = plan_mod.started(self.plan, spec)  # the argv the dry run shows (in a container, or not)
            # docker/podman: the secrets go on the container's stdin, not through the runtime's environment
            secrets = plan_mod.secret_channel(self.plan, spec, env)
            for name in secrets or ():
                env.pop(name, None)
            stdin = subprocess.PIPE if secrets is not None else subprocess.DEVNULL
            common = dict(env=env, start_new_session=True, preexec_fn=preexec, stdin=stdin)
            try:
                if spec.global_rank is None:  # torchrun: its own output goes to logs/torchrun.log
                    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **common)
                    log = open(self.log_dir / logs.TORCHRUN_LOG, "ab")  # noqa: SIM115 (closed by the pump)
                    self.pumps.append(logs.pump(proc.stdout, log, echo_agent))
                else:  # a JAX rank: what the interpreter prints before the wrapper runs lands in its log too
                    with open(logs.rank_log(self.log_dir, spec.global_rank), "ab") as log:
                        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, **common)
            except OSError as err:
                if self.plan.container is not None:
                    raise UserError(
                        "container.runtime",
                        self.plan.container.runtime,
                        f"cannot start {argv[0]}: {err.strerror or err}",
                        "install it, or choose another container.runtime",
                    ) from None
                raise UserError(
                    "python",
                    spec.argv[0],
                    f"cannot start it: {err.strerror or err}",
                    "set python= to an interpreter that exists, or leave it unset",
                ) from None
            if secrets is not None and proc.stdin is not None:  # one line, then EOF (a pipe holds it all)
                with contextlib.suppress(OSError):
                    proc.stdin.write((json.dumps(secrets) + "\n").encode())
                    proc.stdin.close()
            self.procs.append(proc)
            signum = pending_signal()
            if signum is not None:  # a signal came while starting
                procs.signal_group(proc.pid, signum)
        # after the children, so they get the CPU first; they die with the launcher anyway
        # (PDEATHSIG), the watchdog is for their descendants, which need longer than this to appear
        self._start_watchdog()
        for proc in self.procs:
            self._tell_watchdog(f"pgid {proc.pid}")
        for remove in self.removals():  # a container its runtime keeps after the client died: by name
            self._tell_watchdog("remove " + json.dumps(list(remove)))

    def removals(self) -> list[tuple[str, ...]]:
        """The commands that remove this launch's containers if they outlive their clients (docker,
        podman: launcher/container.py); none without a container, or where it dies with its process."""
        if self.plan.container is None:
            return []
        found = []
        for spec in self.plan.processes:
            remove = container_mod.remove_argv(self.plan.container, plan_mod.container_name(self.plan, spec))
            if remove is not None:
                found.append(remove)
        return found

    def remove_containers(self) -> None:
        """Remove this launch's containers by name (after its processes ended, or were killed)."""
        for remove in self.removals():
            procs.remove_container(remove)

    def _start_watchdog(self) -> None:
        env = dict(os.environ)  # an outer launch's marker, if any, stays: its sweep covers this watchdog
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [PACKAGE_PARENT, env.get("PYTHONPATH")]))
        # the run record next to the logs (<run_dir>/status.json), closed by the watchdog if this
        # launcher is killed; it touches only a record this process opened (record.write_killed)
        status = str(RunPaths(record_root(self.log_dir)).status)  # a restarted attempt's too
        self.watchdog = subprocess.Popen(
            [sys.executable, "-S", "-m", "launcher.run.watchdog", self.launch_id, status],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )

    def _tell_watchdog(self, line: str) -> None:
        if self.watchdog is not None and self.watchdog.stdin is not None:
            with contextlib.suppress(BrokenPipeError, ValueError):
                self.watchdog.stdin.write(line.encode() + b"\n")
                self.watchdog.stdin.flush()

    # -- observe -----------------------------------------------------------------------------
    def poll(self) -> list[int | None]:
        """Each started process's exit status (None: still running)."""
        return [proc.poll() for proc in self.procs]

    def rank_pids(self) -> dict[int, int]:
        """Global rank -> pid of each live rank process of this node: the processes the launcher
        started (JAX), or torchrun's workers: its descendants running the rank wrapper, rank from
        their RANK variable (the wrapper runs the script in its own process)."""
        found: dict[int, int] = {}
        if self.plan.container is not None:  # the processes we started are the runtime's clients
            return self._ranks_inside() if self.plan.wrapper is not None else found
        for spec, proc in zip(self.plan.processes, self.procs):
            if spec.global_rank is not None and proc.poll() is None:
                found[spec.global_rank] = proc.pid
        torchrun = [proc.pid for spec, proc in zip(self.plan.processes, self.procs) if spec.global_rank is None]
        if not torchrun or self.plan.wrapper is None:
            return found
        return {**found, **self._wrapper_ranks(procs.descendants(*torchrun), "RANK")}

    def _ranks_inside(self) -> dict[int, int]:
        """In a container the ranks are no descendants of ours (the runtime started them: conmon, the
        daemon): they are found by the launch's marker in their environment, running the wrapper."""
        jax = any(spec.global_rank is not None for spec in self.plan.processes)
        return self._wrapper_ranks(procs.marked(self.launch_id), "JAX_RANK" if jax else "RANK")

    def _wrapper_ranks(self, candidates: set[int], variable: str) -> dict[int, int]:
        found: dict[int, int] = {}
        workers = {pid for pid in candidates if self.plan.wrapper in procs.cmdline(pid)[1:3]}
        for pid in workers:
            if procs.parent(pid) in workers:  # a child that runs the wrapper too (a fork): not the rank
                continue
            rank = procs.environ(pid).get(variable, "")
            if rank.isdigit():
                found[int(rank)] = pid
        return found

    # -- signal, kill, reap ------------------------------------------------------------------
    def signal(self, signum: int) -> None:
        """``signum`` to each started process's group (that is still running)."""
        for proc in self.procs:
            if proc.poll() is None:
                procs.signal_group(proc.pid, signum)

    def relay(self, signum: int) -> None:
        """``signum`` to every process of the launch, torch workers included."""
        procs.kill(self.launch_pids(), signum)

    def launch_pids(self) -> set[int]:
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

    def kill_ranks(self) -> None:
        """SIGKILL this node's rank processes and their descendants, not torchrun (which then reports
        how its workers ended)."""
        ranks = set(self.rank_pids().values()) - {proc.pid for proc in self.procs if proc.poll() is None}
        procs.kill(ranks | procs.descendants(*ranks))

    def kill_all(self) -> None:
        """SIGKILL every process of the launch, until none is left (new ones may appear meanwhile)."""
        own = {proc.pid for proc in self.procs}
        for _ in range(100):
            pids = self.launch_pids()
            if not pids:
                return
            procs.kill(pids)
            time.sleep(0.01)
            procs.reap(pids - own)

    def reap_orphans(self) -> None:
        if not self.exclusive:  # another launch's child might be reaped before its Popen sees it
            return
        own = {proc.pid for proc in self.procs}
        if self.watchdog is not None:
            own.add(self.watchdog.pid)
        procs.reap_zombie_children(exclude=own)

    def join_pumps(self) -> None:
        """Wait until torchrun's output has reached its log."""
        for pump in self.pumps:
            pump.join(timeout=5)

    def close(self) -> None:
        """Wait for the output pumps, remove any container left behind; tell the watchdog the launch
        cleaned up after itself."""
        self.join_pumps()
        self.remove_containers()
        if self.watchdog is not None:
            self._tell_watchdog("done")
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                self.watchdog.stdin.close()
                self.watchdog.wait(timeout=5)
