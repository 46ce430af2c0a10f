"""``submit=ssh``'s preflight: every host asked, in parallel, before any rank starts anywhere.

One ssh connection per host (``BatchMode=yes``, ``ConnectTimeout``) runs there::

    exec 3<&0; { cat <&3; kill -TERM 0; } >/dev/null 2>&1 & exec 3<&-;
    cd <workdir> || exit 96; (<entry> --version) || exit $?; echo <marker>; (<entry> <node i's arguments> dry_run=true)

(each ``<entry>`` in a subshell: an ``ssh.command`` that ends in ``exec ...`` ends only its own), so
one round trip answers: the host is reachable and takes our key; the working directory exists
there; the launcher runs there (``ssh.python`` / ``ssh.command``) and its version is ours; and node
i's own launcher, on that host, accepts node i's command -- the training script is there, the GPUs
it asks for are visible, the rendezvous port is free (its dry run names every refusal a real launch
there makes: ``warning: ...; a real launch on this host refuses it``). Nothing is written there
(a dry run writes nothing) and nothing starts.

Each host that is not ready gives one line naming it, what is wrong and the fix; with any such line
the launch stops before it starts a rank anywhere (:func:`run` raises). The whole preflight is bounded:
``ssh.connect_timeout`` plus :data:`WORK_TIMEOUT_S` per host, all hosts at once.

Nothing of it outlives the preflight: the first part watches the channel (the client's stdin, a
pipe this launcher holds open and writes nothing to) and, when it closes -- the client is gone, the
connection dropped, or this launcher ended -- ends the remote command's whole process group (sshd
makes it one). A Ctrl+C here (or any end of :func:`check` but its own) closes every client's
stdin: the hosts stop at once, and their clients with them.

``ssh`` here is a short query with a timeout, as ``sbatch`` or ``kubectl`` are elsewhere; the
launch's own ssh clients are started by launcher/run/.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ..errors import UserError
from ..names import PROG
from ..secrets import without_values
from .command import SshNode, SshPlan

WORK_TIMEOUT_S = 120  # the remote launcher's --version and dry run, after the connection (a cold start)
MARKER = "@@train_multigpu-preflight@@"
NO_WORKDIR = 96  # the remote shell could not cd into the working directory
SSH_FAILED = 255  # ssh's own failure (connection, authentication, host key)
REFUSES = "a real launch on this host refuses it"  # how a dry run names a refusal (launcher/session.py)
HINT = "docs/ssh.md#what-each-machine-needs"
# ends the remote command's process group when the channel (its stdin) closes. stdin goes through
# fd 3: a shell gives a background list /dev/null as its stdin; its output goes nowhere, so that it
# holds no stream of the session open after the command ends
WATCH = "exec 3<&0; { cat <&3; kill -TERM 0; } >/dev/null 2>&1 & exec 3<&-;"


@dataclass(frozen=True)
class Answer:
    """What one host answered (or the timeout)."""

    returncode: int | None  # None: no answer within the bound
    stdout: str
    stderr: str


def remote_script(node: SshNode) -> str:
    """The shell line the preflight runs on ``node``'s host.

    >>> node = SshNode(1, "b", ("ssh", "b"), "/v/python -m launcher", ("task=X", "--", "--headless"), "/w")
    >>> print(remote_script(node))
    exec 3<&0; { cat <&3; kill -TERM 0; } >/dev/null 2>&1 & exec 3<&-; cd /w || exit 96; (/v/python -m launcher --version) || exit $?; echo @@train_multigpu-preflight@@; (/v/python -m launcher task=X dry_run=true -- --headless)
    """  # noqa: E501
    args = list(node.remote_argv)
    cut = args.index("--") if "--" in args else len(args)
    dry = [*args[:cut], "dry_run=true", *args[cut:]]
    return (
        f"{WATCH} cd {shlex.quote(node.workdir)} || exit {NO_WORKDIR}; ({node.entry} --version) || exit $?; "
        f"echo {MARKER}; ({node.entry} {shlex.join(dry)})"
    )


def argv(node: SshNode) -> list[str]:
    """The ssh command of the preflight: the node's options, its host, the script."""
    *options, destination = node.ssh_argv
    return [*options, destination, remote_script(node)]


