"""submit=k8s: the TrainJob / PyTorchJob rendered from the composition, loaded strictly into the published
API models (kubeflow-trainer-api, kubeflow-training, kubernetes: tests/k8s_models.py), and the checks
that refuse a bad job before anything is written or sent.

There is no Kubernetes cluster here. What a cluster alone can confirm (the operator accepting the job,
the pods starting, the rendezvous across pods) is not tested: docs/kubernetes.md says so. kubectl is
the real one where installed (its own errors without a context or a reachable cluster); creating a job
needs an API server, so the one test of the success path puts a stand-in kubectl first on PATH.
"""

from __future__ import annotations

import copy
import functools
import os
import shutil
import subprocess
from dataclasses import replace
from datetime import datetime

import pytest
import yaml

import k8s_models
from conftest import ROOT, clean_env, make_facts
from launcher.backends.base import Typed
from launcher.config import grammar
from launcher.config.compose import compose
from launcher.config.schema import K8sConfig, K8sKind
from launcher.errors import UserError
from launcher.k8s import manifest as k8s_manifest
from launcher.k8s import submit
from require import unavailable

NOW = datetime(2026, 12, 1, 10, 15, 0)


@functools.cache
def composed(argv: tuple[str, ...]):
    line = grammar.parse(list(argv))
    return compose(line.overrides, line.script_args), line


def render(*argv: str, sweep_job: int | None = None) -> tuple[str, dict]:
    """What the session hands submit=k8s: the typed config and the overrides as typed."""
    cfg, line = composed(("submit=k8s", "k8s.image=ghcr.io/lab/isaac:2.3", *argv))
    typed = Typed(overrides=tuple(line.overrides), script_args=tuple(line.script_args))
    return submit.build(copy.deepcopy(cfg), typed, make_facts(cpus=2), NOW, sweep_job)


