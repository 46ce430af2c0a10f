"""Files others may have written, and files the user names: one reader, one writer.

**Reading** (``train_multigpu runs``: a run root is often shared, and anyone who can write there can
put anything under a name the records use): :func:`open_regular` reads a regular file and nothing
else. A name that is not a link is opened once, non-blocking and without following a link
(``O_NOFOLLOW|O_NONBLOCK``: a FIFO opens without waiting for a writer) and anything but a regular
file is refused; a symbolic link is looked at through ``O_PATH`` first, so a link to a device or a
FIFO is refused without its target being opened (opening a FIFO blocks, a device may act on being
opened), then opened by the inode that was checked (``/proc/self/fd``): nothing swapped in between
is read. Where the opened file really is must be inside ``within`` (the run root): a link, or a
linked directory on the way, that leaves it is refused. :func:`read_bytes` adds a size cap per kind of file,
:func:`read_json` a JSON object with NaN/Infinity (and numbers too large for a float) read as null
and nesting bounded. Everything refused is an :class:`Unreadable` (an ``OSError``): callers that
already handle ``OSError`` name the reason (``strerror``) and go on. :func:`listed` lists a directory
the same way. Inside :func:`looking`, every file opened (or found missing) and every directory listed
is noted with its stat, taken as it was read: what a cache of what was read (``launcher/runs/cache.py``)
checks before it is used again.

**Writing** a path the user named (``runs compare --out``, ``save_profile=``): :func:`write_through`
writes into an existing regular file (or through a symbolic link to one), never replaces it (a link
stays a link, a hard link stays shared, the file keeps its owner and mode), refuses a device, FIFO,
socket or directory in one line (exit 2), and leaves nothing half written behind when it fails.

**A full disk** (:func:`out_of_space`: ENOSPC, EDQUOT, EIO) while a launch runs is no reason to end
it, nor to lose its exit code: the launcher's record writes that fail so leave no temporary file
behind, are left out, and the console says once (:func:`say_out_of_space`) that the disk is full.
:class:`Reserve` holds space for the last write that matters (status.json's close).

A leaf: standard library, :mod:`launcher.errors` and :mod:`launcher.names` only (``runs`` imports it for every listing).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import math
import os
import re
import stat
import sys
from pathlib import Path

from .errors import UserError
from .names import PROG

# size caps per kind of file (bytes): far above what the launcher writes, far below what hurts
JSON_MAX = 1 << 20  # status.json, composition.json, submit.json, run_info.json, env.json, exit records
PROGRESS_MAX = 8 << 20  # logs/progress.json (every rank of a large launch)
CONFIG_MAX = 4 << 20  # config.yaml
TEXT_MAX = 4 << 20  # command.sh, stacks' summary.txt, the head of a rank log
BEAT_MAX = 4096  # logs/rank<R>.beat: "iteration total"
METRICS_MAX = 256 << 20  # metrics.csv read whole (runs compare's curves)
DEPTH_MAX = 32  # nesting of a JSON record (the launcher's are 4 deep at most)

# a write that failed for lack of space (or a disk that failed under it): left out, said once
NO_SPACE = frozenset((errno.ENOSPC, errno.EDQUOT, errno.EIO))
RESERVE_BYTES = 1 << 20  # status.json's close: a launch's attempts and failure summary fit

_O_PATH = getattr(os, "O_PATH", 0)
_READ = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)


class Unreadable(OSError):
    """A file refused by the reader; ``strerror`` says why, in words."""

    def __init__(self, reason: str) -> None:
        super().__init__(errno.EINVAL, reason)


def kind(mode: int) -> str:
    """What a file type is called in messages.

    >>> kind(stat.S_IFIFO), kind(stat.S_IFCHR), kind(stat.S_IFREG)
    ('a FIFO', 'a character device', 'a regular file')
    """
    for test, name in (
        (stat.S_ISREG, "a regular file"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISLNK, "a symbolic link"),
    ):
        if test(mode):
            return name
    return "not a file"


def size_text(size: int) -> str:
    """
    >>> size_text(4096), size_text(1 << 20), size_text(3 * (1 << 30))
    ('4 KiB', '1 MiB', '3072 MiB')
    """
    return f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB" if size >= 1 << 10 else f"{size} bytes"


@functools.lru_cache(maxsize=64)
def _base(within: str) -> tuple[str, str]:
    """``within``'s real path, and it as a prefix (a listing asks thousands of times for one root)."""
    base = os.path.realpath(os.path.abspath(within))
    return base, base.rstrip(os.sep) + os.sep


