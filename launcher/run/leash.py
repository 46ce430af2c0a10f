"""The remote end of an SSH channel (``submit=ssh``): the secrets it carries, and the leash that ends
this node's launch when the channel does.

``submit=ssh`` starts ``train_multigpu`` on every host once, through one ssh connection per host,
with ``TRAIN_MULTIGPU_SSH_CHANNEL`` (names.SSH_CHANNEL_VAR) in its environment, and keeps the
client's stdin open. That one process answers the preflight and then runs the node. Its value is
the pid of the remote shell's guard (launcher/ssh/command.py: it ends the whole remote command when
the channel closes while the launcher is still starting -- a slow ``ssh.command`` prefix, a slow
import), or ``1`` (no guard). The launcher ends the guard (:func:`end_guard`), then says
:data:`MARKER` on stdout (the local side sends nothing before it, so the guard read nothing).
What travels on stdin then, one line each (the local side: run/ssh_nodes.py):

- first, one JSON object: ``{"secrets": {"worker_env.HF_TOKEN": "value", ...}, "timeout_s": 30}``
  (a launch at once), or ``{"preflight": {"secrets": ..., "timeout_s": 30, "argv": [...]}}``
  (submit=ssh's: the launcher is started with no arguments -- so that it starts, and imports, while
  this machine still composes -- and its arguments come here, ``argv``, after its command line's; the
  checks first, then :data:`READY` and its version on stdout, ``@@train_multigpu-ready@@
  train_multigpu 0.1.0 (Hydra 1.3.8)``, and nothing starts before ``go``; a launcher from before
  the preflight refuses this line, exit 2, and starts nothing). The secret values go into this launcher's
  :class:`~launcher.secrets.Vault` under the placeholder the command line carries
  (``+worker_env.HF_TOKEN=***``), so they reach the workers' environment and nothing else: never a
  remote command line (``ps`` on that host), never a file;
- then ``beat`` every second while the local launcher lives, ``go`` once every host is ready, and
  ``stop`` for each Ctrl+C there (the first stops this node's launch as Ctrl+C does, a second kills
  at once). Before ``go`` the local side ends a launch by closing the channel: this launcher then
  ends without starting or writing anything (exit 130).

Why the launcher watches its stdin itself: sshd ends a remote command with the connection only when
it has a terminal (``-tt``), and a link that goes down closes nothing at all. So this end stops its
launch, as one Ctrl+C would (SIGINT to itself: every rank stopped, the record closed), when its
stdin reaches EOF (the client, or its connection, is gone) or when no line came for ``timeout_s``
(a link down, a frozen client). The nodes' liveness channel (run/monitor/liveness.py) then ends the
other nodes too, whichever way this one ended.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..errors import UserError
from ..names import PROG, SSH_CHANNEL_VAR
from ..secrets import MASK, Vault, remember_values
from .process import procs

BEAT = "beat"
STOP = "stop"
GO = "go"
MARKER = "@@train_multigpu-preflight@@"  # stdout: this launcher watches the channel; send the first line
READY = "@@train_multigpu-ready@@"  # stdout, then its version line: the checks passed; it waits for go
BEAT_EVERY_S = 1.0
DEFAULT_TIMEOUT_S = 30.0
FIRST_LINE_WAIT_S = 60.0  # how long the remote launcher waits for the channel's first line
BROKEN_WAIT_S = 0.5  # after stdin ended: how long stdout and stderr get to show they are gone too
GUARD_WAIT_S = 5.0  # how long the guard may take to end once killed


def hello(
    secrets: Mapping[str, str], timeout_s: float = DEFAULT_TIMEOUT_S, preflight: bool = False, argv: Sequence[str] = ()
) -> bytes:
    """The channel's first line, as the local side sends it (``preflight``: the launcher checks,
    says :data:`READY` and waits for ``go``; ``argv``: the launcher's arguments, after its own
    command line's -- submit=ssh sends them all here).

    >>> hello({"worker_env.HF_TOKEN": "abc"}, 30)
    b'{"secrets": {"worker_env.HF_TOKEN": "abc"}, "timeout_s": 30}\\n'
    >>> hello({}, 30, preflight=True, argv=["seed=1"])
    b'{"preflight": {"secrets": {}, "timeout_s": 30, "argv": ["seed=1"]}}\\n'
    """
    body: dict = {"secrets": dict(secrets), "timeout_s": timeout_s}
    if argv:
        body["argv"] = list(argv)
    return json.dumps({"preflight": body} if preflight else body).encode() + b"\n"


@dataclass(frozen=True)
class Hello:
    """What a first line says: the secrets by dotted path, the silence timeout, whether it asks
    for a preflight (wait for ``go``), and the arguments that follow the command line's."""

    secrets: dict[str, str]
    timeout_s: float = DEFAULT_TIMEOUT_S
    preflight: bool = False
    argv: tuple[str, ...] = ()


