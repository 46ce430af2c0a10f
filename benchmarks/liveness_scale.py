"""The nodes' liveness channel and the restart coordinator at many nodes (issue 28, deliverable 1).

    python benchmarks/liveness_scale.py [--nodes 4,256,1024] [--timeout 30] [--healthy 10] [--procs 6]

Real members against a real node 0 on loopback: node 0 is one process running the launcher's own
:class:`~launcher.run.monitor.liveness.NodeLiveness` (and :class:`~launcher.run.monitor.coordinator.
NodesCoordinator` for the restart decision), the other nodes are ``NodeLiveness`` members too (the
real wire format, the real code), as threads spread over ``--procs`` processes, except two that run
alone in a process of their own: one is SIGKILLed (lost: the kernel closes its connection), one
SIGSTOPped (silent: only ``launcher.node_timeout`` finds it). For each node count, in that order:

1. healthy: node 0's CPU time per second of wall time (its whole process) over ``--healthy`` s;
2. the restart decision: node 1 says its attempt failed (``ended 0 3 retry exit-code``), node 0
   names it to every node, each node says its attempt ended, node 0 decides (``restart 1``): the
   time from node 1's word until every node has node 0's, and node 0's own share (its attempt's end
   to its word). A node reports the moment its channel tells it (no ranks to stop here);
3. lost: the SIGKILL until every other node knows (goal at 1,024: within 2 s);
4. silent: the SIGSTOP until every other node knows (goal: within ``node_timeout`` + 1 s).

The smallest count (default 4: node 0, one member, the two victims) is the baseline: every figure
is also printed as a ratio to it. Times are ``time.monotonic()`` (one clock for every process of
this machine). The machine's load is printed first: the members share its cores with node 0.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from launcher_cost import load_average  # noqa: E402

from launcher.plan import NodeWatch  # noqa: E402
from launcher.probe import free_port  # noqa: E402
from launcher.run.monitor import liveness_wire as wire  # noqa: E402
from launcher.run.monitor.coordinator import NodesCoordinator, Verdict  # noqa: E402
from launcher.run.monitor.liveness import NodeLiveness  # noqa: E402

FAILED_NODE = 1  # the node whose attempt fails in the decision round


def _raise_files() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class Member(NodeLiveness):
    """A member that notes when its channel told it a node was lost and when node 0's word came."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.lost_at: float | None = None
        self.word_at: float | None = None
        self.react = False  # the decision round: say this attempt ended as soon as it ends
        self.reported = False

    def _declare(self, *args, **kwargs) -> None:
        super()._declare(*args, **kwargs)
        if self._lost is not None and self.lost_at is None:
            self.lost_at = time.monotonic()
            if self.react and not self.reported:
                self.reported = True
                self.attempt_ended(self.attempt, self._lost.code, True, "node-failed", "node 1 failed")

    def _member_heard(self, peer, message) -> None:
        super()._member_heard(peer, message)
        if self._word is not None and self.word_at is None:
            self.word_at = time.monotonic()
            if isinstance(self._word, wire.Restart):
                self.begin(self._word.attempt)  # the next attempt's record starts clean

    def begin(self, attempt: int) -> None:
        super().begin(attempt)
        self.lost_at = None
        self.react, self.reported = False, False


def _watch(node: int, nnodes: int, port: int, timeout: float) -> NodeWatch:
    return NodeWatch(node, nnodes, "127.0.0.1", port, timeout, str(port))


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _reply(data: object) -> None:
    print(json.dumps(data), flush=True)


