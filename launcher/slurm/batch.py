"""Render a readable SLURM batch script that starts one launcher per node (PURE).

``render_sbatch(settings, command, env, workdir)`` returns the script text; nothing here runs
``sbatch`` or reads the environment.

How ``#SBATCH`` values are read (checked with sbatch 22.05): an unquoted value ends at the first
blank or ``#``; single and double quotes group; a backslash escapes the next character even
inside single quotes (so ``shlex.quote`` is NOT safe here); there is no ``$`` expansion. Values
are therefore written bare when they hold only safe characters, else in double quotes with
``\\`` and ``"`` escaped; control characters (newlines above all) are rejected.

Time-limit warning: ``--signal=B:USR1@N`` sends USR1 only to the batch shell, N seconds (SLURM
may be up to 60 s early) before the limit. The script traps it and forwards it to the ``srun``
process, which passes it on to the step. Measured on a real cluster (proctrack/linuxproc): a
signal delivered to a step -- forwarded by srun, or sent by SLURM itself with ``--signal=USR1@N``
(no ``B:``) -- reaches EVERY process of the step on every node, the launcher and all its workers,
even those in their own session. So without ``B:`` the outcome would be the same for the step,
but the batch shell could not log it; either way, workers must ignore or handle USR1 (Python's
default action for USR1 is to terminate). A launcher that wants only itself to act should start
its workers with USR1 set to SIG_IGN (an ignored disposition survives exec).

Bash runs a trap only after the foreground command returns, so ``srun`` runs in the background
and the shell ``wait``s for it, again after each trapped signal, then exits with srun's status.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence, Union

__all__ = ["SBATCH_LONG_OPTIONS", "SbatchError", "SlurmSettings", "render_sbatch"]


class SbatchError(ValueError):
    """A SLURM setting, command, environment or directory cannot be rendered safely."""


# Long options of sbatch 22.05 (from its man page) that make sense as #SBATCH directives.
# Left out: options modelled by SlurmSettings fields (see _FIELD_OPTIONS) and ones that do not
# belong in a script (help, usage, version, parsable, test-only, wrap, quiet, verbose).
SBATCH_LONG_OPTIONS = frozenset(
    """
    acctg-freq array batch bb bbf begin cluster-constraint clusters comment constraint container
    contiguous core-spec cores-per-socket cpu-freq cpus-per-gpu deadline delay-boot dependency
    distribution exclude exclusive export export-file extra-node-info get-user-env gid gpu-bind
    gpu-freq gpus gpus-per-socket gpus-per-task gres gres-flags hint hold ignore-pbs input
    kill-on-invalid-dep licenses mail-type mail-user mcs-label mem-bind mem-per-cpu mem-per-gpu
    mincpus network nice no-kill nodefile nodelist ntasks ntasks-per-core ntasks-per-gpu
    ntasks-per-socket open-mode overcommit oversubscribe power prefer priority profile propagate
    reboot reservation sockets-per-node spread-job switches thread-spec threads-per-core
    time-min tmp uid use-min-nodes wait wait-all-nodes wckey
    """.split()
)

# sbatch option -> the SlurmSettings field that owns it.
_FIELD_OPTIONS = {
    "nodes": "nodes", "gpus-per-node": "gpus_per_node", "cpus-per-task": "cpus_per_task",
    "ntasks-per-node": "ntasks_per_node", "partition": "partition", "time": "time",
    "account": "account", "qos": "qos", "job-name": "job_name", "mem": "mem",
    "output": "output", "error": "error", "signal": "signal_seconds",
    "requeue": "requeue", "no-requeue": "requeue", "chdir": "workdir (render_sbatch argument)",
}

_SAFE_VALUE = re.compile(r"[A-Za-z0-9_@%+=:,./-]+\Z")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# SLURM time limits: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S, or UNLIMITED/INFINITE.
_TIME = re.compile(r"(?:(\d+)-(\d+)(?::(\d+)(?::(\d+))?)?|(\d+)(?::(\d+)(?::(\d+))?)?)\Z")
_MEM = re.compile(r"\d+[KMGT]?\Z")

ExtraValue = Union[str, int, bool, None]


def _check_text(key: str, value: object) -> str:
    if not isinstance(value, str):
        raise SbatchError(f"{key}: expected a string, got {type(value).__name__} {value!r}")
    if value == "":
        raise SbatchError(f"{key}: must not be empty (leave it unset instead)")
    bad = _CONTROL.search(value)
    if bad:
        raise SbatchError(
            f"{key}={value!r}: control character {bad.group()!r} (newlines and tabs are not "
            "allowed in #SBATCH values)"
        )
    return value


def _check_int(key: str, value: object, minimum: int, maximum: Optional[int] = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SbatchError(f"{key}: expected an integer, got {value!r}")
    if value < minimum or (maximum is not None and value > maximum):
        allowed = f">= {minimum}" if maximum is None else f"between {minimum} and {maximum}"
        raise SbatchError(f"{key}={value}: must be {allowed}")
    return value


def time_limit_seconds(time: str) -> Optional[int]:
    """Seconds in a SLURM time limit; None for UNLIMITED/INFINITE; SbatchError if malformed.

    >>> time_limit_seconds("90"), time_limit_seconds("1:30:00"), time_limit_seconds("2-00")
    (5400, 5400, 172800)
    """
    if time.upper() in ("UNLIMITED", "INFINITE"):
        return None
    m = _TIME.match(time)
    if not m:
        raise SbatchError(
            f"time={time!r}: expected minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS "
            "or UNLIMITED"
        )
    d, h, mi, s, m1, m2, m3 = (int(g) if g else 0 for g in m.groups())
    if m.group(1) is not None:  # D-H[:M[:S]]
        return ((d * 24 + h) * 60 + mi) * 60 + s
    if m.group(7) is not None:  # H:M:S
        return (m1 * 60 + m2) * 60 + m3
    return m1 * 60 + m2  # M or M:S


@dataclass(frozen=True)
class SlurmSettings:
    """What to ask SLURM for. Unset (None) options are left to the cluster's defaults."""

    nodes: int = 1
    gpus_per_node: int = 0  # 0: ask for no GPUs
    gpu_type: Optional[str] = None  # --gpus-per-node=<type>:<count>, e.g. "a100"
    cpus_per_task: Optional[int] = None
    ntasks_per_node: int = 1  # the allocation; srun always starts ONE launcher per node
    partition: Optional[str] = None
    time: Optional[str] = None  # SLURM format: "30", "4:00:00", "1-12:00:00"
    account: Optional[str] = None
    qos: Optional[str] = None
    job_name: Optional[str] = None
    mem: Optional[str] = None  # per node, e.g. "64G"; "0" = all of the node's memory
    output: Optional[str] = None  # patterns such as "logs/%x-%j.out"
    error: Optional[str] = None
    signal_seconds: Optional[int] = 120  # USR1 this long before the time limit; None: no warning
    requeue: bool = False
    extra: Mapping[str, ExtraValue] = field(default_factory=dict)  # long option -> value

    def __post_init__(self) -> None:
        _check_int("nodes", self.nodes, 1)
        _check_int("gpus_per_node", self.gpus_per_node, 0)
        _check_int("ntasks_per_node", self.ntasks_per_node, 1)
        if self.cpus_per_task is not None:
            _check_int("cpus_per_task", self.cpus_per_task, 1)
        for name in ("gpu_type", "partition", "account", "qos", "job_name", "output", "error"):
            value = getattr(self, name)
            if value is not None:
                _check_text(name, value)
        if self.gpu_type is not None:
            if not re.fullmatch(r"[A-Za-z0-9_.-]+", self.gpu_type):
                raise SbatchError(f"gpu_type={self.gpu_type!r}: letters, digits, '_.-' only")
            if self.gpus_per_node == 0:
                raise SbatchError(f"gpu_type={self.gpu_type!r} needs gpus_per_node >= 1")
        if self.mem is not None and not _MEM.match(_check_text("mem", self.mem)):
            raise SbatchError(f"mem={self.mem!r}: expected a number with optional K/M/G/T suffix")
        limit = None
        if self.time is not None:
            limit = time_limit_seconds(_check_text("time", self.time))
        if self.signal_seconds is not None:
            _check_int("signal_seconds", self.signal_seconds, 1, 65535)
            if limit is not None and self.signal_seconds >= limit:
                raise SbatchError(
                    f"signal_seconds={self.signal_seconds}: must be shorter than time={self.time!r}"
                    f" ({limit} s)"
                )
        if not isinstance(self.requeue, bool):
            raise SbatchError(f"requeue: expected true or false, got {self.requeue!r}")
        if not isinstance(self.extra, Mapping):
            raise SbatchError(f"extra: expected a mapping of sbatch options, got {self.extra!r}")
        for name, value in self.extra.items():
            _extra_line(name, value)  # validates

    def directives(self, workdir: str) -> list[str]:
        """The ``#SBATCH`` lines, in a fixed order."""
        gpus = None
        if self.gpus_per_node:
            gpus = f"{self.gpu_type}:{self.gpus_per_node}" if self.gpu_type else self.gpus_per_node
        pairs: list[tuple[str, object]] = [
            ("job-name", self.job_name),
            ("nodes", self.nodes),
            ("ntasks-per-node", self.ntasks_per_node),
            ("gpus-per-node", gpus),
            ("cpus-per-task", self.cpus_per_task),
            ("mem", self.mem),
            ("partition", self.partition),
            ("account", self.account),
            ("qos", self.qos),
            ("time", self.time),
            ("chdir", workdir),
            ("output", self.output),
            ("error", self.error),
            ("signal", f"B:USR1@{self.signal_seconds}" if self.signal_seconds else None),
        ]
        lines = [f"#SBATCH --{k}={_sbatch_value(str(v))}" for k, v in pairs if v is not None]
        lines.append("#SBATCH --requeue" if self.requeue else "#SBATCH --no-requeue")
        for name, value in self.extra.items():
            line = _extra_line(name, value)
            if line:
                lines.append(line)
        return lines


