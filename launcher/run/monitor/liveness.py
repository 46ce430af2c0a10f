"""Nodes watch each other: the launchers of a multi-node launch keep a liveness beat with node 0's,
and a node whose launcher stops beating ends the launch on every node (docs/multinode.md).

Why a channel of the launcher's own, not torchrun's c10d store: the launcher never imports torch,
the static rendezvous and the JAX path have no such store, and a TCP connection says more than a
key in a store: a launcher that dies (SIGKILL, a crash) closes its connection at once (the kernel
sends FIN or RST), so the others know immediately, not after a timeout. Only silence (a machine
that lost power, a link down, a frozen host: nothing reaches anyone) needs the timeout.

Shape: a star. Node 0's launcher listens on ``launcher.node_port`` (default: the rendezvous port +
1) on every interface; every other node's launcher connects to node 0's host (the rendezvous
endpoint's, the static master's or the JAX coordinator's) and says hello; both ends then send a
beat every second (a quarter of the timeout when that is shorter). Each end judges the other:

- no data for ``node_timeout`` s → that node is lost ("sent no beat for N s");
- the connection closed or reset without a ``bye`` → lost at once ("closed its connection without
  a goodbye");
- ``bye 0`` → that node's launch succeeded: no longer watched;
- ``bye <code>`` → that node's launch ended otherwise (a rank failed, a hang, a signal): the launch
  ends here too, with that exit code and reason ``node failed`` (a JAX rank would otherwise wait in
  its next collective for its coordinator's own timeout; torchrun's ranks may see it first).

Node 0 tells the others which node it lost or which failed (``lost N CODE ...``), so every node
names the same node.
A node's launch that ends for any reason says ``bye`` when it closes; one told it was lost by node
0 while alive ends too. A node whose launch failed before node 0 answered its hello (its ranks failed
in their first second) connects, says hello and then ``bye <code>`` all the same. A node that
cannot reach node 0's port keeps trying (node 0 may start later) and says once that it is not
watched yet.

The wire (run/monitor/liveness_wire.py: pure encoding and decoding, tested alone): lines of ASCII
words. ``hello <GREETING> <node_rank> <nnodes>`` (to node 0); from node 0
``welcome``, ``refused <why>`` (a second node with the same node_rank, another nnodes: not watched)
or ``later`` (that node's launch already ended here: node 0 is still ending this launch while the
other node started its next, a ``-m`` sweep's next job: it tries again); ``beat``, ``bye <code>``;
``lost <node> <code> <text>`` (from node 0). A node joins when node 0 answered ``welcome``; a connection
lost before that is tried again, not a lost node.

A hang (docs/hangs.md): every node takes its own ranks' stacks before any node tears down, since
the rank that stalled is often on another node than the one that noticed, and its stack is the
evidence. The node that finds a hang says ``hang <node> <headline>`` to node 0 (node 0 itself skips
this); node 0 sends ``stacks <node> <headline>`` to every node once (the first hang it hears of), each
node takes its stacks (the first node's own detection or the relay, whichever came first) and says
``stacked``; once every node it asked said so, left, or ``STACKS_WAIT_S`` passed, node 0 sends
``teardown`` and every node ends its launch (exit code 124). A node waits for ``teardown`` at most
``STACKS_WAIT_S`` (node 0 gone: at once). :class:`HangRelay` holds those rules, pure (testable
alone); :class:`NodeLiveness` carries its lines (node 0: the hub; the others: members).
"""

from __future__ import annotations

import errno
import selectors
import socket
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from ...addresses import Endpoint
from ...errors import UserError
from ...names import PROG
from ...plan import NodeWatch
from ...rundir import Source
from ..postmortem.failure import Failure
from . import liveness_wire as wire
from .liveness_wire import GREETING

EXIT_NODE_LOST = 125
REASON = "node lost"
SOURCE = Source.NODE_LIVENESS  # Failure.source of a lost node
FAILED_REASON = "node failed"
FAILED_SOURCE = Source.NODE_FAILED  # Failure.source of a node whose launch failed (its exit code is the launch's)
SOURCES = (SOURCE, FAILED_SOURCE)
BEAT_EVERY_S = 1.0
BEATS_PER_S = 256  # node 0's beats a second (each way) at most, beyond which the beats are spaced out
CONNECT_TIMEOUT_S = 2.0
RETRY_S = 0.5
BATCH_FROM = 32  # (node 0) with more nodes than this, their frames are read in batches ...
BATCH_S = 0.02  # ... this far apart
SWEEP_S = 0.25  # how often a node looks for a silent one (a lost node is known within node_timeout + this)
GOODBYE_WAIT_S = 1.0  # at the end, how long to wait for the other ends to close after our bye
UNREACHABLE_NOTICE_S = 30.0  # a node that cannot reach node 0's port this long says so, once
MAX_STRANGERS = 64  # (node 0) connections that have not said hello yet, kept at most (the oldest is closed)
ACCEPTS_AT_ONCE = MAX_STRANGERS // 2  # (node 0) connections taken per wake at most (before their hellos)
HANG_SOURCE = Source.NODE_HANG  # Failure.source of a hang another node found: take this node's stacks
EXIT_HANG = 124  # the hang's exit code (run/monitor/progress.py's; this module imports no monitor)
STACKS_WAIT_S = 20.0  # on a hang, how long node 0 waits for every node's stacks (py-spy's 10 s + margin)
BEAT = wire.simple("beat")


