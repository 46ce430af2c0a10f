"""A node's whole launch inside a container image: the settled ``container`` keys and the one place
that turns a process's argv into the runtime's command line (PURE; a leaf: the plan, the dry run and
``run/`` read the same function, so the dry run prints exactly what starts).

One container holds one process the launcher starts: torchrun and all of its workers (a torch node),
or one JAX rank. The launcher outside supervises it as it would the bare process; what it needs to
keep every promise inside:

- the run root (or ``run_dir=``) and the rank wrapper (launcher/run/worker.py, standard library only)
  are mounted at their own paths, so logs, heartbeats, stacks and exit records land where the
  launcher reads them, and the image needs Python with the training stack, not this launcher;
- the host network and the host IPC namespace (rendezvous across nodes, NCCL's shared memory);
- every variable by NAME only (``-e NAME``, ``APPTAINERENV_NAME``, ``--container-env=NAME``): the
  runtime reads the value from its own environment, so no value is on any command line; under
  docker/podman a secret (``secrets.is_secret``) does not go through the runtime at all, which would
  store it in the container's configuration on disk: the container's stdin carries it to a small
  entry program (run/container_entry.py, mounted like the rank wrapper) that sets it and execs the launch;
- docker/podman: a name unique per launch, node, attempt (and JAX rank), and ``--init`` so a signal
  reaches the process; a container the daemon (or conmon) keeps after its client died is removed by
  that name (:func:`remove_argv`: the supervisor and the watchdog);
- pyxis: ``--container-name`` is the launch's and node's only, so a restart reuses the container.

>>> c = Container("podman", "img", ("--runtime", "runc"), (Mount("/d", "/d", "ro"),), ("/runs", "/w.py"),
...               "/work", ("DEBUG",), (), ("--ulimit", "nofile=1024:1024"), False)
>>> " ".join(argv(c, ("python3", "t.py"), ("A", "DEBUG"), "tmg-x-n0-a0"))  # doctest: +NORMALIZE_WHITESPACE
'podman --runtime runc run --rm --name tmg-x-n0-a0 --init --network host --ipc host -v /runs:/runs
 -v /w.py:/w.py:ro -v /d:/d:ro -w /work -e A -e DEBUG --ulimit nofile=1024:1024 img python3 t.py'
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .errors import UserError
from .paths import CONTAINER_ENTRY
from .secrets import is_secret

DOCKER, PODMAN, APPTAINER, SINGULARITY, PYXIS = "docker", "podman", "apptainer", "singularity", "pyxis"
RUNTIMES = (DOCKER, PODMAN, APPTAINER, SINGULARITY, PYXIS)
DAEMON_LIKE = (DOCKER, PODMAN)  # the container outlives its client: named, and removed by that name
NAME_PREFIX = "tmg"
LAUNCH_ID_SHOWN = "<launch id>"  # the dry run's stand-in for the id a real launch draws
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MODES = ("ro", "rw")


@dataclass(frozen=True)
class Mount:
    src: str
    dst: str
    mode: str = ""  # "", "ro" or "rw"

    def spelled(self, sep: str = ":") -> str:
        return sep.join([self.src, self.dst] + ([self.mode] if self.mode else []))


@dataclass(frozen=True)
class Container:
    """The settled ``container`` group (:func:`settle`)."""

    runtime: str  # one of RUNTIMES
    image: str
    runtime_flags: tuple[str, ...]
    mounts: tuple[Mount, ...]  # the user's, SRC expanded
    own: tuple[str, ...]  # the launcher's own mounts at their own paths: the run root (rw), the wrapper (ro)
    workdir: str | None
    names: tuple[str, ...]  # container.env names passed through from the launcher's environment
    values: tuple[tuple[str, str], ...]  # container.env NAME=VALUE entries (set for the runtime, passed by name)
    options: tuple[str, ...]
    gpus: bool
    node: str | None = None  # pyxis: the node the step runs on (SLURMD_NODENAME)

    @property
    def program(self) -> str:
        return "srun" if self.runtime == PYXIS else self.runtime


def settle(
    *,
    image: object,
    runtime: str,
    runtime_flags: Sequence[str],
    mounts: Sequence[str],
    workdir: object,
    env: Sequence[str],
    options: Sequence[str],
    gpus: bool | None,
    device: str,
    slurm: bool,
    run_root: str,
    wrapper: str,
    home: str,
    node: str | None = None,
) -> Container | None:
    """The ``container`` keys checked and settled (None: no ``container.image``). ``slurm``: the
    launch runs inside a SLURM allocation (pyxis works only there); ``run_root``: the absolute run
    root (or ``run_dir=``), mounted at its own path.

    >>> settle(image="a.sif", runtime="auto", runtime_flags=[], mounts=[], workdir=None, env=[], options=[],
    ...        gpus=None, device="cuda", slurm=False, run_root="/r", wrapper="/w.py", home="/h").runtime
    'apptainer'
    >>> settle(image="img", runtime="pyxis", runtime_flags=[], mounts=[], workdir=None, env=[], options=[],
    ...        gpus=None, device="cpu", slurm=False, run_root="/r", wrapper="/w.py", home="/h")
    Traceback (most recent call last):
    ...
    launcher.errors.UserError: container.runtime=pyxis: pyxis is SLURM's plugin: srun --container-image works only inside a SLURM allocation (launcher=slurm, submit=slurm) (use docker, podman or apptainer here)
    """  # noqa: E501
    if image is None:
        return None
    image = str(image)
    if not image.strip() or any(ch.isspace() for ch in image) or image.startswith("-"):
        raise UserError(
            "container.image",
            image,
            "an image: a registry reference, a local image, a .sif or .sqsh file (no spaces, not a flag)",
        )
    chosen = runtime if runtime != "auto" else _default_runtime(image, slurm)
    if chosen not in RUNTIMES:
        raise UserError("container.runtime", runtime, f"one of auto, {', '.join(RUNTIMES)}")
    if chosen == PYXIS and not slurm:
        raise UserError(
            "container.runtime",
            runtime if runtime != "auto" else f"auto (pyxis, for {image})",
            "pyxis is SLURM's plugin: srun --container-image works only inside a SLURM allocation "
            "(launcher=slurm, submit=slurm)",
            "use docker, podman or apptainer here",
        )
    if image.endswith(".sif") and chosen not in (APPTAINER, SINGULARITY):
        raise UserError("container.image", image, f"a .sif file runs under apptainer or singularity, not {chosen}")
    if image.endswith(".sqsh") and chosen != PYXIS:
        raise UserError("container.image", image, f"a .sqsh file runs under pyxis (enroot), not {chosen}")
    settled_mounts = tuple(parse_mount(text, home) for text in mounts)
    if workdir is not None and not str(workdir).startswith("/"):
        raise UserError("container.workdir", workdir, "an absolute path inside the container")
    names, values = [], []
    for entry in env:
        name, eq, value = str(entry).partition("=")
        if not _NAME.fullmatch(name):
            raise UserError("container.env", entry, "NAME (passed through from this environment) or NAME=VALUE")
        if eq and is_secret(name):  # a config value is recorded (config.yaml): a secret's is not
            raise UserError(
                "container.env",
                f"{name}=***",
                "a secret's value does not belong in container.env (the config is recorded)",
                f"pass the name alone (container.env=[{name}]: from this environment), or +worker_env.{name}=VALUE",
            )
        (values.append((name, value)) if eq else names.append(name))
    for flag in runtime_flags:
        if not str(flag).startswith("-"):
            raise UserError(
                "container.runtime_flags",
                flag,
                "the runtime's global flags (before run/exec), each starting with '-' (e.g. --runtime runc as "
                "[--runtime=runc])",
            )
    return Container(
        runtime=chosen,
        image=image,
        runtime_flags=tuple(map(str, runtime_flags)),
        mounts=settled_mounts,
        own=(run_root, wrapper),
        workdir=None if workdir is None else str(workdir),
        names=tuple(names),
        values=tuple(values),
        options=tuple(map(str, options)),
        gpus=device == "cuda" if gpus is None else bool(gpus),
        node=node if chosen == PYXIS else None,
    )


def _default_runtime(image: str, slurm: bool) -> str:
    """``container.runtime=auto``: the image's file kind first, then where the launch runs.

    >>> _default_runtime("x.sif", True), _default_runtime("x.sqsh", False), _default_runtime("nvcr.io/x", True)
    ('apptainer', 'pyxis', 'pyxis')
    >>> _default_runtime("nvcr.io/x", False)
    'docker'
    """
    if image.endswith(".sif"):
        return APPTAINER
    if image.endswith(".sqsh") or slurm:
        return PYXIS
    return DOCKER


def parse_mount(text: str, home: str) -> Mount:
    """``SRC:DST[:ro|rw]``, both absolute (SRC may start with ``~``).

    >>> parse_mount("~/.cache/ov:/root/.cache/ov", "/home/u")
    Mount(src='/home/u/.cache/ov', dst='/root/.cache/ov', mode='')
    >>> parse_mount("data:/data", "/h")
    Traceback (most recent call last):
    ...
    launcher.errors.UserError: container.mounts=data:/data: SRC:DST[:ro|rw] with absolute paths (SRC may start with ~)
    """
    parts = str(text).split(":")
    allowed = "SRC:DST[:ro|rw] with absolute paths (SRC may start with ~)"
    if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] not in _MODES):
        raise UserError("container.mounts", text, allowed)
    src, dst = home_path(parts[0], home), parts[1]
    if not src.startswith("/") or not dst.startswith("/") or "," in text:
        raise UserError("container.mounts", text, allowed)
    return Mount(os.path.normpath(src), os.path.normpath(dst), parts[2] if len(parts) == 3 else "")


def home_path(path: str, home: str) -> str:
    """``path`` with a leading ``~`` (alone, or ``~/...``) as ``home`` (``facts.home``: read by probe.py).

    >>> home_path("~/.cache", "/home/u"), home_path("~", "/home/u"), home_path("~u/x", "/home/u")
    ('/home/u/.cache', '/home/u', '~u/x')
    """
    return home + path[1:] if path == "~" or path.startswith("~/") else path


def name_of(launch_id: str | None, node_rank: int, attempt: str | None, rank: int | None, runtime: str) -> str:
    """The container's name: unique per launch, node, attempt (and JAX rank); pyxis's is the launch's
    and node's only (a restart reuses it).

    >>> name_of("0123456789abcdef", 1, "2", None, "podman"), name_of(None, 0, None, 3, "docker")
    ('tmg-0123456789ab-n1-a2', 'tmg-<launch id>-n0-a0-r3')
    >>> name_of("0123456789abcdef", 0, "1", None, "pyxis")
    'tmg-0123456789ab-n0'
    """
    launch = launch_id[:12] if launch_id else LAUNCH_ID_SHOWN
    name = f"{NAME_PREFIX}-{launch}-n{node_rank}"
    if runtime == PYXIS:
        return name
    return name + f"-a{attempt or 0}" + ("" if rank is None else f"-r{rank}")


def argv(container: Container, inner: Sequence[str], env_names: Sequence[str], name: str) -> tuple[str, ...]:
    """``inner`` as the runtime starts it in ``container.image``; ``env_names``: the variables the
    launch sets for it, passed by name (with the container's own, in order, once each)."""
    names = passed(container, env_names)
    own = [Mount(p, p, "" if i == 0 else "ro") for i, p in enumerate(container.own)]
    mounts = [*own, *container.mounts]
    runtime = container.runtime
    if runtime in DAEMON_LIKE:
        secret = [n for n in names if is_secret(n)]
        cmd = [runtime, *container.runtime_flags, "run", "--rm", "--name", name, "--init"]
        cmd += ["--network", "host", "--ipc", "host"]
        if secret:  # the secrets' channel: stdin, read by the entry program (run/container_entry.py)
            cmd.append("-i")
            mounts.insert(len(own), Mount(CONTAINER_ENTRY, CONTAINER_ENTRY, "ro"))
            inner = (inner[0], CONTAINER_ENTRY, *inner)
        for mount in mounts:
            cmd += ["-v", mount.spelled()]
        if container.workdir:
            cmd += ["-w", container.workdir]
        for env_name in names:
            if env_name not in secret:
                cmd += ["-e", env_name]
        if container.gpus:
            cmd += ["--gpus", "all"] if runtime == DOCKER else ["--device", "nvidia.com/gpu=all"]
        return (*cmd, *container.options, container.image, *inner)
    if runtime in (APPTAINER, SINGULARITY):
        # the host's network and IPC namespaces are apptainer's own default; --cleanenv: only the
        # variables passed by name (APPTAINERENV_NAME, set by env_for) reach the processes
        cmd = [runtime, *container.runtime_flags, "exec", "--cleanenv"]
        if container.gpus:
            cmd.append("--nv")
        for mount in mounts:
            cmd += ["--bind", mount.spelled()]
        if container.workdir:
            cmd += ["--pwd", container.workdir]
        return (*cmd, *container.options, container.image, *inner)
    # pyxis: one step of one task on this node, beside the launcher's own step (--overlap)
    cmd = ["srun", *container.runtime_flags, "--overlap", "--nodes=1", "--ntasks=1", "--kill-on-bad-exit=1"]
    if container.node:
        cmd.append(f"--nodelist={container.node}")
    cmd += [f"--container-image={container.image}", f"--container-name={name}"]
    cmd.append("--container-mounts=" + ",".join(m.spelled() for m in mounts))
    if container.workdir:
        cmd.append(f"--container-workdir={container.workdir}")
    if names:
        cmd.append("--container-env=" + ",".join(names))
    # GPUs: the step's own, as SLURM gives them (enroot's hook exposes them); container.options may add --gres
    return (*cmd, *container.options, *inner)


def passed(container: Container, env_names: Sequence[str]) -> list[str]:
    """Every variable name the container gets: the launch's, then container.env's, once each."""
    return list(dict.fromkeys([*env_names, *container.names, *(n for n, _ in container.values)]))


def channel(container: Container, env: Mapping[str, str], env_names: Sequence[str]) -> dict[str, str] | None:
    """docker/podman: the secret variables (``secrets.is_secret``) the container's stdin carries to
    run/container_entry.py, never ``-e NAME`` (the runtime would store the value in the container's
    configuration on disk); None: nothing to carry (no secret, or another runtime).

    >>> c = Container("podman", "img", (), (), ("/r", "/w"), None, ("WANDB_API_KEY",), (), (), False)
    >>> channel(c, {"HF_TOKEN": "abc", "WANDB_API_KEY": "k", "OMP_NUM_THREADS": "1"}, ["HF_TOKEN", "OMP_NUM_THREADS"])
    {'HF_TOKEN': 'abc', 'WANDB_API_KEY': 'k'}
    """
    if container.runtime not in DAEMON_LIKE:
        return None
    secret = [n for n in passed(container, env_names) if is_secret(n)]
    return {n: env[n] for n in secret if n in env} if secret else None


def env_for(container: Container, env: Mapping[str, str], names: Sequence[str]) -> dict[str, str]:
    """The variables added for the runtime's own process (``env``: the launch's, with the launcher's
    own environment): under apptainer every name passed, again as ``APPTAINERENV_NAME``
    (``SINGULARITYENV_``), which ``--cleanenv`` lets through. Values live in the environment only,
    never on a command line.

    >>> c = Container("apptainer", "a.sif", (), (), ("/r", "/w"), None, ("HOME_X",), (), (), False)
    >>> env_for(c, {"A": "1", "HOME_X": "h", "B": "2"}, ["A"])
    {'APPTAINERENV_A': '1', 'APPTAINERENV_HOME_X': 'h'}
    """
    if container.runtime not in (APPTAINER, SINGULARITY):
        return {}
    prefix = "APPTAINERENV_" if container.runtime == APPTAINER else "SINGULARITYENV_"
    return {prefix + name: env[name] for name in passed(container, names) if name in env}


def remove_argv(container: Container, name: str) -> tuple[str, ...] | None:
    """How to remove a container left behind (its client killed): docker/podman ``rm -f NAME``; None
    where the container dies with its process (apptainer, pyxis's step)."""
    if container.runtime not in DAEMON_LIKE:
        return None
    return (container.runtime, *container.runtime_flags, "rm", "-f", name)


def note(container: Container) -> str:
    """The dry run's line on what wraps each command."""
    runtime = container.runtime
    if runtime in DAEMON_LIKE:
        how = (
            f"-e NAME ({runtime} reads each value from its own environment); secrets on the container's stdin "
            f"(-i), set by {CONTAINER_ENTRY} before the launch starts ({runtime} would store them on disk)"
        )
    else:
        how = {
            APPTAINER: "APPTAINERENV_NAME in apptainer's environment (--cleanenv keeps out the rest)",
            SINGULARITY: "SINGULARITYENV_NAME in singularity's environment (--cleanenv keeps out the rest)",
            PYXIS: "--container-env=NAME (pyxis reads each value from srun's environment)",
        }[runtime]
    network = (
        "the host network and IPC namespaces (--network host --ipc host: rendezvous across nodes, NCCL's shared memory)"
        if runtime in DAEMON_LIKE
        else "the host network and IPC namespaces (the runtime's default)"
    )
    gone = (
        f"; the container is named per launch, node and attempt ({LAUNCH_ID_SHOWN}: the id a real launch "
        "draws) and removed by that name if its client dies"
        if runtime in DAEMON_LIKE
        else ""
    )
    return (
        f"container: {runtime} runs each command in {container.image}, with {network}; "
        f"{', '.join(container.own)} mounted at their own paths; variables by name only: {how}{gone}"
    )
