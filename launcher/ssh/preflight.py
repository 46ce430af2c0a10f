"""``submit=ssh``'s preflight: every host asked, in parallel, before any rank starts anywhere.

It is the launch's own start, one ssh connection and one launcher per host (launcher/run/
ssh_nodes.py starts them, launcher/ssh/command.py is the command): that launcher says
``leash.MARKER``, then composes and checks node i's launch on its host as a real launch does
-- the training script is there, the GPUs it asks for are visible, the rendezvous port is free --
and says ``leash.READY`` with its version (or each refusal as a dry run says it, ``warning: ...;
a real launch on this host refuses it``, and ends: exit 2), then waits for ``go``. Nothing is
written there before ``go``. So one round trip answers: the host is reachable and takes our key;
the working directory exists there; the launcher runs there (``ssh.python`` / ``ssh.command``);
node i's launch would start there; and its version is ours (a host that is not ready is named
for why, whatever its version).

Each host that is not ready gives one line naming it, what is wrong and the fix (:func:`problem`);
with any such line (or a Ctrl+C meanwhile) every channel is closed -- no host is told ``go``, so a
host that is not ready leaves no other host's launch started, and each host's launcher (or, while
it still starts, its shell's guard) ends with nothing started -- and the launch stops (:func:`judge`
raises). The whole preflight is bounded: ``ssh.connect_timeout`` plus :data:`WORK_TIMEOUT_S`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

from ..errors import UserError
from ..names import PROG, SSH_CHANNEL_VAR
from ..run.leash import MARKER, READY
from ..run.ssh_nodes import Answer, RemoteNode, preflight_only
from .command import NO_WORKDIR, SshNode, SshPlan

WORK_TIMEOUT_S = 120  # the remote launcher's start and checks, after the connection (a cold start)
SSH_FAILED = 255  # ssh's own failure (connection, authentication, host key)
REFUSES = "a real launch on this host refuses it"  # how a dry run names a refusal (launcher/session.py)
HINT = "docs/ssh.md#what-each-machine-needs"


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
    if not answer.ready and answer.returncode is None:
        return f"no answer within {timeout:g} s", "is it up, and does its launcher start? ssh to it by hand"
    _, marked, after = answer.stdout.partition(MARKER)
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
        if SSH_CHANNEL_VAR in said:  # a launcher from before this preflight: it waited for another first line
            return f"runs an older {PROG}, this machine {ours}", "install the same version on every host"
        return f"'{node.entry}' fails there (exit {code}: {said})", _INSTALL
    if answer.ready:
        said = [line for line in after.splitlines() if line.startswith(READY)]
        theirs = said[-1][len(READY) :].strip() if said else ""
        if theirs.split(" (", 1)[0] != ours:
            shown = theirs if theirs.startswith(PROG) else f"an older {PROG} (its version: {theirs!r})"
            return f"runs {shown}, this machine {ours}", "install the same version on every host"
        return None
    refusals = [
        line.split("warning:", 1)[1].strip().removesuffix(REFUSES).rstrip("; ")
        for line in answer.stderr.splitlines()
        if "warning:" in line and line.rstrip().endswith(REFUSES)
    ]
    if refusals:
        return f"node {node.rank}'s launcher there would refuse to start: {'; '.join(refusals)}", "fix it for that host"
    said = _last(answer.stderr) or _last(after)
    said = said.split(": error: ", 1)[1] if ": error: " in said else said
    return f"node {node.rank}'s launcher there refuses its command: {said}", "fix it for that host"


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


def errors(plan: SshPlan, answers: Mapping[int, Answer], ours: str | None = None) -> list[UserError]:
    """Every host that is not ready, as one error each, in node order (none: every host is ready)."""
    if ours is None:
        from .. import __version__

        ours = f"{PROG} {__version__}"
    timeout = bound(plan)
    port = (_option(plan.nodes[0].ssh_argv, "-p") if plan.nodes else None) or "22"
    found = [problem(node, answers[node.rank], ours, timeout, port) for node in plan.nodes]
    return [err for err in found if err is not None]


def bound(plan: SshPlan) -> float:
    """The whole preflight's bound, all hosts at once."""
    return float(plan.connect_timeout + WORK_TIMEOUT_S)


def judge(plan: SshPlan, say: Callable[[str], None]) -> Callable[[Mapping[int, Answer]], None]:
    """What the launch (launcher/run/ssh_nodes.py ``run``) asks of every host's answer: returns when
    every host is ready; otherwise each host that is not ready is one line -- ``say`` (the one error
    path's printer) gets all but the last, which is raised (exit 2)."""

    def check(answers: Mapping[int, Answer]) -> None:
        found = errors(plan, answers)
        if not found and not all(answer.ready for answer in answers.values()):
            raise UserError("ssh.hosts", ",".join(n.host for n in plan.nodes), "not every host answered")
        for err in found[:-1]:
            say(str(err))
        if found:
            raise found[-1]

    return check


def remote_nodes(plan: SshPlan) -> list[RemoteNode]:
    """Every node's ssh client, as launcher/run/ starts it."""
    return [RemoteNode(node.rank, node.host, tuple(node.argv), tuple(node.remote_argv)) for node in plan.nodes]


def run(plan: SshPlan, say: Callable[[str], None]) -> None:
    """The preflight alone (tests/workers/ssh_preflight.py): every host asked, then every channel
    closed; returns when every host was ready, else raises as :func:`judge`."""
    judge(plan, say)(preflight_only(remote_nodes(plan), bound(plan)))
