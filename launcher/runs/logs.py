"""``runs logs ID [--rank R|all] [--follow]``: a run's per-rank logs (``<record>/logs/rank<R>.log``).

One rank: its file as it is, bytes unchanged. ``all``: every rank's lines prefixed ``[node:rank]``,
rank after rank for what is already written, then as they come. ``--json``: one object per line,
``{"node", "rank", "line"}``. ``--follow`` keeps reading until
the launch's record gets its end (status.json's exit code) or its launcher is gone.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path
from typing import IO

from .. import files
from ..errors import UserError, one_line
from ..names import PROG
from ..rundir import CONFIG, RANK_LOG, RunPaths
from . import cache, read, remote

POLL_S = 0.1
CHUNK = 1 << 20  # bytes read from one log at a time (a log of any size is copied, never held whole)
LINE_MAX = 64 << 10  # a "line" longer than this (no newline in sight) is cut: prefixed output stays bounded


def log_files(info: read.RunInfo, root: Path) -> dict[int, tuple[int, Path]]:
    """global rank → (node rank, log file), over every node of the launch (a multi-node launch's
    other node directories under the root, a SLURM job's node<R>/ records); a launch restarted: its
    latest attempt's (attempt<N>/logs, docs/recovery.md)."""
    dirs = record_dirs(info, root)
    found: dict[int, tuple[int, Path]] = {}
    for position, directory in enumerate(dirs):
        node = _node_of(directory, position, info.within)
        logs_dir = RunPaths(directory).attempts()[-1].logs
        try:
            names = [p.name for p in logs_dir.iterdir()]
        except OSError:
            continue
        for name in names:
            match = RANK_LOG.match(name)
            if match:
                found.setdefault(int(match.group(1)), (node, logs_dir / name))
    return dict(sorted(found.items()))


def record_dirs(info: read.RunInfo, root: Path) -> list[Path]:
    """The launch's records: every node's of a multi-node launch on this host, a SLURM job's."""
    if info.group_kind == "nodes":
        dirs = [Path(r.run_dir) for r in read.group_of(root, info.run_dir) if r.group == info.group]
        return sorted(dirs, key=lambda d: _node_of(d, 0, info.within))
    return [Path(d) for d in info.record_dirs] or [Path(info.run_dir)]


def _node_of(directory: Path, position: int, within: str | None = None) -> int:
    match = re.search(r"node([0-9]{1,9})(-\d+)?$", directory.name)  # <stamp>_node<R>[-n], node<R>
    if match:
        return int(match.group(1))
    text = _text(directory / CONFIG, within)
    node_rank = read.small_int(read.config_values(text, {"launcher.node_rank"}).get("launcher.node_rank"))
    return node_rank if node_rank is not None else position


def _text(path: Path, within: str | None) -> str:
    try:
        return files.read_text(path, files.CONFIG_MAX, within)
    except OSError:
        return ""


def ended(info: read.RunInfo, dirs: list[Path]) -> bool:
    """The launch has ended: every node's record has its end, or its launcher is gone. A record not
    written yet is waited for only when SLURM says the job is queued or running."""
    waiting = info.slurm is not None and info.status in (read.QUEUED, read.RUNNING, read.SUBMITTED)
    if not dirs or not info.record_dirs:
        return not waiting
    for directory in dirs:
        status = read._read_json(Path(directory) / read.STATUS, [], info.within)
        if status is None:
            if waiting:
                return False
            continue
        if status.get("exit_code") is None and read.launcher_alive(status) is not False:
            return False
    return True


class _Follower:
    """Reads what the chosen ranks' files gain; prefixes whole lines with [node:rank] when asked."""

    def __init__(self, out: IO[bytes], prefix: bool, as_json: bool = False, within: str | None = None) -> None:
        self.within = within
        self.refused: dict[Path, str] = {}  # logs that are not regular files in the run root, and why
        self.told: set[Path] = set()
        self.out, self.prefix, self.as_json = out, prefix or as_json, as_json
        self.handles: dict[int, IO[bytes]] = {}
        self.paths: dict[int, Path] = {}
        self.partial: dict[int, bytes] = {}
        self.tags: dict[int, bytes] = {}
        self.nodes: dict[int, int] = {}

    def add(self, rank: int, node: int, path: Path) -> None:
        """Follow ``rank``'s log at ``path``; a rank followed already at another path (the launch
        restarted: the next attempt's log) is read to its end first, then followed there."""
        if self.paths.get(rank) == path:
            return
        try:
            handle = files.open_regular(path, self.within)
        except OSError as err:
            if isinstance(err, files.Unreadable):
                self.refused.setdefault(path, err.strerror)
            return
        if rank in self.handles:  # the attempt it was on ended: what it wrote last, then the next one's
            while self.copy(only=rank):
                pass
            self.copy(final=True, only=rank)
            self.handles.pop(rank).close()
            print(f"[{PROG}] rank {rank}: the next attempt's log {path}", file=sys.stderr, flush=True)
        self.handles[rank], self.paths[rank] = handle, path
        self.tags[rank] = f"[{node}:{rank}] ".encode()
        self.nodes[rank] = node

    def tell_refused(self) -> None:
        """One note on stderr per log that is not read (a FIFO, a device, a link out of the root)."""
        for path, why in self.refused.items():
            if path not in self.told:
                self.told.add(path)
                print(one_line(f"[{PROG}] {path}: {why}: not read"), file=sys.stderr, flush=True)

    def copy(self, final: bool = False, only: int | None = None) -> bool:
        copied = False
        for rank, handle in sorted(self.handles.items()):
            if only is not None and rank != only:
                continue
            data = handle.read(CHUNK)
            if not data and not (final and self.partial.get(rank)):
                continue
            copied = True
            if not self.prefix:
                self.out.write(data)
                continue
            data = self.partial.pop(rank, b"") + data
            *lines, rest = data.split(b"\n")
            if len(rest) > LINE_MAX:  # no newline in sight: out it goes as a line of its own
                lines, rest = [*lines, rest], b""
            if final and rest:
                lines, rest = [*lines, rest], b""
            self.partial[rank] = rest
            if self.as_json:
                node = self.nodes[rank]
                text = (
                    json.dumps({"node": node, "rank": rank, "line": line.decode(errors="replace")}) for line in lines
                )
                self.out.write("".join(item + "\n" for item in text).encode())
            else:
                self.out.write(b"".join(self.tags[rank] + line + b"\n" for line in lines))
        if copied:
            self.out.flush()
        return copied

    def close(self) -> None:
        for handle in self.handles.values():
            handle.close()


def _refreshed(info: read.RunInfo) -> read.RunInfo:
    fresh = read.read(Path(info.run_dir), info.id, info.within)
    fresh.group, fresh.group_kind, fresh.job = info.group, info.group_kind, info.job
    remote.apply([fresh], every=True)
    return fresh


def _print_lines(lines, as_json: bool) -> int:
    """A back end's log lines as they come (``--json``: ``{"line": ...}`` per line)."""
    for line in lines:
        text = json.dumps({"line": line.rstrip("\n")}) + "\n" if as_json else line
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        sys.stdout.flush()
    return 0


def logs(args: argparse.Namespace) -> int:
    every = str(args.rank).lower() == "all"
    if not every and read.small_int(str(args.rank)) is None:
        raise UserError("--rank", args.rank, "a global rank (0, 1, ...) or all")
    path = cache.resolve(args.root, args.id)
    info = read.find(args.root, path)
    remote.apply([info], every=True)
    lines = remote.logs(info, args.id, None if every else int(args.rank), args.follow)
    if lines is not None:  # a submitted run whose back end reads its logs
        return _print_lines(lines, args.json)
    found = log_files(info, args.root)
    running = args.follow and not ended(info, record_dirs(info, args.root))
    if not every and int(args.rank) not in found and not running:
        ranks = ", ".join(map(str, found)) or "none"
        raise UserError("--rank", args.rank, f"no log of that rank in {info.run_dir}; ranks with a log: {ranks}")
    if every and not found and not running:
        raise UserError("id", args.id, f"no rank logs in {info.run_dir}/logs")
    out = sys.stdout.buffer
    follower = _Follower(out, prefix=every, as_json=args.json, within=info.within)

    def discover() -> None:
        for rank, (node, file) in log_files(info, args.root).items():
            if every or rank == int(args.rank):
                follower.add(rank, node, file)

    discover()
    if not every and not running and int(args.rank) not in follower.handles:
        log = found[int(args.rank)][1]
        raise UserError("--rank", args.rank, f"its log {log} cannot be read: {follower.refused.get(log, 'gone')}")
    follower.tell_refused()
    try:
        if not args.follow:
            while follower.copy():
                pass
            follower.copy(final=True)
        else:
            rounds, dirs = 0, record_dirs(info, args.root)
            while not ended(info, dirs):
                if not follower.copy():
                    time.sleep(POLL_S)
                rounds += 1
                if rounds % 10 == 0:  # new ranks, new nodes, a SLURM job's record appearing
                    if info.slurm is not None:
                        info = _refreshed(info)
                    dirs = record_dirs(info, args.root)
                    discover()
                    follower.tell_refused()
            discover()
            follower.tell_refused()
            while follower.copy():
                pass
            follower.copy(final=True)
    finally:
        follower.close()
    return 0
