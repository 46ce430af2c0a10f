"""The typed shape of a launch configuration.

These dataclasses are registered in Hydra's ConfigStore (see :func:`register`), so a value of the
wrong type or an unknown key fails while Hydra composes the config, before anything starts.
Semantic rules (ranges, which keys belong to which topology) live in :mod:`launcher.checks`.

Hydra facts respected here: ``Literal`` is unsupported (Enums are used), every nested dataclass
default uses ``default_factory``, and the schema is stored under a name that is not a selectable
config group option.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class Topology(Enum):
    """How processes are started: torchrun on one node, torchrun across nodes, or JAX ranks."""

    single_node = "single_node"
    multinode = "multinode"
    skrl_jax = "skrl_jax"


class Device(Enum):
    auto = "auto"
    cuda = "cuda"
    cpu = "cpu"


class MLFramework(Enum):
    torch = "torch"
    jax = "jax"


# torchrun flags that Isaac Lab's train_multigpu takes, in the order it emits them (after nnodes, node_rank)
TORCHRUN_FLAGS = (
    "master_addr",
    "master_port",
    "rdzv_backend",
    "rdzv_endpoint",
    "rdzv_id",
    "rdzv_conf",
    "max_restarts",
    "monitor_interval",
    "start_method",
    "role",
    "tee",
    "redirects",
    "local_ranks_filter",
    "log_dir",
)
# Keys of LauncherConfig that only torchrun understands; skrl_jax rejects them: those flags, and
# train_multigpu's own multi-node keys turned into torchrun flags and rdzv_conf entries.
TORCHRUN_ONLY_KEYS = (*TORCHRUN_FLAGS, "join_timeout", "local_addr", "is_host", "virtual_local_rank")
# Keys that only the JAX topology understands; torchrun topologies reject them.
JAX_ONLY_KEYS = ("coordinator_address",)


@dataclass
class LauncherConfig:
    """Launch topology. ``None`` means "not given": the flag is left out of the command."""

    topology: Topology = Topology.single_node
    # int >= 1, or auto | gpu | cpu (torchrun); the launcher resolves auto/gpu/cpu to an integer.
    nproc_per_node: str = "auto"
    # N, or MIN:MAX for elastic torchrun launches (c10d; with restart.max > 0 a lost node is not fatal
    # while MIN remain: docs/recovery.md). null (launcher=slurm): from the allocation.
    nnodes: str | None = "1"
    node_rank: int | None = 0
    # torchrun only
    master_addr: str | None = None
    master_port: int | None = None
    rdzv_backend: str | None = None
    rdzv_endpoint: str | None = None
    rdzv_id: str | None = None
    rdzv_conf: str | None = None
    max_restarts: int | None = None
    monitor_interval: float | None = None
    start_method: str | None = None
    role: str | None = None
    tee: str | None = None
    redirects: str | None = None
    local_ranks_filter: str | None = None
    log_dir: str | None = None
    # Across nodes (docs/multinode.md). torchrun only: seconds a node waits for the others to join
    # the rendezvous (c10d: --rdzv_conf join_timeout=N, static: timeout=N); null: torch's own (600 s / 900 s).
    join_timeout: int | None = None
    # torchrun --local_addr: the address this node advertises to the others (c10d: the workers'
    # MASTER_ADDR when this node is rendezvous rank 0). null: network_interface's address, if set.
    local_addr: str | None = None
    # c10d: this node hosts the rendezvous store (--rdzv_conf is_host=1|0). null: auto (node_rank 0
    # hosts when the endpoint is an address of this machine).
    is_host: bool | None = None
    # torchrun --virtual_local_rank: every worker sees only its own GPU, as cuda:0, and gets
    # LOCAL_RANK=0 (name per-rank files by RANK). Isaac Lab's --virtual_local_rank.
    virtual_local_rank: bool = False
    # network interface(s) the workers talk over, e.g. eth0 or ib0 (a comma list):
    # GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME for every worker. null: the libraries' own choice.
    network_interface: str | None = None
    # skrl_jax only: host:port of the JAX coordinator (process 0).
    coordinator_address: str | None = None
    # seconds between the first forwarded signal and SIGKILL of everything left
    grace_period: float = 30.0
    # the hang watchdog (docs/hangs.md): a rank that shows no progress (a heartbeat, or new output in
    # its log) for this many seconds ends the launch with every rank's stack saved, exit code 124;
    # null: off
    hang_timeout: float | None = 900.0
    # the same before a rank's first sign of life (imports, environment creation, JIT); null: no limit
    startup_timeout: float | None = 1800.0
    # stragglers (docs/troubleshooting.md): a rank whose iterations (from its heartbeats) take more than
    # this many times the other ranks' median is named once on the console and in the run record; null: off
    straggler_factor: float | None = 2.0
    # Across nodes (docs/multinode.md#nodes-watch-each-other): every node's launcher beats to node 0's
    # and back; a node silent this long (or gone without a goodbye) ends the launch on every node
    # (exit 125, "node lost"). null or 0: off. Elastic MIN:MAX: on with restart.max > 0 (docs/recovery.md:
    # the nodes left go on while MIN remain), off without (torch elastic lets nodes leave).
    node_timeout: float | None = 30.0
    # the port node 0's launcher listens on for the others' beats. null: the rendezvous port + 1
    # (c10d endpoint, static master_port, JAX coordinator)
    node_port: int | None = None
    # Inside a SLURM allocation (launcher=slurm / slurm_jax): nnodes, node_rank, the rendezvous or
    # JAX coordinator endpoint, rdzv_id and nproc_per_node come from SLURM's environment unless set
    # (see launcher/slurm/launch.py, docs/slurm.md).
    from_slurm: bool = False
    # Inside a pod of a Kubeflow TrainJob / PyTorchJob (launcher=k8s / k8s_jax): nnodes, node_rank,
    # the rendezvous or JAX coordinator endpoint and nproc_per_node come from the variables the
    # operator sets (PET_*, MASTER_ADDR, ...) unless set (see launcher/k8s/launch.py, docs/kubernetes.md).
    from_k8s: bool = False
    # multi-node launches only: every node runs on this host, so a loopback rendezvous, master or
    # coordinator address (127.0.0.1, localhost, ::1) is meant; without it such an address is an error
    local_nodes: bool = False
    # which CPUs each local rank runs on (docs/cpu_placement.md): none, node, socket, exclusive,
    # core-complex (torchrun's --numa-binding modes: near each rank's GPU, or split over the NUMA nodes
    # on CPUs), or a CPU list per local rank ([0-3,4-7]); only CPUs the launcher may use count
    cpu_binding: Any = "none"


@dataclass
class RLLibraryConfig:
    """An RL library as a training script sees it."""

    name: str = "skrl"
    ml_framework: MLFramework = MLFramework.torch
    # the library's own script, relative to the profile's script_root (used without a unified entry)
    script: str = "skrl/train.py"


@dataclass
class ProfileConfig:
    """Where the training scripts live and how they are called.

    ``entry`` is a unified training script under ``script_root`` that takes ``--rl_library``; when
    it is empty the library's own ``rl_library.script`` is run instead.
    """

    name: str = "examples"
    script_root: str = ""
    entry: str | None = None
    pass_rl_library: bool = False
    # libraries the scripts support; empty means any
    rl_libraries: list[str] = field(default_factory=list)
    # tasks the profile's trainer knows (task= is checked against it before anything starts, unless
    # script= runs another script); empty means any
    tasks: list[str] = field(default_factory=list)
    # environment variables for the workers (e.g. NCCL settings)
    env: dict[str, str] = field(default_factory=dict)
    # the script takes Isaac Lab's presets=NAME: a presets= name train_multigpu does not ship is
    # forwarded to it verbatim (false: an unknown name is an error)
    forward_presets: bool = False


class Submit(Enum):
    """Run here (none), write a batch script and submit it to SLURM (slurm), write a Kubeflow
    TrainJob / PyTorchJob manifest and create it on Kubernetes (k8s), submit a Ray job (ray), or start
    one launcher per host over SSH (ssh)."""

    none = "none"
    slurm = "slurm"
    k8s = "k8s"
    ray = "ray"
    ssh = "ssh"


@dataclass
class SlurmConfig:
    """What ``submit=slurm`` asks SLURM for (rendered by launcher/slurm/batch.py). Unset: cluster default."""

    # an alias of launcher.nnodes (the job's node count): null follows launcher.nnodes; set, it must agree
    nodes: int | None = None
    gpus_per_node: int = 0  # 0: ask for no GPUs (CPU clusters)
    gpu_type: str | None = None  # --gpus-per-node=<type>:<count>
    cpus_per_task: int | None = None  # per node (one launcher task per node)
    partition: str | None = None
    time: str | None = None  # "30", "4:00:00", "1-12:00:00"
    account: str | None = None
    qos: str | None = None
    job_name: str | None = None  # default: run_name, else train_multigpu
    mem: str | None = None  # per node, e.g. 64G
    # USR1 this many seconds before the time limit, forwarded to every worker; null: no warning
    signal_seconds: int | None = 120
    requeue: bool = True  # requeue on preemption / node failure
    # a -m sweep is one job array (--array=0-N%P): at most this many of its tasks run at once; null: no limit
    array_parallelism: int | None = None
    # passed to the training script when SLURM restarted the job (SLURM_RESTART_COUNT > 0); null: never
    resume_arg: str | None = "--resume"
    # escape hatch: more #SBATCH options by long name (+slurm.extra.constraint=a100,
    # +slurm.extra.exclusive=true); names are checked against sbatch's options
    extra: dict[str, Any] = field(default_factory=dict)


class K8sKind(Enum):
    """The Kubeflow job kind ``submit=k8s`` writes: Trainer v2's TrainJob, or the training operator's PyTorchJob."""

    TrainJob = "TrainJob"
    PyTorchJob = "PyTorchJob"


@dataclass
class K8sConfig:
    """What ``submit=k8s`` asks Kubernetes for (rendered by launcher/k8s/manifest.py, docs/kubernetes.md)."""

    kind: K8sKind = K8sKind.TrainJob
    # TrainJob: the training runtime it references, and that runtime's kind
    runtime: str = "torch-distributed"
    runtime_kind: str = "ClusterTrainingRuntime"  # or TrainingRuntime (namespaced)
    image: str | None = None  # required: the image holding train_multigpu, the training script and its libraries
    namespace: str | None = None  # null: the namespace of kubectl's current context
    job_name: str | None = None  # default: run_name (else train-multigpu) and the time, made a valid name
    nodes: int = 1  # pods, one launcher each
    gpus_per_node: int = 0
    gpu_resource: str = "nvidia.com/gpu"
    cpus_per_node: str | None = None  # a quantity: 8, 7500m
    memory_per_node: str | None = None  # a quantity: 64Gi
    # /dev/shm: a memory-backed emptyDir of this size (a quantity); null: bounded by the pod's memory only
    shm_size: str | None = None
    # NAME:SECRET/KEY entries: the container's variable NAME read from key KEY of the Kubernetes
    # Secret SECRET (a secretKeyRef); values are never written into the manifest
    secret_env: list[str] = field(default_factory=list)


@dataclass
class RayConfig:
    """What ``submit=ray`` asks Ray for (launcher/ray_submit/, docs/ray.md)."""

    # the Ray dashboard (Job Submission API), http(s)://HEAD:8265 only; null: $RAY_ADDRESS
    address: str | None = None
    # wait for the job, stream its output, exit with the launch's exit code (Ctrl+C stops the job)
    follow: bool = False
    # the interpreter that runs train_multigpu on the cluster (the job's entrypoint)
    python: str = "python"
    # reserved per rank: entrypoint resources (one node) or each node's placement-group bundle
    num_cpus_per_rank: float = 1.0
    num_gpus_per_rank: float | None = None  # null: 1 with device=cuda, else 0
    # Ray's runtime_env as it is (working_dir, pip, env_vars, ...); secret env_vars are masked when shown
    runtime_env: dict[str, Any] = field(default_factory=dict)


@dataclass
class SshConfig:
    """Where and how ``submit=ssh`` starts one launcher per host (launcher/ssh/, docs/ssh.md)."""

    # the hosts, node 0 first (names or addresses every host can reach); or ssh.hostfile
    hosts: list[str] = field(default_factory=list)
    # DeepSpeed's hostfile: one "host slots=N" per line, # comments, blank lines (instead of ssh.hosts)
    hostfile: str | None = None
    user: str | None = None  # ssh -l USER; null: ssh's own (~/.ssh/config, the local user)
    port: int | None = None  # ssh -p PORT; null: ssh's own (22)
    identity: str | None = None  # ssh -i FILE (a private key); null: ssh's own
    # more ssh options, each as ssh -o takes it: [StrictHostKeyChecking=accept-new, ProxyJump=gw]
    options: list[str] = field(default_factory=list)
    # seconds ssh waits for each host to answer (ssh -o ConnectTimeout)
    connect_timeout: int = 10
    # the interpreter that runs the launcher on every host (python -m launcher); null: this one's path
    python: str | None = None
    # instead of ssh.python: a shell line that runs the launcher there, the arguments appended
    # (e.g. "source ~/miniconda3/bin/activate rl && train_multigpu")
    command: str | None = None
    # the directory the launcher runs in on every host; null: this working directory's path
    workdir: str | None = None
    # the rendezvous (or JAX coordinator) port on the first host, when launcher.rdzv_endpoint /
    # master_addr / coordinator_address are not given
    rendezvous_port: int = 29400


class ContainerRuntime(Enum):
    """The program that runs a node's launch inside ``container.image`` (launcher/container.py)."""

    auto = "auto"  # .sif: apptainer; .sqsh or inside SLURM: pyxis; otherwise docker
    docker = "docker"
    podman = "podman"
    apptainer = "apptainer"
    singularity = "singularity"
    pyxis = "pyxis"  # srun --container-image (SLURM's SPANK plugin over enroot)


