"""Skip a test that needs what this machine lacks, saying why -- or fail it when CI requires it.

``TRAIN_MULTIGPU_REQUIRE_<SWITCH>=1`` (``.ci/run`` sets one for each thing it installs or starts:
SLURM, RAY, NETNS, SSH, KUBECTL, ROOT, OOM, STRACE, PODMAN,
MLFLOW (a real `mlflow server`: tests/test_trackers.py); CORES: two usable CPU cores) turns the skip into a
failure, so a broken setup in CI never hides behind a skip. One helper for every switch (a leaf:
conftest, netns, ray_cluster and slurm_cluster import it)."""

from __future__ import annotations

import os

import pytest


def variable(switch: str) -> str:
    return f"TRAIN_MULTIGPU_REQUIRE_{switch}"


def unavailable(switch: str, reason: str) -> None:
    var = variable(switch)
    if os.environ.get(var) == "1":
        pytest.fail(f"{reason} ({var}=1: required here)", pytrace=False)
    pytest.skip(reason)
