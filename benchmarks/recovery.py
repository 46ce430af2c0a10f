"""How long a restart takes, and what restarts cost while nothing fails (docs/recovery.md), one node:

    python benchmarks/recovery.py [--repeat 2] [--pairs 5] [--crash 3] [--nodes] [KEY=VALUE ...]

1. Recovery: the bundled trainer (CartPole, 2 CPU workers; torch under torchrun, and JAX), rank 1
   exits 3 after iteration --crash (TRAIN_MULTIGPU_EXAMPLE_CRASH, first attempt only), with
   ``restart.max=1 restart.classes=[default,exit-code]``. A poller (every 5 ms) takes the file
   times; the launcher's own times are status.json's ``attempts[].timing``. From the failure to the
   next attempt's first iteration, split into:
   - detection: the crash (the mtime of rank 1's log holding its last line) -> the failure found;
   - teardown: found -> the attempt gone (every process reaped, summary printed, record written);
   - restart: gone -> the next attempt's ranks up (its rank 0's start-up beat: interpreter, imports,
     process group, checkpoint loaded);
   - resume: up -> the first iteration after the checkpoint done (its beat).
   Goal: the sum under 15 s (a hang adds launcher.hang_timeout before detection). The restart is
   mostly the ranks' own start-up: the first attempt's (the launch -> its ranks up) is printed too.
   Two nodes (``--nodes``, needs root for network namespaces: tests/netns.py): two launchers on two
   namespace hosts, the static rendezvous (node 1 holds global rank 1), one worker each, rank 1
   exits 3 on node 1; node 0's times (its ranks follow a failure on the other node): detection
   (the crash -> node 0 found its attempt failed), teardown (-> node 0's attempt gone), decision
   (-> node 0's next attempt starts: node 1's end heard, the word sent), restart (-> node 0's rank
   0 up again), resume.
2. Cost while nothing fails: a trivial two-rank all-reduce (examples/allreduce.py) launched with
   ``restart.max=0`` and ``restart.max=3``, alternating pairs; the medians and their ratio.

Torch and JAX recoveries alternate (the same load for both); each line gives the median and the
range. KEY=VALUE arguments go on each recovery's launch: ``script=/elsewhere/examples/train.py`` times
another copy of the bundled trainer (an earlier commit's) in the same conditions.

The first line printed is the load: figures on a busy machine mean little.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PY = sys.executable
ALLREDUCE = REPO / "examples" / "allreduce.py"


def env(**extra: str) -> dict:
    out = {**os.environ, "CUDA_VISIBLE_DEVICES": "", **extra}
    out["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), out.get("PYTHONPATH")]))
    return out


class Poller(threading.Thread):
    """Watches a run root for the crash line and the next attempt's beats (file mtimes)."""

    def __init__(self, root: Path, crash: int) -> None:
        super().__init__(daemon=True)
        self.root, self.crash = root, crash
        self.crashed = self.up = self.first = self.up0 = None
        self.done = False

    def run(self) -> None:
        while not self.done and self.first is None:
            runs = [p for p in self.root.glob("*") if p.is_dir()] if self.root.exists() else []
            for run in runs:
                self._look(run)
            time.sleep(0.005)

    def _look(self, run: Path) -> None:
        beat0 = run / "logs" / "rank0.beat"
        if self.up0 is None and beat0.exists():  # the first attempt's start-up beat: the same work as a restart
            self.up0 = beat0.stat().st_mtime
        log = run / "logs" / "rank1.log"
        if self.crashed is None and log.exists():
            info = log.stat()
            if b"TRAIN_MULTIGPU_EXAMPLE_CRASH: rank 1 exits 3" in log.read_bytes():
                self.crashed = info.st_mtime
        beat = run / "attempt1" / "logs" / "rank0.beat"
        try:
            info = beat.stat()
            words = beat.read_text().split()
        except OSError:
            return
        if words and words[0].isdigit():
            if int(words[0]) == self.crash and self.up is None:
                self.up = info.st_mtime
            elif int(words[0]) > self.crash and self.first is None:
                self.first = info.st_mtime


def recovery(jax: bool, crash: int, extra: tuple[str, ...] = ()) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "runs"
        argv = [PY, "-m", "launcher", "device=cpu", f"run_root={root}", "launcher.nproc_per_node=2", "num_envs=4"]
        argv += ["launcher=skrl_jax"] if jax else []
        argv += [f"max_iterations={crash + 2}", "restart.max=1", "restart.classes=[default,exit-code]", *extra]
        poller = Poller(root, crash)
        poller.start()
        proc = subprocess.run(
            argv, cwd=tmp, env=env(TRAIN_MULTIGPU_EXAMPLE_CRASH=f"{crash}:1"), capture_output=True, text=True
        )
        poller.done = True
        poller.join(5)
        if proc.returncode != 0:
            raise SystemExit(
                f"expected exit code 0, got {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
            )
        (run,) = [p for p in root.iterdir() if p.is_dir()]
        first, second = json.loads((run / "status.json").read_text())["attempts"]
        if None in (poller.crashed, poller.up, poller.first, first["timing"]["failure_found"]):
            raise SystemExit(f"a time is missing: {poller.__dict__}, {first['timing']}")
        return {
            "detection": first["timing"]["failure_found"] - poller.crashed,
            "teardown": first["timing"]["ended"] - first["timing"]["failure_found"],
            "restart": poller.up - first["timing"]["ended"],
            "resume": poller.first - poller.up,
            "total": poller.first - poller.crashed,
            "cold start": poller.up0 - first["timing"]["started"],
        }


