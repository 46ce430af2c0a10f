"""The run record: a directory per launch with what was run, how, and how it ended. Every name in
it is launcher/rundir.py's (the run directory's one contract); this module writes the record:
config.yaml, command.sh, env.json, composition.json (what the user typed, secret values masked: enough
to launch it again, ``runs rerun``/``runs resume``: launcher/runs/again.py) and status.json (start and
end time, exit code, the reason as text and as a :class:`~launcher.rundir.Reason`, the failure).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import sys
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from . import __version__, files, goodput, secrets
from .names import PROG
from .rundir import (
    ATTEMPT_DIR,
    COMMAND,
    COMPOSITION,
    CONFIG,
    ENV,
    FLIGHT_RECORDER,
    LOGS,
    OUTCOME_KEY,
    STACKS,
    STATUS,
    TRACKERS,
    Reason,
    RunPaths,
    node_name,
)

if TYPE_CHECKING:  # the plan is imported where a record is written from one (``runs`` reads records without it)
    from .plan import LaunchPlan

# what a composition notes besides what was typed (launcher/runs/again.py)
RERUN_OF, RESUMED_FROM = "rerun_of", "resumed_from"
# ... and a resumed run's trainer directory (where its training script continues: TRAIN_MULTIGPU_RUN_DIR)
TRAINER_DIR = "trainer_dir"
NOTES = (RERUN_OF, RESUMED_FROM, TRAINER_DIR)


def run_dir_name(run_name: str | None, node_rank: int | None = None) -> str:
    """``<date_time>[_<run_name>][_node<R>]`` for a run started now (node: a multi-node launch)."""
    stamp = datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    return stamp + (f"_{run_name}" if run_name else "") + (f"_{node_name(node_rank)}" if node_rank is not None else "")


def create_run_dir(root: str, run_name: str | None, node_rank: int, multinode: bool) -> Path:
    """A new directory ``<root>/<run_dir_name>``, never one that exists. A run root others may rename
    entries in is said once on stderr (:func:`open_to_others`)."""
    path = fresh_dir(Path(root) / run_dir_name(run_name, node_rank if multinode else None))
    why = open_to_others(path.parent)
    if why is not None:
        print(
            f"[{PROG}] warning: run_root {path.parent} {why}: another user can move this run's directory "
            f"away and put one of theirs in its place, and the launch then writes its records where theirs "
            f"points; give the run root the sticky bit (chmod +t {path.parent}) as /tmp has (docs/runs.md)",
            file=sys.stderr,
            flush=True,
        )
    return path


def open_to_others(directory: Path) -> str | None:
    """Why users other than this one may rename entries of ``directory`` (write permission there for
    them, and no sticky bit), or None.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> os.chmod(d, 0o777); open_to_others(d)
    'is writable by every user without the sticky bit'
    >>> os.chmod(d, 0o1777); open_to_others(d) is None
    True
    >>> os.chmod(d, 0o700); open_to_others(d) is None; d.rmdir()
    True
    """
    try:
        st = os.stat(directory)
    except OSError:
        return None
    if st.st_mode & 0o1000:  # sticky: only an entry's owner (or the directory's) renames it
        return None
    if st.st_mode & 0o002:
        return "is writable by every user without the sticky bit"
    if st.st_uid != os.geteuid() and st.st_mode & 0o200:
        return "belongs to another user who can write it"
    if st.st_mode & 0o020 and _others_in_group(st.st_gid):
        return "is writable by its group without the sticky bit"
    return None


def _others_in_group(gid: int) -> bool:
    """Whether group ``gid`` may hold users other than this one: any group but this user's own, or
    this user's own when another user lists it (as a member, or as their primary group: a shared
    ``users``); a private group (umask 002's) holds this user alone."""
    import grp
    import pwd

    if gid != os.getegid():
        return True
    uid = os.geteuid()
    try:
        me = pwd.getpwuid(uid).pw_name
        if set(grp.getgrgid(gid).gr_mem) - {me}:
            return True
    except KeyError:
        return True
    return any(user.pw_gid == gid and user.pw_uid != uid for user in pwd.getpwall())


def fresh_dir(path: Path) -> Path:
    """``path`` created, or ``<path>-<N>`` if it exists (taken since it was named): never one that exists."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for attempt in range(1000):
        candidate = path if attempt == 0 else path.with_name(f"{path.name}-{attempt}")
        try:
            candidate.mkdir()
            return candidate.resolve()
        except FileExistsError:
            continue
    raise RuntimeError(f"could not create a run directory under {path.parent}")


# what set_aside moves: a launch's own record, never what else a given run_dir= holds (the trainer's
# checkpoints and metrics, a submitted job's records, its node<R>/ and restart<N>/ directories)
_RECORD_NAMES = (CONFIG, COMMAND, ENV, COMPOSITION, STATUS, LOGS, STACKS, FLIGHT_RECORDER)
PREVIOUS = "previous"  # <record dir>/previous<N>/: the record of a launcher that recorded here before


class StillRecording(Exception):
    """The record directory's status.json is open and its launcher still runs on this host."""

    def __init__(self, pid: int) -> None:
        super().__init__(pid)
        self.pid = pid


def set_aside(path: Path) -> Path | None:
    """Before a launcher records into a directory it was given (``run_dir=``'s ``node<R>/``) where one
    recorded before: that record moved whole into ``previous<N>/`` (N = 1, 2, ...), so the new
    status.json never overwrites a predecessor's (which may say how it was lost). None: nothing there.
    Raises :class:`StillRecording` when that record is open and its launcher still runs here (two
    launchers for one node: the second one records nothing)."""
    status = RunPaths(path).status
    if not os.path.lexists(status):
        return None
    try:
        data = files.read_json(status, files.JSON_MAX, path)
    except OSError:  # unreadable, not a file: moved aside as it is
        data = None
    if isinstance(data, dict) and data.get("exit_code") is None and data.get("host") == socket.gethostname():
        pid, started = data.get("pid"), data.get("pid_start")
        if isinstance(pid, int) and not isinstance(pid, bool) and pid > 0 and pid != os.getpid():
            if isinstance(started, int) and process_start(pid) == started:
                raise StillRecording(pid)
    for number in range(1, 10000):
        aside = path / f"{PREVIOUS}{number}"
        try:
            aside.mkdir()
            break
        except FileExistsError:
            continue
    else:  # pragma: no cover - ten thousand predecessors
        raise OSError(f"no free {PREVIOUS}<N> in {path}")
    names = set(os.listdir(path))
    for name in [*_RECORD_NAMES, *sorted(n for n in names if ATTEMPT_DIR.match(n))]:
        if name in names:
            os.rename(path / name, aside / name)
    return aside


def command_script(plan: LaunchPlan) -> str:
    from . import plan as plan_mod

    lines = ["#!/usr/bin/env bash", "# written by train_multigpu: the exact launch, re-runnable", "set -euo pipefail"]
    # secret values (secrets.is_secret) are read from the caller's environment, never written
    lines += [secrets.export_line(key, value) for key, value in plan.env.items()]
    masked = secrets.mask_plan(plan)
    processes = masked.processes
    if len(processes) == 1:
        lines.append(plan_mod.shell_line(masked, processes[0]))
    else:
        # one line per rank, all in the background; the first failure ends the script
        lines += [plan_mod.shell_line(masked, process) + " &" for process in processes]
        lines.append("wait -n && wait")
    return "\n".join(lines) + "\n"


def composition(overrides, line, cwd: str, notes: dict | None = None) -> dict:
    """``composition.json``: the Hydra overrides in the order typed (Isaac Lab's flags as the
    overrides they became; secret values masked, ``***``), the training script's arguments, the typed
    order of what reaches the script (grammar.CommandLine.order), Hydra's flags, ``--num_gpus`` as
    typed, the working directory and the launcher's version; ``notes``: ``rerun_of``/``resumed_from``.

    >>> from types import SimpleNamespace as NS
    >>> line = NS(script_args=["--headless"], order=["task", ""], hydra_flags=[], num_gpus=None)
    >>> c = composition(["task=X", "+worker_env.HF_TOKEN=***1,***2"], line, "/w", {"rerun_of": "r1"})
    >>> c["overrides"], c["script_args"], c["rerun_of"]
    (['task=X', '+worker_env.HF_TOKEN=***'], ['--headless'], 'r1')
    """
    hydra_flags = [flag for flag in line.hydra_flags if flag not in ("-m", "--multirun")]
    data = {
        "overrides": [mask_placeholders(override) for override in overrides],
        "script_args": list(line.script_args),
        "order": list(line.order),
        "hydra_flags": hydra_flags,
        "num_gpus": line.num_gpus,
        "cwd": cwd,
        "version": __version__,
    }
    data.update({key: value for key, value in (notes or {}).items() if key in NOTES and value})
    return data


def mask_placeholders(override: str) -> str:
    """A secret override as recorded: its value ``***``; a sweep job's keeps the number of its value
    (``***2``: the second value typed for that key, ``config.grammar.hide``'s placeholder), so the jobs of a
    sweep over secret values are told apart (``runs``' SWEPT column) without recording any value.

    >>> mask_placeholders("+worker_env.HF_TOKEN=***2"), mask_placeholders("+worker_env.HF_TOKEN=***1,***2")
    ('+worker_env.HF_TOKEN=***2', '+worker_env.HF_TOKEN=***')
    >>> mask_placeholders("+worker_env.HF_TOKEN=abc"), mask_placeholders("seed=1")
    ('+worker_env.HF_TOKEN=***', 'seed=1')
    >>> mask_placeholders("+worker_env.HF_TOKEN=${oc.env:T}")  # a reference holds no secret value
    '+worker_env.HF_TOKEN=${oc.env:T}'
    """
    if re.fullmatch(r"[^=]*=\$\{[^${}]*\}", override):
        return override
    masked = secrets.mask_override(override)
    key, eq, value = masked.partition("=")
    if eq and value.startswith(secrets.MASK):
        placeholder = override.partition("=")[2]
        return f"{key}={placeholder if is_placeholder(placeholder) else secrets.MASK}"
    return masked


def is_placeholder(value: str) -> bool:
    """``***`` or a sweep's numbered ``***<n>``: what a record holds where a secret value was.

    >>> is_placeholder("***"), is_placeholder("***12"), is_placeholder("***1,***2"), is_placeholder("abc")
    (True, True, False, False)
    """
    return re.fullmatch(re.escape(secrets.MASK) + r"\d*", value) is not None


def read_composition(run_dir: str | Path, within: str | Path | None = None) -> dict | None:
    """A run directory's composition.json, or None when it is missing, unreadable or not an object
    (read as files.read_json reads a record: a regular file in ``within``, capped, NaN as null)."""
    try:
        data = files.read_json(Path(run_dir) / COMPOSITION, files.JSON_MAX, within)
    except OSError:
        return None
    return data if isinstance(data, dict) else None


def read_trackers(run_dir: str | Path, within: str | Path | None = None) -> dict:
    """A run directory's trackers.json (its W&B and MLflow runs: launcher/trackers/identity.py), or
    ``{}`` when it is missing, unreadable or not an object (read as :func:`read_composition` reads)."""
    try:
        data = files.read_json(Path(run_dir) / TRACKERS, files.JSON_MAX, within)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_start(
    run_dir: Path, resolved_yaml: str, plan: LaunchPlan, composed: dict | None = None, queue_s: float = 0.0
) -> float:
    """The record's opening: config.yaml, composition.json, command.sh, env.json, status.json;
    ``queue_s``: how long the job waited in a batch queue before this launcher started (the ledger's)."""
    where = RunPaths(run_dir)
    where.config.write_text(resolved_yaml)
    if composed is not None:
        write_json(where.composition, composed)
    where.command.write_text(command_script(plan))
    where.command.chmod(0o755)
    write_json(where.env, secrets.mask_env(plan.env))
    started = write_opened(run_dir)
    _ledgers[str(run_dir)] = (launch_began(started), world_size(plan), queue_s)
    return started


# -- the goodput ledger's frame (launcher/goodput.py): when each open record's launch began, its ranks --
_ledgers: dict[str, tuple[float, int, float]] = {}
# the launcher process's own start counts for its first launch only (a sweep's later jobs: their record's)
_began_used = False


def launch_began(opened: float) -> float:
    """When the launch whose record opens at ``opened`` began: this process's start for its first
    launch (the launcher's own start-up counts), ``opened`` for the next ones (a sweep's later jobs)."""
    global _began_used
    if _began_used:
        return opened
    _began_used = True
    started = process_started()
    return started if started is not None and started <= opened else opened


def process_started() -> float | None:
    """This process's start, epoch seconds (/proc: its start in clock ticks since boot + the boot time)."""
    ticks, boot = process_start(os.getpid()), boot_time()
    if ticks is None or boot is None:
        return None
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def boot_time() -> float | None:
    """The machine's boot, epoch seconds (/proc/stat's btime); None: no /proc. A process's start in
    ticks (:func:`process_start`) counts from it."""
    try:
        with open("/proc/stat") as handle:
            return next((float(line.split()[1]) for line in handle if line.startswith("btime ")), None)
    except (OSError, ValueError, IndexError):
        return None


def world_size(plan: LaunchPlan) -> int:
    """The launch's ranks on every node (the ledger's rank-seconds)."""
    nodes = str(plan.nnodes).rsplit(":", 1)[-1]
    return max(1, plan.nproc_per_node) * (int(nodes) if nodes.isdigit() else 1)


def ledger_fields(run_dir: Path, started: float, now: float, attempts: Sequence, live: bool) -> dict:
    """status.json's ``launch_began``, ``phases`` and ``goodput`` (launcher/goodput.py) as of ``now``."""
    began, ranks, queue = _ledgers.get(str(run_dir), (started, 1, 0.0))
    phases = [attempt.phase() if hasattr(attempt, "phase") else dict(attempt) for attempt in attempts]
    led = goodput.ledger(began, now, phases, ranks, queue, tail=goodput.RESTART if live else goodput.TEARDOWN)
    return {goodput.BEGAN_KEY: round(began, 3), goodput.PHASES_KEY: phases, goodput.KEY: led}


# status.json's proof that its pid is the launcher that wrote it: that process holds the record's
# directory open until it closes the record (launcher/runs/read.py's verified_launcher checks it)
HOLDS_KEY = "pid_holds_dir"
_HELD: dict[str, int] = {}  # record directory -> the descriptor this process holds open on it


def write_opened(run_dir: Path) -> float:
    """status.json, opened by this process: its start time; ``write_end`` closes it.

    The process holds ``run_dir`` open (O_CLOEXEC: no child inherits it) until ``write_end``: the
    proof ``runs stop``/``runs stacks`` ask for before they signal the pid a record names (anyone can
    copy a record and put any pid and start time in it; nobody can make another user's process hold
    a directory open, and /proc/<pid>/fd is readable only by the process's owner and root)."""
    started = time.time()
    pid = os.getpid()
    hold(run_dir)
    # pid + its start time (+ host): a reader tells a live launcher from a dead one whose pid was reused
    opened = {"started": _iso(started), "pid": pid, "pid_start": process_start(pid), "host": socket.gethostname()}
    write_json(RunPaths(run_dir).status, {**opened, HOLDS_KEY: True, "exit_code": None})
    _reserves[str(run_dir)] = files.Reserve(run_dir)  # write_end's, should the disk fill up meanwhile
    return started


# the space each open record holds for its close (files.Reserve; a SIGKILLed launcher's goes with it)
_reserves: dict[str, files.Reserve] = {}


def hold(run_dir: Path) -> None:
    """Hold ``run_dir`` open (once per directory) until :func:`release`."""
    key = os.path.realpath(run_dir)
    if key not in _HELD:
        _HELD[key] = os.open(key, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def release(run_dir: Path) -> None:
    fd = _HELD.pop(os.path.realpath(run_dir), None)
    if fd is not None:
        os.close(fd)


def process_start(pid: int) -> int | None:
    """A process's start time in clock ticks since boot (field 22 of /proc/<pid>/stat), None when
    there is no such process (or no /proc). launcher/runs/read.py compares it."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read().decode(errors="replace")
        return int(data[data.rindex(")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def write_end(
    run_dir: Path,
    started: float,
    exit_code: int,
    reason: str,
    outcome: Reason,
    failure: dict | None = None,
    stragglers: tuple[dict, ...] | list[dict] = (),
    attempts: Sequence = (),
    phases: Sequence = (),
) -> dict:
    """``reason``: how the launch ended, for people; ``outcome``: the same as a
    :class:`~launcher.rundir.Reason`, what readers decide on. ``stragglers``: the ranks named slow
    (run/monitor/stragglers.py); the key is written only when there were any. ``attempts``:
    run/attempts.Attempt of a launch with restarts on (the key only then); ``phases``: every
    attempt (run/attempts.Attempt, restarts on or off): the goodput ledger (launcher/goodput.py).
    Returns the ledger written."""
    ended = time.time()
    status = {
        "started": _iso(started),
        "ended": _iso(ended),
        "duration_s": round(ended - started, 3),
        "exit_code": exit_code,
        "reason": reason,
        OUTCOME_KEY: Reason(outcome).value,
        "failure": failure,
    }
    if stragglers:
        status["stragglers"] = list(stragglers)
    if attempts:
        status[ATTEMPTS_KEY] = attempts_json(attempts)
    if str(run_dir) in _ledgers or phases or attempts:  # (submit=ssh's own record: its nodes' hold the ledgers)
        status.update(ledger_fields(run_dir, started, ended, phases or attempts, live=False))
    _ledgers.pop(str(run_dir), None)
    path = RunPaths(run_dir).status
    reserve = _reserves.pop(str(run_dir), None)
    try:
        try:
            write_json(path, status)
        except OSError as err:
            if not (files.out_of_space(err) and reserve is not None and reserve.release()):
                raise
            write_json(path, status)  # in the space the record held for this
    except OSError as err:
        with contextlib.suppress(OSError, ValueError):
            print(
                f"[{PROG}] could not close the run record {path}: {err.strerror or err} "
                f"(the launch ended with exit code {exit_code}: {reason})",
                file=sys.stderr,
                flush=True,
            )
    finally:
        release(run_dir)  # closed: nothing signals this process from this record any more
        if reserve is not None:
            reserve.release()
    return status.get(goodput.KEY) or {}


ATTEMPTS_KEY = "attempts"


def attempts_json(attempts: Sequence) -> list[dict]:
    """status.json's ``attempts``: each run/attempts.Attempt with its times as ISO text."""
    return [{**a.as_dict(), "started": _iso(a.started), "ended": _iso(a.ended)} for a in attempts]


def write_attempts(run_dir: Path, attempts: Sequence) -> dict:
    """The attempts so far into the open status.json (``runs`` shows them while the launch runs),
    with the goodput ledger as of now (launcher/goodput.py); returns that ledger ({}: not written)."""
    path = RunPaths(run_dir).status
    try:
        status = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(status, dict) or status.get("exit_code") is not None:
        return {}
    status[ATTEMPTS_KEY] = attempts_json(attempts)
    status.update(ledger_fields(run_dir, _opened(status), time.time(), attempts, live=True))
    try:
        write_json(path, status)
    except OSError as err:  # a full disk: the launch goes on, its close writes them all
        if files.out_of_space(err):
            files.say_out_of_space(path, err)
    return status.get(goodput.KEY) or {}


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
    status[OUTCOME_KEY] = Reason.LAUNCHER_KILLED.value
    status.pop(HOLDS_KEY, None)  # the proof of a live launcher: this one is gone
    write_json(path, status)
    return True


def _opened(status: dict) -> float:
    try:
        return datetime.fromisoformat(status["started"]).timestamp()
    except (KeyError, TypeError, ValueError):
        return time.time()


def _iso(stamp: float) -> str:
    return datetime.fromtimestamp(stamp).astimezone().isoformat(timespec="seconds")


def write_json(path: Path, data: dict) -> None:
    """Write ``data`` as indented JSON atomically (:func:`files.replace_whole`): readers see the old file
    or the new one, never half, whoever else writes it at the same time (two nodes' launchers, a
    launcher and its watchdog; run/worker.py, a separate stdlib-only program, keeps its own copy for
    the exit records). A write that fails (a full disk) leaves no temporary file behind."""
    files.replace_whole(path, (json.dumps(data, indent=2) + "\n").encode())
