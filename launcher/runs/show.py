"""``runs`` (the table of runs) and ``runs show ID`` (one run in full). Text for people, ``--json``
for scripts (fields: docs/runs.md)."""

from __future__ import annotations

import argparse
import json
import os
import re
from datetime import datetime
from pathlib import Path

from .. import files, record
from ..errors import one_line, one_lines
from ..rundir import COMMAND, CPUS_FILE, EVALUATION, LOGS, METRICS, STACKS
from ..tables import table
from . import cache, chosen, live, read, remote
from .logs import record_dirs
from .read import RunInfo

UNKNOWN = "?"
TAIL_LINES = 10  # of the failing rank's log, in runs show
CPUS_MAX = 4096  # logs/rank<R>.cpus: one CPU list
CPUS_RANKS_MAX = 1024  # rank<R>.cpus files runs show reads at most (a run root is shared: bounded)
_CPU_LIST = re.compile(r"^[0-9][0-9,\-]{0,4000}$")


# -- cells ----------------------------------------------------------------------------------------
def duration_text(seconds: float | None) -> str:
    """
    >>> duration_text(4.25), duration_text(63), duration_text(7500), duration_text(None)
    ('4.2s', '1m03s', '2h05m', '?')
    """
    if seconds is None:
        return UNKNOWN
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"
    return f"{int(seconds // 3600)}h{int(seconds % 3600 // 60):02d}m"


def started_text(info: RunInfo) -> str:
    """The start, local time; ``?`` when the record's is not a time this machine can show."""
    if info.start_time is None or info.started is None or read._iso_time(info.started) is None:
        return UNKNOWN
    try:
        when = datetime.fromtimestamp(info.start_time).replace(microsecond=0)
    except (ValueError, OverflowError, OSError):
        return UNKNOWN
    return when.isoformat(" ") if when.year >= 1000 else when.strftime("%Y-%m-%d %H:%M:%S")  # (isoformat: faster)


def shape_text(info: RunInfo) -> str:
    """``single_node 1x2``: the topology, nodes x ranks per node."""
    return f"{info.topology or UNKNOWN} {info.nnodes or UNKNOWN}x{info.nproc_per_node or UNKNOWN}"


def status_text(info: RunInfo) -> str:
    """The status, with the back end's own word for a submitted run: ``queued [slurm PENDING]`` (not
    its parenthesis: ``runs show`` has the back end's whole answer); a launch restarted: its attempts."""
    state = (info.slurm or {}).get("state")
    if state:
        return f"{info.status} [slurm {state}]"
    own = info.remote or {}
    said = (own.get("detail") or own.get("state") or "").split(" (", 1)[0]
    text = info.status + (f" [{own.get('backend')} {said}]" if said else "")
    return text + (f", {attempts_text(info.attempts)}" if info.attempts and len(info.attempts) > 1 else "")


def attempts_text(attempts: list) -> str:
    """
    >>> attempts_text([{}, {}, {}]), attempts_text([{}, {}])
    ('attempts 3 (2 restarts)', 'attempts 2 (1 restart)')
    """
    restarts = len(attempts) - 1
    return f"attempts {len(attempts)} ({restarts} restart{'s' if restarts != 1 else ''})"


def attempt_lines(attempts: list) -> list[str]:
    """``runs show``'s table of a launch's attempts (status.json's ``attempts``)."""

    def cell(item: dict, key: str) -> str:
        value = item.get(key)
        return "-" if value is None else str(value)

    rows = [("ATTEMPT", "STARTED", "ENDED", "EXIT", "CAUSE", "ITERATIONS", "RESUMED FROM", "DECISION")]
    for item in attempts:
        times = [str(item.get(k) or "?").replace("T", " ")[:19] for k in ("started", "ended")]
        rows.append(
            (
                cell(item, "attempt"),
                *times,
                cell(item, "exit_code"),
                cell(item, "cause"),
                cell(item, "iterations"),
                cell(item, "resumed_from"),
                cell(item, "decision"),
            )
        )
    return [f"attempts: {attempts_text(attempts)[len('attempts ') :]}", *table(rows, indent="  ")]


