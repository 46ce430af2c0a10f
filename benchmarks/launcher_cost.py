"""The launcher's own cost while training (issue 28, deliverable 4): eight ranks writing log lines.

    python benchmarks/launcher_cost.py [--nproc 8] [--lines 20000] [--rate 100] [--seconds 60] [--repeat 3]
                                        [--log_all_ranks]

Two loads, each under ``train_multigpu`` and under bare torchrun (same script, same run, taken in
turns): every rank prints ``--lines`` lines as fast as it can (``print(..., flush=True)``, 100
bytes each), and every rank prints ``--rate`` lines a second for ``--seconds`` s. Each rank times
its own writing (wall and CPU, from its first line to its last). The launcher's CPU time over the
same span is read from ``/proc/<pid>/stat`` (its own process: not torchrun's, not the ranks'),
sampled every 0.1 s; its start-up (composing the config) is not in that span.

Prints, per load: the ranks' writing wall time under the launcher over bare torchrun's (goal for
the fast writers: <= 1.05), the launcher's CPU over the ranks' CPU, and the launcher's CPU per
second per rank (goal at the typical rate: under 1 % of a core per rank). Bare torchrun's stdout
and the launcher's go to a file (no terminal here). The machine's load is printed first.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PY = sys.executable
TICKS = os.sysconf("SC_CLK_TCK")

WRITER = """
import argparse, json, os, time
parser = argparse.ArgumentParser()
parser.add_argument("--rate", type=float, default=0)
parser.add_argument("--seconds", type=float, default=0)
parser.add_argument("--lines", type=int, default=0)
parser.add_argument("--out", required=True)
args, _ = parser.parse_known_args()
rank = os.environ.get("RANK", "0")
text = "x" * 70
open(os.path.join(args.out, f"start{rank}"), "w").close()
c0, t0 = os.times(), time.monotonic()
if args.rate <= 0:
    for i in range(args.lines):
        print(f"[rank {rank}] line {i:>8} {text}", flush=True)
else:
    i = 0
    while time.monotonic() - t0 < args.seconds:
        print(f"[rank {rank}] line {i:>8} {text}", flush=True)
        i += 1
        time.sleep(max(0.0, t0 + i / args.rate - time.monotonic()))
c1, t1 = os.times(), time.monotonic()
with open(os.path.join(args.out, f"end{rank}.tmp"), "w") as f:
    json.dump({"t0": t0, "t1": t1, "cpu": c1.user + c1.system - c0.user - c0.system, "lines": i + 1}, f)
os.replace(os.path.join(args.out, f"end{rank}.tmp"), os.path.join(args.out, f"end{rank}.json"))
"""


def env() -> dict:
    out = dict(os.environ)
    out["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), out.get("PYTHONPATH")]))
    out["CUDA_VISIBLE_DEVICES"] = ""
    out.setdefault("OMP_NUM_THREADS", "1")
    return out


def _cpu_of(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime: this process only


def run(kind: str, tmp: Path, nproc: int, args: list[str], overrides: tuple[str, ...] = ()) -> dict:
    out = Path(tempfile.mkdtemp(dir=tmp, prefix=f"{kind}-"))
    script = tmp / "writer.py"
    script_args = [*args, "--out", str(out)]
    if kind == "launcher":
        argv = [PY, "-m", "launcher", "device=cpu", f"run_root={out / 'runs'}", f"script={script}"]
        argv += [f"launcher.nproc_per_node={nproc}", *overrides, "--", *script_args]
    else:
        argv = [PY, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc)]
        argv += [str(script), *script_args]
    samples: list[tuple[float, float]] = []
    with open(out / "console.txt", "wb") as console:
        proc = subprocess.Popen(argv, stdout=console, stderr=subprocess.STDOUT, env=env(), cwd=out)
        while proc.poll() is None:
            cpu = _cpu_of(proc.pid)
            if cpu is not None:
                samples.append((time.monotonic(), cpu))
            time.sleep(0.1)
    ends = [json.loads((out / f"end{rank}.json").read_text()) for rank in range(nproc)]
    start, stop = min(end["t0"] for end in ends), max(end["t1"] for end in ends)
    during = [cpu for at, cpu in samples if start <= at <= stop + 0.1]
    launcher_cpu = (during[-1] - during[0]) if len(during) >= 2 else 0.0
    span = stop - start
    return {
        "wall": statistics.mean(end["t1"] - end["t0"] for end in ends),
        "ranks_cpu": sum(end["cpu"] for end in ends),
        "launcher_cpu": launcher_cpu,
        "span": span,
        "lines": sum(end["lines"] for end in ends),
    }


def load_average() -> str:
    """The machine's load, printed with every figure (benchmarks/liveness_scale.py's too)."""
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min), {five:.2f} (5 min) on {os.cpu_count()} cores"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nproc", type=int, default=8)
    parser.add_argument("--lines", type=int, default=20000, help="lines per rank, the fast writers")
    parser.add_argument("--rate", type=float, default=100.0, help="lines a second per rank, the typical")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--repeat", type=int, default=3, help="fast-writer runs of each kind")
    parser.add_argument(
        "--log_all_ranks", action="store_true", help="the console shows every rank (log_all_ranks=true)"
    )
    args = parser.parse_args()
    print(f"# {load_average()}", flush=True)
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        (tmp / "writer.py").write_text(WRITER)
        loads = {
            "fast": (["--lines", str(args.lines)], args.repeat),
            "typical": (["--rate", str(args.rate), "--seconds", str(args.seconds)], 1),
        }
        for load, (script_args, repeat) in loads.items():
            got: dict[str, list[dict]] = {"launcher": [], "torchrun": []}
            for _ in range(repeat):
                for kind in got:
                    overrides = ("log_all_ranks=true",) if args.log_all_ranks else ()
                    got[kind].append(run(kind, tmp, args.nproc, script_args, overrides))
            ours, bare = got["launcher"], got["torchrun"]
            wall = statistics.median(r["wall"] for r in ours) / statistics.median(r["wall"] for r in bare)
            share = statistics.median(r["launcher_cpu"] / max(r["ranks_cpu"], 1e-9) for r in ours)
            per_rank = statistics.median(r["launcher_cpu"] / r["span"] / args.nproc for r in ours)
            print(json.dumps({"load": load, "launcher": ours, "torchrun": bare}), flush=True)
            print(
                f"{load:>8}: {args.nproc} ranks, {ours[0]['lines']} lines; ranks' wall, launcher/torchrun {wall:.3f}; "
                f"launcher CPU / ranks' CPU {share:.3f}; launcher CPU per rank {per_rank:.3%} of a core "
                f"({load_average()})",
                flush=True,
            )
    print("goals: fast writers' wall ratio <= 1.05; typical rate: launcher under 1% of a core per rank")


if __name__ == "__main__":
    main()
