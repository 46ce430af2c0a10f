"""``runs stop`` and ``runs stacks`` signal only the launcher that wrote the record (issue 25, item 3).

A record is a file anyone who can write the run root can copy or forge, with any pid and any start
time (``/proc/<pid>/stat`` is readable by all). Every victim here is a real process: a ``sleep``, a
python that handles SIGUSR2 as a launcher does, pid 1, another user's process. The one proof that is
accepted: the process holds the record's directory open (launcher/record.py's ``write_opened``;
``/proc/<pid>/fd`` is readable only by its owner and root). A real launch's ``runs stop`` (the proof
held by a real launcher) is tests/test_runs_backends.py's ``test_stop_a_real_local_launch_as_ctrl_c_does``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from launcher import record
from launcher.runs import read
from require import unavailable
from supervise_util import env as launch_env

pytestmark = pytest.mark.timeout(120)

# a launcher's stand-in: holds the directory it is given open (the proof), or not, and handles
# SIGUSR2 as a launcher does (writes a marker file the test looks for)
STANDIN = r"""
import os, signal, sys, time
hold, marker = sys.argv[1], sys.argv[2]
if hold != "-":
    fd = os.open(hold, os.O_RDONLY | os.O_DIRECTORY)
def on_signal(signum, frame):
    with open(marker, "a") as f:
        f.write(f"{signum}\n")
signal.signal(signal.SIGUSR2, on_signal)
signal.signal(signal.SIGINT, on_signal)
print("ready", flush=True)
while True:
    time.sleep(1)
