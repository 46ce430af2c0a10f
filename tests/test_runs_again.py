"""``runs rerun`` / ``runs resume`` / ``runs compare``, a sweep's learning-curve PNG and the live
progress line, with real launches (issue 9, items 5 and 9).

One failed launch of the bundled trainer (rank 0 exits 3 after iteration 2) is shared: it
is rerun (a new run, same composition, overrides on top), resumed under a pseudo-terminal (the
trainer continues at iteration 3 in the same directory; the console shows one live progress line
while the rank log keeps every line) and compared with its rerun.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import clean_env
from launcher.sweep.curves import curves_in_png

pytestmark = pytest.mark.timeout(240)

FIRST = ("launcher.nproc_per_node=1", "num_envs=4", "max_iterations=3", "run_name=a")
ITER = re.compile(r"^\[iter +(\d+)/(\d+)\] ", re.M)


def launcher(cwd: Path, *args: str, env: dict | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "launcher", *args],
        cwd=cwd,
        env=env or clean_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def under_pty(cwd: Path, *args: str, env: dict, timeout: float = 180) -> tuple[int, bytes]:
    """``python -m launcher ARGS`` with a pseudo-terminal as its stdout and stderr: (exit code, output)."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.chdir(cwd)
            os.execve(sys.executable, [sys.executable, "-m", "launcher", *args], env)
        finally:
            os._exit(127)
    out, deadline = b"", time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 1.0)
        if not ready:
            continue
        try:
            data = os.read(fd, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        out += data
    else:
        os.kill(pid, 9)
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), out


def composition(run_dir: Path) -> dict:
    return json.loads((run_dir / "composition.json").read_text())


