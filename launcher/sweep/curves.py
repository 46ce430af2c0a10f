"""Learning curves side by side: one PNG overlaying several runs' curves (a sweep's jobs, written next
to its summary; ``train_multigpu runs compare``: launcher/runs/curves.py).

The curve is the bundled trainers' ``metrics.csv`` (rank 0 writes one row per iteration: env_steps,
mean_return, ...): the cheapest faithful source, the same numbers the TensorBoard events hold.
matplotlib (Agg) is imported only when a PNG is written: the launcher's start-up budget is unchanged.
The PNG carries what it draws as JSON in its ``Description`` text chunk (labels and points per
curve; launcher/figures.py), so a reader or a test can check the data without looking at pixels.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .. import figures, files
from ..rundir import METRICS

PNG = "learning_curves.png"


@dataclass
class Curve:
    label: str
    points: list[tuple[int, float]] = field(default_factory=list)  # (env_steps, mean_return), finite only
    iterations: int = 0  # rows read, with or without a finished episode


def read_curve(path: Path, label: str, within: str | None = None) -> Curve | None:
    """The (env_steps, mean_return) rows of a metrics.csv; None: no such file or no such columns, or
    not a regular file in ``within`` (files.read_text). A half-written last row is skipped.

    >>> import tempfile; folder = Path(tempfile.mkdtemp()); csv = folder / "metrics.csv"
    >>> _ = csv.write_text("iteration,env_steps,mean_return\\n1,512,nan\\n2,1024,20.5\\n3,15")
    >>> c = read_curve(csv, "a"); (c.points, c.iterations)
    ([(1024, 20.5)], 2)
    """
    try:
        lines = files.read_text(path, files.METRICS_MAX, within).splitlines()
    except OSError:
        return None
    header = lines[0].split(",") if lines else []
    if "env_steps" not in header or "mean_return" not in header:
        return None
    steps_at, return_at = header.index("env_steps"), header.index("mean_return")
    curve = Curve(label)
    for line in lines[1:]:
        cells = line.split(",")
        if len(cells) != len(header):
            continue
        try:
            steps, value = int(cells[steps_at]), float(cells[return_at])
        except ValueError:
            continue
        curve.iterations += 1
        if math.isfinite(value):
            curve.points.append((steps, value))
    return curve


def write_png(path: Path, curves: Sequence[Curve], title: str) -> Path:
    """One figure, one line per curve (labelled), written atomically (the launcher's own file: a
    sweep's directory; a path the user names goes through files.write_through with :func:`png_bytes`)."""
    files.replace_whole(path, png_bytes(curves, title))
    return path


def png_bytes(curves: Sequence[Curve], title: str) -> bytes:
    """The PNG of :func:`write_png`, in memory."""
    plt = figures.pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=100)
    for curve in curves:
        ax.plot([s for s, _ in curve.points], [r for _, r in curve.points], marker=".", linewidth=1, label=curve.label)
    ax.set_xlabel("environment steps (all workers)")
    ax.set_ylabel("mean episode return")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    if curves:
        ax.legend(fontsize="small")
    fig.tight_layout()
    described = [{"label": c.label, "points": [list(p) for p in c.points]} for c in curves]
    return figures.png_bytes(fig, {"curves": described})


def curves_in_png(path: Path) -> list[dict]:
    """What :func:`write_png` drew, read back from the PNG's text chunk (``[]``: none there)."""
    data = path.read_bytes()
    if not data.startswith(figures.SIGNATURE):
        raise ValueError(f"{path} is not a PNG")
    drawn = figures.described(data)
    return drawn["curves"] if drawn else []


def sweep_png(jobs: Sequence[tuple[str, str]]) -> tuple[Path | None, str]:
    """A sweep's PNG: ``jobs`` are (run directory, label: the job's swept values); written into the
    sweep's directory (the jobs' common parent) when at least one job has a curve. Returns the path
    (None: nothing drawn) and a note for the console."""
    dirs = [Path(run_dir) for run_dir, _ in jobs if run_dir]
    if not dirs:
        return None, ""
    curves = [c for run_dir, label in jobs if run_dir and (c := read_curve(Path(run_dir) / METRICS, label))]
    if not curves:
        return None, ""
    # the jobs' parent, never one job's own directory (also when only one job ran: fail_fast, Ctrl+C)
    sweep_dir = Path(os.path.commonpath([str(d.parent) for d in dirs]))
    try:
        path = write_png(sweep_dir / PNG, curves, f"{sweep_dir.name}: {len(curves)} job(s)")
    except ImportError:
        return None, "learning curves not drawn: matplotlib is not installed"
    except OSError as err:
        return None, f"learning curves not drawn: {err.strerror or err}"
    return path, f"learning curves of {len(curves)} job(s): {path}"
