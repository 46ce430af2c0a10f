"""Run directories read back: one directory → one :class:`RunInfo`, a run root → every run.

No Hydra, no YAML parser, and cheap: a listing reads ``status.json``, a few lines of
``config.yaml`` (OmegaConf writes a plain block layout), the tail of ``metrics.csv`` and, for
a launch that never wrote its end, ``/proc/<pid>/stat``. Whatever cannot be read is ``None`` (shown
as ``?``) and named in ``RunInfo.problems``; nothing here raises on a bad directory.

Layout under the run root (docs/runs.md)::

    <root>/<stamp>[_<run_name>]/                 a launch (record.create_run_dir)
    <root>/<stamp>[_<run_name>]_node<R>/         one node of a multi-node launch on this host
    <root>/multirun/<stamp>/<job number>/        the jobs of a -m sweep (Hydra's sweep dir)
    <dir with submit.json>[/restart<N>][/node<R>]/   a submitted job (slurm, ray, k8s), its restarts and nodes
"""

from __future__ import annotations

import functools
import json
import os
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from datetime import datetime
from pathlib import Path
from typing import NamedTuple

from .. import files
from ..backends.base import FORMAT, Handle, id_problem, known_format
from ..errors import UserError
from ..names import swept
from ..record import HOLDS_KEY, TRAINER_DIR, boot_time, process_start, read_composition
from ..rundir import (
    COMMAND,
    COMPOSITION,
    CONFIG,
    LOGS,
    METRICS,
    MULTIRUN,
    NODE_DIR,
    RAY_JOB,
    RESTART_DIR,
    RUN_INFO,
    STATUS,
    SUBMIT,
    Reason,
    reason_of,
)

RECORD_FILES = (STATUS, CONFIG, COMMAND, SUBMIT, LOGS)
STAMP = re.compile(r"^(\d{4}-\d{2}-\d{2})_(\d{2})-(\d{2})-(\d{2})")
NODE_SUFFIX = re.compile(r"^(.+)_node(\d+)(-\d+)?$")
LAST = "last"

# statuses (docs/runs.md); "?" when the record does not say
RUNNING, SUCCESS, FAILED, HANG, INTERRUPTED, LOST, QUEUED, SUBMITTED, UNKNOWN = (
    "running",
    "success",
    "failed",
    "hang",
    "interrupted",
    "lost",
    "queued",
    "submitted",
    "?",
)


@dataclass
class RunInfo:
    """What a run directory says about its launch. Field names are the ``--json`` output's (stable,
    documented in docs/runs.md); ``None`` means the record does not say."""

    id: str  # the directory's path relative to the run root
    run_dir: str
    status: str = UNKNOWN
    exit_code: int | None = None
    reason: str | None = None
    outcome: str | None = None  # how it ended (status.json's outcome: rundir.Reason's value); None: not ended
    started: str | None = None  # ISO 8601 with the UTC offset, as status.json has it
    ended: str | None = None
    duration_s: float | None = None
    topology: str | None = None
    nnodes: str | None = None
    nproc_per_node: str | None = None
    node_rank: int | None = None
    task: str | None = None
    run_name: str | None = None
    rl_library: str | None = None
    last_return: float | None = None  # the trainer's last mean_return (metrics.csv)
    failure: dict | None = None  # {rank, node, exit_code, signal, class, hint, exception, log}
    group: str | None = None  # the sweep's or the multi-node launch's id
    group_kind: str | None = None  # "sweep" | "nodes"
    job: int | None = None  # a sweep job's number
    swept: list[str] | None = None  # a sweep job's own overrides (those not shared by all its sweep's jobs)
    pid: int | None = None
    host: str | None = None
    slurm: dict | None = None  # {job_id, state, log}
    ray: dict | None = None  # {job_id, state, address}: submit=ray
    remote: dict | None = None  # {backend, id, state, detail}: a submitted run, as its back end says
    stragglers: list | None = None  # [{rank, iteration_s, median_s}] the launch named (status.json)
    # a launch with restarts (restart.max): [{attempt, started, ended, exit_code, reason, outcome, cause,
    # iterations, resumed_from, progress, decision}] (status.json, docs/recovery.md)
    attempts: list | None = None
    # where the time went (status.json's goodput: seconds per category, wall_s, rank_seconds,
    # iterations_redone, line; docs/goodput.md); None: a record older than the ledger
    goodput: dict | None = None
    trainer_dir: str | None = None  # where the trainer wrote (checkpoints, metrics): run_dir, or a resumed run's
    record_dirs: list[str] = field(default_factory=list)  # where status.json / logs/ are (per node, restart)
    problems: list[str] = field(default_factory=list)  # what could not be read
    start_time: float | None = field(default=None, repr=False)  # epoch seconds, for sorting
    endpoint: str | None = field(default=None, repr=False)  # where the nodes met, for grouping them
    within: str | None = field(default=None, repr=False)  # what its files may be read from (files.py)
    handle: Handle | None = field(default=None, repr=False)  # a submitted run's, from its record
    handle_uid: int | None = field(default=None, repr=False)  # who owns the file the handle was read from
    typed: list[str] | None = field(default=None, repr=False)  # a sweep job's overrides (its composition.json)

    def as_dict(self) -> dict:
        """The ``--json`` object (shallow: the nested values are plain JSON values already)."""
        values = self.__dict__
        return {name: values[name] for name in _JSON_FIELDS}


