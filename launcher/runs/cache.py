"""The listing's cache: what ``runs`` read from each run that has ended, used again while every file
and directory it was read from is unchanged (docs/runs.md, "Speed").

One file per run root, in the user's own cache directory (``$TRAIN_MULTIGPU_RUNS_CACHE``, else
``$XDG_CACHE_HOME/train_multigpu/runs``, else ``~/.cache/train_multigpu/runs``; ``off``: none), never
in the run root: a root that is read-only to the reader, or shared with others, is read the same,
and nothing anyone else writes is taken for it. What it holds is what this reader read itself: for
each run its :class:`~launcher.runs.read.RunInfo` fields and the stat of every path the reading
looked at (``files.looking``: each file as it was opened, each directory as it was listed, each
missing file as missing). A run is read again, not taken from the cache, unless every one of them
still has the same inode, size, modification and change time (the change time cannot be set back
by anyone but root; a path that was missing is still missing).

Only what cannot change without a file changing is kept: a run whose record has ended (an exit
code), or whose status is not known from files naming no launcher and no job (no status.json: a
launch that died before writing it, a folder that is no run's; an unreadable one), read without a
refusal or a symbolic link on the way, whose files last changed more than :data:`SETTLED_S` before
they were read (a write within the file system's clock tick after the read would leave the stat as
it was). A running launch, an open record, a submitted run waiting for its record, anything its back
end is asked about: read every time, as before.

Two listings at once each write a whole new file and rename it into place: a reader sees one or the
other, never half. A cache file that is missing, unreadable, not this user's, of another version
of this code or of another time zone is ignored (and replaced); one that cannot be written is not
written. Deleting it is always safe.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path

from .. import __version__, files, names, record, rundir
from ..backends import base
from . import read
from .read import Entry, RunInfo

VAR = "TRAIN_MULTIGPU_RUNS_CACHE"  # a directory for the cache files, or "off"
OFF = "off"
FORMAT = 1
SETTLED_S = 2.0  # a file changed this recently is not trusted to its stat (its next write may keep it)
CACHE_MAX = 1 << 30  # a cache file larger than this is not read (10,000 runs: about 9 MiB)
ENDED = frozenset((read.SUCCESS, read.FAILED, read.HANG, read.INTERRUPTED, read.LOST))

_FIELDS = tuple(f.name for f in fields(RunInfo))  # a cached run: these values, in this order
_DERIVED = ("run_dir", "within")  # known from the run's id and the root: not kept
_RUN_DIR, _WITHIN, _HANDLE = (_FIELDS.index(name) for name in ("run_dir", "within", "handle"))
MISSING = -1  # the stamp of a path where nothing was
# a run's stamp: the hash of its paths' (inode, size, modification and change time in ns), in the order
# read (an int's and a tuple's hash are the same in every process of one Python version: the key has it)
ELSEWHERE = "//"  # a path outside the run's directory (a resumed run's trainer directory): from the root


def directory(environ=os.environ) -> str | None:
    """Where the cache files are; None: off."""
    chosen = environ.get(VAR)
    if chosen is not None:
        return None if chosen.strip().lower() in (OFF, "") else chosen
    home = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(home, names.PROG, "runs")


def _key() -> list:
    """What the cached fields depend on besides the files: this code, and the local time zone (the
    start of a record without one is read from the directory's name in local time)."""
    modules = (read, files, record, rundir, names, base, sys.modules[__name__])
    code = []
    for module in modules:
        try:
            info = os.stat(module.__file__)
            code.append([info.st_size, info.st_mtime_ns])
        except (OSError, TypeError):
            code.append(None)
    return [FORMAT, __version__, sys.version, code, list(time.tzname), time.timezone, time.altzone, list(_FIELDS)]


class Cache:
    """The cache of one run root: :meth:`read` is ``read.read_entry`` answered from it where it can
    be; :meth:`save` writes what changed."""

    def __init__(self, root: Path, where: str | None) -> None:
        self.root = os.path.abspath(root)
        self._prefix = self.root.rstrip(os.sep) + os.sep  # a run's directory: this and its id
        self.path = None
        if where is not None:
            digest = hashlib.sha256(self.root.encode(errors="surrogateescape")).hexdigest()[:32]
            self.path = os.path.join(where, f"{digest}.json")
        self.key = _key()
        self.old: dict[str, list] = self._load()
        self.new: dict[str, list] = {}
        self._fd: int | None = None  # the root, opened: each cached path is looked at from it
        if self.old:
            with contextlib.suppress(OSError):
                self._fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_NONBLOCK | os.O_CLOEXEC)
        self.changed = False
        self.hits = self.misses = 0

    def _load(self) -> dict[str, list]:
        """The cached runs, when the file is this user's, of this code and of this root; else none."""
        if self.path is None:
            return {}
        try:
            fd, info = files.open_fd(self.path)  # a regular file (a FIFO is not waited on)
        except OSError:
            return {}
        with os.fdopen(fd, "rb") as handle:
            if info.st_uid != os.geteuid() or info.st_size > CACHE_MAX:  # only this user's own
                return {}
            try:
                loaded = json.loads(handle.read(CACHE_MAX + 1))
            except (OSError, ValueError):
                return {}
        ok = isinstance(loaded, dict) and loaded.get("key") == self.key and loaded.get("root") == self.root
        runs = loaded.get("runs") if ok else None
        return runs if isinstance(runs, dict) else {}

    def read(self, entry: Entry, root: Path) -> RunInfo:
        """The run ``entry`` names: from the cache when every path it was read from is unchanged,
        else read (and kept when it can be)."""
        found = self._valid(entry)
        if found is not None:
            self.hits += 1
            self.new[entry.id] = self.old[entry.id]
            return found
        self.misses += 1
        self.changed = self.changed or entry.id in self.old
        began = time.time_ns()
        with files.looking() as looked:
            info = read.read_entry(entry, root)
        kept = self._kept(entry, info, looked, began)
        if kept is not None:
            self.new[entry.id] = kept
            self.changed = True
        return info

    def _valid(self, entry: Entry) -> RunInfo | None:
        """The cached run, when every path it was read from has the stamp it had (the RunInfo shares
        its lists with the cache: :meth:`save` before anything changes them)."""
        cached = self.old.get(entry.id)
        if cached is None or self._fd is None:
            return None
        try:
            values, looked, stamp = cached
            now: list[int] = []
            inside = entry.id + os.sep
            for name in looked:
                path = inside + name if name and name[0] != os.sep else name[2:] if name else entry.id
                try:
                    info = os.stat(path, dir_fd=self._fd)
                except FileNotFoundError:
                    now.append(MISSING)
                    continue
                now += (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
            if hash(tuple(now)) != stamp:
                return None
            values = list(values)
            values[_RUN_DIR] = self._prefix + entry.id
            values[_WITHIN] = self.root
            if values[_HANDLE] is not None:
                values[_HANDLE] = base.Handle(*values[_HANDLE])
            return RunInfo(*values)
        except (OSError, ValueError, TypeError, KeyError, IndexError, AttributeError):  # not this code's cache
            return None

    def _kept(self, entry: Entry, info: RunInfo, looked: dict, began: int) -> list | None:
        """What the cache keeps of ``info`` (None: nothing, it is read again next time)."""
        run_dir = self._prefix + entry.id
        ended = info.status in ENDED and info.exit_code is not None  # its record has its end
        unknown = info.status == read.UNKNOWN and info.pid is None and info.handle is None  # its files alone say
        if (
            not (ended or unknown)
            or info.run_dir != run_dir
            or info.within != self.root
            or not isinstance(looked.get(run_dir), os.stat_result)
        ):
            return None
        settled = began - int(SETTLED_S * 1e9)
        names, stamps = [], []
        for path, what in looked.items():
            if what is False or not path.startswith(self._prefix):
                return None
            if path == run_dir:
                names.append("")
            elif path.startswith(run_dir + os.sep):
                names.append(path[len(run_dir) + 1 :])
            else:
                names.append(ELSEWHERE + path[len(self._prefix) :])
            if what is None:
                stamps.append(MISSING)
                continue
            if max(what.st_mtime_ns, what.st_ctime_ns) > settled:
                return None
            stamps += (what.st_ino, what.st_size, what.st_mtime_ns, what.st_ctime_ns)
        values = [None if name in _DERIVED else getattr(info, name) for name in _FIELDS]
        if info.handle is not None:
            handle = info.handle
            values[_HANDLE] = [handle.backend, handle.id, handle.run_dir, dict(handle.extra)]
        return [values, names, hash(tuple(stamps))]  # info's own objects: save() writes them before any change

    def save(self) -> None:
        """Write the cache when it changed (a run read again, a run gone); never fails a listing.
        Called before anything changes the runs read (they share their lists with the cache)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self.path is None or not (self.changed or self.new.keys() != self.old.keys()):
            return
        try:
            data = json.dumps(
                {"key": self.key, "root": self.root, "runs": self.new}, separators=(",", ":"), allow_nan=False
            )
            os.makedirs(os.path.dirname(self.path), mode=0o700, exist_ok=True)
            # whole (a listing reading it at the same time sees one or the other), this user's alone
            files.replace_whole(self.path, data.encode(), mode=0o600)
        except (OSError, TypeError, ValueError):
            pass  # a cache that cannot be written (or a value JSON cannot hold): the next listing reads again


def reader(root: Path) -> tuple[Callable[[Entry, Path], RunInfo], Callable[[], None]]:
    """How the listing reads each run under ``root``, and what it calls once all are read (before
    anything changes them): the cache's, or, with the cache off, ``read.read_entry`` and nothing."""
    where = directory()
    if where is None:
        return read.read_entry, lambda: None
    kept = Cache(root, where)
    return kept.read, kept.save


def resolve(root: Path, ident: str) -> Path:
    """The run directory ``ident`` names (read.resolve): an id, a prefix or a path reads no run;
    ``last`` compares every run's start through the cache, as the listing reads them."""
    if ident != read.LAST:
        return read.resolve(root, ident)
    read_one, save = reader(root)
    try:
        return read.resolve(root, ident, read_one)
    finally:
        save()