def two_nodes(crash: int) -> dict[str, float]:
    """One recovery across two network-namespace hosts (the module's docstring)."""
    sys.path.insert(0, str(REPO / "tests"))
    from netns import Hosts, netns_unavailable

    why = netns_unavailable()
    if why is not None:
        raise SystemExit(f"two nodes: {why}")
    with tempfile.TemporaryDirectory() as tmp, Hosts(2) as hosts:
        shared = Path(tmp) / "shared"
        common = ["launcher=multinode", "launcher.nnodes=2", "launcher.nproc_per_node=1", "device=cpu"]
        common += [f"launcher.master_addr={hosts[0].addr}", "launcher.master_port=29500"]
        common += ["launcher.network_interface=eth0", f"run_dir={shared}", "num_envs=4"]
        common += [f"max_iterations={crash + 2}", "restart.max=1", "restart.classes=[default,exit-code]"]
        poller = Poller(shared, crash)  # node1/logs/rank1.log: the crash; node0/attempt1/logs/rank0.beat
        poller.start()
        procs = []
        for host in hosts:
            argv = [PY, "-m", "launcher", *common, f"launcher.node_rank={host.index}"]
            node_env = env(TRAIN_MULTIGPU_EXAMPLE_CRASH=f"{crash}:1", OMP_NUM_THREADS="1")
            procs.append(host.run(argv, env=node_env, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
        outputs = [proc.communicate(timeout=600)[0].decode(errors="replace") for proc in procs]
        poller.done = True
        poller.join(5)
        if any(proc.returncode != 0 for proc in procs):
            raise SystemExit(
                f"two nodes: expected exit code 0 on both nodes:\n{outputs[0][-3000:]}\n{outputs[1][-3000:]}"
            )
        first, second = json.loads((shared / "node0" / "status.json").read_text())["attempts"]
        if None in (poller.crashed, poller.up, poller.first, first["timing"]["failure_found"]):
            raise SystemExit(f"two nodes: a time is missing: {poller.__dict__}, {first['timing']}")
        return {
            "detection": first["timing"]["failure_found"] - poller.crashed,
            "teardown": first["timing"]["ended"] - first["timing"]["failure_found"],
            "decision": second["timing"]["started"] - first["timing"]["ended"],
            "restart": poller.up - second["timing"]["started"],
            "resume": poller.first - poller.up,
            "total": poller.first - poller.crashed,
        }


def timed(restart_max: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        argv = [PY, "-m", "launcher", "device=cpu", f"run_root={tmp}", "launcher.nproc_per_node=2"]
        argv += [f"script={ALLREDUCE}", f"restart.max={restart_max}"]
        start = time.perf_counter()
        subprocess.run(argv, cwd=tmp, env=env(OMP_NUM_THREADS="1"), check=True, capture_output=True)
        return time.perf_counter() - start


def show(name: str, runs: list[dict[str, float]]) -> None:
    parts = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
    split = "  ".join(f"{key} {value:.2f} s" for key, value in parts.items() if key not in ("total", "cold start"))
    verdict = "under" if parts["total"] < 15 else "OVER"
    totals = sorted(r["total"] for r in runs)
    print(
        f"{name}: failure -> next attempt's first iteration {parts['total']:.2f} s "
        f"(median of {len(runs)}, {totals[0]:.2f}-{totals[-1]:.2f}; {verdict} 15 s): {split}"
    )
    if "cold start" in parts:  # the first attempt's own start-up: what a restart costs beyond starting the ranks
        print(
            f"{name}: the first attempt's own start-up (launch -> ranks up) {parts['cold start']:.2f} s; "
            f"restart / that: {parts['restart'] / parts['cold start']:.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=2, help="recoveries per framework")
    parser.add_argument("--pairs", type=int, default=5, help="restart.max=0/3 launch pairs (0: skip)")
    parser.add_argument("--crash", type=int, default=3, help="the iteration after which rank 1 exits 3")
    parser.add_argument("--nodes", action="store_true", help="also across two network-namespace hosts (root)")
    parser.add_argument("overrides", nargs="*", help="added to each recovery's launch (e.g. script=OTHER/train.py)")
    args = parser.parse_args()
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    nodes = " --nodes" if args.nodes else ""
    print(
        f"command: python benchmarks/recovery.py --repeat {args.repeat} --pairs {args.pairs} "
        f"--crash {args.crash}{nodes}{''.join(' ' + o for o in args.overrides)}"
    )
    runs: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    for _ in range(args.repeat):  # torch and JAX alternating: the same load for both
        for jax in (False, True):
            runs[jax].append(recovery(jax, args.crash, tuple(args.overrides)))
    for jax in (False, True):
        show("jax" if jax else "torch", runs[jax])
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.nodes:
        show("torch, two nodes", [two_nodes(args.crash) for _ in range(args.repeat)])
    if args.pairs:
        off, on = [], []
        for _ in range(args.pairs):
            off.append(timed(0))
            on.append(timed(3))
        a, b = statistics.median(off), statistics.median(on)
        print(
            f"nothing fails: restart.max=0 {a:.2f} s, restart.max=3 {b:.2f} s "
            f"(median of {args.pairs}); ratio {b / a:.3f}"
        )


if __name__ == "__main__":
    main()