def hub_main(nnodes: int, port: int, timeout: float) -> None:
    """Node 0: commands on stdin, one JSON answer each on stdout."""
    _raise_files()
    channel = NodeLiveness(_watch(0, nnodes, port, timeout), err=open(os.devnull, "w"))
    channel.start()
    coordinator = NodesCoordinator(channel)
    _reply("up")
    for line in sys.stdin:
        what, *args = line.split()
        if what == "watched":
            _reply(len(channel.watched()))
        elif what == "cpu":
            wall0, cpu0 = time.monotonic(), _cpu()
            time.sleep(float(args[0]))
            _reply((_cpu() - cpu0) / (time.monotonic() - wall0))
        elif what == "decide":  # wait for the failure, then decide as the attempt loop does
            deadline = time.monotonic() + 60
            while channel.check([]) is None and time.monotonic() < deadline:
                time.sleep(0.001)
            ended = time.monotonic()
            word = coordinator.settle(0, Verdict(3, True, "node 1 failed", "node-failed"), FAILED_NODE)
            _reply({"word": repr(word), "took": time.monotonic() - ended})
        elif what == "lost_at":
            _reply(None if channel.check([]) is None else time.monotonic())
        elif what == "begin":
            channel.begin(int(args[0]))
            _reply("ok")
        elif what == "quit":
            break
    channel.close()


def members_main(nodes: list[int], nnodes: int, port: int, timeout: float) -> None:
    """Members ``nodes`` (threads of this process): commands on stdin, one JSON answer each."""
    _raise_files()
    threading.stack_size(256 * 1024)
    null = open(os.devnull, "w")
    members = {node: Member(_watch(node, nnodes, port, timeout), err=null) for node in nodes}
    for member in members.values():
        member.start()
    _reply("up")
    for line in sys.stdin:
        what, *args = line.split()
        if what == "react":
            for member in members.values():
                member.react = True
            _reply("ok")
        elif what == "fail":  # this node's attempt failed on its own
            member = members[int(args[0])]
            member.reported = True
            now = time.monotonic()
            member.attempt_ended(0, 3, True, "exit-code", "rank 1 failed: exit code 3")
            _reply(now)
        elif what == "report":
            _reply({node: [m.lost_at, m.word_at] for node, m in members.items()})
        elif what == "begin":
            for member in members.values():
                member.begin(int(args[0]))
            _reply("ok")
        elif what == "quit":
            break
    os._exit(0)  # no goodbyes: the bench is over


class Child:
    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        assert self.ask_nothing() == "up"

    def ask_nothing(self):
        return json.loads(self.proc.stdout.readline())

    def ask(self, line: str):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self.ask_nothing()

    def end(self) -> None:
        try:
            self.proc.kill()
        except OSError:
            pass
        self.proc.wait()


