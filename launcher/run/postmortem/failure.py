"""What failed, and how to say it: the failure summary printed at the end of a failed launch.

A rank's failure is known from, in order of preference:

1. its exit record ``logs/rank<R>.exit.json``, written by the worker wrapper on a non-zero exit or
   an uncaught exception (real exit code, exception, traceback);
2. torchrun's own report (``Root Cause (first observed failure)`` in ``logs/torchrun.log``), which
   also covers ranks killed by a signal (exit code -N);
3. the exit status of a process the launcher started itself (JAX ranks, or torchrun).
"""

from __future__ import annotations

import json
import re
import signal
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from ...rundir import EXIT_RECORD, Source
from .. import logs

TAIL_LINES = 20


@dataclass(frozen=True)
class Failure:
    node: int
    rank: int | None  # global rank; None when it is torchrun itself that failed
    local_rank: int | None
    exit_code: int  # shell convention: 128+N after signal N
    signal: str | None = None
    exception: str = ""
    time: float = 0.0
    source: str = ""  # a rundir.Source: "exit record", "torchrun report", "exit status", ...
    log: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def exit_code_of(returncode: int) -> int:
    """Shell convention: a process killed by signal N reports 128+N."""
    return 128 - returncode if returncode < 0 else returncode


def signal_name(returncode: int) -> str | None:
    """``SIGKILL`` for a process status of -9, None for an ordinary exit code."""
    if returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return None


def read_exit_records(log_dir: Path) -> list[Failure]:
    """The ranks that recorded a non-zero exit, first failure first."""
    found = []
    try:
        names = sorted(entry.name for entry in log_dir.iterdir())
    except OSError:
        return []
    for name in names:
        if not EXIT_RECORD.match(name):
            continue
        try:
            data = json.loads((log_dir / name).read_text())
        except (OSError, ValueError):
            continue
        code = int(data.get("exit_code", 1))
        if code == 0:
            continue
        rank = int(data["rank"])
        found.append(
            Failure(
                node=int(data.get("node", 0)),
                rank=rank,
                local_rank=int(data.get("local_rank", 0)),
                exit_code=exit_code_of(code),
                signal=None,
                exception=data.get("exception", ""),
                time=float(data.get("time", 0.0)),
                source=Source.EXIT_RECORD,
                log=str(logs.rank_log(log_dir, rank)),
            )
        )
    return sorted(found, key=lambda failure: failure.time)


_ROOT = re.compile(
    r"Root Cause \(first observed failure\):.*?rank\s*:\s*(\d+)\s*\(local_rank:\s*(\d+)\).*?exitcode\s*:\s*(-?\d+)",
    re.S,
)


def parse_torchrun_report(text: str, node: int, log_dir: Path) -> Failure | None:
    """The root cause in torchrun's ChildFailedError report.

    >>> report = '''Root Cause (first observed failure):
    ... [0]:
    ...   rank      : 1 (local_rank: 1)
    ...   exitcode  : -9 (pid: 11646)'''
    >>> f = parse_torchrun_report(report, 0, Path("logs"))
    >>> (f.rank, f.local_rank, f.exit_code, f.signal)
    (1, 1, 137, 'SIGKILL')
    """
    match = _ROOT.search(text)
    return _reported(match, node, log_dir) if match else None


# every worker entry of the report (``Failures:`` and ``Root Cause``)
_ENTRY = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank:\s*(\d+)\)\s*\n\s*exitcode\s*:\s*(-?\d+)")


def parse_torchrun_entries(text: str, node: int, log_dir: Path) -> list[Failure]:
    """Every failed worker torchrun's report names, in its order (run/postmortem/causes.py looks at them all)."""
    return [_reported(match, node, log_dir) for match in _ENTRY.finditer(text)]


def _reported(match: re.Match, node: int, log_dir: Path) -> Failure:
    rank, local, code = (int(group) for group in match.groups())
    return Failure(
        node=node,
        rank=rank,
        local_rank=local,
        exit_code=exit_code_of(code),
        signal=signal_name(code),
        source=Source.TORCHRUN_REPORT,
        log=str(logs.rank_log(log_dir, rank)),
    )


def summary(failure: Failure, tail: int = TAIL_LINES, cause: Sequence[str] = ()) -> str:
    """The few lines a user reads first after a failed launch (``cause``: its class, fix and
    followers, run/postmortem/causes.py)."""
    who = "torchrun" if failure.rank is None else f"rank {failure.rank} (local rank {failure.local_rank})"
    how = f"exit code {failure.exit_code}" + (f" ({failure.signal})" if failure.signal else "")
    lines = [f"FAILED: node {failure.node}, {who}: {how}", *cause]
    if failure.exception:
        lines.append(f"  error: {failure.exception}")
    if failure.log:
        lines.append(f"  log: {failure.log}")
        last = logs.last_lines(Path(failure.log), tail)
        if last:
            lines.append(f"  last {len(last)} line(s) of the log:")
            lines += [f"    | {line}" for line in last]
    return "\n".join(lines)
