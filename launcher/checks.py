"""Semantic checks, run before anything starts. Pure.

:func:`validate` takes the typed config and the host facts and returns the settled values the plan
needs (device, worker count, node range, endpoints) or raises :class:`UserError`. What only the
machine can say (the script exists, ports are free, addresses are this host's) is
:mod:`launcher.probe`'s.

A refusal that comes from a fact of this host (its GPU count, its cores; probe's: a name that does
not resolve, a port in use, a missing script) goes through ``refuse``: a real launch raises it
(:func:`refuse_now`), a dry run collects it and prints the plan, then one warning per refusal
(docs/errors.md). A mistake in the config itself is raised either way.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable

from . import container, cpu_binding, nodes, rendezvous
from .addresses import Endpoint, check_port, is_loopback, parse_endpoint
from .config.schema import (
    JAX_ONLY_KEYS,
    TORCHRUN_ONLY_KEYS,
    Device,
    LauncherConfig,
    MLFramework,
    Submit,
    Topology,
    TrainConfig,
)
from .container import Container
from .errors import UserError
from .facts import C10D_DEFAULT_PORT, MASTER_DEFAULT_PORT, NODE_PORT_DEFAULT, HostFacts, Settled
from .paths import WORKER_WRAPPER

# what a check does with a refusal that comes from a fact of this host: raise it (a real launch), or
# collect it (a dry run: the plan is printed, then a warning per refusal)
Refuse = Callable[[UserError], None]


def refuse_now(error: UserError) -> None:
    raise error


RDZV_BACKENDS = ("static", "c10d", "etcd", "etcd-v2")
START_METHODS = ("spawn", "fork", "forkserver")
# CPU workers (device=cpu) allowed per usable core: beyond it a launch thrashes or runs out of memory
CPU_WORKERS_PER_CORE = 4
_INTERFACE = re.compile(r"^[A-Za-z0-9_.:@\-]{1,15}$")


def _key(name: str) -> str:
    return f"launcher.{name}"


# upper bounds of the launcher's time keys: beyond them a value is a typo, not a wish, and nan/inf
# would disable what the key bounds (grace_period=nan: no SIGKILL ever; docs/errors.md)
MAX_GRACE_PERIOD_S = 86400  # a day
MAX_MONITOR_INTERVAL_S = 3600
MAX_TIMEOUT_S = 604800  # a week: join_timeout and the timeouts in rdzv_conf
# launcher.straggler_factor: slower than the median by more than this (1 would name half the ranks)
MIN_STRAGGLER_FACTOR = 1.0
MAX_STRAGGLER_FACTOR = 1000.0
# launcher.node_timeout: below a second a busy launcher's beat would be late; null or 0 turns it off
MIN_NODE_TIMEOUT_S, MAX_NODE_TIMEOUT_S = 1, 3600


def _seconds(
    name: str, value: float, low: float, high: float, hint: str | None = None, low_allowed: bool = True
) -> None:
    """A finite number of seconds in ``low..high`` (``low`` excluded unless ``low_allowed``).

    >>> _seconds("grace_period", float("nan"), 0, 86400)
    Traceback (most recent call last):
    ...
    launcher.errors.UserError: launcher.grace_period=nan: finite seconds in 0..86400
    >>> _seconds("monitor_interval", 0.0, 0, 3600, low_allowed=False)
    Traceback (most recent call last):
    ...
    launcher.errors.UserError: launcher.monitor_interval=0.0: finite seconds > 0 and <= 3600
    """
    in_range = low <= value <= high if low_allowed else low < value <= high
    if not (math.isfinite(value) and in_range):
        allowed = f"finite seconds in {low}..{high}" if low_allowed else f"finite seconds > {low} and <= {high}"
        raise UserError(_key(name), value, allowed, hint)


def _topology_keys(launcher: LauncherConfig) -> None:
    topology = launcher.topology
    if topology is Topology.skrl_jax:
        for name in TORCHRUN_ONLY_KEYS:
            value = getattr(launcher, name)
            if name == "virtual_local_rank":  # a switch: off is its default, not a value given
                value = "true" if value else None
            if value is not None:
                raise UserError(
                    _key(name),
                    value,
                    "torchrun only; launcher=skrl_jax does not take it",
                    "it belongs to launcher=single_node or launcher=multinode",
                )
    else:
        for name in JAX_ONLY_KEYS:
            value = getattr(launcher, name)
            if value is not None:
                raise UserError(
                    _key(name),
                    value,
                    f"JAX only; launcher={topology.value} (torchrun) does not take it",
                    "it belongs to launcher=skrl_jax; torchrun uses rdzv_endpoint or master_addr",
                )


def parse_nnodes(value: str, jax: bool) -> tuple[int, int]:
    """``N`` or (torchrun only) ``MIN:MAX`` (launcher/nodes.py holds the rule).

    >>> parse_nnodes("2", jax=False), parse_nnodes("1:4", jax=False)
    ((2, 2), (1, 4))
    """
    return nodes.node_range(value, jax)


def _device(cfg: TrainConfig, facts: HostFacts, refuse: Refuse) -> str:
    if cfg.device is Device.cpu:
        return "cpu"
    if cfg.device is Device.cuda:
        if facts.visible_gpus == 0:
            refuse(UserError("device", "cuda", "no GPU is visible on this machine", f"from {facts.gpus_source}"))
        return "cuda"
    return "cuda" if facts.visible_gpus > 0 else "cpu"


def _nproc(launcher: LauncherConfig, device: str, facts: HostFacts, refuse: Refuse) -> int:
    key, value = _key("nproc_per_node"), str(launcher.nproc_per_node).strip()
    jax = launcher.topology is Topology.skrl_jax
    allowed = "an integer >= 1, or auto (all visible GPUs, else all usable CPU cores), gpu or cpu"
    if value == "auto" and device == "cpu":
        count = facts.usable_cpus
    elif value in ("auto", "gpu"):
        if facts.visible_gpus == 0 and device == "cuda":  # device=cuda said so: the cause is named
            raise UserError(
                "device",
                "cuda",
                "no GPU is visible on this machine",
                f"from {facts.gpus_source}; launcher.nproc_per_node={value} counts GPUs: give a number "
                "to see the plan in a dry run (a warning then), or device=auto / device=cpu",
            )
        if facts.visible_gpus == 0:  # an error in a dry run too: there is no count to plan
            raise UserError(key, value, "no GPU is visible on this machine", f"from {facts.gpus_source}")
        count = facts.visible_gpus
    elif value == "cpu":
        count = facts.usable_cpus
    elif re.fullmatch(r"-?[0-9]+", value):
        count = int(value)
        if count < 1:
            raise UserError(key, value, allowed)
    else:
        raise UserError(key, value, "an integer >= 1" if jax else allowed)
    if device == "cuda" and count > facts.visible_gpus > 0:  # none at all: device=cuda's refusal says it
        refuse(
            UserError(
                key,
                count,
                f"more workers than the {facts.visible_gpus} visible GPU(s)",
                f"from {facts.gpus_source}; use at most {facts.visible_gpus} or device=cpu",
            )
        )
    limit = CPU_WORKERS_PER_CORE * facts.usable_cpus
    if device == "cpu" and count > limit:  # raised in a dry run too: it would print a command per worker
        raise UserError(
            key,
            count,
            f"more than {CPU_WORKERS_PER_CORE} CPU workers per usable core: "
            f"{facts.usable_cpus} core(s) here allow at most {limit}",
            "every worker is a process with its own environments and model; use fewer workers or more cores",
        )
    return count


def num_gpus_flag(value: str | None, cfg: TrainConfig, settled: Settled, facts: HostFacts) -> None:
    """Isaac Lab's ``--num_gpus N`` asks for GPUs: with none visible and ``device=auto`` it must not
    quietly become N CPU workers (an explicit ``device=cpu`` says CPU workers are meant)."""
    if value is None or cfg.device is not Device.auto or settled.device != "cpu" or value.strip() == "cpu":
        return
    raise UserError(
        "--num_gpus",
        value,
        "no GPU is visible on this machine",
        f"from {facts.gpus_source}; for CPU workers write launcher.nproc_per_node={value} or add device=cpu",
    )


def _script(cfg: TrainConfig) -> str:
    if cfg.script:
        return os.path.expanduser(cfg.script)
    profile = cfg.profile
    if profile.rl_libraries and cfg.rl_library.name not in profile.rl_libraries:
        raise UserError(
            "rl_library",
            cfg.rl_library.name,
            f"profile={profile.name} runs {', '.join(profile.rl_libraries)} only",
            "choose profile=isaaclab for Isaac Lab's libraries, or set script=",
        )
    if cfg.task is not None and profile.tasks and cfg.task not in profile.tasks:
        isaaclab = profile.name != "isaaclab" and cfg.task.startswith("Isaac-")
        raise UserError(
            "task",
            cfg.task,
            f"profile={profile.name} trains {', '.join(profile.tasks)} only",
            "an Isaac Lab task needs Isaac Lab: profile=isaaclab, docs/profiles.md"
            if isaaclab
            else "choose one of them, or script= for a trainer of your own",
        )
    relative = profile.entry or cfg.rl_library.script
    return os.path.join(os.path.expanduser(profile.script_root), relative)


# the longest run_name: the run directory's name (<date>_<time>_<run_name>_node<R>) stays within 255 bytes
RUN_NAME_MAX_BYTES = 200


def _training_values(cfg: TrainConfig) -> None:
    """Values forwarded to the training script, and the run's name: impossible ones are refused here,
    not by the script minutes later."""
    for key in ("num_envs", "max_iterations"):
        value = getattr(cfg, key)
        if value is not None and value < 1:
            raise UserError(key, value, "an integer >= 1", f"leave {key} unset to use the training script's default")
    if cfg.script is not None and not str(cfg.script).strip():
        raise UserError(
            "script",
            cfg.script,
            "an empty path",
            "give the training script's path, or leave script unset to run the profile's trainer",
        )
    name = cfg.run_name
    if name is not None and (
        re.search(r"[/\x00-\x1f\x7f]", name) or len(name.encode(errors="surrogateescape")) > RUN_NAME_MAX_BYTES
    ):
        raise UserError(
            "run_name",
            name,
            f"a name without '/' or control characters, at most {RUN_NAME_MAX_BYTES} bytes",
            "it names the run directory <run_root>/<date>_<time>_<run_name>; run_root= chooses where",
        )


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def worker_env_names(cfg: TrainConfig) -> None:
    """``worker_env``/``profile.env`` names: environment variable names, none the launch sets itself
    (a value for one would show in the dry run and be overwritten in the real run)."""
    from .plan import LAUNCH_VARS
    from .secrets import MASK, is_secret

    for section, env in (("worker_env", cfg.worker_env), ("profile.env", cfg.profile.env)):
        for name, value in env.items():
            shown = MASK if is_secret(name) and value else value
            if not _ENV_NAME.match(name):
                raise UserError(
                    f"{section}.{name}",
                    shown,
                    "not an environment variable name: letters, digits and '_', not starting with a digit",
                )
            if name in LAUNCH_VARS:
                hint = (
                    "give it to the launcher instead: CUDA_VISIBLE_DEVICES=... train_multigpu ..."
                    if name == "CUDA_VISIBLE_DEVICES"
                    else "docs/errors.md lists the launch's own variables"
                )
                raise UserError(
                    f"{section}.{name}",
                    shown,
                    "the launch sets this variable for every worker itself (the real run would overwrite it)",
                    hint,
                )


def validate(cfg: TrainConfig, facts: HostFacts, refuse: Refuse = refuse_now) -> Settled:
    launcher = cfg.launcher
    topology = launcher.topology
    jax = topology is Topology.skrl_jax
    _training_values(cfg)
    _topology_keys(launcher)
    worker_env_names(cfg)
    for name in ("nnodes", "node_rank"):
        if getattr(launcher, name) is None:
            raise UserError(_key(name), None, "needs a value", "only launcher=slurm takes it from the SLURM allocation")
    if jax and cfg.rl_library.name != "skrl":
        raise UserError("rl_library", cfg.rl_library.name, "launcher=skrl_jax runs skrl only", "use rl_library=skrl")
    if cfg.rl_library.ml_framework is MLFramework.jax and not jax:
        raise UserError("rl_library.ml_framework", "jax", "JAX runs through launcher=skrl_jax", "add launcher=skrl_jax")
    if topology is Topology.single_node and str(launcher.nnodes).strip() != "1":
        raise UserError(_key("nnodes"), launcher.nnodes, "launcher=single_node runs 1 node", "use launcher=multinode")
    min_nodes, max_nodes = parse_nnodes(launcher.nnodes, jax)
    if not 0 <= launcher.node_rank < max_nodes:
        raise UserError(
            _key("node_rank"), launcher.node_rank, f"an integer in 0..{max_nodes - 1} (nnodes={launcher.nnodes})"
        )
    if launcher.master_port is not None:
        check_port(launcher.master_port, _key("master_port"))
    if launcher.rdzv_backend is not None and launcher.rdzv_backend not in RDZV_BACKENDS:
        raise UserError(_key("rdzv_backend"), launcher.rdzv_backend, f"one of {', '.join(RDZV_BACKENDS)}")
    if launcher.start_method is not None and launcher.start_method not in START_METHODS:
        raise UserError(_key("start_method"), launcher.start_method, f"one of {', '.join(START_METHODS)}")
    if launcher.max_restarts is not None and launcher.max_restarts < 0:
        raise UserError(_key("max_restarts"), launcher.max_restarts, "an integer >= 0")
    if launcher.monitor_interval is not None:
        _seconds("monitor_interval", launcher.monitor_interval, 0, MAX_MONITOR_INTERVAL_S, low_allowed=False)
    _seconds("grace_period", launcher.grace_period, 0, MAX_GRACE_PERIOD_S)
    for name in ("hang_timeout", "startup_timeout"):
        if getattr(launcher, name) is not None:
            _seconds(name, getattr(launcher, name), 0, MAX_TIMEOUT_S, "null turns it off", low_allowed=False)
    factor = launcher.straggler_factor
    if factor is not None and not (math.isfinite(factor) and MIN_STRAGGLER_FACTOR < factor <= MAX_STRAGGLER_FACTOR):
        raise UserError(
            _key("straggler_factor"),
            factor,
            f"a finite number > {MIN_STRAGGLER_FACTOR:g} and <= {MAX_STRAGGLER_FACTOR:g}",
            "times the other ranks' median iteration time; null turns straggler detection off",
        )
    if launcher.join_timeout is not None:
        _seconds(
            "join_timeout", launcher.join_timeout, 1, MAX_TIMEOUT_S, "how long a node waits for the other nodes to join"
        )
    if launcher.network_interface is not None:
        names = str(launcher.network_interface).split(",")
        if not all(_INTERFACE.match(name) for name in names):
            raise UserError(
                _key("network_interface"),
                launcher.network_interface,
                "a network interface name like eth0 or ib0, or a comma list of them",
            )
    if launcher.local_addr is not None and (
        not str(launcher.local_addr).strip() or re.search(r"[\s,/]", str(launcher.local_addr))
    ):
        raise UserError(
            _key("local_addr"),
            launcher.local_addr,
            "this node's address or host name as the other nodes reach it (no port)",
        )

    _node_timeout(launcher)
    restart_keys(cfg)
    notify_keys(cfg)
    binding = cpu_binding.parse(launcher.cpu_binding)
    if launcher.node_port is not None:
        check_port(launcher.node_port, _key("node_port"))

    rdzv = coordinator = None
    if launcher.rdzv_endpoint is not None:
        rdzv = parse_endpoint(launcher.rdzv_endpoint, _key("rdzv_endpoint"), default_port=C10D_DEFAULT_PORT)
    if launcher.coordinator_address is not None:
        coordinator = parse_endpoint(launcher.coordinator_address, _key("coordinator_address"))
    multi = max_nodes > 1
    if multi and topology is Topology.multinode and rdzv is None and launcher.master_addr is None:
        raise UserError(
            _key("rdzv_endpoint"),
            None,
            f"launcher=multinode with nnodes={launcher.nnodes} needs the address of node 0",
            "set launcher.rdzv_endpoint=<host>:<port> (c10d) or launcher.master_addr=<host> (static)",
        )
    if multi and jax and coordinator is None:
        raise UserError(
            _key("coordinator_address"),
            None,
            f"launcher=skrl_jax with nnodes={launcher.nnodes} needs the JAX coordinator as host:port",
            "the address of node 0, e.g. launcher.coordinator_address=10.0.0.10:29400",
        )
    if multi and not launcher.local_nodes:
        _no_loopback(launcher, rdzv, coordinator)
    if launcher.rdzv_backend == "static" and rdzv is not None:
        raise UserError(
            _key("rdzv_backend"), "static", "static rendezvous uses master_addr/master_port, not rdzv_endpoint"
        )

    backend = rendezvous.backend(not jax, launcher.rdzv_backend, rdzv is not None)
    elastic_restarts(launcher, backend, min_nodes, max_nodes, cfg.restart.max)
    user_conf = rendezvous.parse_conf(launcher.rdzv_conf)
    _rendezvous_keys(launcher, backend, user_conf)

    device = _device(cfg, facts, refuse)
    nproc = _nproc(launcher, device, facts, refuse)
    if binding.mode == cpu_binding.EXPLICIT and len(binding.lists) != nproc:
        error = UserError(
            cpu_binding.KEY,
            cpu_binding.spelled(launcher.cpu_binding),
            f"{len(binding.lists)} CPU list(s) for {nproc} local rank(s) (launcher.nproc_per_node="
            f"{launcher.nproc_per_node}): one per local rank",
        )
        if not str(launcher.nproc_per_node).strip().isdigit():
            refuse(error)  # nproc_per_node=auto counted this host's devices: a fact of this host
        else:
            raise error
    return Settled(
        container=container_settled(cfg, facts, device),
        device=device,
        nproc_per_node=nproc,
        nnodes=nodes.spelled(launcher.nnodes, jax),
        min_nodes=min_nodes,
        max_nodes=max_nodes,
        script=_script(cfg),
        rdzv_endpoint=rdzv,
        coordinator=coordinator,
        rdzv_backend=backend,
        rdzv_conf=tuple(user_conf.items()),
        local_addr=launcher.local_addr,
        node_hub=node_hub(launcher, backend, rdzv, coordinator, min_nodes, max_nodes, cfg.restart.max),
    )


def container_settled(cfg: TrainConfig, facts: HostFacts, device: str) -> Container | None:
    """The ``container`` group checked (launcher/container.py): None without ``container.image``, and
    inside a Kubeflow pod (launcher=k8s: the pod is the container, its image ``container.image``)."""
    box = cfg.container
    if box.image is None or cfg.launcher.from_k8s:
        return None
    where = cfg.run_dir if cfg.run_dir is not None else cfg.run_root
    home = facts.home or os.sep
    return container.settle(
        image=box.image,
        runtime=box.runtime.value,
        runtime_flags=box.runtime_flags,
        mounts=box.mounts,
        workdir=box.workdir,
        env=box.env,
        options=box.options,
        gpus=box.gpus,
        device=device,
        slurm=cfg.launcher.from_slurm or cfg.submit is Submit.slurm,
        run_root=os.path.normpath(os.path.join(facts.cwd or os.sep, container.home_path(str(where), home))),
        wrapper=WORKER_WRAPPER,
        home=home,
        node=facts.env.get("SLURMD_NODENAME"),
    )


MAX_RESTARTS = 1000  # restart.max: beyond it a value is a typo, not a wish


def notify_keys(cfg: TrainConfig) -> None:
    """The ``notify`` group (docs/notify.md): a webhook URL (never shown) and the events it is told of."""
    from . import notify

    problem = notify.check(cfg.notify.url, cfg.notify.events)
    if problem is not None:
        raise problem


def restart_keys(cfg: TrainConfig) -> None:
    """The ``restart`` group (docs/recovery.md): one error per bad value.

    >>> from .config.schema import TrainConfig
    >>> cfg = TrainConfig(); cfg.restart.classes = ["hang", "segfault"]
    >>> restart_keys(cfg)
    Traceback (most recent call last):
    ...
    launcher.errors.UserError: restart.classes=segfault: a failure class (hang, node-lost, node-failed, nccl, nccl-timeout, rendezvous, jax-init-timeout, follower, killed, exception, exit-code, usage, cuda-oom, oom-killed, illegal-memory-access, crash, torchrun, port-in-use), default or all (docs/recovery.md lists what each class means)
    """  # noqa: E501
    from . import restarts

    restart = cfg.restart
    if not isinstance(restart.max, int) or not 0 <= restart.max <= MAX_RESTARTS:
        raise UserError("restart.max", restart.max, f"an integer in 0..{MAX_RESTARTS}", "0: no restarts")
    if not isinstance(restart.max_without_progress, int) or not 1 <= restart.max_without_progress <= MAX_RESTARTS:
        raise UserError(
            "restart.max_without_progress",
            restart.max_without_progress,
            f"an integer in 1..{MAX_RESTARTS}",
            "restarted attempts in a row without progress before the launch stops",
        )
    words = (restarts.DEFAULT_WORD, restarts.ALL_WORD)
    for name in restart.classes:
        if name not in restarts.CLASSES and name not in words:
            raise UserError(
                "restart.classes",
                name,
                f"a failure class ({', '.join(restarts.CLASSES)}), {words[0]} or {words[1]}",
                "docs/recovery.md lists what each class means",
            )
    if restart.max > 0 and not restart.classes:
        raise UserError(
            "restart.classes",
            "[]",
            f"names no failure class, so restart.max={restart.max} would never restart",
            "restart.classes=default, a class or a list of them; or restart.max=0 for no restarts",
        )
    if restart.max > 0 and cfg.launcher.max_restarts:
        raise UserError(
            "restart.max",
            restart.max,
            f"cannot be combined with launcher.max_restarts={cfg.launcher.max_restarts} (torchrun's own restarts, "
            "blind to the cause, to hangs and to progress)",
            "choose one: launcher.max_restarts=0, or restart.max=0",
        )
    if restart.max > 0 and cfg.sweep.parallel > 1:
        raise UserError(
            "restart.max",
            restart.max,
            f"a parallel sweep (sweep.parallel={cfg.sweep.parallel}) runs each job once in this version",
            "restart.max=0, or sweep.parallel=1 (a serial sweep restarts each job)",
        )


def _node_timeout(launcher: LauncherConfig) -> None:
    value = launcher.node_timeout
    if value is None or value == 0:
        return
    if not (math.isfinite(value) and MIN_NODE_TIMEOUT_S <= value <= MAX_NODE_TIMEOUT_S):
        raise UserError(
            _key("node_timeout"),
            value,
            f"null or 0 (off), or finite seconds in {MIN_NODE_TIMEOUT_S}..{MAX_NODE_TIMEOUT_S}",
            "how long a node's launcher may stay silent before the other nodes stop the launch",
        )


def elastic_restarts(
    launcher: LauncherConfig, backend: str | None, min_nodes: int, max_nodes: int, restarts: int
) -> None:
    """Restarts across nodes (``restart.max > 0``, more than one node): every node restarts together
    through the nodes' liveness channel, node 0 deciding (docs/recovery.md, "Across nodes"), so it
    must be on (``launcher.node_timeout``). ``launcher.nnodes=MIN:MAX``: a lost node is not fatal
    while MIN remain ("Elastic nodes"); the world size changes between attempts: the c10d rendezvous
    (the static one has a fixed size).

    >>> from launcher.config.schema import LauncherConfig
    >>> elastic_restarts(LauncherConfig(nnodes="1:2"), "c10d", 1, 2, 1)
    >>> elastic_restarts(LauncherConfig(nnodes="1:2"), "static", 1, 2, 0)
    >>> elastic_restarts(LauncherConfig(nnodes="1:2"), "static", 1, 2, 1)
    Traceback (most recent call last):
    ...
    launcher.errors.UserError: launcher.nnodes=1:2: MIN:MAX with restart.max > 0 needs the c10d rendezvous: the static one has a fixed world size (set launcher.rdzv_endpoint=<node 0's host>:<port> (c10d), or give launcher.nnodes one number)
    """  # noqa: E501
    if max_nodes < 2 or not restarts:
        return
    if min_nodes != max_nodes and backend != "c10d":
        raise UserError(
            _key("nnodes"),
            launcher.nnodes,
            f"MIN:MAX with restart.max > 0 needs the c10d rendezvous: the {backend} one has a fixed world size",
            "set launcher.rdzv_endpoint=<node 0's host>:<port> (c10d), or give launcher.nnodes one number",
        )
    if not launcher.node_timeout:
        raise UserError(
            _key("node_timeout"),
            launcher.node_timeout,
            f"seconds with launcher.nnodes={launcher.nnodes} and restart.max > 0: every node restarts together "
            "through the nodes' liveness channel, node 0 deciding",
            "leave launcher.node_timeout at its default (30), or restart.max=0",
        )
    if backend not in ("c10d", "static", None):
        raise UserError(
            "restart.max",
            restarts,
            f"across nodes needs node 0's address for the nodes' liveness channel; the {backend} rendezvous "
            "endpoint is not node 0",
            "use the c10d or the static rendezvous, or restart.max=0",
        )


def node_hub(
    launcher: LauncherConfig,
    backend: str | None,
    rdzv: Endpoint | None,
    coordinator: Endpoint | None,
    min_nodes: int,
    max_nodes: int,
    restarts: int = 0,
) -> Endpoint | None:
    """Where the nodes' launchers meet to watch each other (run/monitor/liveness.py): node 0's host, as in
    the rendezvous endpoint, the static master or the JAX coordinator, and ``launcher.node_port``
    (default: that rendezvous port + 1). None: nothing to watch (one node; elastic ``MIN:MAX`` without
    restarts, whose nodes may leave; ``node_timeout`` off; an etcd rendezvous, whose endpoint is not
    node 0). ``restarts``: restart.max; elastic ``MIN:MAX`` with restarts is watched (a lost node is
    not fatal there while MIN remain: node 0 decides, run/monitor/coordinator.py).

    >>> from launcher.config.schema import LauncherConfig
    >>> node_hub(LauncherConfig(nnodes="2"), "c10d", Endpoint("10.0.0.1", 29400), None, 2, 2)
    Endpoint(host='10.0.0.1', port=29401)
    >>> node_hub(LauncherConfig(nnodes="2", master_addr="h"), "static", None, None, 2, 2)
    Endpoint(host='h', port=29501)
    >>> node_hub(LauncherConfig(nnodes="1:2"), "c10d", Endpoint("h", 29400), None, 1, 2) is None
    True
    >>> node_hub(LauncherConfig(nnodes="1:2"), "c10d", Endpoint("h", 29400), None, 1, 2, restarts=3)
    Endpoint(host='h', port=29401)
    >>> node_hub(LauncherConfig(nnodes="2", node_port=29400), "c10d", Endpoint("h", 29400), None, 2, 2)
    Traceback (most recent call last):
    ...
    launcher.errors.UserError: launcher.node_port=29400: the rendezvous uses port 29400 (launcher.rdzv_endpoint) (give the nodes' liveness channel another port, or leave launcher.node_port unset: the rendezvous port + 1)
    """  # noqa: E501
    if max_nodes < 2 or (min_nodes != max_nodes and not restarts) or not launcher.node_timeout:
        return None
    if coordinator is not None:
        base, key = coordinator, "coordinator_address"
    elif rdzv is not None and backend == "c10d":
        base, key = rdzv, "rdzv_endpoint"
    elif launcher.master_addr is not None and backend in ("c10d", "static"):
        base, key = Endpoint(launcher.master_addr, launcher.master_port or MASTER_DEFAULT_PORT), "master_port"
    else:
        return None
    port = launcher.node_port
    if port is None:
        port = base.port + 1 if base.port < 65535 else base.port - 1
    elif port == base.port:
        raise UserError(
            _key("node_port"),
            port,
            f"the rendezvous uses port {port} ({_key(key)})",
            f"give the nodes' liveness channel another port, or leave launcher.node_port unset: {NODE_PORT_DEFAULT}",
        )
    return Endpoint(base.host, port)


def _rendezvous_keys(launcher: LauncherConfig, backend: str | None, user_conf: dict[str, str]) -> None:
    """join_timeout / is_host against the rendezvous backend and the user's own rdzv_conf."""
    timeout_key = rendezvous.TIMEOUT_KEY.get(backend or "")
    if launcher.join_timeout is not None:
        if backend is not None and timeout_key is None:
            raise UserError(
                _key("join_timeout"),
                launcher.join_timeout,
                f"c10d or static rendezvous only (rdzv_backend={backend})",
                "set the timeout in launcher.rdzv_conf",
            )
        if timeout_key in user_conf:
            raise UserError(
                _key("join_timeout"),
                launcher.join_timeout,
                f"also given as {timeout_key}={user_conf[timeout_key]} in launcher.rdzv_conf",
                "give it once",
            )
    if launcher.is_host is not None:
        if backend != "c10d":
            raise UserError(
                _key("is_host"),
                str(launcher.is_host).lower(),
                f"c10d rendezvous only (this launch uses {backend})",
                "static: the node with node_rank 0 hosts the store at master_addr:master_port",
            )
        if "is_host" in user_conf:
            raise UserError(
                _key("is_host"),
                str(launcher.is_host).lower(),
                f"also given as is_host={user_conf['is_host']} in launcher.rdzv_conf",
                "give it once",
            )


def _no_loopback(launcher: LauncherConfig, rdzv: Endpoint | None, coordinator: Endpoint | None) -> None:
    """In a multi-node launch, a loopback address makes every node talk to itself."""
    given = (
        ("master_addr", launcher.master_addr, launcher.master_addr),
        ("rdzv_endpoint", rdzv.host if rdzv else None, launcher.rdzv_endpoint),
        ("coordinator_address", coordinator.host if coordinator else None, launcher.coordinator_address),
    )
    for name, host_name, value in given:
        if host_name is not None and is_loopback(host_name):
            raise UserError(
                _key(name),
                value,
                f"a loopback address in a launch of nnodes={launcher.nnodes}: the other nodes cannot reach it",
                "use node 0's network address or hostname; "
                "if every node runs on this host, add launcher.local_nodes=true",
            )