"""


def runs_cli(tmp: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "launcher", "runs", "--root", str(tmp / "runs"), *args],
        cwd=tmp,
        env=launch_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )


def forge(tmp: Path, name: str, pid: int, **fields) -> Path:
    """A run directory whose open status.json names ``pid`` with its real start time (what a forger
    reads from /proc/<pid>/stat), in the current form (the proof key) unless ``fields`` say otherwise."""
    run_dir = tmp / "runs" / f"2026-01-01_00-00-00_{name}"
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    status = {"started": "2026-01-01T00:00:00+00:00", "pid": pid, "pid_start": record.process_start(pid)}
    status.update(host=read.HOST, exit_code=None, **{record.HOLDS_KEY: True})
    status.update(fields)
    record.write_json(run_dir / "status.json", {k: v for k, v in status.items() if v is not None})
    return run_dir


def standin(tmp: Path, hold: Path | None, argv_prefix: tuple = ()) -> tuple[subprocess.Popen, Path]:
    marker = tmp / f"signalled-{time.monotonic_ns()}"
    proc = subprocess.Popen(
        [*argv_prefix, sys.executable, "-c", STANDIN, str(hold) if hold else "-", str(marker)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline() == "ready\n"
    return proc, marker


def error_line(out: subprocess.CompletedProcess) -> str:
    assert (out.returncode, out.stdout) == (2, ""), (out.returncode, out.stdout, out.stderr)
    assert out.stderr.count("\n") == 1, out.stderr
    prefix = "train_multigpu: error: "
    assert out.stderr.startswith(prefix), out.stderr
    return out.stderr[len(prefix) : -1]


def alive_after(proc: subprocess.Popen, seconds: float = 0.5) -> bool:
    time.sleep(seconds)
    return proc.poll() is None


@pytest.fixture
def sleeper():
    proc = subprocess.Popen(["sleep", "60"])
    yield proc
    proc.kill()
    proc.wait()


def test_a_forged_record_naming_a_sleep_is_refused_and_the_sleep_lives(tmp_path, sleeper):
    run_dir = forge(tmp_path, "forged", sleeper.pid)
    line = error_line(runs_cli(tmp_path, "stop", run_dir.name))
    assert line == (
        f"id={run_dir.name}: pid {sleeper.pid} does not hold this run directory open: it is not the launcher that "
        "wrote this record (a copied or forged record): not signalled"
    )
    assert alive_after(sleeper)


def test_a_forged_record_of_the_older_form_is_shown_never_signalled(tmp_path, sleeper):
    run_dir = forge(tmp_path, "old", sleeper.pid, **{record.HOLDS_KEY: None})
    listed = json.loads(runs_cli(tmp_path, "--json").stdout)
    assert [(r["id"], r["status"], r["pid"]) for r in listed] == [(run_dir.name, "running", sleeper.pid)]
    assert error_line(runs_cli(tmp_path, "stop", run_dir.name)) == (
        f"id={run_dir.name}: its record (pid {sleeper.pid}) is of an older form that cannot prove its launcher: runs "
        "shows it but never signals it (stop the launch where it runs)"
    )
    assert alive_after(sleeper)


@pytest.mark.parametrize(
    "fields",
    [
        {"pid_start": None, record.HOLDS_KEY: None, "started": None},  # the oldest form: {"pid": 1}
        {},  # the current form, pid 1's real start time
    ],
    ids=["old-form", "current-form"],
)
def test_a_record_naming_pid_1_is_refused(tmp_path, fields):
    run_dir = forge(tmp_path, "init", 1, **fields)
    out = runs_cli(tmp_path, "stop", run_dir.name)
    assert error_line(out) == f"id={run_dir.name}: its record names pid 1, which is no launcher's: not signalled"
    assert error_line(runs_cli(tmp_path, "stacks", run_dir.name)) == (
        f"id={run_dir.name}: its record names pid 1, which is no launcher's: not signalled"
    )


def test_stacks_of_a_forged_record_is_refused_and_the_process_not_asked(tmp_path):
    """The victim handles SIGUSR2 (a launcher of another run would): it is never sent it."""
    victim, marker = standin(tmp_path, None)
    try:
        run_dir = forge(tmp_path, "forged", victim.pid)
        assert error_line(runs_cli(tmp_path, "stacks", run_dir.name, "--timeout", "1")) == (
            f"id={run_dir.name}: pid {victim.pid} does not hold this run directory open: it is not the launcher "
            "that wrote this record (a copied or forged record): not signalled"
        )
        assert error_line(runs_cli(tmp_path, "stop", run_dir.name)).endswith(
            "(a copied or forged record): not signalled"
        )
        assert alive_after(victim) and not marker.exists()
    finally:
        victim.kill()
        victim.wait()


def test_a_record_copied_from_a_live_launchers_directory_is_refused_the_original_is_not(tmp_path):
    """The forger copies a real launcher's record (its pid, start time and proof key all true) into a
    directory of their own: that directory is not the one the launcher holds, so nothing is signalled;
    the original directory's stop reaches the launcher."""
    original = tmp_path / "runs" / "2026-01-01_00-00-00_original"
    original.mkdir(parents=True)
    launcher, marker = standin(tmp_path, original)
    try:
        forge(tmp_path, "original", launcher.pid)
        copy = original.with_name("2026-01-01_00-00-01_copy")
        shutil.copytree(original, copy)
        assert error_line(runs_cli(tmp_path, "stop", copy.name)).endswith(
            f"pid {launcher.pid} does not hold this run directory open: it is not the launcher that wrote this "
            "record (a copied or forged record): not signalled"
        )
        assert alive_after(launcher) and not marker.exists()
        stopped = runs_cli(tmp_path, "stop", original.name)
        assert stopped.returncode == 0, stopped.stderr
        deadline = time.monotonic() + 10
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.read_text() == f"{int(signal.SIGINT)}\n"
    finally:
        launcher.kill()
        launcher.wait()