def new_run(root: Path, before: set[str]) -> Path:
    (created,) = {p.name for p in root.iterdir() if p.is_dir()} - before
    return root / created


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The failed launch, its rerun, and its resume under a pseudo-terminal."""
    cwd = tmp_path_factory.mktemp("again")
    root = cwd / "runs"
    failed = launcher(cwd, *FIRST, env=clean_env(TRAIN_MULTIGPU_EXAMPLE_CRASH="2:0"))
    assert failed.returncode != 0, failed.stdout + failed.stderr
    (first,) = root.iterdir()
    before = {first.name}
    rerun = launcher(cwd, "runs", "rerun", first.name, "seed=7", "num_envs=2")
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    rerun_dir = new_run(root, before)
    before.add(rerun_dir.name)
    code, console = under_pty(cwd, "runs", "resume", first.name, env=clean_env())
    assert code == 0, console.decode(errors="replace")
    resumed_dir = new_run(root, before)
    return {"cwd": cwd, "first": first, "rerun": rerun_dir, "resumed": resumed_dir, "console": console}


def _config_lines(run_dir: Path) -> set[str]:
    return set((run_dir / "config.yaml").read_text().splitlines())


def test_rerun_of_a_failed_run_is_a_new_run_with_its_composition_and_the_overrides_on_top(runs):
    first, again = runs["first"], runs["rerun"]
    assert again != first
    # the resolved configs differ exactly in what the rerun typed on top
    assert _config_lines(first) - _config_lines(again) == {"seed: null", "num_envs: 4"}
    assert _config_lines(again) - _config_lines(first) == {"seed: 7", "num_envs: 2"}
    recorded, rerun = composition(first), composition(again)
    assert recorded["overrides"] == list(FIRST) and "rerun_of" not in recorded
    assert rerun["overrides"] == ["launcher.nproc_per_node=1", "max_iterations=3", "run_name=a", "seed=7", "num_envs=2"]
    assert rerun["rerun_of"] == first.name
    assert json.loads((again / "status.json").read_text())["exit_code"] == 0


def test_resume_continues_the_bundled_trainer_from_its_checkpoint_in_the_same_directory(runs):
    first, resumed = runs["first"], runs["resumed"]
    log = (resumed / "logs" / "rank0.log").read_text()
    assert f"resuming from {first / 'checkpoints' / 'iter_000002.ckpt'}" in log
    assert [int(n) for n, _ in ITER.findall(log)] == [3]  # iterations continue where the failure left them
    metrics = (first / "metrics.csv").read_text().splitlines()[1:]
    assert [int(row.split(",")[0]) for row in metrics] == [1, 2, 3]  # one curve, in the same directory
    note = composition(resumed)
    assert note["resumed_from"] == first.name and note["trainer_dir"] == str(first)
    assert "--resume" not in note["script_args"]  # a rerun of the resumed run starts afresh
    assert json.loads((resumed / "env.json").read_text())["TRAIN_MULTIGPU_RUN_DIR"] == str(first)
    # the listing reads the resumed run's task and return where its trainer wrote them
    shown = launcher(first.parent.parent, "runs", "show", resumed.name, "--json")
    assert shown.returncode == 0, shown.stderr
    info = json.loads(shown.stdout)
    assert info["trainer_dir"] == str(first) and info["task"] is not None and info["last_return"] is not None
    assert info["where"]["metrics"] == str(first / "metrics.csv"), info["where"]


def test_progress_line_is_rewritten_in_place_on_a_terminal_and_the_rank_log_keeps_every_line(runs):
    console = runs["console"]
    live = re.findall(
        rb"\r\[iter +(\d+)/3\] env_steps/s= *\d+ mean_return= *[\d.n/a-]+ env_steps=\d+ eta=\d+s\x1b\[K", console
    )
    assert live == [b"3"], console
    assert not re.search(rb"\[iter[^\r]*\n", console.replace(b"\x1b[K\r\n", b"")), "a progress line ended a line"
    # the next line starts on a line of its own
    assert b"\x1b[K\r\ndone: 3 iterations" in console, console
    # the first launch, not on a terminal: one line per iteration on the console and in the log
    log = (runs["first"] / "logs" / "rank0.log").read_text()
    assert [int(n) for n, _ in ITER.findall(log)] == [1, 2]


def test_resume_of_a_run_that_finished_all_its_iterations_is_one_line_and_starts_nothing(runs):
    """Before: "iterations 4..3" on the console, nothing trained, exit 0 (issue 25). The first run's
    trainer directory now holds iteration 3 of 3 (its resume finished it): resuming it, or its
    resumed run, is refused; so is a max_iterations= that is not above the newest checkpoint."""
    cwd, root = runs["cwd"], runs["first"].parent
    before = sorted(p.name for p in root.iterdir())
    hint = "(train further with max_iterations=N above 3: train_multigpu runs resume ID max_iterations=N)"
    for ident, typed in ((runs["first"].name, ()), (runs["resumed"].name, ()), ("last", ("max_iterations=3",))):
        result = launcher(cwd, "runs", "resume", ident, *typed)
        assert (result.returncode, result.stdout) == (2, ""), result.stdout + result.stderr
        assert result.stderr == (
            f"train_multigpu: error: id={ident}: nothing to resume: the run finished all its 3 iterations "
            f"(newest checkpoint: iteration 3) {hint}\n"
        )
    assert sorted(p.name for p in root.iterdir()) == before  # nothing started, nothing written


def test_resume_of_a_run_without_checkpoint_is_one_error(tmp_path):
    script = tmp_path / "quick.py"
    script.write_text("print('no checkpoints here')\n")
    assert launcher(tmp_path, "launcher.nproc_per_node=1", f"script={script}", "run_name=nock").returncode == 0
    (run_dir,) = (tmp_path / "runs").iterdir()
    result = launcher(tmp_path, "runs", "resume", "last")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip() == (
        f"train_multigpu: error: id=last: has no checkpoint to resume from (none in {run_dir / 'checkpoints'}) "
        "(rerun it from the start: train_multigpu runs rerun ID)"
    )
    assert len(list((tmp_path / "runs").iterdir())) == 1  # nothing started


def test_compare_writes_one_png_with_a_curve_per_run_and_a_table(runs):
    cwd, first, again = runs["cwd"], runs["first"], runs["rerun"]
    result = launcher(cwd, "runs", "compare", first.name, again.name, "--out", "both.png", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    png = Path(data["png"])
    assert png == cwd / "both.png"
    curves = curves_in_png(png)  # the PNG is valid (signature, chunks) and says what it drew
    assert [c["label"] for c in curves] == [
        f"{first.name}: num_envs=4",  # the overrides in which the runs differ
        f"{again.name}: seed=7 num_envs=2",
    ]
    # the first run's curve holds its 3 iterations: 2 before the failure, 1 resumed
    assert [len(c["points"]) for c in curves] == [3, 3]
    assert [row["iterations"] for row in data["runs"]] == [3, 3]
    assert [row["status"] for row in data["runs"]] == ["failed", "success"]
    table = launcher(cwd, "runs", "compare", first.name, again.name, "--out", "t.png")
    assert table.stdout.splitlines()[0].split() == [
        "run",
        "status",
        "iterations",
        "env",
        "steps",
        "last",
        "return",
        "best",
        "return",
        "goodput",
        "wall",
    ]


# a training script that writes the bundled trainers' metrics.csv (3 iterations; the return: the seed)
CURVE_SCRIPT = """
import os, sys
seed = int(next(a for a in sys.argv if a.startswith("--seed=")).split("=")[1])
with open(os.path.join(os.environ["TRAIN_MULTIGPU_RUN_DIR"], "metrics.csv"), "w") as f:
    f.write("iteration,env_steps,env_steps_per_s,mean_return\\n")
    for i in (1, 2, 3):
        f.write(f"{i},{i * 100},1.0,{seed * 10 + i}\\n")
