"""Render a readable SLURM batch script that starts one launcher per node (PURE).

``render(slurm, command, env, workdir, job_name, output)`` returns the script text for the schema's
``SlurmConfig`` (the ``slurm.*`` keys); :func:`check` names the first bad key as a ``UserError``
(``slurm.<key>``). Nothing here runs ``sbatch`` or reads the environment.

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
from collections.abc import Mapping, Sequence
from typing import Any

from ..config.schema import SlurmConfig
from ..errors import UserError

HINT = "docs/slurm.md lists the slurm.* keys"

# Long options of sbatch 22.05 (from its man page) that make sense as #SBATCH directives.
# Left out: options the slurm.* keys own (see KEY_OPTIONS) and ones that do not belong in a
# script (help, usage, version, parsable, test-only, wrap, quiet, verbose).
SBATCH_LONG_OPTIONS = frozenset(
    """
    acctg-freq batch bb bbf begin cluster-constraint clusters comment constraint container
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

# sbatch option -> what sets it instead of slurm.extra
KEY_OPTIONS = {
    "nodes": "launcher.nnodes",
    "array": "the launcher (a -m sweep is one job array; slurm.array_parallelism throttles it)",
    "gpus-per-node": "slurm.gpus_per_node",
    "cpus-per-task": "slurm.cpus_per_task",
    "partition": "slurm.partition",
    "time": "slurm.time",
    "account": "slurm.account",
    "qos": "slurm.qos",
    "job-name": "slurm.job_name",
    "mem": "slurm.mem",
    "signal": "slurm.signal_seconds",
    "requeue": "slurm.requeue",
    "no-requeue": "slurm.requeue",
    "ntasks-per-node": "the launcher (one launcher per node)",
    "output": "the launcher (<run dir>/slurm-%j.out)",
    "error": "the launcher (stderr goes to the output)",
    "chdir": "the launcher (the directory train_multigpu is started from)",
}

_SAFE_VALUE = re.compile(r"[A-Za-z0-9_@%+=:,./-]+\Z")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# SLURM time limits: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S, or UNLIMITED/INFINITE.
_TIME = re.compile(r"(?:(\d+)-(\d+)(?::(\d+)(?::(\d+))?)?|(\d+)(?::(\d+)(?::(\d+))?)?)\Z")
_MEM = re.compile(r"\d+[KMGT]?\Z")
TIME_FORMATS = "expected minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS or UNLIMITED"


def _shown(value: object) -> str:
    """A value as one line of an error message (control characters escaped)."""
    return repr(value)[1:-1] if isinstance(value, str) else str(value)


def _text(key: str, value: object) -> str:
    if not isinstance(value, str):
        raise UserError(key, _shown(value), f"expected a string, got {type(value).__name__}", HINT)
    if value == "":
        raise UserError(key, "", "must not be empty (leave it unset instead)", HINT)
    bad = _CONTROL.search(value)
    if bad:
        raise UserError(
            key,
            _shown(value),
            f"control character {bad.group()!r} (newlines and tabs are not allowed in #SBATCH values)",
            HINT,
        )
    return value


def _at_least(key: str, value: int, minimum: int, maximum: int | None = None) -> None:
    if value < minimum or (maximum is not None and value > maximum):
        allowed = f">= {minimum}" if maximum is None else f"between {minimum} and {maximum}"
        raise UserError(key, value, f"must be {allowed}", HINT)


def time_limit_seconds(time: str, key: str = "slurm.time") -> int | None:
    """Seconds in a SLURM time limit; None for UNLIMITED/INFINITE.

    >>> time_limit_seconds("90"), time_limit_seconds("1:30:00"), time_limit_seconds("2-00")
    (5400, 5400, 172800)
    """
    if time.upper() in ("UNLIMITED", "INFINITE"):
        return None
    m = _TIME.match(time)
    if not m:
        raise UserError(key, _shown(time), TIME_FORMATS, HINT)
    d, h, mi, s, m1, m2, m3 = (int(g) if g else 0 for g in m.groups())
    if m.group(1) is not None:  # D-H[:M[:S]]
        return ((d * 24 + h) * 60 + mi) * 60 + s
    if m.group(7) is not None:  # H:M:S
        return (m1 * 60 + m2) * 60 + m3
    return m1 * 60 + m2  # M or M:S