def _real(path: str) -> str:
    return os.path.realpath(path)


def _inside(real: str, within: str | os.PathLike) -> bool:
    base, prefix = _base(within if isinstance(within, str) else os.fspath(within))
    return real == base or real.startswith(prefix)


def inside(path: str | os.PathLike, within: str | os.PathLike) -> bool:
    """Is ``path``'s real place (symbolic links followed) ``within``'s, or under it?"""
    try:
        return _inside(os.path.realpath(path), within)
    except (OSError, ValueError):
        return False


# -- what a reading looked at ---------------------------------------------------------------------
_looked: dict[str, os.stat_result | None | bool] | None = None  # inside looking(): path -> what it was


@contextlib.contextmanager
def looking():
    """Note, while inside, every path :func:`open_fd` and :func:`listed` are given: its stat as it was
    opened, None when there was nothing there, False when what was read cannot be known to stay the
    same by a stat (a symbolic link on the way, a refusal, a path that changed between two looks).
    Yields the dict of notes (not nested: an inner one takes over until it ends)."""
    global _looked
    outer, _looked = _looked, {}
    try:
        yield _looked
    finally:
        _looked = outer


def _look(name: str, what: os.stat_result | None | bool) -> None:
    if _looked is None:
        return
    before = _looked.get(name, what)
    if before is not what and not (  # the same path read twice (a node's status.json) must be the same
        isinstance(before, os.stat_result) and isinstance(what, os.stat_result) and _same(before, what)
    ):
        what = False
    _looked[name] = what


def _same(one: os.stat_result, other: os.stat_result) -> bool:
    """The same file, unchanged: device, inode, size, and the times of its last change (content, ctime)."""
    fields = ("st_dev", "st_ino", "st_size", "st_mtime_ns", "st_ctime_ns")
    return all(getattr(one, key) == getattr(other, key) for key in fields)


def _direct(name: str, real: str, within) -> bool:
    """``real`` (where the opened file is) is ``name`` under ``within``'s real place: no link on the way."""
    root = os.fspath(within)
    if not name.startswith(root.rstrip(os.sep) + os.sep):
        return False
    return real == _base(root)[0] + name[len(root.rstrip(os.sep)) :]


def listed(path: str | os.PathLike, within: str | os.PathLike | None = None) -> set[str]:
    """The names in the directory ``path`` (``OSError`` as ``os.listdir`` raises it). Inside
    :func:`looking`, opened first (without waiting: nothing but a directory is opened) and noted
    with the stat it had before it was read."""
    name = os.fspath(path)
    if _looked is None:
        return set(os.listdir(name))
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(name, flags)
    except FileNotFoundError:
        _look(name, None)
        raise
    except OSError:
        _look(name, False)
        raise
    try:
        info = os.fstat(fd)
        try:
            real = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # pragma: no cover - no /proc
            real = ""
        _look(name, info if within is not None and _direct(name, real, within) else False)
        return set(os.listdir(fd))
    finally:
        os.close(fd)


def open_fd(path: str | os.PathLike, within: str | os.PathLike | None = None) -> tuple[int, os.stat_result]:
    """A read-only descriptor of the regular file at ``path`` (non-blocking) and its stat. Refused
    (:class:`Unreadable`): anything not a regular file, a path whose real place is outside
    ``within``; ``FileNotFoundError`` when there is nothing there. Noted inside :func:`looking`."""
    if _looked is None:
        return _open_fd(path, within)
    name = os.fspath(path)
    try:
        fd, info = _open_fd(name, within)
    except FileNotFoundError:
        _look(name, None)
        raise
    except (OSError, ValueError):
        _look(name, False)
        raise
    if name not in _looked:  # opened where no stat of it was noted (not Linux): never trusted
        _look(name, False)
    return fd, info