def remote_line(own: dict, extra) -> str:
    """``k8s:      TrainJob tm-a1b2 (namespace ml), state running (Running)``: a submitted run's own line."""
    what = " ".join(str(extra[k]) for k in ("kind",) if extra.get(k)) or "job"
    where = f" (namespace {extra['namespace']})" if extra.get("namespace") else ""
    where = f" at {extra['address']}" if extra.get("address") else where
    detail = f" ({own['detail']})" if own.get("detail") and own.get("detail") != own.get("state") else ""
    return f"{own['backend'] + ':':<9} {what} {own['id']}{where}, state {own.get('state') or UNKNOWN}{detail}"


def exit_text(info: RunInfo) -> str:
    if info.exit_code is not None:
        return str(info.exit_code)
    return "-" if info.status in (read.RUNNING, read.QUEUED, read.SUBMITTED) else UNKNOWN


def return_text(info: RunInfo) -> str:
    return "-" if info.last_return is None else f"{info.last_return:.1f}"


HEADER = ("ID", "STARTED", "DURATION", "STATUS", "TOPOLOGY", "TASK", "EXIT", "RETURN", "SWEPT")


def row(info: RunInfo, indent: str = "") -> tuple[str, ...]:
    cells = (
        indent + info.id,
        started_text(info),
        duration_text(info.duration_s),
        status_text(info),
        shape_text(info),
        info.task or "-",
        exit_text(info),
        return_text(info),
        " ".join(info.swept or ()),
    )
    return one_lines(cells)  # a name or value holding a line break stays in its row


def group_row(members: list[RunInfo]) -> tuple[str, ...]:
    """A sweep's or a multi-node launch's own line: how its members ended."""
    first = members[0]
    counts: dict[str, int] = {}
    for member in members:
        counts[member.status] = counts.get(member.status, 0) + 1
    kind = "sweep" if first.group_kind == "sweep" else "nodes"
    what = f"{kind}, {len(members)} {'job' if kind == 'sweep' else 'node'}{'s' if len(members) != 1 else ''}: "
    starts = [m.start_time for m in members if m.start_time is not None]
    head = RunInfo(id=first.group or "", run_dir="", started=first.started, start_time=min(starts) if starts else None)
    return (
        one_line(head.id),
        started_text(head),
        "",
        what + ", ".join(f"{n} {status}" for status, n in counts.items()),
        "",
        "",
        "",
        "",
        "",
    )


def listing_lines(runs: list[RunInfo]) -> list[str]:
    """The table: a group (a sweep, a multi-node launch) as one row where its first member is, its
    members under it. One pass over the runs (a group's members gathered by a dict, not by scanning
    the rest of the list for each group: 10,000 runs in a thousand groups)."""
    members: dict[str, list[RunInfo]] = {}
    order: list[RunInfo | str] = []
    for info in runs:
        if info.group is None:
            order.append(info)
        elif info.group not in members:
            members[info.group] = [info]
            order.append(info.group)
        else:
            members[info.group].append(info)
    rows: list[tuple[str, ...]] = [HEADER]
    for item in order:
        if isinstance(item, str):
            rows.append(group_row(members[item]))
            rows += [row(member, "  ") for member in members[item]]
        else:
            rows.append(row(item))
    return table(rows)


# -- commands -------------------------------------------------------------------------------------
def _all(root: Path) -> list[RunInfo]:
    reader, save = cache.reader(root)  # the ended runs read before, while their files are unchanged
    runs = read.read_all(root, reader)
    save()
    remote.apply(runs)  # lazily: only the runs whose own record cannot say
    return runs


# allow_nan=False: valid JSON always (the records' NaN/Infinity are read as null, files.py)
_ENCODER = json.JSONEncoder(allow_nan=False)