"""


def test_sweep_writes_one_png_of_its_jobs_curves_labelled_by_the_swept_values(tmp_path):
    script = tmp_path / "curve.py"
    script.write_text(CURVE_SCRIPT)
    result = launcher(tmp_path, "-m", "launcher.nproc_per_node=1", f"script={script}", "seed=1,2")
    assert result.returncode == 0, result.stdout + result.stderr
    (sweep_dir,) = (tmp_path / "runs" / "multirun").iterdir()
    png = sweep_dir / "learning_curves.png"
    assert f"[train_multigpu] learning curves of 2 job(s): {png}" in result.stdout
    curves = curves_in_png(png)
    assert [(c["label"], c["points"]) for c in curves] == [
        ("seed=1", [[100, 11.0], [200, 12.0], [300, 13.0]]),
        ("seed=2", [[100, 21.0], [200, 22.0], [300, 23.0]]),
    ]
    # each job recorded the single run of its point: its rerun is that single run
    assert composition(sweep_dir / "1")["overrides"] == ["launcher.nproc_per_node=1", f"script={script}", "seed=2"]
    dry = launcher(tmp_path, "runs", "rerun", f"multirun/{sweep_dir.name}/1", "--dry_run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.strip().splitlines()[-1].endswith(f"{script} --seed=2 --distributed")
    assert "sweep summary" not in dry.stdout


FAKE_ISAACLAB = """
import os, sys, pathlib
root = os.path.abspath("logs/rsl_rl/cartpole")
print(f"[INFO] Logging experiment in directory: {root}")
print("Exact experiment name requested from command line: 2025-01-01_10-00-00_demo")
run = pathlib.Path(root, "2025-01-01_10-00-00_demo")
run.mkdir(parents=True, exist_ok=True)
for n in (50, 100):
    (run / f"model_{n}.pt").write_bytes(b"")
print("ARGV", sys.argv[1:])
"""


def test_isaaclab_resume_passes_its_own_flags(run_cli, isaaclab, tmp_path):
    """Isaac Lab is not installed: its train.py is a stand-in that logs (and checkpoints) where the real
    one does; the resume is checked on the dry run's argv, the command a real launch starts."""
    (isaaclab / "scripts" / "reinforcement_learning" / "train.py").write_text(FAKE_ISAACLAB)
    env = clean_env(ISAACLAB_PATH=str(isaaclab))
    first = run_cli("--num_gpus", "1", "--task=Isaac-Cartpole-v0", "device=cpu", "--headless", env=env)
    assert first.returncode == 0, first.stdout + first.stderr
    dry = run_cli("runs", "resume", "last", "--dry_run", env=env)
    assert dry.returncode == 0, dry.stderr
    argv = dry.stdout.strip().splitlines()[-1].split()
    assert argv[-6:] == [
        "--resume",
        "--load_run",
        "2025-01-01_10-00-00_demo",
        "--checkpoint",
        "model_100.pt",
        "--distributed",
    ]