def _sbatch_value(value: str) -> str:
    """Quote a value the way sbatch's directive parser reads it back.

    >>> _sbatch_value("logs/%x-%j.out"), _sbatch_value('my "big" run')
    ('logs/%x-%j.out', '"my \\\\"big\\\\" run"')
    """
    if _SAFE_VALUE.match(value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _extra_line(name: object, value: ExtraValue) -> Optional[str]:
    if not isinstance(name, str):
        raise SbatchError(f"extra: option names must be strings, got {name!r}")
    option = name[2:] if name.startswith("--") else name
    if option in _FIELD_OPTIONS:
        raise SbatchError(
            f"extra.{option}: set SlurmSettings.{_FIELD_OPTIONS[option]} instead of an extra option"
        )
    if option not in SBATCH_LONG_OPTIONS:
        close = sorted(o for o in SBATCH_LONG_OPTIONS if o.split("-")[0] == option.split("-")[0])
        hint = f" (did you mean: {', '.join(close)}?)" if close else ""
        raise SbatchError(f"extra.{option}: not a known sbatch long option{hint}")
    if value is None or value is True:
        return f"#SBATCH --{option}"
    if value is False:
        return None
    if isinstance(value, int):
        return f"#SBATCH --{option}={value}"
    return f"#SBATCH --{option}={_sbatch_value(_check_text(f'extra.{option}', value))}"


def _srun_argv(settings: SlurmSettings) -> list[str]:
    argv = ["srun", "--nodes", str(settings.nodes), "--ntasks-per-node=1", "--kill-on-bad-exit=1"]
    if settings.cpus_per_task is not None:
        # srun 22.05 no longer inherits --cpus-per-task from the batch allocation.
        argv.append(f"--cpus-per-task={settings.cpus_per_task}")
    return argv


def render_sbatch(
    settings: SlurmSettings,
    command: Sequence[str],
    env: Mapping[str, str],
    workdir: str,
) -> str:
    """The batch script: directives, strict bash, exported env, one srun launcher per node."""
    if isinstance(command, str) or not command:
        raise SbatchError(f"command: expected a non-empty list of arguments, got {command!r}")
    for i, arg in enumerate(command):
        if not isinstance(arg, str):
            raise SbatchError(f"command[{i}]: expected a string, got {arg!r}")
        if "\x00" in arg:
            raise SbatchError(f"command[{i}]={arg!r}: NUL character")
    _check_text("workdir", workdir)
    if not workdir.startswith("/"):
        raise SbatchError(f"workdir={workdir!r}: must be an absolute path")
    for name, value in env.items():
        if not isinstance(name, str) or not _ENV_NAME.match(name):
            raise SbatchError(f"env: {name!r} is not a valid variable name")
        if not isinstance(value, str) or "\x00" in value:
            raise SbatchError(f"env.{name}: expected a string without NUL, got {value!r}")

    lines = ["#!/bin/bash", "# Written by train_multigpu: one launcher per node, started by srun."]
    lines += settings.directives(workdir)
    lines += ["", "set -euo pipefail", f"cd {shlex.quote(workdir)}"]
    if env:
        lines.append("")
        lines += [f"export {k}={shlex.quote(v)}" for k, v in env.items()]
    srun = shlex.join(_srun_argv(settings) + ["--", *command])
    if settings.signal_seconds:
        lines += [
            "",
            f"# SLURM sends USR1 to this shell (--signal=B:USR1@{settings.signal_seconds}); pass it",
            "# to srun, which delivers it to every process of the step on every node.",
            "forward_usr1() {",
            '  echo "train_multigpu: time limit near, forwarding USR1 to srun" >&2',
            '  kill -USR1 "${srun_pid:-}" 2>/dev/null || true',
            "}",
            "trap forward_usr1 USR1",
        ]
    lines += [
        "",
        f"{srun} &",
        "srun_pid=$!",
        "# wait returns early when a trapped signal arrives: wait until srun is really gone,",
        "# then once more to collect its exit status.",
        'while kill -0 "$srun_pid" 2>/dev/null; do wait "$srun_pid" || true; done',
        'status=0; wait "$srun_pid" || status=$?',
        'exit "$status"',
        "",
    ]
    return "\n".join(lines)

