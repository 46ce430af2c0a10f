"""The supervisor's answer to a scheduler's SIGTERM to every process of a step (SLURM's requeue,
scancel): torchrun found dead a moment before the launcher's own SIGTERM is one stop, not a failure
whose teardown a second signal hurries (launcher/run/supervise.py, ``Supervisor.on_signal``). The
state machine alone, in process: tests/test_slurm_launch.py requeues a real job."""

from __future__ import annotations

import signal
import time

from conftest import build
from launcher.run.postmortem.failure import Failure
from launcher.run.supervise import SCHEDULER_SIGNAL_S, Supervisor


class Group:
    """The process group's signalling, recorded (no process is started)."""

    def __init__(self) -> None:
        self.sent: list[int] = []

    def signal(self, signum: int) -> None:
        self.sent.append(signum)


def _torchrun_failed(tmp_path, seconds_ago: float) -> Supervisor:
    """A supervisor that found torchrun itself (no rank) dead ``seconds_ago`` and began its teardown."""
    sup = Supervisor(build(["launcher.nproc_per_node=2", "device=cpu", "script=/s/train.py"]), tmp_path / "logs")
    sup.group = Group()
    sup.failure = Failure(node=0, rank=None, local_rank=None, exit_code=1)
    sup.failed_at = time.time() - seconds_ago
    sup.stop(signal.SIGTERM, 5.0)  # the failure's short teardown (_on_failure)
    return sup


def test_a_sigterm_just_after_torchrun_died_is_a_stop_with_the_grace_period(tmp_path):
    sup = _torchrun_failed(tmp_path, 0.0)
    sup.on_signal(signal.SIGTERM, None)
    assert sup.failure is None and sup.signal_received == signal.SIGTERM  # exit 143, not "torchrun failed"
    assert sup.group.sent == [signal.SIGTERM, signal.SIGTERM]  # the stop's own, after the failure's
    assert sup.kill_at - time.monotonic() > sup.plan.grace_period - 5  # the ranks keep their grace


def test_a_sigterm_long_after_torchrun_died_hurries_the_failures_teardown(tmp_path):
    sup = _torchrun_failed(tmp_path, SCHEDULER_SIGNAL_S + 1)
    sup.on_signal(signal.SIGTERM, None)
    assert sup.failure is not None and sup.signal_received == signal.SIGTERM
    assert sup.group.sent == [signal.SIGTERM] and sup.kill_at == 0.0  # what is left goes now