_JSON_FIELDS = tuple(f.name for f in fields(RunInfo) if f.repr)  # start_time, endpoint: internal


# -- small readers (every file through launcher/files.py: regular files only, capped, in the root) --
def _read_json(path: str | Path, problems: list[str], within: str | None = None, limit: int = files.JSON_MAX):
    """A JSON object, or None (missing; or unreadable, named in ``problems``)."""
    return _read_owned(path, problems, within, limit)[0]


def _read_owned(path: str | Path, problems: list[str], within: str | None = None, limit: int = files.JSON_MAX):
    """:func:`_read_json`'s object and the uid owning the file it came from ((None, None) without one)."""
    name = os.path.basename(path)
    try:
        data, owner = files.read_json_owned(path, limit, within)
    except FileNotFoundError:
        return None, None
    except OSError as err:
        problems.append(f"{name}: {err.strerror or err}")
        return None, None
    if not isinstance(data, dict):
        problems.append(f"{name}: not a JSON object")
        return None, None
    return data, owner


def _scalar(text: str) -> str | None:
    """A YAML scalar as OmegaConf writes it: plain, 'single' or "double" quoted; null → None."""
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] == "'":
        return text[1:-1].replace("''", "'")
    if len(text) >= 2 and text[0] == text[-1] == '"':
        try:
            return str(json.loads(text))
        except ValueError:
            return text[1:-1]
    if text in ("null", "~", ""):
        return None
    return text.split(" #")[0].strip()


_WANTED = frozenset(
    {
        "task",
        "run_name",
        "launcher.topology",
        "launcher.nnodes",
        "launcher.nproc_per_node",
        "launcher.node_rank",
        "rl_library.name",
        "rl_library.ml_framework",
        "launcher.rdzv_endpoint",
        "launcher.coordinator_address",
        "launcher.master_addr",
        "launcher.master_port",
    }
)


def config_values(text: str, wanted: frozenset[str] | set[str] = _WANTED) -> dict[str, str | None]:
    """The wanted top-level and second-level keys of a block-style YAML file, without a YAML parser
    (one regular expression over the text: fast enough for a thousand files).

    >>> config_values("launcher:\\n  topology: single_node\\n  nnodes: '1'\\ntask: Pendulum-v1\\n")
    {'launcher.topology': 'single_node', 'launcher.nnodes': '1', 'task': 'Pendulum-v1'}
    """
    found: dict[str, str | None] = {}
    section = ""
    for match in _pattern(frozenset(wanted)).finditer(text):
        header, indent, key, value = match.groups()
        if header is not None:
            section = header
            continue
        name = f"{section}.{key}" if indent else key
        if name in wanted:
            found[name] = _scalar(value)
    return found


@functools.lru_cache(maxsize=8)
def _pattern(wanted: frozenset[str]) -> re.Pattern:
    """Block headers (``launcher:``) and the lines of the wanted keys, at indent 0 or 2."""
    leaves = "|".join(sorted({re.escape(name.rsplit(".", 1)[-1]) for name in wanted}))
    return re.compile(rf"^(?:([A-Za-z_][\w-]*):[ \t]*(?:#.*)?$|( {{2}})?({leaves}):[ \t]+(\S.*?)[ \t]*$)", re.M)


def last_return(path: str | Path, within: str | None = None) -> float | None:
    """The last finite ``mean_return`` of the bundled trainers' metrics.csv."""
    try:
        fd, info = files.open_fd(path, within)
        try:  # its first line and its last 4 KiB, however large it is (or grows)
            head, tail = os.pread(fd, 4096, 0), os.pread(fd, 4096, max(0, info.st_size - 4096))
        finally:
            os.close(fd)
    except OSError:
        return None
    header = head.split(b"\n", 1)[0].decode(errors="replace").strip().split(",")
    lines = tail.decode(errors="replace").splitlines()
    if "mean_return" not in header:
        return None
    column = header.index("mean_return")
    for line in reversed(lines[1:]):  # the header, or a line cut by the seek
        cells = line.split(",")
        if len(cells) != len(header):
            continue
        try:
            value = float(cells[column])
        except ValueError:
            continue
        if value == value and value not in (float("inf"), float("-inf")):
            return value
    return None


def _stamp_time(name: str) -> float | None:
    match = STAMP.match(name)
    if not match:
        return None
    try:
        return _shown(datetime.strptime(match.group(0), "%Y-%m-%d_%H-%M-%S").timestamp())
    except (ValueError, OverflowError, OSError):
        return None


def _shown(stamp: float) -> float | None:
    """``stamp`` when it is a local time this machine can show (a year 1..9999), else None."""
    try:
        datetime.fromtimestamp(stamp)
    except (ValueError, OverflowError, OSError):
        return None
    return stamp


def _iso_time(text) -> float | None:
    """An ISO 8601 time as epoch seconds; None: not one, or out of the range a date can show."""
    if not isinstance(text, str) or len(text) > 64:
        return None
    try:
        return _shown(datetime.fromisoformat(text).timestamp())
    except (ValueError, OverflowError, OSError):
        return None


