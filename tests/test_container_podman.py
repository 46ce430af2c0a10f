"""Launches inside a real podman container (``podman --runtime runc``; docs/containers.md): the
bundled torch trainer trains inside an image built by the test (tests/podman_image.py: no Python
in it, nothing of the host's root filesystem; the interpreter and the virtual environment are mounted
read-only through ``container.mounts``), and every promise of the launcher holds inside.

One launch carries several claims where that is honest (the budget: ~two cores shared). Skipped
without podman and runc; ``TRAIN_MULTIGPU_REQUIRE_PODMAN=1`` (.ci/run) makes that a failure.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

import podman_image
from conftest import ALLREDUCE, clean_env
from launcher import paths
from supervise_util import launch, wait_for
from supervise_util import run_dir as the_run

pytestmark = pytest.mark.timeout(300)

SMALL = ("launcher.nproc_per_node=2", "num_envs=4", "device=cpu")


@pytest.fixture(scope="module")
def image(tmp_path_factory) -> str:
    return podman_image.image(tmp_path_factory.mktemp("image"))


def options() -> str:
    """container.options: the sandbox's resource limits (no higher than the current ones)."""
    return "container.options=[" + ",".join(f"'--ulimit={v}'" for v in podman_image.ULIMITS[1::2]) + "]"


def args(image: str, *more: str, env: tuple[str, ...] = ()) -> list[str]:
    """The overrides of a launch in the test image, with this machine's Python and the examples mounted."""
    mounted = [*podman_image.python_mounts(), f"{paths.examples_dir()}:{paths.examples_dir()}:ro"]
    return [
        f"container.image={image}",
        "container.runtime=podman",
        "container.runtime_flags=['--runtime=runc']",
        options(),
        "container.mounts=[" + ",".join(f"'{m}'" for m in mounted) + "]",
        "container.env=[" + ",".join(env) + "]",
        f"python={sys.executable}",
        *more,
    ]


