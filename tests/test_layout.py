"""The package's floor plan (README.md "Layout", launcher/__init__.py): which way imports point, the
stdlib-only programs, and the names the rank wrapper keeps copies of."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest

from launcher import names, record
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
        if module == "launcher.errors":  # turning Hydra's errors into one line quotes as the grammar does
            allowed |= {"launcher.config", "launcher.config.grammar"}
        assert own <= allowed, f"a leaf imports only leaves: {sorted(own - allowed)}"
    if within(module, ("launcher.config", "launcher.checks", "launcher.rendezvous", "launcher.plan")):
        bad = {m for m in own if within(m, LATER_STAGES)}
        assert not bad, f"config and the pure stages never import later stages: {sorted(bad)}"
    if within(module, ("launcher.backends",)):  # a back end's describe reads a record as runs/ does (issue 19)
        own -= {"launcher.runs", "launcher.runs.read"}
    if not within(module, ("launcher.runs", "launcher.cli")):
        assert not {m for m in own if within(m, ("launcher.runs",))}, "only cli dispatches to runs/"
    if within(module, ("launcher.runs",)) and module not in RUNS_COMPOSING:
        allowed = LEAVES | {"launcher", "launcher.record", "launcher.runs"}
        bad = {m for m in own if not within(m, ("launcher.runs",)) and m not in allowed}
        assert not bad, f"runs/ reads records with the leaves and record's names: {sorted(bad)}"
        third_party = {m.split(".")[0] for m in imports(MODULES[module])} - set(sys.stdlib_module_names)
        assert third_party <= {"launcher", "__future__"}, f"listing imports no third-party module: {third_party}"
    for backend, other in (("launcher.slurm", "launcher.k8s"), ("launcher.k8s", "launcher.slurm")):
        if within(module, (backend,)):  # a back end runs the launcher again in its jobs: never run/ itself
            bad = {m for m in own if within(m, ("launcher.run", other, "launcher.session", "launcher.cli"))}
            assert not bad, f"a back end imports neither run/, another back end, session nor cli: {sorted(bad)}"
    if within(module, ("launcher.run",)):
        allowed = LEAVES | {"launcher", "launcher.plan"}
        if module == "launcher.run.watchdog":  # closes the run record of a SIGKILLed launcher
            allowed |= {"launcher.record"}
        bad = {m for m in own if not within(m, ("launcher.run",)) and m not in allowed}
        assert not bad, f"run/ imports only the leaves and the plan's types: {sorted(bad)}"


@pytest.mark.parametrize(
    "module",
    ["launcher.run.worker", "launcher.run.procs", "launcher.run.watchdog", "launcher.names", "launcher.run.beats"],
)
def test_separate_programs_use_the_standard_library_only(module):
    """The rank wrapper runs under the user's interpreter (python=), which may not have the package;
    the watchdog runs with -S (no site-packages)."""
    allowed = (
        {"launcher", "launcher.run", "launcher.names", "launcher.run.procs"}
        if module != "launcher.run.worker"
        else set()
    )
    if module == "launcher.run.watchdog":  # the run record (record -> plan -> config.schema: standard library only)
        allowed |= {"launcher.record"}
    for imported in imports(MODULES[module]):
        top = imported.split(".")[0]
        assert top in sys.stdlib_module_names or imported in allowed or top == "__future__", imported


def test_the_wrapper_copies_match_the_package_names():
    for name in ("LOG_DIR_VAR", "RANK_LOGS_VAR", "NODE_RANK_VAR", "HEARTBEAT_VAR", "LAUNCH_ID_VAR"):
        assert getattr(worker, name) == getattr(names, name), name


def test_the_wrapper_writes_json_as_the_record_does(tmp_path):
    data = {"rank": 1, "exit_code": 3, "exception": "RuntimeError: x"}
    worker._write_json(str(tmp_path / "a.json"), data)
    record.write_json(tmp_path / "b.json", data)
    assert json.loads((tmp_path / "a.json").read_text()) == json.loads((tmp_path / "b.json").read_text()) == data
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.json"]  # no temporary file left
