"""The one summary table of a submitted sweep (launcher/backends/summary.py): the SLURM, Kubernetes
and Ray tables it replaced, shown exactly as before (the expected texts are those tables' output)."""

from __future__ import annotations

from launcher.backends.base import DRY_RUN
from launcher.backends.summary import Submission, table
from launcher.k8s import submit as k8s_submit
from launcher.ray_submit import submit as ray_submit
from launcher.slurm import submit as slurm_submit

POINTS = [("seed=1", "lr=0.1"), ("seed=2", "lr=0.1"), ("seed=3", "lr=0.1")]


def test_slurm_table():
    submitted = [
        Submission(POINTS[0], "/r/0", "101"),
        Submission(POINTS[1], "/r/1", "102"),
        Submission(POINTS[2], "", None, "sbatch: error: bad"),
    ]
    assert table(submitted) == "\n".join(
        [
            "[train_multigpu] sweep: 2 of 3 job(s) submitted",
            "  #  job id  overrides  run directory / error",
            "  0  101     seed=1     /r/0",
            "  1  102     seed=2     /r/1",
            "  2  FAILED  seed=3     sbatch: error: bad",
        ]
    )
    shown = [Submission(p, f"/r/{i}", None, DRY_RUN) for i, p in enumerate(POINTS)]
    assert (
        slurm_submit.summary(shown)
        == table(shown)
        == "\n".join(
            [
                "[train_multigpu] sweep: 3 job(s), dry run: nothing written, nothing submitted",
                "  #  job id   overrides  run directory / error",
                "  0  dry run  seed=1     /r/0",
                "  1  dry run  seed=2     /r/1",
                "  2  dry run  seed=3     /r/2",
            ]
        )
    )


def test_kubernetes_table():
    created = [Submission(POINTS[0], "/r/0", "tmg-a"), Submission(POINTS[1], "", None, "kubectl: refused")]
    assert k8s_submit.summary(created) == "\n".join(
        [
            "[train_multigpu] sweep: 1 of 2 job(s) created",
            "  #  job name  overrides  run directory / error",
            "  0  tmg-a     seed=1     /r/0",
            "  1  FAILED    seed=2     kubectl: refused",
        ]
    )
    shown = [Submission(p, f"/r/{i}", f"tmg-{i}", DRY_RUN) for i, p in enumerate(POINTS)]
    assert k8s_submit.summary(shown) == "\n".join(
        [
            "[train_multigpu] sweep: 3 job(s), dry run: nothing written, nothing created",
            "  #  job name  overrides  run directory / error",
            "  0  tmg-0     seed=1     /r/0",
            "  1  tmg-1     seed=2     /r/1",
            "  2  tmg-2     seed=3     /r/2",
        ]
    )


def test_ray_table_follows_state_and_exit():
    jobs = [
        Submission(POINTS[0], "/r/0", "raysubmit_1", None, "SUCCEEDED", 0),
        Submission(POINTS[1], "/r/1", "raysubmit_2", None, "FAILED", 3),
        Submission(POINTS[2], "", None, "ray: refused"),
    ]
    assert ray_submit.summary(jobs) == "\n".join(
        [
            "[train_multigpu] Ray: 2 of 3 job(s) submitted; failed: 1, 2",
            "  #  job id         state      exit  overrides  run directory / error",
            "  0  raysubmit_1    SUCCEEDED  0     seed=1     /r/0",
            "  1  raysubmit_2    FAILED     3     seed=2     /r/1",
            "  2  NOT SUBMITTED                   seed=3     ray: refused",
        ]
    )
    shown = [Submission(p, f"/r/{i}", None, DRY_RUN) for i, p in enumerate(POINTS)]
    assert ray_submit.summary(shown) == "\n".join(
        [
            "[train_multigpu] Ray: 3 job(s), dry run: nothing written, nothing submitted",
            "  #  job id   state  exit  overrides  run directory / error",
            "  0  dry run               seed=1     /r/0",
            "  1  dry run               seed=2     /r/1",
            "  2  dry run               seed=3     /r/2",
        ]
    )
