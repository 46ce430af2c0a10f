"""launcher.local_nodes=true, real: two nodes' launchers on this machine, each node's rank pinned to
its own share of the cores (as a parallel sweep's lanes are), not both to all of them."""

from __future__ import annotations

import os

import pytest

from ports import free_port
from test_multinode_launcher import _two_loopback_launchers

AFFINITY = """
import os, pathlib
out = pathlib.Path(os.environ["TRAIN_MULTIGPU_RUN_DIR"]) / "affinity"
out.write_text(",".join(map(str, sorted(os.sched_getaffinity(0)))))
"""


@pytest.mark.timeout(150)
def test_each_local_node_runs_on_its_own_cores(tmp_path):
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip("needs 2 usable CPU cores")
    script = tmp_path / "affinity.py"
    script.write_text(AFFINITY)
    port = free_port(2)
    overrides = [
        "launcher=multinode",
        "launcher.nnodes=2",
        "launcher.master_addr=127.0.0.1",
        f"launcher.master_port={port}",
        "launcher.local_nodes=true",
        "launcher.nproc_per_node=1",
        f"script={script}",
    ]
    _two_loopback_launchers(tmp_path, overrides, timeout=120)
    half = len(cores) // 2
    for node in (0, 1):
        (run,) = (tmp_path / f"n{node}").glob("runs/*")
        pinned = (run / "affinity").read_text()
        assert pinned == ",".join(map(str, cores[node * half : (node + 1) * half])), (node, pinned)
