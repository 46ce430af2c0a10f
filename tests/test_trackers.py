"""Experiment trackers set up by the launcher (issue 27, deliverable 1; launcher/trackers/,
docs/trackers.md), with the real libraries: W&B's offline runs read back from disk, and a real
``mlflow server`` on loopback (SQLite store), started once for this file and stopped after.

One real sweep carries most claims (few real launches: the suite's time): two points of the
bundled trainer (one rank each) with ``tracker=[wandb,mlflow]`` and ``restart.max=1``, its fault
injection (TRAIN_MULTIGPU_EXAMPLE_CRASH, as tests/test_recovery.py uses it) swept: a crash once after
iteration 1 (a restarted launch that succeeds), a crash at start on every attempt (a failed launch).
Two points are a sweep (one group, one parent) and each a launch of two attempts (one run across
them); a third point that never crashes would add a launch of one attempt, which proves nothing more."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import clean_env
from ports import free_port
from require import unavailable
from supervise_util import launch

pytestmark = pytest.mark.timeout(900)

KEY = "tmgkey" + "5f3a9c1e7b2d4068" * 2 + "ab"  # a W&B-shaped API key (40 characters), fake
SERVER_START_S = 300  # mlflow server imports for a minute and more on a loaded 2-core machine
# mlflow server's job execution (a huey runner: eight more processes that import mlflow, then poll;
# GenAI jobs, which no test here runs) off: 5 s less CPU to start, 12 s less in its first 30 s up
SERVER_ENV = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}


# -- the MLflow server -----------------------------------------------------------------------------
@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory):
    """``mlflow server`` on 127.0.0.1 with a SQLite store and served artifacts; its URL."""
    try:
        import mlflow  # noqa: F401
    except ImportError:
        unavailable("MLFLOW", "mlflow is not installed (pip install 'train_multigpu[trackers]')")
    where = tmp_path_factory.mktemp("mlflow_server")
    port = free_port()
    program = Path(sys.executable).with_name("mlflow")
    argv = [str(program), "server", "--backend-store-uri", f"sqlite:///{where / 'mlflow.db'}"]
    argv += ["--artifacts-destination", str(where / "artifacts"), "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--workers", "1"]
    log = open(where / "server.log", "wb")  # noqa: SIM115 - open while the server runs
    env = {**os.environ, **SERVER_ENV}
    server = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=where, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + SERVER_START_S
    try:
        while True:
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                tail = (where / "server.log").read_text(errors="replace")[-2000:]
                unavailable("MLFLOW", f"mlflow server did not start on {url}: {tail}")
            time.sleep(0.5)
        yield SimpleNamespace(url=url, root=where)
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(3)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()
        log.close()


# -- W&B's offline runs, read back -------------------------------------------------------------------
def wandb_records(path: Path):
    """The records of a W&B transaction log (``run-<id>.wandb``): LevelDB's log format (32 KiB blocks,
    a 7-byte header per chunk: checksum, length, type) after W&B's 7-byte file header."""
    from wandb.proto import wandb_internal_pb2

    data, pos, block, pending = path.read_bytes(), 7, 32768, b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        length, kind = int.from_bytes(data[pos + 4 : pos + 6], "little"), data[pos + 6]
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind in (1, 4):  # FULL, LAST
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending + chunk if kind == 4 else chunk)
            pending = b""
            yield record
        elif kind == 2:  # FIRST
            pending = chunk
        elif kind == 3:  # MIDDLE
            pending += chunk


def offline_runs(run_dir: Path) -> list[tuple[str, object]]:
    """Each ``wandb/offline-run-<stamp>-<id>`` of a run directory: its id, and its run record (id,
    group, project, name) where the transaction log holds one: an attempt whose rank died at once
    (os._exit) may take W&B's writer down with its process group before it wrote the record."""
    found = []
    for folder in sorted((run_dir / "wandb").glob("offline-run-*")):
        logs = sorted(folder.glob("run-*.wandb"))
        runs = (r.run for log in logs for r in wandb_records(log) if r.WhichOneof("record_type") == "run")
        found.append((folder.name.rsplit("-", 1)[1], next(runs, None)))
    return found


def files_holding(root: Path, text: str) -> list[str]:
    needle = text.encode()
    return [str(p) for p in root.rglob("*") if p.is_file() and not p.is_symlink() and needle in p.read_bytes()]


