"""``submit=ssh``'s handle side (``runs`` calls it; no Hydra): a launch under way, from its record.

This machine's launcher holds the launch (it supervises every node's ssh client), so its own record
says how the launch stands (``describe``: D/status.json, read as a local launch's), and stopping it
is one Ctrl+C to it (``cancel``: SIGINT, which stops every node). A rank's log is on its node's
host, in that node's run directory (D/nodes.json names it): read here where that directory is
visible (a shared disk, node 0 on this machine), else over the node's own ssh command.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterator

from .. import files
from ..backends import local_state
from ..backends.base import Handle, Status
from ..errors import UserError
from ..rundir import RunPaths

NODES = "nodes.json"


def describe(handle: Handle) -> Status:
    return local_state.describe(handle)


def cancel(handle: Handle) -> None:
    local_state.cancel(handle)


def nodes(handle: Handle) -> list[dict]:
    """D/nodes.json's nodes ([] when it cannot be read). Each node's ``ssh`` command is run by
    ``runs logs`` on a node whose directory is not visible here: it is kept only when nodes.json
    belongs to the user running ``runs`` (a record in a shared run root is a file anyone who can write
    there can forge: its command would run as whoever reads the logs); else it is dropped and the
    node is marked ``"ssh": "not yours"``."""
    try:
        fd, info = files.open_fd(os.path.join(handle.run_dir, NODES), handle.run_dir)
        with os.fdopen(fd, "rb") as stream:
            raw = stream.read(files.JSON_MAX + 1)
        data = files.parse_json(raw) if len(raw) <= files.JSON_MAX else None
    except (OSError, ValueError):
        return []
    found = data.get("nodes") if isinstance(data, dict) else None
    known = [node for node in found if isinstance(node, dict)] if isinstance(found, list) else []
    if info.st_uid != os.geteuid():
        known = [{**node, "ssh": NOT_YOURS} for node in known]
    return known


NOT_YOURS = "not yours"  # a node's ssh command from a nodes.json another user wrote: never run


def logs(handle: Handle, rank: int | None = None, follow: bool = False) -> Iterator[str]:
    """Rank ``rank``'s log from the node that ran it: read here where the node's run directory is
    visible (``follow``: while this launch runs), else asked over that node's ssh command (read once).
    ``rank`` None: every rank of every node, each line prefixed ``[rank R]`` (global ranks)."""
    if rank is None:
        yield from _every_rank(handle, follow)
        return
    known = nodes(handle)
    elsewhere, unreachable = [], []
    for node in known:
        where = node.get("run_dir")
        if not isinstance(where, str):
            continue
        if os.path.isfile(RunPaths(where).rank_log(rank)):  # visible here: followed while this launch runs
            yield from _local(handle, where, rank, follow)
            return
        ssh = node.get("ssh")
        if not os.path.isdir(where) and isinstance(ssh, list) and all(isinstance(a, str) for a in ssh):
            elsewhere.append((node, ssh, str(RunPaths(where).rank_log(rank))))
    for node, ssh, path in elsewhere:
        code, text = _remote(ssh, path)
        if code == 0:
            yield from text.splitlines(keepends=True)
            return
        if code != _MISSING:
            unreachable.append(f"node {node.get('node')} ({node.get('host')}): {text.strip() or f'ssh exit {code}'}")
    hosts = ", ".join(f"node {n.get('node')} ({n.get('host')})" for n in known) or "none recorded"
    if any(n.get("ssh") == NOT_YOURS for n in known):
        unreachable.append(f"{NODES} belongs to another user: its ssh commands are never run")
    why = f"; not asked: {'; '.join(unreachable)}" if unreachable else ""
    raise UserError("--rank", rank, f"no node of this launch has a log for rank {rank} (nodes: {hosts}){why}")


_MISSING = 3  # the remote shell's exit status when the log is not there
REMOTE_TIMEOUT_S = 60


def _local(handle: Handle, node_dir: str, rank: int, follow: bool) -> Iterator[str]:
    """A node's rank log read here; followed until this launch's own record ends."""
    stream = files.open_regular(RunPaths(node_dir).rank_log(rank), node_dir)
    try:
        yield from local_state._lines(stream, handle, follow)
    finally:
        stream.close()


def _every_rank(handle: Handle, follow: bool) -> Iterator[str]:
    """Every node's ranks: a node's directory visible here read as a local launch's (its ranks'
    lines prefixed ``[rank R]``), another's asked over its ssh command (read once)."""
    found = False
    for node in nodes(handle):
        where, ssh = node.get("run_dir"), node.get("ssh")
        if not isinstance(where, str):
            continue
        if os.path.isdir(where):
            try:
                yield from local_state.logs(Handle(local_state.BACKEND, "", where), None, follow)
                found = True
            except UserError:  # no rank log on this node (yet)
                pass
        elif isinstance(ssh, list) and all(isinstance(a, str) for a in ssh):
            logs = shlex.quote(str(RunPaths(where).logs))
            line = (
                f"cd {logs} || exit {_MISSING}; for f in rank*.log; do r=${{f#rank}}; r=${{r%.log}}; "
                f'sed "s/^/[rank $r] /" "$f"; done'
            )
            code, text = _query(ssh, line)
            if code == 0 and text:
                found = True
                yield from text.splitlines(keepends=True)
    if not found:
        raise UserError("--rank", "all", "no readable rank log on any node of this launch")


def _remote(ssh: list[str], path: str) -> tuple[int, str]:
    """A rank log on its host, through the node's ssh command: (exit status, its text or ssh's words)."""
    quoted = shlex.quote(path)
    return _query(ssh, f"test -f {quoted} || exit {_MISSING}; cat {quoted}")


def _query(ssh: list[str], line: str) -> tuple[int, str]:
    """One shell line on a node's host: a short bounded query (as ``sbatch`` or ``kubectl`` elsewhere),
    stdin closed; (exit status, its output, or ssh's words when it failed)."""
    import subprocess

    try:
        done = subprocess.run(
            [*ssh, line], stdin=subprocess.DEVNULL, capture_output=True, timeout=REMOTE_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        return -1, f"no answer in {REMOTE_TIMEOUT_S} s"
    except OSError as err:
        return -1, str(err)
    text = (done.stdout if done.returncode == 0 else done.stderr).decode(errors="replace")
    return done.returncode, text
