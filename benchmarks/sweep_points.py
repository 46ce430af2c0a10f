"""Big sweeps: ``train_multigpu -m seed=range(N) ... dry_run=true`` against a bare Hydra app's own
``-m`` multirun over the same N points (the shipped config groups as plain YAML, its job prints the
config: benchmarks/startup.py's app), both measured in this run, as separate processes, alternating.
Prints medians of wall and CPU seconds and the ratios, and the per-point cost at N and 2N (a
quadratic term shows as a rising per-point cost). With ``--slurm N`` it also submits an N-point sweep
as one SLURM job array on the real cluster (held: ``+slurm.extra.hold=true``, cancelled at once) and
times the whole command.

    python benchmarks/sweep_points.py [--points 300] [--repeat 3] [--slurm 1000]

Targets: the dry run at most 0.25x the bare Hydra multirun; a 1,000-point sweep submitted in < 10 s.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from startup import bare_app  # noqa: E402

ENV = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}


def timed(argv: list[str], cwd: Path) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds of the child, its stdout)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=ENV, check=True, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.stdout


def ours(points: int, extra: tuple[str, ...] = ()) -> list[str]:
    return [sys.executable, "-m", "launcher", "-m", f"seed=range(0,{points})", "presets=[debug]", *extra]


def compare(workdir: Path, app: Path, points: int, repeat: int) -> tuple[float, float, float, float]:
    """Medians (ours wall, ours cpu, bare wall, bare cpu) of ``repeat`` alternating runs."""
    bare_argv = [sys.executable, str(app), "-m", f"seed=range(0,{points})", "presets=[debug]"]
    rows: list[tuple[float, float, float, float]] = []
    for _ in range(repeat):
        o_wall, o_cpu, out = timed(ours(points, ("dry_run=true",)), workdir)
        assert f"{points} job(s): dry run" in out, out[-500:]
        b_wall, b_cpu, _ = timed(bare_argv, workdir)
        rows.append((o_wall, o_cpu, b_wall, b_cpu))
    return tuple(statistics.median(column) for column in zip(*rows))  # type: ignore[return-value]


def slurm(workdir: Path, points: int) -> tuple[float, float]:
    """Submit ``points`` points as one held job array; (wall, cpu) of the command; the array cancelled."""
    argv = ours(points, ("submit=slurm", "+slurm.extra.hold=true", "slurm.time=0:05:00"))
    wall, cpu, out = timed(argv, workdir)
    found = re.search(r"submitted SLURM job array (\d+): (\d+) task", out)
    assert found, out[-2000:]
    subprocess.run(["scancel", found.group(1)], check=False, timeout=60)
    assert int(found.group(2)) == points, out[-500:]
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--slurm", type=int, default=0, help="also submit a sweep of this many points to SLURM")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        app = bare_app(workdir)
        timed(ours(2, ("dry_run=true",)), workdir)  # warm the file cache
        o_wall, o_cpu, b_wall, b_cpu = compare(workdir, app, args.points, args.repeat)
        print(f"bare Hydra app -m, {args.points} points wall {b_wall:6.2f} s  cpu {b_cpu:6.2f} s ({args.repeat} runs)")
        print(f"train_multigpu -m dry run             wall {o_wall:6.2f} s  cpu {o_cpu:6.2f} s")
        print(f"ratio: wall {o_wall / b_wall:.3f}x  cpu {o_cpu / b_cpu:.3f}x (target <= 0.25x)")
        small = timed(ours(args.points, ("dry_run=true",)), workdir)[1]
        large = timed(ours(2 * args.points, ("dry_run=true",)), workdir)[1]
        start = timed(ours(1, ("dry_run=true",)), workdir)[1]
        per_n, per_2n = (small - start) / args.points, (large - start) / (2 * args.points)
        print(
            f"cpu per point beyond one: {per_n * 1000:.1f} ms at {args.points}, {per_2n * 1000:.1f} ms at "
            f"{2 * args.points} (ratio {per_2n / per_n:.2f}; linear: ~1); one point: {start:.2f} s"
        )
        if args.slurm:
            s_wall, s_cpu = slurm(workdir, args.slurm)
            bare_est = b_wall * args.slurm / args.points
            print(
                f"submit=slurm -m, {args.slurm} points, one held job array: wall {s_wall:.2f} s, cpu {s_cpu:.2f} s "
                f"(target < 10 s); {s_wall / bare_est:.3f}x the bare Hydra multirun scaled to {args.slurm} points"
            )


if __name__ == "__main__":
    main()
