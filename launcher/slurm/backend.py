"""``submit=slurm`` as a :class:`~launcher.backends.base.Backend`: a batch script per launch, one job
array per ``-m`` sweep; ``squeue``/``sacct``/``scontrol`` say how a job is doing, ``scancel`` stops it.

The job runs ``<this python> -m launcher launcher=slurm <the same overrides> submit=none
run_dir=<run dir> [-- <script args>]`` once per node (``srun --ntasks-per-node=1``), so every node's
launcher derives its topology from SLURM (launcher/slurm/launch.py). A JAX launch becomes
``launcher=slurm_jax``.

:meth:`SlurmBackend.dryrun` checks the job's own config -- derived from the launch's composed config,
not composed again: the job's overrides differ from the launch's only in ``launcher``, ``submit``,
``dry_run`` and ``run_dir`` -- against the allocation the request asks for, so a mistake (more
workers than ``slurm.gpus_per_node``, a missing script, a bad ``#SBATCH`` value) fails in one line
before anything is written. ``launcher.nnodes`` is the job's node count; ``slurm.nodes`` is an alias
that must agree (:func:`job_nodes`).

Import rule: the describe/logs/cancel side imports no Hydra (``runs`` calls it); ``dryrun`` imports
the config, checks and probe lazily. ``sbatch``, ``squeue``, ``sacct``, ``scontrol`` and ``scancel``
are short, synchronous, bounded queries (a timeout on each), not launches.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .. import files, nodes, record
from ..backends.base import (
    SUBMIT_RECORD,
    Handle,
    Launch,
    Point,
    Refused,
    Request,
    State,
    Status,
    refused,
    report_refusals,
)
from ..backends.job_dir import JobDir
from ..errors import UserError
from ..names import PROG, override_key
from ..rundir import SBATCH_TASK as TASK_NAME
from ..rundir import SBATCH_TASKS as TASKS_DIR

if TYPE_CHECKING:
    from ..config.schema import SlurmConfig, TrainConfig
    from ..facts import HostFacts

SCRIPT_NAME = "job.sbatch"
CONFIG_NAME = "config.yaml"
QUERY_TIMEOUT_S = 5.0  # squeue / sacct / scontrol / scancel: a silent controller must not hang `runs`
SBATCH_TIMEOUT_S = 120.0
# SLURM job states -> State
_PENDING = {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "SUSPENDED", "RESV_DEL_HOLD"}
_RUNNING = {"RUNNING", "COMPLETING", "STAGE_OUT", "SIGNALING", "RESIZING"}
_ENDED = {
    "COMPLETED": State.SUCCEEDED,
    "CANCELLED": State.STOPPED,
    "PREEMPTED": State.STOPPED,
    "DEADLINE": State.FAILED,
    "TIMEOUT": State.FAILED,
    "FAILED": State.FAILED,
    "NODE_FAIL": State.FAILED,
    "OUT_OF_MEMORY": State.FAILED,
    "BOOT_FAIL": State.FAILED,
}
_TASK_SECRET_PREFIX = "TRAIN_MULTIGPU_TASK"
_TASK_SECRET = _TASK_SECRET_PREFIX + "{task}_{name}"  # a sweep over secret values: task i's copy of NAME


@dataclass(frozen=True)
class SlurmJob:
    """A request's payload: what the batch script is made of (and the secrets sbatch carries)."""

    slurm: SlurmConfig  # slurm.* with nodes resolved (launcher.nnodes)
    command: tuple[str, ...]  # the job's launcher command, secrets as ${oc.env:NAME}
    job_name: str
    workdir: str
    overrides: tuple[str, ...]  # as typed, secrets masked: the sweep summary's columns
    secret_env: Mapping[str, str] = field(default_factory=dict, repr=False)  # NAME -> value: sbatch's env only
    job_dir: JobDir | None = None  # where submit makes the run directory
    launch: Launch | None = field(default=None, repr=False, compare=False)  # rebuilt from if that name is taken