def container(manifest: dict) -> dict:
    """The training container: TrainJob's trainer, or the PyTorchJob Master's container."""
    if manifest["kind"] == "TrainJob":
        return manifest["spec"]["trainer"]
    return manifest["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]


# -- every topology validates against the published models ------------------------------------

TOPOLOGIES = {
    "single-node-cpu": (),
    "multi-node-gpus": (
        "k8s.nodes=4",
        "k8s.gpus_per_node=8",
        "k8s.cpus_per_node=64",
        "k8s.memory_per_node=480Gi",
        "k8s.shm_size=64Gi",
        "k8s.namespace=rl-team",
        "k8s.secret_env=[HF_TOKEN:hf-token/token,WANDB_API_KEY:wandb/api-key]",
        "launcher.max_restarts=2",
        "task=CartPole-v1",
        "--",
        "--headless",
    ),
    "jax": ("launcher=skrl_jax", "k8s.nodes=2", "k8s.cpus_per_node=2", "task=Pendulum-v1"),
}


@pytest.mark.parametrize("kind", ["TrainJob", "PyTorchJob"])
@pytest.mark.parametrize("topology", sorted(TOPOLOGIES))
def test_every_topology_loads_strictly(kind, topology):
    name, manifest = render(f"k8s.kind={kind}", *TOPOLOGIES[topology])
    job = k8s_models.load(yaml.safe_load(k8s_manifest.to_yaml(manifest)))  # what is written, read back
    assert job.metadata.name == name and manifest["kind"] == kind
    command = container(manifest)["command"]
    jax = topology == "jax"
    assert command[:2] == ["train_multigpu", "launcher=k8s_jax" if jax else "launcher=k8s"]
    assert "submit=k8s" not in command and "submit=none" in command
    assert not any(arg.startswith(("k8s.", "launcher=skrl_jax")) for arg in command)
    if topology == "multi-node-gpus":
        assert command[-2:] == ["--", "--headless"] and "task=CartPole-v1" in command
        resources = {"cpu": "64", "memory": "480Gi", "nvidia.com/gpu": "8"}
        env = [
            {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}}},
            {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "api-key"}}},
        ]
        assert container(manifest)["env"] == env
        assert manifest["metadata"]["namespace"] == "rl-team"
        if kind == "TrainJob":
            trainer = manifest["spec"]["trainer"]
            assert (trainer["numNodes"], trainer["numProcPerNode"]) == (4, 8)
            assert trainer["resourcesPerNode"] == {"requests": resources, "limits": resources}
            pod = manifest["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
            assert pod["name"] == "node"
            spec = pod["template"]["spec"]["template"]["spec"]
            assert spec["volumes"] == [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}}]
            assert spec["containers"] == [{"name": "node", "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}]}]
        else:
            specs = manifest["spec"]["pytorchReplicaSpecs"]
            assert (specs["Master"]["replicas"], specs["Worker"]["replicas"]) == (1, 3)
            assert manifest["spec"]["nprocPerNode"] == "8" and manifest["spec"]["runPolicy"] == {"backoffLimit": 2}
            assert {spec["restartPolicy"] for spec in specs.values()} == {"OnFailure"}
            assert container(manifest)["resources"] == {"requests": resources, "limits": resources}
            assert specs["Worker"]["template"] == specs["Master"]["template"]
    if kind == "PyTorchJob" and topology != "multi-node-gpus":
        assert manifest["spec"]["runPolicy"] == {"backoffLimit": 0}
        assert manifest["spec"]["pytorchReplicaSpecs"]["Master"]["restartPolicy"] == "Never"
    if topology == "single-node-cpu":
        # no resources asked: the runtime's default numProcPerNode (auto), each pod counts its own
        assert "numProcPerNode" not in container(manifest) and "nprocPerNode" not in manifest["spec"]
    if jax:
        assert (manifest["spec"].get("nprocPerNode") or manifest["spec"]["trainer"].get("numProcPerNode")) in ("2", 2)


def test_a_field_the_models_do_not_know_fails_the_loader():
    """The loader is strict: an unknown field, a misspelled one, a string for an integer all fail
    (the generated models alone would silently drop the first two)."""
    for kind in ("TrainJob", "PyTorchJob"):
        _, manifest = render(f"k8s.kind={kind}", *TOPOLOGIES["multi-node-gpus"])
        k8s_models.load(manifest)
        for mutate in (
            lambda m: m["spec"].update(elasticPolicy={"minReplicas": 1}) if m["kind"] == "TrainJob" else None,
            lambda m: container(m).update(imagePullPolicyy="Always"),
            lambda m: container(m)["env"][0]["valueFrom"]["secretKeyRef"].update(nam="x"),
            lambda m: (
                m["spec"]["trainer"].update(numNodes="4")
                if m["kind"] == "TrainJob"
                else m["spec"]["pytorchReplicaSpecs"]["Worker"].update(replicas="3")
            ),
        ):
            broken = copy.deepcopy(manifest)
            mutate(broken)
            if broken == manifest:
                continue
            with pytest.raises(k8s_models.Invalid):
                k8s_models.load(broken)


def test_sweep_points_get_distinct_names():
    names = {render("seed=1", sweep_job=0)[0], render("seed=2", sweep_job=1)[0]}
    assert names == {"train-multigpu-20261201-101500-0", "train-multigpu-20261201-101500-1"}
    assert render("k8s.job_name=ppo", sweep_job=3)[0] == "ppo-3"
    assert render("run_name=PPO_Cartpole")[0] == "ppo-cartpole-20261201-101500"


def test_one_secret_may_be_written_without_brackets():
    """The issue's own spelling, k8s.secret_env=NAME:SECRET/KEY, is a one-item list."""
    _, manifest = render("k8s.secret_env=HF_TOKEN:hf-token/token")
    assert container(manifest)["env"] == [
        {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}}}
    ]


