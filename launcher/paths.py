"""Where the package is, and its shipped configs, example trainers and docs, in a wheel and in a
source checkout."""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent
# the folder that holds the ``launcher`` package (site-packages, or the checkout): what a child
# started as ``python -S -m launcher...`` (no site-packages) needs on PYTHONPATH to import it
PACKAGE_PARENT = str(_PACKAGE.parent)


def _shipped(name: str) -> Path:
    # In a wheel the folders are installed inside the package; in a checkout they are its siblings.
    inside = _PACKAGE / name
    return inside if inside.is_dir() else _PACKAGE.parent / name


def conf_dir() -> Path:
    return _shipped("conf")


def examples_dir() -> Path:
    return _shipped("examples")


def docs_dir() -> Path:
    return _shipped("docs")


# the rank wrapper (launcher/run/worker.py): named here so that a dry run need not import the supervisor
WORKER_WRAPPER = str(_PACKAGE / "run" / "worker.py")
# the first program in a docker/podman container that carries secrets: reads them from stdin (launcher/container.py)
CONTAINER_ENTRY = str(_PACKAGE / "run" / "container_entry.py")
