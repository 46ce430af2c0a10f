"""``submit=ssh``, the pure part: each node's ssh command line and the launcher command it runs there.

Node ``i`` (host ``i`` of ``ssh.hosts`` / the hostfile) runs, through
``ssh -o BatchMode=yes -o ConnectTimeout=N -T -o PermitLocalCommand=no [-l USER] [-p PORT] [-i FILE] [-o OPTION...]
-o ServerAliveInterval=5 -o ServerAliveCountMax=3 HOST``::

    cd <workdir> || exit 96; <the guard> export TRAIN_MULTIGPU_SSH_CHANNEL=$! && <ssh.python> -m launcher

and that launcher's arguments go on the SSH channel (its first line, run/leash.py), not on its
command line::

    [--config-dir DIR] <the overrides as typed> launcher.nnodes=<hosts> launcher.node_rank=<i>
        [<the rendezvous on node 0>] submit=none run_dir=<run dir> [-- <script args>]

So the command line depends on the ``ssh.*`` keys, this interpreter and this directory alone: a
launch that names its hosts on the command line starts it before Hydra composes
(launcher/ssh/early.py), and every host's launcher imports while this machine composes.

(node i's launcher records in ``<run dir>/node<i>`` on its own disk: a multi-node launch given
``run_dir`` adds ``node<R>`` itself, as a SLURM job's nodes do). A client whose connection went
silent gives up after about 15 s (ServerAlive*: the node is lost, not waited for forever); an
``ssh.options`` entry for either comes first and wins (ssh takes the first value it is given).

(``ssh.command`` instead of ``<ssh.python> -m launcher``: a shell line, e.g. a conda activation,
taken as it is). The overrides are those the session composed, in the order typed, so every node
composes the same config the same way (as a SLURM job's nodes do: launcher/slurm/submit.py); the
keys only this machine uses (``submit``, ``dry_run``, ``run_dir``, ``ssh.*``) are dropped, and
what differs per node is appended. The node count is the number of hosts; node 0 is the first
host; unless ``launcher.rdzv_endpoint`` / ``launcher.master_addr`` (torchrun) or
``launcher.coordinator_address`` (JAX) was given, node 0's address and ``ssh.rendezvous_port``
are the rendezvous endpoint or the JAX coordinator, and the run directory's name is the c10d
``rdzv_id``. A hostfile's ``slots`` become ``launcher.nproc_per_node`` (launcher/ssh/hosts.py).

No secret value is in any of it: a secret typed on the command line (``+worker_env.HF_TOKEN=abc``)
stays the placeholder the grammar left for Hydra (``+worker_env.HF_TOKEN=***``,
launcher/config/grammar.py ``hide``) and its dotted path is listed in :attr:`SshPlan.secrets`; the
remote launcher, started with ``TRAIN_MULTIGPU_SSH_CHANNEL`` in its environment, reads the values
from its stdin (the SSH channel) into its vault. So no value is ever in a command line that ``ps``
shows on a host, nor in a file there.

Quoting happens once, at the edge (:func:`shlex.quote`): the remote shell gets the working
directory and ``ssh.python`` back exactly; the arguments travel as JSON strings.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..errors import UserError
from ..names import SSH_CHANNEL_VAR, override_key
from ..rundir import node_name
from ..secrets import MASK
from .hosts import Host

if TYPE_CHECKING:
    from ..secrets import Vault

SSH = "ssh"
# what keeps the channel (the secrets, then the beats, on ssh's stdin) to ssh and the remote
# launcher alone, whatever the user's ssh configuration says: no terminal (one would echo every line
# of the channel on the console: the secrets) and no LocalCommand (it would share ssh's stdin). ssh
# keeps the first value it is given of each option, the command line's before any config file's, so
# these come before ssh.options (checks.CHANNEL_OPTIONS refuses a typed value that differs); -T
# beats any RequestTTY wherever it is
CHANNEL = ("-T", "-o", "PermitLocalCommand=no")
# a connection that went silent (a link down, a host gone) ends its client after ~15 s: exit 255
ALIVE = ("ServerAliveInterval=5", "ServerAliveCountMax=3")
NO_WORKDIR = 96  # the remote shell's exit status when it could not cd into the working directory
# until the remote launcher ends it, ends the group the remote shell leads when the channel closes
GUARD = "exec 3<&0; { read -r _ <&3 || kill -TERM -$$; } >/dev/null 2>&1 & exec 3<&-;"
ENTRY_MODULE = "launcher"  # python -m launcher: the package's own entry (launcher/__main__.py)
# keys of what was typed that only this machine uses: every node gets its own values or none
_DROPPED_KEYS = ("submit", "dry_run", "run_dir", "launcher.nnodes", "launcher.node_rank")
_DROPPED_ROOTS = ("ssh",)
CONFIG_FLAGS = ("--config-dir", "-cd")
# the dry run's line under each node's ssh command: that launcher's arguments, as the channel sends them
CHANNEL_ARGS = "#   its arguments, on the channel:"


@dataclass(frozen=True)
class SshNode:
    """One node of the launch: where it runs and what runs there."""

    rank: int
    host: str  # as given in ssh.hosts / the hostfile
    ssh_argv: tuple[str, ...]  # ssh, its options, the destination
    entry: str  # the shell text that runs the launcher there: "<ssh.python> -m launcher" or ssh.command
    workdir: str
    remote_argv: tuple[str, ...] = ()  # the launcher's arguments there, sent on the channel (no secret value)

    @property
    def remote_line(self) -> str:
        """The command ssh hands the remote shell (a POSIX one: sh, bash, zsh)::

        cd <workdir> || exit 96; exec 3<&0; { read -r _ <&3 || kill -TERM -$$; } >/dev/null 2>&1 &
        exec 3<&-; export TRAIN_MULTIGPU_SSH_CHANNEL=$! && <entry>

        One process per host: the launcher there answers the preflight (launcher/ssh/preflight.py),
        then runs the node. The variable tells it that its stdin is the SSH channel (the secrets,
        ``go``, the beats; EOF when the connection drops; ``export`` so that it holds for an
        ``ssh.command`` line too), and names the guard: until the launcher has started and ended
        it (run/leash.py), the guard waits on the channel -- the local side sends nothing before
        the launcher says it is there -- and when the channel closes, ends the process group the
        shell leads (sshd makes the remote command a session of its own; a shell that leads no group,
        this line run by hand, signals nothing): a Ctrl+C or a dropped connection while
        ``ssh.command``'s prefix or Python's imports still run leaves nothing behind. stdin goes
        through fd 3: a shell gives a background list /dev/null as its stdin. 96: no working
        directory there. The launcher's arguments (:attr:`remote_argv`) are not on it: they go
        on the channel."""
        return (
            f"cd {shlex.quote(self.workdir)} || exit {NO_WORKDIR}; {GUARD} export {SSH_CHANNEL_VAR}=$! && {self.entry}"
        )

    @property
    def argv(self) -> tuple[str, ...]:
        """What is started here for this node (launcher/run/ starts it)."""
        return (*self.ssh_argv, self.remote_line)


@dataclass(frozen=True)
class SshPlan:
    """``SshBackend.dryrun``'s payload: every node's command, and what travels on stdin."""

    nodes: tuple[SshNode, ...]
    run_dir: str  # this machine's record of the launch; node i records in <run_dir>/node<i> on its host
    endpoint: str  # the rendezvous endpoint / JAX coordinator (or static master) the nodes meet at
    # the secrets typed on the command line, by dotted path (worker_env.HF_TOKEN): the nodes'
    # overrides hold the grammar's placeholder; the values go on each ssh client's stdin into the
    # remote launcher's vault (never a command line, never a file)
    secrets: tuple[str, ...] = ()
    # the launch's vault (the values): for the submitter only, never shown, never recorded
    vault: Vault | None = field(default=None, repr=False, compare=False)
    connect_timeout: int = 10
    grace_period: float = 30.0  # launcher.grace_period: SIGTERM to SIGKILL, on every node
    node_timeout: float | None = 30.0  # launcher.node_timeout: a node silent this long is lost
    nproc: str = "auto"  # ranks per node: launcher.nproc_per_node as each node gets it

    def secret_values(self) -> dict[str, str]:
        """Each secret's value by dotted path, as the channel carries it (the placeholder ``***``'s).

        >>> from launcher.secrets import Vault
        >>> vault = Vault({"worker_env.HF_TOKEN": {"***": "abc"}})
        >>> SshPlan((), "/r", "a:1", ("worker_env.HF_TOKEN",), vault).secret_values()
        {'worker_env.HF_TOKEN': 'abc'}
        """
        out = {}
        for path in self.secrets:
            by_placeholder = (self.vault.values.get(path) if self.vault is not None else None) or {}
            value = by_placeholder.get(MASK, next(iter(by_placeholder.values()), None))
            if value is not None:
                out[path] = value
        return out

    def ranks(self, rank: int) -> str:
        """Node ``rank``'s ranks, as far as known here.

        >>> SshPlan((), "/r", "a:1", nproc="4").ranks(1), SshPlan((), "/r", "a:1").ranks(1)
        ('ranks 4-7 of 0', 'launcher.nproc_per_node=auto ranks (counted there)')
        """
        if self.nproc.isdigit():
            n = int(self.nproc)
            return f"ranks {rank * n}-{(rank + 1) * n - 1} of {n * len(self.nodes)}"
        return f"launcher.nproc_per_node={self.nproc} ranks (counted there)"

    def shown(self) -> str:
        """What the dry run prints: every ssh command line, and each node's plan."""
        count = len(self.nodes)
        meeting = f"meeting at {self.endpoint}" if self.endpoint else "no rendezvous"
        lines = [f"# submit=ssh: {count} node{'s' if count != 1 else ''}, {meeting}; run directory: {self.run_dir}"]
        if self.secrets:
            lines.append(f"# secrets on each ssh client's stdin (never on a command line): {', '.join(self.secrets)}")
        for node in self.nodes:
            lines.append(
                f"# node {node.rank}: {node.host}, {self.ranks(node.rank)}, in {node.workdir}, "
                f"recording in {self.run_dir}/{node_name(node.rank)}"
            )
            lines.append(shlex.join(node.argv))
            lines.append(f"{CHANNEL_ARGS} {shlex.join(node.remote_argv)}")
        return "\n".join(lines)


