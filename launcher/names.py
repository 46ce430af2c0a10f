"""One name, one place: the program's name, the environment variables the launcher sets, and how an
override names its key. Standard library only (the watchdog imports it).

``run/worker.py`` is a separate program that must not import the package (the worker interpreter,
``python=``, may not have it installed): it keeps copies of the variables it reads, and
tests/test_layout.py checks that they match these.
"""

from __future__ import annotations

from collections.abc import Sequence

PROG = "train_multigpu"
RAY_CONFIG_VAR = "TRAIN_MULTIGPU_RAY_CONFIG"  # a Ray job's node: the resolved config it launches from


def version_line() -> str:
    """``train_multigpu --version``: ``train_multigpu 0.1.0 (Hydra 1.3.8)``. Hydra's version from its
    distribution's metadata, not by importing it: the answer is quick; once Hydra is imported (a
    submit=ssh node answering the preflight, after its composition), from the module itself (the
    metadata's search of every path entry: about 0.1 s)."""
    import sys

    from . import __version__

    hydra = getattr(sys.modules.get("hydra"), "__version__", None)
    if hydra is None:
        from importlib import metadata

        try:
            hydra = metadata.version("hydra-core")
        except metadata.PackageNotFoundError:
            hydra = "not installed"
    return f"{PROG} {__version__} (Hydra {hydra})"


# set for every process of a launch
RUN_DIR_VAR = "TRAIN_MULTIGPU_RUN_DIR"  # the run directory (the trainer keeps its outputs there)
BACKEND_VAR = "TRAIN_MULTIGPU_DIST_BACKEND"  # nccl or gloo
# set by plan.supervised() for the rank wrapper (run/worker.py) and the watchdog
LOG_DIR_VAR = "TRAIN_MULTIGPU_LOG_DIR"
RANK_LOGS_VAR = "TRAIN_MULTIGPU_RANK_LOGS"
NODE_RANK_VAR = "TRAIN_MULTIGPU_NODE_RANK"
# exported by the rank wrapper to each rank: <log_dir>/rank<R>.beat, written by the rank to show progress
HEARTBEAT_VAR = "TRAIN_MULTIGPU_HEARTBEAT_FILE"
# the attempt a process belongs to (0, 1, ...: restart.max, run/attempts.py); set when restarts are on
ATTEMPT_VAR = "TRAIN_MULTIGPU_ATTEMPT"
# the launch's marker: every process started for a launch carries it (run/process/procs.py finds them by it)
LAUNCH_ID_VAR = "TRAIN_MULTIGPU_LAUNCH_ID"
# launcher.cpu_binding (docs/cpu_placement.md), read by the rank wrapper: each local rank's CPU list,
# ";" between ranks (set when the wrapper binds: not where torchrun's --numa-binding does), and each
# local rank's OMP_NUM_THREADS from its mask (set unless the user set OMP_NUM_THREADS)
CPU_BIND_VAR = "TRAIN_MULTIGPU_CPU_BIND"
OMP_THREADS_VAR = "TRAIN_MULTIGPU_OMP_THREADS"
# tracker=wandb/mlflow (launcher/trackers/): the trackers chosen, for the bundled trainers (wandb,mlflow);
# and who logs: "0" (global rank 0: the rank wrapper turns W&B off on the others) or "all"
TRACKERS_VAR = "TRAIN_MULTIGPU_TRACKERS"
TRACKER_RANKS_VAR = "TRAIN_MULTIGPU_TRACKER_RANKS"
# set by submit=ssh on each remote launcher's command (value 1, nothing secret): it reads its secrets
# from stdin and ends its launch when stdin does (run/leash.py)
SSH_CHANNEL_VAR = "TRAIN_MULTIGPU_SSH_CHANNEL"


def override_key(override: str) -> str:
    """The key a Hydra override sets (``+``/``~``/``++`` prefixes and the value dropped).

    >>> override_key("+worker_env.HF_TOKEN=abc"), override_key("~seed"), override_key("profile=x")
    ('worker_env.HF_TOKEN', 'seed', 'profile')
    """
    return override.lstrip("+~").split("=", 1)[0]


def swept(overrides: Sequence[Sequence[str]]) -> list[tuple[str, ...]]:
    """Each job's own overrides: those not shared by every job of its sweep (a single job keeps all).

    >>> swept([("seed=1", "task=A"), ("seed=2", "task=A")])
    [('seed=1',), ('seed=2',)]
    """
    if len(overrides) < 2:
        return [tuple(o) for o in overrides]
    common = set(overrides[0]).intersection(*map(set, overrides[1:]))
    return [tuple(o for o in job if o not in common) for job in overrides]


# PyTorch's NCCL flight recorder, set for CUDA torchrun launches unless the user set them (names as
# torch 2.13 reads them: ProcessGroupNCCL.hpp, FlightRecorder.hpp; each knob with its newer alias)
FR_BUFFER_VARS = ("TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_FR_BUFFER_SIZE")
FR_DUMP_ON_TIMEOUT_VAR = "TORCH_NCCL_DUMP_ON_TIMEOUT"
FR_TEMP_FILE_VARS = ("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "TORCH_FR_DUMP_TEMP_FILE")  # dump: <value><rank>
FR_PIPE_FILE_VAR = "TORCH_NCCL_DEBUG_INFO_PIPE_FILE"  # each rank reads <value><rank>.pipe: a write dumps
FR_DIR = "nccl"  # <run_dir>/nccl/: trace_rank_<R> dumps, pipe_rank_<R>.pipe
FR_TRACE_PREFIX = "trace_rank_"
FR_PIPE_PREFIX = "pipe_rank_"
