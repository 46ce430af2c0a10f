"""Restarts by cause, only while progress is made: the pure policy the attempt loop
(run/attempts.py) asks after each attempt. Standard library only: no I/O, no clock.

Every failure has a *class* (:func:`failure_class`): the launch's own outcome for a hang or a node,
else the cause run/postmortem/causes.py named, with the signals folded into ``killed`` (sent from
outside) and ``crash`` (the process's own fault). :data:`CLASSES` says which are retried by default
and why (docs/recovery.md shows the same table; tests/test_restarts.py checks they agree).

An attempt made *progress* (:func:`progressed`) when its ranks' heartbeats passed the iteration it
started from (the checkpoint it resumed from; the start of training for the first attempt) and the
furthest an earlier attempt from the same start reached (one that starts over and dies where the one
before it died made none), or when a new checkpoint appeared while it ran (:func:`newer_checkpoint`).
``restart.max_without_progress`` restarted attempts in a row without progress end the launch with
reason ``no progress``: a crash loop stops after one restart by default. The first attempt is never
counted: a transient failure at start-up (a rendezvous that timed out, a node that was not up yet)
gets its restart.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from .rundir import Reason

# the class of a rank that only lost a peer (run/postmortem/causes.py names it, the supervisor and
# the nodes' coordinator look past it for the cause): one name everywhere
FOLLOWER = "follower"
# class -> (retried by default, why); the order is docs/recovery.md's table
CLASSES: dict[str, tuple[bool, str]] = {
    "hang": (True, "a stalled rank (rendering hang, a collective that never completes): transient more often than not"),
    "node-lost": (True, "another node's launcher went silent (rebooted, network cut): the job itself was fine"),
    "node-failed": (True, "another node's launch failed: that node's class decided there, this node follows"),
    "nccl": (True, "NCCL reported an error (a link, a transport): the network, not the script"),
    "nccl-timeout": (True, "a collective timed out: a peer stalled or a link dropped"),
    "rendezvous": (True, "torchrun failed to meet the other nodes (a node late, a port briefly taken)"),
    "jax-init-timeout": (True, "not every JAX process reached the coordinator in time"),
    FOLLOWER: (True, "a rank lost a peer (gloo/TCPStore/JAX: connection reset) and nothing here failed first"),
    "killed": (True, "a rank killed by a signal from outside (SIGKILL with no OOM counted, SIGTERM, SIGHUP)"),
    "exception": (False, "an uncaught exception in the training script: the same code fails the same way"),
    "exit-code": (False, "the script exited non-zero by itself: it decided to stop"),
    "usage": (False, "exit code 2: a usage error (a bad argument) fails again at once"),
    "cuda-oom": (False, "the GPU ran out of memory: the same sizes run out again"),
    "oom-killed": (False, "the kernel's OOM killer ended a rank: the same sizes run out again"),
    "illegal-memory-access": (False, "a CUDA kernel fault: a bug, or the NCCL workaround is needed"),
    "crash": (False, "a fault in native code (SIGSEGV, SIGBUS, SIGABRT ...): usually a bug"),
    "torchrun": (False, "torchrun itself failed (a bad flag or value), not the script"),
    "port-in-use": (False, "a port the plan binds is taken: the same plan binds the same port"),
}
DEFAULT_ON: tuple[str, ...] = tuple(name for name, (retried, _) in CLASSES.items() if retried)
# words restart.classes takes besides the class names
DEFAULT_WORD, ALL_WORD = "default", "all"
EXTERNAL_SIGNALS = frozenset(("SIGKILL", "SIGTERM", "SIGINT", "SIGHUP"))
EXIT_USAGE = 2  # errors.EXIT_USAGE (run/ does not import the error path)
NO_PROGRESS = "no progress"  # the reason text when the launch stops for it (Reason.NO_PROGRESS)
_NUMBER = re.compile(r"(\d+)")

# outcomes that are no failure of the launch's own: never restarted
_NOT_FAILURES = frozenset(
    (Reason.SUCCEEDED, Reason.INTERRUPTED, Reason.FAIL_FAST_STOP, Reason.NOT_STARTED, Reason.LAUNCHER_KILLED)
)
_BY_REASON = {
    Reason.HANG: "hang",
    Reason.NODE_LOST: "node-lost",
    Reason.NODE_FAILED: "node-failed",
    Reason.PORT_IN_USE: "port-in-use",
}


@dataclass(frozen=True)
class Policy:
    """The ``restart`` config group: ``max`` restarts after the first attempt, for the classes in
    ``on`` (restart.classes), while no more than ``max_without_progress`` restarted attempts in a row made none."""

    max: int = 0
    on: frozenset[str] = frozenset(DEFAULT_ON)
    max_without_progress: int = 1

    @classmethod
    def of(cls, max: int, on: Iterable[str] | None, max_without_progress: int) -> Policy:
        """``on``: class names, ``default`` (the default classes) and ``all``; None: the default.

        >>> sorted(Policy.of(1, ["default", "exception"], 1).on - set(DEFAULT_ON)), len(Policy.of(1, ["all"], 1).on)
        (['exception'], 18)
        """
        return cls(max, frozenset(expand(DEFAULT_ON if on is None else on)), max_without_progress)


@dataclass(frozen=True)
class Decision:
    """What happens after an attempt: a restart, or the launch ends. ``why`` is for people. A stop
    may carry the exit code and Reason the launch ends with (``no progress``; a coordinator's word
    from another node); None: the attempt's own. ``cause``: the failure class the decision is for
    when another node's (node 0 decided: run/monitor/coordinator.cause); None: this attempt's own."""

    restart: bool
    why: str
    exit_code: int | None = None
    ended: Reason | None = None
    cause: str | None = None


def expand(on: Iterable[str]) -> set[str]:
    """restart.classes's names, ``default`` and ``all`` replaced by the classes they stand for."""
    out: set[str] = set()
    for name in on:
        out |= set(DEFAULT_ON) if name == DEFAULT_WORD else set(CLASSES) if name == ALL_WORD else {name}
    return out