def parse_hello(line: bytes) -> Hello:
    """A first line; a ValueError when it is not one.

    >>> parse_hello(b'{"secrets": {"worker_env.A_TOKEN": "x"}, "timeout_s": 5}')
    Hello(secrets={'worker_env.A_TOKEN': 'x'}, timeout_s=5.0, preflight=False, argv=())
    >>> parse_hello(b'{"preflight": {"secrets": {}, "timeout_s": 5, "argv": ["seed=1"]}}')
    Hello(secrets={}, timeout_s=5.0, preflight=True, argv=('seed=1',))
    >>> parse_hello(b"beat")
    Traceback (most recent call last):
    ValueError: not the SSH channel's first line
    """
    try:
        data = json.loads(line)
    except ValueError:
        raise ValueError("not the SSH channel's first line") from None
    preflight = isinstance(data, dict) and "preflight" in data
    if preflight:
        data = data["preflight"]
    if not isinstance(data, dict) or not isinstance(data.get("secrets"), dict):
        raise ValueError("not the SSH channel's first line")
    given = data["secrets"]
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in given.items()):
        raise ValueError("the SSH channel's secrets are not names and values")
    argv = data.get("argv", [])
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        raise ValueError("the SSH channel's arguments are not strings")
    timeout = data.get("timeout_s", DEFAULT_TIMEOUT_S)
    timeout = float(timeout) if isinstance(timeout, (int, float)) and timeout > 0 else DEFAULT_TIMEOUT_S
    return Hello(dict(given), timeout, preflight, tuple(argv))


def fill(vault: Vault, given: Mapping[str, str]) -> Vault:
    """``vault`` with each given secret under the placeholder its override carries (``***``).

    >>> fill(Vault({"worker_env.HF_TOKEN": {"***": "***"}}), {"worker_env.HF_TOKEN": "abc"}).values
    {'worker_env.HF_TOKEN': {'***': 'abc'}}
    """
    remember_values(given.values())  # masked in every error line, as values typed here are
    for path, value in given.items():
        vault.values[path] = {MASK: value}
    return vault