MOST_NODES = 65536  # a bound for a batch script, well above the largest clusters


def job_nodes(cfg: TrainConfig, typed: Sequence[str]) -> int:
    """The job's node count: ``launcher.nnodes``; ``slurm.nodes`` is its old spelling, which must agree
    (launcher/nodes.py, as on every back end). ``launcher.nnodes`` counts when typed (``typed``: the
    overrides) or other than 1; SLURM is asked for a fixed count, never an elastic range."""
    nnodes = cfg.launcher.nnodes
    nnodes_typed = any(override_key(o) == nodes.NNODES for o in typed)
    text = "" if nnodes is None else str(nnodes).strip()
    if (nnodes_typed or text not in ("", "1")) and not text.isdigit():
        raise UserError(
            nodes.NNODES,
            nnodes,
            "submit=slurm asks SLURM for a fixed node count: a whole number >= 1",
            "an elastic MIN:MAX range is not submitted to SLURM",
        )
    alias = cfg.slurm.nodes
    return nodes.job_nodes(
        nnodes, nnodes_typed, "slurm.nodes", 1 if alias is None else alias, alias is not None, MOST_NODES
    )


def job_config(cfg: TrainConfig, typed: Sequence[str], run_dir: str, nodes: int) -> TrainConfig:
    """The config the job's launcher composes on node 0, derived from the launch's: its overrides are
    the launch's with ``launcher=slurm[_jax]`` (topology from the allocation: nnodes and node_rank
    unless typed), ``submit=none``, no dry run and ``run_dir`` given (:func:`submit.job_overrides`).
    A new config with its own ``launcher`` and ``slurm``; the rest is the launch's own, shared, not
    copied (what reads it changes a copy: :func:`launch.settle`), as a copy of every point's whole
    config cost a sweep's submission 0.1 ms a point."""
    from dataclasses import replace

    from ..config.schema import Submit, Topology

    keys = {override_key(o) for o in typed}
    launcher = replace(
        cfg.launcher,
        topology=cfg.launcher.topology if cfg.launcher.topology is Topology.skrl_jax else Topology.multinode,
        from_slurm=True,
        nnodes=cfg.launcher.nnodes if "launcher.nnodes" in keys else None,
        node_rank=cfg.launcher.node_rank if "launcher.node_rank" in keys else None,
    )
    slurm = replace(cfg.slurm, nodes=nodes)
    return replace(cfg, launcher=launcher, submit=Submit.none, dry_run=False, run_dir=run_dir, slurm=slurm)


def check_job(job: TrainConfig, facts: HostFacts):
    """Validate the job's config against the allocation it asks for, as node 0 will; node 0's config,
    facts and settled values as planned here (what :func:`node0_in_container` shows)."""
    from .. import checks, probe
    from . import launch as slurm_launch
    from .submit import planned_allocation, planned_facts

    job, node_facts = slurm_launch.settle(job, planned_allocation(job.slurm), planned_facts(job.slurm, facts))
    settled = checks.validate(job, node_facts)
    if settled.container is None:  # in an image: checked inside it on the node (launcher/container_probe.py)
        probe.script_exists(job, settled.script, before_submit=True)
    return job, node_facts, settled


def node0_in_container(planned, run_dir: str, order: Sequence[str]) -> str:
    """``container.*``: what node 0's launcher runs inside the job, as planned from here (the dry run
    shows it after the batch script: the batch script starts the node launchers, they start the
    container). SLURM gives the job id, the hosts and the rendezvous port at run time: the
    rendezvous shown is the planned one (``node0``, job ``to be submitted``)."""
    from .. import paths, secrets
    from .. import plan as plan_mod

    job, facts, settled = planned
    plan = plan_mod.wrapped(plan_mod.build(job, settled, facts, run_dir=run_dir, order=order), paths.WORKER_WRAPPER)
    if job.restart.max > 0:  # as the node's own dry run shows a first attempt
        plan = plan_mod.attempt(plan, 0)
    note = (
        "in the job, each node's launcher runs its ranks in the container; node 0's, as planned here "
        "(the job id, hosts and rendezvous port are SLURM's at run time: `launcher=slurm dry_run=true` "
        "in the allocation shows them)"
    )
    return plan_mod.describe(secrets.mask_plan(plan), [note])


