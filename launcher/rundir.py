"""The run directory as one contract: every path in it, and how a launch ended (as submitit's
``JobPaths`` knows every path of a job). A leaf, standard library only: the run record
(launcher/record.py) writes these files, ``run/`` writes the logs, beats, stacks and dumps, the back
ends their records, and ``runs`` reads them all back without importing Hydra.

::

    <run_dir>/config.yaml          the resolved config
    <run_dir>/command.sh           the exact command(s), re-runnable
    <run_dir>/env.json             the variables the launcher added (secret values masked)
    <run_dir>/composition.json     what the user typed (``runs rerun``/``resume``)
    <run_dir>/status.json          start, end, exit code, reason (text), outcome (a Reason), failure
    <run_dir>/trackers.json        the launch's W&B run id, group, its MLflow run (tracker=...)
    <run_dir>/submit.json          a submitted run's handle (backends/base.py: Handle)
    <run_dir>/ray_job.json         submit=ray's job record
    <run_dir>/job.sbatch           submit=slurm's batch script; slurm-<job id>.out its output
    <run_dir>/job.task             a sweep's job array: this point's command, read by its task's job.sbatch
    <run_dir>/job.tasks/<task>     (in an array's first point) links to each task's job.task, where
                                   run directories are not <sweep dir>/<task>
    <run_dir>/<kind>.yaml          submit=k8s's manifest (trainjob.yaml, pytorchjob.yaml)
    <run_dir>/stacks/<stamp>/      every rank's stack (rank<R>.txt, summary.txt)
    <run_dir>/nccl/                PyTorch's flight recorder dumps (trace_rank_<R>, pipe_rank_<R>.pipe)
    <run_dir>/metrics.csv, run_info.json, evaluation.json    the bundled trainers' own files
    <run_dir>/logs/rank<R>.log     a rank's output; torchrun.log torchrun's
    <run_dir>/logs/rank<R>.exit.json   a rank's non-zero exit (run/worker.py)
    <run_dir>/logs/rank<R>.beat    a rank's heartbeat (TRAIN_MULTIGPU_HEARTBEAT_FILE)
    <run_dir>/logs/rank<R>.cpus    the CPUs a rank started on (launcher.cpu_binding; run/worker.py)
    <run_dir>/logs/progress.json   the hang watchdog's view of this node's ranks
    <run_dir>/attempt<N>/          a restarted attempt's logs/, stacks/, nccl/ (restart.max; N >= 1: attempt 0
                                   writes where a launch without restarts does)
    <run_dir>/restart<N>/          a requeued SLURM job's record; node<R>/ one node's (submit=slurm)
    <run_dir>/node<R>/previous<N>/ the record of an earlier launcher of that node (record.set_aside)
    <run_root>/<stamp>[_<run_name>][_node<R>]/   a launch (record.run_dir_name); _node<R>: one node's

``run/worker.py`` runs under the user's interpreter without the package: it keeps its own copies of
the rank file names (tests/test_layout.py checks them against these).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from pathlib import Path

from .names import FR_DIR

# -- the record (launcher/record.py) ------------------------------------------------------------
CONFIG = "config.yaml"
COMMAND = "command.sh"
ENV = "env.json"
COMPOSITION = "composition.json"
STATUS = "status.json"
TRACKERS = "trackers.json"  # the launch's identity in its trackers (launcher/trackers/identity.py)
# -- back ends' records -------------------------------------------------------------------------
SUBMIT = "submit.json"
RAY_JOB = "ray_job.json"
SBATCH = "job.sbatch"
SBATCH_TASK = "job.task"  # a job array's task: its point's command (launcher/slurm/batch.render_task)
SBATCH_TASKS = "job.tasks"  # links to every task's file, by task number, where the script reads them
SLURM_OUT = "slurm-{job_id}.out"  # sbatch's default output name, %j the job id
# -- what a launch writes while it runs ----------------------------------------------------------
LOGS = "logs"
TORCHRUN_LOG = "torchrun.log"
RANK_PREFIX = "rank"
LOG_SUFFIX = ".log"
EXIT_SUFFIX = ".exit.json"
BEAT_SUFFIX = ".beat"
CPUS_SUFFIX = ".cpus"
PROGRESS = "progress.json"
STACKS = "stacks"
STACKS_SUMMARY = "summary.txt"
FLIGHT_RECORDER = FR_DIR
# -- the bundled trainers' own files -------------------------------------------------------------
METRICS = "metrics.csv"
RUN_INFO = "run_info.json"
EVALUATION = "evaluation.json"
# -- directories around a run --------------------------------------------------------------------
MULTIRUN = "multirun"  # <run_root>/multirun/<stamp>/<job number>/: a -m sweep (Hydra's sweep dir)
RESTART_DIR = re.compile(r"^restart(\d+)$")
ATTEMPT_DIR = re.compile(r"^attempt(\d+)$")
NODE_DIR = re.compile(r"^node(\d+)$")
EXIT_RECORD = re.compile(r"^rank(\d+)\.exit\.json$")
RANK_LOG = re.compile(r"^rank(\d+)\.log$")
BEAT_FILE = re.compile(r"^rank(\d+)\.beat$")
RANK_FILE = re.compile(r"^rank(\d+)\.(log|beat)$")  # a rank's log or heartbeat
CPUS_FILE = re.compile(r"^rank(\d{1,9})\.cpus$")  # the CPUs a rank started on


def rank_log_name(rank: int) -> str:
    """``rank<R>.log``.

    >>> rank_log_name(3)
    'rank3.log'
    """
    return f"{RANK_PREFIX}{rank}{LOG_SUFFIX}"


def exit_record_name(rank: int) -> str:
    return f"{RANK_PREFIX}{rank}{EXIT_SUFFIX}"


def beat_name(rank: int) -> str:
    return f"{RANK_PREFIX}{rank}{BEAT_SUFFIX}"


def cpus_name(rank: int) -> str:
    """The CPU list a rank started on: ``rank<R>.cpus`` (launcher.cpu_binding)."""
    return f"{RANK_PREFIX}{rank}{CPUS_SUFFIX}"


def stack_name(rank: int) -> str:
    """A rank's stack in ``stacks/<stamp>/``: ``rank<R>.txt``."""
    return f"{RANK_PREFIX}{rank}.txt"


