"""submit=k8s through its Backend (launcher/k8s/backend.py): the job's shape in one vocabulary
(``launcher.nnodes`` pods of ``launcher.nproc_per_node`` ranks; ``k8s.nodes`` an alias that must agree),
``dryrun`` / ``submit`` / ``describe`` / ``logs`` / ``cancel``.

There is no Kubernetes cluster here (none can exist on this machine), so ``kubectl`` is a recording
stand-in put first on PATH: it writes each argv it is given to a file and answers with what a real one
prints. Its answers to ``kubectl get -o json`` are canned: a job's manifest as train_multigpu renders it
plus a ``status`` in the shape of the published API models (kubeflow-trainer-api's TrainJobStatus,
kubeflow-training's KubeflowOrgV1JobStatus), each loaded strictly into those models
(tests/k8s_models.py) before it is served, so a field the operators do not write cannot slip in.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import time
from datetime import datetime

import pytest
import yaml

import k8s_models
from conftest import ROOT, clean_env, make_facts
from launcher import secrets
from launcher.backends import get
from launcher.backends.base import SUBMIT_RECORD, Handle, Launch, Refused, State, Typed
from launcher.config import grammar
from launcher.config.compose import compose
from launcher.errors import UserError
from launcher.k8s import backend as k8s_backend
from launcher.k8s import kubectl
from launcher.k8s.backend import K8sBackend

NOW = datetime(2026, 12, 1, 10, 15, 0)
IMAGE = "k8s.image=ghcr.io/lab/isaac:2.3"


def launch(tmp_path, *argv: str, job: int | None = None) -> Launch:
    line = grammar.parse(["submit=k8s", IMAGE, *argv])
    cfg = compose(line.overrides, line.script_args)
    typed = Typed(overrides=tuple(line.overrides), script_args=tuple(line.script_args))
    return Launch(cfg, typed, tmp_path / "run", secrets.Vault(), job)


def backend() -> K8sBackend:
    return K8sBackend(make_facts(cpus=4), NOW)


def spec_of(manifest: dict) -> tuple[int, int | None]:
    """(pods, ranks per pod) as the manifest asks for them."""
    if manifest["kind"] == "TrainJob":
        trainer = manifest["spec"]["trainer"]
        return trainer["numNodes"], trainer.get("numProcPerNode")
    specs = manifest["spec"]["pytorchReplicaSpecs"]
    nproc = manifest["spec"].get("nprocPerNode")
    return specs["Master"]["replicas"] + specs.get("Worker", {"replicas": 0})["replicas"], nproc and int(nproc)


# -- one vocabulary: launcher.nnodes, launcher.nproc_per_node -------------------------------------


@pytest.mark.parametrize("kind", ["TrainJob", "PyTorchJob"])
@pytest.mark.parametrize(
    "argv, shape",
    [
        (("launcher.nnodes=2",), (2, None)),  # was refused: "the pod's PET_NNODES is 1"
        (("launcher.nnodes=2", "launcher.nproc_per_node=3"), (2, 3)),
        (("k8s.nodes=3",), (3, None)),  # the old spelling alone
        (("k8s.nodes=2", "launcher.nnodes=2"), (2, None)),  # both, agreeing
        (("launcher=multinode", "launcher.nnodes=4", "launcher.nproc_per_node=2"), (4, 2)),
    ],
)
def test_launcher_nnodes_is_the_pod_count(tmp_path, kind, argv, shape):
    request = backend().dryrun(launch(tmp_path, f"k8s.kind={kind}", *argv))
    rendered = yaml.safe_load(request.files[f"{kind.lower()}.yaml"])
    k8s_models.load(rendered)
    assert spec_of(rendered) == shape
    command = rendered["spec"]["trainer"]["command"] if kind == "TrainJob" else None
    if command is not None and "launcher.nnodes=2" in argv:
        assert "launcher.nnodes=2" in command  # the pods check their PET_NNODES against it


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ("launcher.nnodes=2", "k8s.nodes=3"),
            "launcher.nnodes=2: k8s.nodes=3 says otherwise: k8s.nodes is the old spelling of launcher.nnodes, "
            "the job's node count (set one of them, or both to the same count)",
        ),
        (("launcher.nnodes=5001",), "launcher.nnodes=5001: a node count from 1 to 5000"),
        (("launcher.nnodes=two",), "launcher.nnodes=two: a node count from 1 to 5000"),
        (
            ("k8s.nodes=100000",),
            "k8s.nodes=100000: at most 5000 (one pod per node; Kubernetes supports 5000 nodes)",
        ),
    ],
)
def test_node_counts_that_disagree_or_are_too_many_are_one_error(tmp_path, argv, message):
    with pytest.raises(UserError) as err:
        backend().dryrun(launch(tmp_path, *argv))
    assert str(err.value) == message
    assert not (tmp_path / "run").exists()


def test_the_cli_makes_a_two_node_job_from_launcher_nnodes(run_cli, tmp_path, monkeypatch):
    result = run_cli("submit=k8s", IMAGE, "launcher.nnodes=2", "k8s.kind=PyTorchJob", "dry_run=true", "run_name=ppo")
    assert result.returncode == 0, result.stderr
    head, text = result.stdout.split("\n", 1)
    assert head.endswith("_ppo/pytorchjob.yaml (dry run: nothing written, nothing created)"), head
    rendered = yaml.safe_load(text)
    k8s_models.load(rendered)
    assert spec_of(rendered) == (2, None)
    kube = Kubectl(tmp_path.parent / f"{tmp_path.name}-kubectl", monkeypatch)
    result = run_cli("submit=k8s", IMAGE, "launcher.nnodes=2", "run_name=ppo", env=clean_env(PATH=os.environ["PATH"]))
    assert result.returncode == 0, result.stderr
    # the workstation's record is one directory (not node 0's: launcher.nnodes counts the pods)
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert run_dir.name.endswith("_ppo"), run_dir.name
    handle = Handle.from_record(json.loads((run_dir / SUBMIT_RECORD).read_text()), str(run_dir))
    assert handle.backend == "k8s" and handle.extra["manifest"] == str(run_dir / "trainjob.yaml")
    assert spec_of(yaml.safe_load((run_dir / "trainjob.yaml").read_text())) == (2, None)
    assert kube.argv()[-1][:2] == ["create", "-f"]
    result = run_cli("submit=k8s", IMAGE, "launcher.nnodes=2", "k8s.nodes=3", "dry_run=true")
    assert result.returncode == 2 and result.stderr.strip() == (
        "train_multigpu: error: launcher.nnodes=2: k8s.nodes=3 says otherwise: k8s.nodes is the old spelling of "
        "launcher.nnodes, the job's node count (set one of them, or both to the same count)"
    )


# -- dryrun and submit ----------------------------------------------------------------------------


def test_the_registry_gives_the_k8s_backend():
    assert isinstance(get("k8s"), K8sBackend) and get("k8s").name == "k8s"


def test_dryrun_is_the_shown_manifest_and_writes_nothing(tmp_path):
    request = backend().dryrun(launch(tmp_path, "k8s.namespace=rl", "launcher.nnodes=2"))
    manifest_text = request.files["trainjob.yaml"]
    assert request.shown == f"# {tmp_path}/run/trainjob.yaml (dry run: nothing written, nothing created)\n" + (
        manifest_text
    )
    assert request.payload.name == "train-multigpu-20261201-101500" and request.payload.namespace == "rl"
    assert "config.yaml" in request.files and list(tmp_path.iterdir()) == []


class Kubectl:
    """The recording stand-in: each call's argv, one JSON line each, in ``calls``; answers from
    ``answers`` (the first argument -> stdout, exit code), ``create`` echoing the created object."""

    def __init__(self, tmp_path, monkeypatch, answers: dict | None = None, sleep: float = 0):
        tmp_path.mkdir(exist_ok=True)
        self.bin = tmp_path / "bin"
        self.bin.mkdir()
        self.calls = tmp_path / "kubectl_calls"
        self.answers = tmp_path / "kubectl_answers.json"
        self.answers.write_text(json.dumps(answers or {}))
        script = f"""#!{sys.executable}
