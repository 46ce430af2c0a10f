"""The goodput ledger, pure (launcher/goodput.py; docs/goodput.md): the parts add up to the wall time
in every case, and each category is what the docs define. The ledger of a real launch restarted
once, torch and JAX, is checked in tests/test_recovery.py (ledger_agrees, timeline_drawn)."""

from __future__ import annotations

import json

import pytest

from launcher import goodput


def phase(**fields) -> dict:
    return {"attempt": 0, "started": 10.0, "ended": 100.0, **fields}


def beating(**fields) -> dict:
    """A first attempt whose ranks beat: up at 20 s, its first iteration done at 25 s."""
    return phase(ranks_up=20.0, up_iteration=0, first_at=25.0, first_iteration=1, **fields)


def parts(began, closed, phases, **kwargs) -> dict:
    led = goodput.ledger(began, closed, phases, ranks=4, **kwargs)
    assert sum(led[c] for c in goodput.CATEGORIES) == pytest.approx(led["wall_s"], abs=1e-6)
    return led


def test_a_script_without_heartbeats_gets_what_the_launcher_knows():
    led = parts(0.0, 101.0, [phase()])
    assert (led["launcher_startup"], led["productive"], led["teardown"], led["wall_s"]) == (10.0, 90.0, 1.0, 101.0)
    assert led["rank_seconds"] == 404.0 and led["line"] == "goodput 89%: no restarts, start-up 10 s"


def test_without_heartbeats_a_restart_that_starts_over_loses_the_whole_attempt():
    first = phase(ended=40.0, failure_found=38.0, restart=True, cause="exit-code")
    second = phase(attempt=1, started=41.0, ended=100.0, resumed_from=None)
    led = parts(0.0, 100.0, [first, second])
    assert led["lost_work"] == 28.0 and led["restart"] == 3.0 and led["productive"] == 59.0
    assert led["restarts"] == 1 and led["iterations_redone"] == 0


def test_a_hang_is_the_last_beat_to_its_detection():
    hung = beating(last_beat=34.0, iteration=10, failure_found=94.0, cause="hang", ended=96.0)
    led = parts(0.0, 97.0, [hung])
    assert (led["rank_startup"], led["first_iteration"], led["productive"]) == (10.0, 5.0, 9.0)
    assert (led["hang"], led["teardown"]) == (60.0, 3.0)
    assert led["line"] == "goodput 9%: no restarts, hang 60 s, start-up 25 s"


def test_lost_work_is_the_iterations_redone_at_that_attempts_pace():
    # iterations 1..12 at 1 s each after a 5 s first iteration; the checkpoint at 10; a crash after 12
    first = beating(last_beat=36.0, iteration=12, failure_found=37.0, ended=39.0, restart=True, cause="exit-code")
    second = phase(
        attempt=1,
        started=40.0,
        ended=80.0,
        start_iteration=10,
        resumed_from="ck/iter_000010.ckpt",
        ranks_up=50.0,
        up_iteration=10,
        first_at=52.0,
        first_iteration=11,
        last_beat=71.0,
        iteration=30,
    )
    led = parts(0.0, 81.0, [first, second])
    assert (led["iterations_redone"], led["lost_work"]) == (2, 2.0)
    assert led["productive"] == 9.0 + 19.0
    # the restart: the crash (the last beat) to attempt 1's first iteration past its checkpoint
    assert led["restart"] == 52.0 - 36.0
    assert led["line"] == "goodput 35%: 1 restart cost 18 s, 2 iterations redone, start-up 25 s"
    cut = goodput.segments(0.0, 81.0, [first, second])
    kinds = [(a, b, c) for a, b, c, _ in cut]
    assert kinds[3:5] == [(25.0, 34.0, "productive"), (34.0, 36.0, "lost_work")]
    assert {c for a, b, c in kinds if 36.0 <= a and b <= 52.0} == {"restart"}