# -- the errors (docs/errors.md, "Runs: rerun, resume, compare"): records written by hand, in-process --


def _record(root: Path, name: str, *, config: str = "", composition: dict | None = None, status: dict | None = None):
    run_dir = root / name
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / "config.yaml").write_text(config or "launcher:\n  topology: single_node\nprofile:\n  name: examples\n")
    (run_dir / "status.json").write_text(json.dumps(status or {"started": "2026-01-01T00:00:00+00:00", "exit_code": 1}))
    if composition is not None:
        (run_dir / "composition.json").write_text(json.dumps(composition))
    return run_dir


def _composed(cwd: Path, **extra) -> dict:
    return {"overrides": ["seed=1"], "script_args": [], "order": [], "hydra_flags": [], "cwd": str(cwd), **extra}


def _error(capsys, root: Path, *argv: str) -> str:
    from launcher.runs import cli as runs_cli

    def launch(*_args):  # never reached: every case below stops before the launch
        raise AssertionError("launched")

    assert runs_cli.main([*argv, "--root", str(root)], launch=launch) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err.strip().removeprefix("train_multigpu: error: ")


def test_errors_of_rerun_and_resume(tmp_path, capsys):
    from launcher import record

    root = tmp_path / "runs"
    old = _record(root, "2026-01-01_00-00-00_old")
    assert _error(capsys, root, "rerun", "2026-01-01_00-00-00_old") == (
        "id=2026-01-01_00-00-00_old: its record has no composition.json (launched by an older train_multigpu, "
        f"or never started) (its command.sh re-runs the launch: {old / 'command.sh'})"
    )
    edited = _record(root, "2026-01-01_00-00-01_edited", composition={"overrides": "seed=1"})
    assert _error(capsys, root, "rerun", "2026-01-01_00-00-01") == (
        f"id=2026-01-01_00-00-01: {edited / 'composition.json'} has no overrides/script_args lists (edited?) "
        "(fix or remove it)"
    )
    (root / "2026-01-01_00-00-02_broken").mkdir()
    (root / "2026-01-01_00-00-02_broken" / "composition.json").write_text("{")
    assert _error(capsys, root, "rerun", "2026-01-01_00-00-02").startswith(
        f"id=2026-01-01_00-00-02: {root / '2026-01-01_00-00-02_broken' / 'composition.json'} cannot be read ("
    )
    _record(root, "2026-01-01_00-00-03_gone", composition=_composed(tmp_path / "gone"))
    assert _error(capsys, root, "rerun", "2026-01-01_00-00-03") == (
        f"cwd={tmp_path / 'gone'}: the recorded working directory no longer exists (recreate it, or launch anew)"
    )
    alive = {"started": "2026-01-01T00:00:00+00:00", "exit_code": None, "pid": os.getpid()}
    alive["pid_start"] = record.process_start(os.getpid())
    _record(root, "2026-01-01_00-00-04_live", composition=_composed(tmp_path), status=alive)
    assert _error(capsys, root, "resume", "2026-01-01_00-00-04") == (
        "id=2026-01-01_00-00-04: is still running; resume continues a run that ended (wait, or stop it first)"
    )
    isaac = "launcher:\n  topology: single_node\nrl_library:\n  name: {}\nprofile:\n  name: isaaclab\n"
    _record(root, "2026-01-01_00-00-05_isaac", config=isaac.format("rsl_rl"), composition=_composed(tmp_path))
    assert _error(capsys, root, "resume", "2026-01-01_00-00-05") == (
        "id=2026-01-01_00-00-05: its rank 0 log does not say where Isaac Lab logged the run (no 'Logging "
        "experiment in directory') (resume by hand with train.py's --resume/--load_run/--checkpoint)"
    )
    _record(root, "2026-01-01_00-00-06_sb3", config=isaac.format("sb3"), composition=_composed(tmp_path))
    assert _error(capsys, root, "resume", "2026-01-01_00-00-06") == (
        "rl_library=sb3: Isaac Lab resumes rsl_rl, skrl and rl_games runs (rerun it instead)"
    )