def listing(args: argparse.Namespace) -> int:
    runs = _all(args.root)
    if args.json:
        # one run per line (the C encoder: json's indent= would take the slow one), one encoder for all
        print("[\n" + ",\n".join(_ENCODER.encode(info.as_dict()) for info in runs) + "\n]" if runs else "[]")
        return 0
    if not runs:
        why = (
            "" if args.root.is_dir() else " (not a directory)" if os.path.lexists(args.root) else " (no such directory)"
        )
        print(f"no runs under {args.root}" + why)
        return 0
    print("\n".join(listing_lines(runs)))
    return 0


def _one(args: argparse.Namespace) -> RunInfo:
    info = read.find(args.root, cache.resolve(args.root, args.id))
    remote.apply([info], every=True)
    return info


def where(info: RunInfo) -> dict[str, str | None]:
    """Where a run's outputs are (None: not there)."""
    run_dir = Path(info.run_dir)
    found: dict[str, str | None] = {}
    logs = [Path(d) / LOGS for d in info.record_dirs] or [run_dir / LOGS]
    found["logs"] = ", ".join(str(p) for p in logs if p.is_dir()) or None
    trained = Path(info.trainer_dir or run_dir)  # a resumed run's trainer wrote into the run it resumed
    checkpoints = trained / "checkpoints"
    latest = sorted(checkpoints.glob("*.ckpt")) if checkpoints.is_dir() else []
    found["checkpoints"] = str(latest[-1]) if latest else (str(checkpoints) if checkpoints.is_dir() else None)
    for key, name in (
        ("tensorboard", "tensorboard"),
        ("learning_curve", "learning_curve.png"),
        ("metrics", METRICS),
        ("evaluation", EVALUATION),
    ):
        found[key] = str(trained / name) if (trained / name).exists() else None
    found["stacks"] = str(run_dir / STACKS) if (run_dir / STACKS).exists() else None
    found["timeline"] = str(run_dir / "timeline.png") if (run_dir / "timeline.png").exists() else None
    if info.slurm and info.slurm.get("log"):
        found["slurm_log"] = str(info.slurm["log"])
    return found


def command_lines(info: RunInfo) -> list[str]:
    """command.sh without its header and its exports: the launch's command(s)."""
    path = Path(info.record_dirs[0] if info.record_dirs else info.run_dir) / COMMAND
    try:
        lines = files.read_text(path, files.TEXT_MAX, info.within).splitlines()
    except OSError:
        return []
    return [line for line in lines if line and not line.startswith(("#", "set -", "export "))]


def last_lines(path: Path, count: int, within: str | None = None) -> list[str]:
    """The last ``count`` lines of a regular file in ``within`` ([] when it cannot be read)."""
    try:
        return files.read_tail(path, 64 * 1024, within).splitlines()[-count:]
    except OSError:
        return []


def failure_lines(failure: dict | None, within: str | None = None) -> list[str]:
    if not failure:
        return []
    who = "torchrun" if failure.get("rank") is None else f"rank {failure.get('rank')}"
    code = failure.get("exit_code")
    how = f"exit code {code if code is not None else UNKNOWN}" + (
        f" ({failure['signal']})" if failure.get("signal") else ""
    )
    kind = f" [{failure['class']}]" if failure.get("class") else ""
    lines = [f"failure:  node {failure.get('node', UNKNOWN)}, {who}: {how}{kind}"]
    if failure.get("exception"):
        lines.append(f"          error: {failure['exception']}")
    if failure.get("hint"):
        lines.append(f"          hint: {failure['hint']}")
    if failure.get("log"):
        lines.append(f"          log: {failure['log']}")
        tail = last_lines(Path(str(failure["log"])), TAIL_LINES, within)
        if tail:
            lines.append(f"          last {len(tail)} line(s) of the log:")
            lines += [f"            | {line}" for line in tail]
    return lines