def small_int(text) -> int | None:
    """``text`` as an int when it is plain ASCII digits (at most 18: ``²`` is a digit to str.isdigit
    and no int; a 5,000-digit one is past int()'s limit).

    >>> small_int("12"), small_int("²"), small_int("9" * 5000), small_int(None)
    (12, None, None, None)
    """
    if isinstance(text, str) and 0 < len(text) <= 18 and text.isascii() and text.isdigit():
        return int(text)
    return None


def _number(value) -> float | None:
    """A finite number from a record (JSON's NaN and Infinity already read as null by files.py)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        value = float(value)
    except OverflowError:
        return None
    return value if value == value and abs(value) != float("inf") else None


# -- is the launcher alive? ---------------------------------------------------------------------
def _zombie(pid: int) -> bool:
    """Ended, not yet reaped by its parent (state Z or X in /proc/<pid>/stat)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return True
    return data[data.rindex(b")") + 2 : data.rindex(b")") + 3] in (b"Z", b"X")


HOST = socket.gethostname()


def launcher_alive(status: dict) -> bool | None:
    """Is the launcher that opened this record still running? None: it ran on another host.

    The pid alone is not enough (pids are reused): the process's start time must be the one the
    launcher recorded (``pid_start``), or, in records from before ``pid_start``, not later than the
    record's start."""
    pid = status.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    host = status.get("host")
    if isinstance(host, str) and host and host != HOST:
        return None
    ticks = process_start(pid)
    if ticks is None or _zombie(pid):
        return False
    recorded = status.get("pid_start")
    if isinstance(recorded, int) and not isinstance(recorded, bool):
        return ticks == recorded
    started, boot = _iso_time(status.get("started")), boot_time()
    if started is None or boot is None:
        return True  # an old record: the pid is all there is
    return boot + ticks / os.sysconf("SC_CLK_TCK") <= started + 2.0


class NotItsLauncher(Exception):
    """Why the pid a record names is not signalled (``runs stop``, ``runs stacks``), in words: the
    caller makes it the one-line UserError of the id the user typed."""


def verified_launcher(status: dict, record_dir: str | Path) -> tuple[int, int | None]:
    """The launcher that wrote the open record ``status`` of ``record_dir``, proven, before anything
    signals it: (its pid, a pidfd of it -- None where the kernel has none -- for the caller to signal
    through and close). Raises :class:`NotItsLauncher` unless every one holds:

    - the pid is greater than 1 (pid 1 is init, 0 and below signal groups) and runs on this host;
    - the record is of the form that can prove its launcher (``pid_holds_dir``): an older record is
      shown by ``runs`` and never signalled;
    - the process has the start time the record names (``pid_start``: not a reused pid);
    - it belongs to the user running ``runs`` or to the owner of the record (root stopping a user's run);
    - it holds the record's directory open (record.write_opened): what makes it *this* record's
      launcher. Start times can be read by anyone (/proc/<pid>/stat), a directory held open cannot be
      faked (/proc/<pid>/fd is readable only by its owner and root, and no one can make another's
      process open a directory; the descriptor is close-on-exec: no rank inherits it)."""
    pid = status.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 1:
        raise NotItsLauncher(f"its record names pid {pid!r}, which is no launcher's: not signalled")
    recorded = status.get("pid_start")
    if status.get(HOLDS_KEY) is not True or not isinstance(recorded, int) or isinstance(recorded, bool):
        raise NotItsLauncher(
            f"its record (pid {pid}) is of an older form that cannot prove its launcher: runs shows it but never "
            "signals it (stop the launch where it runs)"
        )
    try:
        pidfd = os.pidfd_open(pid) if hasattr(os, "pidfd_open") else None
    except (ProcessLookupError, OverflowError):  # (a pid no kernel gives)
        raise NotItsLauncher("already ended (lost: its launcher is gone): nothing to stop") from None
    except OSError:  # a kernel without pidfds (before 5.3): checked, then signalled by pid
        pidfd = None
    try:
        _prove(pid, recorded, record_dir)
    except BaseException:
        if pidfd is not None:
            os.close(pidfd)
        raise
    return pid, pidfd


def _prove(pid: int, recorded: int, record_dir: str | Path) -> None:
    """The checks of :func:`verified_launcher` on the process ``pid`` (already held by a pidfd)."""
    if process_start(pid) != recorded or _zombie(pid):
        raise NotItsLauncher("already ended (lost: its launcher is gone): nothing to stop")
    try:
        owner = os.stat(f"/proc/{pid}").st_uid
        writer = os.stat(os.path.join(record_dir, STATUS)).st_uid
        place = os.stat(record_dir)
    except OSError as err:
        raise NotItsLauncher(f"cannot check pid {pid}: {err.strerror or err}: not signalled") from None
    if owner not in (os.geteuid(), writer):
        raise NotItsLauncher(
            f"pid {pid} belongs to uid {owner}, neither you nor the record's owner (uid {writer}): not signalled"
        )
    wanted = os.path.realpath(record_dir)
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError as err:
        raise NotItsLauncher(
            f"cannot check that pid {pid} is its launcher (/proc/{pid}/fd: {err.strerror or err}): not signalled"
        ) from None
    # the inode decides; only descriptors whose path ends as the directory's are looked at (a path
    # seen from another mount namespace may differ before it; nothing else is stat'ed: no file system
    # the launcher has open, a slow network one included, is asked)
    tail = os.sep + os.path.basename(wanted)
    for fd in fds:
        link = f"/proc/{pid}/fd/{fd}"
        try:
            if os.readlink(link).endswith(tail):
                held = os.stat(link)
                if (held.st_dev, held.st_ino) == (place.st_dev, place.st_ino):
                    return
        except OSError:
            continue
    raise NotItsLauncher(
        f"pid {pid} does not hold this run directory open: it is not the launcher that wrote this record "
        "(a copied or forged record): not signalled"
    )


