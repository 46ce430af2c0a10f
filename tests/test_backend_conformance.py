"""One suite every back end runs (``backends.REGISTRY``: the local launch, SLURM, Ray, Kubernetes), the
way TorchX's scheduler API tests hold every scheduler to one contract (launcher/backends/base.py):

- ``dryrun`` is pure: it writes nothing (the run root and the working directory are the same before
  and after, file by file) and starts no process (this process has the same children);
- a secret value is masked in every request: ``Request.shown``, every file ``submit`` would write,
  the payload rendered;
- a run submitted through the real path, read back from its run directory as ``runs`` reads it, goes
  ``describe`` (running) -> ``logs`` (its lines) -> ``cancel`` -> ``describe`` (stopped), on the real
  engine: a real local launch; the one-host SLURM cluster (tests/slurm_cluster.py); the local Ray
  cluster (tests/ray_cluster.py). Kubernetes: no cluster can run here, so a recording ``kubectl``
  (first on PATH) answers as an API server would, and the manifest is loaded into the published API
  models (tests/k8s_models.py) -- a real cluster is not tested.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from launcher import backends
from launcher.backends.base import Handle, Launch, State, Typed
from launcher.errors import UserError
from launcher.runs import read, remote
from require import unavailable
from supervise_util import env as launch_env
from supervise_util import wait_for

REPO = Path(__file__).resolve().parents[1]
WORKER = str(REPO / "tests" / "workers" / "runs_worker.py")
SECRET = "s3cr3t-conformance-value"
NAMES = sorted(backends.REGISTRY)
# each back end's own keys for a small job (the shape is launcher.nnodes/nproc_per_node everywhere)
OWN = {
    "none": ["launcher=skrl_jax"],  # JAX ranks: no torch to import, a quick start
    "slurm": ["submit=slurm", "slurm.time=5", "slurm.cpus_per_task=1"],
    "ray": ["submit=ray"],
    "k8s": ["submit=k8s", "k8s.image=ghcr.io/lab/isaac:2.3"],
    # the dry run connects to nothing; JAX ranks (the test rank imports no JAX): no torch to import, a quick
    # start, and no address of torch's own to choose on hosts that share a hostname
    "ssh": ["submit=ssh", "ssh.hosts=[10.0.0.1,10.0.0.2]", "launcher=skrl_jax"],
}
# a dry run names where it would submit (nothing is asked there)
DRY = {"ray": ["ray.address=http://127.0.0.1:8265"]}
COMMON = ["device=cpu", f"script={WORKER}", "launcher.nproc_per_node=1"]
BLOCKING = ("none", "ssh")  # a launch that runs here until it ends (the others return once submitted)
IN_NAMESPACE: dict[str, list[str]] = {}  # the argv prefix that runs a back end's launcher where it can reach its hosts


def registered(name: str):
    """The back end registered for ``name`` (an import failure fails the test)."""
    return backends.get(name)


def handle_side(name: str):
    """What ``runs`` asks (describe/logs/cancel): its one dispatch, runs/remote.backend."""
    return remote.backend(name)


def snapshot(*roots: Path) -> dict[str, tuple]:
    """Every path under ``roots`` with its size and modification time."""
    found = {}
    for root in roots:
        for path in sorted(root.rglob("*")):
            info = path.lstat()
            found[str(path)] = (info.st_size, info.st_mtime_ns, info.st_mode)
    return found


def children() -> set[int]:
    """The pids whose parent is this process."""
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2 :].split()[1]) == os.getpid():
                found.add(int(entry))
    return found


def make_launch(name: str, tmp_path: Path, monkeypatch, secret: bool = True) -> Launch:
    """A finished launch as the session builds it: the secret hidden from Hydra, revealed in the typed
    config (config.grammar.hide / Vault.reveal), the run directory named but not created."""
    from launcher.config import compose, grammar

    monkeypatch.chdir(tmp_path)
    typed = [*OWN[name], *DRY.get(name, []), *COMMON, f"run_root={tmp_path / 'runs'}"]
    typed += [f"+worker_env.HF_TOKEN={SECRET}"] if secret else []
    masked, vault = grammar.hide(typed, False)
    cfg = vault.reveal(compose.compose(masked))
    return Launch(cfg, Typed(overrides=tuple(masked)), tmp_path / "runs" / "conformance", vault)


@pytest.mark.parametrize("name", NAMES)
def test_dryrun_writes_nothing_and_starts_nothing(name, tmp_path, monkeypatch):
    backend = registered(name)
    # Kubernetes refuses a secret value outright (it would be written into the manifest; below)
    launch = make_launch(name, tmp_path, monkeypatch, secret=name != "k8s")
    (tmp_path / "runs").mkdir(exist_ok=True)
    before, pids = snapshot(tmp_path), children()
    request = backend.dryrun(launch)
    assert snapshot(tmp_path) == before, "dryrun wrote into the run root or the working directory"
    assert children() == pids, "dryrun started a process"
    assert request.backend == name and request.run_dir == str(launch.run_dir)
    assert not launch.run_dir.exists()
    assert request.shown.strip(), "a dry run prints what a real launch runs"


# -- the same claim seen by the kernel: every process started and every file written, anywhere --------
START, END = "/@@dryrun-start@@", "/@@dryrun-end@@"  # opened (and not found) around the dry run alone
TRACED = ",".join(
    (
        "execve,execveat,fork,vfork,clone,clone3",  # a process started
        "open,openat,openat2,creat,truncate,mkdir,mkdirat,rename,renameat,renameat2",  # a file written
        "unlink,unlinkat,rmdir,link,linkat,symlink,symlinkat,chmod,fchmodat,chown,fchownat,utimensat,mknod,mknodat",
        "connect",  # a dry run connects to nothing (a Ray address, an SSH host)
    )
)
WRITING = ("O_WRONLY", "O_RDWR", "O_CREAT", "O_TRUNC", "O_APPEND")
NOT_FILES = ("/dev/null",)  # where writing stores nothing
DRYRUN_CHILD = """
import os, sys
sys.path.insert(0, sys.argv[3])
from _pytest.monkeypatch import MonkeyPatch
import test_backend_conformance as suite
name, tmp = sys.argv[1], __import__("pathlib").Path(sys.argv[2])
launch = suite.make_launch(name, tmp, MonkeyPatch(), secret=name != "k8s")
backend = suite.registered(name)
if sys.argv[4]:  # the test of the check: a dryrun that runs a shell line first
    import subprocess
    dryrun = backend.dryrun
    def sabotaged(launch, line=sys.argv[4]):
        subprocess.run(["sh", "-c", line], timeout=30)
        return dryrun(launch)
    backend.dryrun = sabotaged
