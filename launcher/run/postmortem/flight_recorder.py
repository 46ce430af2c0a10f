"""PyTorch's NCCL flight recorder, as a launch uses it (CUDA torchrun launches; the plan sets the
variables, launcher/plan.py ``flight_recorder_env`` / ``flight_recorder_files``).

Each rank's ProcessGroupNCCL keeps a ring buffer of its last collectives
(``TORCH_NCCL_TRACE_BUFFER_SIZE``). On a collective timeout (``TORCH_NCCL_DUMP_ON_TIMEOUT=1``) it
writes the buffer to ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE`` + rank, here ``<run_dir>/nccl/trace_rank_<R>``.
With ``TORCH_NCCL_DEBUG_INFO_PIPE_FILE`` each rank also opens the named pipe ``<value><rank>.pipe``
(here ``<run_dir>/nccl/pipe_rank_<R>.pipe``) and dumps when anything is written to it: that is how a
hang the launcher notices (before any NCCL timeout) gets the dumps too (:func:`trigger_dumps`); the
hang path then waits for them (:func:`request_dumps`, at most :data:`DUMP_WAIT_S`) before it stops
any rank.
Read them with ``python -m torch.distributed.flight_recorder.fr_trace <run_dir>/nccl``.

GPU only: on CPU (gloo) nothing is recorded; none of this has run on a GPU here.
"""

from __future__ import annotations

import contextlib
import glob
import os
import stat
import time
from collections.abc import Mapping
from pathlib import Path

from ...names import FR_PIPE_FILE_VAR, FR_TEMP_FILE_VARS
from ...rundir import RunPaths

READ_WITH = "python -m torch.distributed.flight_recorder.fr_trace"
TORCH_TEMP_FILE = "/tmp/nccl_trace_rank_"  # torch's own default dump prefix (FlightRecorder.hpp)
DUMP_WAIT_S = 5.0  # a hang waits this long for the dumps asked for (a rank reads its pipe about once a second)


def dump_dir(run_dir: Path) -> Path:
    return RunPaths(run_dir).flight_recorder


def prepare(env: Mapping[str, str]) -> None:
    """Create the directories the ranks write dumps and open pipes in (torch creates neither)."""
    for name in (*FR_TEMP_FILE_VARS, FR_PIPE_FILE_VAR):
        value = env.get(name)
        if value:
            with contextlib.suppress(OSError):
                os.makedirs(os.path.dirname(value) or ".", exist_ok=True)


def trigger_dumps(env: Mapping[str, str]) -> list[str]:
    """Ask every rank of this node that opened its dump pipe for a flight-recorder dump now (a hang).
    ``env``: the launch's environment (the plan's, over the launcher's), where
    ``TORCH_NCCL_DEBUG_INFO_PIPE_FILE`` names the pipes' stem. Returns the pipes written to; a no-op
    (``[]``) when the variable is unset or no rank has opened a pipe (CPU, gloo, not initialised yet).
    Never blocks: a pipe without a reader is skipped."""
    stem = env.get(FR_PIPE_FILE_VAR)
    if not stem:
        return []
    written = []
    for path in sorted(glob.glob(glob.escape(stem) + "*.pipe")):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY)
        except OSError:  # ENXIO: no reader (the rank is gone); ENOENT: removed meanwhile; EISDIR ...
            continue
        try:
            if not stat.S_ISFIFO(os.fstat(fd).st_mode):  # not a rank's pipe (a file, a symlink to one): untouched
                continue
            os.write(fd, b"1")
            written.append(path)
        except OSError:
            pass
        finally:
            os.close(fd)
    return written


def request_dumps(env: Mapping[str, str], run_dir: Path, wait_s: float | None = None) -> list[str]:
    """For the hang path, before the ranks are stopped: :func:`trigger_dumps`, then wait (at most
    ``wait_s``, default :data:`DUMP_WAIT_S`) until each rank asked has written its dump
    (``<TORCH_NCCL_DEBUG_INFO_TEMP_FILE><rank>``, new or rewritten, its size settled), so that the
    teardown does not kill a rank halfway through it. Returns the summary's lines: which dumps were
    written and how to read them, which ranks wrote none ([] when no rank opened a pipe)."""
    stem = env.get(FR_PIPE_FILE_VAR) or ""
    prefix = next((env[name] for name in FR_TEMP_FILE_VARS if env.get(name)), TORCH_TEMP_FILE)
    before = {path: _signature(path) for path in _dumps_of(stem, prefix, glob.glob(glob.escape(stem) + "*.pipe"))}
    pipes = trigger_dumps(env)
    if not pipes:
        return []
    expected = _dumps_of(stem, prefix, pipes)
    deadline = time.monotonic() + (DUMP_WAIT_S if wait_s is None else wait_s)
    seen: dict[str, tuple[float, int] | None] = {}
    while True:
        now = {path: _signature(path) for path in expected}
        done = {path for path, sig in now.items() if sig and sig != before.get(path) and sig == seen.get(path)}
        if len(done) == len(expected) or time.monotonic() >= deadline:
            break
        seen = now
        time.sleep(0.1)
    written = [path for path in expected if path in done]
    missing = [rank for path, rank in expected.items() if path not in done]
    lines = []
    if written:
        names = ", ".join(os.path.basename(path) for path in written)
        where = os.path.dirname(written[0])
        lines.append(
            f"NCCL flight recorder: {len(written)} dump(s) in {where}: {names} (read with: {READ_WITH} {where})"
        )
    if missing:
        waited = DUMP_WAIT_S if wait_s is None else wait_s
        ranks = ", ".join(missing)
        lines.append(
            f"NCCL flight recorder: no dump from rank(s) {ranks} within {waited:g} s of asking (through its pipe)"
        )
    return lines


def _dumps_of(stem: str, prefix: str, pipes: list[str]) -> dict[str, str]:
    """The dump file each pipe's rank writes: ``<prefix><rank>`` for ``<stem><rank>.pipe``."""
    found = {}
    for pipe in sorted(pipes):
        rank = pipe[len(stem) : -len(".pipe")]
        if rank.isdigit():
            found[f"{prefix}{rank}"] = rank
    return found


def _signature(path: str) -> tuple[float, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (info.st_mtime, info.st_size) if info.st_size > 0 else None


def dump_files(run_dir: Path) -> list[Path]:
    """The dumps in ``<run_dir>/nccl`` (pipes left out)."""
    try:
        return sorted(path for path in dump_dir(run_dir).iterdir() if not path.name.endswith(".pipe"))
    except OSError:
        return []