def rank_cpus(info: RunInfo) -> dict[int, str]:
    """Each rank's CPUs as it started (``logs/rank<R>.cpus``, run/worker.py: launcher.cpu_binding),
    by global rank; a file that is not a CPU list is left out."""
    logs = Path(info.run_dir) / LOGS
    found: dict[int, str] = {}
    try:
        with os.scandir(logs) as entries:
            for count, entry in enumerate(entries):
                match = CPUS_FILE.match(entry.name)
                if count > 16 * CPUS_RANKS_MAX or len(found) >= CPUS_RANKS_MAX:
                    break
                if match is None:
                    continue
                try:
                    text = files.read_text(entry.path, CPUS_MAX, info.within).strip()
                except (OSError, files.Unreadable):
                    continue
                if _CPU_LIST.match(text):
                    found[int(match.group(1))] = text
    except OSError:
        return {}
    return dict(sorted(found.items()))


def cpu_lines(cpus: dict[int, str]) -> list[str]:
    """``runs show``'s lines on the ranks' CPUs.

    >>> cpu_lines({0: "0", 1: "1"})
    ['cpus:     each rank as it started (logs/rank<R>.cpus)', '  rank 0: 0', '  rank 1: 1']
    """
    if not cpus:
        return []
    return ["cpus:     each rank as it started (logs/rank<R>.cpus)"] + [
        f"  rank {rank}: {text}" for rank, text in cpus.items()
    ]


def tracker_lines(trackers: dict) -> list[str]:
    """Each tracker's run: its id, and its URL where known.

    >>> tracker_lines({"wandb": {"id": "abc", "project": "p", "group": "g", "mode": "offline", "dir": "/r"},
    ...                "mlflow": {"run_id": "f00", "experiment": "e", "tracking_uri": "http://h:5000",
    ...                           "url": "http://h:5000/#/experiments/1/runs/f00", "parent_run_id": "b0"}})
    ['wandb:    run abc, project p, group g (offline: /r/wandb)', 'mlflow:   run f00, experiment e at http://h:5000, parent run b0: http://h:5000/#/experiments/1/runs/f00']
    """  # noqa: E501
    lines = []
    wandb, mlflow = trackers.get("wandb"), trackers.get("mlflow")
    if isinstance(wandb, dict):
        get = wandb.get
        text = f"run {get('id', UNKNOWN)}, project {get('project', UNKNOWN)}, group {get('group', UNKNOWN)}"
        if wandb.get("mode") == "offline":
            text += f" (offline: {wandb.get('dir', UNKNOWN)}/wandb)"
        lines.append(f"wandb:    {text}" + (f": {wandb['url']}" if wandb.get("url") else ""))
    if isinstance(mlflow, dict):
        get = mlflow.get
        text = (
            f"run {get('run_id', UNKNOWN)}, experiment {get('experiment', UNKNOWN)} at {get('tracking_uri', UNKNOWN)}"
        )
        if mlflow.get("parent_run_id"):
            text += f", parent run {mlflow['parent_run_id']}"
        lines.append(f"mlflow:   {text}" + (f": {mlflow['url']}" if mlflow.get("url") else ""))
    return lines


def typed_text(composition: dict | None) -> str | None:
    """What the user typed (composition.json, written by launches that record it), as one line."""
    if not composition or not isinstance(composition.get("overrides"), list):
        return None
    typed = " ".join(map(str, composition["overrides"])) or "-"
    script_args = composition.get("script_args")
    if isinstance(script_args, list) and script_args:
        typed += " -- " + " ".join(map(str, script_args))
    return typed


def _group(args: argparse.Namespace) -> list[RunInfo]:
    """The jobs of the sweep whose id ``args.id`` is exactly, if any (that sweep's runs read only)."""
    if args.id == read.LAST:
        return []
    runs = read.sweep(args.root, args.id)
    remote.apply(runs)  # lazily, as the listing: only the runs whose own record cannot say
    return runs