# -- refused before anything is written or sent ---------------------------------------------------


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ("k8s.job_name=PPO",),
            "k8s.job_name=PPO: not a TrainJob name: lower-case letters, digits and '-', a letter first, "
            "not ending in '-', at most 63 characters (RFC 1035)",
        ),
        (
            ("k8s.job_name=" + "a" * 60, "k8s.kind=PyTorchJob", "k8s.nodes=12"),
            f"k8s.job_name={'a' * 60}: too long for 12 node(s): the pod host name {'a' * 60}-worker-10 has 70 "
            "characters, at most 63 (at most 53 characters)",
        ),
        (
            ("k8s.namespace=Team_A",),
            "k8s.namespace=Team_A: a namespace name: lower-case letters, digits and '-', at most 63 (RFC 1123)",
        ),
        (
            ("k8s.memory_per_node=64GB",),
            "k8s.memory_per_node=64GB: not a Kubernetes quantity (a number with an optional suffix: Ki Mi Gi Ti Pi "
            "Ei, m k M G T P E; e.g. 64Gi, 8, 500m)",
        ),
        (("k8s.cpus_per_node=0",), "k8s.cpus_per_node=0: must be more than 0"),
        (
            ("k8s.memory_per_node=32Gi", "k8s.shm_size=64Gi"),
            "k8s.shm_size=64Gi: more than k8s.memory_per_node=32Gi: a memory-backed /dev/shm counts against it",
        ),
        (
            ("k8s.gpus_per_node=4", "launcher.nproc_per_node=8"),
            "launcher.nproc_per_node=8: more workers than the 4 visible GPU(s) "
            "(from k8s.gpus_per_node=4; use at most 4 or device=cpu)",
        ),
        (
            ("launcher=skrl_jax", "k8s.cpus_per_node=1", "launcher.nproc_per_node=2"),
            "launcher.nproc_per_node=2: more workers than the 1 CPU(s) each pod asks for (k8s.cpus_per_node=1) "
            "(use at most 1, or ask for more with k8s.cpus_per_node=)",
        ),
        (
            ("k8s.gpu_resource=gpu",),
            "k8s.gpu_resource=gpu: an extended resource name, e.g. nvidia.com/gpu or amd.com/gpu",
        ),
        (
            ("k8s.secret_env=[HF_TOKEN]",),
            "k8s.secret_env=HF_TOKEN: NAME:SECRET/KEY, the variable NAME read from key KEY of the Kubernetes Secret "
            "SECRET (e.g. HF_TOKEN:hf-token/token; a value is never written into the manifest)",
        ),
        (
            ("k8s.secret_env=[PET_MASTER_ADDR:s/k]",),
            "k8s.secret_env=PET_MASTER_ADDR:s/k: PET_MASTER_ADDR is set by the TrainJob operator",
        ),
        (
            ("k8s.secret_env=[HF_TOKEN:Bad_Secret/k]",),
            "k8s.secret_env=HF_TOKEN:Bad_Secret/k: 'Bad_Secret' is not a Secret's name "
            "(lower-case letters, digits, '-', '.'; at most 253)",
        ),
        (
            ("k8s.nodes=2", "launcher.nnodes=3"),
            "launcher.nnodes=3: k8s.nodes=2 says otherwise: k8s.nodes is the old spelling of launcher.nnodes, "
            "the job's node count (set one of them, or both to the same count)",
        ),
        (
            ("k8s.nodes=2", "launcher.node_rank=0"),
            "launcher.node_rank=0: the pod's PET_NODE_RANK is 1 "
            "(leave launcher.node_rank unset under launcher=k8s, or change the job (submit=k8s launcher.nnodes=N))",
        ),
        (
            ("launcher=multinode", "launcher.nnodes=1:4"),
            "launcher.nnodes=1:4: an elastic node range is not submitted to Kubernetes: TrainJob's numNodes is one "
            "number (Trainer refuses numNodes with an elastic policy) and train_multigpu writes no elasticPolicy "
            "(a fixed count: launcher.nnodes=N)",
        ),
        (
            ("k8s.runtime_kind=Runtime",),
            "k8s.runtime_kind=Runtime: one of ClusterTrainingRuntime, TrainingRuntime",
        ),
    ],
)
def test_bad_jobs_are_refused_before_sending(args, message):
    with pytest.raises(UserError) as err:
        render(*args)
    assert str(err.value) == message


