"""A running launch, seen from outside: each rank's progress (``logs/progress.json``, written by the
launcher's progress monitor; without it, the ``rank<R>.beat`` heartbeat files) and, on request, every
rank's stack (``runs stacks``: SIGUSR2 to the launcher, which writes ``stacks/<stamp>/``).

Both files belong to the diagnosis work (docs/runs.md names the contract); they are read
defensively: a file that is missing, half written or of another shape gives what it can.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import time
from pathlib import Path

from .. import files
from ..backends import local_state
from ..errors import UserError
from ..rundir import BEAT_FILE as BEAT
from ..rundir import PROGRESS, STACKS_SUMMARY, RunPaths
from . import cache, read

STALL_S = 60.0  # beat files only: a rank whose last beat is older than this is shown as stalled
STACK_SIGNAL = signal.SIGUSR2


def _number(value, kind=float):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return kind(value)


def _from_progress(data: dict) -> dict:
    ranks = {}
    raw = data.get("ranks") if isinstance(data.get("ranks"), dict) else {}
    for key, item in raw.items():
        if read.small_int(key) is None or not isinstance(item, dict):
            continue
        ranks[read.small_int(key)] = {
            "phase": item.get("phase") if isinstance(item.get("phase"), str) else None,
            "last_beat": _number(item.get("last_beat")),
            "last_output": _number(item.get("last_output")),
            "iteration": _number(item.get("iteration"), int),
            "total": _number(item.get("total"), int),
            "iter_per_s": _number(item.get("iter_per_s")),
            "stalled": bool(item.get("stalled")),
        }
    stragglers = [s for s in data.get("stragglers") or [] if isinstance(s, dict)]
    return {"source": PROGRESS, "updated": _number(data.get("updated")), "ranks": ranks, "stragglers": stragglers}


def _from_beats(log_dir: Path, now: float, within: str | None = None) -> dict:
    ranks = {}
    try:
        entries = list(os.scandir(log_dir))
    except OSError:
        entries = []
    for entry in entries:
        match = BEAT.match(entry.name)
        if not match:
            continue
        try:
            beat = entry.stat().st_mtime
            words = files.read_text(entry.path, files.BEAT_MAX, within).split()
        except (OSError, ValueError):
            continue
        iteration = read.small_int(words[0]) if words else None
        total = read.small_int(words[1]) if len(words) > 1 else None
        ranks[int(match.group(1))] = {
            "phase": "running",
            "last_beat": beat,
            "last_output": None,
            "iteration": iteration,
            "total": total,
            "iter_per_s": None,
            "stalled": now - beat > STALL_S,
        }
    return {"source": "beat files", "updated": now, "ranks": ranks, "stragglers": []}


def progress(info: read.RunInfo, dirs: list[Path] | None = None) -> dict | None:
    """Every rank's progress over the launch's nodes (``dirs``: their records; None: nothing to read)."""
    merged: dict | None = None
    now = time.time()
    for directory in dirs or info.record_dirs or [info.run_dir]:
        log_dir = RunPaths(directory).attempts()[-1].logs  # a launch restarted: its latest attempt's
        data = read._read_json(log_dir / PROGRESS, [], info.within, files.PROGRESS_MAX)
        part = _from_progress(data) if data is not None else _from_beats(log_dir, now, info.within)
        if not part["ranks"] and data is None:
            continue
        if merged is None:
            merged = part
        else:
            merged["ranks"].update(part["ranks"])
            merged["stragglers"] += part["stragglers"]
    if merged is not None:
        merged["ranks"] = {str(k): v for k, v in sorted(merged["ranks"].items())}
    return merged


def _ago(stamp: float | None, now: float) -> str:
    return "?" if stamp is None else f"{max(0.0, now - stamp):.0f}s ago"


def progress_lines(data: dict) -> list[str]:
    now = time.time()
    lines = [
        f"live:     from {data['source']}"
        + (f", updated {_ago(data.get('updated'), now)}" if data.get("updated") else "")
    ]
    for rank, item in data["ranks"].items():
        done = "?" if item["iteration"] is None else str(item["iteration"])
        if item["total"] is not None:
            done += f"/{item['total']}"
        rate = "" if item["iter_per_s"] is None else f", {item['iter_per_s']:.2f} it/s"
        flag = "  STALLED" if item["stalled"] else ""
        phase = f" ({item['phase']})" if item["phase"] and item["phase"] != "running" else ""
        lines.append(f"  rank {rank}: iteration {done}{rate}, last beat {_ago(item['last_beat'], now)}{phase}{flag}")
    stalled = [rank for rank, item in data["ranks"].items() if item["stalled"]]
    if stalled:
        lines.append(f"  stalled: rank {', '.join(stalled)}")
    for straggler in data.get("stragglers") or []:
        lines.append(
            f"  straggler: rank {straggler.get('rank')}: {straggler.get('iteration_s')} s per iteration "
            f"(median {straggler.get('median_s')} s)"
        )
    if not data["ranks"]:
        lines.append("  (no rank has reported yet)")
    return lines


# -- runs stacks ----------------------------------------------------------------------------------
def catches(pid: int, signum: int, mask: str = "SigCgt") -> bool:
    """Does process ``pid`` handle ``signum`` (SigCgt of /proc/<pid>/status)? A launcher that does
    not would die of it (SIGUSR2's default action ends the process). ``mask="SigIgn"``: does it
    ignore it (a launcher as its launch starts or ends)?"""
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith(f"{mask}:"):
                    return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


def _stack_dirs(stacks_dir: Path) -> set[str]:
    try:
        return {e.name for e in os.scandir(stacks_dir) if e.is_dir() and not e.name.endswith(".tmp")}
    except OSError:
        return set()


def stacks(args: argparse.Namespace) -> int:
    path = cache.resolve(args.root, args.id)
    info = read.read(path, root=read.root_of(args.root, path))
    record = Path(info.record_dirs[0]) if info.record_dirs else path
    status = read._read_json(record / read.STATUS, [], info.within)
    if status is None or status.get("exit_code") is not None or read.launcher_alive(status) is not True:
        state = info.status if status is not None else "no status.json"
        raise UserError(
            "id",
            args.id,
            f"is not running here ({state}): only a running launch on this host can be asked for its stacks",
        )
    try:  # the launcher that wrote this record, proven (a record can be copied or forged): else no signal
        pid, pidfd = read.verified_launcher(status, record)
    except read.NotItsLauncher as err:
        raise UserError("id", args.id, str(err)) from None
    try:
        if not catches(pid, STACK_SIGNAL):
            why = (
                "takes no stack requests now (SIGUSR2 ignored: its launch is starting or ending)"
                if catches(pid, STACK_SIGNAL, "SigIgn")
                else "does not take stack requests (SIGUSR2 not handled: an older train_multigpu)"
            )
            raise UserError("id", args.id, f"its launcher (pid {pid}) {why}")
        stacks_dir = RunPaths(info.run_dir).attempts()[-1].stacks  # a launch restarted: its latest attempt's
        before = _stack_dirs(stacks_dir)
    except BaseException:
        if pidfd is not None:
            os.close(pidfd)
        raise
    local_state.send(pid, pidfd, STACK_SIGNAL)  # a request, never a stop (run/process/signals.py); closes pidfd
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        new = sorted(_stack_dirs(stacks_dir) - before)
        if new:
            where = stacks_dir / new[-1]
            names = sorted(p.name for p in where.iterdir()) if where.is_dir() else []
            if args.json:
                print(json.dumps({"id": info.id, "stacks": str(where), "files": names}, indent=2))
            else:
                print(f"stacks: {where}")
                summary = where / STACKS_SUMMARY
                with contextlib.suppress(OSError):
                    print(files.read_text(summary, files.TEXT_MAX, info.within), end="")
            return 0
        if read.launcher_alive(status) is not True:
            raise UserError("id", args.id, "the launch ended before its stacks were written")
        time.sleep(0.1)
    raise UserError("--timeout", args.timeout, f"no new directory under {stacks_dir} in time")