def start(tmp: Path, argv: list[str], **env: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "launcher", f"run_root={tmp / 'runs'}", *argv],
        cwd=tmp,
        env=clean_env(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def ours() -> list[str]:
    return [name for name in podman_image.containers() if name.startswith("tmg-")]


def beating(tmp: Path, ranks: int = 2) -> bool:
    runs = tmp / "runs"
    return runs.is_dir() and len(list(runs.glob("*/logs/rank*.beat"))) >= ranks


def cmdlines_with(value: str, typed_by: int) -> list[str]:
    """Command lines holding ``value``, but the launcher's own (``typed_by``: the user typed it there).

    A child the launcher has forked but not yet exec'd shows the launcher's command line byte for byte:
    that one is the typed line too, not a new one; any other line holding the value is reported."""
    try:
        typed = Path(f"/proc/{typed_by}/cmdline").read_bytes()
    except OSError:
        typed = None
    found = []
    for path in Path("/proc").glob("[0-9]*/cmdline"):
        if path.parent.name == str(typed_by):
            continue
        try:
            line = path.read_bytes()
        except OSError:
            continue
        if value.encode() in line and line != typed:
            found.append(line.replace(b"\0", b" ").decode(errors="replace")[:200])
    return found


def files_with(value: str, *roots: Path) -> list[Path]:
    found = []
    for root in roots:
        for path in root.rglob("*") if root.is_dir() else ():
            try:
                if path.is_file() and not path.is_symlink() and value.encode() in path.read_bytes():
                    found.append(path)
            except OSError:
                continue
    return found


def rank_environ_with(value: str) -> list[int]:
    """Rank processes (the rank wrapper's) whose environment holds ``value``, inside a container: their
    root is not the host's."""
    host_root = Path("/proc/self/root").stat().st_ino, Path("/proc/self/root").stat().st_dev
    found = []
    for path in Path("/proc").glob("[0-9]*/environ"):
        try:
            if value.encode() not in path.read_bytes() or b"worker.py" not in (path.parent / "cmdline").read_bytes():
                continue
            root = (path.parent / "root").stat()
        except OSError:
            continue
        if (root.st_ino, root.st_dev) != host_root:
            found.append(int(path.parent.name))
    return found


def test_the_trainer_restarts_inside_the_container_and_its_secret_reaches_only_the_ranks(tmp_path, image):
    """The bundled trainer, two ranks, in the image: rank 1 crashes once after iteration 2, the
    launch restarts it from its checkpoint (inside the container again) and completes; per-rank logs
    on the host, ``runs`` lists it; a secret reaches the ranks inside and no command line on the host
    (podman's and conmon's included), no file (the run, podman's container storage)."""
    sentinel = f"tmgSENTINEL{uuid.uuid4().hex}"
    argv = args(
        image,
        *SMALL,
        "max_iterations=4",
        "restart.max=1",
        "restart.classes=[default,exit-code]",
        f"+worker_env.HF_TOKEN={sentinel}",
        env=("TRAIN_MULTIGPU_EXAMPLE_CRASH",),
    )
    proc = start(tmp_path, argv, TRAIN_MULTIGPU_EXAMPLE_CRASH="2:1")
    seen_inside, seen_running = [], []
    try:
        while proc.poll() is None:
            seen_running += ours()
            assert cmdlines_with(sentinel, proc.pid) == []
            seen_inside += rank_environ_with(sentinel)
            time.sleep(0.3)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out[-3000:] + err[-3000:]
    assert seen_inside, "no rank inside a container had the secret"
    assert any(name.endswith("-n0-a0") for name in seen_running) and any(n.endswith("-n0-a1") for n in seen_running)
    run_dir = the_run(tmp_path)
    record = json.loads((run_dir / "status.json").read_text())
    first, second = record["attempts"]
    assert first["cause"] == "exit-code" and first["iterations"] == 2
    assert second["resumed_from"] == str(run_dir / "checkpoints" / "iter_000002.ckpt")
    assert (second["exit_code"], second["iterations"]) == (0, 4)
    assert "iterations 3..4" in (run_dir / "attempt1" / "logs" / "rank0.log").read_text()
    assert (run_dir / "logs" / "rank1.log").is_file()
    assert "podman --runtime=runc run --rm --name tmg-" in (run_dir / "command.sh").read_text()
    listing = launch(tmp_path, "runs", f"--root={tmp_path / 'runs'}").stdout
    assert "success, attempts 2 (1 restart)" in listing.splitlines()[1], listing
    # nowhere else: the console, every file of the run, podman's storage (config.json, its state database)
    assert sentinel not in out + err
    assert files_with(sentinel, tmp_path, Path("/var/lib/containers/storage")) == []
    assert ours() == []


def test_a_failing_jax_rank_exit_code_and_cause_come_out_of_its_container(tmp_path, image):
    """Two JAX ranks, each in its own container (named with its rank): rank 1 exits 7 after the
    coordinator met (host network), the launch exits 7 naming it; no container is left."""
    r = launch(
        tmp_path,
        *args(image),
        "launcher=skrl_jax",
        "launcher.nproc_per_node=2",
        f"script={ALLREDUCE}",
        "--",
        "--exit_code_on_rank",
        "1:7",
    )
    assert r.returncode == 7, r.stdout[-3000:] + r.stderr[-3000:]
    assert "FAILED: node 0, rank 1 (local rank 1): exit code 7" in r.stderr
    assert "--name tmg-" in (the_run(tmp_path) / "command.sh").read_text()
    assert ours() == []


# a rank that only waits (no torch, no jax to import: the quick way to a running launch in the image)
WAITER = """
import os, sys, time
print("waiting", os.environ.get("JAX_RANK"), flush=True)
while True:
    time.sleep(0.2)
"""


def waiter(tmp: Path) -> list[str]:
    folder = tmp / "scripts"
    folder.mkdir()
    (folder / "waiter.py").write_text(WAITER)
    # and a cache folder that does not exist yet: made when the image check passed
    mounted = [*podman_image.python_mounts(), f"{folder}:{folder}:ro", f"{tmp / 'cache'}:/cache"]
    base = [a for a in args("") if not a.startswith(("container.image=", "container.mounts="))]
    return [
        *base,
        "container.mounts=[" + ",".join(f"'{m}'" for m in mounted) + "]",
        "launcher=skrl_jax",
        "launcher.nproc_per_node=2",
        f"script={folder / 'waiter.py'}",
    ]


def waiting(tmp: Path) -> bool:
    logs = list((tmp / "runs").glob("*/logs/rank*.log")) if (tmp / "runs").is_dir() else []
    return len([log for log in logs if "waiting" in log.read_text()]) == 2


def test_stacks_then_ctrl_c_leave_no_container(tmp_path, image):
    """``runs stacks`` takes every rank's stack inside the containers (py-spy from the host, by the
    launch's marker), then one Ctrl+C stops both containers: none is left. While they run, a secret
    is in both ranks' environment inside and in no command line (podman's, conmon's), no file of
    podman's container storage (where ``-e NAME`` would have put it) nor of the run."""
    sentinel = f"tmgSENTINEL{uuid.uuid4().hex}"
    proc = start(tmp_path, [f"container.image={image}", *waiter(tmp_path), f"+worker_env.HF_TOKEN={sentinel}"])
    try:
        wait_for(lambda: waiting(tmp_path), 180, "both ranks running in their containers")
        assert len(ours()) == 2
        assert len(rank_environ_with(sentinel)) >= 2  # both ranks (and the processes they run the script in)
        assert cmdlines_with(sentinel, proc.pid) == []
        assert files_with(sentinel, tmp_path, Path("/var/lib/containers/storage"), Path("/run/containers")) == []
        stacks = launch(tmp_path, "runs", "stacks", "last", f"--root={tmp_path / 'runs'}", timeout=120)
        assert stacks.returncode == 0, stacks.stdout + stacks.stderr
        summary = wait_for(lambda: list(the_run(tmp_path).glob("stacks/*/summary.txt")), 60, "the stacks' summary")
        text = summary[0].read_text()
        assert "rank 0" in text and "rank 1" in text and "waiter.py" in text, text
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out[-2000:] + err[-2000:]
    assert ours() == []


def test_a_sigkilled_launcher_leaves_no_container(tmp_path, image):
    proc = start(tmp_path, [f"container.image={image}", *waiter(tmp_path)])
    try:
        wait_for(lambda: waiting(tmp_path), 180, "both ranks running in their containers")
        assert len(ours()) == 2
        assert (tmp_path / "cache").is_dir()  # a missing mount source: made once the image check passed
    finally:
        proc.kill()
        proc.communicate()
    wait_for(lambda: ours() == [], 60, "the containers' removal after the launcher's SIGKILL")
    status = the_run(tmp_path) / "status.json"
    wait_for(lambda: json.loads(status.read_text())["exit_code"] is not None, 60, "the watchdog's record")
    record = json.loads(status.read_text())
    assert record["exit_code"] == 137 and record["reason"] == "launcher killed"


def test_an_image_without_python_is_refused_before_any_rank_starts(tmp_path, image):
    argv = [
        f"container.image={image}",
        "container.runtime=podman",
        "container.runtime_flags=['--runtime=runc']",
        options(),
    ]
    r = launch(tmp_path, *argv, f"container.mounts=['{tmp_path / 'cache'}:/cache']")
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"train_multigpu: error: container.image={image}: python3 "), lines
    assert not (tmp_path / "runs").exists() and not (tmp_path / "cache").exists()  # a mount's folder: not made
    # the interpreter there, torch not: the module is named
    venvless = [*argv, f"container.mounts=['{podman_image.base_prefix()}:{podman_image.base_prefix()}:ro']"]
    r = launch(tmp_path, *venvless, f"python={podman_image.base_prefix()}/bin/python3")
    assert r.returncode == 2 and "in the image cannot import torch" in r.stderr, r.stderr
    # the interpreter and torch there, the training script (the examples' folder, not mounted) not
    mounted = "container.mounts=[" + ",".join(f"'{m}'" for m in podman_image.python_mounts()) + "]"
    r = launch(tmp_path, *argv, mounted, f"python={sys.executable}")
    assert r.returncode == 2 and "the training script " in r.stderr and "is not in the image" in r.stderr, r.stderr
    # the runtime's own failure is said as such: here, a limit above the sandbox's
    raised = [a for a in argv if not a.startswith("container.options=")]
    r = launch(tmp_path, *raised, "container.options=['--ulimit=nofile=1048576:1048576']")
    assert r.returncode == 2 and "podman could not start a container from it (exit 126: " in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists() and ours() == []