def extra_options(slurm: SlurmConfig) -> dict[str, Any]:
    """``slurm.extra`` by sbatch option name (``_`` written as ``-``); a requeued job appends to its
    log instead of truncating it (``open-mode=append`` unless given)."""
    extra = {str(name).replace("_", "-"): value for name, value in slurm.extra.items()}
    if slurm.requeue:
        extra.setdefault("open-mode", "append")
    return extra


def check(slurm: SlurmConfig) -> None:
    """Every ``slurm.*`` value can be written as a directive SLURM reads back as meant."""
    if slurm.nodes is not None:
        _at_least("slurm.nodes", slurm.nodes, 1)
    if slurm.array_parallelism is not None and (
        isinstance(slurm.array_parallelism, bool) or slurm.array_parallelism < 1
    ):
        raise UserError(
            "slurm.array_parallelism",
            slurm.array_parallelism,
            "must be a positive integer: the most tasks of a sweep's job array running at once",
            "leave it unset for no limit",
        )
    _at_least("slurm.gpus_per_node", slurm.gpus_per_node, 0)
    if slurm.cpus_per_task is not None:
        _at_least("slurm.cpus_per_task", slurm.cpus_per_task, 1)
    for name in ("gpu_type", "partition", "account", "qos", "job_name"):
        value = getattr(slurm, name)
        if value is not None:
            _text(f"slurm.{name}", value)
    if slurm.gpu_type is not None:
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", slurm.gpu_type):
            raise UserError("slurm.gpu_type", slurm.gpu_type, "letters, digits, '_.-' only", HINT)
        if slurm.gpus_per_node == 0:
            raise UserError("slurm.gpu_type", slurm.gpu_type, "needs gpus_per_node >= 1", HINT)
    if slurm.mem is not None and not _MEM.match(_text("slurm.mem", slurm.mem)):
        raise UserError("slurm.mem", slurm.mem, "expected a number with optional K/M/G/T suffix", HINT)
    limit = None
    if slurm.time is not None:
        limit = time_limit_seconds(_text("slurm.time", slurm.time))
    if slurm.signal_seconds is not None:
        _at_least("slurm.signal_seconds", slurm.signal_seconds, 1, 65535)
        if limit is not None and slurm.signal_seconds >= limit:
            raise UserError(
                "slurm.signal_seconds",
                slurm.signal_seconds,
                f"must be shorter than time={slurm.time!r} ({limit} s)",
                HINT,
            )
    for name, value in extra_options(slurm).items():
        _extra_line(name, value)