for marker in (suite.START, suite.END):  # the backend imported, the launch composed: only dryrun between
    try:
        os.close(os.open(marker, os.O_RDONLY))
    except FileNotFoundError:
        pass
    if marker == suite.START:
        request = backend.dryrun(launch)
print(len(request.shown))
"""


def traced_calls(trace: str) -> list[str]:
    """The traced calls between the two markers, each ``<pid> <call>`` (strace -f's lines)."""
    lines = trace.splitlines()
    start = next(i for i, line in enumerate(lines) if START in line)
    end = next(i for i, line in enumerate(lines) if END in line)
    return lines[start + 1 : end]


def offences(calls: list[str]) -> list[str]:
    """Every call among ``calls`` that starts a process, writes a file (anywhere: outside the test's
    folder too) or connects somewhere; a failed attempt counts (a dry run does not even try)."""
    found = []
    for line in calls:
        call = line.split(None, 1)[1] if " " in line else line
        if call.startswith(("+++", "---", "<...")):  # a signal, an exit, a resumed call already seen
            continue
        name = call.split("(", 1)[0]
        if name in ("clone", "clone3") and "CLONE_THREAD" in call:
            continue  # a thread (a dry run may use them), not a process
        if name in ("open", "openat", "openat2", "creat"):
            path = call.split('"')[1] if '"' in call else ""
            if name != "creat" and not any(flag in call for flag in WRITING):
                continue
            if path in NOT_FILES:
                continue
        if name == "connect" and "AF_UNIX" in call:
            continue  # a local socket (the name service), no host
        found.append(call)
    return found


@pytest.mark.timeout(180)
@pytest.mark.parametrize("name", NAMES)
def test_dryrun_writes_no_file_and_starts_no_process_anywhere_as_the_kernel_sees_it(name, tmp_path):
    """``dryrun`` in a process of its own under ``strace -f``: between two markers (the launch composed,
    the back end imported) no process is started (no execve, no fork), no file is opened for writing,
    created, renamed, removed, linked or changed anywhere on the machine (not only under the test's
    folder: before, a dry run running ``sh -c 'echo > FILE'`` elsewhere passed), nothing is connected to."""
    assert offences(_trace_dryrun(name, tmp_path)) == [], f"{name}'s dry run started, wrote or connected"


def _trace_dryrun(name: str, tmp_path: Path, sabotage: str = "") -> list[str]:
    """The calls of ``name``'s dryrun, traced in a process of its own (``sabotage``: a shell line the
    dryrun is made to run first, for the test of the check)."""
    strace = shutil.which("strace")
    if strace is None:
        unavailable("STRACE", "strace is not installed: the dry run's system calls cannot be seen")
    out = tmp_path / "trace"
    env = {**launch_env(), "PYTHONDONTWRITEBYTECODE": "1"}
    argv = [strace, "-f", "-qq", "-s", "256", "-o", str(out), "-e", f"trace={TRACED}"]
    argv += [sys.executable, "-c", DRYRUN_CHILD, name, str(tmp_path), str(REPO / "tests"), sabotage]
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=150)
    assert done.returncode == 0, done.stderr[-3000:]
    return traced_calls(out.read_text())