@dataclass
class _Peer:
    sock: socket.socket
    address: str
    last_seen: float
    node: int | None = None  # known from its hello (node 0's side); 0 on the other nodes' side
    frames: wire.Frames = field(default_factory=wire.Frames)
    welcomed: bool = False  # (the other nodes' side) node 0 answered the hello


@dataclass(frozen=True)
class Lost:
    node: int
    text: str  # "node 1 (10.0.0.2) lost: its launcher sent no beat for 30 s (launcher.node_timeout)"
    time: float
    code: int = EXIT_NODE_LOST  # another node's exit code: that node failed, not lost


def _recv(peer: _Peer) -> bytes | None:
    """What ``peer`` sent: None when nothing is there yet, ``b""`` when its connection closed or broke."""
    try:
        return peer.sock.recv(4096)
    except BlockingIOError:
        return None
    except OSError:
        return b""


def beat_interval(timeout: float, nnodes: int) -> float:
    """Seconds between two beats: every second (a quarter of ``timeout`` when that is shorter); with
    more than :data:`BEATS_PER_S` nodes, further apart, so that node 0 sends and hears about
    :data:`BEATS_PER_S` beats a second whatever the count, up to a quarter of ``timeout``. Silence
    is found as soon (``timeout`` after the last beat: a beat every quarter leaves room for three
    late ones); only node 0's CPU changes (docs/multinode.md, "How many nodes").

    >>> beat_interval(30, 2), beat_interval(2, 2), beat_interval(30, 1024), beat_interval(5, 1024)
    (1.0, 0.5, 4.0, 1.25)
    """
    return min(timeout / 4, max(BEAT_EVERY_S, nnodes / BEATS_PER_S))


def _count(nnodes: int, min_nodes: int | None) -> str:
    return str(nnodes) if min_nodes is None else f"{min_nodes}:{nnodes}"


def _display(address: str) -> str:
    return address[7:] if address.startswith("::ffff:") else address


