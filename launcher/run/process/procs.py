"""Finding and killing a launch's processes on Linux, through /proc and prctl. Standard library only.

A launch's processes are found two ways, and both are used:

- by ancestry: every descendant of the launcher. The launcher is a child subreaper
  (``PR_SET_CHILD_SUBREAPER``), so a grandchild whose parent died, even one that called setsid()
  or double-forked, is re-parented to the launcher and stays in its tree;
- by a marker: every process started for a launch carries ``TRAIN_MULTIGPU_LAUNCH_ID=<id>`` (names.LAUNCH_ID_VAR) in its
  environment, and children inherit it. This is what the watchdog uses once the launcher itself is
  gone (SIGKILL), when the tree has been re-parented to init.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterable, Iterator, Mapping, Sequence

from ...names import LAUNCH_ID_VAR

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36

_libc = None


def _load_libc():
    """libc, loaded once, with ``prctl`` resolved: a ``preexec_fn`` runs between fork and exec, where
    an import or a symbol lookup may deadlock on a lock another thread held at the fork."""
    global _libc
    if _libc is None:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl  # noqa: B018 (resolved now, cached on the object)
        _libc = libc
    return _libc


def _prctl(option: int, value: int) -> bool:
    try:
        return _load_libc().prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):  # not Linux
        return False


def become_subreaper() -> bool:
    """Orphaned descendants are re-parented to this process instead of init."""
    return _prctl(PR_SET_CHILD_SUBREAPER, 1)


def die_with_parent_preexec(parent: int, signum: int = signal.SIGKILL):
    """A ``preexec_fn``: the child gets ``signum`` when ``parent`` dies (and exits at once, as if it
    had, if it already has). libc is loaded here, in the parent, before the fork: the preexec_fn
    neither imports nor loads anything (and this process's own parent-death signal is left alone)."""
    try:
        _load_libc()
    except (OSError, AttributeError):  # not Linux: the preexec_fn does nothing
        pass

    def preexec() -> None:
        _prctl(PR_SET_PDEATHSIG, signum)
        if os.getppid() != parent:
            os._exit(128 + signum)

    return preexec


def start_tied(argv: Sequence[str], env: Mapping[str, str], signum: int = signal.SIGTERM, own_session: bool = False):
    """Start ``argv`` (a ``subprocess.Popen``) as a child that gets ``signum`` when this process dies
    (PR_SET_PDEATHSIG): a Ray actor's node launcher (ray_submit/job.py) stops with the actor.
    ``own_session``: in a session of its own, so a signal sent to this process's group reaches it
    only as this process passes it on (once)."""
    import subprocess

    return subprocess.Popen(
        list(argv),
        env=dict(env),
        preexec_fn=die_with_parent_preexec(os.getpid(), signum),
        start_new_session=own_session,
    )


def follow_lines(argv: Sequence[str]) -> Iterator[str]:
    """The output lines of a follower (``kubectl logs -f``) as they come; the reader stopping (close,
    Ctrl+C) stops it."""
    import subprocess

    proc = subprocess.Popen(
        list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, encoding="utf-8", errors="replace"
    )
    try:
        assert proc.stdout is not None
        yield from proc.stdout
    finally:
        if proc.poll() is None:
            proc.terminate()
        proc.wait()


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, ppid) of a process, None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            text = handle.read()
    except OSError:
        return None
    fields = text[text.rfind(b")") + 2 :].split()
    return fields[0].decode(), int(fields[1])


def alive(pid: int) -> bool:
    """True when ``pid`` exists and is not a zombie."""
    stat = _stat(pid)
    return stat is not None and stat[0] not in ("Z", "X")


def stopped(pid: int) -> bool:
    """True when ``pid`` is stopped (SIGSTOP, SIGTSTP, or a tracer holds it)."""
    stat = _stat(pid)
    return stat is not None and stat[0] in ("T", "t")


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def descendants(*roots: int) -> set[int]:
    """Every live process below ``roots`` in the process tree."""
    children: dict[int, list[int]] = {}
    for pid in _pids():
        stat = _stat(pid)
        if stat is not None and stat[0] not in ("Z", "X"):
            children.setdefault(stat[1], []).append(pid)
    found: set[int] = set()
    stack = list(roots)
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def marked(launch_id: str) -> set[int]:
    """Live processes whose environment carries this launch's marker."""
    needle = f"{LAUNCH_ID_VAR}={launch_id}".encode()
    found = set()
    me = os.getpid()
    for pid in _pids():
        if pid == me:
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as handle:
                env = handle.read()
        except OSError:
            continue
        if needle in env.split(b"\0") and alive(pid):
            found.add(pid)
    return found


def environ(pid: int) -> dict[str, str]:
    """A process's environment as it was started ({} when it cannot be read)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            raw = handle.read()
    except OSError:
        return {}
    pairs = (entry.decode(errors="replace").split("=", 1) for entry in raw.split(b"\0") if b"=" in entry)
    return dict(pairs)


def cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return [part.decode(errors="replace") for part in handle.read().split(b"\0") if part]
    except OSError:
        return []


def parent(pid: int) -> int | None:
    stat = _stat(pid)
    return None if stat is None else stat[1]


def signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def kill(pids: Iterable[int], signum: int = signal.SIGKILL) -> None:
    for pid in pids:
        try:
            os.kill(pid, signum)
        except (ProcessLookupError, PermissionError):
            pass


def send(pid: int, pidfd: int | None, signum: int) -> None:
    """``signum`` to the process ``pidfd`` holds (never to a process that reused its pid since it
    was checked); by ``pid`` where the kernel has no pidfds. Closes ``pidfd``."""
    try:
        if pidfd is None:
            os.kill(pid, signum)
        else:
            signal.pidfd_send_signal(pidfd, signum)
    except (ProcessLookupError, PermissionError):
        pass
    finally:
        if pidfd is not None:
            os.close(pidfd)


def reap(pids: Iterable[int]) -> None:
    """Collect the exit status of those of ``pids`` that are our children (no zombies left)."""
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass


def reap_zombie_children(exclude: Iterable[int] = ()) -> None:
    """Collect re-parented orphans that have exited (a subreaper must, or they stay zombies)."""
    me, skip = os.getpid(), set(exclude)
    for pid in _pids():
        stat = _stat(pid)
        if stat is not None and stat[1] == me and stat[0] == "Z" and pid not in skip:
            reap([pid])


REMOVE_TIMEOUT_S = 30.0  # docker/podman rm -f NAME of a container left behind


def remove_container(argv: Sequence[str], timeout: float = REMOVE_TIMEOUT_S) -> int | None:
    """Run a container's removal by name (docker/podman ``rm -f NAME``: launcher/container.py's
    ``remove_argv``) to its end, its output discarded: its exit code (None: it could not start, or ran
    past ``timeout`` and was killed). The supervisor's clean-up, the watchdog's after a SIGKILLed
    launcher, the image check's after a container that did not start in time."""
    import subprocess

    try:
        done = subprocess.run(
            list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=timeout
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.returncode