def failure_class(ended: Reason, cause: str | None, exit_code: int, signal: str | None = None) -> str | None:
    """The class of an attempt's end; None when it is no failure (success, a stop the user asked for).

    >>> failure_class(Reason.HANG, None, 124), failure_class(Reason.SUCCEEDED, None, 0)
    ('hang', None)
    >>> failure_class(Reason.FAILED, "SIGKILL", 137, "SIGKILL"), failure_class(Reason.FAILED, "SIGSEGV", 139, "SIGSEGV")
    ('killed', 'crash')
    >>> failure_class(Reason.FAILED, "exit-code", 2), failure_class(Reason.FAILED, "exit-code", 3)
    ('usage', 'exit-code')
    >>> failure_class(Reason.FAILED, None, 1), failure_class(Reason.FAILED, "nccl", 1)
    ('exit-code', 'nccl')
    """
    if ended in _NOT_FAILURES:
        return None
    if ended in _BY_REASON:
        return _BY_REASON[ended]
    if cause is None:
        cause = signal or "exit-code"
    if cause.startswith("SIG"):
        return "killed" if cause in EXTERNAL_SIGNALS else "crash"
    if cause in ("exit-code", "exception") and exit_code == EXIT_USAGE:
        return "usage"
    return cause


def progressed(
    started_from: int | None, reached: int | None, new_checkpoint: bool, reached_before: int | None = None
) -> bool:
    """Whether an attempt made progress: its heartbeats passed the iteration it started from (none
    known: 0, so any iteration completed counts; a start-up beat of 0 does not) and every iteration an
    earlier attempt from the same start reached (``reached_before``: an attempt that starts over, or
    from the same checkpoint, and gets no further than the one before made none), or a new checkpoint
    appeared (:func:`newer_checkpoint`).

    >>> progressed(300, 312, False), progressed(300, 300, False)
    (True, False)
    >>> progressed(None, None, True), progressed(None, 1, False), progressed(None, 0, False)
    (True, True, False)
    >>> progressed(None, 3, False, reached_before=3), progressed(None, 4, False, reached_before=3)
    (False, True)
    """
    if new_checkpoint:
        return True
    if reached is None:
        return False
    return reached > max(started_from or 0, reached_before or 0)


