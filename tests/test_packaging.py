"""A non-editable install, run from another folder, finds every module, its shipped configs, examples
and docs (issue 25 item 1: the wheel lacked launcher.backends and launcher.ssh).

The wheel is built from a copy of the files git would ship (a clean tree: no stale build/ folder of
the checkout can add or hide a file, and nothing is written into the checkout)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import ROOT, clean_env

pytestmark = pytest.mark.timeout(240)

# the folders at the top of the checkout that travel inside the package (pyproject.toml, setup.py)
SHIPPED = {"conf": ("*.yaml", "__init__.py"), "examples": ("*.py", "*.yaml"), "docs": ("*.md",)}
_NOT_SOURCE = ("__pycache__", ".venv", "build", "dist", "runs", "outputs", "multirun", ".pytest_cache")


def source_tree(into: Path) -> Path:
    """The files a build sees: git's tracked and untracked-but-not-ignored files, else the checkout
    without its build outputs."""
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
    )
    if listed.returncode == 0 and listed.stdout:
        for name in filter(None, listed.stdout.decode().split("\0")):
            source = ROOT / name
            if source.is_file():  # a file deleted but not yet committed is not shipped
                (into / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, into / name)
        return into
    shutil.rmtree(into, ignore_errors=True)
    shutil.copytree(ROOT, into, ignore=shutil.ignore_patterns(*_NOT_SOURCE, "*.egg-info", ".git"))
    return into


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    tree = source_tree(tmp_path_factory.mktemp("src"))
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(out),
            str(tree),
        ],
        check=True,
        capture_output=True,
        text=True,
        cwd=out,
    )
    (found,) = out.glob("train_multigpu-*.whl")
    return found


def _source_files(folder: Path, patterns: tuple[str, ...]) -> set[str]:
    return {
        p.relative_to(folder).as_posix()
        for pattern in patterns
        for p in folder.rglob(pattern)
        if p.is_file() and "__pycache__" not in p.parts
    }


def test_wheel_holds_every_package_and_module(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    package = ROOT / "launcher"
    packages = {
        p.parent.relative_to(ROOT).as_posix() for p in package.rglob("__init__.py") if "__pycache__" not in p.parts
    }
    in_wheel = {
        name.rsplit("/", 1)[0] for name in names if name.startswith("launcher/") and name.endswith("/__init__.py")
    }
    assert packages - in_wheel == set(), "packages of launcher/ missing from the wheel"
    missing = {f"launcher/{name}" for name in _source_files(package, ("*.py",))} - names
    assert missing == set(), "modules missing from the wheel"
    # every folder of launcher/ holding code is a package (find_packages finds only those)
    loose = {p.parent for p in package.rglob("*.py") if "__pycache__" not in p.parts} - {
        p.parent for p in package.rglob("__init__.py")
    }
    assert loose == set(), f"folders of modules without an __init__.py: {sorted(map(str, loose))}"


@pytest.mark.parametrize("folder", sorted(SHIPPED))
def test_wheel_carries_configs_examples_and_docs(wheel, folder):
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = _source_files(ROOT / folder, SHIPPED[folder])
    assert shipped, folder
    missing = {f"launcher/{folder}/{name}" for name in shipped} - names
    assert missing == set(), f"{folder}/ files missing from the wheel"


def test_wheel_holds_nothing_outside_the_package(wheel):
    tops = {name.split("/", 1)[0] for name in zipfile.ZipFile(wheel).namelist()}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"launcher"}


def test_installed_wheel_runs_from_another_folder(wheel, tmp_path):
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site), str(wheel)],
        check=True,
        capture_output=True,
        text=True,
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # PYTHONPATH puts the installed copy ahead of the editable checkout the test runs from
    env = clean_env(PYTHONPATH=str(site))
    dry = subprocess.run(
        [sys.executable, "-m", "launcher", "--dry_run"], cwd=elsewhere, env=env, capture_output=True, text=True
    )
    assert dry.returncode == 0, dry.stderr
    assert f"{site}/launcher/examples/" in dry.stdout.splitlines()[-1]
    helped = subprocess.run(
        [sys.executable, "-m", "launcher", "--help"], cwd=elsewhere, env=env, capture_output=True, text=True
    )
    assert helped.returncode == 0, helped.stderr
    assert f"Docs: {site}/launcher/docs " in helped.stdout  # --help names docs that are there
    assert (site / "launcher" / "docs" / "quickstart.md").is_file()
    run = subprocess.run(
        [sys.executable, "-m", "launcher", "presets=debug"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert (elsewhere / "runs").is_dir()


def test_children_started_as_python_m_launcher_find_the_package():
    """The watchdog runs as ``python -S -m launcher.run.watchdog`` with PYTHONPATH = the folder that
    holds the package (issue 25 item 2: it was ``launcher/`` itself, so the watchdog died at start
    unless the current folder held ``launcher/``); the rank wrapper's path is the real file."""
    import launcher
    from launcher import paths
    from launcher.run.postmortem import stacks
    from launcher.run.process import group

    package = Path(launcher.__file__).resolve().parent
    assert Path(group.PACKAGE_PARENT) == package.parent
    assert Path(paths.WORKER_WRAPPER) == package / "run" / "worker.py"
    assert stacks._WRAPPER == paths.WORKER_WRAPPER
    for folder in (paths.conf_dir(), paths.examples_dir(), paths.docs_dir()):
        assert folder.is_dir(), folder