@pytest.mark.timeout(180)
def test_the_trace_check_sees_a_sabotaged_dry_run(tmp_path):
    """The check itself, on a real sabotage: the local back end's dryrun made to run
    ``sh -c 'echo > FILE'`` with FILE outside the test's folder (what passed the snapshot check)."""
    victim = Path(tempfile.mkdtemp(prefix="sabotage-", dir="/tmp")) / "x"
    try:
        calls = _trace_dryrun("none", tmp_path, f"echo > {victim}")
    finally:
        shutil.rmtree(victim.parent, ignore_errors=True)
    seen = offences(calls)
    assert any(call.startswith("clone(") or call.startswith("clone3(") or call.startswith("vfork(") for call in seen)
    assert any(call.startswith("execve(") and f'["sh", "-c", "echo > {victim}"]' in call for call in seen), seen
    assert any(call.startswith(f'openat(AT_FDCWD, "{victim}", O_WRONLY|O_CREAT|O_TRUNC') for call in seen), seen


@pytest.mark.parametrize("name", NAMES)
def test_every_request_masks_the_secret(name, tmp_path, monkeypatch):
    backend = registered(name)
    if name == "k8s":  # a manifest would carry the value: refused, the value masked in the refusal
        with pytest.raises(UserError) as refused:
            backend.dryrun(make_launch(name, tmp_path, monkeypatch))
        assert "a secret value cannot travel in a Kubernetes manifest" in str(refused.value)
        assert SECRET not in str(refused.value)
        return
    request = backend.dryrun(make_launch(name, tmp_path, monkeypatch))
    assert SECRET not in request.shown
    for file_name, text in request.files.items():
        assert SECRET not in text, f"{file_name} holds the secret value"
    rendered = json.dumps(request.payload, default=repr) + repr(request.payload)
    assert SECRET not in rendered, "the payload, rendered, holds the secret value"


# -- submit -> describe -> logs -> cancel on the real engine ----------------------------------------------
def _submit(name: str, tmp_path: Path, env: dict, extra: list[str]) -> tuple[subprocess.Popen, Path]:
    """The real path: the launcher's command line. Local: the launch itself (it runs until cancelled);
    remote: the submission (it returns once submitted)."""
    ready = tmp_path / "ready"
    argv = [sys.executable, "-m", "launcher", *OWN[name], *COMMON, *extra, f"run_root={tmp_path / 'runs'}"]
    if name == "ssh":  # the launcher runs inside a namespace that reaches the sshd hosts (this process cannot)
        argv = [*IN_NAMESPACE[name], *argv]
        argv = [a for a in argv if a != "ssh.hosts=[10.0.0.1,10.0.0.2]"]  # the engine's hosts instead
    argv += ["run_name=conf", "--", "--sleep", "--ready", str(ready), "--lines", "2"]
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        dirs = list((tmp_path / "runs").glob("*_conf")) if (tmp_path / "runs").is_dir() else []
        if dirs and (name not in BLOCKING or ready.exists()) and (name in BLOCKING or proc.poll() is not None):
            return proc, dirs[0]
        if name in BLOCKING and proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    out, err = proc.communicate()
    raise AssertionError(f"{name}: not submitted/started in time: {out[-2000:]} {err[-2000:]}")


def _read_back(run_dir: Path, root: Path) -> Handle:
    """The handle as ``runs`` reads it back from the run directory alone."""
    info = read.read(run_dir, root=root)
    found = remote.handle(info)
    assert found is not None, info.problems
    return found


