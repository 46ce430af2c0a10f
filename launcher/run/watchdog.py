"""The watchdog: a tiny process that outlives a SIGKILLed launcher and kills what it left behind.

``python -m launcher.run.watchdog LAUNCH_ID`` is started by the supervisor in its own session (so a
Ctrl+C on the terminal does not reach it) with a pipe on stdin whose other end only the launcher
holds. The launcher writes ``pgid N`` for every group it starts and ``done`` after its own
clean-up. End of file without ``done`` means the launcher died without cleaning up (SIGKILL, a
crash): the watchdog then SIGKILLs every group it was told about and every process carrying the
launch's marker, until none is left, removes the containers it was told about (``remove ARGV``: a
docker/podman container outlives its client), and records the end in the run's ``status.json`` (its second
argument) when that record is the launcher's and still open: exit code 137, ``reason: launcher
killed`` (see :func:`launcher.record.write_killed`).
"""

from __future__ import annotations

import os
import signal
import sys
import time

from .process import procs

SWEEP_S = 10.0


def _argv(text: str) -> list[str]:
    """``remove ["podman", "rm", "-f", NAME]``: the command that removes a container by name."""
    import json

    try:
        value = json.loads(text)
    except ValueError:
        return []
    return [str(word) for word in value] if isinstance(value, list) else []


def sweep(launch_id: str, groups: list[int]) -> None:
    deadline = time.monotonic() + SWEEP_S
    quiet_rounds = 0
    while time.monotonic() < deadline and quiet_rounds < 3:
        for pgid in groups:
            procs.signal_group(pgid, signal.SIGKILL)
        left = procs.marked(launch_id)
        procs.kill(left)
        quiet_rounds = 0 if left else quiet_rounds + 1
        time.sleep(0.05)


def main(argv: list[str]) -> int:
    launch_id = argv[0]
    status = argv[1] if len(argv) > 1 else None
    launcher_pid = os.getppid()  # read now: once the launcher is gone the parent is someone else
    for signum in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)
    groups: list[int] = []
    removals: list[list[str]] = []
    for raw in sys.stdin.buffer:
        line = raw.decode(errors="replace")
        words = line.split()
        if words[:1] == ["done"]:
            return 0
        if len(words) == 2 and words[0] == "pgid" and words[1].isdigit():
            groups.append(int(words[1]))
        if words[:1] == ["remove"]:
            removals.append(_argv(line.split(None, 1)[1]))
    sweep(launch_id, groups)
    for remove in removals:  # a container its runtime kept after the launcher's client died
        if remove:
            procs.remove_container(remove)
    if status is not None:
        from .. import record  # only now: the watchdog's start-up stays small

        record.write_killed(status, launcher_pid)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
