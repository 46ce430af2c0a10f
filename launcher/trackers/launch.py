"""What the local launch (launcher/backends/local.py) asks of the trackers, in its three moments:

- :meth:`Trackers.check` (``dryrun``, before anything starts or is written): W&B's mode decided once
  per invocation, MLflow's server probed once per address (unreachable: one line, exit 2; a dry run
  warns); the variables the dry run shows;
- :meth:`Trackers.begin` (the run directory made, nothing started): the launch's identity
  (``trackers.json``: made once, read again by a restart in a new process), its MLflow run created
  (a sweep's parent first) or reopened, the variables of its run directory;
- :meth:`Trackers.end` (status.json closed): the MLflow run's outcome; :meth:`Trackers.sweep_end`
  the parent's.

Only ``tracker=mlflow`` imports MLflow. Node 0's launcher alone creates and ends the MLflow run
(global rank 0, the one that logs, runs there).

This is the one way in for every back end: submit=slurm's job, submit=ssh's hosts, submit=ray's
entrypoint and a k8s pod each run the launcher again with ``submit=none``, i.e. this local launch on
its node, so the trackers are set up where the ranks run (W&B's mode decided on that node's network;
the submitting side probes nothing).
"""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .. import probe, secrets
from ..errors import UserError
from ..names import PROG, TRACKER_RANKS_VAR, TRACKERS_VAR
from ..rundir import Reason, RunPaths
from . import identity, mlflow_runs, wandb_env

WANDB_PROBE_S = 3.0  # W&B's server, asked once per invocation (tracker.wandb.mode=auto with a key)
GIT_S = 5.0
# how long a node other than 0 waits for node 0's trackers.json (shares_node0s_identity): node 0 writes
# it as it starts, before its ranks; the nodes meet at the rendezvous only after that
NODE0_WAIT_S = 30.0
MLFLOW_VARS = ("MLFLOW_RUN_ID", "MLFLOW_EXPERIMENT_ID")  # added by a real launch (the dry run names them)
URI_KEY = "tracker.mlflow.tracking_uri"
TAG = "train_multigpu."  # the launcher's own MLflow tags
LEARNING_CURVE = "learning_curve.png"  # the bundled trainers' picture (examples/trainers/trainer_outputs.py)


def enabled(cfg) -> list[str]:
    return [name for name in ("wandb", "mlflow") if getattr(cfg.tracker, name).enabled]


def outcome_status(exit_code: int | None, ended: str | None) -> str:
    """MLflow's run status for how a launch ended (a launcher/rundir.py Reason value).

    >>> outcome_status(0, "succeeded"), outcome_status(1, "failed"), outcome_status(130, "interrupted")
    ('FINISHED', 'FAILED', 'KILLED')
    """
    if exit_code == 0:
        return "FINISHED"
    if ended in (Reason.INTERRUPTED, Reason.FAIL_FAST_STOP, Reason.LAUNCHER_KILLED):
        return "KILLED"
    return "FAILED"


@dataclass
class Started:
    """One launch's MLflow run, between begin and end."""

    trainer_dir: Path
    mlflow: dict  # trackers.json's "mlflow" (run_id, parent_run_id, ...)


@dataclass
class Parent:
    run_id: str
    statuses: list[str] = field(default_factory=list)


