"""One name, one place: the program's name, the environment variables the launcher sets, and how an
override names its key. Standard library only (the watchdog imports it).

``run/worker.py`` is a separate program that must not import the package (the worker interpreter,
``python=``, may not have it installed): it keeps copies of the variables it reads, and
tests/test_layout.py checks that they match these.
"""

from __future__ import annotations

PROG = "train_multigpu"

# set for every process of a launch
RUN_DIR_VAR = "TRAIN_MULTIGPU_RUN_DIR"  # the run directory (the trainer keeps its outputs there)
BACKEND_VAR = "TRAIN_MULTIGPU_DIST_BACKEND"  # nccl or gloo
# set by plan.supervised() for the rank wrapper (run/worker.py) and the watchdog
LOG_DIR_VAR = "TRAIN_MULTIGPU_LOG_DIR"
RANK_LOGS_VAR = "TRAIN_MULTIGPU_RANK_LOGS"
NODE_RANK_VAR = "TRAIN_MULTIGPU_NODE_RANK"
# exported by the rank wrapper to each rank: <log_dir>/rank<R>.beat, written by the rank to show progress
HEARTBEAT_VAR = "TRAIN_MULTIGPU_HEARTBEAT_FILE"
# the launch's marker: every process started for a launch carries it (run/procs.py finds them by it)
LAUNCH_ID_VAR = "TRAIN_MULTIGPU_LAUNCH_ID"


def override_key(override: str) -> str:
    """The key a Hydra override sets (``+``/``~``/``++`` prefixes and the value dropped).

    >>> override_key("+worker_env.HF_TOKEN=abc"), override_key("~seed"), override_key("profile=x")
    ('worker_env.HF_TOKEN', 'seed', 'profile')
    """
    return override.lstrip("+~").split("=", 1)[0]
