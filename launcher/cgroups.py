"""A leaf: where this process's cgroup is, the one way to find it (cpu_topology reads its cpuset,
run/postmortem/oom its memory counters). Standard library only.

``/proc/self/cgroup`` names the cgroup (``0::/path`` for the v2 unified hierarchy, ``N:ctl,...:/path``
for each v1 hierarchy); ``/proc/self/mountinfo`` says where each hierarchy is mounted (any path, not
only ``/sys/fs/cgroup``: a hybrid system's ``unified``, a v1 controller co-mounted as ``cpu,cpuset``)
and which part of it (its root: a cgroup namespace shows the process's own cgroup as ``/``).
"""

from __future__ import annotations

import os
from typing import NamedTuple

PROC_CGROUP = "/proc/self/cgroup"
MOUNTINFO = "/proc/self/mountinfo"


def dirs(controller: str, proc_cgroup: str = PROC_CGROUP, mountinfo: str = MOUNTINFO) -> list[str]:
    """The directories of this process's cgroup where ``controller``'s files are: the v1 hierarchy
    mounted with that controller's and the v2 unified hierarchy's (either or both may exist), in the
    order of the mounts; [] when either file cannot be read."""
    try:
        with open(proc_cgroup, encoding="utf-8", errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return []
    mounts = mount_table(mountinfo)
    v1_path = v2_path = None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            v2_path = parts[2]
        elif controller in parts[1].split(","):
            v1_path = parts[2]
    found = []
    for mount in mounts:
        root, mountpoint = mount.root, mount.point
        if mount.fstype == "cgroup" and v1_path is not None and controller in mount.super_options:
            path = v1_path
        elif mount.fstype == "cgroup2" and v2_path is not None:
            path = v2_path
        else:
            continue
        rel = os.path.relpath(path, root) if path.startswith(root) else path.lstrip("/")
        candidate = os.path.normpath(os.path.join(mountpoint, "" if rel == "." else rel))
        if not os.path.isdir(candidate):  # a cgroup namespace shows "/" for a cgroup mounted as the root
            candidate = mountpoint
        if candidate not in found:
            found.append(candidate)
    return found


class Mount(NamedTuple):
    """One line of ``/proc/self/mountinfo``."""

    root: str  # the part of the file system mounted there
    point: str  # where (octal escapes of space, tab, backslash undone)
    options: list[str]  # the mount's own options (ro, nosuid, ...)
    fstype: str
    super_options: list[str]  # the file system's (a v1 cgroup's controllers)


def mount_table(mountinfo: str = MOUNTINFO) -> list[Mount]:
    """The mounts this process sees, in the file's order; [] when it cannot be read (not Linux).

    >>> any(m.point == "/" for m in mount_table())
    True
    """
    try:
        with open(mountinfo, encoding="utf-8", errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return []
    table = []
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 6 or not tail:
            continue
        point = fields[4].replace("\\040", " ").replace("\\011", "\t").replace("\\134", "\\")
        super_options = tail[2].split(",") if len(tail) > 2 else []
        table.append(Mount(fields[3], point, fields[5].split(","), tail[0], super_options))
    return table