def ssh_argv(
    host: Host, user: str | None, port: int | None, identity: str | None, options: Sequence[str], connect_timeout: int
) -> list[str]:
    """``ssh`` with its options for one host: never a prompt (BatchMode), a bounded connect, no
    terminal and no local command (:data:`CHANNEL`).

    >>> ssh_argv(Host("gpu-a"), "me", 2222, "/k/id", ["StrictHostKeyChecking=accept-new"], 5)[5:8]
    ['-T', '-o', 'PermitLocalCommand=no']
    >>> ssh_argv(Host("gpu-a"), "me", 2222, "/k/id", ["StrictHostKeyChecking=accept-new"], 5)[8:]
    ['-l', 'me', '-p', '2222', '-i', '/k/id', '-o', 'StrictHostKeyChecking=accept-new', '-o', 'ServerAliveInterval=5', '-o', 'ServerAliveCountMax=3', 'gpu-a']
    """  # noqa: E501
    argv = [SSH, "-o", "BatchMode=yes", "-o", f"ConnectTimeout={connect_timeout}", *CHANNEL]
    if user:
        argv += ["-l", str(user)]
    if port is not None:
        argv += ["-p", str(port)]
    if identity:
        argv += ["-i", str(identity)]
    for option in options:
        argv += ["-o", str(option)]
    for option in ALIVE:  # after the user's: ssh keeps the first value of each
        argv += ["-o", option]
    return [*argv, host.destination]


