"""From a validated config to the exact processes to start. Pure: no I/O, no environment reads.

torchrun path (single_node, multinode)::

    <python> -m torch.distributed.run --nproc_per_node N [--standalone] [torchrun flags in Isaac Lab's
        order] <script> [--rl_library L] [--task=..] [...] [preset args] [forwarded] --distributed

JAX path (skrl_jax): one process per local rank, started by train_multigpu itself, each with the
variables ``python -m skrl.utils.distributed.jax`` would set (JAX_LOCAL_RANK, JAX_RANK,
JAX_WORLD_SIZE, JAX_COORDINATOR_ADDR, JAX_COORDINATOR_PORT).
"""

from __future__ import annotations

import math
import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from . import container as container_mod
from . import cpu_binding, rendezvous
from .addresses import Endpoint
from .config.schema import TORCHRUN_FLAGS, Topology, TrainConfig
from .container import Container
from .facts import NODE_PORT_DEFAULT, HostFacts, Settled
from .names import (
    ATTEMPT_VAR,
    BACKEND_VAR,
    CPU_BIND_VAR,
    FR_BUFFER_VARS,
    FR_DIR,
    FR_DUMP_ON_TIMEOUT_VAR,
    FR_PIPE_FILE_VAR,
    FR_PIPE_PREFIX,
    FR_TEMP_FILE_VARS,
    FR_TRACE_PREFIX,
    HEARTBEAT_VAR,
    LAUNCH_ID_VAR,
    LOG_DIR_VAR,
    NODE_RANK_VAR,
    OMP_THREADS_VAR,
    RANK_LOGS_VAR,
    RUN_DIR_VAR,
)
from .trackers import wandb_env

# torchrun flags after --nproc_per_node, in the order Isaac Lab's train_multigpu emits them
TORCHRUN_FLAG_ORDER = ("nnodes", "node_rank", *TORCHRUN_FLAGS)
# new torchrun flags, after Isaac Lab's ones (Isaac Lab's commands stay a prefix of ours)
LOCAL_ADDR_FLAG = "--local_addr"
VIRTUAL_LOCAL_RANK_FLAG = "--virtual_local_rank"
# torchrun's wait for its workers after SIGTERM before SIGKILL (torch 2.13: --shutdown_timeout,
# default 30 s): launcher.grace_period, given when it is not torchrun's default. torch applies it to a
# stop signal only; after a worker failed it waits 30 s whatever it says: the supervisor applies the
# grace period there itself (run/supervise.py)
SHUTDOWN_TIMEOUT_FLAG = "--shutdown_timeout"
# launcher.cpu_binding where torchrun binds the ranks (launcher/cpu_placement.py)
NUMA_BINDING_FLAG = "--numa-binding"
TORCHRUN_SHUTDOWN_S = 30
# what launcher.network_interface sets for every worker
INTERFACE_VARS = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")
TRAINING_FIELDS = ("task", "num_envs", "max_iterations", "seed", "run_name")
DISTRIBUTED_FLAG = "--distributed"
# entries of the typed order (grammar.CommandLine.order); plan stays free of the grammar module
ARG_ENTRY = ""
PRESET_ENTRY = "presets:"
PRESETS_ARG = "presets="  # Isaac Lab's training script's preset selector
JAX_RANK_VARS = ("JAX_LOCAL_RANK", "JAX_RANK", "JAX_WORLD_SIZE", "JAX_COORDINATOR_ADDR", "JAX_COORDINATOR_PORT")
# JAX's persistent compilation cache (read by JAX from the environment): a JAX launch keeps the
# programs it compiled in its run directory, every one (JAX's default keeps only those that took a
# second or more: an RL step is many small programs), so a restart, a requeue or a resume there
# loads them instead of compiling again (docs/recovery.md); a directory the user or a profile set wins
JAX_CACHE_VAR, JAX_CACHE_DIR = "JAX_COMPILATION_CACHE_DIR", "jax_cache"
JAX_CACHE_MIN_TIME_VAR = "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"
# what torchrun sets for each worker (torch/distributed/elastic/agent/server/local_elastic_agent.py)
TORCHRUN_WORKER_VARS = (
    "RANK",
    "LOCAL_RANK",
    "GROUP_RANK",
    "ROLE_RANK",
    "ROLE_NAME",
    "LOCAL_WORLD_SIZE",
    "WORLD_SIZE",
    "GROUP_WORLD_SIZE",
    "ROLE_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_USE_AGENT_STORE",
    "TORCHELASTIC_ERROR_FILE",
    "TORCHELASTIC_SIGNALS_TO_HANDLE",  # torch/distributed/launcher/api.py, from --signals_to_handle
)
# Every variable the launch itself sets for the workers, over any worker_env/profile.env value
# (CUDA_VISIBLE_DEVICES: a sweep lane's GPUs; else the launcher counts GPUs from its own
# environment, which a worker-only value would contradict). checks.validate refuses them.
LAUNCH_VARS = (
    "PYTHONUNBUFFERED",
    BACKEND_VAR,
    RUN_DIR_VAR,
    LOG_DIR_VAR,
    RANK_LOGS_VAR,
    NODE_RANK_VAR,
    LAUNCH_ID_VAR,
    HEARTBEAT_VAR,
    ATTEMPT_VAR,
    CPU_BIND_VAR,
    OMP_THREADS_VAR,
    "CUDA_VISIBLE_DEVICES",
    *JAX_RANK_VARS,
    *TORCHRUN_WORKER_VARS,
)
# torchrun flags with which torchrun, not the launcher, handles the workers' output
TORCHRUN_OUTPUT_FLAGS = ("--tee", "--redirects", "--log_dir")
IMAGE_PYTHON = "python3"  # the interpreter in a container image when python= is not given
# the variables supervised()/attempt() add (a container passes each by name: the dry run shows them)
SUPERVISED_VARS = (RUN_DIR_VAR, LOG_DIR_VAR, RANK_LOGS_VAR, NODE_RANK_VAR, LAUNCH_ID_VAR, ATTEMPT_VAR)
FR_BUFFER_SIZE = "2000"  # torch's own default since 2.5 (earlier: 0, the recorder off)


