"""Hang watchdog benchmarks (docs/hangs.md), all in one run:

    python benchmarks/hang_watchdog.py [--repeat 3] [--timeout 5] [--iterations 40]

1. Detection latency: rank 1 of tests/workers/hang.py sleeps forever before the 3rd collective
   (torchrun + gloo, and JAX ranks), ``launcher.hang_timeout=--timeout``; latency = the launcher's
   exit - rank 1's last heartbeat, printed as ``timeout + x s`` (x: the once-a-second look, the
   stacks (py-spy) and the teardown).
2. Cost: the default job (the bundled skrl PPO trainer, CartPole, 2 torch workers on CPU; cut to
   --iterations) with the watchdog on (the defaults) and off (``launcher.hang_timeout=null
   launcher.startup_timeout=null``: no file is looked at), in alternating pairs; env-steps/s is the
   median of the per-iteration figure in the trainer's metrics.csv (first 5 iterations dropped).
   Also, timed in-process (load-proof): the trainer's heartbeat (one pwrite per iteration), a
   truncating rewrite (open "w", what a naive script does) for comparison, and the launcher's
   once-a-second look at 8 ranks' files (launcher/run/monitor/progress.py) with its progress.json.

Prints medians and the ratio on/off. The machine's load is printed first: on a shared 2-core
machine the pairs' spread is the noise.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WORKER = REPO / "tests" / "workers" / "hang.py"
PY = sys.executable


def env() -> dict:
    out = dict(os.environ)
    out["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), out.get("PYTHONPATH")]))
    return out


def run_dir(root: Path) -> Path:
    (found,) = [p for p in root.iterdir() if p.is_dir()]
    return found


def latency(jax: bool, timeout: float) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "pids").mkdir()
        argv = [PY, "-m", "launcher", "device=cpu", f"run_root={tmp / 'runs'}", "launcher.nproc_per_node=2"]
        argv += ["launcher=skrl_jax"] if jax else []
        argv += [f"script={WORKER}", f"launcher.hang_timeout={timeout}", "--"]
        argv += ["--mode", "jax" if jax else "torch", "--pid_dir", str(tmp / "pids")]
        proc = subprocess.run(argv, cwd=tmp, env=env(), capture_output=True, text=True, timeout=timeout + 120)
        ended = time.time()
        if proc.returncode != 124:
            raise SystemExit(f"expected exit code 124, got {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
        beat = run_dir(tmp / "runs") / "logs" / "rank1.beat"
        return ended - beat.stat().st_mtime


def env_steps_per_s(on: bool, iterations: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        argv = [PY, "-m", "launcher", "device=cpu", f"run_root={tmp / 'runs'}", f"max_iterations={iterations}"]
        if not on:
            argv += ["launcher.hang_timeout=null", "launcher.startup_timeout=null"]
        proc = subprocess.run(argv, cwd=tmp, env=env(), capture_output=True, text=True, timeout=900)
        if proc.returncode != 0:
            raise SystemExit(f"the default job failed:\n{proc.stdout}\n{proc.stderr}")
        run = run_dir(tmp / "runs")
        assert (run / "logs" / "progress.json").exists() == on, "the watchdog was not as asked"
        with open(run / "metrics.csv") as handle:
            rows = list(csv.DictReader(handle))
        return statistics.median(float(row["env_steps_per_s"]) for row in rows[5:])


def beat_cost_s(count: int = 20000) -> float:
    sys.path.insert(0, str(REPO / "examples" / "trainers"))
    import trainer_loop

    with tempfile.TemporaryDirectory() as tmp:
        os.environ[trainer_loop.HEARTBEAT_VAR] = str(Path(tmp) / "rank0.beat")
        start = time.perf_counter()
        for i in range(count):
            trainer_loop.beat(i, count)
        return (time.perf_counter() - start) / count


def truncating_beat_s(count: int = 2000) -> float:
    with tempfile.TemporaryDirectory(dir=REPO) as tmp:  # the disk the runs go to, not a tmpfs
        path = Path(tmp) / "rank0.beat"
        start = time.perf_counter()
        for i in range(count):
            with open(path, "w") as handle:
                handle.write(f"{i} {count}")
        return (time.perf_counter() - start) / count


def monitor_poll_s(ranks: int = 8, count: int = 2000) -> float:
    """One look of the progress monitor (and its progress.json every other time), as the launcher does it."""
    from launcher.config.schema import Topology
    from launcher.plan import LaunchPlan, ProcessSpec
    from launcher.run.monitor import progress

    with tempfile.TemporaryDirectory(dir=REPO) as tmp:
        log_dir = Path(tmp) / "logs"
        log_dir.mkdir()
        for rank in range(ranks):
            (log_dir / f"rank{rank}.log").write_text("started\n")
            (log_dir / f"rank{rank}.beat").write_text(f"3 {count}")
        plan = LaunchPlan(
            topology=Topology.single_node,
            profile="examples",
            device="cpu",
            backend="gloo",
            nproc_per_node=ranks,
            nnodes="1",
            node_rank=0,
            script="train.py",
            env={},
            processes=(ProcessSpec("torchrun", ("torchrun",)),),
            grace_period=30.0,
            log_all_ranks=False,
            rank_logs=True,
            hang_timeout=900.0,
            startup_timeout=1800.0,
        )
        monitor = progress.ProgressMonitor(plan, log_dir, dict, lambda _text: None)
        start = time.perf_counter()
        for i in range(count):
            monitor.observer.next_tick = 0.0
            monitor.next_write = 0.0 if i % 2 else float("inf")
            assert monitor.check([None]) is None
        return (time.perf_counter() - start) / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=5.0)
    parser.add_argument("--iterations", type=int, default=40)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")

    for name, jax in (("torchrun+gloo", False), ("JAX", True)):
        found = [latency(jax, args.timeout) for _ in range(args.repeat)]
        extra = [x - args.timeout for x in found]
        print(
            f"detection latency, {name}: hang_timeout + {statistics.median(extra):.2f} s median "
            f"(runs: {', '.join(f'{args.timeout:g}+{x:.2f}' for x in extra)})"
        )

    on, off = [], []
    for i in range(args.repeat):  # alternating pairs: the machine's drift hits both sides alike
        pair = [(True, on), (False, off)] if i % 2 == 0 else [(False, off), (True, on)]
        for flag, into in pair:
            into.append(env_steps_per_s(flag, args.iterations))
    ratios = [a / b for a, b in zip(on, off)]
    print(
        f"default job env-steps/s: watchdog on {statistics.median(on):.0f}, off {statistics.median(off):.0f}; "
        f"ratio on/off {statistics.median(on) / statistics.median(off):.3f} "
        f"(pairs: {', '.join(f'{r:.3f}' for r in ratios)})"
    )
    per_beat, truncating = beat_cost_s(), truncating_beat_s()
    iteration_s = 2 * 8 * 64 / statistics.median(on)  # env steps per iteration (2 workers x 8 envs x 64) / rate
    print(
        f"the trainer's heartbeat: {per_beat * 1e6:.1f} us per iteration = {per_beat / iteration_s:.1e} of an "
        f"iteration ({iteration_s * 1000:.0f} ms); a truncating rewrite would take {truncating * 1e6:.0f} us "
        f"({truncating / per_beat:.0f}x)"
    )
    poll = monitor_poll_s()
    print(f"the launcher's look at 8 ranks' files (+ progress.json every 2nd): {poll * 1e6:.0f} us once a second")


if __name__ == "__main__":
    main()
