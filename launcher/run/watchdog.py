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


def parse(raw: bytes) -> tuple[str, object] | None:
    """One line of the channel: ``("pgid", N)``, ``("remove", ARGV)``, ``("done", None)``; None: a
    line it does not know (malformed: ignored, never a crash, or the launch would be left behind).

    >>> parse(b"pgid 12\\n"), parse(b'remove ["podman", "rm", "-f", "c"]\\n'), parse(b"done\\n")
    (('pgid', 12), ('remove', ['podman', 'rm', '-f', 'c']), ('done', None))
    >>> [parse(line) for line in (b"remove\\n", b"remove [\\n", b"remove {}\\n", b"pgid x\\n", b"\\xff\\n", b"\\n")]
    [None, None, None, None, None, None]
    """
    import json

    words = raw.decode(errors="replace").split(None, 1)
    word, rest = (words + ["", ""])[:2]
    if word == "done":
        return ("done", None)
    if word == "pgid" and rest.strip().isdigit():
        return ("pgid", int(rest))
    if word == "remove":
        try:
            value = json.loads(rest)
        except ValueError:
            return None
        if isinstance(value, list) and value:
            return ("remove", [str(part) for part in value])
    return None


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
        told = parse(raw)
        if told is None:
            print(f"watchdog: ignored a malformed line ({len(raw)} bytes)", file=sys.stderr, flush=True)
        elif told[0] == "done":
            return 0
        elif told[0] == "pgid":
            groups.append(told[1])
        else:
            removals.append(told[1])
    sweep(launch_id, groups)
    for remove in removals:  # a container its runtime kept after the launcher's client died
        procs.remove_container(remove)
    if status is not None:
        from .. import record  # only now: the watchdog's start-up stays small

        record.write_killed(status, launcher_pid)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
