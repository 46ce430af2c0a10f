"""``runs`` asks each run's back end: records like the real ones (the Kubernetes submitter's
submit.json, SLURM's format 1, format 2 of every back end, the Ray submitter's ray_job.json) read into
their Handle; a back end answering, one silent, one missing; ``runs stop`` and its errors.

A back end's real engine is exercised in tests/test_backend_conformance.py; here a back end that
answers (or never does) is a small module of this test, registered in place of a real one: the
dispatch is what is tested, not an engine."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from launcher import backends
from launcher.runs import cli as runs_cli
from launcher.runs import read, remote
from supervise_util import env as launch_env

REPO = Path(__file__).resolve().parents[1]
CONFIG = "launcher:\n  topology: multinode\n  nnodes: 2\n  nproc_per_node: 2\ntask: CartPole-v1\n"
# what launcher/k8s/submit.py writes (before submit.json format 2)
K8S_RECORD = {
    "kind": "TrainJob",
    "name": "ppo-a1b2c3",
    "namespace": "ml",
    "created": "trainjob.trainer.kubeflow.org/ppo-a1b2c3 created",
    "manifest": "/runs/x/trainjob.yaml",
    "overrides": ["submit=k8s", "k8s.image=ghcr.io/lab/isaac:2.3"],
}


def make(root: Path, name: str, **records) -> Path:
    run_dir = root / name
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text(CONFIG)
    for file_name, data in records.items():
        (run_dir / file_name.replace("_json", ".json")).write_text(json.dumps(data))
    return run_dir


def cli(tmp_path: Path, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "launcher", "runs", *argv, "--root", str(tmp_path / "runs")],
        cwd=tmp_path,
        env={**launch_env(), "RAY_ADDRESS": ""},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def one_error(out: subprocess.CompletedProcess) -> str:
    assert out.returncode == 2 and out.stdout == "", out
    (line,) = out.stderr.splitlines()
    assert line.startswith("train_multigpu: error: "), line
    return line[len("train_multigpu: error: ") :]


def test_a_k8s_run_is_read_as_kubernetes_never_as_slurm(tmp_path):
    """Before: every submit.json was read as SLURM's (``slurm: job ?, state ?``)."""
    make(tmp_path / "runs", "2026-12-01_10-00-00_ppo", submit_json=K8S_RECORD)
    (run,) = json.loads(cli(tmp_path, "--json").stdout)
    assert run["slurm"] is None and run["ray"] is None
    # asked through the Kubernetes back end: no cluster answers here (kubectl refuses or is absent)
    assert (run["remote"]["backend"], run["remote"]["id"], run["remote"]["state"]) == ("k8s", "ppo-a1b2c3", "unknown")
    assert (run["status"], run["topology"], run["nnodes"]) == ("submitted", "multinode", "2")
    shown = cli(tmp_path, "show", "last").stdout
    assert "k8s:      TrainJob ppo-a1b2c3 (namespace ml), state unknown" in shown and "\nslurm:" not in shown


@pytest.mark.parametrize(
    "record, backend, job",
    [
        ({"job_id": "41", "script": "/r/job.sbatch", "log": "/r/slurm-41.out", "overrides": []}, "slurm", "41"),
        ({"format": 2, "backend": "slurm", "id": "42", "run_dir": "/r", "log": "/r/slurm-42.out"}, "slurm", "42"),
        ({"format": 2, "backend": "ray", "id": "raysubmit_A", "run_dir": "/r", "address": "http://h:1"}, "ray", None),
        ({"format": 2, "backend": "k8s", "id": "ppo-x", "run_dir": "/r", "kind": "PyTorchJob"}, "k8s", None),
    ],
)
def test_every_submit_json_format_reads_into_its_handle(tmp_path, record, backend, job):
    run_dir = make(tmp_path / "runs", "2026-12-01_10-00-00_a", submit_json=record)
    info = read.read(run_dir, root=tmp_path / "runs")
    assert (info.handle.backend, info.handle.id, info.handle.run_dir) == (backend, record.get("id", job), str(run_dir))
    assert (info.slurm or {}).get("job_id") == job
    assert (info.ray is not None) == (backend == "ray") and info.status == read.SUBMITTED


@pytest.mark.parametrize("fmt", [99, 1, "2", True, None])
def test_a_submit_json_of_an_unknown_format_is_shown_as_unknown_never_dispatched(tmp_path, fmt):
    """Before: ``{"format": 99, "backend": "k8s", ...}`` was read as a Kubernetes handle (asked,
    stopped through kubectl). A format this version does not know names no back end: runs shows the
    run as ``?`` with the reason, and ``runs stop`` has nothing to stop (no back end is asked)."""
    record = {"format": fmt, "backend": "k8s", "id": "ppo-x", "run_dir": "/r", "kind": "TrainJob", "namespace": "ml"}
    run_dir = make(tmp_path / "runs", "2026-12-01_10-00-00_new", submit_json=record)
    info = read.read(run_dir, root=tmp_path / "runs")
    assert (info.handle, info.remote, info.slurm, info.ray, info.status) == (None, None, None, None, "?")
    assert f"submit.json: format {str(fmt)!r} is not one this train_multigpu reads (2): not asked, not stopped" in (
        info.problems
    )
    assert one_error(cli(tmp_path, "stop", "last")) == (
        f"id=last: has no launcher record and no submitted job in {run_dir}: nothing to stop"
    )


