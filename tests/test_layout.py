"""The package's floor plan (README.md "Layout", launcher/__init__.py): which way imports point, the
stdlib-only programs, and the names the rank wrapper keeps copies of."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest

from launcher import errors, names, record, rundir
from launcher.cpu_topology import format_cpulist, parse_cpulist
from launcher.run import worker

PACKAGE = Path(__file__).resolve().parents[1] / "launcher"
LEAVES = {
    "launcher.errors",
    "launcher.names",
    "launcher.paths",
    "launcher.secrets",
    "launcher.addresses",
    "launcher.tables",
    "launcher.files",
    "launcher.facts",
    "launcher.rundir",
    "launcher.restarts",  # the restart policy (pure): checks validates its keys, run/attempts.py runs it
    "launcher.goodput",  # the ledger (pure): record writes it, runs reads it, the timeline draws it
    "launcher.timeline",  # the picture (matplotlib only when drawing): the launch's end and runs timeline
    "launcher.figures",  # a PNG that carries its data (matplotlib only when drawing): curves and timeline
    "launcher.notify",  # the webhook (urllib): the local back end tells it the run's state changes
    "launcher.cpu_topology",  # the machine's CPUs from sysfs (facts holds the allowed ones)
    "launcher.cgroups",  # where this process's cgroup is (mountinfo): cpu_topology's cpuset, oom's counters
    "launcher.cpu_binding",  # launcher.cpu_binding's lists (pure): checks parses it, plan encodes it
    "launcher.container",  # a node's launch in an image (pure): the plan, the dry run and run/ wrap argv with it
}
LATER_STAGES = (
    "launcher.run",
    "launcher.sweep",
    "launcher.slurm",
    "launcher.k8s",
    "launcher.record",
    "launcher.session",
    "launcher.runs",
    "launcher.cli",
)
# launcher/runs/ (train_multigpu runs): reading a listing never composes a config; only these
# modules of it may reach Hydra (``runs show``'s defaults, ``rerun``/``resume``/``compare``)
RUNS_COMPOSING = {"launcher.runs.chosen", "launcher.runs.again", "launcher.runs.curves"}
# the back ends' handle side runs calls (describe/logs/cancel: backends/base.py, no Hydra); the local
# launch's reads its record with runs/read.py (one reader of run directories), and runs/remote reads a
# local run's handle from its status.json through it (local_state.handle: no Hydra either)
# the back ends: they run the launcher again (python -m launcher) where they launch, never a session
BACKENDS = ("launcher.backends", "launcher.slurm", "launcher.k8s", "launcher.ray_submit", "launcher.ssh")
RUNS_BACKENDS = {"launcher.backends", "launcher.backends.base", "launcher.backends.local_state"}
READS_RUNS = {"launcher.backends.local_state": {"launcher.runs", "launcher.runs.read"}}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Every module ``path`` imports (relative imports resolved; ``from x import y`` counts y when y
    is a module of the package)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            for alias in node.names:
                candidate = f"{target}.{alias.name}"
                if (PACKAGE.parent / candidate.replace(".", "/")).with_suffix(".py").exists() or (
                    PACKAGE.parent / candidate.replace(".", "/")
                ).is_dir():
                    found.add(candidate)
    return found


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def within(module: str, prefixes) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_point_one_way(module):
    own = {m for m in imports(MODULES[module]) if m.startswith("launcher")}
    if module != "launcher.__main__":
        assert "launcher.cli" not in own, "nothing imports cli"
    if module in LEAVES:
        allowed = LEAVES | {"launcher"}
        assert own <= allowed, f"a leaf imports only leaves: {sorted(own - allowed)}"
    if within(module, ("launcher.config", "launcher.checks", "launcher.rendezvous", "launcher.plan")):
        bad = {m for m in own if within(m, LATER_STAGES)}
        assert not bad, f"config and the pure stages never import later stages: {sorted(bad)}"
    if within(module, ("launcher.backends",)):  # a back end's describe reads a record as runs/ does (issue 19)
        own -= {"launcher.runs", "launcher.runs.read"}
    # the entry dispatches to runs/: cli, and __main__ (`runs` goes straight there, no launch module imported)
    if not within(module, ("launcher.runs", "launcher.cli", "launcher.__main__")):
        bad = {m for m in own if within(m, ("launcher.runs",))} - READS_RUNS.get(module, set())
        assert not bad, "only the entry (cli, __main__) dispatches to runs/"
    if within(module, ("launcher.runs",)) and module not in RUNS_COMPOSING:
        allowed = LEAVES | RUNS_BACKENDS | {"launcher", "launcher.record", "launcher.runs"}
        bad = {m for m in own if not within(m, ("launcher.runs",)) and m not in allowed}
        assert not bad, f"runs/ reads records with the leaves and record's names: {sorted(bad)}"
        third_party = {m.split(".")[0] for m in imports(MODULES[module])} - set(sys.stdlib_module_names)
        assert third_party <= {"launcher", "__future__"}, f"listing imports no third-party module: {third_party}"
    if within(module, BACKENDS):  # a back end launches again through the command-line entry (issue 25)
        bad = {m for m in own if within(m, ("launcher.session", "launcher.cli"))}
        assert not bad, f"a back end never calls back into the face: {sorted(bad)}"
    for backend, other in (("launcher.slurm", "launcher.k8s"), ("launcher.k8s", "launcher.slurm")):
        if within(module, (backend,)):  # a back end runs the launcher again in its jobs: never supervises
            # a process it must start (kubectl logs -f) it starts through run/process/, the one place
            bad = {
                m
                for m in own
                if within(m, ("launcher.run", other, "launcher.session", "launcher.cli"))
                and not within(m, ("launcher.run.process",))
            }
            assert not bad, (
                f"a back end imports neither run/ (but run/process/), another back end, session nor cli: {sorted(bad)}"
            )
    if within(module, ("launcher.run",)):
        allowed = LEAVES | {"launcher", "launcher.plan"}
        if module == "launcher.run.watchdog":  # closes the run record of a SIGKILLed launcher
            allowed |= {"launcher.record"}
        bad = {m for m in own if not within(m, ("launcher.run",)) and m not in allowed}
        assert not bad, f"run/ imports only the leaves and the plan's types: {sorted(bad)}"


@pytest.mark.parametrize(
    "module",
    [
        "launcher.run.worker",
        "launcher.run.container_entry",
        "launcher.run.process.procs",
        "launcher.run.watchdog",
        "launcher.names",
        "launcher.run.monitor.beats",
        "launcher.rundir",
    ],
)
def test_separate_programs_use_the_standard_library_only(module):
    """The rank wrapper runs under the user's interpreter (python=), which may not have the package;
    the watchdog runs with -S (no site-packages)."""
    allowed = (
        {
            "launcher",
            "launcher.run",
            "launcher.names",
            "launcher.rundir",
            "launcher.run.process",
            "launcher.run.process.procs",
        }
        if module not in ("launcher.run.worker", "launcher.run.container_entry")
        else set()
    )
    if module == "launcher.run.watchdog":  # the run record (record -> plan -> config.schema: standard library only)
        allowed |= {"launcher.record"}
    for imported in imports(MODULES[module]):
        top = imported.split(".")[0]
        assert top in sys.stdlib_module_names or imported in allowed or top == "__future__", imported


def test_the_wrapper_copies_match_the_package_names():
    for name in (
        "LOG_DIR_VAR",
        "RANK_LOGS_VAR",
        "NODE_RANK_VAR",
        "HEARTBEAT_VAR",
        "LAUNCH_ID_VAR",
        "CPU_BIND_VAR",
        "OMP_THREADS_VAR",
        "TRACKER_RANKS_VAR",
    ):
        assert getattr(worker, name) == getattr(names, name), name
    assert worker.EXIT_USAGE == errors.EXIT_USAGE  # a CPU list the kernel refuses: the one error path's code


def test_the_wrapper_spells_cpu_lists_as_cpu_topology_does():
    """run/worker.py reads its CPU list (cpu_binding.encode's entries) and writes the mask it starts
    with itself (it cannot import the package): its copies agree with launcher/cpu_topology.py."""
    for cpus in [(0,), (0, 1, 2, 3), (0, 2, 5, 6, 7, 64), (1, 3, 5), (8, 9, 10, 11, 24, 25, 26, 27)]:
        text = format_cpulist(cpus)
        assert worker._spelled(set(cpus)) == text, cpus
        assert worker._cpus(text) == set(parse_cpulist(text)) == set(cpus), text


def test_the_wrapper_writes_json_as_the_record_does(tmp_path):
    data = {"rank": 1, "exit_code": 3, "exception": "RuntimeError: x"}
    worker._write_json(str(tmp_path / "a.json"), data)
    record.write_json(tmp_path / "b.json", data)
    assert json.loads((tmp_path / "a.json").read_text()) == json.loads((tmp_path / "b.json").read_text()) == data
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.json"]  # no temporary file left


# -- no import cycle -------------------------------------------------------------------------------


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def import_edges(path: Path, name: str | None = None) -> dict[str, int]:
    """The package's modules ``path`` imports, with the line of the first import of each: imports
    inside functions (lazy ones) count, those under ``if TYPE_CHECKING:`` do not (they never run).
    ``from pkg import name`` is an edge to ``pkg.name`` when that is a module, else to ``pkg``.
    (``importlib.import_module`` with a computed name, as backends/ registers its implementations,
    is not seen.) ``name``: the module's, when ``path`` is not in the package (a test's)."""
    name = name or module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: dict[str, int] = {}

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking(child.test):
                for other in child.orelse:
                    visit_node(other)
            else:
                visit_node(child)

    def visit_node(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in MODULES:
                    found.setdefault(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                target = ".".join(base[: len(base) - (node.level - 1)] + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            submodules = [f"{target}.{alias.name}" for alias in node.names if f"{target}.{alias.name}" in MODULES]
            for submodule in submodules:
                found.setdefault(submodule, node.lineno)
            if len(submodules) < len(node.names) and target in MODULES:
                found.setdefault(target, node.lineno)
        visit(node)

    visit(ast.parse(path.read_text()))
    found.pop(name, None)
    return found


def import_cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """One cycle (``[a, b, ..., a]``) through every strongly connected group of modules (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []

    def connect(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in graph[module]:
            if target not in index:
                connect(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group = {stack.pop()}
            while module not in group:
                group.add(stack.pop())
            if len(group) > 1:
                groups.append(group)

    for module in sorted(graph):
        if module not in index:
            connect(module)
    cycles = []
    for group in groups:
        start = min(group)
        paths = {start: [start]}  # breadth-first inside the group: the shortest way back to start
        queue = [start]
        while queue:
            module = queue.pop(0)
            for target in sorted(graph[module]):
                if target == start:
                    cycles.append([*paths[module], start])
                    queue = []
                    break
                if target in group and target not in paths:
                    paths[target] = [*paths[module], target]
                    queue.append(target)
    return cycles


def test_the_package_has_no_import_cycle():
    graph = {module: import_edges(path) for module, path in MODULES.items()}
    cycles = import_cycles(graph)
    shown = [
        " -> ".join(f"{a} (line {graph[a][b]})" for a, b in zip(cycle, cycle[1:])) + f" -> {cycle[-1]}"
        for cycle in cycles
    ]
    assert not cycles, "import cycles (a shared name belongs in a leaf both import):\n" + "\n".join(shown)


def test_the_cycle_finder_finds_a_lazy_cycle_and_ignores_type_checking(tmp_path):
    graph = {"a": {"b": 1}, "b": {"c": 2}, "c": {"a": 3}, "d": {"a": 1}}
    assert import_cycles(graph) == [["a", "b", "c", "a"]]
    assert import_cycles({"a": {"b": 1}, "b": {}}) == []
    source = tmp_path / "checks.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "from .config import schema\n"
        "if TYPE_CHECKING:\n"
        "    from .probe import HostFacts\n"
        "def f():\n"
        "    from .plan import LAUNCH_VARS\n"
        "    import launcher.record\n"
    )
    edges = import_edges(source, "launcher.checks")
    assert edges == {"launcher.config.schema": 2, "launcher.plan": 6, "launcher.record": 7}, edges


# -- only run/ starts processes or installs signal handlers ----------------------------------------

# what starts a process, replaces this one, kills one or installs a signal handler: run/'s alone
# (run/worker.py and run/watchdog.py are run/ too)
STARTS_OR_SIGNALS = {
    "subprocess.Popen",
    "subprocess.call",
    "subprocess.check_call",
    "subprocess.check_output",
    "subprocess.getoutput",
    "subprocess.getstatusoutput",
    "os.fork",
    "os.forkpty",
    "os.system",
    "os.popen",
    "os.posix_spawn",
    "os.posix_spawnp",
    "os.kill",
    "os.killpg",
    "pty.fork",
    "pty.spawn",
    "asyncio.create_subprocess_exec",
    "asyncio.create_subprocess_shell",
    "signal.signal",
    "signal.setitimer",
    "signal.alarm",
    "signal.set_wakeup_fd",
    "signal.siginterrupt",
    "signal.pthread_kill",
    "signal.pidfd_send_signal",
    "faulthandler.register",
}
STARTS_OR_SIGNALS_PREFIXES = ("os.exec", "os.spawn", "multiprocessing.", "ctypes.")
REFUSED_MODULES = {"ctypes", "multiprocessing", "pty"}  # imported at all: prctl, process pools, terminals
# named exceptions outside run/, each with its reason (a new one is a decision, written here)
# (none: ``runs stop`` and ``runs stacks`` signal the launcher they proved through
# backends/local_state.send, i.e. run/process/procs.send, the one way)
PROCESS_RULE_EXCEPTIONS: dict[tuple[str, str], str] = {}


def _dotted(node: ast.expr) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


def process_calls(path: Path) -> list[tuple[int, str]]:
    """(line, what) for every use of a process or signal mechanism in ``path``: a name from
    STARTS_OR_SIGNALS however imported (called or handed on), a ``preexec_fn``, ``.send_signal``,
    ``prctl``, an import of a REFUSED_MODULES module, and a ``subprocess.run`` without a ``timeout``."""
    tree = ast.parse(path.read_text())
    aliases: dict[str, str] = {}  # local name -> the dotted name it stands for
    found: set[tuple[int, str]] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                aliases[alias.asname or alias.name.split(".")[0]] = (
                    alias.name if alias.asname else alias.name.split(".")[0]
                )
                if alias.name.split(".")[0] in REFUSED_MODULES:
                    found.add((node.lineno, f"import {alias.name}"))
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            for alias in node.names:
                aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
            if node.module.split(".")[0] in REFUSED_MODULES:
                found.add((node.lineno, f"from {node.module} import ..."))

    def resolved(node: ast.expr) -> str | None:
        dotted = _dotted(node)
        if dotted is None:
            return None
        head, _, rest = dotted.partition(".")
        return ".".join(filter(None, [aliases.get(head, head), rest]))

    callees = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            callees[id(node.func)] = node
            if any(keyword.arg == "preexec_fn" for keyword in node.keywords):
                found.add((node.lineno, "preexec_fn="))
            if isinstance(node.func, ast.Attribute) and node.func.attr in ("send_signal", "prctl"):
                found.add((node.lineno, f".{node.func.attr}()"))
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Attribute, ast.Name)) or not isinstance(node.ctx, ast.Load):
            continue
        name = resolved(node)
        if name in STARTS_OR_SIGNALS or (name or "").startswith(STARTS_OR_SIGNALS_PREFIXES):
            found.add((node.lineno, name))
        elif name == "subprocess.run":
            call = callees.get(id(node))
            if call is None:
                found.add((node.lineno, "subprocess.run handed on (call it, with a timeout)"))
            elif not any(
                k.arg == "timeout" and not (isinstance(k.value, ast.Constant) and k.value.value is None)
                for k in call.keywords
            ):
                found.add((node.lineno, "subprocess.run without a timeout"))
    return sorted(found)


