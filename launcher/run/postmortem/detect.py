"""Failure detection: which rank failed first, and how (seen through its exit record, its exit status
or torchrun's report). The supervisor asks every monitor once per poll; this is the first monitor,
the hang watchdog (run/monitor/progress.py) is another with the same :class:`Monitor` shape."""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from ...plan import LaunchPlan
from ...rundir import Source
from .. import logs
from . import failure as failure_mod
from .failure import Failure, exit_code_of

# torchrun could not bind its store's port (TCPStore: "failed to listen ... port: P ... EADDRINUSE"):
# another process took it after the preflight check; the launch ends as that check would have
PORT_IN_USE = re.compile(rb"failed to listen on any local network address\. port: (\d+),[^\n]*EADDRINUSE")
# torchrun stops its workers: after a worker failed (or a signal of its own); the report comes after
TORCHRUN_CLOSING = re.compile(rb"Sending process \d+ closing signal SIGTERM")
# the same for a JAX rank 0 whose coordinator service (gRPC) could not bind (then it segfaults)
# torchrun got a signal from outside and stops its workers (a stop, not a failure's teardown)
TORCHRUN_SIGNALLED = re.compile(rb"Received (\d+) death signal, shutting down workers")
COORDINATOR_PORT_IN_USE = re.compile(rb"Failed to add port to server: No address added [^\n]*:(\d+)'")


class Monitor(Protocol):
    def check(self, codes: Sequence[int | None]) -> Failure | None:
        """A failure that ends the launch, or None. ``codes``: each started process's exit status
        (None: still running)."""


def _max_restarts(argv: tuple[str, ...]) -> int:
    if "--max_restarts" in argv:
        value = argv[argv.index("--max_restarts") + 1]
        return int(value) if value.isdigit() else 0
    return 0


class FailureDetector:
    """The first rank that exits non-zero ends the launch."""

    def __init__(self, plan: LaunchPlan, log_dir: Path) -> None:
        self.plan, self.log_dir = plan, log_dir
        self.torchrun = plan.processes[0].name == "torchrun"
        # with --max_restarts > 0 torchrun restarts failed workers itself: only its exit ends the launch
        self.elastic_restarts = self.torchrun and _max_restarts(plan.processes[0].argv) > 0

    def check(self, codes: Sequence[int | None]) -> Failure | None:
        records = failure_mod.read_exit_records(self.log_dir) if self.plan.rank_logs or self.torchrun else []
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
                node=self.plan.node_rank,
                rank=spec.global_rank,
                local_rank=spec.local_rank,
                exit_code=exit_code_of(code),
                signal=failure_mod.signal_name(code),
                time=time.time(),
                source=Source.EXIT_STATUS,
                log=str(logs.rank_log(self.log_dir, spec.global_rank)),
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

    def port_in_use(self, failure: Failure) -> int | None:
        """The port torchrun's store (its log says EADDRINUSE) or the failed JAX rank's coordinator
        service could not bind, or None. (torchrun's output must have reached its log.)"""
        if self.torchrun:
            path, pattern = self.log_dir / logs.TORCHRUN_LOG, PORT_IN_USE
        elif failure.log:
            path, pattern = Path(failure.log), COORDINATOR_PORT_IN_USE
        else:
            return None
        match = pattern.search("\n".join(logs.last_lines(path, 200)).encode())
        return int(match.group(1)) if match else None

    def _torchrun_failure(self, code: int) -> Failure:
        text = "\n".join(logs.last_lines(self.log_dir / logs.TORCHRUN_LOG, 200))
        found = failure_mod.parse_torchrun_report(text, self.plan.node_rank, self.log_dir)
        if found is not None:
            if not self.plan.rank_logs:
                found = Failure(**{**found.as_dict(), "log": str(self.log_dir / logs.TORCHRUN_LOG)})
            return found
        return Failure(
            node=self.plan.node_rank,
            rank=None,
            local_rank=None,
            exit_code=exit_code_of(code),
            signal=failure_mod.signal_name(code),
            source=Source.EXIT_STATUS,
            log=str(self.log_dir / logs.TORCHRUN_LOG),
        )
