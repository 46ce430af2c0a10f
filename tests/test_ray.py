"""submit=ray: the job specification and its errors without a cluster; then launches as Ray jobs on
a REAL two-node Ray cluster on this host (tests/ray_cluster.py): training, a failing rank, two
nodes, a sweep, a stop. Nothing is mocked: the jobs run train_multigpu, torchrun and the ranks."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ALLREDUCE, clean_env
from ray_cluster import job_info, job_logs, stop_jobs
from supervise_util import SPAWNER, survivors, wait_for_files

PY = f"ray.python={sys.executable}"
ORDER = "TRAIN_MULTIGPU_RAY_ORDER"
HANG = Path(__file__).resolve().parent / "workers" / "hang.py"  # the cluster runs this checkout's interpreter


def _run(tmp_path: Path, *args: str, address: str | None = None, timeout: float = 240) -> subprocess.CompletedProcess:
    env = clean_env(**({"RAY_ADDRESS": address} if address else {}))
    if address is None:
        env.pop("RAY_ADDRESS", None)
    argv = [sys.executable, "-m", "launcher", f"run_root={tmp_path / 'runs'}", *args]
    return subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout)


def _job_ids(text: str) -> list[str]:
    return re.findall(r"submitted Ray job (\S+)", text)


def _one_error(result: subprocess.CompletedProcess, text: str) -> None:
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith("train_multigpu: error: " + text), result.stderr


# -- without a cluster --------------------------------------------------------------------------


def test_dry_run_prints_the_job_and_submits_nothing(tmp_path):
    result = _run(
        tmp_path,
        "submit=ray",
        "launcher.nproc_per_node=2",
        "ray.num_cpus_per_rank=2",
        "+ray.runtime_env.working_dir=.",
        "+ray.runtime_env.env_vars.WANDB_API_KEY=wandb-s3cr3t",
        "+worker_env.HF_TOKEN=hf-s3cr3t",
        "seed=3",
        "dry_run=true",
        "--",
        "--lr",
        "${oops}",
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    spec = json.loads(out[out.index("{") : out.index("\n}\n") + 2])
    assert spec["entrypoint"] == "python -m launcher.ray_submit.job"
    assert spec["entrypoint_num_cpus"] == 4 and spec["entrypoint_num_gpus"] == 0
    env_vars = spec["runtime_env"]["env_vars"]
    # secret values travel apart from the runtime_env (Ray logs it on the head): their names only
    assert spec["secrets"] == {"WANDB_API_KEY": "***", "HF_TOKEN": "***"}
    assert "WANDB_API_KEY" not in env_vars and "HF_TOKEN" not in env_vars
    assert env_vars["TRAIN_MULTIGPU_RAY_SECRETS"] == "***"  # where they wait, and their one-time pad
    assert spec["runtime_env"]["working_dir"] == "."
    assert env_vars["RAY_JOB_STOP_WAIT_TIME_S"] == "45"  # the launcher's grace period (30 s) + 15
    # the resolved config the job launches from: the user's text stays text (escaped, never interpolated)
    assert "seed: 3" in out and "- \\${oops}" in out
    assert "s3cr3t" not in out + result.stderr
    assert not (tmp_path / "runs").exists()


def test_the_cluster_launches_what_this_machine_would(tmp_path):
    """The job's side (python -m launcher.ray_submit.job), given what the job carries, plans the same
    command as a launch here: the carried config and typed order compose to the same argv."""
    args = ["--task=CartPole-v1", "seed=3", "--num_envs", "4", "presets=[debug]", "launcher.nproc_per_node=1"]
    script_args = ["--", "--lr", "${x}", "--max_iterations=9"]
    here = _run(tmp_path, *args, "dry_run=true", *script_args)
    assert here.returncode == 0, here.stderr
    dry = _run(tmp_path, "submit=ray", *args, "dry_run=true", *script_args)
    assert dry.returncode == 0, dry.stderr
    spec = json.loads(dry.stdout[dry.stdout.index("{") : dry.stdout.index("\n}\n") + 2])
    text = dry.stdout.split("the resolved config the job launches from):\n", 1)[1]
    env = clean_env(TRAIN_MULTIGPU_RAY_CONFIG=text, TRAIN_MULTIGPU_RAY_ORDER=spec["runtime_env"]["env_vars"][ORDER])
    there = subprocess.run(
        [sys.executable, "-m", "launcher.ray_submit.job", "dry_run=true"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert there.returncode == 0, there.stderr
    command = here.stdout.strip().splitlines()[-1]
    assert (
        "--max_iterations=5 --task=CartPole-v1 --seed=3 --num_envs=4 --lr '${x}' --max_iterations=9 --distributed"
        in command
    )
    assert there.stdout.strip().splitlines()[-1] == command


def test_dry_run_of_two_nodes_shows_the_placement_group(tmp_path):
    result = _run(tmp_path, "submit=ray", "launcher.nnodes=2", "launcher.nproc_per_node=2", "dry_run=true")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert '"strategy": "STRICT_SPREAD"' in out and out.count('"CPU": 2.0') == 2
    assert "topology: multinode" in out  # nnodes=2 on torchrun: launcher=multinode on every node


@pytest.mark.parametrize(
    "args, address, message",
    [
        (["launcher.nproc_per_node=2"], None, "ray.address=None: needs the Ray dashboard's address (or RAY_ADDRESS)"),
        (["launcher.nproc_per_node=auto"], "http://x:1", "launcher.nproc_per_node=auto: submit=ray reserves"),
        (
            ["launcher.nproc_per_node=1", "launcher=multinode", "launcher.nnodes=2", "launcher.rdzv_endpoint=h:1"],
            "http://x:1",
            "launcher.rdzv_endpoint=h:1: submit=ray chooses node 0's address and a free port on the cluster",
        ),
        (["launcher.nproc_per_node=1", "launcher.nnodes=1:2"], "http://x:1", "launcher.nnodes=1:2: submit=ray"),
        (["launcher.nproc_per_node=1", "ray.num_cpus_per_rank=-1"], "http://x:1", "ray.num_cpus_per_rank=-1.0"),
    ],
)
def test_mistakes_are_one_line(tmp_path, args, address, message):
    _one_error(_run(tmp_path, "submit=ray", *args, address=address), message)
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["ray.num_gpus_per_rank=-1"], "ray.num_gpus_per_rank=-1.0: a number >= 0"),
        (["ray.python=' '"], "ray.python= : the interpreter that runs train_multigpu on the cluster"),
        (["+ray.runtime_env.env_vars=[1]"], "ray.runtime_env.env_vars=[1]: a map of variable names to strings"),
        (
            ["+ray.runtime_env.env_vars.TRAIN_MULTIGPU_RAY_CONFIG=x"],
            "ray.runtime_env.env_vars.TRAIN_MULTIGPU_RAY_CONFIG=***: set by train_multigpu itself",
        ),
        (
            ["+ray.runtime_env.env_vars.TRAIN_MULTIGPU_RAY_SECRETS=x"],
            "ray.runtime_env.env_vars.TRAIN_MULTIGPU_RAY_SECRETS=***: set by train_multigpu itself",
        ),
        (["launcher=slurm"], "launcher=slurm: reads its topology from a SLURM allocation; a Ray job runs on a Ray"),
        (
            ["launcher=multinode", "launcher.nnodes=2", "launcher.node_rank=1"],
            "launcher.node_rank=1: submit=ray gives every node its rank",
        ),
    ],
)
def test_ray_keys_are_checked(overrides, message):
    from launcher.config.compose import compose
    from launcher.errors import UserError
    from launcher.ray_submit import spec

    cfg = compose(["submit=ray", "launcher.nproc_per_node=1", *overrides])
    with pytest.raises(UserError) as err:
        spec.check(cfg)
    assert str(err.value).startswith(message), str(err.value)


@pytest.mark.timeout(120)
def test_the_job_entry_runs_the_launch_through_the_cli_and_passes_a_stop_on(tmp_path):
    """ray_submit/job.py (the job's entrypoint) runs the node's launch as a child, the command-line entry
    (python -m launcher) in a session of its own, and imports no session (tests/test_layout.py). A
    SIGTERM for the job (ray job stop) reaches the launch once: it stops its ranks, records the stop
    and its code is the entry's; nothing survives. (Real processes, no cluster: a one-node job.)"""
    from supervise_util import finish, status

    pids = tmp_path / "pids"
    pids.mkdir()
    args = ["device=cpu", "launcher.nproc_per_node=2", f"script={SPAWNER}", "--", "--pid_dir", str(pids)]
    dry = _run(tmp_path, "submit=ray", "dry_run=true", *args)
    assert dry.returncode == 0, dry.stderr
    spec = json.loads(dry.stdout[dry.stdout.index("{") : dry.stdout.index("\n}\n") + 2])
    text = dry.stdout.split("the resolved config the job launches from):\n", 1)[1]
    env = clean_env(TRAIN_MULTIGPU_RAY_CONFIG=text, TRAIN_MULTIGPU_RAY_ORDER=spec["runtime_env"]["env_vars"][ORDER])
    entry = subprocess.Popen(
        [sys.executable, "-m", "launcher.ray_submit.job"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for_files(pids, 6)  # two ranks, two helpers each (one in a session of its own)
        launchers = [p for p in _children(entry.pid) if _cmdline(p)[1:3] == [b"-m", b"launcher"]]
        assert len(launchers) == 1, [_cmdline(p) for p in _children(entry.pid)]
        assert os.getsid(launchers[0]) == launchers[0]  # its own session: a group signal reaches it once
        entry.send_signal(signal.SIGTERM)
        code, out, err = finish(entry, timeout=60)
    finally:
        if entry.poll() is None:
            entry.kill()
    assert code == 128 + signal.SIGTERM, out + err
    assert survivors(pids, settle=5.0) == []
    assert status(tmp_path)["reason"] == "stopped by SIGTERM"


def _children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _cmdline(pid: int) -> list[bytes]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")


def test_job_module_outside_a_job_is_one_line(tmp_path):
    env = clean_env()
    env.pop("TRAIN_MULTIGPU_RAY_CONFIG", None)
    result = subprocess.run(
        [sys.executable, "-m", "launcher.ray_submit.job"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    _one_error(result, "TRAIN_MULTIGPU_RAY_CONFIG is not set: this module runs inside a Ray job (submit=ray)")


def test_unreachable_address_is_one_line(tmp_path):
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = _run(tmp_path, "submit=ray", "launcher.nproc_per_node=1", f"ray.address=http://127.0.0.1:{port}")
    _one_error(result, f"ray.address=http://127.0.0.1:{port}: no Ray Job Submission API answers there")
    assert not (tmp_path / "runs").exists()


class SilentListener:
    """A real TCP listener on loopback that accepts every connection and never answers (a hung
    dashboard, a port forward to nothing, the wrong service)."""

    def __enter__(self):
        import socket
        import threading

        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.held: list = []
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed
                return
            self.held.append(conn)

    def __exit__(self, *exc):
        self.sock.close()
        for conn in self.held:
            conn.close()


def test_silent_listener_is_one_line_within_15_s(tmp_path):
    """Something at the address accepts and never answers: every request has a deadline, so the
    documented one line (exit 2) comes within 15 s instead of never."""
    with SilentListener() as silent:
        started = time.monotonic()
        result = _run(
            tmp_path,
            "submit=ray",
            "launcher.nproc_per_node=1",
            f"ray.address=http://127.0.0.1:{silent.port}",
            timeout=60,
        )
        took = time.monotonic() - started
        assert silent.held, "the launcher never connected"
    _one_error(
        result, f"ray.address=http://127.0.0.1:{silent.port}: no Ray Job Submission API answers there (no answer within"
    )
    assert took < 15, took
    assert not (tmp_path / "runs").exists()


def test_back_end_asks_a_silent_address_within_its_bounds(tmp_path):
    """``runs`` asks the back end from a handle alone: a dashboard that accepts and never answers makes
    describe say unknown (or the recorded end), and logs/cancel fail with one line, each within the
    request deadline (3 s per request, one address here), never hanging."""
    from launcher.backends import get
    from launcher.backends.base import Handle, State

    backend = get("ray")
    with SilentListener() as silent:
        address = f"http://127.0.0.1:{silent.port}"
        handle = Handle("ray", "raysubmit_x", str(tmp_path), {"address": address})
        started = time.monotonic()
        assert backend.describe(handle).state is State.UNKNOWN
        recorded = Handle("ray", "raysubmit_x", str(tmp_path), {"address": address, "state": "STOPPED"})
        assert backend.describe(recorded).state is State.STOPPED
        with pytest.raises(OSError, match="raysubmit_x: no answer from http://127.0.0.1"):
            list(backend.logs(handle))
        with pytest.raises(OSError, match="raysubmit_x: no answer"):
            backend.cancel(handle)
        took = time.monotonic() - started
        assert silent.held, "the back end never connected"
    assert took < 4 * 3.0 + 3, took


def test_old_ray_job_record_still_reads(tmp_path):
    """Runs submitted before submit.json (format 2) recorded ``ray_job.json``: its handle reads back,
    the masked password dropped from the address; submit.json, when there, is the record."""
    from launcher.backends.base import Handle
    from launcher.ray_submit.backend import read_record

    old = {"job_id": "raysubmit_old", "address": "http://me:***@head:8265", "state": "STOPPED", "job": {}}
    (tmp_path / "ray_job.json").write_text(json.dumps(old))
    assert read_record(tmp_path) == Handle(
        "ray", "raysubmit_old", str(tmp_path), {"address": "http://head:8265", "state": "STOPPED"}
    )
    new = Handle("ray", "raysubmit_new", str(tmp_path), {"address": "http://head:8265"})
    (tmp_path / "submit.json").write_text(json.dumps(new.as_record()))
    assert read_record(tmp_path) == new
    (tmp_path / "submit.json").write_text(json.dumps({"job_id": "12345"}))  # SLURM's format 1: not Ray's
    assert read_record(tmp_path) is None


@pytest.mark.parametrize("given", ["127.0.0.1:41999", "ray://127.0.0.1:10001", "ftp://127.0.0.1:8265", "http://"])
def test_address_that_is_not_the_dashboards_url_is_one_fast_line(tmp_path, given):
    """Ray's client takes anything but http(s):// for a GCS or Ray Client address and resolves it itself:
    tens of seconds, its own warnings, and 127.0.0.1 replaced with this machine's address."""
    started = time.monotonic()
    result = _run(tmp_path, "submit=ray", "launcher.nproc_per_node=1", address=given, timeout=60)
    took = time.monotonic() - started
    _one_error(result, f"RAY_ADDRESS={given}: the Ray dashboard's HTTP address, http://HOST:PORT or https://HOST:PORT")
    assert took < 15, took  # Ray itself took 32-42 s
    assert not (tmp_path / "runs").exists()


def test_ray_address_is_the_address_used(tmp_path):
    """ray.address wins over $RAY_ADDRESS (Ray's client would take the variable instead)."""
    with SilentListener() as silent:
        result = _run(
            tmp_path,
            "submit=ray",
            "launcher.nproc_per_node=1",
            f"ray.address=http://127.0.0.1:{_closed_port()}",
            address=f"http://127.0.0.1:{silent.port}",
            timeout=60,
        )
        assert not silent.held
    _one_error(result, "ray.address=http://127.0.0.1:")


@pytest.mark.parametrize("form", ["http://me:{pw}@127.0.0.1:{port}", "me:{pw}@127.0.0.1:{port}"])
@pytest.mark.parametrize("where", ["ray.address", "RAY_ADDRESS"])
def test_credentials_in_the_address_are_masked(tmp_path, form, where):
    password = "pw-s3cr3t@x"
    given = form.format(pw=password, port=_closed_port())
    args = ["submit=ray", "launcher.nproc_per_node=1"]
    if where == "ray.address":
        result = _run(tmp_path, *args, f"ray.address='{given}'")
    else:
        result = _run(tmp_path, *args, address=given)
    shown = given.replace(password, "***")
    _one_error(result, f"{where}={shown}: ")
    assert "s3cr3t" not in result.stdout + result.stderr


def test_password_in_the_address_is_not_in_the_job(tmp_path):
    """The carried config travels in the runtime_env (Ray logs it): its ray.address is masked too."""
    result = _run(
        tmp_path,
        "submit=ray",
        "launcher.nproc_per_node=1",
        "ray.address='http://me:pw-s3cr3t@head:8265'",
        "dry_run=true",
    )
    assert result.returncode == 0, result.stderr
    assert "address: http://me:***@head:8265" in result.stdout
    assert "s3cr3t" not in result.stdout + result.stderr


def _closed_port() -> int:
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_missing_extra_is_one_line(tmp_path):
    code = (
        "import sys; sys.modules['ray'] = None; from launcher.cli import main;"
        "sys.exit(main(['submit=ray', 'launcher.nproc_per_node=1', 'ray.address=http://127.0.0.1:1']))"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=clean_env(), capture_output=True, text=True)
    _one_error(result, "submit=ray: Ray's Job Submission API is not installed")
    assert "pip install 'train_multigpu[ray]'" in result.stderr


# -- on the real cluster ------------------------------------------------------------------------

# Four launches that each wait for their job(s) (ray.follow=true), started at once and shared by the
# tests below: Ray runs them side by side (the test cluster declares 4 CPUs per node), so the module
# takes about as long as the slowest one, the training.
LAUNCHES = {
    # one iteration: the job trains, checkpoints, evaluates and ends as the preset's five would
    "training": ["submit=ray", "presets=[debug]", "max_iterations=1", "launcher.nproc_per_node=1", PY]
    + ["ray.follow=true"],
    "failing": ["submit=ray", "launcher.nproc_per_node=2", f"script={ALLREDUCE}", PY, "ray.follow=true"]
    + ["--", "--exit_code_on_rank", "1:7"],
    "two_nodes": ["submit=ray", "launcher.nnodes=2", "launcher.nproc_per_node=1", "launcher.local_nodes=true"]
    + [f"script={ALLREDUCE}", "log_all_ranks=true", PY, "ray.follow=true"],
    "sweep": ["-m", "submit=ray", "seed=1,2", "launcher.nproc_per_node=1", f"script={ALLREDUCE}", PY]
    + ["ray.follow=true"],
    # rank 1 stops beating before its third all-reduce: the hang watchdog ends the launch (124)
    "hang": ["submit=ray", "launcher.nproc_per_node=2", f"script={HANG}", "launcher.hang_timeout=3", PY]
    + ["ray.follow=true", "--", "--mode", "torch", "--pid_dir", "{tmp}"],
}


# the launches share one deadline, then get Ctrl+C (a following train_multigpu stops its jobs) and a
# while to stop; the tests that use them allow for that and for the cluster's start (first test)
LAUNCHES_TIMEOUT_S, STOP_WAIT_S, CLUSTER_START_S = 280, 60, 90
launches_timeout = pytest.mark.timeout(LAUNCHES_TIMEOUT_S + STOP_WAIT_S + CLUSTER_START_S)


@pytest.fixture(scope="module")
def launched(ray_cluster, tmp_path_factory) -> dict[str, tuple[subprocess.CompletedProcess, Path]]:
    env = clean_env(RAY_ADDRESS=ray_cluster.address)
    started = {}
    results = {}
    try:
        for name, args in LAUNCHES.items():
            tmp = tmp_path_factory.mktemp(name)
            argv = [sys.executable, "-m", "launcher", f"run_root={tmp / 'runs'}"]
            argv += [arg.replace("{tmp}", str(tmp)) for arg in args]
            out, err = open(tmp / "stdout", "w"), open(tmp / "stderr", "w")  # files: no pipe fills up
            started[name] = (tmp, subprocess.Popen(argv, cwd=tmp, env=env, stdout=out, stderr=err))
        deadline = time.monotonic() + LAUNCHES_TIMEOUT_S
        for _, proc in started.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        late = [proc for _, proc in started.values() if proc.poll() is None]
        for proc in late:
            proc.send_signal(signal.SIGINT)  # a following train_multigpu stops its job(s)
        stop_by = time.monotonic() + STOP_WAIT_S
        for proc in late:
            try:
                proc.wait(timeout=max(0.1, stop_by - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for name, (tmp, proc) in started.items():
            out, err = (tmp / "stdout").read_text(), (tmp / "stderr").read_text()
            results[name] = (subprocess.CompletedProcess(proc.args, proc.returncode, out, err), tmp)
        yield results
    finally:
        for _, proc in started.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        # whatever a launch submitted and did not stop (killed above, or stopped too late) stops here
        submitted = [_job_ids((tmp / "stdout").read_text()) for tmp, _ in started.values()]
        stop_jobs(ray_cluster, [job_id for ids in submitted for job_id in ids])


@launches_timeout
def test_default_training_succeeds(ray_cluster, launched):
    result, tmp_path = launched["training"]
    assert result.returncode == 0, result.stdout + result.stderr
    (job_id,) = _job_ids(result.stdout)
    assert f"ray job stop {job_id} --address {ray_cluster.address}" in result.stdout
    assert str(job_info(ray_cluster, job_id).status).endswith("SUCCEEDED")
    assert "evaluation: mean_return=" in job_logs(ray_cluster, job_id)
    assert "evaluation: mean_return=" in result.stdout  # followed: rank 0's output streamed
    run_dir = next((tmp_path / "runs").iterdir())
    # the handle (submit.json format 2; ray_job.json before it): the address without any password, and
    # the end the following train_multigpu saw
    handle = json.loads((run_dir / "submit.json").read_text())
    assert handle == {
        "format": 2,
        "backend": "ray",
        "id": job_id,
        "run_dir": str(run_dir),
        "address": ray_cluster.address,
        "state": "SUCCEEDED",
        "exit_code": 0,
    }, handle
    assert json.loads((run_dir / "status.json").read_text())["exit_code"] == 0
    # the back end, from the handle alone (what `runs` has): Ray's state, the launch's exit code, the log
    backend, read = _back_end(run_dir)
    status = backend.describe(read)
    assert (status.state.value, status.exit_code) == ("succeeded", 0), status
    text = "".join(backend.logs(read))
    assert "evaluation: mean_return=" in text
    assert "".join(backend.logs(read, follow=True)) == text  # an ended job: its whole log, then the end
    # what was typed, for `train_multigpu runs rerun` (which submits it again)
    assert "submit=ray" in json.loads((run_dir / "composition.json").read_text())["overrides"]


def _back_end(run_dir: Path):
    from launcher.backends import get
    from launcher.ray_submit.backend import read_record

    handle = read_record(run_dir)
    assert handle is not None and handle.backend == "ray", handle
    return get(handle.backend), handle


def _failed_job(ray_cluster, launched, name: str, code: int):
    """The one Ray job of launch ``name``, which exited ``code``: FAILED on the cluster with that code."""
    result, tmp_path = launched[name]
    assert result.returncode == code, result.stdout + result.stderr
    (job_id,) = _job_ids(result.stdout)
    info = job_info(ray_cluster, job_id)
    assert str(info.status).endswith("FAILED"), info
    # Ray's own record of the code, unless its job manager's monitor wrote FAILED over it, without the
    # code, having found the job's supervisor gone (Ray's race: the command's code above is the launcher's)
    lost = info.driver_exit_code is None and "SUPERVISOR" in str(info.error_type)
    assert info.driver_exit_code == code or lost, info
    return job_id, tmp_path


@launches_timeout
def test_failing_rank_fails_the_job_with_its_code(ray_cluster, launched):
    job_id, _ = _failed_job(ray_cluster, launched, "failing", 7)
    logs = job_logs(ray_cluster, job_id)
    assert "rank 1 (local rank 1): exit code 7" in logs and "exit code 7 (rank failed)" in logs


@pytest.mark.parametrize(
    ("recorded", "log", "code"),
    [
        (7, "", 7),
        (
            None,
            "[train_multigpu] FAILED: node 0, rank 1\n[train_multigpu] exit code 7 (rank failed); run directory: /r\n",
            7,
        ),
        (None, "a rank printed [train_multigpu] exit code 9 (mid-line, not the launcher's)\n", 1),
        (None, "", 1),
    ],
)
def test_a_failed_jobs_code_missing_from_ray_is_the_launchers_last_line(recorded, log, code):
    """Ray can record a FAILED job with no code (its monitor writes FAILED over the supervisor's record):
    the launcher's own last line in the job's log says it; with no such line, 1."""
    from types import SimpleNamespace

    from launcher.ray_submit.submit import exit_code

    info = SimpleNamespace(status="FAILED", driver_exit_code=recorded)
    assert exit_code(info, lambda: log) == code


@launches_timeout
def test_two_nodes_meet_across_two_raylets(ray_cluster, launched):
    result, tmp_path = launched["two_nodes"]
    assert result.returncode == 0, result.stdout + result.stderr
    (job_id,) = _job_ids(result.stdout)
    logs = job_logs(ray_cluster, job_id)
    assert "rank 0/2 local_rank 0 all_reduce sum=3 expected=3" in logs, logs
    assert "rank 1/2 local_rank 0 all_reduce sum=3 expected=3" in logs, logs
    # one bundle per raylet: node 0's address is one of the two nodes'
    assert re.search(r"2 nodes reserved; node 0 at 127\.0\.0\.[23], port \d+", logs), logs
    run_dir = next((tmp_path / "runs").iterdir())
    for node in (0, 1):
        assert json.loads((run_dir / f"node{node}" / "status.json").read_text())["exit_code"] == 0
    # launcher.nnodes=2 is the job's shape (no Ray spelling of its own): one job, one handle, its state
    backend, handle = _back_end(run_dir)
    assert handle.id == job_id and backend.describe(handle).state.value == "succeeded"
    # the placement group Ray made for it (its strategy is in the spec, see the dry-run test): two
    # bundles, placed on the two raylets
    (group,) = _placement_groups(ray_cluster, job_id)
    nodes = [bundle.get("node_id") for bundle in group.bundles]
    assert len(nodes) == 2 and None not in nodes and len(set(nodes)) == 2, group


def _placement_groups(ray_cluster, job_id: str) -> list:
    """The placement groups the job's driver made, as Ray's state API lists them (removed ones too)."""
    from ray.job_submission import JobSubmissionClient
    from ray.util.state import list_placement_groups

    driver = JobSubmissionClient(ray_cluster.address).get_job_info(job_id).job_id
    groups = list_placement_groups(address=ray_cluster.address, detail=True, raise_on_missing_output=False)
    return [group for group in groups if group.creator_job_id == driver]


@launches_timeout
def test_sweep_submits_one_job_per_point(launched):
    result, _ = launched["sweep"]
    assert result.returncode == 0, result.stdout + result.stderr
    ids = _job_ids(result.stdout)
    assert len(set(ids)) == 2
    assert "Ray: 2 of 2 job(s) submitted" in result.stdout
    for number, (job_id, seed) in enumerate(zip(ids, (1, 2))):
        assert re.search(rf"^  {number}\s+{job_id}\s+SUCCEEDED\s+0\s+seed={seed}\s", result.stdout, re.M), result.stdout


@launches_timeout
def test_hung_launch_fails_the_job_with_the_watchdogs_code(ray_cluster, launched):
    job_id, tmp_path = _failed_job(ray_cluster, launched, "hang", 124)
    assert "exit code 124 (hang)" in job_logs(ray_cluster, job_id)
    assert json.loads((next((tmp_path / "runs").iterdir()) / "status.json").read_text())["reason"] == "hang"


def test_refused_job_is_one_line_and_leaves_no_directory(ray_cluster, tmp_path):
    result = _run(
        tmp_path,
        "submit=ray",
        "launcher.nproc_per_node=1",
        f"+ray.runtime_env.working_dir={tmp_path / 'missing'}",
        address=ray_cluster.address,
    )
    _one_error(result, "submit=ray: Ray refused the job: ")
    assert not (tmp_path / "runs").exists()  # the run root it made is gone too


def test_stop_leaves_no_survivors(ray_cluster, tmp_path):
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    env = clean_env(RAY_ADDRESS=ray_cluster.address)
    argv = [
        sys.executable,
        "-m",
        "launcher",
        f"run_root={tmp_path / 'runs'}",
        "submit=ray",
        "launcher.nproc_per_node=2",
    ]
    # ranks that ignore SIGTERM: the launcher waits out its grace period (5 s) before SIGKILL, longer than
    # Ray's own 3 s before it SIGKILLs the entrypoint, unless the job's RAY_JOB_STOP_WAIT_TIME_S says more
    argv += [f"script={SPAWNER}", "launcher.grace_period=5", PY, "ray.follow=true", "--", "--pid_dir", str(pid_dir)]
    argv += ["--ignore_signals"]
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out = err = ""
    try:
        # two ranks, each with a helper in its own session and a re-parented one, all ignoring SIGTERM
        wait_for_files(pid_dir, 6, timeout=120)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            out, err = proc.communicate()
        stop_jobs(ray_cluster, _job_ids(out))  # no job outlives the test
    assert proc.returncode == 130, f"exit code {proc.returncode}\n{out}{err}"
    (job_id,) = _job_ids(out)
    assert str(job_info(ray_cluster, job_id).status).endswith("STOPPED")
    assert survivors(pid_dir) == []
    status = json.loads((next((tmp_path / "runs").iterdir()) / "status.json").read_text())
    # the launcher itself finished its stop and closed its record (not "launcher killed" by its watchdog)
    assert status["exit_code"] == 143 and status["reason"] == "stopped by SIGTERM", status


def _runs_json(tmp_path: Path) -> list[dict]:
    argv = [sys.executable, "-m", "launcher", "runs", "--json", "--root", str(tmp_path / "runs")]
    env = clean_env()
    env.pop("RAY_ADDRESS", None)  # the record's address is the one asked
    listed = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    return json.loads(listed.stdout)


def test_job_stopped_before_its_launcher_started_shows_its_state(ray_cluster, tmp_path):
    """A job stopped before its launcher started (here: its interpreter takes 60 s to start) has no
    launcher record: ``runs`` shows Ray's state (running, then interrupted once stopped), never ``?``.
    The back end, from the run's handle alone, says the same and stops it."""
    slow = tmp_path / "slow_python"
    slow.write_text(f'#!/bin/sh\nsleep 60\nexec {sys.executable} "$@"\n')
    slow.chmod(0o755)
    result = _run(
        tmp_path, "submit=ray", "launcher.nproc_per_node=1", f"ray.python={slow}", address=ray_cluster.address
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (job_id,) = _job_ids(result.stdout)
    backend, handle = _back_end(next((tmp_path / "runs").iterdir()))
    try:
        deadline = time.monotonic() + 60
        while not str(job_info(ray_cluster, job_id).status).endswith("RUNNING") and time.monotonic() < deadline:
            time.sleep(0.5)
        (run,) = _runs_json(tmp_path)
        assert run["status"] == "running" and run["ray"]["job_id"] == job_id, run
        assert backend.describe(handle).state.value == "running"
        backend.cancel(handle)  # the back end's stop, from the handle alone (`ray job stop`)
        deadline = time.monotonic() + 60
        while backend.describe(handle).state.value != "stopped" and time.monotonic() < deadline:
            time.sleep(0.5)
    except BaseException:
        stop_jobs(ray_cluster, [job_id])
        raise
    assert str(job_info(ray_cluster, job_id).status).endswith("STOPPED")
    (run,) = _runs_json(tmp_path)
    assert run["status"] == "interrupted" and run["ray"]["state"] == "STOPPED", run
    assert not list((tmp_path / "runs").rglob("status.json"))  # no launcher ever wrote its record