@dataclass
class Trackers:
    """A local back end's trackers for one invocation (a launch, or every point of a sweep)."""

    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)
    mode: wandb_env.Mode | None = None
    said: bool = False
    probed: dict[str, str | None] = field(default_factory=dict)
    uris: dict[str, str] = field(default_factory=dict)  # tracking_uri as given ("" : none) -> as used
    parents: dict[str, Parent] = field(default_factory=dict)  # sweep directory -> its parent run
    started: dict[str, Started] = field(default_factory=dict)  # record directory -> its MLflow run

    # -- dryrun ---------------------------------------------------------------------------------
    def check(self, cfg, refuse) -> tuple[dict[str, str], list[str]]:
        """The variables every rank gets (shown by the dry run) and the dry run's notes."""
        names = enabled(cfg)
        if not names:
            return {}, []
        env = {TRACKERS_VAR: ",".join(names), TRACKER_RANKS_VAR: "0"}
        notes = []
        adds: list[str] = []
        if cfg.tracker.wandb.enabled:
            if cfg.tracker.wandb.all_ranks:
                env[TRACKER_RANKS_VAR] = "all"
            if self.mode is None:
                self.mode = wandb_env.decide(cfg, self.environ, lambda url: probe.tcp_answers(url, WANDB_PROBE_S))
            env.update(wandb_env.static_env(cfg, self.mode))
            if self.mode.why:
                notes.append(self.mode.why)
            adds += wandb_env.LAUNCH_VARS
        if cfg.tracker.mlflow.enabled:
            uri = self.uri(cfg)
            if uri not in self.probed:
                self.probed[uri] = mlflow_runs.probe(uri, cfg.tracker.mlflow.timeout)
            problem = self.probed[uri]
            if problem is not None:
                refuse(
                    UserError(
                        URI_KEY,
                        uri,
                        f"the MLflow tracking server does not answer: {problem}",
                        "start it (mlflow server --host H --port P), fix the address, or drop tracker=mlflow",
                    )
                )
            env["MLFLOW_TRACKING_URI"] = uri
            env["MLFLOW_EXPERIMENT_NAME"] = experiment_name(cfg)
            adds += MLFLOW_VARS
        ranks = "every rank logs" if env[TRACKER_RANKS_VAR] == "all" else "global rank 0 logs (W&B off on the others)"
        notes.append(f"trackers: {', '.join(names)}; {ranks}; a real launch adds {', '.join(adds)} (trackers.json)")
        return env, notes

    def uri(self, cfg) -> str:
        given = cfg.tracker.mlflow.tracking_uri or self.environ.get("MLFLOW_TRACKING_URI") or ""
        if given not in self.uris:
            self.uris[given] = given or mlflow_runs.default_uri()
        return self.uris[given]

    # -- submit: the run directory made, nothing started ------------------------------------------
    def begin(self, cfg, launch, record_dir: Path, trainer_dir: str) -> dict[str, str]:
        """The launch's own tracker variables (its identity made or read back)."""
        if not enabled(cfg):
            return {}
        trainer = Path(trainer_dir)
        known = identity.read(trainer)
        if not known and shares_node0s_identity(cfg, record_dir, trainer):
            known = identity.await_node0(trainer, NODE0_WAIT_S)
            if not known:
                print(
                    f"[{PROG}] W&B: node 0's {identity.FILE} did not appear in {trainer} within {NODE0_WAIT_S:g} s "
                    "(not a directory every node shares?): this node's ranks log under an id of its own",
                    file=sys.stderr,
                    flush=True,
                )
        sweep_dir = record_dir.parent if launch.job is not None else None
        env: dict[str, str] = {}
        data = dict(known)
        if cfg.tracker.wandb.enabled:
            if self.mode is not None and self.mode.why and not self.said:
                print(f"[{PROG}] {self.mode.why}", flush=True)
                self.said = True
            group, name = wandb_env.group_and_name(cfg, trainer, sweep_dir, launch.job)
            old = section(known, "wandb")
            static = wandb_env.static_env(cfg, self.mode or wandb_env.Mode("offline"))
            wb = {
                "id": old.get("id") or identity.new_id(),
                "project": static["WANDB_PROJECT"],
                "entity": cfg.tracker.wandb.entity,
                "group": old.get("group") or group,
                "name": old.get("name") or name,
                "mode": static["WANDB_MODE"],
                "dir": str(trainer),
            }
            wb["url"] = wandb_env.url(wb, wandb_env.base_url(cfg, self.environ))
            data["wandb"] = wb
            env.update(wandb_env.launch_env(wb))
        if cfg.tracker.mlflow.enabled and cfg.launcher.node_rank == 0:
            old = section(known, "mlflow")
            ml = self._mlflow(
                cfg, "no run for this launch", self._open_run, cfg, launch, record_dir, trainer, sweep_dir, old
            )
            if ml is not None:
                data["mlflow"] = ml
                env["MLFLOW_RUN_ID"] = ml["run_id"]
                env["MLFLOW_EXPERIMENT_ID"] = ml["experiment_id"]
                self.started[str(record_dir)] = Started(trainer, ml)
        if cfg.launcher.node_rank == 0:  # the job's identity is node 0's: its one writer
            identity.write(trainer, data)
        if record_dir.resolve() != trainer.resolve():
            identity.write(record_dir, data)
        return env

    def _mlflow(self, cfg, failed: str, call, *args):
        """``call(client, *args)``, bounded (mlflow_runs.bounded); a failure (the server went away
        since the probe) costs one line, ``MLflow: <failed>: <why>``, never the launch: None."""
        try:
            with mlflow_runs.bounded(cfg.tracker.mlflow.timeout):
                return call(mlflow_runs.client(self.uri(cfg)), *args)
        except Exception as err:  # noqa: BLE001
            print(f"[{PROG}] MLflow: {failed}: {one_line(err)}", file=sys.stderr, flush=True)
            return None

    def _open_run(
        self, client, cfg, launch, record_dir: Path, trainer: Path, sweep_dir: Path | None, old: dict
    ) -> dict:
        """The launch's MLflow run: trackers.json's reopened (same store), else a new one (a sweep's
        point: a child of its parent); its identity (trackers.json's "mlflow")."""
        uri, name = self.uri(cfg), experiment_name(cfg)
        experiment = mlflow_runs.experiment_id(client, name)
        run_id = old.get("run_id") if old.get("tracking_uri") == uri else None
        if run_id is not None and not mlflow_runs.reopen(client, run_id):
            run_id = None
        parent = old.get("parent_run_id") if run_id is not None else None
        if run_id is None:
            if sweep_dir is not None:
                parent = self._parent(client, experiment, cfg, sweep_dir)
            tags = {**launch_tags(cfg, launch), **cfg.tracker.mlflow.tags}
            run_name = (cfg.run_name or trainer.name) if sweep_dir is None else f"{sweep_dir.name}/{launch.job}"
            run_id = mlflow_runs.create_run(client, experiment, run_name, tags, parent)
        mlflow_runs.log_params(client, run_id, mlflow_runs.flat(config_params(cfg)))
        mlflow_runs.set_tags(client, run_id, {TAG + "run_dir": str(record_dir)})
        return {
            "tracking_uri": uri,
            "experiment": name,
            "experiment_id": experiment,
            "run_id": run_id,
            "parent_run_id": parent,
            "url": mlflow_runs.url(uri, experiment, run_id),
        }

    def _parent(self, client, experiment: str, cfg, sweep_dir: Path) -> str:
        key = str(sweep_dir)
        if key not in self.parents:
            tags = {TAG + "sweep_dir": key, **cfg.tracker.mlflow.tags}
            self.parents[key] = Parent(mlflow_runs.create_run(client, experiment, f"sweep_{sweep_dir.name}", tags))
        return self.parents[key].run_id

    # -- the end ---------------------------------------------------------------------------------------
    def end(
        self,
        cfg,
        record_dir: Path,
        exit_code: int | None,
        reason: str,
        ended: str | None,
        attempts: int,
        goodput: Mapping | None = None,
    ) -> None:
        """The MLflow run's outcome (never raises: a tracker costs a line, never the launch);
        ``goodput``: the ledger status.json was closed with (record.write_end's)."""
        started = self.started.pop(str(record_dir), None)
        if started is None:
            return
        status = outcome_status(exit_code, ended)
        run_id = started.mlflow["run_id"]
        for parent in self.parents.values():
            if parent.run_id == started.mlflow.get("parent_run_id"):
                parent.statuses.append(status)
        tags = {TAG + "outcome": ended or "", TAG + "reason": reason, TAG + "exit_code": str(exit_code)}
        metrics = {"attempts": max(1, attempts), "exit_code": exit_code if exit_code is not None else -1}
        if goodput:
            if isinstance(goodput.get("line"), str):
                tags[TAG + "goodput"] = goodput["line"]
            metrics.update(goodput_metrics(goodput))
        paths = RunPaths(record_dir)
        artifacts = [paths.status, paths.config, started.trainer_dir / LEARNING_CURVE]
        what = f"could not record the end of run {run_id}"
        self._mlflow(cfg, what, mlflow_runs.finish, run_id, status, tags, metrics, artifacts)

    def sweep_end(self, cfg, interrupted: bool) -> None:
        """Each parent run ended: KILLED after a signal, FAILED when a child failed, else FINISHED."""
        for key in list(self.started):  # queued but never run (a parallel sweep's fail_fast, a signal)
            self.end(cfg, Path(key), None, "not run: its sweep stopped first", Reason.INTERRUPTED.value, 0)
        for parent in self.parents.values():
            status = "KILLED" if interrupted else ("FAILED" if "FAILED" in parent.statuses else "FINISHED")
            tags = {TAG + "jobs": str(len(parent.statuses))}
            what = f"could not end the sweep's run {parent.run_id}"
            self._mlflow(cfg, what, mlflow_runs.finish, parent.run_id, status, tags)
        self.parents.clear()