@pytest.mark.parametrize(
    "change, message",
    [
        ({"image": "my image"}, "k8s.image=my image: an image reference: no spaces, at most 500 characters"),
        ({"nodes": 0}, "k8s.nodes=0: at least 1"),
        ({"gpus_per_node": -1}, "k8s.gpus_per_node=-1: 0 or more"),
        ({"runtime": "Torch"}, "k8s.runtime=Torch: a runtime's name: lower-case letters, digits, '-', '.'"),
        ({"secret_env": ["1X:s/k"]}, "k8s.secret_env=1X:s/k: '1X' is not a variable name (letters, digits, '_')"),
        (
            {"secret_env": ["X:s/a b"]},
            "k8s.secret_env=X:s/a b: 'a b' is not a key of a Secret (letters, digits, '-', '_', '.')",
        ),
        ({"secret_env": ["X:s/k", "X:t/k"]}, "k8s.secret_env=X:t/k: X is given twice"),
        (
            {"secret_env": ["RANK:s/k"]},
            "k8s.secret_env=RANK:s/k: the launch sets this variable for every worker itself",
        ),
        (
            {"secret_env": ["WORLD_SIZE:s/k"], "kind": K8sKind.PyTorchJob},
            "k8s.secret_env=WORLD_SIZE:s/k: WORLD_SIZE is set by the PyTorchJob operator",
        ),
    ],
)
def test_bad_k8s_keys_are_refused(change, message):
    with pytest.raises(UserError) as err:
        k8s_manifest.check(replace(K8sConfig(image="img"), **change), None)
    assert str(err.value) == message


def test_a_command_longer_than_trainjob_allows_is_refused():
    with pytest.raises(UserError) as err:
        render("--", *(f"--arg{i}" for i in range(130)))
    assert str(err.value) == "k8s=TrainJob: the container command has 134 arguments, at most 128"


def test_a_kubectl_that_does_not_answer_is_one_error(tmp_path, monkeypatch):
    (tmp_path / "kubectl").write_text("#!/bin/sh\nexec /bin/sleep 30\n")
    (tmp_path / "kubectl").chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(submit, "KUBECTL_TIMEOUT_S", 0.3)
    with pytest.raises(UserError) as err:
        submit.create(tmp_path / "trainjob.yaml")
    assert (
        str(err.value) == f"submit=k8s: kubectl config did not answer within 0.3 s (manifest: {tmp_path}/trainjob.yaml)"
    )


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_a_kubectl_that_prints_bytes_that_are_not_utf8_is_one_error(tmp_path, monkeypatch, stream):
    """kubectl's output that is not UTF-8 (a broken plugin, a proxy's page) was a UnicodeDecodeError
    traceback (issue 18's hostile pass); it is kubectl's error line, undecodable bytes replaced."""
    redirect = "" if stream == "stdout" else " >&2"
    script = (
        "#!/bin/sh\n"
        'if [ "$1" = config ]; then echo lab; exit 0; fi\n'
        f"printf 'error: \\377\\376 refused\\n'{redirect}\n"
        "exit 1\n"
    )
    (tmp_path / "kubectl").write_text(script)
    (tmp_path / "kubectl").chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(UserError) as err:
        submit.create(tmp_path / "trainjob.yaml")
    assert str(err.value) == (
        "submit=k8s: kubectl create failed in context lab: error: \ufffd\ufffd refused "
        f"(the manifest is saved: {tmp_path}/trainjob.yaml)"
    ), str(err.value)


def test_image_is_required():
    cfg, line = composed(("submit=k8s",))
    with pytest.raises(UserError) as err:
        submit.build(cfg, Typed(overrides=tuple(line.overrides)), make_facts(), NOW)
    assert str(err.value) == (
        "container.image=None: required: the container image the pods run (k8s.image is its old spelling) "
        "(e.g. container.image=nvcr.io/nvidia/isaac-lab:2.3.0)"
    )


# -- the CLI: dry run, kubectl ---------------------------------------------------------------------

ARGS = ("submit=k8s", "k8s.image=ghcr.io/lab/isaac:2.3", "run_name=ppo")


def files_under(root) -> list:
    return sorted(p.relative_to(root) for p in root.rglob("*") if p.is_file())


def test_dry_run_prints_the_manifest_and_writes_nothing(run_cli, tmp_path):
    result = run_cli(*ARGS, "k8s.kind=PyTorchJob", "k8s.nodes=2", "dry_run=true")
    assert result.returncode == 0, result.stderr
    head, text = result.stdout.split("\n", 1)
    assert head.startswith(f"# {tmp_path}/runs/") and head.endswith(
        "_ppo/pytorchjob.yaml (dry run: nothing written, nothing created)"
    )
    job = k8s_models.load(yaml.safe_load(text))
    assert job.spec.pytorch_replica_specs["Worker"].replicas == 1
    assert files_under(tmp_path) == []