def _open_fd(path: str | os.PathLike, within: str | os.PathLike | None = None) -> tuple[int, os.stat_result]:
    try:
        name = os.fspath(path)
        try:  # the common case, one open: not a link (a FIFO opens without blocking, and is refused)
            fd = os.open(name, _READ | getattr(os, "O_NOFOLLOW", 0))
        except OSError as err:
            if err.errno == errno.ENXIO:  # a socket: named for what it is
                raise Unreadable(f"not a regular file ({kind(os.lstat(name).st_mode)})") from None
            if err.errno != errno.ELOOP:
                raise
        else:
            return _checked(fd, name, within)
        if _O_PATH:  # a link: look at its target's inode without opening it (no device's open runs)
            handle = os.open(name, _O_PATH | os.O_CLOEXEC)
        else:  # pragma: no cover - not Linux: stat, then open and compare
            handle = -1
            info = os.stat(name)
            if not stat.S_ISREG(info.st_mode):
                raise Unreadable(f"not a regular file ({kind(info.st_mode)})")
    except ValueError:
        raise Unreadable("the path holds a NUL character") from None
    try:
        if handle >= 0:
            info = os.fstat(handle)
            if not stat.S_ISREG(info.st_mode):
                raise Unreadable(f"not a regular file ({kind(info.st_mode)})")
            if within is not None and not _inside(os.readlink(f"/proc/self/fd/{handle}"), within):
                raise Unreadable(f"a symbolic link out of {within}")
            fd = os.open(f"/proc/self/fd/{handle}", _READ)  # the inode checked above, nothing swapped in
            _look(name, False)  # a link: what it names may change without a stat of it telling
        else:  # pragma: no cover
            fd = os.open(name, _READ)
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode) or (opened.st_dev, opened.st_ino) != (info.st_dev, info.st_ino):
            os.close(fd)
            raise Unreadable("changed while it was opened")
        if handle < 0 and within is not None and not _inside(_real(name), within):  # pragma: no cover
            os.close(fd)
            raise Unreadable(f"a symbolic link out of {within}")
        return fd, opened
    finally:
        if handle >= 0:
            os.close(handle)


def _checked(fd: int, name: str, within) -> tuple[int, os.stat_result]:
    """``fd`` (opened without following a final link) when it is a regular file inside ``within``."""
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise Unreadable(f"not a regular file ({kind(info.st_mode)})")
        if within is not None:  # a directory on the way may be a link: where the file really is
            try:
                real = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:  # pragma: no cover - no /proc
                real = os.path.realpath(name)
            if not _inside(real, within):
                raise Unreadable(f"a symbolic link out of {within}")
            if _looked is not None:
                _look(name, info if _direct(name, real, within) else False)
        elif _looked is not None:
            _look(name, False)
    except BaseException:
        os.close(fd)
        raise
    return fd, info


def open_regular(path: str | os.PathLike, within: str | os.PathLike | None = None):
    """:func:`open_fd` as a binary file object (for seeking, reading line by line or in chunks)."""
    fd, _ = open_fd(path, within)
    return os.fdopen(fd, "rb")


def read_bytes(path: str | os.PathLike, limit: int, within: str | os.PathLike | None = None) -> bytes:
    """The whole regular file, refused when it holds more than ``limit`` bytes."""
    return _read_opened(*open_fd(path, within), limit)


def _read_opened(fd: int, info: os.stat_result, limit: int) -> bytes:
    """The file ``open_fd`` opened (``fd``, closed here), at most ``limit`` bytes."""
    try:
        if info.st_size > limit:
            raise Unreadable(f"larger than {size_text(limit)} ({size_text(info.st_size)})")
        chunks, size = [], 0
        while size <= limit:  # it may grow while read: at most limit + 1 bytes
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        data = b"".join(chunks)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise Unreadable(f"larger than {size_text(limit)}")
    return data


def read_text(path: str | os.PathLike, limit: int, within: str | os.PathLike | None = None) -> str:
    return read_bytes(path, limit, within).decode(errors="replace")


def read_head(path: str | os.PathLike, limit: int, within: str | os.PathLike | None = None) -> str:
    """At most the first ``limit`` bytes (a log's head: where it says where things are)."""
    with open_regular(path, within) as handle:
        return handle.read(limit).decode(errors="replace")