def test_submit_slurm_runs_podman_under_srun_on_the_real_cluster(slurm_cluster, tmp_path, image):
    """submit=slurm on the one-host cluster, container.runtime=podman: the job's node launcher runs its
    launch in the image under srun; the secret reaches the rank, nowhere on disk."""
    from slurm_cluster import wait_job

    sentinel = f"tmgSENTINEL{uuid.uuid4().hex}"
    r = launch(
        tmp_path,
        *args(image),
        "submit=slurm",
        "slurm.time=5",
        "launcher.nproc_per_node=1",
        f"script={ALLREDUCE}",
        f"+worker_env.HF_TOKEN={sentinel}",
        OMP_NUM_THREADS="1",
    )
    assert r.returncode == 0, r.stdout + r.stderr
    job = r.stdout.split("submitted SLURM job ", 1)[1].split()[0]
    info = wait_job(job, timeout=240)
    (log,) = (tmp_path / "runs").rglob(f"slurm-{job}.out")
    assert info["JobState"] == "COMPLETED", log.read_text()
    (command,) = (tmp_path / "runs").rglob("command.sh")
    assert "podman --runtime=runc run --rm --name tmg-" in command.read_text()
    assert "all_reduce sum=1 expected=1" in log.read_text() + "".join(
        p.read_text() for p in (tmp_path / "runs").rglob("rank0.log")
    )
    for path in tmp_path.rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert sentinel.encode() not in path.read_bytes(), f"secret written to {path}"
    assert ours() == []


def test_the_watchdog_removes_a_container_left_by_name(tmp_path, image):
    """A container whose processes the marker sweep cannot reach (here: created, never started; in
    life, one the daemon was still creating when the launcher died) is removed by the name the
    launcher told the watchdog, after the launcher's end without ``done``."""
    name = f"tmg-{uuid.uuid4().hex[:12]}-n0-a0"
    subprocess.run([*podman_image.PODMAN, "create", "--name", name, image, "/none"], check=True, capture_output=True)
    assert name in ours()
    watchdog = subprocess.Popen(
        [sys.executable, "-S", "-m", "launcher.run.watchdog", uuid.uuid4().hex],
        stdin=subprocess.PIPE,
        env={**clean_env(), "PYTHONPATH": paths.PACKAGE_PARENT},
    )
    watchdog.stdin.write(("remove " + json.dumps([*podman_image.PODMAN, "rm", "-f", name]) + "\n").encode())
    watchdog.stdin.close()  # the launcher gone without "done"
    assert watchdog.wait(timeout=120) == 0
    assert name not in ours()