FAKE_KUBECTL = """#!/bin/sh
# stands in for kubectl talking to a cluster (none exists here): says what a real one prints
case "$1" in
config) echo fake-context ;;
create) cp "$3" "$(dirname "$3")/kubectl_got.yaml"
        echo "trainjob.trainer.kubeflow.org/$(sed -n 's/^  name: //p' "$3")" ;;
*) exit 1 ;;
esac
"""


def test_sweep_creates_one_job_per_point(run_cli, tmp_path):
    bin_dir = tmp_path.parent / f"{tmp_path.name}-bin"
    bin_dir.mkdir()
    (bin_dir / "kubectl").write_text(FAKE_KUBECTL)
    (bin_dir / "kubectl").chmod(0o755)
    env = clean_env(PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    result = run_cli("-m", *ARGS, "seed=1,2", env=env)
    assert result.returncode == 0, result.stderr
    manifests = sorted((tmp_path / "runs").rglob("trainjob.yaml"))
    assert len(manifests) == 2
    names = set()
    for path in manifests:
        assert (path.parent / "kubectl_got.yaml").read_text() == path.read_text()
        data = yaml.safe_load(path.read_text())
        k8s_models.load(data)
        names.add(data["metadata"]["name"])
        assert f"[train_multigpu] created TrainJob {data['metadata']['name']}" in result.stdout
        assert (path.parent / "submit.json").is_file() and (path.parent / "config.yaml").is_file()
    assert len(names) == 2 and all(name.startswith("ppo-") for name in names)
    assert "[train_multigpu] sweep: 2 of 2 job(s) created" in result.stdout


@pytest.mark.parametrize("case", ["no kubectl", "no context", "no cluster"])
def test_without_a_cluster_one_error_and_the_manifest_is_kept(run_cli, tmp_path, case):
    if case != "no kubectl" and shutil.which("kubectl") is None:
        unavailable("KUBECTL", "kubectl is not installed (.ci/setup installs it)")
    env = clean_env()
    if case == "no kubectl":
        env["PATH"] = str(tmp_path / "empty-bin")
    elif case == "no context":
        env["KUBECONFIG"] = str(tmp_path / "no-such-kubeconfig")
    else:  # a context whose API server does not answer (nothing listens on port 1)
        config = tmp_path.parent / f"{tmp_path.name}-kubeconfig"
        config.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                    "users": [{"name": "u", "user": {"token": "t"}}],
                    "contexts": [{"name": "lab", "context": {"cluster": "c", "user": "u"}}],
                    "current-context": "lab",
                }
            )
        )
        env["KUBECONFIG"] = str(config)
    result = run_cli(*ARGS, env=env)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    (path,) = (tmp_path / "runs").rglob("trainjob.yaml")
    k8s_models.load(yaml.safe_load(path.read_text()))
    expected = {
        "no kubectl": "submit=k8s: kubectl is not on PATH "
        "(install kubectl and choose a context; the manifest is saved: ",
        "no context": "submit=k8s: kubectl has no current context (error: current-context is not set) "
        "(kubectl config use-context NAME; the manifest is saved: ",
        "no cluster": "submit=k8s: kubectl create failed in context lab: ",
    }[case]
    assert line.startswith(f"train_multigpu: error: {expected}") and line.endswith(f"{path})"), line
    if case == "no cluster":  # kubectl 1.32: "dial tcp 127.0.0.1:1: connect: connection refused"; 1.20:
        # "The connection to the server 127.0.0.1:1 was refused"
        assert "127.0.0.1:1" in line and "refused" in line


def test_a_sweep_says_each_points_error_once(run_cli, tmp_path):
    """Each point's error is its row of the sweep's table, and nowhere else (it was printed as an
    error line too). No kubectl here (an empty PATH), so every point fails the same way."""
    result = run_cli("-m", *ARGS, "seed=1,2", env=clean_env(PATH=str(tmp_path / "empty-bin")))
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stdout + result.stderr
    console = result.stdout + result.stderr
    paths = sorted((tmp_path / "runs").rglob("trainjob.yaml"))
    assert len(paths) == 2
    for path in paths:
        message = (
            f"submit=k8s: kubectl is not on PATH (install kubectl and choose a context; the manifest is saved: {path})"
        )
        assert console.count(message) == 1, console
    assert console.count("kubectl is not on PATH") == 2, console
    assert "[train_multigpu] sweep: 0 of 2 job(s) created" in result.stdout


