"""``train_multigpu runs``: real launches (tests/workers/runs_worker.py, under torchrun and as JAX
ranks) read back — each status with its exit code, logs, ids, ``--json``, ``--follow``, live status,
``stacks`` — and directories that are half written, old or hand-edited.

The launches are shared (one module fixture starts them side by side); only the checks of one
launch's live state run while it runs. ``--follow`` and a stack request as a launch starts and ends
have launches of their own, held where the test needs them (by files the test creates, by a full
stdout pipe)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest

from launcher import cli, record
from launcher.rundir import RunPaths
from launcher.runs import read
from ports import free_port
from supervise_util import env as launch_env
from supervise_util import wait_for

REPO = Path(__file__).resolve().parents[1]
WORKER = str(REPO / "tests" / "workers" / "runs_worker.py")
WORKER_SOURCE = Path(WORKER).read_text().splitlines()
JAX = ("launcher=skrl_jax",)


def launch(tmp: Path, name: str, *overrides: str, args: tuple = ()) -> subprocess.Popen:
    argv = [sys.executable, "-m", "launcher", "device=cpu", f"run_root={tmp / 'runs'}", f"script={WORKER}"]
    argv += ["launcher.nproc_per_node=2", *overrides] + ([f"run_name={name}"] if name else [])
    argv += ["--", *args] if args else []
    return subprocess.Popen(argv, cwd=tmp, env=launch_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def runs_cli(tmp: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """``train_multigpu runs ARGS`` for real (a separate process), in ``tmp``."""
    return subprocess.run(
        [sys.executable, "-m", "launcher", "runs", *args],
        cwd=tmp,
        env=launch_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_dir_of(tmp: Path, name: str) -> Path:
    return wait_for(lambda: next(iter((tmp / "runs").glob(f"*_{name}")), None), what=f"run dir *_{name}")


def finish(proc: subprocess.Popen, timeout: float = 60.0) -> int:
    """The launch's exit code; its stderr's end is kept in ``proc.err`` for failure messages."""
    try:
        proc.err = proc.communicate(timeout=timeout)[1].decode(errors="replace")[-2000:]
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise AssertionError("the launch did not end") from None
    return proc.returncode


@pytest.fixture(scope="module")
def launches(tmp_path_factory):
    """Five real launches under one run root: ``ok`` (JAX ranks, success), ``fail`` (torchrun, rank 1
    exits 7), ``int`` (stopped by SIGINT; looked at while it runs: its live progress, its stacks),
    ``lost`` (its launcher SIGKILLed), a two-node launch and a two-job ``-m`` sweep."""
    tmp = tmp_path_factory.mktemp("runs")
    seen: dict = {}
    paced = ("--lines", str(INT_LINES), "--pace", str(INT_PACE_S))  # beats the progress monitor sees one by one
    procs = {
        "ok": launch(tmp, "ok", *JAX),
        "fail": launch(tmp, "fail", args=("--fail", "1:7")),
        "int": launch(tmp, "int", *JAX, args=("--sleep", "--ready", str(tmp / "int.ready"), *paced)),
        "lost": launch(tmp, "lost", *JAX, *NO_WATCHDOG, args=("--sleep", "--ready", str(tmp / "lost.ready"))),
    }
    port = free_port(2)  # the coordinator, and node 0's liveness channel on the next port
    for node in (0, 1):  # a two-node launch on this host: two launchers, *_node0 and *_node1
        procs[f"node{node}"] = launch(
            tmp,
            "two",
            *JAX,
            "launcher.nnodes=2",
            f"launcher.node_rank={node}",
            f"launcher.coordinator_address=127.0.0.1:{port}",
            "launcher.local_nodes=true",
        )
    sweep = subprocess.Popen(
        [sys.executable, "-m", "launcher", "-m", "device=cpu", f"run_root={tmp / 'runs'}", f"script={WORKER}"]
        + ["launcher=skrl_jax", "launcher.nproc_per_node=2", "seed=1,2"],
        cwd=tmp,
        env=launch_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    wait_for(lambda: (tmp / "int.ready").exists() and (tmp / "lost.ready").exists(), what="the sleeping launches")
    # while "int" runs: the listing, the live view against the run's own files, a stack request
    int_dir = run_dir_of(tmp, "int")
    seen["running"] = runs_cli(tmp, "--json")
    seen["open_record"] = json.loads((int_dir / "status.json").read_text())
    seen["open_record_start"] = record.process_start(seen["open_record"]["pid"])  # while it runs
    seen["live"] = live_view(tmp, int_dir)
    seen["rank_pids"] = {rank: int((int_dir / f"printed{rank}").read_text()) for rank in (0, 1)}
    seen["stacks"] = runs_cli(tmp, "stacks", int_dir.name)
    seen["live_beats"] = beats_view(tmp, run_dir_of(tmp, "lost"))  # no progress monitor there: the beat files
    procs["int"].send_signal(signal.SIGINT)
    procs["lost"].send_signal(signal.SIGKILL)
    seen["lost_at_once"] = runs_cli(tmp, "--json")  # before or after the watchdog closed the record
    seen["codes"] = {name: finish(proc) for name, proc in procs.items()}
    seen["stderr"] = {name: proc.err for name, proc in procs.items()}
    seen["sweep_code"] = finish(sweep)
    lost_status = run_dir_of(tmp, "lost") / "status.json"
    wait_for(lambda: json.loads(lost_status.read_text()).get("exit_code") is not None, 30, "the watchdog's end")
    return tmp, seen


INT_LINES, INT_PACE_S = 6, 0.5
NO_WATCHDOG = ("launcher.hang_timeout=null", "launcher.startup_timeout=null")  # no progress monitor, no progress.json


def live_view(tmp: Path, run_dir: Path) -> dict:
    """``runs show`` (JSON and text) of a running launch, with what its own files said just before
    and just after: progress.json (once it has every rank's last beat, or 30 s) and the beat files."""
    logs = run_dir / "logs"

    def progress() -> dict | None:
        try:
            return json.loads((logs / "progress.json").read_text())
        except (OSError, ValueError):
            return None

    def settled() -> bool:
        ranks = (progress() or {}).get("ranks", {})
        return all(ranks.get(str(rank), {}).get("iteration") == INT_LINES for rank in (0, 1))

    deadline = time.monotonic() + 30
    while not settled() and time.monotonic() < deadline:
        time.sleep(0.1)
    view = {"before": progress()}
    view["beats"] = {
        rank: ((logs / f"rank{rank}.beat").stat().st_mtime, (logs / f"rank{rank}.beat").read_text()) for rank in (0, 1)
    }
    view["json"] = runs_cli(tmp, "show", "--json", run_dir.name)
    view["text_from"] = time.time()
    view["text"] = runs_cli(tmp, "show", run_dir.name)
    view["text_to"] = time.time()
    view["after"] = progress()
    return view


def by_name(items: list[dict]) -> dict[str, dict]:
    return {(item["run_name"] or item["id"]): item for item in items}


def test_each_launch_is_listed_with_its_status_and_exit_code(launches):
    tmp, seen = launches
    assert seen["codes"] == {
        "ok": 0,
        "fail": 7,
        "int": 130,
        "lost": -signal.SIGKILL,
        "node0": 0,
        "node1": 0,
    }, seen["stderr"]
    out = runs_cli(tmp, "--json")
    assert out.returncode == 0, out.stderr
    runs = by_name(json.loads(out.stdout))
    got = {name: (runs[name]["status"], runs[name]["exit_code"]) for name in ("ok", "fail", "int", "lost")}
    assert got == {"ok": ("success", 0), "fail": ("failed", 7), "int": ("interrupted", 130), "lost": ("lost", 137)}
    fail = runs["fail"]
    assert (fail["topology"], fail["nnodes"], fail["nproc_per_node"]) == ("single_node", "1", "2")
    assert (fail["failure"]["rank"], fail["failure"]["exit_code"]) == (1, 7)
    assert runs["ok"]["topology"] == "skrl_jax" and runs["ok"]["last_return"] == 30.0
    assert runs["ok"]["duration_s"] > 0 and runs["ok"]["started"]
    table = runs_cli(tmp).stdout.splitlines()
    assert table[0].split() == ["ID", "STARTED", "DURATION", "STATUS", "TOPOLOGY", "TASK", "EXIT", "RETURN", "SWEPT"]
    row = next(line for line in table if line.split()[0].endswith("_fail")).split()
    assert row[4:6] == ["failed", "single_node"] and row[6] == "1x2" and row[8] == "7"


def test_status_json_says_how_each_launch_ended_as_an_outcome(launches):
    """status.json's ``outcome`` (launcher/rundir.py's Reason), what ``runs`` decides on, beside the
    reason text for people; and the files the readers look for, where RunPaths says they are."""
    tmp, _ = launches
    ended = {}
    for name in ("ok", "fail", "int", "lost", "two_node0", "two_node1"):
        status = json.loads(RunPaths(run_dir_of(tmp, name)).status.read_text())
        ended[name] = (status["outcome"], status["reason"])
    assert ended == {
        "ok": ("succeeded", "success"),
        "fail": ("failed", "rank failed"),
        "int": ("interrupted", "stopped by SIGINT"),
        "lost": ("launcher_killed", "launcher killed"),  # written by its watchdog
        "two_node0": ("succeeded", "success"),
        "two_node1": ("succeeded", "success"),
    }
    sweep_jobs = sorted((tmp / "runs" / "multirun").glob("*/*/status.json"))
    assert [json.loads(p.read_text())["outcome"] for p in sweep_jobs] == ["succeeded", "succeeded"]
    fail = RunPaths(run_dir_of(tmp, "fail"))
    assert json.loads(fail.status.read_text())["failure"]["source"] == "exit record"
    assert fail.exit_record(1).is_file() and fail.rank_log(1).is_file() and fail.torchrun_log.is_file()
    interrupted = RunPaths(run_dir_of(tmp, "int"))  # looked at while it ran: its progress, its stacks
    assert interrupted.progress.is_file() and interrupted.beat(0).is_file() and interrupted.stacks.is_dir()


def test_a_running_launch_is_running_and_a_killed_one_lost(launches):
    _, seen = launches
    running = by_name(json.loads(seen["running"].stdout))
    assert running["int"]["status"] == running["lost"]["status"] == "running"
    assert running["int"]["exit_code"] is None and running["int"]["pid"] == seen["open_record"]["pid"] > 0
    assert by_name(json.loads(seen["lost_at_once"].stdout))["lost"]["status"] == "lost"


def test_a_sweep_is_one_group_with_its_jobs(launches):
    tmp, seen = launches
    assert seen["sweep_code"] == 0
    jobs = [r for r in json.loads(runs_cli(tmp, "--json").stdout) if r["group_kind"] == "sweep"]
    assert [(r["job"], r["status"], r["swept"]) for r in jobs] == [
        (0, "success", ["seed=1"]),
        (1, "success", ["seed=2"]),
    ]
    assert all(r["swept"] is None for r in json.loads(runs_cli(tmp, "--json").stdout) if r["group_kind"] != "sweep")
    group = jobs[0]["group"]
    assert group.startswith("multirun/") and all(r["id"] == f"{group}/{r['job']}" for r in jobs)
    table = runs_cli(tmp).stdout.splitlines()
    head = next(i for i, line in enumerate(table) if line.startswith(group + " "))
    assert "sweep, 2 jobs: 2 success" in table[head]
    assert table[head + 1].startswith(f"  {group}/0") and table[head + 2].startswith(f"  {group}/1")
    assert table[head + 1].endswith(" seed=1") and table[head + 2].endswith(" seed=2")  # the SWEPT column
    whole = runs_cli(tmp, "show", group.split("/", 1)[1]).stdout.splitlines()  # the sweep itself: its table
    assert [line.split()[0] for line in whole] == ["ID", group, f"{group}/0", f"{group}/1"]
    shown = runs_cli(tmp, "show", group.split("/", 1)[1] + "/1")  # multirun/ may be left out
    assert shown.returncode == 0 and f"run:      {group}/1" in shown.stdout
    assert f"swept:    seed=2 (job 1 of {group})" in shown.stdout.splitlines()


def test_the_nodes_of_a_multinode_launch_are_one_group(launches):
    tmp, _ = launches
    nodes = [r for r in json.loads(runs_cli(tmp, "--json").stdout) if r["group_kind"] == "nodes"]
    assert [(r["id"][-6:], r["node_rank"], r["status"], r["nnodes"]) for r in nodes] == [
        ("_node0", 0, "success", "2"),
        ("_node1", 1, "success", "2"),
    ]
    group = nodes[0]["group"]
    assert group.endswith("_two") and nodes[1]["group"] == group
    table = runs_cli(tmp).stdout
    assert f"\n{group} " in table and "nodes, 2 nodes: 2 success" in table
    every = runs_cli(tmp, "logs", group, "--rank", "all").stdout.splitlines()  # the group's id: every node's logs
    assert [line for line in every if line.endswith("line 3")] == [
        "[0:0] rank 0 line 3",
        "[0:1] rank 1 line 3",
        "[1:2] rank 2 line 3",
        "[1:3] rank 3 line 3",
    ]


def test_json_lists_how_each_run_ended_as_its_outcome(tmp_path):
    """``runs --json`` carries status.json's ``outcome`` (rundir.Reason's value); a record older than
    the field reads it from its reason and exit code; a record without an end has none. Records
    written as the launcher writes them (record.write_json), no launch needed."""
    root = tmp_path / "runs"
    config = "launcher:\n  topology: single_node\n  nnodes: '1'\n  nproc_per_node: '2'\n"
    statuses = {
        "2026-01-01_10-00-00_hang": {"exit_code": 124, "reason": "hang", "outcome": "hang"},
        "2026-01-01_10-00-01_port": {"exit_code": 1, "reason": "port 29500 in use", "outcome": "port_in_use"},
        "2026-01-01_10-00-02_old": {"exit_code": 130, "reason": "stopped by SIGINT"},  # before outcome
        "2026-01-01_10-00-03_open": {"exit_code": None, "reason": None},  # no end (another host's)
    }
    for name, status in statuses.items():
        (root / name).mkdir(parents=True)
        record.write_json(root / name / "status.json", {"started": "2026-01-01T10:00:00+00:00", **status})
        (root / name / "config.yaml").write_text(config)
    listed = runs_cli(tmp_path, "--json", "--root", str(root))
    assert listed.returncode == 0, listed.stderr
    outcome = {run["id"]: run["outcome"] for run in json.loads(listed.stdout)}
    assert outcome == {
        "2026-01-01_10-00-00_hang": "hang",
        "2026-01-01_10-00-01_port": "port_in_use",
        "2026-01-01_10-00-02_old": "interrupted",
        "2026-01-01_10-00-03_open": None,
    }
    shown = json.loads(runs_cli(tmp_path, "show", "--json", "--root", str(root), "2026-01-01_10-00-00_hang").stdout)
    assert shown["outcome"] == "hang"


def test_json_round_trip(launches):
    tmp, _ = launches
    items = json.loads(runs_cli(tmp, "--json").stdout)
    documented = {"id", "status", "exit_code", "run_dir", "started", "duration_s", "topology", "nnodes"}
    documented |= {"nproc_per_node", "task", "failure", "last_return", "group", "problems"}
    for item in items:
        assert documented <= set(item)
        assert read.RunInfo(**item).as_dict() == item
        assert Path(item["run_dir"]).is_absolute()
    one = json.loads(runs_cli(tmp, "show", "--json", "last").stdout)
    assert one["run_dir"] == str(read.resolve(tmp / "runs", "last"))
    ok = json.loads(runs_cli(tmp, "show", "--json", run_dir_of(tmp, "ok").name).stdout)
    assert [line.split()[:2] for line in ok["command"][:2]] == [
        ["JAX_LOCAL_RANK=0", "JAX_RANK=0"],
        ["JAX_LOCAL_RANK=1", "JAX_RANK=1"],
    ]
    assert all(
        line.endswith(f"{WORKER} --ml_framework jax --device cpu --run_name=ok --distributed &")
        for line in ok["command"][:2]
    )
    assert ok["command"][2:] == ["wait -n && wait"]
    assert {key: ok["chosen"][key] for key in ("launcher.nproc_per_node", "launcher.topology", "run_name")} == {
        "launcher.nproc_per_node": ["auto", "2"],
        "launcher.topology": ["single_node", "skrl_jax"],
        "run_name": ["null", "ok"],
    }


def test_logs_of_rank_1_and_of_every_rank(launches):
    tmp, _ = launches
    fail = run_dir_of(tmp, "fail").name
    out = runs_cli(tmp, "logs", fail, "--rank", "1")
    assert out.returncode == 0, out.stderr
    assert [line for line in out.stdout.splitlines() if line.startswith("rank 1")] == [
        "rank 1 line 1",
        "rank 1 line 2",
        "rank 1 line 3",
        "rank 1 fails with exit code 7",
    ]
    assert "rank 0" not in out.stdout
    rank0 = (run_dir_of(tmp, "fail") / "logs" / "rank0.log").read_text()
    assert "rank 0 line 1\n" in rank0 and runs_cli(tmp, "logs", fail).stdout == rank0  # rank 0 by default, as written
    every = runs_cli(tmp, "logs", fail, "--rank", "all").stdout.splitlines()
    assert "[0:0] rank 0 line 3" in every and "[0:1] rank 1 fails with exit code 7" in every
    as_json = [json.loads(line) for line in runs_cli(tmp, "logs", fail, "--rank", "1", "--json").stdout.splitlines()]
    assert {"node": 0, "rank": 1, "line": "rank 1 fails with exit code 7"} in as_json
    missing = runs_cli(tmp, "logs", fail, "--rank", "5")
    assert missing.returncode == 2
    assert missing.stderr.strip().endswith(
        "--rank=5: no log of that rank in " + str(run_dir_of(tmp, "fail")) + "; ranks with a log: 0, 1"
    )


def beats_view(tmp: Path, run_dir: Path) -> dict:
    """``runs show --json`` of a running launch without a progress monitor, between two looks at its
    beat files (mtime, content) and at whether progress.json exists."""
    logs = run_dir / "logs"

    def look() -> tuple:
        beats = {r: ((logs / f"rank{r}.beat").stat().st_mtime, (logs / f"rank{r}.beat").read_text()) for r in (0, 1)}
        return beats, (logs / "progress.json").exists()

    before = look()
    shown = runs_cli(tmp, "show", "--json", run_dir.name)
    return {"before": before, "json": shown, "after": look()}


def test_show_while_running_without_a_progress_monitor_reads_the_beat_files(launches):
    """``launcher.hang_timeout=null launcher.startup_timeout=null``: no progress.json; ``runs show`` of
    the running launch gives each rank's iteration and total from its beat file's content, its last
    beat from the file's time."""
    _, seen = launches
    view = seen["live_beats"]
    (beats, progress_file), after = view["before"], view["after"]
    assert view["json"].returncode == 0, view["json"].stderr
    assert (beats, progress_file) == after and progress_file is False
    live = json.loads(view["json"].stdout)["live"]
    assert live["source"] == "beat files" and live["stragglers"] == []
    assert live["ranks"] == {
        str(rank): {
            "phase": "running",
            "last_beat": beats[rank][0],
            "last_output": None,
            "iteration": 3,
            "total": 3,
            "iter_per_s": None,
            "stalled": False,
        }
        for rank in (0, 1)
    }
    assert {text for _, text in beats.values()} == {"3 3"}


class Lines:
    """A process's output, read on a thread: the lines so far, as they arrive."""

    def __init__(self, stream) -> None:
        self.lines: list[str] = []
        self.thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.thread.start()

    def _read(self, stream) -> None:
        for line in stream:
            self.lines.append(line.rstrip("\n"))


def test_follow_prints_a_line_written_after_it_started_and_ends_with_the_launch(tmp_path):
    """``--follow``: what the ranks had written, then a line each rank writes only once follow has
    printed that (the ranks wait for the file ``go``), while the launch still runs (its ranks then
    wait for ``until``); the launch ends by itself and follow with it, exit code 0."""
    ready, go, until = (tmp_path / name for name in ("ready", "go", "until"))
    proc = launch(tmp_path, "follow", *JAX, args=("--ready", str(ready), "--go", str(go), "--until", str(until)))
    follows: list[subprocess.Popen] = []
    try:
        wait_for(ready.exists, what="the ranks' first lines")
        run_dir = run_dir_of(tmp_path, "follow")
        for rank in ("all", "1"):  # every rank's lines prefixed; rank 1's as written
            follows.append(
                subprocess.Popen(
                    [sys.executable, "-m", "launcher", "runs", "logs", run_dir.name, "--rank", rank, "--follow"],
                    cwd=tmp_path,
                    env=launch_env(),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
        every, one = (Lines(follow.stdout) for follow in follows)
        wait_for(
            lambda: len(every.lines) >= 6 and len(one.lines) >= 3, 30, "what the ranks had written, through follow"
        )
        assert every.lines == [f"[0:{rank}] rank {rank} line {i}" for rank in (0, 1) for i in (1, 2, 3)]
        assert one.lines == ["rank 1 line 1", "rank 1 line 2", "rank 1 line 3"]
        assert not any("after go" in (run_dir / "logs" / f"rank{r}.log").read_text() for r in (0, 1))
        go.touch()  # now the ranks print a line each
        wait_for(lambda: len(every.lines) >= 8 and len(one.lines) >= 4, 30, "the lines written after follow started")
        assert sorted(every.lines[6:]) == ["[0:0] rank 0 after go", "[0:1] rank 1 after go"]
        assert one.lines[3:] == ["rank 1 after go"]
        assert proc.poll() is None and [f.poll() for f in follows] == [None, None]  # the ranks wait for until
        until.touch()
        assert finish(proc) == 0, proc.err
        assert [f.wait(timeout=30) for f in follows] == [0, 0]  # they ended by themselves, with the launch
        for lines in (every, one):
            lines.thread.join(timeout=10)
        assert (len(every.lines), len(one.lines)) == (8, 4)
        assert [f.stderr.read() for f in follows] == ["", ""]
    finally:
        go.touch()
        until.touch()
        for started in (proc, *follows):
            if started.poll() is None:
                started.kill()
                started.wait()


def test_show_while_running_has_each_ranks_progress_from_the_runs_own_files(launches):
    """``runs show`` of a real running launch (its ranks beat every 0.5 s, then sleep): each rank's
    iteration, total, rate and last beat as the launch's progress.json says at that time, the last
    beat as the rank's beat file says."""
    _, seen = launches
    view = seen["live"]
    before, after = view["before"], view["after"]
    assert view["json"].returncode == 0, view["json"].stderr
    shown = json.loads(view["json"].stdout)
    assert shown["status"] == "running"
    live = shown["live"]
    assert before["ranks"] == after["ranks"]  # nothing changed while it looked
    assert live["source"] == "progress.json" and live["stragglers"] == before.get("stragglers", [])
    assert set(live["ranks"]) == {"0", "1"}
    for rank in ("0", "1"):
        written = before["ranks"][rank]
        assert live["ranks"][rank] == written
        beat_time, beat_text = view["beats"][int(rank)]
        assert (written["iteration"], written["total"], beat_text) == (INT_LINES, INT_LINES, f"{INT_LINES} {INT_LINES}")
        assert written["last_beat"] == beat_time and written["phase"] == "running" and not written["stalled"]
        assert 0 < written["iter_per_s"] <= 1.05 / INT_PACE_S  # the beats came INT_PACE_S apart (or slower)
    text = view["text"].stdout.splitlines()
    assert view["text"].returncode == 0 and "status:   running" in text
    assert next(line for line in text if line.startswith("live:")).startswith("live:     from progress.json, updated ")
    for rank in ("0", "1"):
        written = before["ranks"][rank]
        line = next(line for line in text if line.startswith(f"  rank {rank}: "))
        head = f"  rank {rank}: iteration {INT_LINES}/{INT_LINES}, {written['iter_per_s']:.2f} it/s, last beat "
        assert line.startswith(head) and line.endswith("s ago"), line
        ago = int(line[len(head) : -len("s ago")])
        earliest, latest = (view[key] - written["last_beat"] for key in ("text_from", "text_to"))
        assert round(earliest) <= ago <= round(latest), (line, earliest, latest)
    assert not any("stalled" in line.lower() for line in text)


def live_launcher(tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    """A run directory whose launcher is a live process (a sleeping python): an open record."""
    run_dir = tmp_path / "runs" / "2026-01-01_00-00-00_live"
    (run_dir / "logs").mkdir(parents=True)
    hold = "import os, sys, time; fd = os.open(sys.argv[1], os.O_RDONLY); print('ready', flush=True); time.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-c", hold, str(run_dir)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "ready\n"  # holding the run directory open: the launcher's proof
    open_record(run_dir, proc.pid)
    return proc, run_dir


def open_record(run_dir: Path, pid: int) -> None:
    """``status.json`` of a running launch whose launcher is ``pid``."""
    status = {"started": "2026-01-01T00:00:00+00:00", "pid": pid, "exit_code": None}
    status.update(pid_start=record.process_start(pid), host=read.HOST, **{record.HOLDS_KEY: True})
    record.write_json(run_dir / "status.json", status)


def test_show_while_running_has_each_ranks_progress_and_the_stalled_ones(tmp_path):
    """The monitor's progress.json (contracts: written every ~2 s by the launcher), then, without it,
    the ranks' heartbeat files: each rank's iteration, rate, last beat; the stalled ranks."""
    proc, run_dir = live_launcher(tmp_path)
    logs = run_dir / "logs"
    now = time.time()
    try:
        record.write_json(
            logs / "progress.json",
            {
                "updated": now,
                "node": 0,
                "ranks": {
                    "0": {"phase": "running", "last_beat": now, "iteration": 3, "total": 3, "iter_per_s": 2.5},
                    "1": {"phase": "running", "last_beat": now - 90, "iteration": 1, "total": 3, "stalled": True},
                    "x": "not a rank",
                },
                "stragglers": [{"rank": 1, "iteration_s": 4.0, "median_s": 0.4}],
            },
        )
        live = runs_cli(tmp_path, "show", "last")
        assert live.returncode == 0, live.stderr
        assert "status:   running" in live.stdout and "live:     from progress.json" in live.stdout
        assert "  rank 0: iteration 3/3, 2.50 it/s" in live.stdout
        rank1 = next(line for line in live.stdout.splitlines() if line.startswith("  rank 1: "))
        assert rank1.startswith("  rank 1: iteration 1/3, last beat 9") and rank1.endswith("s ago  STALLED")
        assert "  stalled: rank 1" in live.stdout
        assert "  straggler: rank 1: 4.0 s per iteration (median 0.4 s)" in live.stdout
        (logs / "progress.json").unlink()
        for rank, words in ((0, "3 3"), (1, "")):
            (logs / f"rank{rank}.beat").write_text(words)
        os.utime(logs / "rank1.beat", (now - 120, now - 120))
        beats = json.loads(runs_cli(tmp_path, "show", "--json", "last").stdout)["live"]
        assert beats["source"] == "beat files"
        assert beats["ranks"]["0"]["iteration"] == 3 and beats["ranks"]["0"]["total"] == 3
        assert beats["ranks"]["0"]["stalled"] is False and beats["ranks"]["1"]["stalled"] is True
        assert beats["ranks"]["1"]["iteration"] is None  # a bare touch
        (logs / "progress.json").write_text('{"ranks": {"0": {"iteration": ')  # half written: the beats
        assert json.loads(runs_cli(tmp_path, "show", "--json", "last").stdout)["live"]["source"] == "beat files"
    finally:
        proc.kill()
        proc.wait()


def test_ids_unique_prefix_last_ambiguous_unknown(launches):
    tmp, _ = launches
    ok = run_dir_of(tmp, "ok")
    assert read.resolve(tmp / "runs", ok.name) == ok
    assert read.resolve(tmp / "runs", ok.name[:-1]) == ok  # "..._o" is a prefix of one id only
    every = read.read_all(tmp / "runs")
    last = next(r for r in every if Path(r.run_dir) == read.resolve(tmp / "runs", "last"))
    assert all(r.start_time <= last.start_time for r in every)  # the same second: the later id (job 1, name-1)
    ambiguous = runs_cli(tmp, "show", ok.name[:4])
    assert ambiguous.returncode == 2 and len(ambiguous.stderr.splitlines()) == 1
    assert f"id={ok.name[:4]}: matches" in ambiguous.stderr and "give more of the id" in ambiguous.stderr
    unknown = runs_cli(tmp, "show", "nope")
    assert unknown.returncode == 2
    assert unknown.stderr == (
        "train_multigpu: error: id=nope: no run under runs has this id or prefix (train_multigpu runs lists them)\n"
    )


def test_run_root_key_and_root_flag(launches, tmp_path):
    tmp, _ = launches
    by_flag = runs_cli(tmp_path, "--root", str(tmp / "runs"), "--json")
    by_key = runs_cli(tmp_path, f"run_root={tmp / 'runs'}", "--json")
    assert json.loads(by_flag.stdout) == json.loads(by_key.stdout) != []
    empty = runs_cli(tmp_path)
    assert empty.returncode == 0 and empty.stdout.startswith("no runs under runs")


def test_stacks_of_a_running_launch_holds_every_ranks_stack(launches):
    """``runs stacks`` of a real running launch: SIGUSR2 to its launcher, which writes
    ``stacks/<stamp>/`` with each rank's stack (py-spy) and the summary printed; the launch goes on
    (SIGINT ends it later, 130)."""
    tmp, seen = launches
    out, pids = seen["stacks"], seen["rank_pids"]
    assert (out.returncode, out.stderr) == (0, ""), out.stderr
    int_dir = run_dir_of(tmp, "int")
    first, *summary = out.stdout.splitlines()
    assert first.startswith(f"stacks: {int_dir}/stacks/")
    where = Path(first.removeprefix("stacks: "))
    assert sorted(p.name for p in where.iterdir()) == ["rank0.txt", "rank1.txt", "summary.txt"]
    assert summary == (where / "summary.txt").read_text().splitlines()
    line = next(i for i, text in enumerate(WORKER_SOURCE, 1) if text.endswith("# sleeping until stopped"))
    at = f"in time.sleep (runs_worker.py:{line})"
    assert summary == [
        "stacks on demand (SIGUSR2)",
        f"rank 0 waits {at}; rank 1 {at}",
        f"  rank 0 (pid {pids[0]}): {at} in main of {WORKER}",
        f"  rank 1 (pid {pids[1]}): {at} in main of {WORKER}",
        f"stacks: {where}/rank<R>.txt (one file per rank of node 0)",
    ]
    for rank in (0, 1):
        stack = (where / f"rank{rank}.txt").read_text().splitlines()
        assert stack[0].startswith(f"rank {rank}, pid {pids[rank]}, node 0, taken ")
        assert f"    main ({WORKER}:{line})" in stack
    assert seen["codes"]["int"] == 130, seen["stderr"]["int"]  # the request did not end it: SIGINT did


def test_stacks_of_a_launcher_without_a_handler_is_refused_and_not_signalled(tmp_path):
    """A live process recorded as the launcher that does not handle SIGUSR2 (SigCgt): refused with one
    line, and not sent the signal (its default action would end it)."""
    proc, run_dir = live_launcher(tmp_path)
    try:
        out = runs_cli(tmp_path, "stacks", "last")
        assert (out.returncode, out.stdout, out.stderr) == (
            2,
            "",
            f"train_multigpu: error: id=last: its launcher (pid {proc.pid}) does not take stack requests "
            "(SIGUSR2 not handled: an older train_multigpu)\n",
        )
        with pytest.raises(subprocess.TimeoutExpired):  # a SIGUSR2 would have ended it by now
            proc.wait(timeout=1)
        assert not (run_dir / "stacks").exists()
    finally:
        proc.kill()
        proc.wait()


def test_stacks_of_a_launcher_that_ignores_the_request_is_refused(tmp_path):
    """A launcher that ignores SIGUSR2 (SigIgn: as its launch starts or ends) is not asked either."""
    proc, run_dir = fake_launcher(tmp_path, "ignore")
    try:
        out = runs_cli(tmp_path, "stacks", "last")
        assert (out.returncode, out.stdout, out.stderr) == (
            2,
            "",
            f"train_multigpu: error: id=last: its launcher (pid {proc.pid}) takes no stack requests now "
            "(SIGUSR2 ignored: its launch is starting or ending)\n",
        )
        assert not (run_dir / "stacks").exists()
    finally:
        proc.kill()
        proc.wait()


def signal_mask(pid: int, field: str) -> int | None:
    """A signal mask of /proc/<pid>/status (SigCgt: handled, SigIgn: ignored); None once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as handle:
            return next(int(line.split()[1], 16) for line in handle if line.startswith(f"{field}:"))
    except (OSError, StopIteration, ValueError):
        return None


def fill(pipe_w: int) -> None:
    """Fill a pipe to the last byte, through a non-blocking description of its own (the launcher's
    stays blocking: its next write to the pipe waits until the test reads)."""
    filler = os.open(f"/proc/self/fd/{pipe_w}", os.O_WRONLY | os.O_NONBLOCK)
    try:
        for chunk in (b"." * 4096, b"."):
            with contextlib.suppress(BlockingIOError):
                while True:
                    os.write(filler, chunk)
    finally:
        os.close(filler)


def read_through(pipe_r: int, marker: bytes, timeout: float = 60.0) -> bytes:
    """What the pipe holds up to the end of the line that has ``marker`` (the filler's dots left out)."""
    data, deadline = b"", time.monotonic() + timeout
    while not (marker in data and data.endswith(b"\n")) and time.monotonic() < deadline:
        try:
            chunk = os.read(pipe_r, 1 << 16)
        except BlockingIOError:
            time.sleep(0.01)
            continue
        if not chunk:
            break
        data += chunk
    return data.lstrip(b".")


def test_a_stack_request_never_ends_the_launcher_of_an_open_record(tmp_path):
    """``runs stacks`` checks that the launcher handles SIGUSR2, then sends it; the launch may start or
    end in between. Wherever status.json names a launcher, SIGUSR2 is handled or ignored, never left
    to its default action (which ends the process). The launcher is held at its two console lines by
    a full stdout pipe: right after it opened its record (before the launch) and right after it
    closed it (before it exits); there it ignores SIGUSR2, gets one, and the launch still exits 0."""
    bit = 1 << (signal.SIGUSR2 - 1)
    until = tmp_path / "until"
    pipe_r, pipe_w = os.pipe()
    os.set_blocking(pipe_r, False)
    fill(pipe_w)  # the launcher's first line ("run directory: ...") waits
    argv = [sys.executable, "-m", "launcher", "device=cpu", f"run_root={tmp_path / 'runs'}", f"script={WORKER}"]
    argv += [*JAX, "launcher.nproc_per_node=2", "run_name=held", "--", "--lines", "0", "--until", str(until)]
    proc = subprocess.Popen(argv, cwd=tmp_path, env=launch_env(), stdout=pipe_w, stderr=subprocess.DEVNULL)
    try:
        status = run_dir_of(tmp_path, "held") / "status.json"

        def recorded() -> dict | None:
            with contextlib.suppress(OSError, ValueError):
                return json.loads(status.read_text())
            return None

        wait_for(lambda: recorded() is not None, what="the open record")
        assert recorded()["exit_code"] is None and proc.poll() is None
        assert (signal_mask(proc.pid, "SigCgt") & bit, signal_mask(proc.pid, "SigIgn") & bit) == (0, bit)
        os.kill(proc.pid, signal.SIGUSR2)  # as the launch starts
        assert read_through(pipe_r, b"run directory:").startswith(b"[train_multigpu] run directory: ")
        fill(pipe_w)  # the launcher's last line ("exit code ...") waits
        until.touch()  # the ranks end: the launch ends
        wait_for(lambda: (recorded() or {}).get("exit_code") is not None, what="the record's end")
        assert proc.poll() is None  # held at its last line
        assert (signal_mask(proc.pid, "SigCgt") & bit, signal_mask(proc.pid, "SigIgn") & bit) == (0, bit)
        os.kill(proc.pid, signal.SIGUSR2)  # as the launch ends: what a runs stacks that checked a moment ago sends
        assert b"exit code 0 (success)" in read_through(pipe_r, b"exit code")
        assert proc.wait(timeout=60) == 0
        assert (recorded()["exit_code"], recorded()["reason"]) == (0, "success")
    finally:
        until.touch()
        os.close(pipe_w)
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:  # a held launcher: its pipe read until it ends
            with contextlib.suppress(BlockingIOError):
                os.read(pipe_r, 1 << 16)
            time.sleep(0.05)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(pipe_r)


def test_stacks_of_an_ended_run_is_refused(launches):
    tmp, _ = launches
    ok = run_dir_of(tmp, "ok").name
    ended = runs_cli(tmp, "stacks", ok)
    assert (ended.returncode, ended.stdout, ended.stderr) == (
        2,
        "",
        f"train_multigpu: error: id={ok}: is not running here (success): only a running launch on this host "
        "can be asked for its stacks\n",
    )


FAKE_LAUNCHER = r"""
import os, signal, sys, time
run_dir, mode = sys.argv[1], sys.argv[2]
held = os.open(run_dir, os.O_RDONLY)  # the launcher's proof (record.write_opened): it holds its run directory
def on_usr2(signum, frame):
    if mode == "exit":
        os._exit(0)
    if mode == "write":
        stamp = os.path.join(run_dir, "stacks", "2026-01-01_00-00-00")
        os.makedirs(stamp + ".tmp")
        with open(os.path.join(stamp + ".tmp", "summary.txt"), "w") as f:
            f.write("rank 0: in main\n")
        os.rename(stamp + ".tmp", stamp)
signal.signal(signal.SIGUSR2, signal.SIG_IGN if mode == "ignore" else on_usr2)
print("ready", flush=True)
time.sleep(60)
"""


def fake_launcher(tmp_path: Path, mode: str) -> tuple[subprocess.Popen, Path]:
    """FAKE_LAUNCHER running (its SIGUSR2 handler installed) as the launcher of an open record."""
    run_dir = tmp_path / "runs" / "2026-01-01_00-00-00_live"
    run_dir.mkdir(parents=True)
    proc = subprocess.Popen(
        [sys.executable, "-c", FAKE_LAUNCHER, str(run_dir), mode], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline() == "ready\n"
    open_record(run_dir, proc.pid)
    return proc, run_dir


@pytest.mark.parametrize(
    "mode, code, expected",
    [
        ("write", 0, "stacks: {run_dir}/stacks/2026-01-01_00-00-00\nrank 0: in main\n"),
        ("silent", 2, "train_multigpu: error: --timeout=0.5: no new directory under {run_dir}/stacks in time\n"),
        ("exit", 2, "train_multigpu: error: id=last: the launch ended before its stacks were written\n"),
    ],
)
def test_stacks_signals_the_launcher_and_waits_for_the_new_directory(tmp_path, mode, code, expected):
    """The launcher side of the contract, played by a small real process: it handles SIGUSR2 by
    writing ``stacks/<stamp>/`` through a ``.tmp`` rename, as the launcher's stack dump does (or
    writes nothing, or exits)."""
    proc, run_dir = fake_launcher(tmp_path, mode)
    try:
        out = runs_cli(tmp_path, "stacks", "last", "--timeout", "0.5" if mode == "silent" else "30")
        assert (out.returncode, out.stdout if code == 0 else out.stderr) == (code, expected.format(run_dir=run_dir))
        assert (proc.poll() is None) == (mode != "exit")
    finally:
        proc.kill()
        proc.wait()


def test_stacks_json_names_the_new_directory_and_its_files(tmp_path):
    proc, run_dir = fake_launcher(tmp_path, "write")
    try:
        out = runs_cli(tmp_path, "stacks", "last", "--json")
        assert (out.returncode, out.stderr) == (0, "")
        assert json.loads(out.stdout) == {
            "id": run_dir.name,
            "stacks": str(run_dir / "stacks" / "2026-01-01_00-00-00"),
            "files": ["summary.txt"],
        }
    finally:
        proc.kill()
        proc.wait()


def test_a_dead_or_reused_launcher_pid_is_lost_never_running(tmp_path):
    """An open record (no end) whose launcher is gone: the pid is dead, or it now belongs to another
    process (its start time differs from pid_start) — lost. Only the recorded process is running."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    me = os.getpid()
    started = "2026-01-01T00:00:00+00:00"
    cases = {
        "dead": {"pid": dead.pid, "pid_start": 1},
        "reused": {"pid": me, "pid_start": record.process_start(me) + 1},
        "other_host": {"pid": me, "pid_start": record.process_start(me), "host": "elsewhere"},
        "alive": {"pid": me, "pid_start": record.process_start(me)},
        # before pid_start: the process must not be younger than the record
        "old_record_alive": {"pid": me, "started": datetime.now().astimezone().isoformat()},
        "old_record_reused": {"pid": me, "started": "2000-01-01T00:00:00+00:00"},
    }
    for name, fields in cases.items():
        directory = tmp_path / f"2026-01-01_00-00-00_{name}"
        directory.mkdir()
        record.write_json(directory / "status.json", {"started": started, "exit_code": None, **fields})
    statuses = {info.id.split("_", 2)[2]: info.status for info in read.read_all(tmp_path)}
    assert statuses == {
        "dead": "lost",
        "reused": "lost",
        "other_host": "?",
        "alive": "running",
        "old_record_alive": "running",
        "old_record_reused": "lost",
    }


def test_the_open_record_holds_the_launchers_pid_start_time_and_host(launches):
    _, seen = launches
    opened = seen["open_record"]
    assert opened["exit_code"] is None and opened["host"] == read.HOST
    assert opened["pid_start"] == seen["open_record_start"] is not None
    assert opened[record.HOLDS_KEY] is True  # the launcher holds its run directory open: runs stop's proof


def test_half_written_old_and_hand_edited_directories_show_what_can_be_read(tmp_path, capsys):
    runs = tmp_path / "runs"
    cases = {
        "2026-01-01_00-00-01_empty": {},
        "2026-01-01_00-00-02_truncated": {"status.json": '{"started": "2026-01-01T00:00:02+00:00", "pi'},
        "2026-01-01_00-00-03_list": {"status.json": "[1, 2]", "config.yaml": "- not a mapping\n"},
        "2026-01-01_00-00-04_edited": {
            "status.json": json.dumps({"started": 5, "exit_code": "seven", "failure": "oops", "duration_s": "x"}),
            "config.yaml": "launcher: {topology: flow_style}\ntask: [1, 2\n",
            "metrics.csv": "iteration,mean_return\n1,abc\n2,\n",
            "composition.json": json.dumps({"overrides": [1, None], "script_args": "x"}),
        },
        "2026-01-01_00-00-05_old": {  # a record from before pid_start/host, ended
            "status.json": json.dumps(
                {"started": "2026-01-01T00:00:05+00:00", "exit_code": 1, "reason": "rank failed"}
            ),
            "config.yaml": "launcher:\n  topology: multinode\n  nnodes: '2'\n  nproc_per_node: gpu\n"
            "task: Isaac-Cartpole-v0\n",
            "logs/rank0.log": "",
        },
        "2026-01-01_00-00-06_binary": {"status.json": b"\xff\xfe\x00", "config.yaml": b"\x00\xff"},
        "not-a-run": {"notes.txt": "hello"},
        "multirun/2026-01-01_00-00-07/0": {},
    }
    for name, files in cases.items():
        directory = runs / name
        directory.mkdir(parents=True)
        for file, content in files.items():
            (directory / file).parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, bytes):
                (directory / file).write_bytes(content)
            else:
                (directory / file).write_text(content)
    (runs / "stray-file.txt").write_text("x")
    assert cli.main(["runs", "--root", str(runs), "--json"]) == 0
    items = {item["id"]: item for item in json.loads(capsys.readouterr().out)}
    assert sorted(items) == sorted(n for n in cases if n != "not-a-run")
    edited = items["2026-01-01_00-00-04_edited"]
    assert (edited["status"], edited["exit_code"], edited["failure"], edited["last_return"]) == ("?", None, None, None)
    assert (
        items["2026-01-01_00-00-02_truncated"]["problems"][0] == "status.json: not valid JSON (half written or edited)"
    )
    old = items["2026-01-01_00-00-05_old"]
    assert (old["status"], old["exit_code"], old["topology"], old["nnodes"], old["task"]) == (
        "failed",
        1,
        "multinode",
        "2",
        "Isaac-Cartpole-v0",
    )
    assert items["2026-01-01_00-00-01_empty"]["status"] == "?"
    assert cli.main(["runs", "--root", str(runs)]) == 0
    table = capsys.readouterr().out
    assert "Traceback" not in table
    row = next(line for line in table.splitlines() if "_edited" in line).split()
    assert row[4] == "?" and row[-2] == "?"
    capsys.readouterr()
    for name in items:
        assert cli.main(["runs", "--root", str(runs), "show", name]) == 0, name
        # only the old record has a rank log (empty); the others: one line, exit 2; --follow: no end to wait for
        code = 0 if name.endswith("_old") else 2
        assert cli.main(["runs", "--root", str(runs), "logs", name, "--rank", "all"]) == code, name
        assert cli.main(["runs", "--root", str(runs), "logs", name, "--follow"]) == code, name
        errors = capsys.readouterr().err.splitlines()
        assert errors == (
            []
            if code == 0
            else [
                f"train_multigpu: error: id={name}: no rank logs in {runs / name}/logs",
                f"train_multigpu: error: --rank=0: no log of that rank in {runs / name}; ranks with a log: none",
            ]
        ), name


def test_a_mistake_is_one_line_exit_2(tmp_path):
    for args, message in (
        (
            ["bogus"],
            "runs=bogus: not a runs command; the commands: list, show, logs, stop, stacks, rerun, resume, compare, "
            "timeline",
        ),
        (
            ["show"],
            "train_multigpu runs show: the following arguments are required: id (train_multigpu runs show --help)",
        ),
        (["logs", "x", "--rank", "one"], "--rank=one: a global rank (0, 1, ...) or all"),
        (["show", "last"], "id=last: there are no runs under runs (launch one, or point --root elsewhere)"),
    ):
        out = runs_cli(tmp_path, *args)
        assert (out.returncode, out.stdout, out.stderr) == (2, "", f"train_multigpu: error: {message}\n"), args


def test_help_mentions_runs_and_listing_never_imports_hydra(tmp_path):
    help_text = subprocess.run(
        [sys.executable, "-m", "launcher", "--help"], capture_output=True, text=True, env=launch_env(), timeout=60
    ).stdout
    assert "train_multigpu runs [list|show|logs|stop|stacks|rerun|resume|compare|timeline]" in help_text
    runs_help = runs_cli(tmp_path, "--help").stdout
    assert "a sweep's jobs under it with their swept values" in " ".join(runs_help.split())
    probe = (
        "import sys; from launcher import cli; code = cli.main(['runs', '--json']); "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'hydra', 'omegaconf', 'yaml', 'torch', 'jax'}))"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, env=launch_env())
    assert out.stdout.strip().endswith("[]"), out


def test_slurm_submitted_runs_show_the_schedulers_state(slurm_cluster, tmp_path):
    """On the real one-host cluster: a job that ran (its record plus COMPLETED), and one held in the
    queue (no record yet: SLURM's PENDING says queued; cancelled, it is interrupted)."""
    from slurm_cluster import wait_job

    common = ["submit=slurm", "slurm.time=5", "device=cpu", f"run_root={tmp_path / 'runs'}", f"script={WORKER}"]
    env = {**launch_env(), "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    jobs = {}
    for name, extra in (
        ("ran", ["slurm.cpus_per_task=2", "launcher.nproc_per_node=2", *JAX]),
        ("held", ["slurm.cpus_per_task=1", "launcher.nproc_per_node=1", "+slurm.extra.begin=now+3600"]),
    ):
        out = subprocess.run(
            [sys.executable, "-m", "launcher", *common, *extra, f"run_name={name}"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stdout + out.stderr
        jobs[name] = out.stdout.split("submitted SLURM job ", 1)[1].split()[0]
    try:
        assert wait_job(jobs["ran"], timeout=120)["JobState"] == "COMPLETED"
        runs = by_name(json.loads(runs_cli(tmp_path, "--json").stdout))
        # states are asked lazily (docs/runs.md): the listing asks only runs whose record cannot say;
        # the ended job's own record says success, and `runs show` asks its scheduler always
        assert (runs["ran"]["status"], runs["ran"]["exit_code"], runs["ran"]["slurm"]["state"]) == ("success", 0, None)
        assert "COMPLETED" in runs_cli(tmp_path, "show", runs["ran"]["id"]).stdout
        assert runs["ran"]["slurm"]["job_id"] == jobs["ran"] and runs["ran"]["last_return"] == 30.0
        assert (runs["held"]["status"], runs["held"]["slurm"]["state"]) == ("queued", "PENDING")
        assert "queued [slurm PENDING]" in runs_cli(tmp_path).stdout
    finally:
        subprocess.run(["scancel", jobs["held"]], timeout=30)
    assert wait_job(jobs["held"], timeout=60)["JobState"] == "CANCELLED"
    assert by_name(json.loads(runs_cli(tmp_path, "--json").stdout))["held"]["status"] == "interrupted"


def test_nodes_started_in_different_seconds_are_one_launch(tmp_path):
    """Each node's launcher stamps its own directory: one launch's nodes may differ by a second. The
    same run name, rendezvous and nnodes, close in time, distinct node ranks: one group."""
    config = "launcher:\n  topology: multinode\n  nnodes: '2'\n  node_rank: {rank}\n  rdzv_endpoint: 10.0.0.1:29400\n"
    for name, rank, started in (
        ("2026-01-01_00-00-26_two_node0", 0, "00:00:26"),
        ("2026-01-01_00-00-27_two_node1", 1, "00:00:27"),
        ("2026-01-01_00-30-00_two_node0", 0, "00:30:00"),  # a later launch of the same name
    ):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.yaml").write_text(config.format(rank=rank))
        status = {"started": f"2026-01-01T{started}+00:00", "exit_code": 0, "reason": "success"}
        record.write_json(tmp_path / name / "status.json", status)
    groups = [(r.group, r.id) for r in read.read_all(tmp_path)]
    assert groups == [
        ("2026-01-01_00-30-00_two", "2026-01-01_00-30-00_two_node0"),
        ("2026-01-01_00-00-26_two", "2026-01-01_00-00-26_two_node0"),
        ("2026-01-01_00-00-26_two", "2026-01-01_00-00-27_two_node1"),
    ]


@pytest.mark.parametrize(
    "phrase",
    [
        "has this id or prefix (train_multigpu runs lists them)",
        "(give more of the id)",
        "id=last: there are no runs under runs (launch one, or point --root elsewhere)",
        "not a runs command; the commands: list, show, logs, stop, stacks, rerun, resume, compare, timeline",
        "the following arguments are required: id (train_multigpu runs show --help)",
        "--rank=one: a global rank (0, 1, ...) or all",
        "no log of that rank in <run dir>; ranks with a log: 0, 1",
        "no rank logs in <run dir>/logs",
        "only a running launch on this host can be asked for its stacks",
        "does not take stack requests (SIGUSR2 not handled: an older train_multigpu)",
        "takes no stack requests now (SIGUSR2 ignored: its launch is starting or ending)",
        "the launch ended before its stacks were written",
        "no new directory under <run dir>/stacks in time",
    ],
)
def test_errors_md_lists_the_runs_messages(phrase):
    assert phrase in (REPO / "docs" / "errors.md").read_text()


def test_logs_of_a_run_without_rank_logs(tmp_path):
    empty = tmp_path / "runs" / "2026-01-01_00-00-00_x"
    empty.mkdir(parents=True)
    out = runs_cli(tmp_path, "logs", "2026", "--rank", "all")
    assert (out.returncode, out.stderr) == (2, f"train_multigpu: error: id=2026: no rank logs in {empty}/logs\n")


@pytest.mark.parametrize(
    "reason, code, status",
    [
        ("success", 0, "success"),
        ("rank failed", 7, "failed"),
        ("torchrun failed", 1, "failed"),
        ("port 29500 in use", 2, "failed"),
        ("not started: launcher.nproc_per_node=9: ...", 2, "failed"),
        ("node lost", 125, "failed"),
        ("hang", 124, "hang"),
        ("stopped by SIGINT", 130, "interrupted"),
        ("stopped by SIGTERM", 143, "interrupted"),
        ("stopped (sweep.fail_fast)", 143, "interrupted"),
        ("launcher killed", 137, "lost"),
        ("", 0, "success"),
        ("something new", 3, "failed"),
    ],
)
def test_every_recorded_reason_has_its_status(reason, code, status):
    assert read.status_of({"exit_code": code, "reason": reason}, []) == status


def test_show_says_what_was_chosen_the_failure_the_command_and_where(launches):
    tmp, _ = launches
    fail = run_dir_of(tmp, "fail")
    out = runs_cli(tmp, "show", fail.name)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "status:   failed (rank failed)" in lines and "exit:     7" in lines
    assert "failure:  node 0, rank 1: exit code 7 [exit-code]" in lines  # the class, from run/postmortem/causes.py
    assert f"          log: {fail}/logs/rank1.log" in lines
    tail = lines.index(f"          log: {fail}/logs/rank1.log") + 1
    assert lines[tail : tail + 2] == ["          last 4 line(s) of the log:", "            | rank 1 line 1"]
    typed = f"device=cpu run_root={tmp / 'runs'} script={WORKER} launcher.nproc_per_node=2 run_name=fail"
    assert f"typed:    {typed} -- --fail 1:7" in lines  # the launch's own composition.json
    assert "chosen:   (differences from the defaults of profile=examples)" in lines
    chosen = lines[
        lines.index("chosen:   (differences from the defaults of profile=examples)") + 1 : lines.index("command:")
    ]
    assert "  launcher.nproc_per_node: auto -> 2" in chosen and '  script_args: [] -> ["--fail", "1:7"]' in chosen
    assert f"  script: null -> {WORKER}" in chosen and "  run_name: null -> fail" in chosen
    assert not any(line.startswith("  launcher.topology") for line in chosen)  # the default: not a choice
    command = lines[lines.index("command:") + 1]
    assert "torch.distributed.run --nproc_per_node 2" in command and command.endswith("--fail 1:7 --distributed")
    assert f"  logs: {fail}/logs" in lines and f"  metrics: {fail}/metrics.csv" in lines


def test_submit_json_of_both_formats_names_the_slurm_job(tmp_path):
    """submit.json: format 2 (the back end's handle, issue 19) and SLURM's format 1 both name the
    job; another back end's handle is no SLURM job (before, every submit.json was read as SLURM's)."""
    records = {
        "old": {"job_id": "41", "script": "/x/job.sbatch", "log": "/x/slurm-41.out"},
        "new": {"format": 2, "backend": "slurm", "id": "42_1", "run_dir": "/x", "log": "/x/slurm-42_1.out"},
        "pod": {"format": 2, "backend": "k8s", "id": "train-1", "run_dir": "/x"},
    }
    for second, (name, data) in enumerate(records.items()):
        run_dir = tmp_path / "runs" / f"2026-01-01_00-00-0{second}_{name}"
        run_dir.mkdir(parents=True)
        (run_dir / "submit.json").write_text(json.dumps(data))
    runs = json.loads(runs_cli(tmp_path, "--json").stdout)
    slurm = {item["id"].rsplit("_", 1)[-1]: item["slurm"] for item in runs}
    assert (slurm["old"]["job_id"], slurm["old"]["log"]) == ("41", "/x/slurm-41.out")
    assert (slurm["new"]["job_id"], slurm["new"]["log"]) == ("42_1", "/x/slurm-42_1.out")
    assert slurm["pod"] is None