def _wait_all(groups, nodes: set[int], which: int, limit: float) -> dict[int, float]:
    """Poll the members' reports until every node in ``nodes`` has its time ``which`` (0: lost,
    1: word), at most ``limit`` s; the times found."""
    deadline = time.monotonic() + limit
    while True:
        found = {}
        for group in groups:
            for node, times in group.ask("report").items():
                if int(node) in nodes and times[which] is not None:
                    found[int(node)] = times[which]
        if len(found) == len(nodes) or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def measure(nnodes: int, args) -> dict:
    port = free_port()
    me = [sys.executable, str(Path(__file__).resolve())]
    hub = Child([*me, "--role", "hub", "--nnodes", str(nnodes), "--port", str(port), "--timeout", str(args.timeout)])
    killed, stopped = nnodes - 1, nnodes - 2
    rest = list(range(1, nnodes - 2))
    procs = max(1, min(args.procs, len(rest)))
    chunks = [rest[i::procs] for i in range(procs)]

    def members(nodes: list[int]) -> Child:
        nodes_arg = ",".join(map(str, nodes))
        common = ["--nnodes", str(nnodes), "--port", str(port), "--timeout", str(args.timeout)]
        return Child([*me, "--role", "members", "--members", nodes_arg, *common])

    groups = [members(chunk) for chunk in chunks if chunk]
    victims = [members([killed]), members([stopped])]
    everyone = groups + victims
    result: dict = {"nodes": nnodes}
    try:
        started = time.monotonic()
        while hub.ask("watched") < nnodes - 1:
            if time.monotonic() - started > 120:
                raise SystemExit(f"{nnodes} nodes: only {hub.ask('watched')} joined within 120 s")
            time.sleep(0.2)
        result["join_s"] = time.monotonic() - started
        time.sleep(2)  # past the joins' own work
        result["hub_cpu"] = hub.ask(f"cpu {args.healthy}")
        if hub.ask("lost_at") is not None:
            raise SystemExit(f"{nnodes} nodes: node 0 found a node lost while all were healthy")

        # the restart decision
        for group in everyone:
            group.ask("react")
        hub.proc.stdin.write("decide\n")
        hub.proc.stdin.flush()
        owner = next(g for g in groups if str(FAILED_NODE) in {str(n) for n in g.ask("report")})
        said = owner.ask(f"fail {FAILED_NODE}")
        decided = hub.ask_nothing()
        others = set(range(1, nnodes))
        words = _wait_all(everyone, others, 1, 30)
        result["decision_word"] = decided["word"]
        result["decision_hub_s"] = decided["took"]
        result["decision_s"] = max(words.values()) - said if len(words) == len(others) else None
        result["decision_missing"] = len(others) - len(words)
        # (members began attempt 1 when the word came; node 0 in settle)

        # lost: SIGKILL
        watchers = set(range(1, nnodes)) - {killed}
        t0 = time.monotonic()
        os.kill(victims[0].proc.pid, signal.SIGKILL)
        known = _wait_all(groups + victims[1:], watchers, 0, 10)
        result["lost_s"] = max(known.values()) - t0 if len(known) == len(watchers) else None
        result["lost_missing"] = len(watchers) - len(known)
        for group in [hub, *groups, victims[1]]:
            group.ask("begin 2")

        # silent: SIGSTOP
        watchers = set(range(1, nnodes)) - {killed, stopped}
        t0 = time.monotonic()
        os.kill(victims[1].proc.pid, signal.SIGSTOP)
        known = _wait_all(groups, watchers, 0, args.timeout + 15)
        result["silent_s"] = max(known.values()) - t0 if len(known) == len(watchers) else None
        result["silent_missing"] = len(watchers) - len(known)
        os.kill(victims[1].proc.pid, signal.SIGCONT)
    finally:
        for child in [hub, *everyone]:
            child.end()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", default="4,256,1024")
    parser.add_argument("--timeout", type=float, default=30.0, help="launcher.node_timeout (its default)")
    parser.add_argument("--healthy", type=float, default=10.0, help="seconds of node 0's CPU measured")
    parser.add_argument("--procs", type=int, default=6, help="processes holding the member threads")
    parser.add_argument("--role", choices=("hub", "members"))
    parser.add_argument("--nnodes", type=int)
    parser.add_argument("--port", type=int)
    parser.add_argument("--members", default="")
    args = parser.parse_args()
    if args.role == "hub":
        return hub_main(args.nnodes, args.port, args.timeout)
    if args.role == "members":
        return members_main([int(n) for n in args.members.split(",")], args.nnodes, args.port, args.timeout)
    _raise_files()
    print(f"# {load_average()}", flush=True)
    rows = []
    for nnodes in [int(n) for n in args.nodes.split(",")]:
        before = load_average()
        row = measure(nnodes, args)
        row["load"] = before
        rows.append(row)
        print(json.dumps(row), flush=True)
    base = rows[0]
    goal_silent = args.timeout + 1
    print(
        f"\n{'nodes':>6} {'node 0 CPU':>11} {'x base':>7} {'lost s':>7} {'silent s':>9} {'-timeout':>9} "
        f"{'decision s':>11} {'x base':>7}"
    )
    for row in rows:

        def ratio(key: str, row: dict = row) -> str:
            if row.get(key) is None or not base.get(key):
                return "-"
            return f"{row[key] / base[key]:.1f}"

        silent = row.get("silent_s")
        print(
            f"{row['nodes']:>6} {row['hub_cpu']:>10.2%} {ratio('hub_cpu'):>7} "
            f"{row['lost_s'] if row['lost_s'] is None else format(row['lost_s'], '.3f'):>7} "
            f"{'-' if silent is None else format(silent, '.2f'):>9} "
            f"{'-' if silent is None else format(silent - args.timeout, '+.2f'):>9} "
            f"{'-' if row['decision_s'] is None else format(row['decision_s'], '.3f'):>11} {ratio('decision_s'):>7}"
        )
    print(
        f"\ngoals at 1,024 nodes: node 0 < 5% of a core; lost <= 2 s; silent <= node_timeout + 1 s ({goal_silent:g} s)"
    )


if __name__ == "__main__":
    main()