@dataclass
class ContainerConfig:
    """Run each node's whole launch inside an image (launcher/container.py, docs/containers.md).
    Unset ``image``: no container (the other keys are then ignored, so a profile may preset them)."""

    # a registry reference (nvcr.io/nvidia/isaac-lab:2.3.0), a local image, a .sif (apptainer) or
    # .sqsh (pyxis) file; submit=k8s: the pods' image (k8s.image is its old spelling)
    image: str | None = None
    runtime: ContainerRuntime = ContainerRuntime.auto
    # global flags of the runtime's program, before run/exec (podman: [--runtime, runc])
    runtime_flags: list[str] = field(default_factory=list)
    # SRC:DST[:ro|rw] (SRC may start with ~); the run directory and the rank wrapper are mounted already
    mounts: list[str] = field(default_factory=list)
    workdir: str | None = None  # the working directory inside; null: the image's
    # NAME: passed through from the launcher's environment; NAME=VALUE: set inside (by name, never on
    # a command line); worker_env, profile.env and the launch's own variables pass through always
    env: list[str] = field(default_factory=list)
    # raw extra flags for run/exec (srun under pyxis), after the launcher's own
    options: list[str] = field(default_factory=list)
    # every GPU of the node inside (--gpus all / CDI nvidia.com/gpu=all / --nv); null: when device is cuda
    gpus: bool | None = None
    # the interpreter inside the image that runs torchrun / the JAX ranks; null: python= if set, else python3
    python: str | None = None