def node(rank: int, host: Host, ssh, python: str, cwd: str, args: Sequence[str] = ()) -> SshNode:
    """Node ``rank`` on ``host``: its ssh command (``ssh``: the composed ``ssh.*`` keys; ``python``,
    ``cwd``: this machine's interpreter and working directory, the defaults of ``ssh.python`` and
    ``ssh.workdir``) and ``args``, its launcher's arguments. The command depends on nothing else."""
    argv = ssh_argv(host, ssh.user, ssh.port, ssh.identity, ssh.options, ssh.connect_timeout)
    entry = str(ssh.command).strip() if ssh.command else shlex.join([str(ssh.python or python), "-m", ENTRY_MODULE])
    workdir = str(ssh.workdir) if ssh.workdir else cwd
    return SshNode(rank, host.name, tuple(argv), entry, workdir, tuple(args))


def config_flags(hydra_flags: Sequence[str], cwd: str) -> list[str]:
    """``--config-dir DIR`` as typed, the directory made absolute (every node reads it at that path).

    >>> config_flags(["-m", "--config-dir", "lab", "--cfg", "job"], "/w")
    ['--config-dir', '/w/lab']
    """
    import posixpath

    out: list[str] = []
    for i, flag in enumerate(hydra_flags):
        if flag in CONFIG_FLAGS and i + 1 < len(hydra_flags):
            out += [flag, posixpath.normpath(posixpath.join(cwd, hydra_flags[i + 1]))]
    return out


