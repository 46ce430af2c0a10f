"""A non-editable install, run from another folder, finds its shipped configs and examples."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import ROOT, clean_env

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
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
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    (found,) = out.glob("train_multigpu-*.whl")
    return found


def test_wheel_carries_configs_and_examples(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in (
        "launcher/conf/train_multigpu.yaml",
        "launcher/conf/launcher/skrl_jax.yaml",
        "launcher/conf/profile/isaaclab.yaml",
        "launcher/conf/presets/debug.yaml",
        "launcher/examples/allreduce.py",
    ):
        assert name in names


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
