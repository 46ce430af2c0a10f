"""Shared fixtures: host facts for pure tests, a fake Isaac Lab tree, and a CLI runner that starts
the real launcher in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from launcher import checks, paths, plan
from launcher.config import grammar
from launcher.config.compose import compose, with_default_profile
from launcher.facts import HostFacts
from launcher.runs.cache import VAR as RUNS_CACHE_VAR
from ray_cluster import ray_cluster  # noqa: F401  (the real two-raylet Ray fixture, used by name)
from require import unavailable
from slurm_cluster import slurm_cluster  # noqa: F401  (the real one-host SLURM fixture, used by name)
from sshd import ssh_hosts  # noqa: F401  (two real sshd hosts in network namespaces, used by name)

ROOT = Path(__file__).resolve().parents[1]


def make_facts(gpus: int = 0, cpus: int = 2, env: dict | None = None) -> HostFacts:
    """Host facts for pure tests. GPUs cannot exist here: a test that needs them says how many."""
    return HostFacts(
        python="/usr/bin/python3",
        visible_gpus=gpus,
        gpus_source=f"test: {gpus} GPU(s)",
        usable_cpus=cpus,
        examples_dir=str(paths.examples_dir()),
        env=env or {},
    )


@pytest.fixture(scope="session", autouse=True)
def _runs_cache(tmp_path_factory):
    """``runs``' listing cache (launcher/runs/cache.py) in this session's own folder, never the user's
    ~/.cache; every launch and ``runs`` under test inherits it (clean_env copies the environment)."""
    os.environ[RUNS_CACHE_VAR] = str(tmp_path_factory.mktemp("runs_cache"))
    yield


@pytest.fixture
def isaaclab(tmp_path, monkeypatch) -> Path:
    """An Isaac Lab checkout with just the unified training script, and ISAACLAB_PATH pointing at it."""
    root = tmp_path / "IsaacLab"
    script = root / "scripts" / "reinforcement_learning" / "train.py"
    script.parent.mkdir(parents=True)
    script.write_text("print('isaac lab train.py')\n")
    monkeypatch.setenv("ISAACLAB_PATH", str(root))
    return root


def off_checkout(environ) -> dict[str, str]:
    """``environ`` with no PYTHONPATH entry inside the checkout: a launch under test finds the package
    the way a user's does (installed in this interpreter), and so must every child it starts (the
    watchdog once found it only through such an entry: from any other folder it died at start)."""
    out = dict(environ)
    kept = [p for p in out.pop("PYTHONPATH", "").split(os.pathsep) if p and not _inside_checkout(p)]
    if kept:
        out["PYTHONPATH"] = os.pathsep.join(kept)
    return out


def _inside_checkout(path: str) -> bool:
    resolved = Path(path).resolve()
    return resolved == ROOT or ROOT in resolved.parents


def clean_env(**extra: str) -> dict[str, str]:
    """The environment of a launch under test (run it with cwd=tmp_path, never the checkout)."""
    env = {
        k: v
        for k, v in off_checkout(os.environ).items()
        if k not in ("ISAACLAB_PATH", "HYDRA_FULL_ERROR", "CUDA_VISIBLE_DEVICES")
    }
    env["CUDA_VISIBLE_DEVICES"] = ""  # this machine has no GPU; make that explicit and fast
    env.update(extra)
    return env


def with_hosts(argv: list[str], hosts: dict[str, str], folder: Path) -> list[str]:
    """``argv`` run with its own ``/etc/hosts`` naming ``hosts`` (name -> address), bind-mounted in a
    private mount namespace: the real resolver answers from it, no DNS server is asked. Needs root
    and util-linux ``unshare``; the test is skipped, saying so, without them."""
    import shutil

    if os.geteuid() != 0 or shutil.which("unshare") is None:
        unavailable("ROOT", "resolving example cluster names needs root and unshare (a private /etc/hosts)")
    table = folder / "etc-hosts"
    # this machine's own entries stay (its own host name resolves as it does outside: where it does
    # not, the launcher tells torchrun is_host=0 and the command would differ), the cluster's are added
    lines = Path("/etc/hosts").read_text().splitlines()
    table.write_text("\n".join(lines + [f"{address} {name}" for name, address in hosts.items()]) + "\n")
    return [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        'mount --bind "$0" /etc/hosts && exec "$@"',
        str(table),
        *argv,
    ]


@pytest.fixture
def run_cli(tmp_path):
    """Run ``python -m launcher ARGS`` for real, in a temporary working directory; ``hosts`` gives
    host names of example clusters an address (see :func:`with_hosts`)."""

    def run(
        *args: str, env: dict | None = None, timeout: float = 120, hosts: dict | None = None
    ) -> subprocess.CompletedProcess:
        argv = [sys.executable, "-m", "launcher", *args]
        if hosts:
            argv = with_hosts(argv, hosts, tmp_path)
        return subprocess.run(
            argv,
            cwd=tmp_path,
            env=env or clean_env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    return run


def without_local_addr(argv: list[str]) -> list[str]:
    """A multi-node command without ``--local_addr ADDR``: found from this machine's routes to node 0
    (docs/multinode.md), so it differs from machine to machine."""
    if "--local_addr" in argv:
        at = argv.index("--local_addr")
        return argv[:at] + argv[at + 2 :]
    return argv


def build(argv: list[str], gpus: int = 0, cpus: int = 2, env: dict | None = None, coordinator=None) -> plan.LaunchPlan:
    """What the CLI does between the command line and the supervisor, minus the I/O."""
    line = grammar.parse(argv)
    cfg = compose(with_default_profile(line.overrides, os.environ), line.script_args)
    facts = make_facts(gpus=gpus, cpus=cpus, env=env)
    settled = checks.validate(cfg, facts)
    if coordinator is not None:
        from dataclasses import replace

        settled = replace(settled, coordinator=coordinator)
    return plan.build(cfg, settled, facts, run_dir="/runs/r1", order=line.order)


# the small distributed target (gloo all-reduce / JAX psum, --exit_code_on_rank R:CODE) for tests
# that exercise launching rather than training
ALLREDUCE = str(paths.examples_dir() / "allreduce.py")


# -- running the suite on several pytest-xdist workers (pyproject's addopts: -n 2) -----------------
# The suite is mostly waiting (hang timeouts, SLURM's scheduler, Ray jobs, supervised processes
# stopping), so two workers share 2 cores well. What a test shares decides where it runs: every test
# of a file on one worker (module fixtures run once), every test on the one-host SLURM cluster on one
# worker (its 2 CPUs: two jobs at once would queue behind each other), every test on the Ray cluster
# on one worker (one head for them all, started once). ``-n 0`` runs everything in this process.
#
# xdist's own --dist loadgroup cannot do it here: it renames a test's node id to carry the group,
# and pytest 9.2 no longer reads the attribute it sets. The workers, which collect, write each test's
# group to a table named for the controller (their parent process); the controller's scheduler hands
# out one group at a time.

CLUSTERS = ("ray", "slurm")

# The groups that take longest start first (a long group handed out last is the run's last minutes,
# on one worker while the other has nothing left): seconds of their tests among the slowest 25 of a
# CI run (-n 2, 2,218 s in all; at least that much each). A hint for the order only: a group not
# named starts after these, in collection order; the learning tests (marked slow) before them all.
LONGEST_FIRST = {
    "tests/test_restarts_nodes.py": 265,
    "tests/test_recovery.py": 156,
    "slurm_cluster": 108,
    "tests/test_trainer_elastic.py": 102,
    "ray_cluster": 77,
    "tests/test_trainer_jax_fused.py": 66,
    "tests/test_docs_commands.py": 60,
    "tests/test_runs_again.py": 57,
    "tests/test_fuzz_grammar.py": 48,
    "tests/test_runs_records.py": 34,
    "tests/test_ssh_launch.py": 34,
    "tests/test_multinode_launcher.py": 33,
    "tests/test_trainer_distributed.py": 32,
}


def _group(item: pytest.Item) -> str:
    names = set(getattr(item, "fixturenames", ()))
    params = getattr(getattr(item, "callspec", None), "params", {})
    for cluster in CLUSTERS:
        # test_backend_conformance's `engine` asks for the cluster its parameter names (getfixturevalue)
        if f"{cluster}_cluster" in names or ("engine" in names and params.get("name") == cluster):
            return f"{cluster}_cluster"
    return item.nodeid.split("::", 1)[0]


def _groups_table(controller_pid: int) -> Path:
    import tempfile

    return Path(tempfile.gettempdir()) / f"train_multigpu-xdist-groups-{controller_pid}.tsv"


def pytest_collection_modifyitems(config, items):
    if not hasattr(config, "workerinput"):  # not an xdist worker
        return
    # the learning tests (minutes, on one worker) first, so that they end with the rest; then the
    # other long groups, longest first (a stable sort: the rest keep their order)
    items.sort(key=lambda item: (item.get_closest_marker("slow") is None, -LONGEST_FIRST.get(_group(item), 0)))
    table = _groups_table(os.getppid())
    draft = table.with_name(f"{table.name}.{os.getpid()}")
    draft.write_text("".join(f"{item.nodeid}\t{_group(item)}\n" for item in items))
    os.replace(draft, table)  # every worker writes the same table: the last one stays, whole


@pytest.hookimpl(optionalhook=True)  # a hook of xdist's: unknown with -p no:xdist
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class ByGroup(LoadScopeScheduling):
        """xdist's scope scheduling with :func:`_group` as the scope (read once the workers collected)."""

        groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.groups is None:
                table = _groups_table(os.getpid())
                lines = table.read_text().splitlines() if table.exists() else []  # none: by file
                self.groups = dict(line.split("\t", 1) for line in lines)
            return self.groups.get(nodeid, nodeid.split("::", 1)[0])

    return ByGroup(config, log)


def pytest_configure(config):
    """The launcher's and the bundled trainers' byte code, written once for the session's processes:
    where PYTHONDONTWRITEBYTECODE=1 is set (this machine kind sets it) every launcher, watchdog and
    rank the tests start compiled each module it imports from source again (Python still reads byte
    code that is there, and recompiles a module whose source is newer)."""
    if not hasattr(config, "workerinput"):
        import compileall

        for folder in (ROOT / "launcher", ROOT / "examples"):
            compileall.compile_dir(folder, quiet=1)


def pytest_unconfigure(config):
    if not hasattr(config, "workerinput"):
        _groups_table(os.getpid()).unlink(missing_ok=True)
