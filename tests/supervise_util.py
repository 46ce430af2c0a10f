"""Helpers for the supervisor tests: start train_multigpu for real and count what survives it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from conftest import clean_env, off_checkout

REPO = Path(__file__).resolve().parent.parent
SPAWNER = REPO / "tests" / "workers" / "spawner.py"
HELPER_TOKEN = b"tmg-test-helper"


def env() -> dict:
    """A launch's environment: run from a folder of its own (``cwd=tmp``), never the checkout."""
    out = off_checkout(os.environ)
    out.pop("OMP_NUM_THREADS", None)
    return out


def start(tmp: Path, *overrides: str, script_args: tuple = ()) -> subprocess.Popen:
    """``train_multigpu device=cpu run_root=<tmp>/runs <overrides> -- <script_args>`` in the background."""
    argv = [sys.executable, "-m", "launcher", "device=cpu", f"run_root={tmp / 'runs'}", *overrides]
    if script_args:
        argv += ["--", *script_args]
    return subprocess.Popen(argv, cwd=tmp, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)


LAUNCH_TIMEOUT_S = 300.0


def launch(tmp: Path, *args: str, timeout: float = LAUNCH_TIMEOUT_S, **env: str) -> subprocess.CompletedProcess:
    """``train_multigpu run_root=<tmp>/runs <args>`` (``runs ...``: no run_root) to its end, with
    :func:`conftest.clean_env` and ``env`` added; its output captured as text. The one CLI runner of
    the tests that launch to the end (test_recovery, test_trackers, test_container_podman)."""
    root = [] if args[:1] == ("runs",) else [f"run_root={tmp / 'runs'}"]
    return subprocess.run(
        [sys.executable, "-m", "launcher", *root, *args],
        cwd=tmp,
        env=clean_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def spawner(
    tmp: Path, *overrides: str, nproc: int = 2, jax: bool = False, args: tuple = (), script: Path = SPAWNER
) -> tuple[subprocess.Popen, Path]:
    """A launch of ``script`` (default: the spawner) that writes its ranks' pids into ``<tmp>/pids``."""
    pid_dir = tmp / "pids"
    pid_dir.mkdir(exist_ok=True)
    topology = ["launcher=skrl_jax"] if jax else []
    proc = start(
        tmp,
        *topology,
        f"launcher.nproc_per_node={nproc}",
        f"script={script}",
        *overrides,
        script_args=("--pid_dir", str(pid_dir), *args),
    )
    return proc, pid_dir


def wait_for(predicate, timeout: float = 60.0, what: str = "", every: float = 0.2, context=None):
    """``predicate()``'s first true value, polled every ``every`` s; after ``timeout`` s an AssertionError
    naming ``what`` (and ``context()``'s text: a log that says why)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"not within {timeout} s: {what}" + (f"; {context()}" if context else ""))


def wait_for_files(directory: Path, count: int, pattern: str = "*.pid", timeout: float = 60.0) -> list[Path]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = sorted(directory.glob(pattern))
        if len(found) >= count:
            return found
        time.sleep(0.02)
    raise AssertionError(f"only {sorted(p.name for p in directory.glob(pattern))} in {directory} after {timeout}s")


def _alive(pid: int, token: bytes = b"") -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read()
    except OSError:
        return False
    return state not in (b"Z", b"X") and token in cmdline


def survivors(pid_dir: Path, settle: float = 2.0, script: bytes = SPAWNER.name.encode()) -> list[str]:
    """The recorded processes still alive (after up to ``settle`` seconds for the kernel to finish):
    ``script`` is what the ranks run (a pid reused by another process is not a survivor)."""
    deadline = time.monotonic() + settle
    while True:
        left = []
        for path in pid_dir.glob("*.pid"):
            token = HELPER_TOKEN if path.name.startswith("helper-") else script
            pid = int(path.read_text())
            if _alive(pid, token):
                left.append(f"{path.name}:{pid}")
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def finish(proc: subprocess.Popen, timeout: float = 60.0) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"train_multigpu did not end within {timeout}s:\n{out.decode()}\n{err.decode()}") from None
    return proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")


def run_dir(tmp: Path) -> Path:
    dirs = sorted((tmp / "runs").iterdir())
    assert len(dirs) == 1, dirs
    return dirs[0]


def status(tmp: Path) -> dict:
    return json.loads((run_dir(tmp) / "status.json").read_text())