# -- one record ---------------------------------------------------------------------------------
def status_of(status: dict | None, problems: list[str]) -> str:
    """The run's status from its status.json (docs/runs.md, "Statuses")."""
    if status is None:
        return UNKNOWN
    code = status.get("exit_code")
    if code is not None and (not isinstance(code, int) or isinstance(code, bool)):
        problems.append(f"status.json: exit_code {code!r} is not a number")
        return UNKNOWN
    if code is None:
        alive = launcher_alive(status)
        if alive is None:
            problems.append(f"launched on {status.get('host')}: cannot check from {HOST} whether it still runs")
            return UNKNOWN
        return RUNNING if alive else LOST
    return _STATUS_OF.get(reason_of(status), FAILED)


# how a launch ended (status.json's outcome, or an older record's reason: rundir.reason_of) -> its status
_STATUS_OF = {
    Reason.SUCCEEDED: SUCCESS,
    Reason.LAUNCHER_KILLED: LOST,
    Reason.HANG: HANG,
    Reason.INTERRUPTED: INTERRUPTED,
    Reason.FAIL_FAST_STOP: INTERRUPTED,
}


def _failure(data) -> dict | None:
    if not isinstance(data, dict):
        return None
    keys = ("rank", "node", "local_rank", "exit_code", "signal", "class", "hint", "exception", "log")
    return {key: data.get(key) for key in keys}


def _ranks_from_command(path: str, within: str | None) -> str | None:
    try:
        text = files.read_text(path, files.TEXT_MAX, within)
    except OSError:
        return None
    match = re.search(r"--nproc_per_node[ =](\d+)", text)
    return match.group(1) if match else None


def _apply_status(info: RunInfo, status: dict | None) -> None:
    info.status = status_of(status, info.problems)
    if status is None:
        return
    code = status.get("exit_code")
    info.exit_code = code if isinstance(code, int) and not isinstance(code, bool) else None
    info.reason = status.get("reason") if isinstance(status.get("reason"), str) else None
    ended = reason_of(status) if info.exit_code is not None else None  # an older record's: from its reason
    info.outcome = ended.value if ended is not None else None
    for key in ("started", "ended"):
        if isinstance(status.get(key), str):
            setattr(info, key, status[key])
            if _iso_time(status[key]) is None:
                info.problems.append(f"status.json: {key} {status[key][:40]!r} is not a time this machine can show")
    duration = _number(status.get("duration_s"))
    if duration is not None:
        info.duration_s = duration
    elif info.status == RUNNING and _iso_time(info.started) is not None:
        info.duration_s = round(datetime.now().timestamp() - _iso_time(info.started), 3)
    info.failure = _failure(status.get("failure"))
    if isinstance(status.get("stragglers"), list):
        info.stragglers = [item for item in status["stragglers"] if isinstance(item, dict)]
    if isinstance(status.get("attempts"), list):
        info.attempts = [item for item in status["attempts"] if isinstance(item, dict)]
    if isinstance(status.get("goodput"), dict):
        info.goodput = status["goodput"]
    pid = status.get("pid")
    info.pid = pid if isinstance(pid, int) and not isinstance(pid, bool) else None
    info.host = status.get("host") if isinstance(status.get("host"), str) else None


def _apply_config(info: RunInfo, *directories: str | Path) -> None:
    """The config.yaml of the first of ``directories`` that has one."""
    for directory in directories:
        try:
            text = files.read_text(os.path.join(directory, CONFIG), files.CONFIG_MAX, info.within)
            break
        except FileNotFoundError:
            continue
        except OSError as err:
            info.problems.append(f"{CONFIG}: {err.strerror or err}")
            return
    else:
        info.problems.append(f"{CONFIG}: missing")
        return
    values = config_values(text)
    info.topology = values.get("launcher.topology")
    info.nnodes = values.get("launcher.nnodes")
    info.nproc_per_node = values.get("launcher.nproc_per_node")
    node_rank = values.get("launcher.node_rank")
    info.node_rank = small_int(node_rank)
    info.task = values.get("task")
    info.run_name = values.get("run_name")
    info.rl_library = values.get("rl_library.name")
    endpoint = [values.get(f"launcher.{key}") for key in ("rdzv_endpoint", "coordinator_address", "master_addr")]
    info.endpoint = " ".join(str(value) for value in [*endpoint, values.get("launcher.master_port")])
    if info.topology is None:
        info.problems.append(f"{CONFIG}: no launcher.topology")


def _resumed_in(path: str, within: str) -> str | None:
    """The ``trainer_dir`` a resumed run's composition.json names (None: not a resumed run's, or a
    directory outside ``within``: a record names no place outside the run root to be read)."""
    data = read_composition(path, within)
    value = data.get(TRAINER_DIR) if data else None
    if not isinstance(value, str) or "\0" in value or not files.inside(value, within):
        return None
    return value


