"""Exit code 2 has two meanings a user must tell apart: the launcher's refusal (one ``error:`` line,
nothing started) and a rank's usage error after the launch started (the script refused its
arguments: its exit code passes through, and the failure summary says so, under one class name,
``usage``, in the summary, the record's failure and the attempts)."""

from __future__ import annotations

import pytest

from launcher.run.postmortem import causes
from launcher.run.postmortem.failure import Failure
from supervise_util import finish, start, status


def test_a_rank_exit_2_is_the_usage_class_with_its_words(tmp_path):
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    (log_dir / "rank0.log").write_text("usage: train.py [-h]\ntrain.py: error: unrecognized arguments: --bogus\n")
    failure = Failure(node=0, rank=0, local_rank=0, exit_code=2)
    found = causes.diagnose(failure, causes.Context(log_dir, torchrun=False))
    assert found.cls == "usage"
    assert found.lines()[0] == "  cause: usage: the script refused its arguments (rank exit 2)"
    assert "train_multigpu's own refusals, exit 2 too, are one 'error:' line before anything starts" in found.hint


@pytest.mark.timeout(180)
def test_a_bundled_trainer_refusing_its_arguments_after_the_start_says_so(tmp_path):
    """A real launch: the bundled trainer's argparse error (exit 2) after torchrun started."""
    proc = start(tmp_path, "launcher.nproc_per_node=1", "restart.max=1", script_args=("--bogus_flag",))
    rc, out, err = finish(proc, timeout=150)
    assert rc == 2, err  # the rank's code passes through
    assert not err.startswith("train_multigpu: error:"), err  # not the launcher's refusal
    assert "  cause: usage: the script refused its arguments (rank exit 2)" in err, err
    record = status(tmp_path)
    assert record["failure"]["class"] == "usage"
    assert [a["cause"] for a in record["attempts"]] == ["usage"]  # one name: not restarted, not "exit-code"