# stands in for kubectl talking to a cluster (none exists here): records its argv, answers as one does
import json, sys, time
time.sleep({sleep})
args = sys.argv[1:]
with open({str(self.calls)!r}, "a") as f:
    f.write(json.dumps(args) + "\\n")
answers = json.load(open({str(self.answers)!r}))
if args[:2] == ["config", "current-context"]:
    print("lab")
elif args[0] == "create":
    import yaml
    job = yaml.safe_load(open(args[2]))
    print(job["kind"].lower() + ".kubeflow.org/" + job["metadata"]["name"])
elif args[0] in answers:
    out, code = answers[args[0]]
    (sys.stdout if code == 0 else sys.stderr).write(out)
    sys.exit(code)
"""
        (self.bin / "kubectl").write_text(script)
        (self.bin / "kubectl").chmod(0o755)
        monkeypatch.setenv("PATH", f"{self.bin}{os.pathsep}{os.environ['PATH']}")

    def argv(self) -> list[list[str]]:
        return [json.loads(line) for line in self.calls.read_text().splitlines()] if self.calls.exists() else []


def test_submit_writes_the_manifest_creates_it_and_records_the_handle(tmp_path, monkeypatch, capsys):
    kube = Kubectl(tmp_path, monkeypatch)
    request = backend().dryrun(launch(tmp_path, "k8s.namespace=rl", "k8s.kind=PyTorchJob"))
    handle = backend().submit(request)
    run_dir = tmp_path / "run"
    path = run_dir / "pytorchjob.yaml"
    assert path.read_text() == request.files["pytorchjob.yaml"]
    assert kube.argv() == [["config", "current-context"], ["create", "-f", str(path), "-o", "name"]]
    record = json.loads((run_dir / SUBMIT_RECORD).read_text())
    assert record == handle.as_record() and record["format"] == 2 and record["backend"] == "k8s"
    assert Handle.from_record(record, str(run_dir)) == handle
    assert handle.extra == {
        "kind": "PyTorchJob",
        "namespace": "rl",
        "context": "lab",
        "manifest": str(path),
        "created": f"pytorchjob.kubeflow.org/{handle.id}",
    }
    assert f"[train_multigpu] created PyTorchJob {handle.id}" in capsys.readouterr().out
    assert backend().wait([handle]) == [0]


def test_submit_all_records_a_refusal_and_keeps_the_manifest(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    request = backend().dryrun(launch(tmp_path, "seed=1", job=0))
    (refused,) = backend().submit_all([request])
    assert isinstance(refused, Refused) and refused.error.startswith("submit=k8s: kubectl is not on PATH")
    assert (tmp_path / "run" / "trainjob.yaml").is_file() and not (tmp_path / "run" / SUBMIT_RECORD).exists()
    assert backend().wait([refused]) == [2]


# -- describe / logs / cancel: from the handle alone ------------------------------------------


def rendered_job(tmp_path, kind: str) -> tuple[str, dict]:
    request = backend().dryrun(launch(tmp_path, f"k8s.kind={kind}", "launcher.nnodes=2"))
    return request.payload.name, copy.deepcopy(request.payload.manifest)


STAMP = "2026-12-01T10:20:00Z"


def condition(kind: str, type_: str, status: str = "True", message: str = "") -> dict:
    if kind == "TrainJob":  # metav1.Condition: reason and lastTransitionTime required
        return {"type": type_, "status": status, "reason": type_, "message": message, "lastTransitionTime": STAMP}
    return {"type": type_, "status": status, "reason": type_, "message": message, "lastUpdateTime": STAMP}


STATUSES = {  # (kind, case) -> status as the operator writes it, the State expected
    ("TrainJob", "pending"): ({"jobsStatus": [{"name": "node", "active": 0, "ready": 0, "succeeded": 0,
                                               "failed": 0, "suspended": 0}]}, State.PENDING),
    ("TrainJob", "running"): ({"jobsStatus": [{"name": "node", "active": 2, "ready": 2, "succeeded": 0,
                                               "failed": 0, "suspended": 0}]}, State.RUNNING),
    ("TrainJob", "complete"): ({"conditions": [condition("TrainJob", "Complete")]}, State.SUCCEEDED),
    ("TrainJob", "failed"): ({"conditions": [condition("TrainJob", "Failed", message="node-1 OOMKilled")]},
                             State.FAILED),
    ("TrainJob", "suspended"): ({"conditions": [condition("TrainJob", "Suspended")]}, State.PENDING),
    ("PyTorchJob", "pending"): ({"conditions": [condition("PyTorchJob", "Created")]}, State.PENDING),
    ("PyTorchJob", "running"): (
        {"conditions": [condition("PyTorchJob", "Created"), condition("PyTorchJob", "Running")],
         "replicaStatuses": {"Master": {"active": 1}, "Worker": {"active": 1}}},
        State.RUNNING,
    ),
    ("PyTorchJob", "complete"): (
        {"conditions": [condition("PyTorchJob", "Running", "False"), condition("PyTorchJob", "Succeeded")]},
        State.SUCCEEDED,
    ),
    ("PyTorchJob", "failed"): ({"conditions": [condition("PyTorchJob", "Failed", message="Worker 0 exited 1")]},
                               State.FAILED),
}  # fmt: skip


@pytest.mark.parametrize("kind, case", sorted(STATUSES))
def test_describe_maps_the_operators_status(tmp_path, monkeypatch, kind, case):
    name, job = rendered_job(tmp_path, kind)
    status, expected = STATUSES[kind, case]
    job["status"] = status
    k8s_models.load(job)  # the canned answer has the API's shape
    kube = Kubectl(tmp_path, monkeypatch, {"get": [json.dumps(job), 0]})
    handle = Handle("k8s", name, str(tmp_path), {"kind": kind, "namespace": "rl", "context": "lab"})
    got = backend().describe(handle)
    assert got.state is expected, got
    resource = kubectl.RESOURCE[kind]
    assert kube.argv() == [["get", resource, name, "-n", "rl", "--context", "lab", "-o", "json"]]
    if case == "failed":
        assert "OOMKilled" in got.detail or "exited 1" in got.detail


def test_describe_without_an_answer_is_unknown_and_bounded(tmp_path, monkeypatch):
    """A silent API server must not hang ``runs``: kubectl that does not answer is UNKNOWN in time."""
    Kubectl(tmp_path, monkeypatch, sleep=30)
    monkeypatch.setattr(kubectl, "QUERY_TIMEOUT_S", 0.5)
    handle = Handle("k8s", "ppo", str(tmp_path), {"kind": "TrainJob"})
    begin = time.monotonic()
    got = backend().describe(handle)
    assert time.monotonic() - begin < 10
    assert got.state is State.UNKNOWN and got.detail == "kubectl get did not answer within 0.5 s"


def test_describe_of_a_deleted_job_is_unknown(tmp_path, monkeypatch):
    answer = 'Error from server (NotFound): trainjobs.trainer.kubeflow.org "ppo" not found\n'
    Kubectl(tmp_path, monkeypatch, {"get": [answer, 1]})
    got = backend().describe(Handle("k8s", "ppo", str(tmp_path), {"kind": "TrainJob"}))
    assert (got.state, got.detail) == (State.UNKNOWN, "TrainJob ppo not found (deleted, or another cluster)")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    got = backend().describe(Handle("k8s", "ppo", str(tmp_path), {"kind": "TrainJob"}))
    assert (got.state, got.detail) == (State.UNKNOWN, "kubectl is not on PATH")


@pytest.mark.parametrize(
    "kind, rank, selector",
    [
        ("TrainJob", None, "trainer.kubeflow.org/trainjob-name=ppo"),
        ("TrainJob", 1, "trainer.kubeflow.org/trainjob-name=ppo,jobset.sigs.k8s.io/job-index=1"),
        ("PyTorchJob", 0, "training.kubeflow.org/job-name=ppo,training.kubeflow.org/replica-type=master,"
                          "training.kubeflow.org/replica-index=0"),
        ("PyTorchJob", 3, "training.kubeflow.org/job-name=ppo,training.kubeflow.org/replica-type=worker,"
                          "training.kubeflow.org/replica-index=2"),
    ],
)  # fmt: skip
def test_logs_reads_the_pods_of_the_job_or_of_one_rank(tmp_path, monkeypatch, kind, rank, selector):
    kube = Kubectl(tmp_path, monkeypatch, {"logs": ["iteration 1\niteration 2\n", 0]})
    handle = Handle("k8s", "ppo", str(tmp_path), {"kind": kind, "namespace": "", "context": "lab"})
    assert list(backend().logs(handle, rank)) == ["iteration 1\n", "iteration 2\n"]
    args = ["logs", "-l", selector, "--context", "lab", "--tail=-1", "--max-log-requests=64"]
    assert kube.argv() == [args + (["--prefix"] if rank is None else [])]
    assert list(backend().logs(handle, rank, follow=True)) == ["iteration 1\n", "iteration 2\n"]
    assert kube.argv()[-1][-1] == "-f"


def test_logs_and_cancel_say_kubectls_error_in_one_line(tmp_path, monkeypatch):
    Kubectl(tmp_path, monkeypatch, {"logs": ["error: no pods found\n", 1], "delete": ["error: forbidden\n", 1]})
    handle = Handle("k8s", "ppo", str(tmp_path), {"kind": "TrainJob"})
    with pytest.raises(UserError) as err:
        list(backend().logs(handle))
    assert str(err.value) == "logs=ppo: kubectl logs failed: error: no pods found"
    with pytest.raises(UserError) as err:
        backend().cancel(handle)
    assert str(err.value) == "cancel=ppo: kubectl delete failed: error: forbidden"
    unknown = Handle("k8s", "ppo", str(tmp_path), {})  # a submit.json edited by hand
    assert backend().describe(unknown).state is State.UNKNOWN
    for call in (lambda: list(backend().logs(unknown)), lambda: backend().cancel(unknown)):
        with pytest.raises(UserError, match="submit.json names no TrainJob or PyTorchJob"):
            call()


def test_cancel_deletes_the_job_where_it_was_created(tmp_path, monkeypatch):
    kube = Kubectl(tmp_path, monkeypatch, {"delete": ['trainjob.trainer.kubeflow.org "ppo" deleted\n', 0]})
    backend().cancel(Handle("k8s", "ppo", str(tmp_path), {"kind": "TrainJob", "namespace": "rl", "context": "lab"}))
    assert kube.argv() == [
        ["delete", "trainjob.trainer.kubeflow.org", "ppo", "-n", "rl", "--context", "lab", "--ignore-not-found",
         "--wait=false"]
    ]  # fmt: skip


def test_the_runs_side_imports_no_hydra():
    code = (
        "import sys, launcher.k8s.backend; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('hydra', 'omegaconf')))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    assert k8s_backend.NAME == "k8s"
