"""``kubectl``, the only way this package talks to a cluster: short synchronous calls, each bounded in
time, its output decoded whatever it is (a plugin's, a proxy's page), its error reduced to one line.

Imports no Hydra: ``runs`` reaches a submitted job through it (launcher/k8s/backend.py).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Sequence

from ..config.schema import K8sKind

TIMEOUT_S = 120  # creating a job
QUERY_TIMEOUT_S = 20  # describe / logs / cancel: `runs` must not hang on a silent API server

# kubectl's resource for each kind, its group spelled out (another operator's "trainjob" cannot shadow it)
RESOURCE = {
    K8sKind.TrainJob.value: "trainjob.trainer.kubeflow.org",
    K8sKind.PyTorchJob.value: "pytorchjob.kubeflow.org",
}

# the labels the operators put on a job's pods
TRAINJOB_NAME_LABEL = "trainer.kubeflow.org/trainjob-name"
JOBSET_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"  # TrainJob: the node's index (JobSet's replicated job)
PYTORCHJOB_NAME_LABEL = "training.kubeflow.org/job-name"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"


class KubectlError(Exception):
    """kubectl could not be asked, did not answer in time, or said no: the message is one line."""


def find() -> str:
    path = shutil.which("kubectl")
    if path is None:
        raise KubectlError("kubectl is not on PATH")
    return path


def run(args: Sequence[str], timeout: float) -> subprocess.CompletedProcess:
    """``kubectl ARGS``; its output may not be UTF-8: replaced, not a traceback."""
    try:
        return subprocess.run([find(), *args], capture_output=True, encoding="utf-8", errors="replace", timeout=timeout)
    except subprocess.TimeoutExpired:
        raise KubectlError(f"kubectl {args[0]} did not answer within {timeout:g} s") from None


# kubectl's own log lines (klog: W1201 17:09:47.067663   27687 loader.go:223] Config not found: ...),
# printed before its error by some versions: not the error
_KLOG = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ \S+:\d+\] ")


def why(out: subprocess.CompletedProcess) -> str:
    r"""kubectl's error: its last two lines, its log lines left out when it said more.

    >>> why(subprocess.CompletedProcess([], 1, "", "W1201 17:09:47.067663   27687 loader.go:223] Config not found: /x\nerror: current-context is not set\n"))
    'error: current-context is not set'
    """  # noqa: E501
    lines = [line.strip() for line in (out.stderr or out.stdout).strip().splitlines() if line.strip()]
    lines = [line for line in lines if not _KLOG.match(line)] or lines
    return " ".join(lines[-2:]) or f"exit code {out.returncode}"


def scope(namespace: str | None, context: str | None) -> list[str]:
    """``-n NAMESPACE --context CONTEXT`` for what is set: where the job was created.

    >>> scope("rl", "lab"), scope("", None)
    (['-n', 'rl', '--context', 'lab'], [])
    """
    return (["-n", namespace] if namespace else []) + (["--context", context] if context else [])


def pod_selector(kind: str, name: str, rank: int | None) -> str:
    """The label selector of a job's pods, or of node ``rank``'s pod (PyTorchJob: rank 0 is the Master,
    rank r the Worker r - 1; TrainJob: JobSet's job index r).

    >>> pod_selector("TrainJob", "ppo", 1)
    'trainer.kubeflow.org/trainjob-name=ppo,jobset.sigs.k8s.io/job-index=1'
    >>> pod_selector("PyTorchJob", "ppo", 2)
    'training.kubeflow.org/job-name=ppo,training.kubeflow.org/replica-type=worker,training.kubeflow.org/replica-index=1'
    """  # noqa: E501
    if kind == K8sKind.TrainJob.value:
        return f"{TRAINJOB_NAME_LABEL}={name}" + ("" if rank is None else f",{JOBSET_INDEX_LABEL}={rank}")
    selector = f"{PYTORCHJOB_NAME_LABEL}={name}"
    if rank is None:
        return selector
    replica = ("master", 0) if rank == 0 else ("worker", rank - 1)
    return f"{selector},{REPLICA_TYPE_LABEL}={replica[0]},{REPLICA_INDEX_LABEL}={replica[1]}"