def restart_name(count: int) -> str:
    """A requeued SLURM job's record: ``restart<N>`` (N > 0)."""
    return f"restart{count}"


def attempt_name(number: int) -> str:
    """A restarted attempt's directory: ``attempt<N>`` (N >= 1; attempt 0 is the run directory itself)."""
    return f"attempt{number}"


def record_root(log_dir: Path) -> Path:
    """The run directory whose status.json covers an attempt's ``logs`` directory.

    >>> str(record_root(Path("/r/run1/logs"))), str(record_root(Path("/r/run1/attempt2/logs")))
    ('/r/run1', '/r/run1')
    """
    parent = Path(log_dir).parent
    return parent.parent if ATTEMPT_DIR.match(parent.name) else parent


def node_name(node_rank: int) -> str:
    return f"node{node_rank}"


def slurm_out_name(job_id: str | None) -> str:
    """sbatch's output file of a job (``%j`` before it has an id).

    >>> slurm_out_name("42"), slurm_out_name(None)
    ('slurm-42.out', 'slurm-%j.out')
    """
    return SLURM_OUT.format(job_id=job_id or "%j")


def manifest_name(kind: str) -> str:
    """submit=k8s's manifest: ``<kind, lower case>.yaml``.

    >>> manifest_name("TrainJob")
    'trainjob.yaml'
    """
    return f"{kind.lower()}.yaml"


@dataclass(frozen=True)
class RunPaths:
    """Every path of one run directory (``root``). Pure: nothing is read, made or checked.

    >>> p = RunPaths("/r/run1")
    >>> str(p.status), str(p.rank_log(2)), str(p.restart(1).node(0).logs)
    ('/r/run1/status.json', '/r/run1/logs/rank2.log', '/r/run1/restart1/node0/logs')
    >>> str(p.attempt(0).logs), str(p.attempt(2).stacks)
    ('/r/run1/logs', '/r/run1/attempt2/stacks')
    """

    root: Path

    def __init__(self, root: str | Path) -> None:
        object.__setattr__(self, "root", Path(root))

    def _at(self, name: str) -> Path:
        return self.root / name

    config = property(lambda self: self._at(CONFIG))
    command = property(lambda self: self._at(COMMAND))
    env = property(lambda self: self._at(ENV))
    composition = property(lambda self: self._at(COMPOSITION))
    status = property(lambda self: self._at(STATUS))
    trackers = property(lambda self: self._at(TRACKERS))
    submit = property(lambda self: self._at(SUBMIT))
    ray_job = property(lambda self: self._at(RAY_JOB))
    sbatch = property(lambda self: self._at(SBATCH))
    logs = property(lambda self: self._at(LOGS))
    torchrun_log = property(lambda self: self.logs / TORCHRUN_LOG)
    progress = property(lambda self: self.logs / PROGRESS)
    stacks = property(lambda self: self._at(STACKS))
    flight_recorder = property(lambda self: self._at(FLIGHT_RECORDER))
    metrics = property(lambda self: self._at(METRICS))
    run_info = property(lambda self: self._at(RUN_INFO))
    evaluation = property(lambda self: self._at(EVALUATION))

    def rank_log(self, rank: int) -> Path:
        return self.logs / rank_log_name(rank)

    def exit_record(self, rank: int) -> Path:
        return self.logs / exit_record_name(rank)

    def beat(self, rank: int) -> Path:
        return self.logs / beat_name(rank)

    def slurm_out(self, job_id: str | None) -> Path:
        return self._at(slurm_out_name(job_id))

    def manifest(self, kind: str) -> Path:
        return self._at(manifest_name(kind))

    def restart(self, count: int) -> RunPaths:
        return RunPaths(self._at(restart_name(count)))

    def node(self, node_rank: int) -> RunPaths:
        return RunPaths(self._at(node_name(node_rank)))

    def attempt(self, number: int) -> RunPaths:
        """Attempt ``number``'s paths (logs, stacks, nccl): the run directory's own for attempt 0."""
        return self if number == 0 else RunPaths(self._at(attempt_name(number)))

    def attempts(self) -> list[RunPaths]:
        """Every attempt this run directory holds, in order (reads the directory)."""
        found = {0: self}
        try:
            for entry in self.root.iterdir():
                match = ATTEMPT_DIR.match(entry.name)
                if match and int(match.group(1)) > 0 and entry.is_dir():
                    found[int(match.group(1))] = RunPaths(entry)
        except OSError:
            pass
        return [found[n] for n in sorted(found)]