@pytest.mark.parametrize("module", sorted(m for m in MODULES if not within(m, ("launcher.run",))))
def test_only_run_starts_processes_or_installs_signal_handlers(module):
    """Outside run/: no process started (Popen, fork, exec, spawn, a preexec_fn, ctypes' prctl), none
    killed or signalled, no signal handler installed; a short synchronous query (sbatch, squeue,
    kubectl, nvidia-smi) through ``subprocess.run`` with a timeout stays where it is."""
    found = [
        f"line {line}: {what}"
        for line, what in process_calls(MODULES[module])
        if (module, what) not in PROCESS_RULE_EXCEPTIONS
    ]
    assert not found, f"only launcher/run/ starts processes or touches signals (README.md, Layout): {found}"


def test_every_process_rule_exception_is_still_used():
    for (module, what), reason in PROCESS_RULE_EXCEPTIONS.items():
        assert reason and (module, what) in {(module, w) for _, w in process_calls(MODULES[module])}, (module, what)


def test_the_process_rule_sees_every_spelling(tmp_path):
    source = tmp_path / "m.py"
    source.write_text(
        "import os, signal, subprocess as sp\n"
        "from os import execvp\n"
        "from signal import signal as install\n"
        "def f(h):\n"
        "    import ctypes\n"
        "    sp.Popen(['x'], preexec_fn=h)\n"
        "    execvp('x', ['x'])\n"
        "    install(15, h)\n"
        "    signal.setitimer(signal.ITIMER_REAL, 1)\n"
        "    sp.run(['squeue'])\n"
        "    sp.run(['squeue'], timeout=None)\n"
        "    sp.run(['sbatch'], timeout=5)\n"
        "    os.fork()\n"
        "    h.send_signal(15)\n"
        "    return sp.run\n"
    )
    found = {what for _, what in process_calls(source)}
    assert found == {
        "import ctypes",
        "subprocess.Popen",
        "preexec_fn=",
        "os.execvp",
        "signal.signal",
        "signal.setitimer",
        "subprocess.run without a timeout",
        "os.fork",
        ".send_signal()",
        "subprocess.run handed on (call it, with a timeout)",
    }, found
    assert [line for line, what in process_calls(source) if what == "subprocess.run without a timeout"] == [10, 11]


