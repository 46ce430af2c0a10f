"""A leaf: where this process's cgroup is, the one way to find it (cpu_topology reads its cpuset,
run/postmortem/oom its memory counters). Standard library only.

``/proc/self/cgroup`` names the cgroup (``0::/path`` for the v2 unified hierarchy, ``N:ctl,...:/path``
for each v1 hierarchy); ``/proc/self/mountinfo`` says where each hierarchy is mounted (any path, not
only ``/sys/fs/cgroup``: a hybrid system's ``unified``, a v1 controller co-mounted as ``cpu,cpuset``)
and which part of it (its root: a cgroup namespace shows the process's own cgroup as ``/``).
"""

from __future__ import annotations

import os

PROC_CGROUP = "/proc/self/cgroup"
MOUNTINFO = "/proc/self/mountinfo"


def dirs(controller: str, proc_cgroup: str = PROC_CGROUP, mountinfo: str = MOUNTINFO) -> list[str]:
    """The directories of this process's cgroup where ``controller``'s files are: the v1 hierarchy
    mounted with that controller's and the v2 unified hierarchy's (either or both may exist), in the
    order of the mounts; [] when either file cannot be read."""
    try:
        with open(proc_cgroup, encoding="utf-8", errors="replace") as handle:
            lines = handle.read().splitlines()
        with open(mountinfo, encoding="utf-8", errors="replace") as handle:
            mounts = handle.read().splitlines()
    except OSError:
        return []
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
    for line in mounts:
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        root, mountpoint = fields[3], fields[4]
        fstype, _source, options = (line.split(" - ", 1)[1].split() + ["", "", ""])[:3]
        if fstype == "cgroup" and v1_path is not None and controller in options.split(","):
            path = v1_path
        elif fstype == "cgroup2" and v2_path is not None:
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