class _Lines:
    """Lines read from a file descriptor with a deadline (no buffered reader: select decides)."""

    def __init__(self, fd: int) -> None:
        self.fd, self.buffer = fd, b""

    def next(self, timeout: float) -> bytes | None:
        """The next line (without its newline); None at EOF; TimeoutError when none came in time."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            ready, _, _ = select.select([self.fd], [], [], left)
            if not ready:
                continue
            try:
                chunk = os.read(self.fd, 4096)
            except OSError:
                chunk = b""
            if not chunk:
                return None
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line


class Leash:
    """Watches the channel after its first line; ends this launcher's launch when it ends.

    The stop comes first, whatever writing does: the channel that ended is also this launcher's
    stdout and stderr, and when the connection is gone every write there fails (EPIPE). So when
    stdin ends or falls silent and stdout or stderr is found broken (:func:`broken`), both are
    pointed at ``/dev/null`` (:func:`silence`: every later line of this launcher -- the console, its
    errors -- is dropped); then the launch gets its SIGINT, and only then is the reason said (best
    effort). Whatever goes wrong in the thread, the launch is stopped."""

    def __init__(
        self,
        lines: _Lines,
        timeout_s: float,
        preflight: bool = False,
        secrets: Mapping[str, str] | None = None,
        argv: Sequence[str] = (),
    ) -> None:
        self.lines, self.timeout_s = lines, timeout_s
        self.secrets = dict(secrets or {})  # the first line's, for the launch's vault
        self.argv = tuple(argv)  # the first line's arguments: after the command line's
        self.why: str | None = None  # why the launch was stopped from here
        self.preflight = preflight  # submit=ssh's: nothing starts before go (:meth:`ready`)
        self._go = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="ssh-leash", daemon=True)

    def start(self) -> Leash:
        self._thread.start()
        return self

    def _stop(self, why: str, gone: bool) -> None:
        """``gone``: the channel ended (closed or silent): stdout and stderr may have gone with it."""
        first = self.why is None
        if first:
            self.why = why
        if gone and broken():
            silence()
        os.kill(os.getpid(), signal.SIGINT)  # as one Ctrl+C does (a second one: kill at once)
        if first:
            with contextlib.suppress(Exception):
                print(f"[{PROG}] {why}: stopping this node's launch", flush=True)

    def _watch(self) -> None:
        try:
            self._follow()
        except BaseException:  # noqa: BLE001 -- a leash that breaks still stops the launch
            with contextlib.suppress(BaseException):
                self._stop("the SSH channel could not be read", gone=True)

    def _follow(self) -> None:
        while True:
            try:
                line = self.lines.next(self.timeout_s)
            except TimeoutError:
                self._stop(f"the SSH channel was silent for {self.timeout_s:g} s", gone=True)
                return
            if line is None:
                self._stop("the SSH connection closed", gone=True)
                return
            if line.strip() == STOP.encode():
                self._stop("Ctrl+C on the launching host", gone=False)
            elif line.strip() == GO.encode():
                self._go.set()

    def ready(self, refusals: Sequence[str] = ()) -> None:
        """The preflight's end on this host (a launch's checks passed; nothing written or started
        yet): the refusals of this host's facts each said as a dry run says them, then exit 2
        (:class:`NotReady`); else :data:`READY` and this launcher's version on stdout (the local
        side compares it with its own), then wait for ``go``. The channel closing meanwhile is a
        Ctrl+C here (KeyboardInterrupt: exit 130, nothing started)."""
        from ..errors import one_line
        from ..names import version_line

        if not self.preflight:
            return
        self.preflight = False
        if refusals:
            for line in refusals:
                print(f"{PROG}: warning: {one_line(line)}", file=sys.stderr, flush=True)
            raise NotReady(len(refusals))
        print(f"{READY} {version_line()}", flush=True)
        while not self._go.wait(0.2):  # a short wait: the SIGINT from the thread is seen at once
            pass


def broken(fds: tuple[int, ...] = (1, 2), wait_s: float = BROKEN_WAIT_S) -> bool:
    """Whether writing to any of ``fds`` fails now or within ``wait_s`` (its reader is gone: sshd
    closes the remote command's streams one after the other when the connection drops). Never raises."""
    try:
        poll = select.poll()
        for fd in fds:
            poll.register(fd, 0)  # errors only: POLLERR (a pipe without reader), POLLHUP, POLLNVAL
        return bool(poll.poll(int(wait_s * 1000)))
    except (OSError, ValueError):
        return True


def silence(fds: tuple[int, ...] = (1, 2)) -> None:
    """Point ``fds`` (stdout, stderr: the SSH channel) at ``/dev/null``, so that no write of this
    process fails or blocks on a channel that is gone. Never raises."""
    with contextlib.suppress(OSError):
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.dup2(null, fd)
        finally:
            os.close(null)


class NotReady(UserError):
    """This host's facts refuse the launch (the preflight's answer: the refusals said before it)."""

    def __init__(self, count: int) -> None:
        super().__init__("submit", "ssh", f"this host refuses the launch ({count} warning{'s' if count > 1 else ''})")


_current: Leash | None = None  # this process's leash (stdin is the process's): its preflight


def preflighting() -> bool:
    """Whether this launcher answers submit=ssh's preflight: a launch's refusals are collected and
    said by :func:`ready`, as a dry run's are, instead of raised one by one."""
    return _current is not None and _current.preflight


def ready(refusals: Sequence[str] = ()) -> None:
    """Before anything of a launch is written or started: under submit=ssh's preflight, say ready
    (or the refusals) and wait for ``go`` (:meth:`Leash.ready`); otherwise nothing."""
    if _current is not None:
        _current.ready(refusals)


def end_guard(value: str) -> None:
    """End the remote shell's guard (launcher/ssh/command.py), named by ``SSH_CHANNEL_VAR``'s value:
    from now on this launcher watches the channel itself. Only a process of this launcher's own
    process group, its child or its parent's (what the remote shell started), is ever signalled."""
    if not value.isdigit() or int(value) <= 1 or int(value) == os.getpid():
        return
    pid = int(value)
    ppid = procs.parent(pid)
    try:
        if ppid not in (os.getpid(), os.getppid()) or os.getpgid(pid) != os.getpgrp():
            return
        os.kill(pid, signal.SIGKILL)
    except OSError:
        return
    deadline = time.monotonic() + GUARD_WAIT_S
    while time.monotonic() < deadline:
        try:
            if ppid == os.getpid():  # ours (the shell exec'd this launcher): reaped
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    return
            elif not procs.alive(pid):
                return
        except ChildProcessError:
            return  # gone
        time.sleep(0.002)


def take_channel(environ=os.environ, fd: int = 0) -> Leash | None:
    """Under ``submit=ssh`` (``SSH_CHANNEL_VAR`` set): end the shell's guard, say :data:`MARKER`,
    read the channel's first line (its secret values masked in every error line from now on) and
    start the leash; otherwise nothing. The variable is taken out of the environment (no rank
    inherits it). The launcher's arguments follow its command line's with the first line's
    (:attr:`Leash.argv`); the secrets go into the launch's vault (:func:`fill_vault`)."""
    global _current
    value = environ.pop(SSH_CHANNEL_VAR, None)
    if value is None:
        return None
    end_guard(value)
    with contextlib.suppress(OSError):
        print(MARKER, flush=True)
    lines = _Lines(fd)
    try:
        first = lines.next(FIRST_LINE_WAIT_S)
        if first is None:
            if broken():  # the connection is gone: so is the console the error would go to
                silence()
            raise ValueError("the SSH channel closed before its first line")
        said = parse_hello(first)
    except (TimeoutError, ValueError) as err:
        why = "no first line" if isinstance(err, TimeoutError) else str(err)
        raise UserError(
            SSH_CHANNEL_VAR,
            "1",
            f"set by submit=ssh only: the launcher reads its secrets from stdin ({why})",
            f"unset {SSH_CHANNEL_VAR}",
        ) from None
    remember_values(said.secrets.values())  # masked in every error line, as values typed here are
    _current = Leash(lines, said.timeout_s, said.preflight, said.secrets, said.argv).start()
    return _current


def fill_vault(vault: Vault) -> bool:
    """The channel's secrets into the launch's ``vault`` (:func:`fill`); whether this launcher was
    started by submit=ssh (:func:`take_channel` found the channel)."""
    if _current is None:
        return False
    fill(vault, _current.secrets)
    return True