# -- one sweep, both trackers, a restart and a failure -----------------------------------------------
def test_a_restarting_sweep_is_one_group_and_one_parent_with_one_run_per_launch(tmp_path, mlflow_server):
    from mlflow.tracking import MlflowClient

    closed = free_port()  # W&B's server here: nothing listens (auto mode: the key is given, the probe fails)
    crashes = "1:0,0:0:always"  # once after iteration 1, at start on every attempt
    r = launch(
        tmp_path,
        "-m",
        f"+worker_env.TRAIN_MULTIGPU_EXAMPLE_CRASH={crashes}",
        "tracker=[wandb,mlflow]",
        f"tracker.mlflow.tracking_uri={mlflow_server.url}",
        "tracker.mlflow.experiment=issue27",
        f"+worker_env.WANDB_API_KEY={KEY}",
        f"+worker_env.WANDB_BASE_URL=http://127.0.0.1:{closed}",
        "presets=debug",
        "max_iterations=1",
        "launcher.nproc_per_node=1",
        "device=cpu",
        "restart.max=1",
        "restart.classes=[default,exit-code]",
        timeout=600,
    )
    out = r.stdout + r.stderr
    assert r.returncode != 0, out[-4000:]  # the second point failed
    assert "2 job(s): 1 succeeded, 1 failed" in r.stdout, out[-4000:]
    # offline, said once for the sweep, never a wait on W&B's absent server
    said = f"W&B: http://127.0.0.1:{closed} does not answer"
    assert out.count(said) == 1, out[-4000:]
    (sweep,) = (tmp_path / "runs" / "multirun").iterdir()
    jobs = [sweep / str(n) for n in range(2)]
    statuses = [json.loads((job / "status.json").read_text()) for job in jobs]
    identities = [json.loads((job / "trackers.json").read_text()) for job in jobs]
    assert [s["exit_code"] == 0 for s in statuses] == [True, False]
    assert [len(s.get("attempts", [])) for s in statuses] == [2, 2]

    # W&B: one group for the sweep, one run id per launch across its restart
    group = f"sweep_{sweep.name}"
    ids = []
    for job, ident, attempts in zip(jobs, identities, (2, 2)):
        runs = offline_runs(job)
        # one offline run per attempt, each with the launch's id
        assert len(runs) == attempts, (job, runs)
        assert {run_id for run_id, _ in runs} == {ident["wandb"]["id"]}
        records = [record for _, record in runs if record is not None]
        assert {(r.run_id, r.run_group, r.project) for r in records} <= {
            (ident["wandb"]["id"], group, "train_multigpu")
        }
        if job != jobs[1]:  # its last attempt ended as runs end (wandb.finish): its record is there
            assert records, job
        ids.append(ident["wandb"]["id"])
        env = json.loads((job / "env.json").read_text())
        assert (env["WANDB_RUN_ID"], env["WANDB_RESUME"], env["WANDB_MODE"]) == (
            ident["wandb"]["id"],
            "allow",
            "offline",
        )
        assert env["WANDB_DIR"] == str(job) and env["WANDB_API_KEY"] == "***"
    assert len(set(ids)) == 2

    # MLflow: one parent, a child per point, each the launch's one run across its restart
    client = MlflowClient(mlflow_server.url)
    experiment = client.get_experiment_by_name("issue27")
    runs = client.search_runs([experiment.experiment_id])
    (parent,) = [run for run in runs if "mlflow.parentRunId" not in run.data.tags]
    children = {run.data.tags["train_multigpu.run_dir"]: run for run in runs if run is not parent}
    assert sorted(children) == sorted(str(job) for job in jobs)
    assert {run.data.tags["mlflow.parentRunId"] for run in children.values()} == {parent.info.run_id}
    assert parent.info.status == "FAILED"  # a child failed
    for job, status, ident in zip(jobs, statuses, identities):
        child = children[str(job)]
        assert child.info.run_id == ident["mlflow"]["run_id"] == ident["mlflow"]["run_id"]
        assert child.data.metrics["attempts"] == len(status["attempts"])
        assert child.data.tags["train_multigpu.reason"] == status["reason"]
        assert child.data.tags["train_multigpu.backend"] == "local"
        assert child.data.params["worker_env.WANDB_API_KEY"] == "***"  # the composed config, masked
        assert child.data.params["restart.max"] == "1"
        artifacts = {a.path for a in client.list_artifacts(child.info.run_id)}
        assert {"status.json", "config.yaml"} <= artifacts
    restarted, failed = (children[str(job)] for job in jobs)
    assert (restarted.info.status, failed.info.status) == ("FINISHED", "FAILED")
    assert "learning_curve.png" in {a.path for a in client.list_artifacts(restarted.info.run_id)}
    assert statuses[1]["reason"] and failed.data.tags["train_multigpu.outcome"] == statuses[1]["outcome"]
    # the trainer logged its curve into the launcher's run (rank 0, MLFLOW_RUN_ID)
    assert client.get_metric_history(restarted.info.run_id, "Reward/mean_return")

    # the key: in no file (records, W&B's offline runs, the trainer's, the server's store) and no command line
    assert files_holding(tmp_path, KEY) == [] and files_holding(mlflow_server.root, KEY) == []
    assert KEY not in out

    # runs show names both runs
    shown = launch(tmp_path, "runs", "--root", str(tmp_path / "runs"), "show", f"multirun/{sweep.name}/0").stdout
    assert f"wandb:    run {identities[0]['wandb']['id']}, project train_multigpu, group {group}" in shown
    mlflow_run = identities[0]["mlflow"]["run_id"]
    assert f"mlflow:   run {mlflow_run}, experiment issue27 at {mlflow_server.url}, parent run" in shown
    assert f"{mlflow_server.url}/#/experiments/{experiment.experiment_id}/runs/{mlflow_run}" in shown


