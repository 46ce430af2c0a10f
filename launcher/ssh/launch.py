"""``submit=ssh``'s submit: this machine's record of the launch, then every node's ssh client, run to
the end by launcher/run/ssh_nodes.py (one console, one Ctrl+C, one exit code).

The record, in the run directory ``D`` (SshPlan.run_dir) on this machine::

    D/submit.json   the handle: backend ssh, this launcher's pid (``runs stop`` sends it SIGINT)
    D/status.json   this launcher's: opened with its pid and start time, closed with the exit code
    D/nodes.json    every node: its host, its ssh command, its run directory there, how it ended

Each node records in ``D/node<i>`` on its own host (its launcher runs with ``run_dir=D``); where
the disk is shared (or the node is this machine) ``runs`` finds those records under ``D`` and lists
the launch once, with its nodes (launcher/runs/read.py, as a SLURM job's).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from .. import record
from ..backends.base import SUBMIT_RECORD, Handle
from ..names import PROG

if TYPE_CHECKING:
    from .command import SshPlan

from .state import NODES


def write_nodes(run_dir: Path, plan: SshPlan, ends: dict[int, dict]) -> None:
    nodes = []
    for node in plan.nodes:
        known = ends.get(node.rank, {})
        nodes.append(
            {
                "node": node.rank,
                "host": node.host,
                "ssh": list(node.ssh_argv),
                "run_dir": known.get("run_dir"),
                "exit_code": known.get("exit_code"),
                "reason": known.get("reason"),
            }
        )
    record.write_json(run_dir / NODES, {"nodes": nodes})


def submit(plan: SshPlan, interrupts=None):
    """Run the launch to its end; (the handle, the outcome). The preflight is its start: the record
    is written once every host is ready, before any is told to go (none ready: no record either)."""
    from ..backends.local import error
    from ..run import leash, ssh_nodes
    from . import early, preflight

    run_dir = Path(plan.run_dir)
    handle = Handle("ssh", str(os.getpid()), str(run_dir), {"hosts": ",".join(n.host for n in plan.nodes)})
    ends: dict[int, dict] = {}
    lock = threading.Lock()
    opened: dict[str, float] = {}

    def on_ready() -> None:  # every host ready: the record, then go
        run_dir.mkdir(parents=True, exist_ok=True)
        opened["at"] = record.write_opened(run_dir)
        record.write_json(run_dir / SUBMIT_RECORD, handle.as_record())
        write_nodes(run_dir, plan, ends)
        print(f"[{PROG}] run directory: {run_dir} ({len(plan.nodes)} nodes over SSH)", flush=True)

    def node_dir(rank: int, path: str) -> None:  # a node named its run directory: the record says so
        with lock:
            ends.setdefault(rank, {})["run_dir"] = path
            write_nodes(run_dir, plan, ends)

    remote, secrets = preflight.remote_nodes(plan), plan.secret_values()
    outcome = ssh_nodes.run(
        remote,
        secrets,
        plan.grace_period,
        plan.node_timeout or leash.DEFAULT_TIMEOUT_S,  # the channel's silence: a node lost, as between nodes
        interrupts,
        node_dir,
        preflight_s=preflight.bound(plan),
        judge=preflight.judge(plan, error),  # every host ready, or one line each and nothing starts
        on_ready=on_ready,
        started=early.take(remote, secrets.values()),  # the clients started before composing, if the same
    )
    with lock:
        for end in outcome.nodes:
            ends[end.rank] = end.as_record()
        write_nodes(run_dir, plan, ends)
    failure = None
    if outcome.failed_node is not None:
        failure = {"node": outcome.failed_node, "exit_code": outcome.exit_code, "summary": outcome.summary}
    record.write_end(run_dir, opened["at"], outcome.exit_code, outcome.reason, outcome.ended, failure)
    print(f"[{PROG}] exit code {outcome.exit_code} ({outcome.reason}); run directory: {run_dir}", flush=True)
    return handle, outcome