@dataclass
class SweepConfig:
    """How a ``-m`` sweep runs its jobs (docs/sweeps.md); ignored by a single run."""

    # stop at the first failing job: running jobs are stopped, later jobs are skipped
    fail_fast: bool = False
    # jobs at once on this node: the visible GPUs (or, on CPU, the usable cores) are split into this
    # many disjoint sets, one per concurrent job; 1 runs the jobs one after another
    parallel: int = 1


@dataclass
class RestartConfig:
    """Restarts by cause, only while progress is made (docs/recovery.md; launcher/restarts.py)."""

    # restarts after the first attempt; 0: none (a failure ends the launch, as without this group)
    max: int = 0
    # the failure classes restarted: names from docs/recovery.md's table; "default" stands for the
    # classes restarted by default (hang, node-lost, node-failed, nccl, nccl-timeout, rendezvous,
    # jax-init-timeout, follower, killed), "all" for every class
    # ("classes", not "on": YAML 1.1 reads an unquoted ``on:`` key as true)
    classes: list[str] = field(default_factory=lambda: ["default"])
    # restarted attempts in a row without progress (no heartbeat past the iteration it resumed
    # from, no new checkpoint) after which the launch stops with reason "no progress"
    max_without_progress: int = 1


class WandbMode(Enum):
    """W&B's mode for the launch: ``auto`` is online when an API key is given and W&B answers (a
    bounded probe), else offline (said once); ``online`` and ``offline`` as W&B means them."""

    auto = "auto"
    online = "online"
    offline = "offline"