def newer_checkpoint(before: tuple[str, int] | None, after: tuple[str, int] | None) -> bool:
    """Whether the newest checkpoint after an attempt (``after``: its path and modification time) is a
    new one, beside the one it started from (``before``): another file or the same one rewritten; when
    both names hold an iteration (:func:`iteration_of`), only a later iteration counts (a script that
    starts over and writes the same checkpoints again made no progress).

    >>> newer_checkpoint(None, ("c/iter_000002.ckpt", 5)), newer_checkpoint(("c/last.pt", 1), ("c/last.pt", 2))
    (True, True)
    >>> newer_checkpoint(("c/iter_000003.ckpt", 1), ("c/iter_000003.ckpt", 2)), newer_checkpoint(None, None)
    (False, False)
    >>> newer_checkpoint(("m/model_100.pt", 0), ("m/model_150.pt", 0))
    True
    """
    if after is None or after == before:
        return False
    if before is None:
        return True
    was, now = iteration_of(before[0]), iteration_of(after[0])
    return was is None or now is None or now > was


def decide(policy: Policy, attempt: int, cls: str | None, stalled: int) -> Decision:
    """The local decision after attempt ``attempt`` (0: the first) ended with class ``cls``;
    ``stalled``: restarted attempts in a row, this one included, that made no progress.

    >>> p = Policy.of(3, None, 1)
    >>> decide(p, 0, "hang", 0).restart, decide(p, 0, "exception", 0).why
    (True, 'exception is not in restart.classes')
    >>> decide(p, 3, "hang", 0).why, decide(p, 1, "hang", 1).why, decide(p, 0, None, 0).restart
    ('restart.max=3 reached', 'no progress (restart.max_without_progress=1)', False)
    >>> decide(p, 1, "hang", 1).ended
    <Reason.NO_PROGRESS: 'no_progress'>
    """
    if cls is None:
        return Decision(False, "no failure")
    if cls not in policy.on:
        return Decision(False, f"{cls} is not in restart.classes")
    if stalled >= policy.max_without_progress:
        why = f"{NO_PROGRESS} (restart.max_without_progress={policy.max_without_progress})"
        return Decision(False, why, ended=Reason.NO_PROGRESS)
    if attempt >= policy.max:
        return Decision(False, f"restart.max={policy.max} reached")
    return Decision(True, f"{cls} is retried")


def iteration_of(checkpoint: str | None) -> int | None:
    """The iteration a checkpoint file's name holds (the last number in it), None when unknown.

    >>> iteration_of("checkpoints/iter_000300.ckpt"), iteration_of("/r/model_1200.pt"), iteration_of("last.pt")
    (300, 1200, None)
    >>> iteration_of("/run7/checkpoints/agent.pt"), iteration_of(None)
    (None, None)
    """
    if not checkpoint:
        return None
    numbers = _NUMBER.findall(checkpoint.rsplit("/", 1)[-1])
    return int(numbers[-1]) if numbers else None


def restart_line(number: int, policy: Policy, cls: str, reached: int | None, resumed_from: str | None) -> str:
    """The console's line for a restart.

    ``reached``: the last iteration done (the ranks' heartbeats; the bundled trainer's "after iteration N").

    >>> restart_line(1, Policy.of(3, None, 1), "hang", 312, "checkpoints/iter_000300.ckpt")
    'restart 1 of 3 after hang, iteration 312 done; resuming from checkpoints/iter_000300.ckpt'
    >>> restart_line(2, Policy.of(3, None, 1), "nccl", None, None)
    'restart 2 of 3 after nccl before any iteration; starting over (no checkpoint)'
    """
    where = f", iteration {reached} done" if reached is not None else " before any iteration"
    how = f"resuming from {resumed_from}" if resumed_from else "starting over (no checkpoint)"
    return f"restart {number} of {policy.max} after {cls}{where}; {how}"