def test_errors_of_compare(tmp_path, capsys):
    root = tmp_path / "runs"
    _record(root, "2026-01-01_00-00-00_a", composition=_composed(tmp_path))
    _record(root, "2026-01-01_00-00-01_b", composition=_composed(tmp_path))
    assert _error(capsys, root, "compare", "2026-01-01_00-00-00", "2026-01-01_00-00-00_a") == (
        "ID=2026-01-01_00-00-00 2026-01-01_00-00-00_a: names the same run twice (give each run once)"
    )
    assert _error(capsys, root, "compare", "2026-01-01_00-00-00", "2026-01-01_00-00-01") == (
        "ID=2026-01-01_00-00-00 2026-01-01_00-00-01: none of these runs has a learning curve (metrics.csv)"
    )
    (root / "2026-01-01_00-00-01_b" / "metrics.csv").write_text("iteration,env_steps,mean_return\n1,10,1.5\n")
    out = tmp_path / "no" / "such" / "dir.png"
    assert _error(capsys, root, "compare", "2026-01-01_00-00-00", "2026-01-01_00-00-01", "--out", str(out)) == (
        f"--out={out}: cannot write it: No such file or directory"
    )


@pytest.mark.parametrize(
    "library, files, expected",
    [
        ("rsl_rl", ["model_2.pt", "model_10.pt"], ["--resume", "--load_run", "R", "--checkpoint", "model_10.pt"]),
        (
            "skrl",
            ["checkpoints/agent_900.pt", "checkpoints/agent_1200.pt"],
            ["--checkpoint", "R/checkpoints/agent_1200.pt"],
        ),
        ("rl_games", ["nn/last_ep_5.pth", "nn/last_ep_12.pth"], ["--checkpoint", "R/nn/last_ep_12.pth"]),
    ],
)
def test_isaaclab_resume_flags_per_library(tmp_path, library, files, expected):
    from launcher.runs.again import isaaclab_resume_args

    for name in files:
        (tmp_path / "R" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "R" / name).write_bytes(b"")
    log = f"[INFO] Logging experiment in directory: {tmp_path}\nExact experiment name requested from command line: R\n"
    assert isaaclab_resume_args(library, log, "id") == [a.replace("R/", f"{tmp_path}/R/") for a in expected]


def test_bare_trainer_progress_is_one_live_line_on_a_terminal_and_every_line_elsewhere():
    """The bundled trainer run by hand (no launcher): its own stdout decides (trainer_outputs.Progress)."""
    import importlib.util
    import io

    from conftest import ROOT

    spec = importlib.util.spec_from_file_location(
        "trainer_outputs", ROOT / "examples" / "trainers" / "trainer_outputs.py"
    )
    outputs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(outputs)
    master, slave = pty.openpty()
    with open(slave, "w", closefd=True) as terminal:
        progress = outputs.Progress(terminal)
        progress.show("[iter    1/2] a")
        progress.show("[iter    2/2] b")
        progress.end()
    try:
        assert (
            os.read(master, 4096) == b"\r[iter    1/2] a\x1b[K\r[iter    2/2] b\x1b[K\r\n"
        )  # the pty writes \n as \r\n
    finally:
        os.close(master)
    piped = io.StringIO()
    progress = outputs.Progress(piped)
    progress.show("[iter    1/2] a")
    progress.show("[iter    2/2] b")
    progress.end()
    assert piped.getvalue() == "[iter    1/2] a\n[iter    2/2] b\n"