def test_the_wrapper_names_rank_files_as_the_run_directory_does():
    """run/worker.py spells the rank files itself (it cannot import the package): the names it writes
    are launcher/rundir.py's."""
    source = (PACKAGE / "run" / "worker.py").read_text()
    for expr, name in (("rank", rundir.rank_log_name), ("ranks['rank']", rundir.exit_record_name)):
        assert 'f"' + name(7).replace("7", "{" + expr + "}") + '"' in source, name(7)
    assert 'f"' + rundir.beat_name(7).replace("7", "{ranks['rank']}") + '"' in source
    assert 'f"' + rundir.cpus_name(7).replace("7", "{ranks['rank']}") + '"' in source


def test_no_test_module_wraps_the_shared_cli_runner_in_a_helper_of_its_own():
    """tests/supervise_util.py's ``launch`` runs ``train_multigpu`` to its end for every test module
    (test_recovery, test_trackers and test_container_podman each had a ``launch`` that only called it)."""
    wrappers = []
    for path in sorted(Path(__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef) or len(node.body) != 1:
                continue
            body = node.body[0]
            call = body.value if isinstance(body, ast.Return) else None
            if isinstance(call, ast.Call) and _dotted(call.func) == "supervise_util.launch":
                wrappers.append(f"{path.name}:{node.lineno} {node.name}")
    assert wrappers == []