def shares_node0s_identity(cfg, record_dir: Path, trainer: Path) -> bool:
    """A node other than 0 whose ranks log with node 0's W&B id (``tracker.wandb.all_ranks``: each
    rank as ``<id>-rank<R>``) in the directory every node trains in (``run_dir`` given: its record is
    ``node<R>`` below it). Node 0 alone writes that directory's trackers.json; this node reads it."""
    return (
        cfg.launcher.node_rank != 0
        and cfg.tracker.wandb.enabled
        and cfg.tracker.wandb.all_ranks
        and record_dir.resolve() != trainer.resolve()
    )


def section(known: Mapping, name: str) -> dict:
    """trackers.json's part for one tracker ({}: none, or not an object)."""
    part = known.get(name)
    return part if isinstance(part, dict) else {}


def experiment_name(cfg) -> str:
    return cfg.tracker.mlflow.experiment or wandb_env.DEFAULT_PROJECT


def one_line(err: BaseException) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return secrets.redact(text[:300])


def config_params(cfg) -> dict:
    """The composed config, secret values masked (launcher/secrets.py), as plain data."""
    from omegaconf import OmegaConf

    data = OmegaConf.to_container(OmegaConf.structured(secrets.mask_config(cfg)), enum_to_str=True)
    return data if isinstance(data, dict) else {}