def kept_overrides(overrides: Sequence[str]) -> list[str]:
    """The overrides every node composes with: as typed, without the keys only this machine uses.

    >>> kept_overrides(["task=X", "submit=ssh", "ssh.hosts=[a,b]", "+ssh.options=[x]", "launcher.nnodes=2", "seed=1"])
    ['task=X', 'seed=1']
    """
    out = []
    for override in overrides:
        key = override_key(override)
        if key in _DROPPED_KEYS or key.split(".", 1)[0] in _DROPPED_ROOTS:
            continue
        out.append(override)
    return out


def by_channel(overrides: Sequence[str], referenced: Mapping[str, str]) -> list[str]:
    """The overrides with each secret given by reference (``${oc.env:NAME}``, resolved here: its
    value goes on the channel) as the placeholder the channel fills: a typed one in its place, one
    from a profile appended (the nodes' profile holds the same reference).

    >>> by_channel(["seed=1", "+worker_env.A_TOKEN=${oc.env:A}"], {"worker_env.A_TOKEN": "x", "profile.env.B_KEY": "y"})
    ['seed=1', '+worker_env.A_TOKEN=***', 'profile.env.B_KEY=***']
    """
    from ..secrets import MASK

    out, left = [], dict(referenced)
    for override in overrides:
        key = override_key(override)
        if key in left and "=" in override:
            left.pop(key)
            override = f"{override.split('=', 1)[0]}={MASK}"
        out.append(override)
    return out + [f"{path}={MASK}" for path in left]


def node_count(nnodes: object, typed: bool, hosts: Sequence[Host]) -> int:
    """The node count: the number of hosts; ``launcher.nnodes``, when set, must agree.

    >>> node_count("1", False, [Host("a"), Host("b")]), node_count("2", True, [Host("a"), Host("b")])
    (2, 2)
    >>> node_count("3", True, [Host("a"), Host("b")])
    Traceback (most recent call last):
    ...
    launcher.errors.UserError: launcher.nnodes=3: submit=ssh runs one node per host: 2 hosts (a, b) (drop launcher.nnodes, or name 3 hosts)
    """  # noqa: E501
    count = len(hosts)
    text = "" if nnodes is None else str(nnodes).strip()
    if typed or text not in ("", "1"):
        if text != str(count):
            names = ", ".join(h.name for h in hosts)
            raise UserError(
                "launcher.nnodes",
                nnodes,
                f"submit=ssh runs one node per host: {count} host{'s' if count != 1 else ''} ({names})",
                f"drop launcher.nnodes, or name {text} hosts" if text.isdigit() else "drop launcher.nnodes",
            )
    return count


@dataclass(frozen=True)
class Meeting:
    """Where the nodes meet, and the overrides that say so (empty: the user's own, as typed)."""

    endpoint: str
    settings: tuple[tuple[str, str], ...] = ()  # (key, value): what every node adds

    @property
    def overrides(self) -> tuple[str, ...]:
        return tuple(f"{key}={value}" for key, value in self.settings)