def show(args: argparse.Namespace) -> int:
    members = _group(args)
    if members and members[0].group_kind == "sweep":  # a sweep: its table (a job: runs show <sweep>/<job>)
        if args.json:
            print(json.dumps([member.as_dict() for member in members], indent=2, allow_nan=False))
        else:
            print("\n".join(listing_lines(members)))
        return 0
    info = _one(args)
    progress = live.progress(info, record_dirs(info, args.root)) if info.status == read.RUNNING else None
    differences, against = chosen.differences(info)
    places = where(info)
    composition = record.read_composition(info.run_dir, info.within)
    cpus = rank_cpus(info)
    trackers = record.read_trackers(info.run_dir, info.within)  # trackers.json (docs/trackers.md)
    if args.json:
        data = info.as_dict()
        data.update(
            chosen=differences,
            chosen_against=against,
            composition=composition,
            command=command_lines(info),
            where=places,
            live=progress,
            cpus={str(rank): text for rank, text in cpus.items()},
            trackers=trackers,
        )
        print(json.dumps(data, indent=2, allow_nan=False))
        return 0
    lines = [
        f"run:      {info.id}",
        f"dir:      {info.run_dir}",
        f"status:   {status_text(info)}" + (f" ({info.reason})" if info.reason and info.reason != info.status else ""),
        f"exit:     {exit_text(info)}",
        f"started:  {started_text(info)}   duration: {duration_text(info.duration_s)}",
        f"launch:   {shape_text(info)} (nodes x ranks per node), task {info.task or '-'}, "
        f"rl_library {info.rl_library or UNKNOWN}",
    ]
    if info.swept is not None:
        own = " ".join(info.swept) or "(none: its sweep's jobs have the same overrides)"
        lines.append(f"swept:    {own} (job {info.job} of {info.group})")
    if info.last_return is not None:
        lines.append(f"return:   {info.last_return:.1f} (the trainer's last mean_return)")
    if info.slurm:
        lines.append(f"slurm:    job {info.slurm.get('job_id') or UNKNOWN}, state {info.slurm.get('state') or UNKNOWN}")
    elif info.remote:
        lines.append(remote_line(info.remote, info.handle.extra if info.handle else {}))
    lines += failure_lines(info.failure, info.within)
    if info.goodput and isinstance(info.goodput.get("line"), str):
        lines.append(f"goodput:  {info.goodput['line']}" + ("" if info.exit_code is not None else " (so far)"))
    if info.attempts:
        lines += attempt_lines(info.attempts)
    for item in info.stragglers or []:
        lines.append(
            f"straggler: rank {item.get('rank', UNKNOWN)}, {item.get('iteration_s', UNKNOWN)} s per iteration"
            f" (the others' median {item.get('median_s', UNKNOWN)} s)"
        )
    lines += tracker_lines(trackers)
    if progress is not None:
        lines += live.progress_lines(progress)
    lines += cpu_lines(cpus)
    if typed_text(composition) is not None:
        lines.append(f"typed:    {typed_text(composition)}")
    lines.append(f"chosen:   (differences from {against})")
    lines += [f"  {key}: {old} -> {new}" for key, (old, new) in differences.items()] or ["  (none)"]
    lines.append("command:")
    lines += [f"  {line}" for line in command_lines(info)] or ["  ?"]
    lines.append("where:")
    lines += [f"  {key}: {value}" for key, value in places.items() if value]
    for problem in info.problems:
        lines.append(f"note:     {problem}")
    print("\n".join(one_line(line) for line in lines))
    return 0


def stop(args: argparse.Namespace) -> int:
    """``runs stop ID``: the run cancelled on its back end (docs/runs.md, "Stopping a run")."""
    info = _one(args)
    done = remote.cancel(info, args.id)
    if args.json:
        print(json.dumps({"id": info.id, "stopped": done}))
    else:
        print(one_line(f"stopping {info.id}: {done}"))
    return 0
