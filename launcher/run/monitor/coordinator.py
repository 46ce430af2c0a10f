"""Restarts across nodes: every node restarts together, node 0 decides (docs/recovery.md, "Across
nodes"). The attempt loop of each node's launcher asks its coordinator after each attempt; on one
node that is the node's own decision (run/restarts.py), here it goes through the nodes' liveness
channel (run/monitor/liveness.py), which outlives the attempts:

- every node says how its attempt ended (``ended <attempt> <code> <verdict> <class> <text>``: its
  exit code, its own verdict from its policy, and its failure class). A failed attempt on any node
  ends the attempt on every node, as a failed node always did (node 0 names it to the others);
- node 0 waits (at most :data:`REPORT_WAIT_S`) until every node taking part said so or was lost, and
  decides with :func:`rule`: ``restart <attempt> <nodes> <class>`` or ``stop <code> <text>``, to every
  node;
- a node other than node 0 waits for that word (while node 0's attempt runs, as long as node 0's
  launcher beats; after node 0's attempt ended, at most :data:`WORD_WAIT_S`; node 0 gone: not at
  all) and follows it; without it, it stops (nobody stays on an old attempt, nobody starts one alone).

The verdict that counts is the one of the node whose attempt failed first (the *root*: the others
only followed it; their own class, ``node-failed``, says nothing of the cause), unless it only
followed a failure elsewhere itself (``follower``: its rank lost a peer): then the first node that
names a cause of its own, else a lost node (:func:`cause`). Every node's restart line and record
names that class. A node whose launcher is gone (lost: killed, powered off, cut off) cannot be
restarted by anyone here: with a fixed ``launcher.nnodes`` the launch stops (exit 125, as without
restarts); with ``MIN:MAX`` the others go on without it while at least MIN remain, and a node that
comes back joins at the next restart.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ... import restarts
from ...rundir import Reason
from . import liveness_wire as wire
from .liveness import EXIT_NODE_LOST, SOURCES, NodeLiveness

if TYPE_CHECKING:
    from ..supervise import Outcome

REPORT_WAIT_S = 60.0  # node 0: the other nodes' ends of an attempt (a teardown has its grace period)
WORD_WAIT_S = 90.0  # the others: node 0's word after its attempt ended (it waits REPORT_WAIT_S, then decides)
POLL_S = 0.05
JOIN_WAIT_S = 1.0  # before the first attempt: how long a node waits for node 0's answer to its hello

Word = wire.Restart | wire.Stop
STOPPED = "stopped by a signal while the nodes decided"


@dataclass(frozen=True)
class Verdict:
    """How one node's attempt ended, and its own policy's answer."""

    code: int
    retry: bool
    text: str
    cls: str | None = None  # its failure class (launcher/restarts.py); None: none, or not known


# classes that say a node only followed a failure elsewhere: never the cause while another is known
FOLLOWING = frozenset((restarts.FOLLOWER, "node-failed"))
Judge = Callable[[str | None], restarts.Decision]  # the local policy's answer for a class (this attempt's budget)


def _retried(cls: str | None) -> restarts.Decision:
    return restarts.Decision(True, f"{cls} is retried")


def cause(own: Verdict, root: int, reports: dict[int, Verdict], lost: set[int], judge: Judge = _retried) -> Verdict:
    """The failure every node restarts (or stops) for. The first in this order: the ``root``'s
    verdict (the node whose failure ended node 0's attempt, as node 0 saw it: 0 for its own), then
    every other failed node's in node order, whose class is a cause of its own (not
    :data:`FOLLOWING`); then a lost node (class ``node-lost``, ``judge`` says whether it is retried);
    then the root's verdict as it is. A rank that only lost its peer (``follower``: gloo's connection
    reset) fails at once, while the node it lost is found silent a node_timeout later: that node,
    not the follower, is the cause; an exception on node 1 is not retried because node 0's rank
    failed first of a reset connection.

    >>> follower = Verdict(1, True, "rank 0 failed", "follower")
    >>> exception = Verdict(1, False, "not retried", "exception")
    >>> cause(follower, 0, {1: exception}, set()).cls, cause(follower, 0, {1: follower}, {2}).cls
    ('exception', 'node-lost')
    >>> cause(follower, 0, {1: follower}, {2}).text, cause(follower, 0, {1: follower}, set()).cls
    ('node 2 lost', 'follower')
    """
    verdicts = {0: own, **reports}
    failed = [node for node in [root, *sorted(verdicts)] if node in verdicts and verdicts[node].code != 0]
    for node in failed:
        if verdicts[node].cls is not None and verdicts[node].cls not in FOLLOWING:
            return verdicts[node]
    if lost:
        names = ", ".join(f"node {node}" for node in sorted(lost))
        decision = judge("node-lost")
        return Verdict(
            EXIT_NODE_LOST, decision.restart, f"{names} lost" if decision.restart else decision.why, "node-lost"
        )
    return verdicts.get(root, own)


def rule(
    attempt: int,
    own: Verdict,
    root: int,
    reports: dict[int, Verdict],
    lost: set[int],
    present: set[int],
    nnodes: int,
    min_nodes: int | None,
    judge: Judge = _retried,
) -> Word:
    """Node 0's word after attempt ``attempt``. ``own``: node 0's verdict; ``root``: the node whose
    failure ended node 0's attempt (0: its own, or none); ``reports``: the other nodes' verdicts;
    ``lost``: nodes whose launcher is gone; ``present``: the nodes a restart would run on (node 0,
    the others still connected, those that joined); ``min_nodes``: elastic MIN (None: fixed);
    ``judge``: node 0's policy for a class (a lost node's, when no node named a cause: :func:`cause`).

    Node 1's rank crashed with a class retried: every node restarts; not retried: all stop with its
    code:

    >>> ok, crash = Verdict(0, False, "success"), Verdict(3, True, "rank 1 failed", "exit-code")
    >>> failed = Verdict(3, True, "node 1 failed", "node-failed")  # node 0's own verdict: it only followed
    >>> rule(0, failed, 1, {1: crash}, set(), {0, 1}, 2, None)
    Restart(attempt=1, nodes=2, cause='exit-code')
    >>> rule(0, failed, 1, {1: Verdict(1, False, "exception is not in restart.classes")}, set(), {0, 1}, 2, None)
    Stop(code=1, text='exception is not in restart.classes')
    >>> rule(2, ok, 0, {1: ok}, set(), {0, 1}, 2, None)
    Stop(code=0, text='success')

    A lost node: fatal with a fixed count; with MIN:MAX the others go on while MIN remain:

    >>> lost = Verdict(125, True, "node-lost is retried", "node-lost")
    >>> rule(0, lost, 1, {}, {1}, {0}, 2, None).code
    125
    >>> rule(0, lost, 1, {}, {1}, {0}, 2, 1), rule(0, lost, 2, {1: lost}, {2}, {0, 1}, 3, 2)
    (Restart(attempt=1, nodes=1, cause='node-lost'), Restart(attempt=1, nodes=2, cause='node-lost'))
    >>> rule(0, lost, 2, {}, {1, 2}, {0}, 3, 2).text
    'node 1, node 2 lost: 1 node left, launcher.nnodes=2:3 needs at least 2'

    The survivors' ranks failed first, of a reset connection; the node they lost is the cause:

    >>> reset = Verdict(1, True, "rank 0 failed", "follower")
    >>> rule(0, reset, 0, {1: reset}, {2}, {0, 1}, 3, 2)
    Restart(attempt=1, nodes=2, cause='node-lost')
    >>> rule(0, reset, 0, {}, {1}, {0}, 2, 1, lambda cls: restarts.Decision(False, f"{cls} is not in restart.classes"))
    Stop(code=125, text='node-lost is not in restart.classes')

    Node 0 succeeded but another node failed later: that node is the root:

    >>> rule(0, ok, 0, {1: crash}, set(), {0, 1}, 2, None)
    Restart(attempt=1, nodes=2, cause='exit-code')
    """
    failed = sorted(node for node, verdict in reports.items() if verdict.code != 0)
    if root == 0 and own.code == 0 and failed:
        root = failed[0]
    if own.code == 0 and not failed and not lost:
        return wire.Stop(0, "success")
    verdict = cause(own, root, reports, lost, judge)
    if not verdict.retry:
        return wire.Stop(verdict.code, verdict.text)
    if lost:
        names = ", ".join(f"node {node}" for node in sorted(lost))
        if min_nodes is None:
            why = f"{names} lost: launcher.nnodes={nnodes} is a fixed count (MIN:MAX goes on without a lost node)"
            return wire.Stop(EXIT_NODE_LOST, why)
        if len(present) < min_nodes:
            left = f"{len(present)} node{'s' if len(present) != 1 else ''} left"
            return wire.Stop(
                EXIT_NODE_LOST, f"{names} lost: {left}, launcher.nnodes={min_nodes}:{nnodes} needs at least {min_nodes}"
            )
    return wire.Restart(attempt + 1, len(present), verdict.cls)


class NodesCoordinator:
    """The attempt loop's coordinator on a multi-node launch (run/attempts.Coordinator): :meth:`decide`
    after each attempt, :meth:`join` before the first."""

    def __init__(self, channel: NodeLiveness, report_wait_s: float = REPORT_WAIT_S, word_wait_s: float = WORD_WAIT_S):
        self.channel = channel
        self.report_wait_s, self.word_wait_s = report_wait_s, word_wait_s
        self.signal: Callable[[], int | None] = lambda: None  # the stop signal received (join() is given it)

    def decide(self, attempt: int, outcome: Outcome, cls: str | None, judge: Judge) -> restarts.Decision:
        """Every node's decision after attempt ``attempt``, which ended here with class ``cls``:
        node 0's word (``judge``: this node's policy; its answer for ``cls`` is this node's own)."""
        failure = outcome.failure
        root = failure.node if failure is not None and failure.source in SOURCES and failure.node is not None else 0
        local = judge(cls)
        word = self.settle(attempt, Verdict(outcome.exit_code, local.restart, local.why, cls), root, judge)
        if isinstance(word, wire.Restart):
            nodes = f"{word.nodes} node{'s' if word.nodes != 1 else ''}"
            return restarts.Decision(True, f"every node restarts ({nodes}; node 0 decided)", cause=word.cause)
        received = self.signal()
        if received is not None and word.text == STOPPED:
            return restarts.Decision(False, STOPPED, 128 + received, Reason.INTERRUPTED)
        if not local.restart and (word.code, word.text) == (outcome.exit_code, wire.text(local.why)):
            return local  # this node's own verdict decided (its failure came first): as on one node
        changed = word.code != outcome.exit_code
        return restarts.Decision(False, word.text, word.code, outcome.ended if changed else None)

    def settle(self, attempt: int, own: Verdict, root: int = 0, judge: Judge = _retried) -> Word:
        """Attempt ``attempt`` ended here as ``own`` (``root``: the node whose failure ended it, as
        this node saw it); every node's word: node 0's. A restart begins the channel's next attempt."""
        channel = self.channel
        channel.attempt_ended(attempt, own.code, own.retry, own.cls, own.text)
        word = self._decide(attempt, own, root, judge) if channel.hub else self._follow(own)
        if isinstance(word, wire.Restart):
            channel.begin(word.attempt)
        return word

    def join(self, signal: Callable[[], int | None] = lambda: None) -> int | restarts.Decision:
        """Before the first attempt here (the attempt loop's): the attempt this node starts with,
        0 with the others. A node that joined while the others ran an attempt (node 0 said
        ``standby``: it came back after it was lost) waits for node 0's next word: the attempt it
        starts at, or a stop (a Decision: how this node's launch ends, having run nothing).
        ``signal``: the stop signal received, None before one (it ends every wait here at once)."""
        self.signal = signal
        word = self.wait_to_join(lambda: signal() is not None)
        if word is None:
            return 0
        if isinstance(word, wire.Restart):
            return word.attempt
        return restarts.Decision(False, word.text, word.code, Reason.NODE_FAILED if word.code else Reason.SUCCEEDED)

    def wait_to_join(self, stopped: Callable[[], bool] = lambda: False) -> Word | None:
        """:meth:`join`'s wait, in node 0's words (None: not standing by)."""
        channel = self.channel
        deadline = time.monotonic() + JOIN_WAIT_S  # node 0 reachable now: its answer comes at once
        while not channel.hub and not channel.standing_by() and time.monotonic() < deadline:
            if channel.watched():  # welcomed: a standby follows in the same breath
                deadline = min(deadline, time.monotonic() + 0.3)
            time.sleep(POLL_S)
        if channel.hub or not channel.standing_by():
            return None
        say_once = True
        while channel.watched() and not stopped():
            if say_once:
                say_once = False
                channel.say("the other nodes run an attempt: this node joins at their next restart")
            word = channel.word()
            if word is not None:
                if isinstance(word, wire.Restart):
                    channel.begin(word.attempt)
                return word
            time.sleep(POLL_S)
        word = channel.word()  # node 0's last word comes before its goodbye
        if isinstance(word, wire.Stop):
            return word
        why = "stopped before this node could join" if stopped() else "node 0's launcher is gone"
        return wire.Stop(EXIT_NODE_LOST, f"{why}: this node ran nothing")

    def _decide(self, attempt: int, own: Verdict, root: int, judge: Judge) -> Word:
        channel = self.channel
        deadline = time.monotonic() + self.report_wait_s
        while time.monotonic() < deadline:
            taking_part = set(channel.watched()) - channel.joining()
            if taking_part <= set(channel.reports()):
                break
            if self.signal() is not None:  # Ctrl+C: no restart; the others hear this node's goodbye
                return wire.Stop(own.code or 1, STOPPED)
            time.sleep(POLL_S)
        reports = {
            node: Verdict(said.code, said.retry, said.text, said.cls) for node, said in channel.reports().items()
        }
        lost = channel.lost_nodes()
        connected = set(channel.watched())
        late = connected - set(reports) - channel.joining()  # connected, but its attempt did not end in time
        present = {0} | (connected - late)
        nnodes, min_nodes = channel.watch.nnodes, channel.watch.min_nodes
        word = rule(attempt, own, root, reports, lost | late, present, nnodes, min_nodes, judge)
        channel.announce(word)
        return word

    def _follow(self, own: Verdict) -> Word:
        """Node 0's word. While node 0's attempt runs (its rank 0 may evaluate after the others'
        ranks ended) this node waits as long as node 0's launcher beats (silent for
        ``launcher.node_timeout``: lost); once node 0's attempt ended, at most ``word_wait_s``."""
        channel = self.channel
        while True:
            word = channel.word()
            if word is not None:
                return word
            if not channel.watched() and channel.word() is None:  # node 0 is gone (its last word came first)
                return wire.Stop(own.code or EXIT_NODE_LOST, "node 0's launcher is gone: nobody decides on a restart")
            if self.signal() is not None:
                return wire.Stop(own.code or 1, STOPPED)
            ended = channel.hub_ended_at()
            if ended is not None and time.monotonic() > ended + self.word_wait_s:
                why = f"node 0's word on a restart did not come within {self.word_wait_s:g} s of its attempt's end"
                return wire.Stop(own.code or EXIT_NODE_LOST, why)
            time.sleep(POLL_S)