# -- how a launch ended ---------------------------------------------------------------------------
OUTCOME_KEY = "outcome"  # status.json's key for the Reason (``reason`` keeps the text, for people)


class Reason(str, enum.Enum):
    """How a launch ended, as status.json's ``outcome`` says it (``reason`` is the text for people)."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"  # a rank (or torchrun) failed
    PORT_IN_USE = "port_in_use"  # torchrun found its port taken: nothing trained
    NOT_STARTED = "not_started"  # nothing could be started
    INTERRUPTED = "interrupted"  # stopped by a signal (Ctrl+C, SIGTERM, SIGHUP)
    FAIL_FAST_STOP = "fail_fast_stop"  # stopped by its sweep (sweep.fail_fast), not failed itself
    HANG = "hang"  # the hang watchdog ended it (exit 124)
    NODE_LOST = "node_lost"  # another node of the launch went silent
    NODE_FAILED = "node_failed"  # another node's launch failed
    LAUNCHER_KILLED = "launcher_killed"  # the launcher was SIGKILLed; its watchdog closed the record
    NO_PROGRESS = "no_progress"  # restarted attempts made no progress (restart.max_without_progress)


class Source(str, enum.Enum):
    """Where a failure was seen (status.json's ``failure.source``); the values are the text older
    records hold, so old and new records read alike."""

    EXIT_RECORD = "exit record"  # logs/rank<R>.exit.json (run/worker.py)
    TORCHRUN_REPORT = "torchrun report"  # torchrun's Root Cause in logs/torchrun.log
    EXIT_STATUS = "exit status"  # the status of a process the launcher started
    GONE = "gone without an exit record"  # a rank that vanished (run/causes.py)
    HANG = "hang"  # this node's hang watchdog
    NODE_LIVENESS = "node liveness"  # a node lost
    NODE_FAILED = "node failed"  # a node whose launch failed
    NODE_HANG = "node hang"  # a hang another node found


def reason_of(status: dict) -> Reason | None:
    """The Reason a closed status.json records; for a record older than ``outcome`` (or one holding a
    value this version does not know), read from its ``reason`` text and exit code. None while the
    launch has no exit code.

    >>> reason_of({"exit_code": 130, "reason": "stopped by SIGINT", "outcome": "interrupted"})
    <Reason.INTERRUPTED: 'interrupted'>
    >>> [reason_of({"exit_code": c, "reason": r}).value for c, r in [(0, "success"), (130, "stopped by SIGINT"),
    ...  (2, "not started: x"), (137, "launcher killed"), (1, "rank failed"), (0, "")]]
    ['succeeded', 'interrupted', 'not_started', 'launcher_killed', 'failed', 'succeeded']
    """
    code = status.get("exit_code")
    if code is None:
        return None
    try:
        return Reason(status.get(OUTCOME_KEY))
    except (ValueError, TypeError):
        pass
    return _legacy(str(status.get("reason") or ""), code)


# the reason texts records wrote before ``outcome`` (supervise, session, record, sweep/lanes)
_LEGACY = {
    "success": Reason.SUCCEEDED,
    "launcher killed": Reason.LAUNCHER_KILLED,
    "hang": Reason.HANG,
    "node lost": Reason.NODE_LOST,
    "node failed": Reason.NODE_FAILED,
    "stopped (sweep.fail_fast)": Reason.FAIL_FAST_STOP,
    "no progress": Reason.NO_PROGRESS,
}


def _legacy(text: str, code) -> Reason:
    if text in _LEGACY:
        return _LEGACY[text]
    if text.startswith("stopped") or text.startswith("skipped"):
        return Reason.INTERRUPTED
    if text.startswith("not started"):
        return Reason.NOT_STARTED
    if re.fullmatch(r"port \d+ in use", text):
        return Reason.PORT_IN_USE
    return Reason.SUCCEEDED if code == 0 else Reason.FAILED