FAKE_KUBECTL = """#!/bin/sh
# a recording kubectl (no cluster can run here): every call's argv into kubectl_calls, answers as an
# API server would for one TrainJob that runs until deleted
here="$(dirname "$0")"
echo "$*" >> "$here/kubectl_calls"
case "$*" in
config*) echo fake-context ;;
create*) echo "trainjob.trainer.kubeflow.org/$(sed -n 's/^  name: //p' "$3") created" ;;
get*) if [ -e "$here/deleted" ]; then echo 'Error from server (NotFound): trainjobs "x" not found' >&2; exit 1; fi
      echo '{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",'
      echo ' "metadata": {"name": "x"}, "status": {"conditions": []}}' ;;
logs*) echo "rank 0 line 1"; echo "rank 0 line 2" ;;
delete*) touch "$here/deleted"; echo "trainjob.trainer.kubeflow.org \\"x\\" deleted" ;;
*) exit 1 ;;
esac
"""


@pytest.fixture
def engine(request, tmp_path, monkeypatch):
    """(extra overrides, environment) for the back end named by the test's ``name``: its real engine."""
    name = request.node.callspec.params["name"]
    env = {**launch_env(), "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    env.pop("RAY_ADDRESS", None)
    if name == "ssh":  # two real sshd hosts in network namespaces (tests/sshd.py), each with its own name
        from sshd import SshHosts

        lab = SshHosts(2, tmp_path / "ssh", client=True, hostnames=True)
        request.addfinalizer(lambda: lab.__exit__(None, None, None))
        lab.__enter__()
        # the launcher in the client's namespace (it reaches the hosts) under this machine's own name:
        # runs (this process) stops it as a launch of this host's
        monkeypatch.setitem(IN_NAMESPACE, name, ["ip", "netns", "exec", lab.client.ns])
        return lab.overrides, env
    if name == "slurm":
        request.getfixturevalue("slurm_cluster")
    if name == "ray":
        cluster = request.getfixturevalue("ray_cluster")
        return [f"ray.address={cluster.address}", f"ray.python={sys.executable}"], env
    if name == "k8s":
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        (bin_dir / "kubectl").write_text(FAKE_KUBECTL)
        (bin_dir / "kubectl").chmod(0o755)
        env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', os.environ['PATH'])}"
        monkeypatch.setenv("PATH", env["PATH"])  # describe/logs/cancel run kubectl from this process
    return [], env


@pytest.mark.parametrize("name", NAMES)
def test_submit_describe_logs_cancel(name, engine, tmp_path):
    backend = handle_side(name)
    extra, env = engine
    proc, run_dir = _submit(name, tmp_path, env, extra)
    try:
        handle = _read_back(run_dir, tmp_path / "runs")
        assert handle.backend == name
        status = wait_for(
            lambda: (s := backend.describe(handle)).state in (State.RUNNING, State.PENDING) and s, 120, "running"
        )
        if name != "k8s":  # the recording kubectl's job never leaves its first state
            status = wait_for(lambda: (s := backend.describe(handle)).state is State.RUNNING and s, 120, "running")
        assert not status.state.ended
        lines = wait_for(
            lambda: [line for line in itertools.islice(backend.logs(handle, 0, False), 1000) if "rank 0 line" in line],
            120,
            "rank 0's lines in its log",
            context=lambda: "the back end's log:\n" + "".join(itertools.islice(backend.logs(handle, None, False), 200)),
        )
        assert "rank 0 line 1" in lines[0]
        backend.cancel(handle)
        if name == "k8s":  # deleted: the recording kubectl then answers NotFound, as an API server does
            assert backend.describe(handle).state in (State.STOPPED, State.UNKNOWN)
        else:
            ended = wait_for(lambda: (s := backend.describe(handle)).state.ended and s, 120, "ended after cancel")
            assert ended.state is State.STOPPED, ended
    finally:
        if proc.poll() is None and name in BLOCKING:
            proc.wait(timeout=60)
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    if name in BLOCKING:  # the launcher stopped as Ctrl+C stops it
        assert proc.returncode == 130, proc.returncode
        status = json.loads((run_dir / "status.json").read_text())
        assert status["reason"].startswith("stopped"), status
    if name == "k8s":
        calls = (tmp_path / "bin" / "kubectl_calls").read_text()
        assert "delete" in calls and handle.id in calls, calls