def test_the_ray_submitters_record_reads_into_a_ray_handle(tmp_path):
    record = {"job_id": "raysubmit_B", "address": "http://127.0.0.1:1", "job": {}, "overrides": [], "state": "STOPPED"}
    make(tmp_path / "runs", "2026-12-01_10-00-00_r", ray_job_json=record)
    (run,) = json.loads(cli(tmp_path, "--json").stdout)
    assert run["ray"]["job_id"] == "raysubmit_B" and run["status"] == "interrupted", run
    remote = run["remote"]
    assert (remote["backend"], remote["id"], remote["state"]) == ("ray", "raysubmit_B", "stopped"), remote
    assert remote["detail"] == "STOPPED (recorded; the cluster did not answer)", remote
    assert "interrupted [ray STOPPED]" in cli(tmp_path).stdout


@pytest.fixture
def fake_k8s(tmp_path, monkeypatch):
    """A k8s back end module of this test registered in place of the real one: ``answer`` is what its
    describe does (a Status, or sleep: a cluster that never answers)."""
    (tmp_path / "fake_backend.py").write_text(
        textwrap.dedent(
            """
            import os, time
            from launcher.backends.base import State, Status

            class Backend:
                name = "k8s"
                def describe(self, handle):
                    if os.environ.get("FAKE_SILENT"):
                        time.sleep(3600)
                    return Status(State.RUNNING, "Running on 2 pods")
                def cancel(self, handle):
                    raise ConnectionRefusedError("the API server at https://10.0.0.1:6443 refused the connection")
                def logs(self, handle, rank=None, follow=False):
                    yield "rank 0 line 1\\n"
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(backends.REGISTRY, "k8s", "fake_backend:Backend")
    make(tmp_path / "runs", "2026-12-01_10-00-00_ppo", submit_json=K8S_RECORD)
    return tmp_path


def test_a_merged_back_end_is_asked_and_its_state_shown(fake_k8s, capsys):
    assert runs_cli.main(["--root", str(fake_k8s / "runs")]) == 0
    assert "running [k8s Running on 2 pods]" in capsys.readouterr().out
    assert runs_cli.main(["logs", "last", "--root", str(fake_k8s / "runs")]) == 0
    assert capsys.readouterr().out == "rank 0 line 1\n"
    assert runs_cli.main(["stop", "last", "--root", str(fake_k8s / "runs")]) == 2
    assert capsys.readouterr().err == (
        "train_multigpu: error: id=last: its k8s back end cannot be reached: "
        "the API server at https://10.0.0.1:6443 refused the connection\n"
    )


def test_a_silent_back_end_never_holds_the_listing(fake_k8s, monkeypatch, capsys):
    monkeypatch.setenv("FAKE_SILENT", "1")
    monkeypatch.setattr(remote, "BUDGET_S", 1.0)
    start = time.monotonic()
    assert runs_cli.main(["--json", "--root", str(fake_k8s / "runs")]) == 0
    assert time.monotonic() - start < 5.0
    (run,) = json.loads(capsys.readouterr().out)
    assert (
        run["status"] == "submitted" and "k8s: no answer within the listing's 1 s: state not known" in run["problems"]
    )


def test_a_listing_asks_only_the_runs_whose_record_cannot_say(fake_k8s, capsys):
    """Lazy: a run whose launcher wrote its end is not asked (a thousand finished runs cost no query)."""
    ended = fake_k8s / "runs" / "2026-12-01_10-00-00_ppo"
    (ended / "status.json").write_text(json.dumps({"exit_code": 0, "reason": "success", "pid": 1}))
    assert runs_cli.main(["--json", "--root", str(fake_k8s / "runs")]) == 0
    (run,) = json.loads(capsys.readouterr().out)
    assert (run["status"], run["remote"]["state"]) == ("success", None)
    assert runs_cli.main(["show", "last", "--json", "--root", str(fake_k8s / "runs")]) == 0
    assert json.loads(capsys.readouterr().out)["remote"]["state"] == "running"  # show asks its one run


def test_stop_errors(tmp_path):
    root = tmp_path / "runs"
    done = make(root, "2026-12-01_10-00-00_done", status_json={"exit_code": 0, "reason": "success", "pid": 1})
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()  # nothing listens there: Ray's address refuses
    ray_record = {
        "format": 2,
        "backend": "ray",
        "id": "raysubmit_C",
        "run_dir": "/r",
        "address": f"http://127.0.0.1:{port}",
    }
    make(root, "2026-12-01_10-00-01_ray", submit_json=ray_record)
    assert one_error(cli(tmp_path, "stop", "nope")) == (
        f"id=nope: no run under {root} has this id or prefix (train_multigpu runs lists them)"
    )
    assert one_error(cli(tmp_path, "stop", done.name)) == f"id={done.name}: already ended (success): nothing to stop"
    elsewhere = {"exit_code": None, "pid": 4242, "host": "node-9", "started": "2026-12-01T10:00:02+00:00"}
    make(root, "2026-12-01_10-00-02_far", status_json=elsewhere)
    assert one_error(cli(tmp_path, "stop", "2026-12-01_10-00-02_far")) == (
        f"id=2026-12-01_10-00-02_far: was launched on node-9: stop it there (this is {socket.gethostname()})"
    )
    never = make(root, "2026-12-01_10-00-03_never")  # config.yaml only: the launch never started
    assert one_error(cli(tmp_path, "stop", never.name)) == (
        f"id={never.name}: has no launcher record and no submitted job in {never}: nothing to stop"
    )
    unreachable = one_error(cli(tmp_path, "stop", "2026-12-01_10-00-01_ray"))
    assert unreachable.startswith("id=2026-12-01_10-00-01_ray: its ray back end cannot be reached: "), unreachable
    assert "no answer from http://127.0.0.1:" in unreachable, unreachable


def test_errors_md_lists_the_stop_messages():
    text = (REPO / "docs" / "errors.md").read_text()
    for phrase in (
        "already ended (success): nothing to stop",
        "back end cannot be reached: ",
        "has no launcher record and no submitted job in <run dir>: nothing to stop",
        "was launched on HOST: stop it there",
        "runs stop",
    ):
        assert phrase in text, phrase


def holders(directory: Path) -> set[int]:
    """The processes that hold ``directory`` open (/proc/<pid>/fd)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if any(os.readlink(fd) == str(directory) for fd in (entry / "fd").iterdir()):
                found.add(int(entry.name))
        except OSError:
            continue
    return found


def test_stop_a_real_local_launch_as_ctrl_c_does(tmp_path):
    """A real launch (JAX ranks of tests/workers/runs_worker.py, sleeping once they printed): ``runs stop``
    signals its launcher, which stops its ranks and closes its record; a second stop is refused."""
    ready = tmp_path / "ready"
    argv = [sys.executable, "-m", "launcher", "device=cpu", "launcher=skrl_jax", "launcher.nproc_per_node=2"]
    argv += [f"run_root={tmp_path / 'runs'}", f"script={REPO / 'tests' / 'workers' / 'runs_worker.py'}", "run_name=st"]
    argv += ["--", "--sleep", "--ready", str(ready)]
    proc = subprocess.Popen(argv, cwd=tmp_path, env=launch_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), proc.poll()
        status = next((tmp_path / "runs").glob("*_st/status.json"))
        pid = json.loads(status.read_text())["pid"]
        # the proof runs stop asks for: the launcher, and no other process (no rank, no watchdog), holds
        # its run directory open (runs/read.verified_launcher; tests/test_runs_signals.py: forged records)
        assert holders(status.parent) == {pid}
        stopped = cli(tmp_path, "stop", "last")
        assert stopped.returncode == 0, stopped.stderr
        assert stopped.stdout.endswith(
            f"_st: SIGINT to its launcher (pid {pid}), as Ctrl+C: it stops every process of the launch\n"
        ), stopped.stdout
        assert proc.wait(timeout=90) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    (run,) = json.loads(cli(tmp_path, "--json").stdout)
    assert (run["status"], run["reason"], run["exit_code"]) == ("interrupted", "stopped by SIGINT", 130), run
    assert one_error(cli(tmp_path, "stop", "last")) == "id=last: already ended (interrupted): nothing to stop"


def test_a_silent_scheduler_never_holds_the_listing(tmp_path, monkeypatch, capsys):
    """A ``squeue`` that never answers (a stand-in for a scheduler that hangs, first on PATH): the
    listing ends within its budget, the run's state not known, said so."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for command in ("squeue", "sacct", "scontrol"):
        (bin_dir / command).write_text("#!/bin/sh\nexec sleep 60\n")
        (bin_dir / command).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setattr(remote, "BUDGET_S", 1.0)
    make(tmp_path / "runs", "2026-12-01_10-00-00_s", submit_json={"format": 2, "backend": "slurm", "id": "77"})
    start = time.monotonic()
    assert runs_cli.main(["--json", "--root", str(tmp_path / "runs")]) == 0
    assert time.monotonic() - start < 5.0
    (run,) = json.loads(capsys.readouterr().out)
    assert (
        run["status"] == "submitted" and "slurm: no answer within the listing's 1 s: state not known" in run["problems"]
    )