def test_another_users_process_is_refused_even_holding_the_directory(tmp_path):
    """A process of another user (nobody) that holds the directory open, named by a record root
    wrote: neither the user running runs nor the record's owner: not signalled."""
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None:
        unavailable("ROOT", "running a process as another user needs root and setpriv")
    shared = Path(tempfile.mkdtemp(prefix="shared-root-", dir="/tmp"))  # a place nobody can reach
    shared.chmod(0o755)
    run_dir = shared / "runs" / "2026-01-01_00-00-00_theirs"
    run_dir.mkdir(parents=True, mode=0o755)
    drop = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"]
    # a sleep that holds the directory open (fd 3), as nobody: SIGINT ends it
    victim = subprocess.Popen([*drop, "sh", "-c", 'exec 3<"$0"; exec sleep 60', str(run_dir)])
    deadline = time.monotonic() + 10
    while not os.path.exists(f"/proc/{victim.pid}/fd/3") or os.readlink(f"/proc/{victim.pid}/exe") != shutil.which(
        "sleep"
    ):
        assert time.monotonic() < deadline and victim.poll() is None, "the victim did not start"
        time.sleep(0.02)
    try:
        forge(shared, "theirs", victim.pid)
        line = error_line(runs_cli(shared, "stop", run_dir.name))
        assert line == (
            f"id={run_dir.name}: pid {victim.pid} belongs to uid 65534, neither you nor the record's owner (uid 0): "
            "not signalled"
        )
        assert alive_after(victim)
    finally:
        victim.kill()
        victim.wait()
        shutil.rmtree(shared, ignore_errors=True)


# -- what else a forged record could make runs do: cancel every job, run a command, hang, write -------
STUB = """#!/bin/sh
echo "$(basename "$0") $*" >> "{calls}"
exit 0
"""