def log_path(run_dir: str, job_id: str) -> str:
    return f"{run_dir}/slurm-{job_id}.out"


class SlurmBackend:
    name = "slurm"

    def __init__(self) -> None:
        self._facts: HostFacts | None = None

    # -- dryrun: pure ------------------------------------------------------------------------------
    def dryrun(self, launch: Launch) -> Request:
        from .. import probe, secrets
        from ..config import dump
        from ..config.schema import Topology
        from . import batch, submit

        cfg, typed, run_dir = launch.cfg, launch.typed, str(launch.run_dir)
        by_reference, secret_env = launch.vault.by_reference(typed.overrides)
        submit.check_export(cfg.slurm, list(secret_env))
        nodes = job_nodes(cfg, typed.overrides)
        jax = cfg.launcher.topology is Topology.skrl_jax
        batch.check(cfg.slurm)  # names a bad slurm.* key before the job's own checks
        if self._facts is None:
            self._facts = probe.gather()
        job = job_config(cfg, typed.overrides, run_dir, nodes)
        planned = check_job(job, self._facts)
        command = submit.job_command(
            submit.interpreter(),
            submit.config_flags(typed.hydra_flags),
            submit.job_overrides(by_reference, jax, run_dir),
            typed.script_args,
        )
        payload = SlurmJob(
            slurm=job.slurm,
            command=tuple(command),
            job_name=cfg.slurm.job_name or cfg.run_name or PROG,
            workdir=os.getcwd(),
            overrides=tuple(secrets.mask_override(o) for o in typed.overrides),
            secret_env=dict(secret_env),
            job_dir=JobDir.of(launch),
            launch=launch,
        )
        script = batch.render(
            payload.slurm, payload.command, {}, payload.workdir, payload.job_name, log_path(run_dir, "%j")
        )
        config_yaml = dump.config_yaml(cfg)
        shown = f"# {run_dir}/{SCRIPT_NAME} (dry run: nothing written, nothing submitted)\n{script}"
        if planned[2].container is not None:
            shown += "\n" + node0_in_container(planned, run_dir, typed.script_order)
        return Request(self.name, run_dir, shown, {SCRIPT_NAME: script, CONFIG_NAME: config_yaml}, payload)

    # -- submit ------------------------------------------------------------------------------------
    def submit(self, request: Request) -> Handle:
        """Make the job's run directory (the request is rebuilt for it if the planned name was taken
        since), write the files, ``sbatch`` the script (secrets through sbatch's environment only),
        record the handle in submit.json and announce it."""
        from dataclasses import replace

        job: SlurmJob = request.payload
        if job.job_dir is not None:
            made = job.job_dir.create()
            if str(made) != request.run_dir and job.launch is not None:
                request = self.dryrun(replace(job.launch, run_dir=made))
                job = request.payload
        run_dir = Path(request.run_dir)
        script = _write(run_dir, request.files)
        job_id = _sbatch(script, job.secret_env)
        handle = Handle(self.name, job_id, str(run_dir), _extra(run_dir, job_id, job.overrides))
        record.write_json(run_dir / SUBMIT_RECORD, handle.as_record())
        print(announce(handle), flush=True)
        return handle

    def submit_all(
        self, requests: Sequence[Request], interrupts=None, fail_fast: bool = False
    ) -> list[Handle | Refused | None]:
        """A sweep's points as ONE job array (one per distinct set of ``#SBATCH`` lines, should a
        swept ``slurm.*`` key make them differ); a single request as a plain job. A refusal's error
        is printed once (an array's is every task's)."""
        if len(requests) == 1:
            try:
                out: list[Handle | Refused | None] = [self.submit(requests[0])]
            except UserError as err:
                out = [refused(requests[0], err)]
            report_refusals(out)
            return out
        out = [None] * len(requests)
        for indices in _groups(requests):
            try:
                handles = self._submit_array(_array([requests[i] for i in indices]))
            except UserError as err:
                handles = [refused(requests[i], err) for i in indices]
            for i, handle in zip(indices, handles):
                out[i] = handle
        report_refusals(out)
        return out

    def show(self, requests: Sequence[Request]) -> None:
        """What :meth:`submit_all` writes and submits, for a dry run: a sweep's job array script(s)
        (each point's ``job.sbatch`` is the same file), then each task's file as written, or the one
        request's script."""
        if len(requests) == 1:
            print(requests[0].shown, end="", flush=True)
            return
        shown = []
        for indices in _groups(requests):
            array = _array([requests[i] for i in indices])
            paths = "\n".join(f"#   {r.run_dir}/{SCRIPT_NAME}" for r in array.requests)
            shown.append(
                f"# job array of {len(array.requests)} task(s), written to each point's directory "
                f"(dry run: nothing written, nothing submitted):\n{paths}\n{array.script}"
            )
            reads = f"{array.task_file[0]}<task>{array.task_file[1]}"
            shown.append(f"\n# each task's command, in its point's directory (task <task>'s shell reads {reads}):\n")
            links = array.links or [None] * len(array.tasks)
            for path, link, text in zip(array.task_paths, links, array.tasks):
                shown.append(f"# {path}" + (f" (linked as {link})" if link else "") + f"\n{text}")
        print("".join(shown), end="", flush=True)

    def summary(self, points: Sequence[Point]) -> str | None:
        """The sweep's table (launcher/backends/summary.py): each task's job id or why it has none."""
        from ..backends import summary

        return summary.submitted(points)

    def _submit_array(self, array: _ArrayJob) -> list[Handle]:
        # the script is the same for every point: written once, hard-linked into the other points'
        # directories; each task's command is a file of its own in its point's directory, written
        # whole (renamed into place) before sbatch
        first = _write(Path(array.requests[0].run_dir), {**array.requests[0].files, SCRIPT_NAME: array.script})
        paths = [first, *(_write(Path(r.run_dir), r.files, first) for r in array.requests[1:])]
        for path, text in zip(array.task_paths, array.tasks):
            files.replace_whole(path, text.encode())
        if array.links:
            os.makedirs(os.path.dirname(array.links[0]), exist_ok=True)
            for path, link in zip(array.task_paths, array.links):
                _link_or_copy(Path(path), Path(link))
        array_id = _sbatch(paths[0], array.secret_env)
        handles = []
        for task, request in enumerate(array.requests):
            job_id = f"{array_id}_{task}"
            log = array.output.replace("%A", array_id).replace("%a", str(task))
            run_dir = Path(request.run_dir)
            handle = Handle(self.name, job_id, str(run_dir), _extra(run_dir, job_id, request.payload.overrides, log))
            record.write_json(run_dir / SUBMIT_RECORD, handle.as_record())
            handles.append(handle)
        throttle = array.requests[0].payload.slurm.array_parallelism
        limit = f", at most {throttle} at once" if throttle else ""
        print(f"[{PROG}] submitted SLURM job array {array_id}: {len(handles)} task(s){limit}", flush=True)
        print("\n".join(announce(handle) for handle in handles), flush=True)  # one write, not one a task
        return handles

    def wait(self, handles: Sequence[Handle | Refused | None], interrupts=None, fail_fast: bool = False) -> list[int]:
        """SLURM runs the jobs: nothing to wait for once they are queued."""
        return [0 if isinstance(h, Handle) else h.exit_code for h in handles if h is not None]

    # -- describe / logs / cancel: no Hydra, bounded -----------------------------------------------
    def describe(self, handle: Handle) -> Status:
        word, exit_code = _state_of(handle.id)
        if word is None:
            return Status(State.UNKNOWN, "not known to SLURM (squeue, sacct, scontrol)")
        if word in _PENDING:
            state = State.PENDING
        elif word in _RUNNING:
            state = State.RUNNING
        else:
            state = _ENDED.get(word, State.UNKNOWN)
        return Status(state, word, exit_code)

    def logs(self, handle: Handle, rank: int | None = None, follow: bool = False) -> Iterator[str]:
        """The job's ``slurm-<id>.out`` (``rank`` None), else that rank's log under the run directory
        (the latest restart's, node by node); ``follow``: until the job ends."""
        path = Path(handle.extra.get("log") or log_path(handle.run_dir, handle.id))
        if rank is not None:
            found = sorted(Path(handle.run_dir).rglob(f"rank{rank}.log"), key=_mtime)
            if not found:
                return
            path = found[-1]
        yield from _read_lines(path, follow, lambda: self.describe(handle).state.ended)

    def cancel(self, handle: Handle) -> None:
        scancel = shutil.which("scancel")
        if scancel is None:
            raise UserError(
                "submit", "slurm", "scancel is not on PATH", f"cancel job {handle.id} on a SLURM login node"
            )
        try:
            out = subprocess.run([scancel, handle.id], capture_output=True, text=True, timeout=QUERY_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise UserError(
                "submit", "slurm", f"scancel {handle.id} did not answer within {QUERY_TIMEOUT_S:g} s"
            ) from None
        if out.returncode != 0:
            raise UserError("submit", "slurm", f"scancel {handle.id} refused: {out.stderr.strip()}")


@dataclass(frozen=True)
class _ArrayJob:
    requests: tuple[Request, ...]
    script: str  # the same at any number of tasks but for its --array line
    tasks: tuple[str, ...]  # task i's file (batch.render_task)
    task_paths: tuple[str, ...]  # where task i's file is written: its point's directory
    task_file: tuple[str, str]  # where task i's shell reads it: task_file[0] + i + task_file[1]
    links: tuple[str, ...] | None  # task_file's paths, links to task_paths: where those are not them
    output: str
    secret_env: Mapping[str, str] = field(repr=False)


def _groups(requests: Sequence[Request]) -> list[list[int]]:
    """The requests' indices by their ``#SBATCH`` settings: one job array each."""
    groups: dict[tuple, list[int]] = {}
    for i, request in enumerate(requests):
        job: SlurmJob = request.payload
        groups.setdefault((repr(job.slurm), job.job_name, job.workdir), []).append(i)
    return list(groups.values())


def _array(requests: Sequence[Request]) -> _ArrayJob:
    """One job array (pure): its script, the same at any number of points, and task ``i``'s file,
    which holds ``requests[i]``'s command (each task reads its own: nothing read grows with the
    points but the task count)."""
    from . import batch, submit

    jobs: list[SlurmJob] = [r.payload for r in requests]
    first = jobs[0]
    secret_env, task_env = _array_secrets(jobs)
    submit.check_export(first.slurm, list(secret_env))
    dirs = [Path(r.run_dir) for r in requests]
    # each task logs into its own run directory when they are <sweep dir>/<task> (Hydra's sweep
    # subdir), and its shell finds its command there; else all logs go to the sweep directory and
    # the commands are read from links in the first point's directory, by task
    parent = dirs[0].parent
    own_dirs = all(d.parent == parent and d.name == str(i) for i, d in enumerate(dirs))
    output = f"{parent}/%a/slurm-%A_%a.out" if own_dirs else f"{parent}/slurm-%A_%a.out"
    task_file = (f"{parent}/", f"/{TASK_NAME}") if own_dirs else (f"{dirs[0]}/{TASKS_DIR}/", "")
    unset = _TASK_SECRET_PREFIX if secret_env and any(task_env) else None
    script = batch.render_array(first.slurm, len(jobs), task_file, unset, first.workdir, first.job_name, output)
    tasks = tuple(batch.render_task(i, job.command, env) for i, (job, env) in enumerate(zip(jobs, task_env)))
    paths = tuple(f"{r.run_dir}/{TASK_NAME}" for r in requests)
    links = None if own_dirs else tuple(f"{task_file[0]}{i}" for i in range(len(jobs)))
    return _ArrayJob(tuple(requests), script, tasks, paths, task_file, links, output, secret_env)


def announce(handle: Handle) -> str:
    job, log = handle.id, handle.extra.get("log", "")
    return "\n".join(
        [
            f"[{PROG}] submitted SLURM job {job}",
            f"[{PROG}]   script: {handle.run_dir}/{SCRIPT_NAME}",
            f"[{PROG}]   log:    {log}   (per-rank logs under {handle.run_dir}/logs)",
            f"[{PROG}]   follow: squeue -j {job}   scontrol show job {job}   tail -f {log}",
        ]
    )


def _extra(run_dir: Path, job_id: str, overrides: Sequence[str], log: str | None = None) -> dict[str, str]:
    return {
        "script": str(run_dir / SCRIPT_NAME),
        "log": log or log_path(str(run_dir), job_id),
        "overrides": shlex.join(overrides),
    }


def _write(run_dir: Path, files: Mapping[str, str], script_of: Path | None = None) -> Path:
    """The request's files in the run directory (created); the script made executable. ``script_of``:
    a job array's script already written, linked here instead of written again."""
    run_dir.mkdir(parents=True, exist_ok=True)
    script = run_dir / SCRIPT_NAME
    files = dict(files)
    linked = False
    if script_of is not None:
        files.pop(SCRIPT_NAME, None)
        linked = _link_or_copy(script_of, script)
    for name, text in files.items():
        (run_dir / name).write_text(text)
    if not linked:  # a link is the script already made executable
        script.chmod(0o755)
    return script


def _link_or_copy(source: Path, target: Path) -> bool:
    """``target`` as a hard link to ``source`` (True); a copy where the file system has no hard links."""
    try:
        os.link(source, target)
        return True
    except OSError:
        files.replace_whole(target, source.read_bytes())
        return False


def _sbatch(script: Path, secret_env: Mapping[str, str]) -> str:
    """``sbatch --parsable``: the job id. Secret values reach the job through sbatch's environment
    (``--export=ALL``), never the script."""
    sbatch = shutil.which("sbatch")
    if sbatch is None:
        raise UserError(
            "submit", "slurm", "sbatch is not on PATH", f"submit from a SLURM login node; the script is {script}"
        )
    try:
        out = subprocess.run(
            [sbatch, "--parsable", str(script)],
            capture_output=True,
            text=True,
            timeout=SBATCH_TIMEOUT_S,
            env={**os.environ, **secret_env},
        )
    except subprocess.TimeoutExpired:
        raise UserError(
            "submit", "slurm", f"sbatch did not answer within {SBATCH_TIMEOUT_S:g} s", f"script: {script}"
        ) from None
    if out.returncode != 0:
        why = " ".join(line.strip() for line in out.stderr.strip().splitlines()[-2:]) or f"exit code {out.returncode}"
        raise UserError("submit", "slurm", f"sbatch refused the job: {why}", f"script: {script}")
    return out.stdout.strip().split(";")[0]


def _array_secrets(jobs: Sequence[SlurmJob]) -> tuple[dict[str, str], list[dict[str, str]]]:
    """sbatch's environment for a job array, and what each task exports: the points' secrets as they
    are when every point has the same; else each task's under its own name, the others unset.

    >>> a, b = (SlurmJob(None, ("x",), "j", "/", (), {"T": v}) for v in ("1", "2"))
    >>> _array_secrets([a, a])
    ({'T': '1'}, [{}, {}])
    >>> _array_secrets([a, b])
    ({'TRAIN_MULTIGPU_TASK0_T': '1', 'TRAIN_MULTIGPU_TASK1_T': '2'}, [{'T': 'TRAIN_MULTIGPU_TASK0_T'}, {'T': 'TRAIN_MULTIGPU_TASK1_T'}])
    """  # noqa: E501
    if all(dict(j.secret_env) == dict(jobs[0].secret_env) for j in jobs):
        return dict(jobs[0].secret_env), [{} for _ in jobs]
    env: dict[str, str] = {}
    tasks: list[dict[str, str]] = []
    for task, job in enumerate(jobs):
        own = {}
        for name, value in job.secret_env.items():
            env[_TASK_SECRET.format(task=task, name=name)] = value
            own[name] = _TASK_SECRET.format(task=task, name=name)
        tasks.append(own)
    return env, tasks


def _query(argv: Sequence[str]) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=QUERY_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout


def _valid(job_id: str) -> bool:
    return bool(job_id) and job_id.replace("_", "").isdigit()


def states(job_ids: Sequence[str]) -> dict[str, str]:
    """job id (``123`` or an array task's ``123_4``) -> SLURM state (first word, e.g. ``RUNNING``)
    for the jobs SLURM knows: ``squeue``, then ``sacct`` (needs accounting), then ``scontrol show
    job`` (kept for MinJobAge after the end). One bounded query per command for all jobs."""
    found: dict[str, str] = {}
    ids = [j for j in dict.fromkeys(job_ids) if _valid(j)]
    if not ids:
        return found
    if shutil.which("squeue"):
        for line in _query(["squeue", "-h", "-r", "-o", "%i %T", "-j", ",".join(ids)]).splitlines():
            words = line.split()
            if len(words) == 2 and words[0] in ids:
                found[words[0]] = words[1]
    left = [j for j in ids if j not in found]
    if left and shutil.which("sacct"):
        for line in _query(["sacct", "-n", "-X", "-P", "-o", "JobID,State", "-j", ",".join(left)]).splitlines():
            job, _, state = line.partition("|")
            if job in left and state:
                found[job] = state.split()[0]
    left = [j for j in ids if j not in found]
    if left and shutil.which("scontrol"):
        for job in left[:20]:  # one call per job: only a few
            word = _scontrol(job).get("JobState")
            if word:
                found[job] = word
    return found


def _scontrol(job_id: str) -> dict[str, str]:
    """``scontrol show job -o``'s fields (an array task's own record, when asked by ``A_T``)."""
    text = _query(["scontrol", "show", "job", "-o", job_id]) if shutil.which("scontrol") else ""
    line = text.splitlines()[0] if text.strip() else ""
    return dict(word.split("=", 1) for word in line.split() if "=" in word)


def _state_of(job_id: str) -> tuple[str | None, int | None]:
    """One job's state word and, once it ended, its exit code (``ExitCode=7:0`` -> 7)."""
    word = states([job_id]).get(job_id) if _valid(job_id) else None
    exit_code = None
    if word is not None and word not in _PENDING | _RUNNING:
        code = _scontrol(job_id).get("ExitCode", "")
        if code.split(":")[0].isdigit():
            exit_code = int(code.split(":")[0])
    return word, exit_code


def _mtime(path: Path) -> float:
    """When ``path`` itself last changed (a link to nothing, or a name removed since: 0)."""
    try:
        return path.lstat().st_mtime
    except OSError:
        return 0.0


def _read_lines(path: Path, follow: bool, ended, poll_s: float = 0.5) -> Iterator[str]:
    """A log's lines; ``follow``: and new ones as they come, until ``ended()`` and nothing more."""
    position = 0
    partial = ""
    while True:
        try:  # a regular file only (a record names the path: a FIFO would block, /dev/zero never end), by chunks
            with files.open_regular(path) as log:
                log.seek(position)
                chunk = log.read(1 << 20)
                position = log.tell()
        except FileNotFoundError:
            chunk = b""
        except OSError as err:
            raise UserError("log", str(path), f"{err.strerror or err}: not read") from None
        text = partial + chunk.decode(errors="replace")
        *lines, partial = text.split("\n")
        yield from lines
        if chunk:  # read on to the end (a file larger than a chunk)
            continue
        if not follow or ended():
            break
        time.sleep(poll_s)
    if partial:
        yield partial
