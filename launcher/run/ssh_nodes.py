"""``submit=ssh``'s local side: one ssh client per node, supervised as one launch.

Each node's launcher runs on its host under ``ssh`` (its command: launcher/ssh/command.py). Here,
this machine's launcher starts every client (each in a session of its own, so a Ctrl+C on the
terminal reaches this launcher alone; each dies with it), and speaks the channel on the client's
stdin (run/leash.py): nothing until that host's launcher says it is there (``leash.MARKER``) and
this machine knows what it runs (:meth:`SshNodes.brief`: the clients may start before, while this
machine composes: launcher/ssh/early.py), then the first line (that node's arguments and the
secrets, asking for the preflight), a beat every second, ``go`` and ``stop`` on a Ctrl+C.

- The preflight is the launch's own start: the one launcher per host checks node i's launch
  there and says ``leash.READY`` (or why not, and ends). :meth:`SshNodes.preflight` waits for every
  host's answer; only when every host is ready is every host told ``go`` (:meth:`SshNodes.go`), so
  a host that is not ready leaves no other host's launch started. Otherwise (or on a Ctrl+C
  meanwhile) :meth:`SshNodes.abort` closes every channel: each host's launcher (or, while it is
  still starting, its shell's guard) ends with nothing started, and what each host said before it
  is the caller's to judge (launcher/ssh/preflight.py). Until ``go`` a node's lines are kept, not
  shown: its version and the preflight's markers are dropped, the rest shown at ``go``.

- One console: every node's output is passed on as it comes. The nodes' consoles show what a
  local launch shows (global rank 0; with ``log_all_ranks=true`` every rank's line, prefixed
  ``[node:rank]`` by its node); the launchers' own lines are labelled ``node N (host):``.
- One Ctrl+C: ``stop`` to every node (each stops its launch as a Ctrl+C there would); a second
  one says ``stop`` again (each kills at once). ``grace_period`` + ``STOP_MARGIN_S`` after the
  first, the clients still running are killed: their connections close, and each remote launcher
  stops on that EOF by itself.
- One exit code: the first node to fail on its own (not one that only followed another node, was
  stopped or lost a peer: its reason says so), with that node's code and reason; a client whose
  connection failed (ssh's own exit status 255) is a lost node, exit 125. Another node's failure
  reaches the others through their liveness channel (run/monitor/liveness.py); ``FOLLOW_S`` after a
  node failed, the clients still running are told to stop.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO

from ..names import PROG
from ..rundir import Reason
from ..secrets import without_values
from . import leash
from .process import procs
from .process.signals import FORWARDED_SIGNALS, STACK_SIGNALS, Interrupts, handlers

POLL_S = 0.05
STOP_MARGIN_S = 10.0  # after the grace period, the time a node's launcher has to close its record
FOLLOW_S = 10.0  # after a node failed, how long the others get to end by themselves (liveness)
ABORT_WAIT_S = 10.0  # a preflight that ended: how long every host gets to end before its client is killed
SSH_FAILED = 255  # ssh's own exit status: the connection failed or dropped
EXIT_NODE_LOST = 125  # run/monitor/liveness.py's (this module imports no monitor)
NODE_LOST, NODE_FAILED = "node lost", "node failed"
FOLLOWERS = (NODE_LOST, NODE_FAILED)  # a node that ended because another did (liveness.REASON, FAILED_REASON)
_LAUNCHER = f"[{PROG}] ".encode()
_ERROR = f"{PROG}: error: ".encode()
_RUN_DIR = re.compile(rb"^\[" + re.escape(PROG.encode()) + rb"\] run directory: (.+)$")
_EXIT = re.compile(rb"^\[" + re.escape(PROG.encode()) + rb"\] exit code (-?\d+) \((.*)\); run directory: (.+)$")


@dataclass(frozen=True)
class RemoteNode:
    rank: int
    host: str
    argv: tuple[str, ...]  # the ssh client's
    args: tuple[str, ...] = ()  # its launcher's arguments, sent on the channel (the first line's argv)


@dataclass
class NodeEnd:
    """How one node ended, as far as this machine knows."""

    rank: int
    host: str
    exit_code: int | None = None  # the client's exit status (the remote launcher's, or ssh's 255)
    reason: str = ""  # the remote launcher's own words ("rank failed", "node failed", ...)
    run_dir: str | None = None  # the node's run directory on its host
    ended_at: float | None = None

    @property
    def lost(self) -> bool:
        """Its connection failed (ssh's 255, no word from its launcher), or its client had to be
        killed here (it said nothing more after being told to stop)."""
        code = self.exit_code
        return code is not None and ((code == SSH_FAILED and not self.reason) or code < 0)

    def as_record(self) -> dict:
        return {
            "node": self.rank,
            "host": self.host,
            "run_dir": self.run_dir,
            "exit_code": self.exit_code,
            "reason": self.reason or None,
        }


@dataclass(frozen=True)
class Outcome:
    exit_code: int
    reason: str
    ended: Reason
    nodes: tuple[NodeEnd, ...]
    failed_node: int | None = None
    summary: str = ""


@dataclass(frozen=True)
class Answer:
    """What one host said to the preflight: all it said before it was ready, or before it ended
    (``returncode``), or before the bound passed (neither)."""

    ready: bool
    returncode: int | None  # the client's exit status when it ended before it was ready
    stdout: str
    stderr: str


@dataclass
class _Client:
    node: RemoteNode
    proc: subprocess.Popen
    end: NodeEnd
    pumps: list[threading.Thread] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    greeted: bool = False  # its launcher said it is there (leash.MARKER)
    briefed: bool = False  # the first line went out (greeted, and what it runs known): beats follow
    ready: bool = False  # its launcher passed the preflight
    kept: list[tuple[int, bytes]] = field(default_factory=list)  # (1 stdout / 2 stderr, line) until go

    def say(self, line: bytes) -> None:
        """One channel line; a client already gone is no error."""
        with self.lock, contextlib.suppress(OSError, ValueError):
            assert self.proc.stdin is not None
            self.proc.stdin.write(line)
            self.proc.stdin.flush()


class SshNodes:
    """The ssh clients of one launch (``nodes``: their commands; ``hidden``: the secret values, which
    no client's environment holds). What each host's launcher runs may come later (:meth:`brief`)."""

    def __init__(
        self,
        nodes: Sequence[RemoteNode],
        hidden: Iterable[str] = (),
        stdout: IO[bytes] | None = None,
        stderr: IO[bytes] | None = None,
    ) -> None:
        self.nodes = list(nodes)
        self.env = without_values(os.environ, hidden)  # SendEnv, ssh -v: no secret from here
        self.hellos: dict[int, bytes] | None = None  # each node's first line, once briefed
        self.grace_period = 0.0
        self.stdout = stdout if stdout is not None else sys.stdout.buffer
        self.stderr = stderr if stderr is not None else sys.stderr.buffer
        self.on_node_dir: Callable[[int, str], None] | None = None
        self.clients: list[_Client] = []
        self.signal_received: int | None = None
        self.kill_at: float | None = None
        self.stop_at: float | None = None  # a node failed: the others are told to stop then
        self._write = threading.Lock()
        self._done = threading.Event()
        self._phase = threading.Lock()  # the pumps' keep-or-show and go's switch
        self._answered = threading.Event()  # a host said it is ready, or a client ended
        self.going = False  # every host ready and told go: lines are shown, Ctrl+C says stop

    # -- start ---------------------------------------------------------------------------------
    def start(self) -> None:
        preexec = procs.die_with_parent_preexec(os.getpid())
        for node in self.nodes:
            proc = subprocess.Popen(
                list(node.argv),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                preexec_fn=preexec,
                env=self.env,
            )
            client = _Client(node, proc, NodeEnd(node.rank, node.host))
            for fd, stream in ((1, proc.stdout), (2, proc.stderr)):
                pump = threading.Thread(target=self._pump, args=(client, stream, fd), daemon=True)
                pump.start()
                client.pumps.append(pump)
            self.clients.append(client)
            if self.signal_received is not None:  # a Ctrl+C while starting: the preflight ends at once
                break
        threading.Thread(target=self._beat, name="ssh-beat", daemon=True).start()

    def brief(
        self,
        nodes: Sequence[RemoteNode],
        secrets: Mapping[str, str],
        grace_period: float,
        timeout_s: float = leash.DEFAULT_TIMEOUT_S,
        on_node_dir: Callable[[int, str], None] | None = None,
    ) -> None:
        """What each host's launcher runs (``nodes``: the same commands, their arguments known now)
        and the secrets: each node's first line goes out as soon as its launcher is there (at once
        to one that already is). ``on_node_dir(rank, path)``: a node named its run directory."""
        self.grace_period, self.on_node_dir = grace_period, on_node_dir
        with self._phase:
            self.hellos = {n.rank: leash.hello(secrets, timeout_s, preflight=True, argv=n.args) for n in nodes}
            for client in self.clients:
                if client.greeted:
                    self._hello(client)

    def _hello(self, client: _Client) -> None:
        """Its first line (under ``_phase``, once greeted and briefed); then the beats."""
        if self.hellos is not None and not client.briefed:
            client.briefed = True
            client.say(self.hellos[client.node.rank])

    def _beat(self) -> None:
        while not self._done.wait(leash.BEAT_EVERY_S):
            for client in self.clients:
                if client.briefed and client.proc.poll() is None:
                    client.say(leash.BEAT.encode() + b"\n")

    # -- the preflight -------------------------------------------------------------------------
    def preflight(self, bound_s: float) -> dict[int, Answer]:
        """Every host's answer, by node rank, once each is ready or its launcher (or its client)
        ended, or ``bound_s`` passed; at once on a Ctrl+C (see ``signal_received``)."""
        deadline = time.monotonic() + bound_s
        while self.signal_received is None and time.monotonic() < deadline:
            self._answered.clear()
            if all(c.ready or c.proc.poll() is not None for c in self.clients):
                break
            self._answered.wait(POLL_S)
        return {c.node.rank: self._answer(c) for c in self.clients}

    def _answer(self, client: _Client) -> Answer:
        code = None if client.ready else client.proc.poll()
        if code is not None:  # everything it said is in
            for pump in client.pumps:
                pump.join(timeout=5)
        with self._phase:
            out = b"".join(line for fd, line in client.kept if fd == 1).decode(errors="replace")
            err = b"".join(line for fd, line in client.kept if fd == 2).decode(errors="replace")
        return Answer(client.ready, code, out, err)

    def go(self) -> None:
        """Every host is ready: each told to start its launch; what each said meanwhile shown."""
        with self._phase:
            self.going = True
            for client in self.clients:
                said = client.kept
                marker = next((i for i, (fd, line) in enumerate(said) if fd == 1 and _is(line, leash.MARKER)), -1)
                for i, (fd, line) in enumerate(said):  # (not the markers)
                    if fd == 2 or (i > marker and not _is(line, leash.READY)):
                        self._show(self.stdout if fd == 1 else self.stderr, _label(client.node, line))
                client.kept.clear()
                client.say(leash.GO.encode() + b"\n")
        if self.signal_received is not None:  # a Ctrl+C came between the preflight and go: stop now
            self.kill_at = time.monotonic() + self.grace_period + STOP_MARGIN_S
            self._stop_all()

    def abort(self, wait_s: float = ABORT_WAIT_S) -> None:
        """The preflight failed or was interrupted: every channel closed (each host's launcher, or
        its shell's guard, ends with nothing started), every client waited for, killed after
        ``wait_s``."""
        self._done.set()
        for client in self.clients:
            with client.lock, contextlib.suppress(OSError, ValueError):
                if client.proc.stdin is not None:
                    client.proc.stdin.close()
        deadline = time.monotonic() + wait_s
        for client in self.clients:
            try:
                client.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                client.proc.kill()
                client.proc.wait()
            for pump in client.pumps:
                pump.join(timeout=5)

    def _pump(self, client: _Client, stream: IO[bytes], fd: int) -> None:
        out = self.stdout if fd == 1 else self.stderr
        for line in iter(stream.readline, b""):
            if not self.going:
                with self._phase:
                    if not self.going:
                        self._keep(client, fd, line)
                        continue
            body = line.rstrip(b"\n")
            found = _RUN_DIR.match(body)
            if found and client.end.run_dir is None:
                client.end.run_dir = found.group(1).decode(errors="replace")
                if self.on_node_dir is not None:
                    self.on_node_dir(client.node.rank, client.end.run_dir)
            ended = _EXIT.match(body)
            if ended:
                client.end.reason = ended.group(2).decode(errors="replace")
            self._show(out, _label(client.node, line))

    def _keep(self, client: _Client, fd: int, line: bytes) -> None:
        """A line said before go (under ``_phase``): kept; the markers move the preflight on."""
        client.kept.append((fd, line))
        if fd == 1 and _is(line, leash.MARKER) and not client.greeted:
            client.greeted = True  # its launcher is there (its shell's guard ended): the first line
            self._hello(client)
        elif fd == 1 and _is(line, leash.READY):
            client.ready = True
            self._answered.set()

    def _show(self, out: IO[bytes], data: bytes) -> None:
        with self._write, contextlib.suppress(OSError, ValueError):
            out.write(data)
            out.flush()

    def say(self, text: str) -> None:
        self._show(self.stdout, f"[{PROG}] {text}\n".encode())

    # -- signals -------------------------------------------------------------------------------
    def on_signal(self, signum: int, _frame: object) -> None:
        first = self.signal_received is None
        if first:
            self.signal_received = signum
            self._answered.set()
        if not self.going:  # the preflight: it ends (abort), nothing started anywhere
            return
        if first:
            self.kill_at = time.monotonic() + self.grace_period + STOP_MARGIN_S
        elif signum == signal.SIGINT:  # a second Ctrl+C: every node kills at once
            self.kill_at = min(self.kill_at or 0.0, time.monotonic() + STOP_MARGIN_S)
        else:
            return
        self._stop_all()

    def on_stacks(self, _signum: int, _frame: object) -> None:
        """SIGUSR2 here takes no remote stacks (``runs stacks`` on each host does)."""

    def _stop_all(self) -> None:
        for client in self.clients:
            if client.proc.poll() is None:
                client.say(leash.STOP.encode() + b"\n")

    # -- wait ----------------------------------------------------------------------------------
    def wait(self) -> Outcome:
        while True:
            now = time.monotonic()
            running = 0
            for client in self.clients:
                code = client.proc.poll()
                if code is None:
                    running += 1
                elif client.end.exit_code is None:
                    client.end.exit_code, client.end.ended_at = code, now
                    if code != 0 and self.stop_at is None and self.signal_received is None:
                        self.stop_at = now + FOLLOW_S
            if running == 0:
                break
            if self.stop_at is not None and now >= self.stop_at:
                self.stop_at = float("inf")
                self._stop_all()
                self.kill_at = now + self.grace_period + STOP_MARGIN_S
            if self.kill_at is not None and now >= self.kill_at:
                for client in self.clients:
                    if client.proc.poll() is None:
                        client.proc.kill()
                self.kill_at = now + 1.0
            time.sleep(POLL_S)
        self._done.set()
        for client in self.clients:
            for pump in client.pumps:
                pump.join(timeout=5)
        return self._outcome()

    def _outcome(self) -> Outcome:
        ends = tuple(client.end for client in self.clients)
        if self.signal_received is not None:
            name = signal.Signals(self.signal_received).name
            return Outcome(128 + self.signal_received, f"stopped by {name}", Reason.INTERRUPTED, ends)
        failed = [end for end in ends if end.exit_code]
        if not failed:
            return Outcome(0, "success", Reason.SUCCEEDED, ends)
        # the first node that failed on its own; else the first that failed at all
        own = [end for end in failed if not end.lost and end.reason not in FOLLOWERS and end.exit_code != 130]
        first = min(own or failed, key=lambda end: (end.ended_at or 0.0, end.rank))
        where = f"node {first.rank} ({first.host})"
        if first.lost:
            how = (
                f"ssh exit status {SSH_FAILED}"
                if first.exit_code == SSH_FAILED
                else "no answer after it was told to stop"
            )
            text = f"{where} lost: its SSH connection failed ({how})"
            return Outcome(EXIT_NODE_LOST, NODE_LOST, Reason.NODE_LOST, ends, first.rank, text)
        why = first.reason or "its launcher failed"
        text = f"{where} failed: exit code {first.exit_code} ({why})"
        if first.run_dir:
            text += f"; its run directory: {first.host}:{first.run_dir}"
        ended = Reason.NODE_LOST if first.reason == NODE_LOST else Reason.FAILED
        return Outcome(first.exit_code, f"{where}: {why}", ended, ends, first.rank, text)

    def close(self) -> None:
        self._done.set()
        for client in self.clients:
            with contextlib.suppress(OSError, ValueError):
                if client.proc.stdin is not None:
                    client.proc.stdin.close()
            if client.proc.poll() is None:
                client.proc.kill()
            client.proc.wait()


def _is(line: bytes, marker: str) -> bool:
    """``line`` is ``marker``'s (``READY`` has the launcher's version after it)."""
    body = line.rstrip(b"\n")
    return body == marker.encode() or body.startswith(marker.encode() + b" ")


def _label(node: RemoteNode, line: bytes) -> bytes:
    """A line of a node's launcher (``[train_multigpu] ...``, ``train_multigpu: error: ...``) with
    the node named; the ranks' lines as they are.

    >>> _label(RemoteNode(1, "gpu-b", ()), b"[train_multigpu] exit code 0 (success)\\n")
    b'[train_multigpu] node 1 (gpu-b): exit code 0 (success)\\n'
    >>> _label(RemoteNode(1, "gpu-b", ()), b"[1:3] step 10\\n")
    b'[1:3] step 10\\n'
    """
    tag = f"node {node.rank} ({node.host}): ".encode()
    for head in (_LAUNCHER, _ERROR):
        if line.startswith(head):
            return head + tag + line[len(head) :]
    return line


def run(
    nodes: Sequence[RemoteNode],
    secrets: dict[str, str],
    grace_period: float,
    timeout_s: float = leash.DEFAULT_TIMEOUT_S,
    interrupts: Interrupts | None = None,
    on_node_dir: Callable[[int, str], None] | None = None,
    *,
    preflight_s: float,
    judge: Callable[[dict[int, Answer]], None],
    on_ready: Callable[[], None] = lambda: None,
    started: SshNodes | None = None,
) -> Outcome:
    """Start every node's client (``started``: the clients of these very commands, started before
    this machine composed: launcher/ssh/early.py) and brief them; the preflight: ``judge`` gets
    every host's answer and raises unless every host is ready (then every channel is closed: nothing
    starts anywhere; a Ctrl+C meanwhile: KeyboardInterrupt, the same); then ``on_ready`` (the
    record) and go; supervise them to the end, print the failing node's summary."""
    launch = started if started is not None else SshNodes(nodes, secrets.values())
    installed = {} if interrupts is not None else {sig: launch.on_signal for sig in FORWARDED_SIGNALS}
    if interrupts is None:
        installed.update({sig: launch.on_stacks for sig in STACK_SIGNALS})
    with handlers(installed):
        if interrupts is not None:
            interrupts.attach(launch)
        try:
            if started is None:
                launch.start()
            launch.brief(nodes, secrets, grace_period, timeout_s, on_node_dir)
            answers = launch.preflight(preflight_s)
            try:
                if launch.signal_received is not None:
                    raise KeyboardInterrupt
                judge(answers)  # raises unless every host is ready
            except BaseException:
                launch.abort()
                raise
            on_ready()
            launch.go()
            outcome = launch.wait()
        finally:
            if interrupts is not None:
                interrupts.detach(launch)
            launch.close()
    if outcome.summary:
        with contextlib.suppress(OSError):
            print(f"[{PROG}] {outcome.summary}", file=sys.stderr, flush=True)
    return outcome


def preflight_only(
    nodes: Sequence[RemoteNode], bound_s: float, timeout_s: float = leash.DEFAULT_TIMEOUT_S
) -> dict[int, Answer]:
    """The preflight alone: every host's answer, then every channel closed (nothing starts). A
    Ctrl+C meanwhile: KeyboardInterrupt, every host's ended first."""
    launch = SshNodes(nodes, stdout=io.BytesIO(), stderr=io.BytesIO())
    with handlers({sig: launch.on_signal for sig in FORWARDED_SIGNALS}):
        try:
            launch.start()
            launch.brief(nodes, {}, 0.0, timeout_s)
            answers = launch.preflight(bound_s)
        finally:
            launch.abort()
    if launch.signal_received is not None:
        raise KeyboardInterrupt
    return answers