def read(run_dir: Path, id_: str | None = None, root: str | Path | None = None) -> RunInfo:
    """Everything the record in ``run_dir`` says (never raises). ``root``: the run root it was found
    under; no file is read from outside it (a symbolic link out of it is refused, named in
    ``problems``). Without a root, from outside the run directory."""
    path = os.path.abspath(run_dir)  # strings, not Path objects: a listing reads a thousand of these
    within = os.path.abspath(root) if root is not None else path
    info = RunInfo(id=id_ or os.path.basename(path), run_dir=path, within=within)
    if "\0" in path or (os.path.islink(path) and not files.inside(path, within)):  # files.py checks each file too
        info.problems.append(f"{path}: a symbolic link out of {within}: not read")
        info.start_time = 0.0
        return info
    try:
        names = files.listed(path, within)
    except (OSError, ValueError) as err:
        info.problems.append(f"{path}: {getattr(err, 'strerror', None) or err}")
        info.start_time = 0.0
        return info
    handle = None
    if SUBMIT in names or RAY_JOB in names:
        handle, info.handle_uid = handle_of(path, names, within, info.problems)
    if (SUBMIT in names or RAY_JOB in names) and (handle is None or handle.backend != "none"):
        _read_submitted(info, Path(path), names, handle)  # a submitted job: the records of its nodes
    else:
        info.handle = handle  # a local launch's own submit.json, if it wrote one
        info.record_dirs = [path]
        status = _read_json(os.path.join(path, STATUS), info.problems, within) if STATUS in names else None
        _apply_status(info, status)
        if STATUS not in names:
            info.problems.append(f"{STATUS}: missing (the launch never started, or the directory is not a run's)")
        _apply_config(info, path)
    if info.nproc_per_node is not None and small_int(info.nproc_per_node) is None:
        command = os.path.join(info.record_dirs[0], COMMAND) if info.record_dirs else None
        counted = _ranks_from_command(command, within) if command else None
        info.nproc_per_node = counted or info.nproc_per_node
    info.trainer_dir, trained = path, names
    resumed = None
    if METRICS not in names and RUN_INFO not in names and COMPOSITION in names:
        resumed = _resumed_in(path, within)  # `runs resume`: the trainer went on in the resumed run
    if resumed is not None:
        try:
            trained = files.listed(resumed, within)
            info.trainer_dir = resumed
        except (FileNotFoundError, NotADirectoryError):  # not a directory (any more): not resumed there
            pass
        except OSError:
            info.trainer_dir, trained = resumed, set()
    if info.task is None and RUN_INFO in trained:  # the bundled trainers' resolved arguments
        trainer = _read_json(os.path.join(info.trainer_dir, RUN_INFO), [], within)
        info.task = trainer.get("task") if trainer and isinstance(trainer.get("task"), str) else None
    if METRICS in trained:
        info.last_return = last_return(os.path.join(info.trainer_dir, METRICS), within)
    info.start_time = _iso_time(info.started) or _stamp_time(os.path.basename(path))
    if info.start_time is None:
        try:
            info.start_time = os.stat(path).st_mtime
        except OSError:
            info.start_time = 0.0
    if info.started is None and info.start_time:
        try:
            info.started = datetime.fromtimestamp(info.start_time).astimezone().isoformat(timespec="seconds")
        except (ValueError, OverflowError, OSError):
            pass
    return info


# the order in which node records decide a multi-node SLURM job's status
_PRIORITY = (RUNNING, LOST, HANG, FAILED, INTERRUPTED, UNKNOWN, SUCCESS)


def handle_of(
    run_dir: str, names: set[str], within: str | None, problems: list[str]
) -> tuple[Handle | None, int | None]:
    """The handle recorded in ``run_dir``, and the uid owning the file it was read from: submit.json
    (format 2; format 1, SLURM's ``job_id``; the Kubernetes submitter's older ``{kind, name,
    namespace}``), else the Ray submitter's older ray_job.json; (None, None) when neither names a job."""
    name = SUBMIT if SUBMIT in names else RAY_JOB if RAY_JOB in names else None
    if name is None:
        return None, None
    data, owner = _read_owned(os.path.join(run_dir, name), problems, within)
    if name == SUBMIT:
        found = _submitted(data, run_dir, problems) if data is not None else None
    else:
        found = _ray_job(data or {}, run_dir, problems)
    return found, (owner if found is not None else None)


def _submitted(data: dict, run_dir: str, problems: list[str]) -> Handle | None:
    if not known_format(data):  # never dispatched: shown as what it is
        problems.append(
            f"{SUBMIT}: format {str(data.get('format'))[:20]!r} is not one this train_multigpu reads "
            f"({FORMAT}): not asked, not stopped"
        )
        return None
    found = Handle.from_record(data, run_dir)
    if found is None and "format" not in data and isinstance(data.get("name"), str) and "kind" in data:
        extra = {k: data[k] for k in ("kind", "namespace", "manifest") if isinstance(data.get(k), str)}
        found = Handle("k8s", data["name"], run_dir, extra)
    if found is None:
        problems.append(f"{SUBMIT}: names no submitted job (no backend and id)")
    elif id_problem(found) is not None:  # never on a scheduler's command line (a forged ``--me``)
        problems.append(f"{SUBMIT}: {id_problem(found)}: not asked, not stopped")
        return None
    return found


