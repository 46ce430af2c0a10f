"""The kernel's OOM-kill counters, read before and after a launch: the evidence that a rank killed by
a SIGKILL the launcher did not send was the kernel's out-of-memory killer. Standard library only.

Where the counters are (each read when it exists and is readable; none needs privileges):

- cgroup v2: ``<cgroup>/memory.events``, line ``oom_kill N`` (hierarchical: kills in this cgroup
  and below);
- cgroup v1: ``<memory cgroup>/memory.oom_control``, line ``oom_kill N`` (kills whose victim was in
  this very cgroup), and ``memory.failcnt`` (how often usage hit the limit; older kernels have no
  ``oom_kill`` line);
- the whole machine: ``/proc/vmstat``, line ``oom_kill N`` (Linux 4.13 and later).

The cgroup is the launcher's own, found through ``/proc/self/cgroup`` and the cgroup mounts of
``/proc/self/mountinfo``. The ranks inherit it (a scheduler's job or step cgroup holds the launcher
and its ranks alike), so a rank killed for exceeding the job's memory shows there.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ... import cgroups

VMSTAT = "/proc/vmstat"


@dataclass(frozen=True)
class Counters:
    """Counter name (``<file path>:<key>``) → value, as read at one moment."""

    values: dict[str, int] = field(default_factory=dict)

    def rises(self, later: Counters) -> dict[str, tuple[int, int]]:
        """The counters that grew between this reading and ``later``: name → (before, after)."""
        return {
            name: (before, later.values[name])
            for name, before in self.values.items()
            if name in later.values and later.values[name] > before
        }


def _keyed(path: str, key: str) -> int | None:
    """The value of the line ``<key> N`` in a flat keyed file, None when unreadable or absent."""
    try:
        with open(path) as handle:
            for line in handle:
                parts = line.split()
                if len(parts) == 2 and parts[0] == key:
                    return int(parts[1])
    except (OSError, ValueError):
        return None
    return None


def _single(path: str) -> int | None:
    try:
        with open(path) as handle:
            return int(handle.read().strip())
    except (OSError, ValueError):
        return None


def memory_cgroups(proc_cgroup: str = cgroups.PROC_CGROUP, mountinfo: str = cgroups.MOUNTINFO) -> list[str]:
    """The directories of this process's memory cgroup (launcher/cgroups.py)."""
    return cgroups.dirs("memory", proc_cgroup, mountinfo)


def read(cgroups: list[str] | None = None) -> Counters:
    """The OOM counters readable now (``cgroups``: the directories to read; default: this process's)."""
    values: dict[str, int] = {}
    for directory in memory_cgroups() if cgroups is None else cgroups:
        for name, key in (("memory.events", "oom_kill"), ("memory.oom_control", "oom_kill")):
            value = _keyed(os.path.join(directory, name), key)
            if value is not None:
                values[f"{os.path.join(directory, name)}:{key}"] = value
        failcnt = _single(os.path.join(directory, "memory.failcnt"))
        if failcnt is not None:
            values[f"{os.path.join(directory, 'memory.failcnt')}:"] = failcnt
    machine = _keyed(VMSTAT, "oom_kill")
    if machine is not None:
        values[f"{VMSTAT}:oom_kill"] = machine
    return Counters(values)


@dataclass(frozen=True)
class Evidence:
    """What the counters say about a SIGKILL: ``confirmed`` (this launch's cgroup counted an OOM
    kill), ``likely`` (the machine counted one, or the cgroup hit its memory limit), ``none_counted``
    (counters were readable and none moved), or ``unknown`` (nothing readable)."""

    verdict: str
    detail: str


def judge(before: Counters | None, after: Counters) -> Evidence:
    if before is None or not before.values:
        return Evidence("unknown", "no OOM counter was readable to confirm it")
    rises = before.rises(after)
    kills = {name: change for name, change in rises.items() if name.endswith(":oom_kill") and VMSTAT not in name}
    if kills:
        name, (old, new) = next(iter(kills.items()))
        return Evidence("confirmed", f"{name.rsplit(':', 1)[0]} counted oom_kill {old} -> {new} during the launch")
    if f"{VMSTAT}:oom_kill" in rises:
        old, new = rises[f"{VMSTAT}:oom_kill"]
        return Evidence(
            "likely", f"the machine counted an OOM kill during the launch ({VMSTAT} oom_kill {old} -> {new})"
        )
    # memory.failcnt only where the kernel keeps no oom_kill count (reclaim alone raises it too)
    counted = {name.rsplit("/", 1)[0] for name in before.values if name.endswith(":oom_kill")}
    limits = {
        name: change
        for name, change in rises.items()
        if name.endswith("memory.failcnt:") and name.rsplit("/", 1)[0] not in counted
    }
    if limits:
        name, (old, new) = next(iter(limits.items()))
        return Evidence("likely", f"the memory cgroup hit its limit ({name.rstrip(':')} {old} -> {new})")
    read = sorted({name.rsplit(":", 1)[0] for name in before.values})
    return Evidence("none_counted", "no OOM kill was counted (" + ", ".join(read) + ")")
