"""The launcher's own MLflow client (``tracker=mlflow``; imported only then: MLflow takes seconds to
import, the launcher's start-up budget does not pay it otherwise).

The launcher creates the run, not the script: one run per launch (a ``-m`` sweep: one parent run
and one child per point, nested by MLflow's ``mlflow.parentRunId`` tag), the composed config
(secrets masked) as its parameters, the command, git commit, hosts and back end as tags. The script
gets ``MLFLOW_TRACKING_URI``, ``MLFLOW_EXPERIMENT_NAME``/``_ID`` and ``MLFLOW_RUN_ID``, so its own
``mlflow.start_run()`` continues that run. At the end: the status (FINISHED / FAILED / KILLED), the
cause, the attempts, the goodput ledger when status.json has one, and status.json and the learning
curve as artifacts.

Every call is bounded: an ``http(s)`` server is probed (``/health``, ``tracker.mlflow.timeout``)
before anything starts (unreachable: one line, exit 2), and MLflow's own HTTP retries are cut to
one, each request to a few timeouts, while the launcher talks to it: a server that dies during a
launch costs a line, never the launch.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path

PARENT_TAG = "mlflow.parentRunId"
RUN_NAME_TAG = "mlflow.runName"
GIT_COMMIT_TAG = "mlflow.source.git.commit"
SOURCE_TAG = "mlflow.source.name"
PARAMS_PER_CALL = 100  # MLflow's log_batch limit
PARAM_VALUE_MAX = 6000  # MLflow's (older servers: 500; newer: 6000+)


def remote(uri: str) -> bool:
    return uri.startswith(("http://", "https://"))


def probe(uri: str, timeout: float) -> str | None:
    """None when the tracking server at ``uri`` answers its ``/health``, else why not. A store that is
    not a server (``file:``, ``sqlite:``) is not probed: MLflow opens it in this process.

    >>> probe("sqlite:///x.db", 1.0) is None
    True
    """
    if not remote(uri):
        return None
    import urllib.error  # here, not at the top: http.client, email and ssl are no dry run's
    import urllib.request

    url = uri.rstrip("/") + "/health"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as answer:
            if answer.status != 200:
                return f"GET {url}: HTTP {answer.status}"
    except urllib.error.HTTPError as err:
        return f"GET {url}: HTTP {err.code}"
    except (urllib.error.URLError, OSError, ValueError) as err:
        reason = getattr(err, "reason", err)
        return f"GET {url}: {getattr(reason, 'strerror', None) or reason}"
    return None


@contextlib.contextmanager
def bounded(timeout: float) -> Iterator[None]:
    """MLflow's HTTP client reads its retry and timeout settings from the environment at each
    request: while the launcher calls it, one retry and a bounded request (the workers, started
    outside this block, get the user's own settings)."""
    values = {
        "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1",
        "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "0",
        "MLFLOW_HTTP_REQUEST_TIMEOUT": str(max(1, int(timeout * 2))),
    }
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def client(uri: str):
    import logging

    from mlflow.tracking import MlflowClient

    # MLflow logs a "View run ... at" line for every run it ends: the launcher says its own lines
    logging.getLogger("mlflow").setLevel(logging.WARNING)

    return MlflowClient(tracking_uri=uri)


def default_uri() -> str:
    """MLflow's own default store, as this process resolves it (the workers get it spelled out)."""
    import mlflow

    return mlflow.get_tracking_uri()


def experiment_id(mlflow_client, name: str) -> str:
    found = mlflow_client.get_experiment_by_name(name)
    if found is not None:
        return found.experiment_id
    try:
        return mlflow_client.create_experiment(name)
    except Exception:  # noqa: BLE001 - made meanwhile by another launcher (a parallel sweep's, a node's)
        found = mlflow_client.get_experiment_by_name(name)
        if found is None:
            raise
        return found.experiment_id


def create_run(mlflow_client, experiment: str, name: str, tags: Mapping[str, str], parent: str | None = None) -> str:
    tags = {**tags, RUN_NAME_TAG: name, **({PARENT_TAG: parent} if parent else {})}
    return mlflow_client.create_run(experiment, tags=tags, run_name=name).info.run_id


def reopen(mlflow_client, run_id: str) -> bool:
    """A run this launch made before (a restart in a new process: a SLURM requeue, ``runs resume``):
    RUNNING again. False: not there (another store): the caller creates a new one."""
    try:
        mlflow_client.get_run(run_id)
    except Exception:  # noqa: BLE001 - MlflowException: RESOURCE_DOES_NOT_EXIST
        return False
    mlflow_client.update_run(run_id, status="RUNNING")
    return True


def flat(data, prefix: str = "") -> dict[str, str]:
    """A nested config as MLflow parameters: dotted keys, lists and scalars as text (cut at MLflow's
    value limit).

    >>> flat({"a": {"b": 1, "c": [1, 2]}, "d": None})
    {'a.b': '1', 'a.c': '[1, 2]', 'd': 'None'}
    """
    out: dict[str, str] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flat(value, name + "."))
        else:
            text = json.dumps(value) if isinstance(value, list | Mapping) else str(value)
            out[name] = text[:PARAM_VALUE_MAX]
    return out


def log_params(mlflow_client, run_id: str, params: Mapping[str, str]) -> None:
    """Once per run: a run reopened after a requeue already has them (MLflow refuses a changed value)."""
    from mlflow.entities import Param

    if mlflow_client.get_run(run_id).data.params:
        return
    items = [Param(key, value) for key, value in params.items()]
    for start in range(0, len(items), PARAMS_PER_CALL):
        mlflow_client.log_batch(run_id, params=items[start : start + PARAMS_PER_CALL])


def set_tags(mlflow_client, run_id: str, tags: Mapping[str, str]) -> None:
    from mlflow.entities import RunTag

    items = [RunTag(key, str(value)[:PARAM_VALUE_MAX]) for key, value in tags.items()]
    if items:
        mlflow_client.log_batch(run_id, tags=items)


def log_metrics(mlflow_client, run_id: str, metrics: Mapping[str, float]) -> None:
    import time

    from mlflow.entities import Metric

    stamp = int(time.time() * 1000)
    items = [Metric(key, float(value), stamp, 0) for key, value in metrics.items()]
    if items:
        mlflow_client.log_batch(run_id, metrics=items)


def log_artifacts(mlflow_client, run_id: str, paths: list[Path]) -> None:
    for path in paths:
        if path.is_file():
            mlflow_client.log_artifact(run_id, str(path))


def finish(
    mlflow_client,
    run_id: str,
    status: str,
    tags: Mapping[str, str],
    metrics: Mapping[str, float] | None = None,
    artifacts: list[Path] | None = None,
) -> None:
    """A run's end: its tags, metrics and artifacts, then its status (FINISHED, FAILED, KILLED)."""
    set_tags(mlflow_client, run_id, tags)
    log_metrics(mlflow_client, run_id, metrics or {})
    log_artifacts(mlflow_client, run_id, artifacts or [])
    mlflow_client.set_terminated(run_id, status=status)


def url(uri: str, experiment: str, run_id: str) -> str | None:
    """The run's page on a tracking server (none for a local store)."""
    if not remote(uri):
        return None
    return f"{uri.rstrip('/')}/#/experiments/{experiment}/runs/{run_id}"