@dataclass
class WandbConfig:
    """Weights & Biases, set up by the launcher (``tracker=wandb``; docs/trackers.md)."""

    enabled: bool = False
    project: str | None = None  # WANDB_PROJECT; null: train_multigpu
    entity: str | None = None  # WANDB_ENTITY; null: the key's default entity
    mode: WandbMode = WandbMode.auto
    tags: list[str] = field(default_factory=list)  # WANDB_TAGS
    # WANDB_RUN_GROUP; null: the -m sweep's directory name, else the launch's run directory name
    group: str | None = None
    # every rank logs (each its own run id <id>-rank<R>, one group); false: only global rank 0 does
    all_ranks: bool = False


@dataclass
class MlflowConfig:
    """MLflow, set up by the launcher (``tracker=mlflow``; docs/trackers.md): one run per launch."""

    enabled: bool = False
    # MLFLOW_TRACKING_URI: http(s)://HOST:PORT, file:DIR, sqlite:///FILE, ...; null: $MLFLOW_TRACKING_URI, else ./mlruns
    tracking_uri: str | None = None
    experiment: str | None = None  # MLFLOW_EXPERIMENT_NAME; null: train_multigpu
    tags: dict[str, str] = field(default_factory=dict)  # more tags on every run the launcher creates
    # seconds the launcher waits for an http(s) tracking server before it gives up (before anything starts)
    timeout: float = 5.0