class Clients:
    """The preflight's ssh clients while they run. Each one's stdin is a pipe held open here and
    never written to; :meth:`end_all` (a Ctrl+C here) closes them all: each client passes the EOF on,
    each host's WATCH ends its preflight, and the client ends with it."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self.env = env  # the clients' environment (None: this one)
        self._lock = threading.Lock()
        self._open: set[int] = set()  # the write ends of the clients' stdin still open
        self.ended = False

    def ask(self, node: SshNode, timeout: float) -> Answer:
        """Run the preflight on ``node``'s host: a bounded query."""
        read, write = os.pipe()
        try:
            with self._lock:
                if self.ended:
                    return Answer(130, "", "")
                self._open.add(write)
            done = subprocess.run(argv(node), stdin=read, capture_output=True, text=True, timeout=timeout, env=self.env)
        except subprocess.TimeoutExpired as err:
            out = err.stdout.decode(errors="replace") if isinstance(err.stdout, bytes) else (err.stdout or "")
            return Answer(None, out, "")
        except OSError as err:  # no ssh client here
            return Answer(127, "", f"{err.strerror or err}: ssh")
        finally:
            os.close(read)
            self._close(write)
        return Answer(done.returncode, done.stdout, done.stderr)

    def _close(self, write: int) -> None:
        with self._lock:
            if write in self._open:  # (closed once: the number may be another file's afterwards)
                self._open.discard(write)
                with contextlib.suppress(OSError):
                    os.close(write)

    def end_all(self) -> None:
        with self._lock:
            self.ended = True
            for write in list(self._open):
                self._open.discard(write)
                with contextlib.suppress(OSError):
                    os.close(write)


def ask(node: SshNode, timeout: float) -> Answer:
    """Run the preflight on ``node``'s host alone."""
    return Clients().ask(node, timeout)


