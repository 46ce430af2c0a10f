"""A podman image for the container tests, built from files this machine has (no registry here).

The image holds only the shared libraries that this machine's Python and the test virtual
environment's extension modules load (their ``ldd`` closure, with the dynamic loader), ``/tmp`` and
a ``root`` user: no Python, no torch, nothing else of the host's root filesystem. The tests mount the
interpreter's install and the virtual environment read-only through ``container.mounts``, as a user
mounts a training stack; without those mounts the image has no Python (the preflight's refusal).

The build (``podman import`` of a root filesystem tarball) takes ~20 s on two cores: it runs once per
content (the tag is a hash of the library list and the files' sizes and times), and a later session
finds the image already there.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
from pathlib import Path

from require import unavailable

PODMAN = ("podman", "--runtime", "runc")
# the sandbox refuses to raise resource limits: pass the current ones (no higher)
ULIMITS = ("--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024")
REPO = "localhost/train-multigpu-test"


def base_prefix() -> str:
    return os.path.realpath(sys.base_prefix)


def venv_prefix() -> str:
    return os.path.realpath(sys.prefix)


def python_mounts() -> list[str]:
    """container.mounts entries that give the image this machine's interpreter and the test venv."""
    return [f"{base_prefix()}:{base_prefix()}:ro", f"{venv_prefix()}:{venv_prefix()}:ro"]


def _objects() -> list[str]:
    roots = [base_prefix(), sysconfig.get_paths()["purelib"]]
    found = [os.path.realpath(os.path.join(base_prefix(), "bin", f"python{sys.version_info[0]}.{sys.version_info[1]}"))]
    for root in roots:
        for folder, _dirs, names in os.walk(root):
            found += [os.path.join(folder, n) for n in names if ".so" in n and not n.endswith(".py")]
    return sorted(set(found))


def _key(objects: list[str]) -> str:
    digest = hashlib.sha256()
    for path in objects:
        try:
            st = os.stat(path)
        except OSError:
            continue
        digest.update(f"{path}\0{st.st_size}\0{int(st.st_mtime)}\n".encode())
    return digest.hexdigest()[:16]


def _closure(objects: list[str]) -> list[str]:
    libs: set[str] = set()
    for start in range(0, len(objects), 64):
        out = subprocess.run(["ldd", *objects[start : start + 64]], capture_output=True, text=True).stdout
        for line in out.splitlines():
            words = line.split()
            if "=>" in words and len(words) > words.index("=>") + 1:
                target = words[words.index("=>") + 1]
                if target.startswith("/"):
                    libs.add(target)
            elif words and words[0].startswith("/") and "ld-linux" in words[0]:
                libs.add(words[0])
    prefixes = (base_prefix(), venv_prefix(), sysconfig.get_paths()["purelib"])
    return sorted(lib for lib in libs if not lib.startswith(prefixes))


def have_podman() -> bool:
    if shutil.which("podman") is None or shutil.which("runc") is None:
        return False
    done = subprocess.run([*PODMAN, "info"], capture_output=True, timeout=60)
    return done.returncode == 0


def image(workdir: Path) -> str:
    """The test image's tag (built if this content has none yet); skips without podman and runc."""
    if not have_podman():
        unavailable("PODMAN", "podman with runc is not installed (apt install podman runc)")
    objects = _objects()
    tag = f"{REPO}:{_key(objects)}"
    if subprocess.run([*PODMAN, "image", "exists", tag], capture_output=True).returncode == 0:
        return tag
    tarball = workdir / "rootfs.tar"
    libs = set(_closure(objects))
    if os.path.exists("/lib64/ld-linux-x86-64.so.2"):
        libs.add("/lib64/ld-linux-x86-64.so.2")
    with tarfile.open(tarball, "w") as tar:
        for lib in sorted(libs):  # each under the name the loader asks for, the file itself
            tar.add(os.path.realpath(lib), arcname=lib.lstrip("/"))
        for folder in ("tmp", "etc", "root"):
            info = tarfile.TarInfo(folder)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if folder == "tmp" else 0o755
            tar.addfile(info)
        for name, text in (("etc/passwd", "root:x:0:0:root:/root:/nonexistent\n"), ("etc/group", "root:x:0:\n")):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    subprocess.run([*PODMAN, "import", str(tarball), tag], check=True, capture_output=True, timeout=300)
    tarball.unlink()
    return tag


def containers() -> list[str]:
    """Every container podman knows (running or not), by name."""
    out = subprocess.run([*PODMAN, "ps", "-a", "--format", "{{.Names}}"], capture_output=True, text=True, timeout=60)
    return [line for line in out.stdout.split() if line]