def _ray_job(data: dict, run_dir: str, problems: list[str]) -> Handle | None:
    if not isinstance(data.get("job_id"), str):
        problems.append(f"{RAY_JOB}: no job_id")
        return None
    extra = {k: data[k] for k in ("address", "state") if isinstance(data.get(k), str)}
    found = Handle("ray", data["job_id"], run_dir, extra)
    if id_problem(found) is not None:
        problems.append(f"{RAY_JOB}: {id_problem(found)}: not asked, not stopped")
        return None
    return found


def _read_submitted(info: RunInfo, run_dir: Path, names: set[str], handle: Handle | None) -> None:
    """A submitted job (submit=slurm|ray|k8s): its handle, then the record of its latest restart,
    each node's (the launcher its job runs writes them, where the run directory is shared)."""
    info.handle = handle
    if handle is not None:
        info.remote = {"backend": handle.backend, "id": handle.id, "state": None, "detail": None}
    if handle is not None and handle.backend == "ray":
        address = handle.extra.get("address")
        info.ray = {"job_id": handle.id, "state": handle.extra.get("state"), "address": address}
    elif handle is None and SUBMIT not in names:  # an unreadable ray_job.json
        info.ray = {"job_id": None, "state": None, "address": None}
    elif handle is not None and handle.backend == "slurm":  # (no handle: named in problems, no back end's)
        info.slurm = {"job_id": handle.id, "state": None, "log": handle.extra.get("log")}
    base = run_dir
    restarts = sorted((int(m.group(1)), n) for n in names if (m := RESTART_DIR.match(n)))
    if restarts:
        base = run_dir / restarts[-1][1]
    try:
        base_names = files.listed(base, info.within) if base != run_dir else names
    except OSError:
        base_names = set()
    nodes = sorted((int(m.group(1)), n) for n in base_names if (m := NODE_DIR.match(n)))
    records = [base / n for _, n in nodes] if nodes else ([base] if STATUS in base_names else [])
    info.record_dirs = [str(path) for path in records]
    statuses = []
    for path in records:
        node = RunInfo(id="", run_dir=str(path))
        _apply_status(node, _read_json(path / STATUS, info.problems, info.within))
        statuses.append(node)
    # the node's own config (the allocation's nnodes and ranks) when it has started, else the submission's
    _apply_config(info, *records[:1], run_dir)  # the node's own, else the submission's
    if not statuses:
        info.status = SUBMITTED if handle is not None else UNKNOWN  # a record that names no job it can read
        return
    first = min(statuses, key=lambda node: _PRIORITY.index(node.status) if node.status in _PRIORITY else 99)
    _apply_status(info, _read_json(Path(first.run_dir) / STATUS, [], info.within))
    info.problems += [p for p in first.problems if p not in info.problems]
    if info.exit_code == 0:  # a failed node's code wins over a finished one's 0
        info.exit_code = next((n.exit_code for n in statuses if n.exit_code), 0)


# -- the run root ---------------------------------------------------------------------------------
class Entry(NamedTuple):
    """A run directory found under the root, before it is read (a tuple: a listing makes ten
    thousand, a third of the time a frozen dataclass takes)."""

    id: str
    dir: str  # its absolute path (a string: a listing finds ten thousand)
    group: str | None = None
    group_kind: str | None = None
    job: int | None = None

    @property
    def path(self) -> Path:
        return Path(self.dir)