class NodeLiveness:
    """The liveness channel of this node's launcher, and the monitor (detect.Monitor) that ends the
    launch when another node is lost. ``start`` before the launch's processes start (node 0 binds
    its port: a port taken since the preflight check is the same user error), ``close`` after they
    ended (says goodbye)."""

    def __init__(self, watch: NodeWatch, err: object = None) -> None:
        self.watch = watch
        self.hub = watch.node_rank == 0
        self.interval = beat_interval(watch.timeout, watch.nnodes)
        self.sweep_every = min(SWEEP_S, self.interval)  # how often the silent nodes are looked for
        self.err = err if err is not None else sys.stderr
        self._lock = threading.Lock()
        self._lost: Lost | None = None
        self._notices: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._listener: socket.socket | None = None
        self._selector = selectors.DefaultSelector()
        self._peers: dict[socket.socket, _Peer] = {}
        self._done = False  # (not node 0) node 0 said goodbye or refused this node: stop trying
        self._ended: set[int] = set()  # (node 0) the nodes that said goodbye
        self._next_connect = 0.0  # (not node 0) when to try to reach node 0 again
        # close() wakes the thread through this pair (its select returns at once)
        self._wake_r, self._wake_w = socket.socketpair()
        self._exit_code = 0  # what this node's goodbye says (close())
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        # a hang (the module's docstring): the relay's state, kept by the thread
        self._relay = HangRelay(watch.node_rank, self.hub)
        self._hang_mine = False  # this node found it (its own monitor has the failure)
        self._outbox: list[str] = []  # the supervisor's words ("found <headline>", "taken"), for the thread
        # restarts (run/monitor/coordinator.py): the channel outlives an attempt; the loop's words for the thread
        self.attempt = 0
        self._posts: list[bytes] = []  # frames to every node watched (ended, restart, stop), sent by the thread
        self._reports: dict[int, wire.Ended] = {}  # (node 0) each node's end of this attempt, as it said
        self._word: wire.Restart | wire.Stop | None = None  # (not node 0) node 0's word after this attempt
        self._standing_by = False  # (not node 0) joined while the others ran an attempt: joins the next
        self._hub_ended: float | None = None  # (not node 0) when node 0 said its attempt ended (monotonic)
        self._standby: set[int] = set()  # (node 0) the nodes that joined during this attempt (elastic)
        self._gone: set[int] = set()  # (node 0) the nodes lost during this attempt

    # -- the monitor ----------------------------------------------------------------------------
    def check(self, codes: Sequence[int | None]) -> Failure | None:
        for line in self._take_notices():
            self._print(line)
        lost = self._lost
        hang = self._relay.hang
        if lost is None and hang is not None and not self._hang_mine:
            return Failure(
                node=hang[0],
                rank=None,
                local_rank=None,
                exit_code=EXIT_HANG,
                exception=hang[1],
                time=time.time(),
                source=HANG_SOURCE,
            )
        if lost is None:
            return None
        return Failure(
            node=lost.node,
            rank=None,
            local_rank=None,
            exit_code=lost.code,
            exception=lost.text,
            time=lost.time,
            source=SOURCE if lost.code == EXIT_NODE_LOST else FAILED_SOURCE,
        )

    def watched(self) -> list[int]:
        """The nodes this one watches now: node 0, those that said hello; the others, node 0 once it
        answered."""
        peers = list(self._peers.values())
        return sorted(peer.node for peer in peers if self._watches(peer))  # type: ignore[misc]

    # -- a hang: every node's stacks before any teardown -------------------------------------------
    def report_hang(self, headline: str) -> None:
        """This node found a hang (about to take its stacks): every other node takes its own too."""
        with self._lock:
            self._hang_mine = self._hang_mine or self._relay.hang is None
            self._outbox.append(f"found {headline}")
        self._wake()

    def stacks_taken(self) -> None:
        """This node's stacks are saved (after a hang of its own or one relayed)."""
        with self._lock:
            self._outbox.append("taken")
        self._wake()

    def teardown_allowed(self) -> bool:
        """Every node has its stacks, or the wait is over (node 0 gone, ``STACKS_WAIT_S``, closed)."""
        return self._relay.teardown or self._stop.is_set() or self._thread is None or not self._thread.is_alive()

    # -- attempts: the channel outlives one (run/monitor/coordinator.py) -----------------------------
    def attempt_ended(self, attempt: int, code: int, retry: bool, cls: str | None, why: str) -> None:
        """This node's attempt ``attempt`` ended with ``code``; ``retry``: its own verdict; ``cls``:
        its failure class. Node 0 hears it (the others, from node 0: a failed attempt there ends theirs)."""
        self._post(wire.ended(attempt, code, retry, cls, why))

    def announce(self, word: wire.Restart | wire.Stop) -> None:
        """(node 0) Every node watched hears node 0's word after this attempt."""
        if isinstance(word, wire.Restart):
            self._post(wire.restart(word.attempt, word.nodes, word.cause))
        else:
            self._post(wire.stop(word.code, word.text))

    def reports(self) -> dict[int, wire.Ended]:
        """(node 0) What each node said of this attempt's end so far."""
        with self._lock:
            return dict(self._reports)

    def word(self) -> wire.Restart | wire.Stop | None:
        """(not node 0) Node 0's word after this attempt, None until it came."""
        return self._word

    def hub_ended_at(self) -> float | None:
        """(not node 0) When node 0 said its own attempt ended (``time.monotonic()``), None before."""
        return self._hub_ended

    def standing_by(self) -> bool:
        """(not node 0) Node 0 answered that the others run an attempt: this node joins the next."""
        return self._standing_by

    def lost_nodes(self) -> set[int]:
        """(node 0) The nodes lost during this attempt (their launcher gone or silent)."""
        with self._lock:
            return set(self._gone)

    def joining(self) -> set[int]:
        """(node 0) The nodes that joined during this attempt and take part from the next one."""
        with self._lock:
            return set(self._standby)

    def begin(self, attempt: int) -> None:
        """Attempt ``attempt`` starts: what the previous one found is forgotten (a lost node stays
        lost); the nodes that stood by take part."""
        with self._lock:
            self.attempt = attempt
            self._lost = None
            self._reports = {}
            self._word = None
            self._hub_ended = None
            self._standing_by = False
            self._standby = set()
            self._gone = set()  # those lost before are not connected: they are not waited for
            self._relay = HangRelay(self.watch.node_rank, self.hub)
            self._hang_mine = False
            self._outbox = []
            if not self.hub and self._peers:
                self._done = False

    def say(self, line: str) -> None:
        """A line of the launcher's own, on its error stream (between attempts: no supervisor prints)."""
        self._print(line)

    def _post(self, frame: bytes) -> None:
        with self._lock:
            self._posts.append(frame)
        self._wake()

    def _send_posts(self) -> None:
        """(the thread) The loop's frames, to every node watched."""
        with self._lock:
            posts, self._posts = self._posts, []
        for frame in posts:
            for peer in list(self._peers.values()):
                if self._watches(peer):
                    self._send(peer, frame)

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass

    def _relay_turn(self, words: list[str] | None = None, sender: int | None = None) -> None:
        """(the thread) The supervisor's words, then ``words`` heard from ``sender``, then the relay's
        own deadline: send what the relay says to send."""
        with self._lock:
            said, self._outbox = self._outbox, []
        now = time.monotonic()
        connected = {peer.node for peer in self._peers.values() if self._watches(peer)}
        out: list[tuple[str, str]] = []
        for what in said:
            if what.startswith("found "):
                out += self._relay.found(what.removeprefix("found "), now, connected)
            else:
                out += self._relay.taken(now, connected)
        if words is not None:
            out += self._relay.heard(sender, words, now, connected)
        out += self._relay.settle(now, connected, joined=bool(connected))
        for _to, line in out:  # node 0 sends to every node, the others to node 0: their one peer
            for peer in list(self._peers.values()):
                if self._watches(peer):
                    self._send(peer, wire.frame(line))

    # -- start and close ------------------------------------------------------------------------
    def start(self) -> None:
        if self.hub:
            self._listener = self._listen()
            self._listener.setblocking(False)
            self._selector.register(self._listener, selectors.EVENT_READ)
        self._thread = threading.Thread(target=self._run, name="node liveness", daemon=True)
        self._thread.start()

    def close(self, exit_code: int = 0) -> None:
        """Say goodbye to every node still connected (with this node's exit code) and stop."""
        if self._stop.is_set():
            return
        self._exit_code = exit_code
        self._stop.set()
        self._wake()
        if self._thread is not None:
            self._thread.join(CONNECT_TIMEOUT_S + 2 * GOODBYE_WAIT_S + 1)
        else:
            self._goodbye()
        self._wake_w.close()
        for line in self._take_notices():
            self._print(line)

    def _listen(self) -> socket.socket:
        port = self.watch.port
        attempts = [socket.AF_INET6, socket.AF_INET] if socket.has_dualstack_ipv6() else [socket.AF_INET]
        for family in attempts:
            try:
                # every node connects at once: a queue for each (the default, 128, drops the rest's SYN)
                backlog = max(128, min(self.watch.nnodes, 4096))
                if family == socket.AF_INET6:
                    return socket.create_server(("", port), family=family, dualstack_ipv6=True, backlog=backlog)
                return socket.create_server(("", port), family=family, backlog=backlog)
            except OSError as err:
                if err.errno == errno.EADDRINUSE:
                    raise UserError(
                        "launcher.node_port",
                        self.watch.port_value,
                        f"port {port} is already in use on this host",
                        "choose a free port, or stop what holds it; ss -ltnp names it",
                    ) from None
                if family == attempts[-1]:
                    raise
        raise AssertionError("unreachable")

    # -- the thread -----------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._loop()
        except Exception as err:  # noqa: BLE001 (the launch goes on unwatched; say so)
            self._notice(f"nodes are no longer watched: the liveness channel failed ({err!r})")
        finally:
            self._goodbye()

    def _loop(self) -> None:
        next_beat = next_sweep = last_select = time.monotonic()
        unreachable_since: float | None = None
        said_unreachable = False
        while not self._stop.is_set():
            now = time.monotonic()
            if not self.hub and not self._peers and not self._done and now >= self._next_connect:
                error = self._connect()
                if error is None:
                    unreachable_since = None
                else:
                    self._next_connect = now + RETRY_S
                    unreachable_since = now if unreachable_since is None else unreachable_since
                    if not said_unreachable and now - unreachable_since >= UNREACHABLE_NOTICE_S:
                        said_unreachable = True
                        where = Endpoint(self.watch.host, self.watch.port)
                        self._notice(
                            f"node 0's launcher is not reachable at {where} yet ({error}): this node is not watched "
                            "until it is; launcher.node_port must be open between the nodes"
                        )
            now = time.monotonic()
            timeout = max(0.0, min(next_beat, next_sweep) - now)
            if self._relay.hang is not None and not self._relay.teardown:
                timeout = min(timeout, 0.1)  # the wait for every node's stacks has a deadline
            if not self.hub and not self._peers and not self._done:
                timeout = min(timeout, max(0.0, self._next_connect - now))
            if self.hub and len(self._peers) > BATCH_FROM:
                # many nodes: their frames are taken in batches, BATCH_S apart at most, rather than
                # one wake for each (node 0's CPU at a thousand nodes; a frame waits BATCH_S at most)
                pause = last_select + BATCH_S - time.monotonic()
                if pause > 0 and self._stop.wait(pause):
                    break
                timeout = max(0.0, timeout - max(0.0, pause))
            last_select = time.monotonic()
            for key, _ in self._selector.select(timeout):
                if key.fileobj is self._wake_r:
                    try:
                        self._wake_r.recv(4096)
                    except OSError:
                        pass
                    continue
                if key.fileobj is self._listener:
                    self._accept()
                else:
                    self._read(self._peers.get(key.fileobj))  # type: ignore[arg-type]
            if self._outbox or (self._relay.hang is not None and not self._relay.teardown):
                self._relay_turn()  # (each costs a pass over every node: only while the relay has work)
            if self._posts:
                self._send_posts()
            now = time.monotonic()
            if now >= next_beat:
                for peer in list(self._peers.values()):
                    if peer.node is not None:
                        self._send(peer, BEAT)
                next_beat = now + self.interval
            if now < next_sweep:
                continue
            # silence is looked for every SWEEP_S, not at every frame: node 0 of a thousand nodes
            # wakes a thousand times a second, and a pass over every node each time was its CPU
            next_sweep = now + self.sweep_every
            for peer in list(self._peers.values()):
                if now - peer.last_seen > self.watch.timeout:
                    self._drop(peer)
                    if self._watches(peer):
                        self._declare(
                            peer.node,
                            f"its launcher sent no beat for {self.watch.timeout:g} s (launcher.node_timeout)",
                            peer.address,
                            gone=True,
                        )

    def _connect(self) -> str | None:
        """One attempt to reach node 0's launcher (not node 0): None when connected, else why not."""
        try:
            sock = socket.create_connection((self.watch.host, self.watch.port), timeout=CONNECT_TIMEOUT_S)
        except OSError as err:
            return err.strerror or str(err)
        sock.setblocking(False)
        peer = _Peer(sock, self.watch.host, time.monotonic(), node=0)
        self._peers[sock] = peer
        self._selector.register(sock, selectors.EVENT_READ)
        self._send(peer, wire.hello(self.watch.node_rank, self.watch.nnodes, self.watch.min_nodes))
        return None

    def _accept(self) -> None:
        """Every connection waiting (a thousand nodes connect at once: not one per wake)."""
        assert self._listener is not None
        for _ in range(ACCEPTS_AT_ONCE):
            try:
                sock, address = self._listener.accept()
            except OSError:  # none left (BlockingIOError), or it failed
                return
            self._accepted(sock, address)

    def _accepted(self, sock: socket.socket, address: tuple) -> None:
        sock.setblocking(False)
        strangers = [peer for peer in self._peers.values() if peer.node is None]
        if len(strangers) >= MAX_STRANGERS:  # each holds a file descriptor: a flood must not exhaust them
            self._drop(min(strangers, key=lambda peer: peer.last_seen))
        self._peers[sock] = _Peer(sock, _display(address[0]), time.monotonic())
        self._selector.register(sock, selectors.EVENT_READ)

    def _read(self, peer: _Peer | None) -> None:
        """Take what ``peer`` sent."""
        if peer is None or (data := _recv(peer)) is None:
            return
        if not data:
            self._closed(peer)
            return
        peer.last_seen = time.monotonic()
        for line in peer.frames.feed(data):
            if peer.sock not in self._peers:
                return
            self._handle(peer, wire.decode(line))
        if peer.frames.too_long:  # not this protocol
            self._drop(peer)

    def _handle(self, peer: _Peer, message: wire.Message | None) -> None:
        if message is None or message == wire.Simple("beat"):
            return
        bye = isinstance(message, wire.Bye) or (isinstance(message, wire.Malformed) and message.word == "bye")
        if bye:  # that node's launch ended: no longer watched (node 0's: nobody is)
            watched = self._watches(peer)
            self._drop(peer)
            code = message.code if isinstance(message, wire.Bye) else None
            if watched and isinstance(message, wire.Malformed):  # an exit code is 0..255: not this protocol's bye
                why = f"its launcher said a goodbye no launcher sends ({message.line!r})"
                self._declare(peer.node, why, peer.address, gone=True)  # type: ignore[arg-type]
                return
            if watched and code != 0:  # it failed (or was stopped): so does the launch here
                why = f"its launch ended with exit code {code}"
                self._declare(peer.node, why, peer.address, code)  # type: ignore[arg-type]
            if self.hub and peer.node is not None:
                self._ended.add(peer.node)
            # (a node 0 that ends before it answered this node's hello: a launch this one is not part of)
            self._done = not self.hub and peer.welcomed
        elif self.hub:
            self._hub_heard(peer, message)
        else:
            self._member_heard(peer, message)

    def _hub_heard(self, peer: _Peer, message: wire.Message) -> None:
        """(node 0) A line from another node's launcher."""
        hello = isinstance(message, wire.Hello) or (isinstance(message, wire.Malformed) and message.word == "hello")
        if hello and peer.node is None:
            self._hello(peer, message)  # type: ignore[arg-type]
        elif isinstance(message, wire.Relay) and peer.node is not None:
            self._relay_turn(list(message.words), peer.node)
        elif isinstance(message, wire.Ended) and peer.node is not None and message.attempt == self.attempt:
            with self._lock:
                self._reports[peer.node] = message
            if message.code != 0:  # its attempt failed: so does this one, everywhere
                why = f"its attempt {message.attempt} ended with exit code {message.code}"
                self._declare(peer.node, why, peer.address, message.code)

    def _member_heard(self, peer: _Peer, message: wire.Message) -> None:
        """(not node 0) A line from node 0's launcher."""
        if message == wire.Simple("welcome"):
            peer.welcomed = True
        elif message == wire.Simple("later"):  # a launch of node 0's this node's launch is not part of: try again
            self._drop(peer)
        elif isinstance(message, wire.Refused):
            self._notice(f"node 0's launcher refused this node ({message.why}): nodes are not watched")
            self._drop(peer)
            self._done = True
        elif isinstance(message, wire.Relay) and peer.welcomed:
            self._relay_turn(list(message.words), 0)
        elif isinstance(message, wire.LostNode):
            self._declare(message.node, message.text + " (seen by node 0)", None, message.code)
        elif message == wire.Simple("standby") and peer.welcomed:
            self._standing_by = True
        elif isinstance(message, (wire.Restart, wire.Stop)) and peer.welcomed:
            self._word = message
        elif isinstance(message, wire.Ended) and peer.welcomed and message.attempt == self.attempt:
            self._hub_ended = time.monotonic()
            if message.code != 0:  # node 0's attempt failed: this one ends too
                why = f"its attempt {message.attempt} ended with exit code {message.code}"
                self._declare(0, why, peer.address, message.code)

    def _hello(self, peer: _Peer, message: wire.Hello | wire.Malformed) -> None:
        nnodes = self.watch.nnodes
        why = None
        if isinstance(message, wire.Malformed):
            why = f"not a {GREETING} hello"
        elif (message.nnodes, message.min_nodes) != (nnodes, self.watch.min_nodes):
            there, here = _count(message.nnodes, message.min_nodes), _count(nnodes, self.watch.min_nodes)
            why = f"launcher.nnodes={there} there, {here} on node 0"
        elif not 1 <= message.node < nnodes:
            why = f"launcher.node_rank={message.node}: node 0 expects 1..{nnodes - 1}"
        elif any(other.node == message.node for other in self._peers.values()):
            why = f"node {message.node} is connected already: give every node its own launcher.node_rank"
        elif message.node in self._ended:
            # that node's launch ended here already: this is its next one (a -m sweep's next job)
            # while this launch of node 0's is still ending; it joins node 0's next launch
            self._send(peer, wire.simple("later"))
            self._drop(peer)
            return
        if why is not None:
            self._send(peer, wire.refused(why))
            self._drop(peer)
            return
        peer.node = message.node
        self._send(peer, wire.simple("welcome"))
        if self.attempt > 0 or message.node in self._gone:  # the others run an attempt: it joins the next
            with self._lock:
                self._standby.add(message.node)
                self._gone.discard(message.node)
            self._send(peer, wire.simple("standby"))

    def _watches(self, peer: _Peer) -> bool:
        """Whether ``peer`` is a node watched: on node 0, one that said hello; on the others, node 0
        once it answered (until then this node only tries to join: a connection lost then is retried)."""
        return peer.node is not None and (self.hub or peer.welcomed)

    def _closed(self, peer: _Peer) -> None:
        self._drop(peer)
        if self._watches(peer):
            self._declare(
                peer.node,
                "its launcher closed its connection without a goodbye (killed, or its machine went down)",
                peer.address,
                gone=True,
            )

    def _declare(
        self, node: int, why: str, address: str | None, code: int = EXIT_NODE_LOST, gone: bool = False
    ) -> None:
        """The launch (this attempt) ends: ``node`` was lost (``gone``: its launcher is gone, no
        restart brings it back) or failed with ``code``."""
        with self._lock:
            if gone and self.hub:
                self._gone.add(node)
            if self._lost is not None:
                return
            how = "lost" if code == EXIT_NODE_LOST else "failed"
            text = why if address is None else f"node {node} ({address}) {how}: {why}"
            self._lost = Lost(node, text, time.time(), code)
        self._done = True  # the launch ends: no new connection to node 0
        if self.hub:  # every other node stops too, naming the same node (one standing by runs nothing)
            for peer in list(self._peers.values()):
                if peer.node is not None and peer.node not in self._standby:
                    self._send(peer, wire.lost(node, code, text))

    def _send(self, peer: _Peer, data: bytes) -> None:
        try:
            peer.sock.send(data)
        except BlockingIOError:  # its buffer is full: it does not read; its silence will tell
            pass
        except OSError:
            self._closed(peer)

    def _drop(self, peer: _Peer) -> None:
        if self._peers.pop(peer.sock, None) is None:
            return
        self._next_connect = time.monotonic() + RETRY_S
        try:
            self._selector.unregister(peer.sock)
        except (KeyError, ValueError):
            pass
        peer.sock.close()

    def _join_to_say_it_failed(self) -> None:
        """(not node 0) A launch that failed before node 0 answered this node's hello (its ranks
        failed within a second, before the first connection or while node 0 was starting) still
        tells node 0: connect if not connected, say hello, wait briefly for the welcome; the ``bye
        <code>`` that follows ends node 0's launch as it does for any failed node. Without it node
        0 waited: a JAX node until its coordinator's timeout."""
        if self.hub or self._exit_code == 0 or self._done or self._welcomed():
            return
        if not self._peers and self._connect() is not None:
            return  # node 0 is not listening: nothing to tell
        deadline = time.monotonic() + GOODBYE_WAIT_S
        while self._peers and not self._done and not self._welcomed() and time.monotonic() < deadline:
            for key, _ in self._selector.select(max(0.0, deadline - time.monotonic())):
                self._read(self._peers.get(key.fileobj))  # type: ignore[arg-type]

    def _welcomed(self) -> bool:
        return any(peer.welcomed for peer in self._peers.values())

    def _goodbye(self) -> None:
        """``bye`` to every node still connected, then wait (briefly) for each to close its end, so
        that no ``bye`` is lost to a reset (closing a socket with unread data sends RST)."""
        self._selector.unregister(self._wake_r)
        if self._listener is not None:
            self._selector.unregister(self._listener)
            self._listener.close()
            self._listener = None
        self._join_to_say_it_failed()
        self._send_posts()  # node 0's last word (stop) before its goodbye: the loop closes right after it
        # a failed node's hello node 0 has not answered yet (node 0 busy): node 0 reads a connection's
        # lines in order, so the bye after the hello is still that node's goodbye (refused or "later":
        # node 0 drops the connection at the hello and never reads the bye)
        telling = not self.hub and self._exit_code != 0 and not self._done
        for peer in list(self._peers.values()):
            if not (self._watches(peer) or (telling and peer.node == 0)):
                self._drop(peer)
                continue
            try:
                peer.sock.send(wire.bye(self._exit_code))
                peer.sock.shutdown(socket.SHUT_WR)
            except OSError:
                self._drop(peer)
        deadline = time.monotonic() + GOODBYE_WAIT_S
        while self._peers and time.monotonic() < deadline:
            for key, _ in self._selector.select(max(0.0, deadline - time.monotonic())):
                peer = self._peers.get(key.fileobj)  # type: ignore[arg-type]
                if peer is not None and _recv(peer) == b"":  # what it still sent is not read: we said bye
                    self._drop(peer)
        for peer in list(self._peers.values()):
            self._drop(peer)
        self._wake_r.close()
        self._selector.close()

    # -- the launcher's own lines -----------------------------------------------------------------
    def _notice(self, line: str) -> None:
        with self._lock:
            self._notices.append(line)

    def _take_notices(self) -> list[str]:
        with self._lock:
            lines, self._notices = self._notices, []
        return lines

    def _print(self, line: str) -> None:
        try:
            print(f"[{PROG}] {line}", file=self.err, flush=True)  # type: ignore[call-overload]
        except (OSError, ValueError):  # the terminal is gone
            pass