def backend_name(cfg, typed) -> str:
    """The back end this launch runs under: a SLURM job's and a pod's launcher= says so, submit=ssh's
    and submit=ray's node launchers were told by what started them (``Typed.submitted_by``).

    >>> from launcher.config.schema import TrainConfig
    >>> from launcher.backends.base import Typed
    >>> cfg = TrainConfig()
    >>> backend_name(cfg, Typed()), backend_name(cfg, Typed(submitted_by="ssh"))
    ('local', 'ssh')
    >>> cfg.launcher.from_slurm = True; backend_name(cfg, Typed())
    'slurm'
    """
    if cfg.launcher.from_slurm:
        return "slurm"
    if cfg.launcher.from_k8s:
        return "k8s"
    if typed.submitted_by:
        return typed.submitted_by
    return "local" if cfg.submit.value == "none" else cfg.submit.value


def git_commit(where: str) -> str | None:
    """The commit of the git checkout ``where`` is in (the training script's), bounded; None: not one."""
    try:
        done = subprocess.run(
            ["git", "-C", where, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=GIT_S, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None


def launch_tags(cfg, launch) -> dict[str, str]:
    """The command (as typed, secrets masked), git commit, hosts and back end."""
    command = [secrets.redact(secrets.mask_override(arg)) for arg in launch.typed.command]
    tags = {
        TAG + "command": shlex.join([PROG, *command]),
        TAG + "hosts": socket.gethostname(),
        TAG + "nodes": str(cfg.launcher.nnodes),
        TAG + "backend": backend_name(cfg, launch.typed),
        TAG + "topology": cfg.launcher.topology.value,
        mlflow_runs.SOURCE_TAG: PROG,
    }
    script = cfg.script or os.getcwd()
    commit = git_commit(os.path.dirname(os.path.abspath(script)) if cfg.script else script)
    if commit:
        tags[mlflow_runs.GIT_COMMIT_TAG] = commit
    return tags


def goodput_metrics(goodput: Mapping) -> dict[str, float]:
    """Every number of the ledger as a metric ``goodput.<key>`` (one level of nesting followed).

    >>> goodput_metrics({"line": "x", "productive_s": 10, "parts": {"restart_s": 2.5}, "flag": True})
    {'goodput.productive_s': 10.0, 'goodput.parts.restart_s': 2.5}
    """
    out: dict[str, float] = {}
    for key, value in goodput.items():
        if isinstance(value, bool):
            continue
        if isinstance(value, int | float):
            out[f"goodput.{key}"] = float(value)
        elif isinstance(value, Mapping):
            for sub, number in value.items():
                if isinstance(number, int | float) and not isinstance(number, bool):
                    out[f"goodput.{key}.{sub}"] = float(number)
    return out