def test_help_mentions_the_k8s_keys(run_cli):
    out = run_cli("--help").stdout
    for key in (
        "submit=k8s",
        "k8s.image",
        "k8s.kind=PyTorchJob",
        "k8s.secret_env",
        "launcher=k8s",
        "alias k8s.nodes, must agree",
    ):
        assert key in out, key


ERRORS_MD = [
    "required: the container image the pods run",
    "an image reference: no spaces, at most 500 characters",
    "not a TrainJob name",
    "too long for 12 node(s): the pod host name",
    "a namespace name: lower-case letters, digits and '-', at most 63 (RFC 1123)",
    "not a Kubernetes quantity",
    "must be more than 0",
    "a memory-backed /dev/shm counts against it",
    "an extended resource name, e.g. nvidia.com/gpu or amd.com/gpu",
    "one of ClusterTrainingRuntime, TrainingRuntime",
    "a runtime's name",
    "more workers than the 1 CPU(s) each pod asks for",
    "an elastic node range is not submitted to Kubernetes",
    "the pod's PET_NNODES is 2",
    "the pod's PET_NODE_RANK is 1",
    "the pod's PET_NPROC_PER_NODE is 4",
    "NAME:SECRET/KEY, the variable NAME read from key KEY of the Kubernetes Secret SECRET",
    "is set by the TrainJob operator",
    "the launch sets this variable for every worker itself",
    "a secret value cannot travel in a Kubernetes manifest (it would be written into it)",
    "the container command has 140 arguments, at most 128",
    "kubectl is not on PATH",
    "kubectl has no current context",
    "kubectl create failed in context",
    "did not answer within 120 s",
    "only runs inside a pod of a Kubeflow TrainJob or PyTorchJob",
    "cannot read the operator's environment",
    "launcher.from_k8s=true takes topology multinode (torchrun) or skrl_jax",
    "says otherwise: k8s.nodes is the old spelling of launcher.nnodes, the job's node count",
    "launcher.nnodes=5001: a node count from 1 to 5000",
    "at most 5000 (one pod per node; Kubernetes supports 5000 nodes)",
    "kubectl logs failed",
    "kubectl delete failed",
]


def test_errors_md_lists_every_k8s_message():
    text = (ROOT / "docs" / "errors.md").read_text()
    assert [phrase for phrase in ERRORS_MD if phrase not in text] == []


@pytest.mark.parametrize("kind", ["fifo", "symlink to /dev/null", "directory"])
def test_a_manifest_path_that_is_not_a_regular_file_is_refused_not_waited_on(run_cli, tmp_path, kind):
    """``run_dir=`` names an existing directory whose ``trainjob.yaml`` is a FIFO: the submission
    blocked for good opening it (issue 18's hostile pass); a symlink to /dev/null swallowed the
    manifest and kubectl was asked to create nothing. Refused, one line, before anything is created
    (kubectl is a stand-in that records being asked)."""
    bin_dir = tmp_path.parent / f"{tmp_path.name}-bin"
    bin_dir.mkdir()
    (bin_dir / "kubectl").write_text(f"#!/bin/sh\ntouch {tmp_path}/kubectl_asked\necho fake-context\n")
    (bin_dir / "kubectl").chmod(0o755)
    run_dir = tmp_path / "mine"
    run_dir.mkdir()
    path = run_dir / "trainjob.yaml"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    else:
        path.symlink_to("/dev/null")
    env = clean_env(PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    try:
        result = run_cli(*ARGS, f"run_dir={run_dir}", env=env, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail(f"submit=k8s blocked on a manifest path that is a {kind}")
    what = {"fifo": "a FIFO", "symlink to /dev/null": "a character device", "directory": "a directory"}[kind]
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"train_multigpu: error: run_dir={path}: not a regular file ({what}) (choose another run_dir, or remove it)"
    )
    assert not (tmp_path / "kubectl_asked").exists()
    assert sorted(p.name for p in run_dir.iterdir()) == ["trainjob.yaml"]