@pytest.fixture
def schedulers(tmp_path):
    """Recording stand-ins for every scheduler client runs may run (first on PATH): their calls."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    for name in ("scancel", "squeue", "sacct", "scontrol", "kubectl", "ssh"):
        (bin_dir / name).write_text(STUB.format(calls=calls))
        (bin_dir / name).chmod(0o755)
    env = {**launch_env(), "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    return env, calls


def runs_with(tmp: Path, env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "launcher", "runs", "--root", str(tmp / "runs"), *args],
        cwd=tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def submitted(tmp: Path, name: str, record: dict, **more) -> Path:
    run_dir = tmp / "runs" / f"2026-01-01_00-00-00_{name}"
    run_dir.mkdir(parents=True)
    (run_dir / "submit.json").write_text(json.dumps({"format": 2, "run_dir": str(run_dir), **record}))
    for file_name, data in more.items():
        (run_dir / file_name.replace("_json", ".json")).write_text(json.dumps(data))
    return run_dir


@pytest.mark.parametrize(
    "record, why",
    [
        ({"backend": "slurm", "id": "--me"}, "id '--me' is not a slurm job id"),
        ({"backend": "slurm", "id": "1 2"}, "id '1 2' is not a slurm job id"),
        ({"backend": "k8s", "id": "--all", "kind": "TrainJob"}, "id '--all' is not a k8s job id"),
        (
            {"backend": "k8s", "id": "ppo", "kind": "TrainJob", "namespace": "--all-namespaces"},
            "namespace '--all-namespaces' is not a Kubernetes namespace",
        ),
        ({"backend": "ray", "id": "../../api/x"}, "id '../../api/x' is not a ray job id"),
    ],
    ids=["slurm-me", "slurm-space", "k8s-all", "k8s-namespace", "ray-path"],
)
def test_a_forged_job_id_never_reaches_a_schedulers_command_line(tmp_path, schedulers, record, why):
    """Before: ``runs stop`` ran ``scancel --me`` (every job of the user) or ``kubectl delete trainjob
    --all``. An id its back end never makes is named, not asked, not stopped."""
    env, calls = schedulers
    run_dir = submitted(tmp_path, "forged", record)
    listed = json.loads(runs_with(tmp_path, env, "--json").stdout)
    assert f"submit.json: {why}: not asked, not stopped" in listed[0]["problems"]
    stop = runs_with(tmp_path, env, "stop", "last")
    assert error_line(stop) == f"id=last: has no launcher record and no submitted job in {run_dir}: nothing to stop"
    assert not calls.exists(), calls.read_text()


def test_a_nodes_json_of_another_user_never_runs_its_ssh_command(tmp_path, schedulers):
    """submit=ssh's nodes.json names each node's ssh command, which ``runs logs`` runs for a node whose
    directory is not visible here. Before: a nodes.json anyone wrote into the shared root ran its
    command as the reader. Now only a nodes.json of the user running runs is taken at its word."""
    env, calls = schedulers
    pwned = tmp_path / "pwned"
    node = {"node": 0, "host": "h0", "run_dir": "/nonexistent/node0", "ssh": ["sh", "-c", f"touch {pwned}"]}
    if os.geteuid() != 0:
        unavailable("ROOT", "a file of another user needs root")
    run_dir = submitted(tmp_path, "ssh", {"backend": "ssh", "id": "4242"}, nodes_json={"nodes": [node]})
    os.chown(run_dir / "nodes.json", 65534, 65534)
    out = runs_with(tmp_path, env, "logs", "last", "--rank", "0")
    assert error_line(out) == (
        "--rank=0: no node of this launch has a log for rank 0 (nodes: node 0 (h0)); not asked: nodes.json "
        "belongs to another user: its ssh commands are never run"
    )
    assert not pwned.exists()
    os.chown(run_dir / "nodes.json", os.geteuid(), os.getegid())  # the user's own: its command is run
    runs_with(tmp_path, env, "logs", "last", "--rank", "0")
    assert pwned.exists()


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_slurm_log_that_is_no_regular_file_is_refused_not_read(tmp_path, schedulers, kind):
    """Before: ``runs logs`` of a SLURM record whose ``log`` is a FIFO waited forever for a writer; one
    naming /dev/zero read until memory ran out."""
    env, _ = schedulers
    run_dir = submitted(tmp_path, "slurm", {"backend": "slurm", "id": "42"})
    log = run_dir / "slurm-42.out"
    os.mkfifo(log) if kind == "fifo" else log.symlink_to("/dev/zero")
    out = runs_with(tmp_path, env, "logs", "last", "--rank", "all")
    why = "not a regular file (a FIFO)" if kind == "fifo" else "not a regular file (a character device)"
    assert error_line(out) == f"log={log}: {why}: not read"


def test_resume_never_trains_into_a_directory_the_record_names_outside_the_root(tmp_path):
    """Before: an env.json naming TRAIN_MULTIGPU_RUN_DIR=/anywhere made ``runs resume`` train (write
    checkpoints and metrics) there."""
    elsewhere = tmp_path / "precious"
    (elsewhere / "checkpoints").mkdir(parents=True)
    (elsewhere / "checkpoints" / "iter_000001.ckpt").write_text("x")
    run_dir = tmp_path / "runs" / "2026-01-01_00-00-00_r"
    run_dir.mkdir(parents=True)
    (run_dir / "composition.json").write_text(json.dumps({"overrides": [], "script_args": [], "cwd": str(tmp_path)}))
    (run_dir / "env.json").write_text(json.dumps({"TRAIN_MULTIGPU_RUN_DIR": str(elsewhere)}))
    (run_dir / "status.json").write_text(json.dumps({"exit_code": 1, "reason": "failed"}))
    out = runs_cli(tmp_path, "resume", "last")
    assert error_line(out) == (
        f"id=last: its record names a trainer directory outside {tmp_path / 'runs'} ({elsewhere}): not resumed "
        "there (rerun it instead: train_multigpu runs rerun ID)"
    )
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == [run_dir.name]


def test_a_pid_no_kernel_gives_is_refused_not_a_traceback():
    for pid in (2**70, -1, 0, True, "123"):
        with pytest.raises(read.NotItsLauncher):
            read.verified_launcher({"pid": pid, "pid_start": 1, record.HOLDS_KEY: True}, "/")


def test_errors_md_lists_every_refusal_here():
    text = (Path(__file__).resolve().parents[1] / "docs" / "errors.md").read_text()
    for phrase in (
        "does not hold this run directory open: it is not the launcher that wrote this record",
        "is of an older form that cannot prove its launcher: runs shows it but never signals it",
        "its record names pid 1, which is no launcher's: not signalled",
        "neither you nor the record's owner (uid W): not signalled",
        "nothing to resume: the run finished all its 5 iterations",
        "its record names a trainer directory outside <run root>",
        "a launcher that still runs (pid N) records here: two launchers for one node",
        "a job another user's record names is never stopped as you",
        "what another user's record says is never launched as you",
    ):
        assert phrase in text, phrase


# -- a record another user wrote, acted on as the user running runs ---------------------------------
def _nobody_owns(run_dir: Path) -> None:
    for path in (run_dir, *run_dir.iterdir()):
        os.chown(path, 65534, 65534)


def test_a_submit_json_of_another_user_never_cancels_a_job_as_you(tmp_path, schedulers):
    """A co-user of a shared run root writes a submit.json naming one of your jobs (SLURM job ids are
    public: squeue), under a start time that makes it ``last``. Before: ``runs stop last`` ran
    ``scancel`` of your job (checked with a real SLURM job too). Now only the user's own record stops a
    submitted job; a local launch's stays proven by its launcher (the tests above)."""
    if os.geteuid() != 0:
        unavailable("ROOT", "a file of another user needs root")
    env, calls = schedulers
    run_dir = submitted(tmp_path, "theirs", {"backend": "slurm", "id": "42"})
    run_dir = run_dir.rename(run_dir.with_name("2099-01-01_00-00-00_theirs"))
    mine = submitted(tmp_path, "mine", {"backend": "k8s", "id": "ppo", "kind": "TrainJob"})
    _nobody_owns(run_dir)
    out = runs_with(tmp_path, env, "stop", "last")
    assert error_line(out) == (
        f"id=last: its record (submit.json) belongs to uid 65534, not to you (uid {os.geteuid()}): a job another "
        "user's record names is never stopped as you (stop it as that user, or through its back end)"
    )
    assert "scancel" not in (calls.read_text() if calls.exists() else "")
    os.chown(run_dir / "submit.json", os.geteuid(), os.getegid())  # the user's own record: stopped
    assert runs_with(tmp_path, env, "stop", "last").returncode == 0
    assert "scancel 42\n" in calls.read_text()
    assert runs_with(tmp_path, env, "stop", mine.name).returncode == 0
    assert "kubectl delete trainjob.trainer.kubeflow.org ppo " in calls.read_text()