def test_a_start_up_beat_overwritten_before_it_was_seen_counts_from_the_read_before():
    # the first read to see a beat saw iteration 3 at 30 s; the read before it was at 21 s; 1 s/iteration
    seen = phase(
        ranks_up=30.0, up_iteration=3, up_after=21.0, first_at=31.0, first_iteration=4, last_beat=40.0, iteration=13
    )
    led = parts(0.0, 100.0, [seen])
    assert (led["rank_startup"], led["first_iteration"]) == (11.0, 7.0)  # up at 21, iteration 1 done at 28


def test_a_launch_that_runs_counts_its_next_attempt_as_a_restart_so_far():
    first = phase(ended=40.0, failure_found=38.0, last_beat=30.0, iteration=5, restart=True, cause="hang")
    led = parts(0.0, 60.0, [first], tail=goodput.RESTART)
    assert (led["productive"], led["hang"], led["restart"], led["restarts"]) == (20.0, 8.0, 22.0, 1)


def test_the_queue_counts_before_the_launcher_started():
    led = parts(0.0, 100.0, [phase()], queue_s=50.0)
    assert led["queue"] == 50.0 and led["wall_s"] == 150.0 and led["line"].endswith("start-up 60 s")


def test_the_timeline_of_a_launch_that_runs_ends_now_under_way():
    from launcher import timeline

    status = {
        "started": "2026-12-01T10:00:00+00:00",
        "exit_code": None,
        "launch_began": 1000.0,
        "phases": [phase(started=1002.0, ended=1040.0, failure_found=1038.0, restart=True, cause="exit-code")],
    }
    row = timeline.row(status, "node", now=1060.0)
    assert row["live"] and row["segments"][-1] == [1040.0, 1060.0, timeline.UNDER_WAY, None]
    assert row["marks"] == [
        {"time": 1038.0, "kind": "failure", "text": "exit-code"},
        {"time": 1040.0, "kind": "restart", "text": "restart 1"},
    ]
    closed = {**status, "exit_code": 0, "goodput": {"wall_s": 70.0, "queue": 10.0}}
    row = timeline.row(closed, "node")
    assert not row["live"] and row["segments"][0] == [990.0, 1000.0, "queue", None]
    assert row["segments"][-1][1] == 1060.0  # the wall less its queue, from the launch's start


def test_errors_of_runs_timeline(tmp_path, capsys):
    from launcher.runs import cli as runs_cli

    def error(*argv: str) -> str:
        assert runs_cli.main(["timeline", *argv, "--root", str(root)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err, err
        return err.strip().removeprefix("train_multigpu: error: ")

    root = tmp_path / "runs"
    run_dir = root / "2026-01-01_00-00-00_a"
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / "config.yaml").write_text("launcher:\n  topology: single_node\n")
    assert error("last") == "ID=last: has no status.json to draw a timeline from (a run that has started)"
    status = {"started": "2026-12-01T10:00:00+00:00", "exit_code": 0, "launch_began": 1000.0, "phases": [phase()]}
    (run_dir / "status.json").write_text(json.dumps({**status, "goodput": {"wall_s": 101.0}}))
    (run_dir / "timeline.png").mkdir()  # the run directory's own file cannot be replaced
    assert error("last") == (
        f"ID=last: cannot write {run_dir / 'timeline.png'}: Is a directory (give --out PNG elsewhere)"
    )
    assert sorted(p.name for p in run_dir.iterdir()) == ["config.yaml", "logs", "status.json", "timeline.png"]
    assert error("last", "--out", str(tmp_path)).startswith(f"--out={tmp_path}: ")
    # the launch's own drawing at its end says why it drew nothing, and leaves nothing behind either
    from launcher import timeline

    assert timeline.write_for(run_dir) == "timeline not drawn: Is a directory"
    assert sorted(p.name for p in run_dir.iterdir()) == ["config.yaml", "logs", "status.json", "timeline.png"]