def meeting(launcher, jax: bool, host0: Host, port: int, rdzv_id: str) -> Meeting:
    """The rendezvous endpoint (torchrun) or JAX coordinator: as given, else node 0 and ``port``.

    >>> from launcher.config.schema import LauncherConfig
    >>> meeting(LauncherConfig(), False, Host("gpu-a"), 29400, "r1")
    Meeting(endpoint='gpu-a:29400', settings=(('launcher.rdzv_endpoint', 'gpu-a:29400'), ('launcher.rdzv_id', 'r1')))
    >>> meeting(LauncherConfig(), True, Host("fd00::1"), 1234, "r1").overrides
    ('launcher.coordinator_address=[fd00::1]:1234',)
    >>> meeting(LauncherConfig(master_addr="10.0.0.1"), False, Host("a"), 1, "r1")
    Meeting(endpoint='10.0.0.1 (static)', settings=())
    """
    address = f"{host0.address}:{port}"
    if jax:
        if launcher.coordinator_address:
            return Meeting(str(launcher.coordinator_address))
        return Meeting(address, (("launcher.coordinator_address", address),))
    if launcher.rdzv_endpoint:
        return Meeting(str(launcher.rdzv_endpoint))
    if launcher.master_addr:
        return Meeting(f"{launcher.master_addr} (static)")
    out = [("launcher.rdzv_endpoint", address)]
    if launcher.rdzv_id is None:
        out.append(("launcher.rdzv_id", rdzv_id))
    return Meeting(address, tuple(out))


def quote_value(value: str) -> str:
    """A path as a Hydra override value that stays that string."""
    import re

    from ..config import grammar

    return value if re.fullmatch(r"/[A-Za-z0-9_./-]*", value) else grammar.quote(value)


def in_typed_order(
    overrides: Sequence[str], script_args: Sequence[str], order: Sequence[str], framework: str = "torch"
) -> tuple[list[str], list[str]]:
    """The overrides and the script's arguments as node i's command line gives them back: (before
    ``--``, after it), so that its launcher parses the same arguments in the same order as this one
    did (grammar.CommandLine.order: where a task=, a seed=, --ml_framework or a forwarded --flag was
    typed is where the training script gets it). A forwarded argument typed before a key the script
    receives stays before it; the rest go after ``--``.

    >>> in_typed_order(["task=X", "seed=1"], ["--headless", "--lr", "3"], ["", "task", "", "", "seed"])
    (['--headless', 'task=X', '--lr', '3', 'seed=1'], [])
    >>> in_typed_order(["task=X", "launcher=skrl_jax"], ["--headless"], ["task", "ml_framework", ""], "jax")
    (['task=X', '--ml_framework', 'jax', 'launcher=skrl_jax'], ['--headless'])
    """
    from ..config.grammar import ARG, ORDERED_KEYS, PRESETS_KEY

    named = [i for i, entry in enumerate(order) if entry != ARG]
    last = named[-1] if named else -1
    pending, args = list(overrides), list(script_args)
    out: list[str] = []
    for entry in order[: last + 1]:
        if entry == ARG:
            if args:
                out.append(args.pop(0))
        elif entry == "ml_framework":
            out += ["--ml_framework", framework]
        else:
            key = PRESETS_KEY if entry.startswith(PRESETS_KEY + ":") else entry
            while pending:  # the overrides up to this key's, as typed (the others keep no order)
                override = pending.pop(0)
                out.append(override)
                if override_key(override) == key and key in (*ORDERED_KEYS, PRESETS_KEY):
                    break
    return out + pending, args


def node_settings(cfg, count: int, nproc: str, rank: int, meet: Meeting, run_dir: str) -> list[tuple[str, str]]:
    """What node ``rank`` adds to the overrides as typed, as (key, value) in order: the topology
    (torchrun's single node becomes multinode across hosts), the ranks per node when a hostfile's
    slots set them, the node count and rank, where the nodes meet, no submission, the run
    directory. Node i records in ``<run dir>/node<i>``: across hosts its launcher adds ``node<i>``
    itself (local.run_dir), one host is given it (and runs as a single node, no rendezvous)."""
    from ..config.schema import Topology

    launcher = cfg.launcher
    single = count == 1 and launcher.topology is not Topology.multinode
    out = []
    if launcher.topology is Topology.single_node and not single:
        out.append(("launcher.topology", Topology.multinode.value))
    if nproc != str(launcher.nproc_per_node):
        out.append(("launcher.nproc_per_node", nproc))
    out += [("launcher.nnodes", str(count)), ("launcher.node_rank", str(rank))]
    if not single:
        out += meet.settings
    where = run_dir if count > 1 else f"{run_dir.rstrip('/')}/{node_name(rank)}"
    return [*out, ("submit", "none"), ("run_dir", where)]


