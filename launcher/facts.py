"""What the stages before a launch hand each other: the host's facts (:mod:`launcher.probe` reads
them), the values :mod:`launcher.checks` settles from the config and those facts, and torchrun's port
defaults. A leaf: the checks, the probe, the plan and the back ends import these names from here, so
none of them imports another for a shared type."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .addresses import Endpoint
from .container import Container
from .cpu_topology import Allowed

C10D_DEFAULT_PORT = 29400  # torchrun's c10d rendezvous endpoint without a port
MASTER_DEFAULT_PORT = 29500  # torchrun's --master_port
NODE_PORT_DEFAULT = "the rendezvous port + 1"  # launcher.node_port unset (run/monitor/liveness.py), as messages say it


@dataclass(frozen=True)
class HostFacts:
    """What this machine says, read once before a launch (probe.gather); the plan reads nothing itself."""

    python: str
    visible_gpus: int
    gpus_source: str  # where the count came from, for messages
    usable_cpus: int
    examples_dir: str
    env: Mapping[str, str] = field(default_factory=dict)
    # the CPUs the launcher may use (cpu_topology.allowed: its affinity within its cgroup cpuset; a
    # parallel sweep's lane or a local node's share: those cores); None: not read (pure tests)
    cpus: Allowed | None = None
    cwd: str = ""  # the working directory (a relative run_root is under it: a container mounts it)
    home: str = ""  # ~ in container.mounts


@dataclass(frozen=True)
class Facing:
    """The network interface this node reaches the other nodes through, found by probe.locate
    (probe.source_address) when launcher.network_interface is not set."""

    interface: str
    address: str  # this node's address on it
    target: str  # what it faces, for the dry run: "the rendezvous endpoint 10.0.0.1:29400"


@dataclass(frozen=True)
class Settled:
    """Values derived from the config and the host; everything the plan needs beyond the config."""

    device: str  # "cuda" or "cpu"
    nproc_per_node: int
    nnodes: str  # as torchrun takes it: "2" or "1:4"
    min_nodes: int
    max_nodes: int
    script: str
    rdzv_endpoint: Endpoint | None = None
    coordinator: Endpoint | None = None  # JAX, None until chosen on a single node
    # torchrun's rendezvous backend across nodes (c10d, static, ...); None for JAX
    rdzv_backend: str | None = None
    rdzv_conf: tuple[tuple[str, str], ...] = ()  # the user's launcher.rdzv_conf, parsed
    # filled in by locate() (it looks at the machine): --local_addr, and whether this machine holds
    # the c10d endpoint's address (None: not looked at, or the endpoint does not resolve here)
    local_addr: str | None = None
    endpoint_here: bool | None = None
    # filled in by locate() on a node that does not hold the c10d endpoint: whether this machine's own
    # host name resolves here (torch's is_host guess resolves it, and fails when it does not)
    own_name_resolves: bool | None = None
    # filled in by locate(): the interface facing node 0 (multi-node, no launcher.network_interface)
    facing: Facing | None = None
    # node liveness (run/monitor/liveness.py): node 0's launcher listens at this port, the others connect to
    # this host; None: the nodes do not watch each other (one node, elastic nnodes, node_timeout off)
    node_hub: Endpoint | None = None
    # launcher.cpu_binding, placed by cpu_placement.place (it reads the machine): each local rank's CPUs
    # (empty: not bound), what they came from (for the dry run), and torchrun's --numa-binding mode
    # where torchrun binds (GPUs, a torchrun that has the flag, numactl); None: the rank wrapper binds
    cpu_lists: tuple[tuple[int, ...], ...] = ()
    cpu_source: str = ""
    numa_binding: str | None = None
    # container.image given: the settled container group (launcher/container.py); None: bare processes
    container: Container | None = None
