"""PyTorch's NCCL flight recorder, as a launch uses it (CUDA torchrun launches; the plan sets the
variables, launcher/plan.py ``flight_recorder_env`` / ``flight_recorder_files``).

Each rank's ProcessGroupNCCL keeps a ring buffer of its last collectives
(``TORCH_NCCL_TRACE_BUFFER_SIZE``). On a collective timeout (``TORCH_NCCL_DUMP_ON_TIMEOUT=1``) it
writes the buffer to ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE`` + rank, here ``<run_dir>/nccl/trace_rank_<R>``.
With ``TORCH_NCCL_DEBUG_INFO_PIPE_FILE`` each rank also opens the named pipe ``<value><rank>.pipe``
(here ``<run_dir>/nccl/pipe_rank_<R>.pipe``) and dumps when anything is written to it: that is how a
hang the launcher notices (before any NCCL timeout) gets the dumps too (:func:`trigger_dumps`).
Read them with ``python -m torch.distributed.flight_recorder.fr_trace <run_dir>/nccl``.

GPU only: on CPU (gloo) nothing is recorded; none of this has run on a GPU here.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import os
from collections.abc import Mapping
from pathlib import Path

from ..names import FR_DIR, FR_PIPE_FILE_VAR, FR_TEMP_FILE_VARS

READ_WITH = "python -m torch.distributed.flight_recorder.fr_trace"


def dump_dir(run_dir: Path) -> Path:
    return run_dir / FR_DIR


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
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as err:  # ENXIO: no reader (the rank is gone); ENOENT: removed meanwhile
            if err.errno not in (errno.ENXIO, errno.ENOENT, errno.EACCES):
                raise
            continue
        try:
            os.write(fd, b"1")
            written.append(path)
        except OSError:
            pass
        finally:
            os.close(fd)
    return written


def request_dumps(env: Mapping[str, str], run_dir: Path) -> list[str]:
    """For the hang path, before the ranks are stopped: :func:`trigger_dumps`, and the summary's lines
    saying where the dumps go and how to read them ([] when no rank opened a pipe: nothing to say).
    Each rank's ProcessGroupNCCL reads its pipe about once a second: give it that long before stopping it."""
    pipes = trigger_dumps(env)
    if not pipes:
        return []
    directory = dump_dir(run_dir)
    return [
        f"NCCL flight recorder: dumps requested from {len(pipes)} rank(s) into {directory} "
        f"(read with: {READ_WITH} {directory})"
    ]


def dump_files(run_dir: Path) -> list[Path]:
    """The dumps in ``<run_dir>/nccl`` (pipes left out)."""
    try:
        return sorted(path for path in dump_dir(run_dir).iterdir() if not path.name.endswith(".pipe"))
    except OSError:
        return []