@dataclass
class TrackerConfig:
    """The experiment trackers (``tracker=wandb``, ``tracker=mlflow``, ``tracker=[wandb,mlflow]``)."""

    wandb: WandbConfig = field(default_factory=WandbConfig)
    mlflow: MlflowConfig = field(default_factory=MlflowConfig)


@dataclass
class NotifyConfig:
    """A word when a run changes state: one POST to a webhook per event (docs/notify.md; launcher/notify.py)."""

    # the webhook (Slack, Discord, or any receiver of JSON): a secret, masked wherever it is shown
    url: str | None = None
    # the events posted: failed, restarted, succeeded, stopped
    # ("events", not "on": YAML 1.1 reads an unquoted ``on:`` key as true)
    events: list[str] = field(default_factory=lambda: ["failed", "restarted", "succeeded"])


@dataclass
class TrainConfig:
    launcher: LauncherConfig = field(default_factory=LauncherConfig)
    rl_library: RLLibraryConfig = field(default_factory=RLLibraryConfig)
    profile: ProfileConfig = field(default_factory=ProfileConfig)
    # training fields: forwarded as --key value when set
    task: str | None = None
    num_envs: int | None = None
    max_iterations: int | None = None
    seed: int | None = None
    run_name: str | None = None
    # path of the training script; overrides what the profile and rl_library select
    script: str | None = None
    # interpreter that runs torchrun and the workers; None = the launcher's own
    python: str | None = None
    device: Device = Device.auto
    dry_run: bool = False
    # where run directories are created (relative to the working directory)
    run_root: str = "runs"
    log_all_ranks: bool = False
    # extra arguments for the training script: presets add theirs under their own name (in order),
    # the command line's forwarded arguments come last
    preset_args: dict[str, list[str]] = field(default_factory=dict)
    script_args: list[str] = field(default_factory=list)
    # extra environment variables for every worker (not "env": that root belongs to Isaac Lab's
    # training script, whose env.* overrides are forwarded)
    worker_env: dict[str, str] = field(default_factory=dict)
    sweep: SweepConfig = field(default_factory=SweepConfig)
    # submit=slurm: write <run dir>/job.sbatch and sbatch it instead of running here
    submit: Submit = Submit.none
    slurm: SlurmConfig = field(default_factory=SlurmConfig)
    # submit=ray: one Ray job per launch (docs/ray.md)
    ray: RayConfig = field(default_factory=RayConfig)
    # submit=k8s: write <run dir>/<kind>.yaml and create it with kubectl instead of running here
    k8s: K8sConfig = field(default_factory=K8sConfig)
    # restarts by cause while progress is made (docs/recovery.md)
    restart: RestartConfig = field(default_factory=RestartConfig)
    # submit=ssh: one launcher per host of ssh.hosts / ssh.hostfile, started over SSH (docs/ssh.md)
    ssh: SshConfig = field(default_factory=SshConfig)
    # run each node's launch inside an image (docs/containers.md)
    container: ContainerConfig = field(default_factory=ContainerConfig)
    # use this run directory instead of a new one under run_root (set by submit=slurm for the job)
    run_dir: str | None = None
    # experiment trackers the launcher sets up (docs/trackers.md): tracker=wandb, tracker=mlflow
    tracker: TrackerConfig = field(default_factory=TrackerConfig)
    # a webhook told when the run fails, restarts or succeeds (docs/notify.md)
    notify: NotifyConfig = field(default_factory=NotifyConfig)