def _is_dir(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir()
    except OSError:
        return False


def _leaves(entry: os.DirEntry | str, root: str | Path) -> bool:
    """A link out of ``root``: a shared root's ``multirun`` or sweep folder pointing anywhere (/proc,
    a dead network mount) is not walked (a run directory that is one is shown, its files refused).
    ``entry``: a directory entry, or a path."""
    try:
        link = entry.is_symlink() if isinstance(entry, os.DirEntry) else os.path.islink(entry)
        return link and not files.inside(entry if isinstance(entry, str) else entry.path, root)
    except OSError:
        return True


def _looks_like_run(path: str, name: str) -> bool:
    if STAMP.match(name):
        return True
    return any(os.path.exists(os.path.join(path, item)) for item in RECORD_FILES)


def scan(root: Path, sweeps: bool = True) -> list[Entry]:
    """Every run directory under ``root`` (not read yet). A missing root has none. ``sweeps=False``:
    the sweeps' jobs left out (``multirun/`` not walked)."""
    root = os.path.abspath(root)
    found: list[Entry] = []
    try:
        top = sorted((e for e in os.scandir(root) if _is_dir(e)), key=lambda e: e.name)
    except OSError:
        return []
    for entry in top:
        if entry.name == MULTIRUN:
            found += [] if not sweeps or _leaves(entry, root) else _scan_multirun(Path(entry.path))
            continue
        if _looks_like_run(entry.path, entry.name):
            found.append(_top_entry(entry.name, entry.path))
    return found


def _top_entry(name: str, path: str) -> Entry:
    """A run directory right under the root: a launch, or one node of a multi-node launch."""
    node = NODE_SUFFIX.match(name)
    return Entry(name, path, node.group(1), "nodes") if node else Entry(name, path)


def _scan_multirun(multirun: Path) -> list[Entry]:
    found = []
    try:
        sweeps = sorted(
            (e for e in os.scandir(multirun) if _is_dir(e) and not _leaves(e, multirun)), key=lambda e: e.name
        )
    except OSError:
        return []
    for sweep in sweeps:
        found += _sweep_jobs(sweep.path, f"{MULTIRUN}/{sweep.name}")
    return found


def _sweep_jobs(sweep: str, group: str) -> list[Entry]:
    """The jobs of the sweep in the directory ``sweep`` (whose id is ``group``), in their order."""
    try:
        jobs = [e for e in os.scandir(sweep) if _is_dir(e)]
    except OSError:
        return []
    found = []
    for job in sorted(jobs, key=lambda e: (small_int(e.name) is None, small_int(e.name) or 0, e.name)):
        found.append(Entry(f"{group}/{job.name}", job.path, group, "sweep", small_int(job.name)))
    return found


def _sweep_dir(root: str, name: str) -> str | None:
    """``root``'s sweep directory ``multirun/<name>`` as :func:`scan` walks it (None: not one)."""
    if not name or name in (".", "..") or os.sep in name or "\0" in name:
        return None
    multirun, sweep = os.path.join(root, MULTIRUN), os.path.join(root, MULTIRUN, name)
    if not os.path.isdir(sweep) or _leaves(multirun, root) or _leaves(sweep, multirun):
        return None
    return sweep


def entry_of(root: str | Path, path: str | Path) -> Entry | None:
    """The entry :func:`scan` gives for the directory ``path`` under ``root``, found without listing
    the root (None: ``path`` is none of its runs): a name or a path costs its own directory only."""
    root, path = os.path.abspath(root), os.path.abspath(path)
    prefix = root.rstrip(os.sep) + os.sep
    if not path.startswith(prefix) or "\0" in path:
        return None
    parts = path[len(prefix) :].split(os.sep)
    if len(parts) == 1 and parts[0] != MULTIRUN:
        is_run = os.path.isdir(path) and _looks_like_run(path, parts[0])
        return _top_entry(parts[0], os.path.join(root, parts[0])) if is_run else None
    if len(parts) == 3 and parts[0] == MULTIRUN and parts[2] not in (".", ".."):
        sweep = _sweep_dir(root, parts[1])
        if sweep is None or not os.path.isdir(path):
            return None
        group = f"{MULTIRUN}/{parts[1]}"
        return Entry(f"{group}/{parts[2]}", os.path.join(sweep, parts[2]), group, "sweep", small_int(parts[2]))
    return None


def related(root: str | Path, entry: Entry) -> list[Entry]:
    """``entry`` and the runs its listing's row depends on: a sweep job's sweep (its swept values are
    the overrides not every job shares), a node's launch (every node directory under the root with
    its run name: :func:`_node_groups` tells them apart), else itself alone."""
    if entry.group_kind == "sweep":
        return _sweep_jobs(os.path.dirname(entry.dir), entry.group) or [entry]
    if entry.group_kind == "nodes":
        key = STAMP.sub("", entry.group)
        return [e for e in scan(root, sweeps=False) if e.group_kind == "nodes" and STAMP.sub("", e.group) == key]
    return [entry]


def sweep(root: str | Path, ident: str) -> list[RunInfo]:
    """The jobs of the sweep ``ident`` (``multirun/<time>`` or ``<time>``) names exactly, read and
    arranged as the listing has them ([]: no such sweep, or none of its jobs)."""
    root = os.path.abspath(root)
    name = ident[len(MULTIRUN) + 1 :] if ident.startswith(MULTIRUN + "/") else ident
    where = _sweep_dir(root, name)
    if where is None:
        return []
    return arranged([read_entry(entry, root) for entry in _sweep_jobs(where, f"{MULTIRUN}/{name}")])


def read_entry(entry: Entry, root: str | Path | None = None) -> RunInfo:
    """The run ``entry`` names, as the listing shows it (a sweep job's overrides read too)."""
    info = read(entry.dir, entry.id, root)
    info.group, info.group_kind, info.job = entry.group, entry.group_kind, entry.job
    if entry.group_kind == "nodes" and info.node_rank is None:
        info.node_rank = int(NODE_SUFFIX.match(os.path.basename(entry.dir)).group(2))
    if entry.group_kind == "sweep":
        overrides = (read_composition(info.run_dir, info.within) or {}).get("overrides")
        ok = isinstance(overrides, list) and all(isinstance(o, str) for o in overrides)
        info.typed = overrides if ok else None
    return info


NODE_WINDOW_S = 120.0  # the nodes of one launch start within this many seconds of each other


def _node_groups(runs: list[RunInfo]) -> None:
    """The nodes of one multi-node launch on this host: each node's launcher names its own directory
    ``<stamp>_<run name>_node<R>`` and the stamps may differ by a second or more. Nodes of one launch
    share the run name, the rendezvous (endpoint, coordinator or master address) and nnodes, start
    within NODE_WINDOW_S, and have distinct node ranks. The group's id: node 0's name without _node0."""
    pending = sorted((r for r in runs if r.group_kind == "nodes"), key=lambda r: (r.start_time or 0.0, r.id))
    by_key: dict[tuple, list[tuple[float, list[RunInfo]]]] = {}  # only a key's own clusters are looked at
    for run in pending:
        name = NODE_SUFFIX.match(Path(run.run_dir).name)
        key = (STAMP.sub("", name.group(1)) if name else run.id, run.endpoint, run.nnodes)
        same_key = by_key.setdefault(key, [])
        for first_start, members in same_key:
            if abs((run.start_time or 0.0) - first_start) <= NODE_WINDOW_S and run.node_rank not in {
                m.node_rank for m in members
            }:
                members.append(run)
                break
        else:
            same_key.append((run.start_time or 0.0, [run]))
    for _, members in (cluster for clusters in by_key.values() for cluster in clusters):
        members.sort(key=lambda r: (r.node_rank if r.node_rank is not None else 1 << 30, r.id))
        head = NODE_SUFFIX.match(Path(members[0].run_dir).name)
        group = head.group(1) if head else members[0].id
        for member in members:
            member.group = group


def _sweep_values(runs: list[RunInfo]) -> None:
    """Each sweep job's swept values, from its composition.json (the overrides of its point): the
    overrides not every job of its sweep shares. A job without a readable record has none."""
    jobs: dict[str, list[RunInfo]] = {}
    for run in runs:
        if run.group_kind == "sweep" and run.group is not None:
            jobs.setdefault(run.group, []).append(run)
    for members in jobs.values():
        known = [(member, member.typed) for member in members if member.typed is not None]
        for (member, _), own in zip(known, swept([overrides for _, overrides in known])):
            member.swept = list(own)


def read_all(root: Path, reader: Callable[[Entry, Path], RunInfo] = read_entry) -> list[RunInfo]:
    """Every run under ``root``, newest first (the jobs of a sweep and the nodes of a launch kept
    together, in their order, where the group's newest member would be). ``reader``: how one run
    is read (:func:`read_entry`, or the listing's cache of it: launcher/runs/cache.py)."""
    return arranged([reader(entry, root) for entry in scan(root)])


def arranged(runs: list[RunInfo]) -> list[RunInfo]:
    """``runs`` grouped (the nodes of a launch, a sweep's swept values) and in the listing's order."""
    _node_groups(runs)
    _sweep_values(runs)
    newest: dict[str, float] = {}
    for run in runs:
        key = run.group or run.id
        newest[key] = max(newest.get(key, 0.0), run.start_time or 0.0)
    runs.sort(key=lambda r: (r.job if r.job is not None else 0, r.node_rank or 0, r.id))
    runs.sort(key=lambda r: (newest[r.group or r.id], r.group or r.id), reverse=True)
    return runs


def group_of(root: Path, path: str | Path) -> list[RunInfo]:
    """The run in ``path`` and the runs of its group (its sweep, its launch's nodes), read as the
    listing reads them; only these are read, not the whole root ([]: ``path`` is no run of ``root``)."""
    entry = entry_of(root, path)
    return arranged([read_entry(e, root) for e in related(root, entry)]) if entry is not None else []


def find(root: Path, path: Path) -> RunInfo:
    """The run in ``path`` as the listing reads it (its sweep or multi-node group known)."""
    path = os.path.abspath(path)
    found = next((run for run in group_of(root, path) if run.run_dir == path), None)
    return found if found is not None else read(Path(path), root=root_of(root, Path(path)))


def root_of(root: Path, path: Path) -> str | None:
    """``root`` when the run directory ``path`` is under it (its files are read within the root),
    else None (a run directory named by its path: read within itself)."""
    root = os.path.abspath(root)
    return root if files.inside(path, root) else None


# -- ids ------------------------------------------------------------------------------------------
def _short(id_: str) -> str:
    return id_[len(MULTIRUN) + 1 :] if id_.startswith(MULTIRUN + "/") else id_


def resolve(root: Path, ident: str, reader: Callable[[Entry, Path], RunInfo] = read_entry) -> Path:
    """The run directory ``ident`` names under ``root``: its id, a unique prefix of it (``multirun/``
    may be left out of a sweep job's; a prefix of a multi-node launch's nodes names its first node),
    ``last`` (the newest run; of two in the same second, the later id: every run read, by
    ``reader``), or a run directory's path. An id is looked up where it would be, not searched."""
    root = Path(root)
    if ident != LAST:
        for candidate in (ident, f"{MULTIRUN}/{ident}"):
            exact = entry_of(root, os.path.join(os.path.abspath(root), candidate)) if candidate else None
            if exact is not None and ident in (exact.id, _short(exact.id)):
                return exact.path
    entries = scan(root)
    if ident == LAST:
        if not entries:
            raise UserError("id", ident, f"there are no runs under {root}", "launch one, or point --root elsewhere")
        runs = [reader(entry, root) for entry in entries]
        return Path(max(runs, key=lambda r: (r.start_time or 0.0, r.id)).run_dir)
    for entry in entries:
        if ident in (entry.id, _short(entry.id)):
            return entry.path
    matches = [e for e in entries if e.id.startswith(ident) or _short(e.id).startswith(ident)] if ident else []
    if len(matches) == 1 or (
        matches and matches[0].group_kind == "nodes" and all(e.group == matches[0].group for e in matches)
    ):  # one run; or the nodes of one multi-node launch: its first node's (logs reads every node's)
        return matches[0].path
    if matches:
        shown = ", ".join(e.id for e in matches[:3]) + (", ..." if len(matches) > 3 else "")
        raise UserError("id", ident, f"matches {len(matches)} runs ({shown})", "give more of the id")
    path = Path(ident)
    if ident and path.is_dir() and any((path / item).exists() for item in RECORD_FILES):
        return path.resolve()
    raise UserError("id", ident, f"no run under {root} has this id or prefix", "train_multigpu runs lists them")