@dataclass(frozen=True)
class ProcessSpec:
    """One process the launcher starts: its argv and the variables added for it alone."""

    name: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    local_rank: int | None = None
    global_rank: int | None = None


@dataclass(frozen=True)
class NodeWatch:
    """How this node's launcher and the other nodes' watch each other (launcher/run/monitor/liveness.py):
    node 0's launcher listens on ``port``, every other node's connects to ``host:port``; a node
    silent for ``timeout`` s, or gone without a goodbye, is lost."""

    node_rank: int
    nnodes: int
    host: str
    port: int
    timeout: float
    port_value: str  # launcher.node_port as the user gave it, or how it was chosen (for messages)
    min_nodes: int | None = None  # elastic launcher.nnodes=MIN:MAX: MIN (nnodes is MAX); None: a fixed count


@dataclass(frozen=True)
class LaunchPlan:
    topology: Topology
    profile: str
    device: str
    backend: str  # torch.distributed / JAX collectives backend the workers should use
    nproc_per_node: int
    nnodes: str
    node_rank: int
    script: str
    env: Mapping[str, str]  # added to every process
    processes: tuple[ProcessSpec, ...]
    grace_period: float
    log_all_ranks: bool
    # set by supervised(): each rank writes logs/rank<R>.log (False when torchrun's own
    # tee/redirects/log_dir handle the output), and the local ranks the console shows (None: rank 0)
    rank_logs: bool = False
    console_local_ranks: tuple[int, ...] | None = None
    # what the launcher chose on the user's behalf, one comment line each in the dry run
    notes: tuple[str, ...] = ()
    # set by wrapped(): the worker wrapper in front of every rank's script (launcher/run/worker.py)
    wrapper: str | None = None
    # the NCCL flight recorder's file variables supervised() points into <run_dir>/nccl/ (CUDA torchrun
    # launches, those the user did not set; see flight_recorder_env)
    nccl_dump_vars: tuple[str, ...] = ()
    # the hang watchdog (launcher/run/monitor/progress.py): seconds without progress, and before a rank's
    # first sign of life; None: off
    hang_timeout: float | None = None
    startup_timeout: float | None = None
    # a rank this many times slower than the others' median is named (run/monitor/stragglers.py); None: off
    straggler_factor: float | None = None
    # the launchers of a multi-node launch watch each other (None: they do not)
    nodes: NodeWatch | None = None
    # container.image: each process runs inside it (launcher/container.py; :func:`started` is its argv)
    container: Container | None = None


