"""Big sweeps: ``train_multigpu -m seed=range(N) ... dry_run=true`` against a bare Hydra app's own
``-m`` multirun over the same N points (the shipped config groups as plain YAML, its job prints the
config: benchmarks/startup.py's app), both measured in this run, as separate processes, alternating.
Prints medians of wall and CPU seconds and the ratios, and the per-point cost at N and 2N (a
quadratic term shows as a rising per-point cost). With ``--slurm 100,300,1000`` it also submits a
sweep of each size as one SLURM job array on the real cluster (held: ``+slurm.extra.hold=true``;
cancelled at once, by its own id) and times the whole command, until sbatch has accepted the array,
against the same sweep's dry run measured just before it (same size, same process start, no
submission): the submission's own cost is the difference. Medians, and the fastest submission
(wall / CPU) and the least CPU of the runs. The load average is printed: on a shared
machine the wall time follows it, the CPU seconds much less.

    python benchmarks/sweep_points.py [--points 300] [--repeat 3] [--slurm 100,300,1000] [--skip-bare]
        [--before DIR]   (DIR: an earlier checkout, e.g. git archive <commit> | tar -x -C DIR)

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


def timed(argv: list[str], cwd: Path, env: dict | None = None) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds of the child, its stdout)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env or ENV, check=True, capture_output=True, text=True)
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


def slurm(workdir: Path, points: int, env: dict | None = None) -> tuple[float, float]:
    """Submit ``points`` points as one held job array; (wall, cpu) of the command; the array cancelled."""
    argv = ours(points, ("submit=slurm", "+slurm.extra.hold=true", "slurm.time=0:05:00"))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=workdir, env=env or ENV, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    for array in re.findall(r"submitted SLURM job array (\d+):", done.stdout):  # ours only, by its id
        subprocess.run(["scancel", array], check=False, timeout=60)
    found = re.search(r"submitted SLURM job array (\d+): (\d+) task", done.stdout)
    assert done.returncode == 0 and found and int(found.group(2)) == points, done.stdout[-1000:] + done.stderr
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def submit_rows(workdir: Path, sizes: list[int], repeat: int, before: str | None) -> None:
    """Each size's real submission against its dry run (and, with ``before``, the same submission by
    an earlier checkout of the launcher, once: it is slow), alternating, medians of ``repeat``; the
    marginal CPU cost of a point between consecutive sizes (a quadratic term shows as a rising one)."""
    print(f"submit=slurm -m, held and cancelled; baseline: the same sweep's dry run (load {_load()})")
    head = "points  dry run wall/cpu s   submit wall/cpu s   submit/dry (cpu)  marginal cpu ms/point"
    print(head + ("   before: submit wall/cpu s  after/before (cpu)" if before else ""))
    old_env = {**ENV, "PYTHONPATH": before} if before else None
    cpu: dict[int, float] = {}
    marginal: list[float] = []
    for points in sizes:
        rows = []
        for run in range(repeat):
            d_wall, d_cpu, out = timed(ours(points, ("submit=slurm", "dry_run=true", "slurm.time=0:05:00")), workdir)
            assert f"# job array of {points} task(s)" in out, out[-500:]
            s_wall, s_cpu = slurm(workdir, points)
            o_wall, o_cpu = slurm(workdir, points, old_env) if old_env and run == 0 else (float("nan"),) * 2
            rows.append((d_wall, d_cpu, s_wall, s_cpu, o_wall, o_cpu))
        d_wall, d_cpu, s_wall, s_cpu = (statistics.median(c) for c in list(zip(*rows))[:4])
        o_wall, o_cpu = rows[0][4:]
        spread = max(r[2] for r in rows) - min(r[2] for r in rows)
        fastest = min(rows, key=lambda r: r[2])
        if cpu:
            low = max(cpu)
            marginal.append((s_cpu - cpu[low]) / (points - low) * 1000)
        cpu[points] = s_cpu
        step = marginal[-1] if marginal else float("nan")
        extra = f"   {o_wall:8.2f} / {o_cpu:6.2f}        {s_cpu / o_cpu:6.3f}x" if before else ""
        print(
            f"{points:6d}  {d_wall:7.2f} / {d_cpu:6.2f}    {s_wall:7.2f} / {s_cpu:6.2f}      {s_cpu / d_cpu:6.3f}x"
            f"           {step:6.1f}{extra}   (submit wall spread {spread:.2f} s, {repeat} runs; "
            f"fastest {fastest[2]:.2f} / {fastest[3]:.2f}, cpu min {min(r[3] for r in rows):.2f})"
        )
    if len(marginal) > 1:
        print(f"marginal cpu per point, last / first: {marginal[-1] / marginal[0]:.2f} (linear: ~1)")
    print(
        f"{sizes[-1]} points submitted in {s_wall:.2f} s wall (median; goal < 10 s), {s_cpu:.2f} CPU s; load {_load()}"
    )


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--slurm", default="", help="also submit sweeps of these sizes to SLURM (e.g. 100,300,1000)")
    parser.add_argument("--before", help="a checkout of an earlier launcher (its root) to time the same submissions")
    parser.add_argument("--skip-bare", action="store_true", help="only the SLURM rows (no bare Hydra multirun)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        app = bare_app(workdir)
        timed(ours(2, ("dry_run=true",)), workdir)  # warm the file cache
        if not args.skip_bare:
            o_wall, o_cpu, b_wall, b_cpu = compare(workdir, app, args.points, args.repeat)
            print(
                f"bare Hydra app -m, {args.points} points wall {b_wall:6.2f} s  cpu {b_cpu:6.2f} s ({args.repeat} runs)"
            )
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
            submit_rows(workdir, [int(n) for n in args.slurm.split(",")], args.repeat, args.before)


if __name__ == "__main__":
    main()