def _sbatch_value(value: str) -> str:
    """Quote a value the way sbatch's directive parser reads it back.

    >>> _sbatch_value("logs/%x-%j.out"), _sbatch_value('my "big" run')
    ('logs/%x-%j.out', '"my \\\\"big\\\\" run"')
    """
    if _SAFE_VALUE.match(value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _extra_line(name: str, value: Any) -> str | None:
    option = name[2:] if name.startswith("--") else name
    key = f"slurm.extra.{option}"
    if option in KEY_OPTIONS:
        raise UserError(key, _shown(value), f"set {KEY_OPTIONS[option]} instead of an extra option", HINT)
    if option not in SBATCH_LONG_OPTIONS:
        close = sorted(o for o in SBATCH_LONG_OPTIONS if o.split("-")[0] == option.split("-")[0])
        why = "not a known sbatch long option" + (f" (did you mean: {', '.join(close)}?)" if close else "")
        raise UserError(key, _shown(value), why, HINT)
    if value is None or value is True:
        return f"#SBATCH --{option}"
    if value is False:
        return None
    if isinstance(value, int):
        return f"#SBATCH --{option}={value}"
    return f"#SBATCH --{option}={_sbatch_value(_text(key, str(value) if isinstance(value, float) else value))}"


def directives(slurm: SlurmConfig, workdir: str, job_name: str, output: str, tasks: int | None = None) -> list[str]:
    """The ``#SBATCH`` lines, in a fixed order; ``tasks``: a job array of that many tasks."""
    gpus = None
    if slurm.gpus_per_node:
        gpus = f"{slurm.gpu_type}:{slurm.gpus_per_node}" if slurm.gpu_type else slurm.gpus_per_node
    pairs: list[tuple[str, object]] = [
        ("job-name", job_name),
        ("nodes", slurm.nodes or 1),
        ("ntasks-per-node", 1),  # srun starts ONE launcher per node
        ("gpus-per-node", gpus),
        ("cpus-per-task", slurm.cpus_per_task),
        ("mem", slurm.mem),
        ("partition", slurm.partition),
        ("account", slurm.account),
        ("qos", slurm.qos),
        ("time", slurm.time),
        ("chdir", workdir),
        ("output", output),
        ("signal", f"B:USR1@{slurm.signal_seconds}" if slurm.signal_seconds else None),
        ("array", _array(tasks, slurm.array_parallelism)),
    ]
    lines = [f"#SBATCH --{k}={_sbatch_value(str(v))}" for k, v in pairs if v is not None]
    lines.append("#SBATCH --requeue" if slurm.requeue else "#SBATCH --no-requeue")
    for name, value in extra_options(slurm).items():
        line = _extra_line(name, value)
        if line:
            lines.append(line)
    return lines


def _array(tasks: int | None, parallelism: int | None) -> str | None:
    """``--array=0-N[%P]``: one task per sweep point, at most P running at once.

    >>> _array(3, None), _array(3, 2), _array(None, 2)
    ('0-2', '0-2%2', None)
    """
    if tasks is None:
        return None
    return f"0-{tasks - 1}" + (f"%{parallelism}" if parallelism else "")


def _srun_argv(slurm: SlurmConfig) -> list[str]:
    argv = ["srun", "--nodes", str(slurm.nodes or 1), "--ntasks-per-node=1", "--kill-on-bad-exit=1"]
    if slurm.cpus_per_task is not None:
        # srun 22.05 no longer inherits --cpus-per-task from the batch allocation.
        argv.append(f"--cpus-per-task={slurm.cpus_per_task}")
    return argv


def _cannot(what: str) -> UserError:
    return UserError("submit", "slurm", f"cannot write the batch script: {what}")


def render(
    slurm: SlurmConfig, command: Sequence[str], env: Mapping[str, str], workdir: str, job_name: str, output: str
) -> str:
    """The batch script: directives, strict bash, exported env, one srun launcher per node."""
    _check_command(command)
    return _script(slurm, env, workdir, job_name, output, None, [], shlex.join(_srun_argv(slurm) + ["--", *command]))


def render_array(
    slurm: SlurmConfig,
    tasks: int,
    task_file: tuple[str, str],
    unset_prefix: str | None,
    workdir: str,
    job_name: str,
    output: str,
) -> str:
    """A job array's script: the same text at any number of tasks but for its ``--array`` line. Task
    ``i`` (``$SLURM_ARRAY_TASK_ID``) reads its point's command from its own file,
    ``task_file[0] + i + task_file[1]`` (:func:`render_task`'s text), and runs it as :func:`render`
    runs its one command; a task whose file is missing, unreadable or another task's ends with exit
    code 2 and says so. ``unset_prefix``: the variables of sbatch's environment under that prefix
    (every task's copy of a secret value) are unset once the task has exported its own."""
    if tasks < 1:
        raise _cannot("a job array needs at least one task")
    prefix, suffix = task_file
    if not prefix.startswith("/") or _CONTROL.search(prefix + suffix):
        raise _cannot(f"task file {prefix}<task>{suffix}: must be an absolute path without control characters")
    if unset_prefix is not None and not _ENV_NAME.match(unset_prefix):
        raise _cannot(f"unset_prefix={unset_prefix!r} is not a valid variable name")
    path = shlex.quote(prefix) + '"${SLURM_ARRAY_TASK_ID:?not a task of a job array}"'
    path += shlex.quote(suffix) if suffix else ""
    prologue = [
        f"task_file={path}",
        'if [ ! -f "$task_file" ] || [ ! -r "$task_file" ]; then',
        '  echo "train_multigpu: task $SLURM_ARRAY_TASK_ID of this job array: cannot read its command file $task_file" >&2',  # noqa: E501
        "  exit 2",
        "fi",
        "task=",
        '. "$task_file"',
        'if [ "$task" != "$SLURM_ARRAY_TASK_ID" ]; then',
        '  echo "train_multigpu: $task_file holds the command of task ${task:-?}, not of task $SLURM_ARRAY_TASK_ID" >&2',  # noqa: E501
        "  exit 2",
        "fi",
    ]
    if unset_prefix is not None:
        prologue.append(f'for name in ${{!{unset_prefix}@}}; do unset "$name"; done  # the other tasks\' values')
    srun = shlex.join(_srun_argv(slurm) + ["--"]) + ' "$@"'
    return _script(slurm, {}, workdir, job_name, output, tasks, prologue, srun)


def render_task(task: int, command: Sequence[str], env: Mapping[str, str]) -> str:
    """Task ``task``'s file of a job array (:func:`render_array` sources it): its number, its point's
    launcher command as the script's arguments, and the variables it exports, NAME -> the variable of
    sbatch's environment holding its value (a sweep over secret values: each task reads its own;
    the file holds names, never values).

    >>> print(render_task(1, ["/py", "-m", "launcher", "seed=2"], {"T": "T_1"}), end="")
    # train_multigpu: the command of task 1 of a job array (its job.sbatch reads this file)
    task=1
    set -- /py -m launcher seed=2
    export T="${T_1}"
    """
    _check_command(command)
    for name, source in env.items():
        if not _ENV_NAME.match(name) or not _ENV_NAME.match(source):
            raise _cannot(f"task env: {name!r}={source!r} is not a valid variable name")
    lines = [
        f"# train_multigpu: the command of task {task} of a job array (its job.sbatch reads this file)",
        f"task={task}",
        f"set -- {shlex.join(command)}",
    ]
    lines += [f'export {name}="${{{source}}}"' for name, source in env.items()]
    return "\n".join(lines) + "\n"


def _check_command(command: Sequence[str]) -> None:
    if isinstance(command, str) or not command:
        raise _cannot(f"command: expected a non-empty list of arguments, got {command!r}")
    for i, arg in enumerate(command):
        if "\x00" in arg:
            raise _cannot(f"command[{i}]={arg!r}: NUL character")


def _script(
    slurm: SlurmConfig,
    env: Mapping[str, str],
    workdir: str,
    job_name: str,
    output: str,
    tasks: int | None,
    prologue: Sequence[str],
    srun: str,
) -> str:
    check(slurm)
    for key, value in (("workdir", workdir), ("output", output)):
        if _CONTROL.search(value) or not value.startswith("/"):
            raise _cannot(f"{key}={value!r}: must be an absolute path without control characters")
    _text("slurm.job_name", job_name)
    for name, value in env.items():
        if not _ENV_NAME.match(name):
            raise _cannot(f"env: {name!r} is not a valid variable name")
        if "\x00" in value:
            raise _cannot(f"env.{name}: NUL character")

    lines = ["#!/bin/bash", "# Written by train_multigpu: one launcher per node, started by srun."]
    lines += directives(slurm, workdir, job_name, output, tasks)
    lines += ["", "set -euo pipefail", f"cd {shlex.quote(workdir)}"]
    if env:
        lines.append("")
        lines += [f"export {k}={shlex.quote(v)}" for k, v in env.items()]
    if prologue:
        lines += ["", "# this task's sweep point: its launcher command, from a file of its own"]
        lines += prologue
    if slurm.signal_seconds:
        lines += [
            "",
            f"# SLURM sends USR1 to this shell (--signal=B:USR1@{slurm.signal_seconds}); pass it",
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