def _flag_value(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def script_args(cfg: TrainConfig, settled: Settled, order: Sequence[str] = ()) -> list[str]:
    """The training script's arguments, ``--distributed`` exactly once and last.

    ``--rl_library`` comes first (as in Isaac Lab); then what the command line did not give (the
    profile's and presets' training values, their preset arguments, in a fixed order); then what it
    gave, in the order typed (``order``, see grammar.CommandLine.order): the training keys, the
    ``presets=`` choices' arguments and the forwarded arguments, interleaved as the user wrote them.
    """
    typed = set(order)
    fields = TRAINING_FIELDS + ("device", "ml_framework")
    cmdline_count = sum(1 for entry in order if entry == ARG_ENTRY)
    profile_args, cmdline_args = _split(cfg.script_args, cmdline_count)

    def field_args(name: str) -> list[str]:
        if name == "device":
            return ["--device", settled.device] if cfg.device.value != "auto" else []
        if name == "ml_framework":
            return ["--ml_framework", "jax"] if cfg.launcher.topology is Topology.skrl_jax else []
        value = getattr(cfg, name)
        return [] if value is None else [f"--{name}={_flag_value(value)}"]

    args: list[str] = []
    if cfg.profile.pass_rl_library:
        args += ["--rl_library", cfg.rl_library.name]
    for name in TRAINING_FIELDS:
        if name not in typed:
            args += field_args(name)
    typed_presets = {
        name for entry in typed if entry.startswith(PRESET_ENTRY) for name in entry[len(PRESET_ENTRY) :].split(",")
    }
    for preset, preset_args in cfg.preset_args.items():
        if preset not in typed_presets:
            args += list(preset_args)
    for name in ("device", "ml_framework"):
        if name not in typed:
            args += field_args(name)
    args += profile_args
    args += wandb_env.isaaclab_args(cfg)  # tracker=wandb as Isaac Lab's scripts take it (before what was typed)
    done: set[str] = set()
    forwarded = iter(cmdline_args)
    for entry in order:
        if entry == ARG_ENTRY:
            args.append(next(forwarded))
        elif entry in done:
            continue  # typed twice: the config holds the value in force; it goes where first typed
        elif entry in fields:
            args += field_args(entry)
        elif entry.startswith(PRESET_ENTRY):
            args += _typed_preset_args(cfg, entry[len(PRESET_ENTRY) :].split(","))
        done.add(entry)
    args += list(forwarded)
    return [arg for arg in args if arg != DISTRIBUTED_FLAG] + [DISTRIBUTED_FLAG]


def _typed_preset_args(cfg: TrainConfig, names: Sequence[str]) -> list[str]:
    """The arguments of the presets one ``presets=`` override chose. Their bare ``presets=NAME``
    arguments (Isaac Lab's presets, ours or forwarded) become one ``presets=A,B`` where the first
    one stood, as Isaac Lab's own launcher passes ``presets=A,B`` on."""
    args: list[str] = []
    bare: list[str] = []
    for name in names:
        for arg in cfg.preset_args.get(name, ()):
            if arg.startswith(PRESETS_ARG) and "," not in arg and len(arg) > len(PRESETS_ARG):
                if not bare:
                    args.append(arg)
                bare.append(arg[len(PRESETS_ARG) :])
            else:
                args.append(arg)
    if len(bare) > 1:
        args[args.index(PRESETS_ARG + bare[0])] = PRESETS_ARG + ",".join(bare)
    return args


def _split(values: Sequence[str], tail: int) -> tuple[list[str], list[str]]:
    """(values[:-tail], values[-tail:]); the command line's script arguments are the last ones."""
    cut = max(0, len(values) - tail)
    return list(values[:cut]), list(values[cut:])


def _common_env(cfg: TrainConfig, settled: Settled, facts: HostFacts, run_dir: str | None) -> dict[str, str]:
    env: dict[str, str] = {}
    if cfg.launcher.network_interface is not None:  # a profile's or the user's variable wins
        env.update({name: cfg.launcher.network_interface for name in INTERFACE_VARS})
    elif settled.facing is not None:  # found by probe.locate; the launcher's own environment wins too
        env.update({name: settled.facing.interface for name in INTERFACE_VARS if name not in facts.env})
    env.update(cfg.profile.env)
    env.update(cfg.worker_env)
    env["PYTHONUNBUFFERED"] = "1"
    env[BACKEND_VAR] = "nccl" if settled.device == "cuda" else "gloo"
    if run_dir is not None:
        env[RUN_DIR_VAR] = run_dir
    user_omp = "OMP_NUM_THREADS" in facts.env or "OMP_NUM_THREADS" in env
    if settled.cpu_lists:
        if settled.numa_binding is None:  # the rank wrapper binds (run/worker.py)
            env[CPU_BIND_VAR] = cpu_binding.encode(settled.cpu_lists)
        if not user_omp:  # each rank's from its mask, set by the wrapper; the smallest for torchrun itself
            threads = cpu_binding.omp_threads(settled.cpu_lists)
            env["OMP_NUM_THREADS"] = str(min(threads))
            env[OMP_THREADS_VAR] = ";".join(map(str, threads))
    elif not user_omp:
        env["OMP_NUM_THREADS"] = str(max(1, facts.usable_cpus // settled.nproc_per_node))
    if settled.device == "cpu" and cfg.launcher.topology is Topology.skrl_jax:
        env.setdefault("JAX_PLATFORMS", "cpu")
    jax_cache = run_dir is not None and cfg.launcher.topology is Topology.skrl_jax
    if jax_cache and JAX_CACHE_VAR not in facts.env and JAX_CACHE_VAR not in env:
        env[JAX_CACHE_VAR] = os.path.join(run_dir, JAX_CACHE_DIR)
        env.setdefault(JAX_CACHE_MIN_TIME_VAR, "0")
    if _flight_recorder(cfg, settled):
        env.update(flight_recorder_env({**facts.env, **env}))
    if cfg.launcher.topology is Topology.skrl_jax and facts.env.get("WORLD_SIZE", "1") != "1":
        # a PyTorchJob pod sets WORLD_SIZE (launcher=k8s_jax): skrl's torch side reads it at import
        # and would start an NCCL process group in every JAX rank
        env["WORLD_SIZE"] = "1"
    return env


def _flight_recorder(cfg: TrainConfig, settled: Settled) -> bool:
    """PyTorch's NCCL flight recorder applies: a torchrun launch on CUDA (NCCL)."""
    return settled.device == "cuda" and cfg.launcher.topology is not Topology.skrl_jax


def flight_recorder_env(given: Mapping[str, str]) -> dict[str, str]:
    """The flight recorder's switches (ring buffer, dump on a collective timeout) that ``given`` (the
    launcher's environment and worker_env/profile.env) does not set under any of their names.

    >>> flight_recorder_env({})
    {'TORCH_NCCL_TRACE_BUFFER_SIZE': '2000', 'TORCH_NCCL_DUMP_ON_TIMEOUT': '1'}
    >>> flight_recorder_env({"TORCH_FR_BUFFER_SIZE": "0"})
    {'TORCH_NCCL_DUMP_ON_TIMEOUT': '1'}
    """
    env = {}
    if not any(name in given for name in FR_BUFFER_VARS):
        env[FR_BUFFER_VARS[0]] = FR_BUFFER_SIZE
    if FR_DUMP_ON_TIMEOUT_VAR not in given:
        env[FR_DUMP_ON_TIMEOUT_VAR] = "1"
    return env


def flight_recorder_paths(names: Sequence[str], run_dir: str) -> dict[str, str]:
    """Where the flight recorder's file variables ``names`` point: dumps ``<run_dir>/nccl/trace_rank_<R>``,
    pipes ``<run_dir>/nccl/pipe_rank_<R>.pipe`` (torch appends the rank, and ``.pipe``)."""
    prefixes = {FR_PIPE_FILE_VAR: FR_PIPE_PREFIX}
    return {name: os.path.join(run_dir, FR_DIR, prefixes.get(name, FR_TRACE_PREFIX)) for name in names}


def flight_recorder_files(given: Mapping[str, str]) -> tuple[str, ...]:
    """The flight recorder's file variables (dump file, dump-on-demand pipe) that ``given`` does not set.

    >>> flight_recorder_files({"TORCH_FR_DUMP_TEMP_FILE": "/scratch/fr_"})
    ('TORCH_NCCL_DEBUG_INFO_PIPE_FILE',)
    """
    names = () if any(name in given for name in FR_TEMP_FILE_VARS) else (FR_TEMP_FILE_VARS[0],)
    return names + (() if FR_PIPE_FILE_VAR in given else (FR_PIPE_FILE_VAR,))


def _torchrun(cfg: TrainConfig, settled: Settled, python: str, order: Sequence[str]) -> ProcessSpec:
    launcher = cfg.launcher
    argv = [python, "-m", "torch.distributed.run", "--nproc_per_node", str(settled.nproc_per_node)]
    standalone = (
        launcher.topology is Topology.single_node
        and launcher.master_port is None
        and launcher.rdzv_endpoint is None
        and launcher.rdzv_backend is None
    )
    if standalone:
        argv.append("--standalone")
    values = {name: getattr(launcher, name) for name in TORCHRUN_FLAG_ORDER}
    multi = settled.max_nodes > 1
    values["nnodes"] = settled.nnodes if multi else None
    values["node_rank"] = launcher.node_rank if multi else None
    if settled.rdzv_endpoint is not None:
        values["rdzv_endpoint"] = str(settled.rdzv_endpoint)
        if launcher.rdzv_backend is None:
            values["rdzv_backend"] = "c10d"
    values["rdzv_conf"] = rendezvous.conf(
        dict(settled.rdzv_conf), settled.rdzv_backend, multi, launcher.join_timeout, _is_host(cfg, settled)
    )
    for name in TORCHRUN_FLAG_ORDER:
        if values[name] is not None:
            argv += [f"--{name}", _flag_value(values[name])]
    if settled.local_addr is not None:
        argv += [LOCAL_ADDR_FLAG, settled.local_addr]
    shutdown = shutdown_timeout(launcher.grace_period)
    if shutdown != TORCHRUN_SHUTDOWN_S:  # declared before --virtual_local_rank in torch/distributed/run.py
        argv += [SHUTDOWN_TIMEOUT_FLAG, str(shutdown)]
    if settled.numa_binding is not None:  # torchrun binds each worker near its GPU (cpu_placement.py)
        argv += [NUMA_BINDING_FLAG, settled.numa_binding]
    if launcher.virtual_local_rank:  # a switch, declared after --local_addr in torch/distributed/run.py
        argv.append(VIRTUAL_LOCAL_RANK_FLAG)
    argv.append(settled.script)
    return ProcessSpec(name="torchrun", argv=tuple(argv + script_args(cfg, settled, order)))


def shutdown_timeout(grace_period: float) -> int:
    """torchrun's ``--shutdown_timeout`` (whole seconds) for ``launcher.grace_period``: the time its
    workers get after SIGTERM, after a worker failed as after a stop (rounded up: never shorter).

    >>> shutdown_timeout(15), shutdown_timeout(0.5), shutdown_timeout(0), shutdown_timeout(30.0)
    (15, 1, 0, 30)
    """
    return math.ceil(grace_period)


def _is_host(cfg: TrainConfig, settled: Settled) -> bool | None:
    """c10d: explicit launcher.is_host, else node 0 hosts when this machine holds the endpoint's
    address (the other nodes on this machine do not); a node elsewhere whose own host name does not
    resolve does not host (torch's guess resolves that name and fails with a gaierror); else
    torch's own guess (nothing emitted)."""
    if cfg.launcher.is_host is not None:
        return cfg.launcher.is_host
    if settled.rdzv_backend != "c10d" or settled.max_nodes < 2:
        return None
    if settled.endpoint_here:
        return cfg.launcher.node_rank == 0
    if settled.endpoint_here is False and settled.own_name_resolves is False:
        return False
    return None


def _jax_ranks(cfg: TrainConfig, settled: Settled, python: str, order: Sequence[str]) -> tuple[ProcessSpec, ...]:
    assert settled.coordinator is not None, "the JAX coordinator is chosen before planning"
    nproc, node_rank = settled.nproc_per_node, cfg.launcher.node_rank
    argv = (python, settled.script, *script_args(cfg, settled, order))
    ranks = []
    for local in range(nproc):
        rank = node_rank * nproc + local
        values = (local, rank, settled.max_nodes * nproc, settled.coordinator.host, settled.coordinator.port)
        env = {name: str(value) for name, value in zip(JAX_RANK_VARS, values)}
        ranks.append(ProcessSpec(f"rank {rank}", argv, MappingProxyType(env), local_rank=local, global_rank=rank))
    return tuple(ranks)


def build(
    cfg: TrainConfig, settled: Settled, facts: HostFacts, run_dir: str | None = None, order: Sequence[str] = ()
) -> LaunchPlan:
    """``order``: the command line's typed order of script-bound values (grammar.CommandLine.order);
    empty: the fixed order (training keys, presets, device, script arguments)."""
    # in a container the interpreter is the image's (python= names it there)
    python = cfg.python or (IMAGE_PYTHON if settled.container is not None else facts.python)
    if cfg.launcher.topology is Topology.skrl_jax:
        processes = _jax_ranks(cfg, settled, python, order)
    else:
        processes = (_torchrun(cfg, settled, python, order),)
    env = _common_env(cfg, settled, facts, run_dir)
    if settled.container is not None:  # container.env's NAME=VALUE: for the runtime, passed in by name
        env.update({name: value for name, value in settled.container.values if name not in env})
    dump_vars = flight_recorder_files({**facts.env, **env}) if _flight_recorder(cfg, settled) else ()
    nodes = _node_watch(cfg, settled)
    return LaunchPlan(
        nccl_dump_vars=dump_vars,
        notes=_notes(cfg, settled, env),
        nodes=nodes,
        topology=cfg.launcher.topology,
        profile=cfg.profile.name,
        device=settled.device,
        backend=env[BACKEND_VAR],
        nproc_per_node=settled.nproc_per_node,
        nnodes=settled.nnodes,
        node_rank=cfg.launcher.node_rank,
        script=settled.script,
        env=MappingProxyType(env),
        processes=processes,
        grace_period=cfg.launcher.grace_period,
        log_all_ranks=cfg.log_all_ranks,
        hang_timeout=cfg.launcher.hang_timeout,
        startup_timeout=cfg.launcher.startup_timeout,
        straggler_factor=cfg.launcher.straggler_factor,
        container=settled.container,
    )


def _node_watch(cfg: TrainConfig, settled: Settled) -> NodeWatch | None:
    hub = settled.node_hub
    if hub is None or not cfg.launcher.node_timeout:
        return None
    given = cfg.launcher.node_port
    return NodeWatch(
        node_rank=cfg.launcher.node_rank,
        nnodes=settled.max_nodes,
        host=hub.host,
        port=hub.port,
        timeout=float(cfg.launcher.node_timeout),
        port_value=str(given) if given is not None else f"{hub.port} ({NODE_PORT_DEFAULT})",
        min_nodes=settled.min_nodes if settled.min_nodes != settled.max_nodes else None,
    )


def _node_watch_notes(nodes: NodeWatch | None) -> tuple[str, ...]:
    """The dry run's line on the launchers' liveness channel (a real launch opens it).

    >>> _node_watch_notes(NodeWatch(1, 2, "10.0.0.1", 29401, 30.0, "29401 (the rendezvous port + 1)"))
    ("nodes watch each other: this launcher connects to node 0's at 10.0.0.1:29401 (launcher.node_port=29401 (the rendezvous port + 1)); a node silent for 30 s (launcher.node_timeout) or gone without a goodbye ends the launch on every node, exit code 125",)
    """  # noqa: E501
    if nodes is None:
        return ()
    if nodes.node_rank == 0:
        how = f"this launcher (node 0) listens on port {nodes.port} for the other nodes' launchers"
    else:
        how = f"this launcher connects to node 0's at {Endpoint(nodes.host, nodes.port)}"
    return (
        f"nodes watch each other: {how} (launcher.node_port={nodes.port_value}); a node silent for "
        f"{nodes.timeout:g} s (launcher.node_timeout) or gone without a goodbye ends the launch on every node, "
        "exit code 125",
    )


def _notes(cfg: TrainConfig, settled: Settled, env: Mapping[str, str]) -> tuple[str, ...]:
    return _cpu_notes(cfg, settled, env) + _network_notes(cfg, settled, env)


def _cpu_notes(cfg: TrainConfig, settled: Settled, env: Mapping[str, str]) -> tuple[str, ...]:
    """The dry run's lines on launcher.cpu_binding: who binds, from which CPUs, each rank's list."""
    if not settled.cpu_lists:
        return ()
    value = cpu_binding.spelled(cfg.launcher.cpu_binding)
    who = (
        f"torchrun {NUMA_BINDING_FLAG} {settled.numa_binding} binds them (numactl)"
        if settled.numa_binding is not None
        else "the rank wrapper binds each rank before its script starts"
    )
    threads = tuple(int(n) for n in env[OMP_THREADS_VAR].split(";")) if OMP_THREADS_VAR in env else ()
    return (
        f"cpu binding: launcher.cpu_binding={value}: {who}; {settled.cpu_source}",
        *cpu_binding.lines(settled.cpu_lists, threads),
    )


def _network_notes(cfg: TrainConfig, settled: Settled, env: Mapping[str, str]) -> tuple[str, ...]:
    facing = settled.facing
    if facing is None or cfg.launcher.network_interface is not None:
        return ()
    chosen = [name for name in INTERFACE_VARS if env.get(name) == facing.interface]
    if cfg.launcher.local_addr is None and settled.local_addr == facing.address:  # c10d (probe.locate)
        chosen.append(f"{LOCAL_ADDR_FLAG} {facing.address}")
    if not chosen:
        return ()
    return (
        f"network: {facing.interface} ({facing.address}) faces {facing.target}: {', '.join(chosen)} set to it "
        "(launcher.network_interface=NAME chooses another)",
    )


def _script_index(argv: tuple[str, ...], script: str) -> int:
    return next(i for i in range(1, len(argv)) if argv[i] == script)


def _local_ranks(value: str) -> tuple[int, ...]:
    return tuple(int(part) for part in value.split(",") if part.strip().isdigit())


def wrapped(plan: LaunchPlan, wrapper: str) -> LaunchPlan:
    """Every rank's script behind the worker wrapper: ``<python> <wrapper> <script> args`` (for
    torchrun, the wrapper is torchrun's training script). The dry run shows this argv too."""
    if plan.wrapper is not None:
        return plan
    processes = []
    for spec in plan.processes:
        at = _script_index(spec.argv, plan.script)
        processes.append(replace(spec, argv=spec.argv[:at] + (wrapper,) + spec.argv[at:]))
    return replace(plan, processes=tuple(processes), wrapper=wrapper)


def supervised(plan: LaunchPlan, wrapper: str, log_dir: str, launch_id: str) -> LaunchPlan:
    """The plan as the supervisor runs it: every rank's script behind the worker wrapper
    (``<python> <wrapper> <script> args``, see launcher/run/worker.py), and the variables the wrapper
    and the watchdog read. With torchrun's --tee/--redirects/--log_dir given, torchrun keeps the
    workers' output; --local_ranks_filter alone selects the local ranks the console shows."""
    plan = wrapped(plan, wrapper)
    torchrun_flags: tuple[str, ...] = ()
    for spec in plan.processes:
        if spec.name == "torchrun":
            torchrun_flags = spec.argv[: _script_index(spec.argv, wrapper)]
    rank_logs = not any(flag in torchrun_flags for flag in TORCHRUN_OUTPUT_FLAGS)
    console = None
    if "--local_ranks_filter" in torchrun_flags:
        console = _local_ranks(torchrun_flags[torchrun_flags.index("--local_ranks_filter") + 1])
    env = dict(plan.env)
    env.update(
        {
            LOG_DIR_VAR: log_dir,
            RANK_LOGS_VAR: "1" if rank_logs else "0",
            NODE_RANK_VAR: str(plan.node_rank),
            LAUNCH_ID_VAR: launch_id,
        }
    )
    env.update(flight_recorder_paths(plan.nccl_dump_vars, os.path.dirname(os.path.normpath(log_dir))))
    return replace(plan, env=MappingProxyType(env), rank_logs=rank_logs, console_local_ranks=console)


def attempt(plan: LaunchPlan, number: int, resume_args: Sequence[str] = ()) -> LaunchPlan:
    """The same plan as attempt ``number`` of a launch with restarts (run/attempts.py):
    ``TRAIN_MULTIGPU_ATTEMPT=<number>`` for every process, and ``resume_args`` at the end of every
    rank's script arguments, before ``--distributed`` (after what the script got already, so a
    flag given twice takes the attempt's value); a lone flag the script gets already is not repeated.

    >>> spec = ProcessSpec("rank", ("py", "w.py", "t.py", "--resume", "--distributed"))
    >>> p = LaunchPlan(Topology.skrl_jax, "examples", "cpu", "gloo", 1, "1", 0, "t.py", {}, (spec,), 30.0, False)
    >>> a = attempt(p, 2, ["--resume", "--checkpoint", "c.pt"])
    >>> a.env[ATTEMPT_VAR], a.processes[0].argv
    ('2', ('py', 'w.py', 't.py', '--resume', '--checkpoint', 'c.pt', '--distributed'))
    """
    processes = []
    for spec in plan.processes:
        argv = list(spec.argv)
        add = [arg for i, arg in enumerate(resume_args) if not _given_flag(resume_args, i, argv)]
        at = len(argv) - 1 if argv and argv[-1] == DISTRIBUTED_FLAG else len(argv)
        processes.append(replace(spec, argv=tuple(argv[:at] + add + argv[at:])))
    env = MappingProxyType({**plan.env, ATTEMPT_VAR: str(number)})
    return replace(plan, env=env, processes=tuple(processes))


def _given_flag(args: Sequence[str], i: int, argv: Sequence[str]) -> bool:
    """``args[i]`` is a flag without a value (the next word is a flag too, or none) that ``argv`` holds."""
    lone = args[i].startswith("--") and (i + 1 == len(args) or args[i + 1].startswith("--"))
    return lone and args[i] in argv


def started(plan: LaunchPlan, spec: ProcessSpec) -> tuple[str, ...]:
    """The argv a process is started with: its own, or inside ``plan.container`` (launcher/container.py):
    every variable the launch sets for it passed by name; the container's name is this launch's, node's
    and attempt's (the dry run's launch id a stand-in). The dry run, command.sh and run/ all use this."""
    if plan.container is None:
        return spec.argv
    return container_mod.argv(plan.container, spec.argv, _passed(plan, spec), container_name(plan, spec))


def _passed(plan: LaunchPlan, spec: ProcessSpec) -> list[str]:
    """The names a container gets, in one order whether or not the supervisor added its variables yet
    (the dry run's plan has none of them, the real launch's has them in plan.env): theirs last."""
    later = {*plan.nccl_dump_vars, *SUPERVISED_VARS}
    own = [name for name in [*plan.env, *spec.env] if name not in later]
    return list(dict.fromkeys([*own, *plan.nccl_dump_vars, *SUPERVISED_VARS]))


def secret_channel(plan: LaunchPlan, spec: ProcessSpec, env: Mapping[str, str]) -> dict[str, str] | None:
    """The secrets a docker/podman container's stdin carries (launcher/container.py); None: none."""
    if plan.container is None:
        return None
    return container_mod.channel(plan.container, env, _passed(plan, spec))


def runtime_env(plan: LaunchPlan, spec: ProcessSpec, env: Mapping[str, str]) -> dict[str, str]:
    """What the container runtime's own process gets besides ``env`` (the launch's variables over the
    launcher's environment): apptainer's ``APPTAINERENV_NAME`` copies; nothing without a container."""
    if plan.container is None:
        return {}
    return container_mod.env_for(plan.container, env, _passed(plan, spec))


def container_name(plan: LaunchPlan, spec: ProcessSpec) -> str:
    assert plan.container is not None
    return container_mod.name_of(
        plan.env.get(LAUNCH_ID_VAR), plan.node_rank, plan.env.get(ATTEMPT_VAR), spec.global_rank, plan.container.runtime
    )


def shell_line(plan: LaunchPlan, spec: ProcessSpec) -> str:
    """One pasteable line: the process's own variables, then :func:`started`'s argv."""
    prefix = [f"{key}={shlex.quote(value)}" for key, value in spec.env.items()]
    return " ".join(prefix + [shlex.join(started(plan, spec))])


def describe(plan: LaunchPlan, notes: Sequence[str] = ()) -> str:
    """The dry run's text: profile, topology, ``notes`` (one comment line each), environment and
    one pasteable line per command, exactly the argv a real launch starts (see :func:`wrapped`)."""
    lines = [
        f"# profile: {plan.profile}   topology: {plan.topology.value}   device: {plan.device} ({plan.backend})",
        f"# nodes: {plan.nnodes}   node_rank: {plan.node_rank}   workers on this node: {plan.nproc_per_node}",
        *(f"# {note}" for note in (*plan.notes, *_node_watch_notes(plan.nodes), *notes)),
        *([f"# {container_mod.note(plan.container)}"] if plan.container is not None else []),
        "# environment added for every process:",
    ]
    lines += [f"export {key}={shlex.quote(value)}" for key, value in plan.env.items()]
    if plan.wrapper is not None:
        lines.append(
            f"# a real launch adds, for its run directory: {RUN_DIR_VAR}, {LOG_DIR_VAR}, {RANK_LOGS_VAR}, "
            f"{NODE_RANK_VAR}, {LAUNCH_ID_VAR}"
            + "".join(f", {k}={v}" for k, v in flight_recorder_paths(plan.nccl_dump_vars, "<run dir>").items())
            + " (<run dir>/env.json keeps them)"
        )
    lines.append(f"# {len(plan.processes)} command(s):")
    if plan.wrapper is not None:
        lines.append(
            f"# {plan.wrapper} runs each rank's script as __main__, unchanged: it dies with its parent, "
            "writes logs/rank<R>.log and records a failed rank's exit (logs/rank<R>.exit.json)"
        )
    lines += [shell_line(plan, process) for process in plan.processes]
    return "\n".join(lines)