EVIL = """import os, sys
open(sys.argv[1], "a").write(f"ran as uid {os.getuid()}\\n")
"""


@pytest.mark.parametrize("command", ["rerun", "resume"])
def test_a_composition_of_another_user_is_never_launched_as_you(tmp_path, command):
    """A co-user plants a run whose composition.json names a script of theirs (``script=``), with a
    start time that makes it ``last``. Before: ``runs rerun last`` ran it as the user typing it (root
    here). Now a rerun or resume launches only the user's own record, and nothing starts."""
    if os.geteuid() != 0:
        unavailable("ROOT", "a file of another user needs root")
    pwned = tmp_path / "pwned"
    script = tmp_path / "evil.py"
    script.write_text(EVIL)
    run_dir = tmp_path / "runs" / "2099-01-01_00-00-00_theirs"
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "checkpoints" / "iter_000001.ckpt").write_text("x")
    composition = {
        "overrides": [f"script={script}", "launcher.nproc_per_node=1", "presets=debug"],
        "script_args": [str(pwned)],
        "cwd": str(tmp_path),
    }
    (run_dir / "composition.json").write_text(json.dumps(composition))
    (run_dir / "status.json").write_text(json.dumps({"started": "2099-01-01T00:00:00+00:00", "exit_code": 1}))
    _nobody_owns(run_dir)
    out = runs_cli(tmp_path, command, "last")
    assert error_line(out) == (
        f"id=last: its record (composition.json) belongs to uid 65534, not to you (uid {os.geteuid()}): "
        "what another user's record says is never launched as you (runs show ID prints its overrides: "
        "type the ones you want yourself)"
    )
    assert not pwned.exists()
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == [run_dir.name]


