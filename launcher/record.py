"""The run record: a directory per launch with what was run, how, and how it ended.

<run_dir>/config.yaml    the resolved config
<run_dir>/command.sh     the exact command(s), re-runnable
<run_dir>/env.json       the environment variables the launcher added (secret values masked)
<run_dir>/status.json    start and end time, exit code, reason, the failure (if any)
<run_dir>/logs/          rank<R>.log per rank, torchrun.log, rank<R>.exit.json per failed rank
"""

from __future__ import annotations

import json
import os
import time
from datetime import datetime
from pathlib import Path

from . import secrets
from .plan import LaunchPlan

STATUS = "status.json"


def run_dir_name(run_name: str | None, node_rank: int | None = None) -> str:
    """``<date_time>[_<run_name>][_node<R>]`` for a run started now (node: a multi-node launch)."""
    stamp = datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    return stamp + (f"_{run_name}" if run_name else "") + (f"_node{node_rank}" if node_rank is not None else "")


def create_run_dir(root: str, run_name: str | None, node_rank: int, multinode: bool) -> Path:
    """A new directory ``<root>/<run_dir_name>``, never one that exists."""
    name = run_dir_name(run_name, node_rank if multinode else None)
    Path(root).mkdir(parents=True, exist_ok=True)
    for attempt in range(1000):
        candidate = Path(root) / (name if attempt == 0 else f"{name}-{attempt}")
        try:
            candidate.mkdir()
            return candidate.resolve()
        except FileExistsError:
            continue
    raise RuntimeError(f"could not create a run directory under {root}")


def command_script(plan: LaunchPlan) -> str:
    lines = ["#!/usr/bin/env bash", "# written by train_multigpu: the exact launch, re-runnable", "set -euo pipefail"]
    # secret values (secrets.is_secret) are read from the caller's environment, never written
    lines += [secrets.export_line(key, value) for key, value in plan.env.items()]
    processes = secrets.mask_plan(plan).processes
    if len(processes) == 1:
        lines.append(processes[0].shell_line())
    else:
        # one line per rank, all in the background; the first failure ends the script
        lines += [process.shell_line() + " &" for process in processes]
        lines.append("wait -n && wait")
    return "\n".join(lines) + "\n"


def write_start(run_dir: Path, resolved_yaml: str, plan: LaunchPlan) -> float:
    (run_dir / "config.yaml").write_text(resolved_yaml)
    script = run_dir / "command.sh"
    script.write_text(command_script(plan))
    script.chmod(0o755)
    write_json(run_dir / "env.json", secrets.mask_env(plan.env))
    started = time.time()
    write_json(run_dir / STATUS, {"started": _iso(started), "pid": os.getpid(), "exit_code": None})
    return started


def write_end(
    run_dir: Path,
    started: float,
    exit_code: int,
    reason: str = "",
    failure: dict | None = None,
    stragglers: tuple[dict, ...] | list[dict] = (),
) -> None:
    """``stragglers``: the ranks named slow (run/stragglers.py); the key is written only when there were any."""
    ended = time.time()
    status = {
        "started": _iso(started),
        "ended": _iso(ended),
        "duration_s": round(ended - started, 3),
        "exit_code": exit_code,
        "reason": reason,
        "failure": failure,
    }
    if stragglers:
        status["stragglers"] = list(stragglers)
    write_json(run_dir / STATUS, status)


# what status.json says when the launcher itself was killed (written by its watchdog)
KILLED_EXIT_CODE = 137  # 128 + SIGKILL, what a shell reports for `kill -9`
KILLED_REASON = "launcher killed"


def write_killed(status_path: str, launcher_pid: int) -> bool:
    """Close the record of a launcher that died without cleaning up (the watchdog calls it after
    killing what the launcher left): only a record that launcher opened and never closed."""
    path = Path(status_path)
    try:
        status = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(status, dict) or status.get("exit_code") is not None or status.get("pid") != launcher_pid:
        return False
    ended = time.time()
    try:
        started = datetime.fromisoformat(status["started"]).timestamp()
    except (KeyError, TypeError, ValueError):
        started = ended
    status.update(
        ended=_iso(ended),
        duration_s=round(ended - started, 3),
        exit_code=KILLED_EXIT_CODE,
        reason=KILLED_REASON,
        failure=None,
    )
    write_json(path, status)
    return True


def _iso(stamp: float) -> str:
    return datetime.fromtimestamp(stamp).astimezone().isoformat(timespec="seconds")


def write_json(path: Path, data: dict) -> None:
    """Write ``data`` as indented JSON atomically: readers see the old file or the new one, never half
    (run/worker.py, a separate stdlib-only program, keeps its own copy for the exit records)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(path)