def read_tail(path: str | os.PathLike, limit: int, within: str | os.PathLike | None = None) -> str:
    """At most the last ``limit`` bytes."""
    with open_regular(path, within) as handle:
        handle.seek(0, os.SEEK_END)
        handle.seek(max(0, handle.tell() - limit))
        return handle.read(limit).decode(errors="replace")


_DECODER = json.JSONDecoder(parse_constant=lambda _: None)  # one, not one per file (json.loads with a hook)
_HUGE = re.compile(r"[eE]\+?\d{3}")  # an exponent that may overflow a float (1e999 reads as inf)


def _finite_and_shallow(value, limit: int = DEPTH_MAX) -> bool:
    """Replace non-finite floats by None (in place); False when nesting is deeper than ``limit``."""
    pending = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if depth > limit:
            return False
        pairs = item.items() if isinstance(item, dict) else enumerate(item)
        for key, child in pairs:
            if isinstance(child, float) and not math.isfinite(child):
                item[key] = None
            elif isinstance(child, (dict, list)):
                pending.append((child, depth + 1))
    return True


def parse_json(text: str | bytes):
    """JSON as a record holds it: NaN, Infinity and numbers beyond a float's range read as null;
    ``ValueError`` for what is not JSON or nests deeper than DEPTH_MAX.

    >>> parse_json('{"a": NaN, "b": [Infinity, 1e999, 2.5]}')
    {'a': None, 'b': [None, None, 2.5]}
    >>> parse_json("[" * 100000)
    Traceback (most recent call last):
    ...
    ValueError: nested deeper than 32 levels
    """
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    try:
        value = _DECODER.decode(text)
    except RecursionError:
        raise ValueError(f"nested deeper than {DEPTH_MAX} levels") from None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    # walked only when it could matter (a listing parses two files per run): C-speed tests first
    if isinstance(value, (dict, list)) and (text.count("[") + text.count("{") > DEPTH_MAX or _HUGE.search(text)):
        if not _finite_and_shallow(value):
            raise ValueError(f"nested deeper than {DEPTH_MAX} levels")
    return value


def read_json(path: str | os.PathLike, limit: int = JSON_MAX, within: str | os.PathLike | None = None):
    """The JSON value of a regular file (see :func:`parse_json`); ``Unreadable`` when it is not JSON."""
    return read_json_owned(path, limit, within)[0]


def read_json_owned(path: str | os.PathLike, limit: int = JSON_MAX, within: str | os.PathLike | None = None):
    """:func:`read_json`'s value and the uid that owns the file it was read from (one open: the owner
    of the bytes read, whatever is swapped in at that path before or after). A record that makes
    ``runs`` act (run a launch, stop a job) is taken only from its reader's own files: anyone who can
    write a shared run root can write any record there, but no one can make a file another user owns."""
    fd, info = open_fd(path, within)
    try:
        return parse_json(_read_opened(fd, info, limit)), info.st_uid
    except ValueError as err:
        reason = str(err) if str(err).startswith("nested") else "not valid JSON (half written or edited)"
        raise Unreadable(reason) from None