class HangRelay:
    """One node's part in a hang across nodes (the module's docstring), pure: no socket, no clock
    (``now`` is passed in), no thread. Each call returns the lines to send, as ``(to, line)``: ``to``
    is ``"node 0"`` (the other nodes' one peer) or ``"every node"`` (node 0's peers); ``connected``:
    the nodes this one watches now.

    Node 2 finds a hang; node 0 asks nodes 1 and 2; only when both have their stacks (and node 0
    its own) does node 0 say ``teardown``:

    >>> hub, two = HangRelay(0, hub=True, wait_s=20), HangRelay(2, hub=False, wait_s=20)
    >>> two.found("HANG on node 2: no progress from rank 5", 0.0, {0})
    [('node 0', 'hang 2 HANG on node 2: no progress from rank 5')]
    >>> hub.heard(2, "hang 2 HANG on node 2: no progress from rank 5".split(" "), 0.1, {1, 2})
    [('every node', 'stacks 2 HANG on node 2: no progress from rank 5')]
    >>> hub.hang, two.taken(1.0, {0}), hub.heard(2, ["stacked"], 1.1, {1, 2}), hub.taken(1.2, {1, 2})
    ((2, 'HANG on node 2: no progress from rank 5'), [('node 0', 'stacked')], [], [])
    >>> hub.heard(1, ["stacked"], 1.5, {1, 2}), hub.teardown
    ([('every node', 'teardown')], True)
    >>> two.heard(0, ["teardown"], 1.6, {0}), two.teardown
    ([], True)

    A node that left is not waited for; nobody waits beyond ``wait_s``; a node that is not joined
    (node 0 gone) does not wait:

    >>> hub = HangRelay(0, hub=True, wait_s=20)
    >>> hub.found("HANG on node 0: ...", 0.0, {1, 2}), hub.taken(0.5, {1, 2}), hub.settle(0.6, {1}, True)
    ([('every node', 'stacks 0 HANG on node 0: ...')], [], [])
    >>> hub.settle(20.1, {1}, True)
    [('every node', 'teardown')]
    >>> one = HangRelay(1, hub=False, wait_s=20)
    >>> one.heard(0, ["stacks", "0", "HANG"], 0.0, {0}), one.hang, one.settle(0.1, set(), False), one.teardown
    ([], (0, 'HANG'), [], True)
    """

    WORDS = wire.RELAY_WORDS
    HUB, EVERY = "node 0", "every node"

    def __init__(self, node: int, hub: bool, wait_s: float | None = None) -> None:
        self.node, self.hub = node, hub
        self.wait_s = STACKS_WAIT_S if wait_s is None else wait_s
        self.hang: tuple[int, str] | None = None  # (the node that found it, its headline)
        self.teardown = False  # every node has its stacks (or the wait is over)
        self._asked: set[int] = set()  # (node 0) the nodes told to take their stacks
        self._stacked: set[int] = set()  # (node 0) the nodes whose stacks are taken
        self._own = False  # this node's stacks are taken
        self._deadline: float | None = None

    def found(self, headline: str, now: float, connected: set[int]) -> list[tuple[str, str]]:
        """This node found a hang."""
        if self.hang is None:
            self.hang = (self.node, headline)
        if self.hub:
            return self._ask(self.node, headline, now, connected)
        self._deadline = now + self.wait_s if self._deadline is None else self._deadline
        return [(self.HUB, f"hang {self.node} {wire.text(headline)}")]

    def taken(self, now: float, connected: set[int]) -> list[tuple[str, str]]:
        """This node's stacks are saved."""
        self._own = True
        if not self.hub:
            return [(self.HUB, "stacked")]
        return self.settle(now, connected, True)

    def heard(self, sender: int, words: list[str], now: float, connected: set[int]) -> list[tuple[str, str]]:
        """A line of the relay's from ``sender`` (node 0 on the other nodes)."""
        what = words[0]
        if self.hub and what == "hang" and len(words) > 2 and words[1].isdigit():
            # the node that found it is the one that said so (not the number it gives)
            return self._ask(sender, wire.text(" ".join(words[2:])), now, connected)
        if self.hub and what == "stacked":
            self._stacked.add(sender)
            return self.settle(now, connected, True)
        if not self.hub and what == "stacks" and len(words) > 2 and words[1].isdigit():
            if self.hang is None:
                self.hang = (int(words[1]), wire.text(" ".join(words[2:])))
            self._deadline = now + self.wait_s if self._deadline is None else self._deadline
        elif not self.hub and what == "teardown":
            self.teardown = True
        return []

    def settle(self, now: float, connected: set[int], joined: bool) -> list[tuple[str, str]]:
        """Node 0: ``teardown`` once every node asked has its stacks, left, or the wait is over. The
        others: done when node 0 is gone (not ``joined``) or the wait is over."""
        if self.teardown or self.hang is None:
            return []
        if self._deadline is None:
            self._deadline = now + self.wait_s
        over = now >= self._deadline
        if self.hub:
            if over or (self._own and (self._asked & connected) <= self._stacked):
                self.teardown = True
                return [(self.EVERY, "teardown")]
        elif over or not joined:
            self.teardown = True
        return []

    def _ask(self, origin: int, headline: str, now: float, connected: set[int]) -> list[tuple[str, str]]:
        """(node 0) Every node takes its stacks: said once per launch."""
        if self.hang is None:
            self.hang = (origin, headline)
        if self._asked or self._deadline is not None:
            return []
        self._deadline = now + self.wait_s
        self._asked = set(connected)
        return [(self.EVERY, f"stacks {origin} {wire.text(headline)}")]


def summary(failure: Failure) -> str:
    """The failure summary of a launch that stopped because another node was lost or failed."""
    if failure.source == FAILED_SOURCE:
        return (
            f"FAILED: {failure.exception}\n"
            f"  this node's launch was stopped: exit code {failure.exit_code} ({FAILED_REASON}); that node's "
            "output and run directory say why"
        )
    return (
        f"FAILED: {failure.exception}\n"
        f"  this node's launch was stopped: exit code {EXIT_NODE_LOST} ({REASON}); docs/multinode.md says what "
        "to check (the node's machine, its network, its launcher's output)"
    )