SCHEMA_NAME = "train_multigpu_schema"


def register() -> None:
    """Store the schema so the primary config can name it first in its defaults list."""
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(name=SCHEMA_NAME, node=TrainConfig)


def keys_of_type(wanted: type, kind: type = TrainConfig, prefix: str = "") -> tuple[str, ...]:
    """Every dotted key of ``kind`` whose value is a ``wanted`` (``list``: ``list[str]`` keys; ``int``:
    ``int`` and ``int | None`` keys), so a rule for a kind of value covers every key of it.

    >>> keys_of_type(list)[:4]
    ('profile.rl_libraries', 'profile.tasks', 'script_args', 'k8s.secret_env')
    >>> keys_of_type(list)[4:7]
    ('restart.classes', 'ssh.hosts', 'ssh.options')
    >>> keys_of_type(list)[7:11]
    ('container.runtime_flags', 'container.mounts', 'container.env', 'container.options')
    >>> keys_of_type(list)[11:]
    ('tracker.wandb.tags', 'notify.events')
    """
    import dataclasses
    import types
    import typing

    found: list[str] = []
    hints = typing.get_type_hints(kind)
    for item in dataclasses.fields(kind):
        hint, key = hints[item.name], prefix + item.name
        if dataclasses.is_dataclass(hint):
            found += keys_of_type(wanted, hint, f"{key}.")
            continue
        union = typing.get_origin(hint) in (typing.Union, types.UnionType)
        inner = [a for a in typing.get_args(hint) if a is not type(None)] if union else [hint]
        if len(inner) == 1 and (typing.get_origin(inner[0]) or inner[0]) is wanted:
            found.append(key)
    return tuple(found)
