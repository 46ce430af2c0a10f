"""Before any rank starts in a container image: the image has the interpreter, the training stack
(torch for a torch launch, jax for a JAX one) and the training script (docs/containers.md).

One short run of the image with the launch's own runtime, mounts and options (``run --rm`` /
``exec``): ``python -c`` looks the modules up (``importlib.util.find_spec``: nothing is imported, so
the check takes as long as the container's start) and the script's file. A missing piece is one
:class:`UserError` naming the image, exit 2, nothing written. pyxis is not asked ahead (a check
would be one more enroot container on the node): its first step says it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import uuid

from . import container
from .errors import UserError
from .run.process import procs

# docker/podman's own failures (125: the runtime's error, 126: the OCI runtime's, the command not
# started); 127 is the command not found in the image
RUNTIME_FAILED = (125, 126)
CHECK_TIMEOUT_S = 600.0  # the first run of an image pulls it: as long as the launch itself would wait
# what the interpreter in the image prints: the modules it cannot find, and whether the script is there
_CODE = (
    "import importlib.util, json, os, sys; "
    "print(json.dumps({'missing': [m for m in sys.argv[1].split(',') if importlib.util.find_spec(m) is None], "
    "'script': os.path.isfile(sys.argv[2])}))"
)


def check(box: container.Container, python: str, modules: tuple[str, ...], script: str) -> None:
    """Ask the image; raise the one-line refusal if it lacks ``python``, a module or ``script``. Then a
    mount's missing source folder is made (as docker does; podman and apptainer refuse one): the
    Isaac Lab preset's cache folders exist from the first launch on. The image is asked without
    those mounts (an empty folder holds no module nor script), so a refusal leaves no folder behind."""
    missing = tuple(mount for mount in box.mounts if not os.path.lexists(mount.src))
    if box.runtime != container.PYXIS:
        # the user's mounts as the launch has them; not the run root, which the launch makes only later
        asked = dataclasses.replace(box, own=(), mounts=tuple(m for m in box.mounts if m not in missing))
        _ask(asked, python, modules, script)
    for mount in missing:
        try:
            os.makedirs(mount.src, exist_ok=True)
        except OSError as err:
            raise UserError(
                "container.mounts", mount.spelled(), f"cannot make its source folder: {err.strerror or err}"
            ) from None


def _ask(box: container.Container, python: str, modules: tuple[str, ...], script: str) -> None:
    name = f"{container.NAME_PREFIX}-preflight-{uuid.uuid4().hex[:12]}"
    argv = container.argv(box, (python, "-c", _CODE, ",".join(modules), script), (), name)
    try:
        done = subprocess.run(
            argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=CHECK_TIMEOUT_S, check=False
        )
    except FileNotFoundError:
        raise UserError(
            "container.runtime",
            box.runtime,
            f"{argv[0]} is not installed here",
            "install it, or choose another container.runtime",
        ) from None
    except subprocess.TimeoutExpired:
        remove = container.remove_argv(box, name)
        if remove is not None:
            procs.remove_container(remove)
        raise UserError(
            "container.image", box.image, f"{box.runtime} did not start it within {CHECK_TIMEOUT_S:g} s"
        ) from None
    report = _report(done.stdout)
    if report is None and done.returncode in RUNTIME_FAILED and "executable file not found" not in done.stderr:
        raise UserError(
            "container.image",
            box.image,
            f"{box.runtime} could not start a container from it (exit {done.returncode}: "
            f"{_last_line(done.stderr or done.stdout)})",
            f"try {box.runtime} run IMAGE by hand on this host",
        )
    if report is None:
        said = _last_line(done.stderr or done.stdout)
        raise UserError(
            "container.image",
            box.image,
            f"{python} does not run in the image ({box.runtime} exit {done.returncode}: {said})",
            "the image needs Python with the training stack; python= names the interpreter inside",
        )
    if report.get("missing"):
        raise UserError(
            "container.image",
            box.image,
            f"{python} in the image cannot import {', '.join(report['missing'])}",
            "an image with the training stack (torch; jax for launcher=skrl_jax), or mount it with container.mounts",
        )
    if not report.get("script"):
        raise UserError(
            "container.image",
            box.image,
            f"the training script {script} is not in the image",
            "mount its folder with container.mounts=[SRC:DST], or name the script's path inside the image",
        )


def _report(out: str) -> dict | None:
    for line in reversed(out.splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return (lines[-1] if lines else "no output")[:300]