# -- writing a path the user named ----------------------------------------------------------------
def refusal(path: str | os.PathLike, key: str, exclusive: bool = False) -> UserError | None:
    """Why ``path`` cannot be written by :func:`write_through` (None: it can be tried), told
    without writing anything: for a check before the work that produces the bytes."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        if os.path.lexists(path):
            return UserError(key, path, "a symbolic link to nothing", "name a file path, or remove the link")
        return None
    except (OSError, ValueError) as err:
        return UserError(key, path, f"cannot write it: {getattr(err, 'strerror', None) or err}")
    if not stat.S_ISREG(info.st_mode):
        return UserError(key, path, f"not a regular file ({kind(info.st_mode)})", "name a file path")
    if exclusive:
        return UserError(key, path, "already exists", "choose another name or delete the file")
    return None


def replace_whole(path: str | os.PathLike, data: bytes, mode: int = 0o666) -> None:
    """``data`` as the file at ``path``, replaced atomically: a reader sees the old file or the new one,
    never half, whoever else writes it at the same time. For the launcher's own files (records, its
    pictures, the listing's cache; a path the user names goes through :func:`write_through`). The
    temporary file is made afresh under a name of this write's own (O_EXCL, never through a symbolic
    link: a directory others may write holds no name to plant a link under); a link at ``path`` is
    replaced, not followed. OSError: not written, nothing left behind."""
    target = os.fspath(path)
    folder, name = os.path.split(target)
    tmp = os.path.join(folder, f".{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, target)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_through(path: str | os.PathLike, data: bytes, key: str, exclusive: bool = False) -> Path:
    """Write ``data`` at the path the user named under ``key``: a new file, or into the existing
    regular file (through a symbolic link to one) -- opened and rewritten in place, never replaced.
    ``exclusive``: an existing file is refused instead. One-line :class:`UserError` for anything
    else; on failure a new file is removed and an existing one keeps its content when the space for
    the new one could not be had (it is reserved before the first byte is written)."""
    target = Path(path)
    problem = refusal(target, key, exclusive)
    if problem is not None:
        raise problem
    created = False
    try:
        try:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
            created = True
        except FileExistsError:
            if exclusive:
                raise UserError(key, path, "already exists", "choose another name or delete the file") from None
            flags = os.O_WRONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
            fd = os.open(target, flags)
    except UserError:
        raise
    except OSError as err:
        raise UserError(key, path, f"cannot write it: {err.strerror or err}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):  # swapped for something else since refusal() looked
            raise UserError(key, path, f"not a regular file ({kind(info.st_mode)})", "name a file path")
        _reserve(fd, len(data))
        view, offset = memoryview(data), 0
        while offset < len(data):
            offset += os.pwrite(fd, view[offset:], offset)
        os.ftruncate(fd, len(data))
    except UserError:
        os.close(fd)
        raise
    except OSError as err:
        os.close(fd)
        if created:
            with contextlib.suppress(OSError):
                os.unlink(target)
        raise UserError(key, path, f"cannot write it: {err.strerror or err}") from None
    os.close(fd)
    return target


def _reserve(fd: int, size: int) -> None:
    """Claim the space before writing (a full disk fails here, the file still as it was)."""
    if size and hasattr(os, "posix_fallocate"):
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as err:
            if err.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS, errno.ENODEV):
                raise


def out_of_space(err: BaseException) -> bool:
    """Whether ``err`` is a write that failed for lack of space (or an I/O error of the disk)."""
    return isinstance(err, OSError) and err.errno in NO_SPACE


_said_full: set[str] = set()


def say_out_of_space(path: str | os.PathLike, err: OSError) -> None:
    """One line on stderr, once per process: the disk is full, what could not be written, the launch goes on."""
    if _said_full:
        return
    _said_full.add(str(path))
    with contextlib.suppress(OSError, ValueError):
        print(
            f"[{PROG}] the disk is full: {path} not written ({err.strerror or err}); the launch goes on, "
            "what cannot be written is left out of its record",
            file=sys.stderr,
            flush=True,
        )


class Reserve:
    """``size`` bytes held on the file system of ``directory`` in a file without a name (``O_TMPFILE``:
    nothing is left behind, the kernel frees it when this process ends), given back by
    :meth:`release` when a write that matters found the disk full. Nothing held where the file
    system cannot (no ``O_TMPFILE``, already full)."""

    def __init__(self, directory: str | os.PathLike, size: int = RESERVE_BYTES) -> None:
        self.fd: int | None = None
        tmpfile = getattr(os, "O_TMPFILE", 0)
        if not tmpfile:
            return
        try:
            fd = os.open(directory, tmpfile | os.O_WRONLY | getattr(os, "O_CLOEXEC", 0), 0o600)
        except OSError:
            return
        try:
            os.posix_fallocate(fd, 0, size)
        except (OSError, AttributeError):
            os.close(fd)
            return
        self.fd = fd

    def release(self) -> bool:
        """Give the space back; whether there was any."""
        fd, self.fd = self.fd, None
        if fd is None:
            return False
        with contextlib.suppress(OSError):
            os.close(fd)
        return True
