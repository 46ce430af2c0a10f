"""Fail-fast with real collectives: the surviving ranks are blocked in torch.distributed (gloo) or in
jax.distributed when a peer dies, and must not hang the launch."""

from __future__ import annotations

import time

import pytest

from conftest import ALLREDUCE
from supervise_util import REPO, finish, start, status

JAX_FAIL = REPO / "tests" / "workers" / "jax_fail_after_init.py"


@pytest.mark.timeout(90)
@pytest.mark.parametrize("jax", [False, True], ids=["torchrun-gloo", "jax"])
def test_a_rank_exiting_ends_ranks_blocked_in_collectives(tmp_path, jax):
    if jax:  # both ranks join jax.distributed first, then rank 1 exits and rank 0 waits for it
        proc = start(tmp_path, "launcher=skrl_jax", "launcher.nproc_per_node=2", f"script={JAX_FAIL}")
    else:  # rank 1 exits after init_process_group, rank 0 waits in all_reduce
        proc = start(
            tmp_path, "launcher.nproc_per_node=2", f"script={ALLREDUCE}", script_args=("--exit_code_on_rank", "1:7")
        )
    started = time.monotonic()
    code, out, err = finish(proc, timeout=80)
    assert code == 7, err
    assert "FAILED: node 0, rank 1 (local rank 1): exit code 7" in err
    assert status(tmp_path)["failure"]["exit_code"] == 7
    assert time.monotonic() - started < 30
    assert "was not stopped" not in out
    if jax:
        assert "rank 1 joined" in err  # the failed rank's last log lines


@pytest.mark.timeout(60)
def test_an_interpreter_that_does_not_exist_is_a_user_error(tmp_path):
    proc = start(tmp_path, "python=/nonexistent/python")
    code, out, err = finish(proc)
    assert code == 2
    assert err.strip() == (  # checked before the run directory is made (issue 13 item 4): none is left
        "train_multigpu: error: python=/nonexistent/python: no such interpreter: not an executable file, nor a "
        "command on PATH (set python= to an interpreter that exists, or leave it unset)"
    )