def _last(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


# ssh's own messages (its last stderr line) -> what to do about them
_SSH_FIXES: tuple[tuple[re.Pattern, str], ...] = (
    (re.compile(r"Connection refused"), "is sshd running there, on port {port}? ssh.port=N names another"),
    (
        re.compile(r"timed out|No route to host|Network is unreachable"),
        "is the host up and reachable from this machine? ssh.connect_timeout={timeout} s",
    ),
    (
        re.compile(r"Could not resolve hostname|Name or service not known|nodename nor servname"),
        "this machine cannot resolve that name: use its address, or add it to /etc/hosts or ~/.ssh/config",
    ),
    (
        re.compile(r"Host key verification failed|HOST IDENTIFICATION HAS CHANGED|No .* host key is known"),
        "its host key is not known here, or changed: connect once by hand (ssh {host}) to check and accept it",
    ),
    (
        re.compile(r"Permission denied|Too many authentication failures"),
        "the login is refused without a password (BatchMode): install your key there "
        "(ssh-copy-id {user}{host}), or set ssh.user / ssh.identity",
    ),
)


def problem(node: SshNode, answer: Answer, ours: str, timeout: float, port: str = "22") -> UserError | None:
    """A host that is not ready as one error naming it, what is wrong and the fix; None when it is."""
    what = _wrong(node, answer, ours, timeout, port)
    return None if what is None else UserError("ssh.hosts", node.host, *what)


def _wrong(node: SshNode, answer: Answer, ours: str, timeout: float, port: str) -> tuple[str, str] | None:
    """(what is wrong, the fix), or None."""
    host = node.host
    if answer.returncode is None:
        return f"no answer within {timeout:g} s", "is it up, and does its launcher start? ssh to it by hand"
    before, marked, after = answer.stdout.partition(MARKER)
    if not marked:
        code, said = answer.returncode, _last(answer.stderr) or _last(answer.stdout)
        if code == SSH_FAILED:
            user = _option(node.ssh_argv, "-l")
            for pattern, fix in _SSH_FIXES:
                if pattern.search(answer.stderr):
                    fix = fix.format(port=port, timeout=_timeout(node), host=host, user=f"{user}@" if user else "")
                    return f"cannot log in ({said})", fix
            return f"ssh fails ({said or 'exit 255'})", f"try ssh {host} by hand"
        if code == NO_WORKDIR:
            return (
                f"no directory {node.workdir} there, where the launcher runs",
                "create it, or name another with ssh.workdir=DIR (the same on every host)",
            )
        if code in (126, 127):
            return f"'{node.entry}' is not found there ({said})", _INSTALL
        return f"'{node.entry} --version' fails there (exit {code}: {said})", _INSTALL
    theirs = _last(before)
    if theirs.split(" (", 1)[0] != ours:
        shown = theirs if theirs.startswith(PROG) else f"an older {PROG} (its --version says {theirs!r})"
        return f"runs {shown}, this machine {ours}", "install the same version on every host"
    if answer.returncode != 0:
        said = _last(answer.stderr) or _last(after)
        said = said.split(": error: ", 1)[1] if ": error: " in said else said
        return f"node {node.rank}'s launcher there refuses its command: {said}", "fix it for that host"
    refusals = [
        line.split("warning:", 1)[1].strip().removesuffix(REFUSES).rstrip("; ")
        for line in answer.stderr.splitlines()
        if "warning:" in line and line.rstrip().endswith(REFUSES)
    ]
    if refusals:
        return f"node {node.rank}'s launcher there would refuse to start: {'; '.join(refusals)}", "fix it for that host"
    return None


_INSTALL = (
    "install train_multigpu there, or point ssh.python at its interpreter (or ssh.command at a line that runs it)"
)


def _option(argv: Sequence[str], flag: str) -> str | None:
    for i, token in enumerate(argv[:-1]):
        if token == flag:
            return argv[i + 1]
    return None


def _timeout(node: SshNode) -> str:
    for token in node.ssh_argv:
        if token.startswith("ConnectTimeout="):
            return token.split("=", 1)[1]
    return "?"


def check(plan: SshPlan, ours: str, asker: Callable[[SshNode, float], Answer] | None = None) -> list[UserError]:
    """Every host that is not ready, as one error each (none: every host is ready), asked all at once.
    Ended otherwise (a Ctrl+C: KeyboardInterrupt), every client still running is ended first."""
    timeout = plan.connect_timeout + WORK_TIMEOUT_S
    port = (_option(plan.nodes[0].ssh_argv, "-p") if plan.nodes else None) or "22"
    # no secret's value in the clients' environment (SendEnv would send it, ssh -v print it)
    clients = Clients(without_values(os.environ, plan.secret_values().values()))
    pool = ThreadPoolExecutor(max_workers=max(1, len(plan.nodes)))
    try:
        answers = list(pool.map(lambda node: (asker or clients.ask)(node, timeout), plan.nodes))
    except BaseException:
        clients.end_all()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    found = [problem(node, answer, ours, timeout, port) for node, answer in zip(plan.nodes, answers)]
    return [err for err in found if err is not None]


def run(plan: SshPlan, say: Callable[[str], None]) -> None:
    """The preflight of a launch: returns when every host is ready. Otherwise nothing starts: each
    host that is not ready is one line -- ``say`` (the one error path's printer) gets all but the
    last, which is raised (exit 2)."""
    from .. import __version__

    errors = check(plan, f"{PROG} {__version__}")
    if not errors:
        return
    for err in errors[:-1]:
        say(str(err))
    raise errors[-1]