def node_config(cfg, settings: Sequence[tuple[str, str]]):
    """``cfg`` as node i's launcher composes it: the settings applied (for checking it here)."""
    import copy

    from ..config.schema import Submit, Topology

    node = copy.deepcopy(cfg)
    for key, value in settings:
        if key == "launcher.topology":
            node.launcher.topology = Topology(value)
        elif key == "launcher.node_rank":
            node.launcher.node_rank = int(value)
        elif key == "submit":
            node.submit = Submit(value)
        elif key.startswith("launcher."):
            setattr(node.launcher, key.split(".", 1)[1], value)
        else:
            setattr(node, key, value)
    node.dry_run = False
    return node


def build(
    cfg,
    typed,
    hosts: Sequence[Host],
    run_dir: str,
    *,
    vault: Vault | None = None,
    python: str,
    cwd: str,
) -> SshPlan:
    """Every node's command (``cfg``: the composed launch; ``typed``: what was typed, secret values
    already placeholders; ``vault``: the values, carried for the submitter;
    ``python``, ``cwd``: this machine's interpreter and working directory, the defaults of
    ``ssh.python`` and ``ssh.workdir``)."""
    from ..config.schema import Topology
    from . import hosts as hosts_mod

    ssh = cfg.ssh
    launcher = cfg.launcher
    nnodes_typed = any(override_key(o) == "launcher.nnodes" for o in typed.overrides)
    count = node_count(launcher.nnodes, nnodes_typed, hosts)
    for override in typed.overrides:
        if override_key(override) == "launcher.node_rank":
            raise UserError(
                "launcher.node_rank",
                override.split("=", 1)[1] if "=" in override else None,
                "submit=ssh gives every host its own (node 0 is the first host)",
                "drop launcher.node_rank; reorder the hosts to choose node 0",
            )
    nproc = hosts_mod.nproc(hosts, launcher.nproc_per_node)
    jax = launcher.topology is Topology.skrl_jax
    rdzv_id = run_dir.rstrip("/").rsplit("/", 1)[-1] or "train_multigpu"
    meet = meeting(launcher, jax, hosts[0], ssh.rendezvous_port, rdzv_id)
    if count == 1 and launcher.topology is not Topology.multinode:
        meet = Meeting("")  # one host: a launch of one node, as here
    jax_framework = "jax" if jax else "torch"
    referenced = dict(vault.referenced) if vault is not None else {}
    kept = by_channel(kept_overrides(typed.overrides), referenced)
    before, after = in_typed_order(kept, typed.script_args, typed.order, jax_framework)
    typed_args = [*config_flags(typed.hydra_flags, cwd), *before]
    nodes = []
    for rank, host in enumerate(hosts):
        added = node_settings(cfg, count, nproc, rank, meet, run_dir)
        args = [*typed_args, *(f"{key}={quote_value(value) if key == 'run_dir' else value}" for key, value in added)]
        if after:
            args += ["--", *after]
        nodes.append(node(rank, host, ssh, python, cwd, args))
    from .checks import check_node

    for rank in sorted({0, count - 1}):  # as node 0 and the last node will check it
        check_node(node_config(cfg, node_settings(cfg, count, nproc, rank, meet, run_dir)), str(ssh.python or python))
    if referenced:  # carried as typed ones: the values on the channel
        from ..secrets import MASK, Vault

        values = {**vault.values, **{path: {MASK: value} for path, value in referenced.items()}}
        vault = Vault(values)
    names = tuple(vault.values) if vault is not None else ()
    return SshPlan(
        tuple(nodes),
        run_dir,
        meet.endpoint,
        names,
        vault,
        ssh.connect_timeout,
        float(launcher.grace_period),
        None if launcher.node_timeout is None else float(launcher.node_timeout),
        str(nproc),
    )