def test_only_global_rank_0_logs_to_wandb_and_a_launch_is_its_own_group(tmp_path):
    """A script that calls wandb.init() on every rank (two ranks here) makes one run: rank 1's W&B is
    disabled by the rank wrapper; no key given: offline, said once."""
    script = tmp_path / "own.py"
    script.write_text(
        "import os, wandb\n"
        "run = wandb.init()\n"
        "run.log({'x': 1.0})\n"
        "print('rank', os.environ['RANK'], os.environ['WANDB_MODE'], flush=True)\n"
        "run.finish()\n"
    )
    env = {k: v for k, v in clean_env().items() if not k.startswith("WANDB_")}
    r = launch(
        tmp_path,
        f"script={script}",
        "tracker=wandb",
        "launcher.nproc_per_node=2",
        "log_all_ranks=true",
        HOME=str(tmp_path),
        **{k: v for k, v in env.items() if k != "HOME"},
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert r.stdout.count("W&B: no WANDB_API_KEY given") == 1
    (run_dir,) = (tmp_path / "runs").iterdir()
    ident = json.loads((run_dir / "trackers.json").read_text())["wandb"]
    assert "rank 0 offline" in r.stdout and "rank 1 disabled" in r.stdout
    ((run_id, record),) = offline_runs(run_dir)  # one run, rank 0's
    assert run_id == ident["id"] and (record.run_group, record.display_name) == (run_dir.name, run_dir.name)


def test_wandbs_probe_is_bounded_where_the_resolver_does_not_answer(monkeypatch):
    """tracker.wandb.mode=auto's probe of W&B's server (probe.tcp_answers) on a node whose resolver
    never answers (no network): the probe's bound, not the resolver's (a stand-in resolver that
    sleeps: one that never answers cannot be had here without a network namespace)."""
    import socket

    from launcher import probe

    def resolver(*args, **kwargs):
        time.sleep(20)
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    started = time.monotonic()
    assert probe.tcp_answers("https://api.wandb.ai", 1.0) == "no answer from the resolver within 1 s"
    assert time.monotonic() - started < 5


def test_an_unreachable_mlflow_server_is_one_line_before_anything_starts(tmp_path):
    url = f"http://127.0.0.1:{free_port()}"
    started = time.monotonic()
    r = launch(tmp_path, "tracker=mlflow", f"tracker.mlflow.tracking_uri={url}", "presets=debug", timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.startswith(
        f"train_multigpu: error: tracker.mlflow.tracking_uri={url}: the MLflow tracking server does not answer: "
        f"GET {url}/health: Connection refused (start it (mlflow server --host H --port P), fix the address, "
        "or drop tracker=mlflow)"
    ), r.stderr
    assert len(r.stderr.splitlines()) == 1 and r.stdout == ""
    assert not (tmp_path / "runs").exists()  # nothing written, nothing started
    assert time.monotonic() - started < 60


def test_trackers_are_shown_by_the_dry_run_and_imported_only_when_chosen(tmp_path):
    code = (
        "import sys; from launcher.cli import main; rc = main(sys.argv[1:]);"
        "print('HEAVY', sorted(m for m in sys.modules if m.split('.')[0] in ('mlflow', 'wandb'))); sys.exit(rc)"
    )
    argv = [sys.executable, "-c", code, "dry_run=true", "tracker=wandb", "tracker.wandb.tags=[a,b]"]
    env = {k: v for k, v in clean_env().items() if not k.startswith("WANDB_")}
    r = subprocess.run(argv, cwd=tmp_path, env={**env, "HOME": str(tmp_path)}, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "HEAVY []" in r.stdout
    for line in (
        "export WANDB_PROJECT=train_multigpu",
        "export WANDB_TAGS=a,b",
        "export WANDB_MODE=offline",
        "export WANDB_RESUME=allow",
        "export TRAIN_MULTIGPU_TRACKER_RANKS=0",
        "# W&B: no WANDB_API_KEY given (worker_env, profile.env, the environment or ~/.netrc): offline mode; "
        "sync later with `wandb sync <run dir>/wandb/offline-run-*`",
        "# trackers: wandb; global rank 0 logs (W&B off on the others); a real launch adds WANDB_RUN_ID, "
        "WANDB_RUN_GROUP, WANDB_NAME, WANDB_DIR (trackers.json)",
    ):
        assert line in r.stdout.splitlines(), line


@pytest.mark.parametrize(
    ("library", "expected"),
    [("rsl_rl", "--logger wandb --log_project_name lab"), ("skrl", "++agent.agent.experiment.wandb=true")],
)
def test_isaaclab_profile_gets_tracker_wandb_as_its_scripts_flags(run_cli, isaaclab, library, expected):
    env = clean_env(ISAACLAB_PATH=str(isaaclab), CUDA_VISIBLE_DEVICES="0,1")
    r = run_cli("tracker=wandb", "tracker.wandb.project=lab", f"rl_library={library}", "dry_run=true", env=env)
    assert r.returncode == 0, r.stderr
    command = r.stdout.splitlines()[-1]
    assert f"train.py --rl_library {library} {expected} " in command
    assert "export WANDB_PROJECT=lab" in r.stdout


def test_the_run_id_is_the_launchs_across_new_processes(tmp_path):
    """A SLURM requeue and ``runs resume`` are new launcher processes with the same trainer directory:
    the identity made the first time is read back (trackers.json), the id the same."""
    from launcher.config.schema import TrainConfig
    from launcher.trackers.launch import Trackers

    cfg = TrainConfig()
    cfg.tracker.wandb.enabled = True
    trainer, first_record, second_record = (tmp_path / name for name in ("job", "job/restart1", "job/restart2"))
    for path in (first_record, second_record):
        path.mkdir(parents=True)
    launch_ = SimpleNamespace(job=None)
    first = Trackers(environ={}).begin(cfg, launch_, first_record, str(trainer))
    second = Trackers(environ={}).begin(cfg, launch_, second_record, str(trainer))
    assert first["WANDB_RUN_ID"] == second["WANDB_RUN_ID"] and first["WANDB_RUN_GROUP"] == "job"
    assert json.loads((second_record / "trackers.json").read_text())["wandb"]["id"] == first["WANDB_RUN_ID"]


def test_a_new_launcher_process_reopens_the_launchs_mlflow_run(tmp_path, mlflow_server):
    """A SLURM requeue or ``runs resume`` (a new launcher, the same trainer directory) continues the
    MLflow run of trackers.json, RUNNING again, and ends it with its own outcome."""
    from mlflow.tracking import MlflowClient

    from launcher.config.schema import TrainConfig
    from launcher.trackers.launch import Trackers

    cfg = TrainConfig()
    cfg.tracker.mlflow.enabled, cfg.tracker.mlflow.tracking_uri = True, mlflow_server.url
    cfg.tracker.mlflow.experiment = "reopened"
    trainer = tmp_path / "job"
    records = [trainer / "restart1", trainer / "restart2"]
    for path in records:
        path.mkdir(parents=True)
    launch_ = SimpleNamespace(job=None, typed=SimpleNamespace(command=("tracker=mlflow",), submitted_by=None))
    first = Trackers(environ={})
    run_id = first.begin(cfg, launch_, records[0], str(trainer))["MLFLOW_RUN_ID"]
    first.end(cfg, records[0], 1, "node failure", "failed", 1)
    client = MlflowClient(mlflow_server.url)
    assert client.get_run(run_id).info.status == "FAILED"
    second = Trackers(environ={})
    assert second.begin(cfg, launch_, records[1], str(trainer))["MLFLOW_RUN_ID"] == run_id
    assert client.get_run(run_id).info.status == "RUNNING"
    second.end(cfg, records[1], 0, "success", "succeeded", 1)
    assert client.get_run(run_id).info.status == "FINISHED"
    assert len(client.search_runs([client.get_experiment_by_name("reopened").experiment_id])) == 1


def test_help_names_the_tracker_group_and_its_keys(run_cli):
    text = run_cli("--help").stdout
    assert "tracker: mlflow, wandb" in text  # Hydra's list of configuration groups
    for key in (
        "tracker=wandb",
        "tracker.wandb.project",
        "tracker.wandb.mode=auto|online|offline",
        "tracker.wandb.all_ranks=true",
        "tracker.mlflow.tracking_uri",
        "tracker.mlflow.experiment",
    ):
        assert key in text, key


# -- the back end a node launcher runs under ---------------------------------------------------------
ALLREDUCE = Path(__file__).resolve().parents[1] / "examples" / "allreduce.py"


def _backend_tag(store: Path) -> str:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{store}")
    (run,) = client.search_runs([client.get_experiment_by_name("backends").experiment_id])
    return run.data.tags["train_multigpu.backend"]


@pytest.mark.parametrize("backend", ["ssh", "ray"])
def test_a_node_launcher_tags_its_mlflow_run_with_the_back_end_that_started_it(tmp_path, backend):
    """submit=ssh's and submit=ray's node launchers run ``submit=none`` (the local launch): their MLflow
    run is tagged with the back end that started them, not ``local`` (docs/trackers.md). Each runs for
    real as its back end starts it: the ssh channel's variable and first line on stdin; the Ray job's
    entrypoint with the config a ``submit=ray`` dry run says the job carries (no cluster: one node)."""
    pytest.importorskip("mlflow")
    from launcher.names import SSH_CHANNEL_VAR
    from launcher.run import leash

    store = tmp_path / "mlflow.db"
    args = ["device=cpu", "launcher.nproc_per_node=1", f"script={ALLREDUCE}", "tracker=mlflow"]
    args += [f"tracker.mlflow.tracking_uri=sqlite:///{store}", "tracker.mlflow.experiment=backends"]
    if backend == "ssh":
        argv, env, stdin = [*args, f"run_root={tmp_path / 'runs'}"], {SSH_CHANNEL_VAR: "1"}, leash.hello({}, 60)
    else:
        dry = launch(tmp_path, "submit=ray", "dry_run=true", *args, timeout=300)
        assert dry.returncode == 0, dry.stderr
        spec = json.loads(dry.stdout[dry.stdout.index("{") : dry.stdout.index("\n}\n") + 2])
        text = dry.stdout.split("the resolved config the job launches from):\n", 1)[1]
        order = spec["runtime_env"]["env_vars"]["TRAIN_MULTIGPU_RAY_ORDER"]
        argv, env, stdin = [], {"TRAIN_MULTIGPU_RAY_CONFIG": text, "TRAIN_MULTIGPU_RAY_ORDER": order}, None
    module = "launcher" if backend == "ssh" else "launcher.ray_submit.job"
    out = tmp_path / "console.txt"
    with open(out, "wb") as console:
        proc = subprocess.Popen(
            [sys.executable, "-m", module, *argv],
            cwd=tmp_path,
            env=clean_env(**env),
            stdin=subprocess.PIPE,
            stdout=console,
            stderr=subprocess.STDOUT,
        )
        if stdin:  # the channel stays open while the launch runs (its end would stop it)
            proc.stdin.write(stdin)
            proc.stdin.flush()
        try:
            code = proc.wait(300)
        finally:
            proc.stdin.close()
            if proc.poll() is None:
                proc.kill()
    assert code == 0, out.read_text()
    assert _backend_tag(store) == backend


def _node(rank: int, trainer: Path):
    from launcher.config.schema import TrainConfig

    cfg = TrainConfig()
    cfg.launcher.nnodes, cfg.launcher.node_rank = 2, rank
    cfg.tracker.wandb.enabled = cfg.tracker.wandb.all_ranks = True
    record_dir = trainer / f"node{rank}"
    record_dir.mkdir(parents=True)
    return cfg, record_dir


def test_every_node_of_an_all_ranks_launch_logs_under_node_0s_id_whoever_starts_first(tmp_path):
    """tracker.wandb.all_ranks: node 1's ranks log as ``<id>-rank<R>``. A node 1 that began before node 0
    had written the shared directory's trackers.json made an id of its own (its ranks' runs apart from
    the launch's, and renamed again by a requeue, which reads node 0's). It waits for node 0's; node 0
    alone writes the shared file; each node's record gets its copy."""
    import threading

    from launcher.trackers.launch import Trackers

    trainer = tmp_path / "job"
    launch_ = SimpleNamespace(job=None)
    got: dict[int, dict] = {}
    first = threading.Thread(target=lambda: got.update({1: Trackers(environ={}).begin(*_begin(1, trainer, launch_))}))
    first.start()  # node 1 first: nothing to read yet
    time.sleep(1.0)
    got[0] = Trackers(environ={}).begin(*_begin(0, trainer, launch_))
    first.join(60)
    assert got[1]["WANDB_RUN_ID"] == got[0]["WANDB_RUN_ID"]
    shared = json.loads((trainer / "trackers.json").read_text())["wandb"]["id"]
    copies = [json.loads((trainer / f"node{r}" / "trackers.json").read_text())["wandb"]["id"] for r in (0, 1)]
    assert copies == [shared, shared] and shared == got[0]["WANDB_RUN_ID"]
    assert not list(trainer.rglob("*.tmp"))


def test_a_node_that_never_sees_node_0s_identity_says_so_after_the_bound(tmp_path, monkeypatch, capsys):
    from launcher.trackers import launch as trackers_launch

    monkeypatch.setattr(trackers_launch, "NODE0_WAIT_S", 0.5)
    trainer = tmp_path / "job"
    started = time.monotonic()
    env = trackers_launch.Trackers(environ={}).begin(*_begin(1, trainer, SimpleNamespace(job=None)))
    assert 0.5 <= time.monotonic() - started < 5 and len(env["WANDB_RUN_ID"]) == 12
    assert capsys.readouterr().err == (
        f"[train_multigpu] W&B: node 0's trackers.json did not appear in {trainer} within 0.5 s (not a directory "
        "every node shares?): this node's ranks log under an id of its own\n"
    )
    assert not (trainer / "trackers.json").exists()  # node 0's file: never written by another node


def _begin(rank: int, trainer: Path, launch_) -> tuple:
    cfg, record_dir = _node(rank, trainer)
    return cfg, launch_, record_dir, str(trainer)


def test_trackers_json_is_written_whole_by_writers_at_once_and_never_through_a_planted_name(tmp_path):
    """record.write_json's temporary name was ``trackers.json.tmp`` for every writer: two at once wrote
    into one file and one of them failed (its rename found nothing); a symlink a rank planted at that
    name in the directory it trains in was written through. Each write now has a name of its own."""
    import threading

    from launcher.trackers import identity

    outside = tmp_path / "outside.txt"
    outside.write_text("keep\n")
    (tmp_path / "trackers.json.tmp").symlink_to(outside)
    identity.write(tmp_path, {"wandb": {"id": "planted"}})
    assert outside.read_text() == "keep\n"
    assert json.loads((tmp_path / "trackers.json").read_text()) == {"wandb": {"id": "planted"}}
    from launcher import record

    failures: list[BaseException] = []

    def writer(name: str) -> None:
        for n in range(300):
            try:
                record.write_json(tmp_path / "trackers.json", {"wandb": {"id": f"{name}{n}", "pad": "x" * 4096}})
            except OSError as err:
                failures.append(err)

    threads = [threading.Thread(target=writer, args=(name,)) for name in "ab"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert json.loads((tmp_path / "trackers.json").read_text())["wandb"]["id"] in ("a299", "b299")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["outside.txt", "trackers.json", "trackers.json.tmp"]