def test_a_planted_run_directory_never_makes_runs_write_through_its_links(tmp_path, capsys):
    """``runs timeline ID`` writes the picture into the run directory: a temporary file, then a rename.
    Before: the temporary file's name was ``.timeline.png.<pid>.tmp``, opened following links, so a
    co-user who owns a planted run directory (its start time makes it ``last``) put that name, for a
    range of pids, as links to a file of the victim: ``runs timeline last`` overwrote it with the PNG
    (root: any file). Now the temporary file is made anew (exclusive, a name no one can guess)."""
    from launcher.runs import cli as runs_cli

    pytest.importorskip("matplotlib")
    precious = tmp_path / "precious.txt"
    precious.write_text("precious\n")
    run_dir = tmp_path / "runs" / "2099-01-01_00-00-00_theirs"
    run_dir.mkdir(parents=True)
    ended = {"started": "2099-01-01T00:00:00+00:00", "ended": "2099-01-01T00:01:00+00:00", "exit_code": 0}
    (run_dir / "status.json").write_text(json.dumps({**ended, "reason": "success", "outcome": "succeeded"}))
    for pid in (os.getpid(), *range(max(2, os.getpid() - 50), os.getpid() + 50)):  # (this process draws it)
        with contextlib.suppress(FileExistsError):
            (run_dir / f".timeline.png.{pid}.tmp").symlink_to(precious)
    (run_dir / "timeline.png").symlink_to(precious)
    assert runs_cli.main(["timeline", "last", "--root", str(tmp_path / "runs")]) == 0
    assert precious.read_text() == "precious\n"
    png = run_dir / "timeline.png"
    assert not png.is_symlink() and png.read_bytes().startswith(b"\x89PNG")
    assert sorted(p.name for p in run_dir.iterdir() if p.name.endswith(".tmp") and not p.is_symlink()) == []


def test_compares_picture_is_a_new_file_never_written_through_a_planted_link(tmp_path, monkeypatch):
    """Without --out, ``runs compare`` writes compare_<date_time>.png in the working directory. Before:
    a link planted under that name (a shared folder; the name is the second it runs) was written
    through, into the file it named. Now the default picture is a new file; a path given with --out
    is still written through (the user named it)."""
    from launcher.runs import cli as runs_cli
    from launcher.runs import curves

    pytest.importorskip("matplotlib")
    precious = tmp_path / "precious.txt"
    precious.write_text("precious\n")
    run_dir = tmp_path / "runs" / "2026-01-01_00-00-00_a"
    run_dir.mkdir(parents=True)
    (run_dir / "metrics.csv").write_text("iteration,env_steps,mean_return\n1,512,10.0\n2,1024,20.0\n")
    (run_dir / "status.json").write_text(json.dumps({"exit_code": 0, "reason": "success"}))
    monkeypatch.chdir(tmp_path)

    class Frozen(curves.datetime):
        @classmethod
        def now(cls, tz=None):
            return cls(2026, 1, 2, 3, 4, 5)

    monkeypatch.setattr(curves, "datetime", Frozen)
    (tmp_path / "compare_2026-01-02_03-04-05.png").symlink_to(precious)
    assert runs_cli.main(["compare", "last", "--root", str(tmp_path / "runs")]) == 2
    assert precious.read_text() == "precious\n"
