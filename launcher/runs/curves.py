"""``runs compare ID ID ...``: the learning curves of the chosen runs in one PNG (the same drawing as
a sweep's, launcher/sweep/curves.py) and a small table: each run's label (the overrides in which
the runs differ), iterations, env steps, last and best mean return, status."""

from __future__ import annotations

import argparse
import json
import os
from datetime import datetime
from pathlib import Path

from .. import files, record
from ..errors import UserError
from ..names import PROG, swept
from ..sweep import curves
from ..tables import table
from . import again, cache, read


def configure_compare(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``runs compare`` (cli.py calls this and adds ``--out PNG``; the command is
    :func:`compare`)."""
    parser.add_argument("ids", nargs="+", metavar="ID", help="the runs to compare (unique prefixes, or last)")


def compare(args: argparse.Namespace) -> int:
    out = Path(args.out or f"compare_{datetime.now().strftime('%Y-%m-%d_%H-%M-%S')}.png")
    # the default name is a new file (a link planted under it is never written through); --out is written through
    new = args.out is None
    problem = files.refusal(out, "--out", new)  # before any work: /dev/null, a FIFO, a directory ... is refused
    if problem is not None:
        raise problem
    dirs = [cache.resolve(args.root, ident) for ident in args.ids]
    ids = [again.run_id(args.root, d) for d in dirs]
    if len(set(ids)) < len(ids):
        raise UserError("ID", " ".join(args.ids), "names the same run twice", "give each run once")
    labels = _labels(dirs, ids)
    rows, drawn = [], []
    for run_dir, id_, label in zip(dirs, ids, labels):
        within = read.root_of(args.root, run_dir) or str(run_dir)
        composition = record.read_composition(run_dir, within) or {}
        trainer_dir = Path(again.trainer_dir_of(run_dir, composition))
        curve = curves.read_curve(trainer_dir / curves.METRICS, label, within)
        if curve is not None:
            drawn.append(curve)
        returns = [r for _, r in curve.points] if curve else []
        info = read.read(run_dir, root=read.root_of(args.root, run_dir))
        rows.append(
            {
                "id": id_,
                "label": label,
                "status": info.status,
                "iterations": curve.iterations if curve else None,
                "env_steps": curve.points[-1][0] if curve and curve.points else None,
                "last_return": returns[-1] if returns else None,
                "best_return": max(returns) if returns else None,
                "metrics": str(trainer_dir / curves.METRICS) if curve else None,
                "goodput": info.goodput,
            }
        )
    if not drawn:
        raise UserError("ID", " ".join(args.ids), "none of these runs has a learning curve (metrics.csv)")
    try:
        data = curves.png_bytes(drawn, f"{len(drawn)} run(s)")
    except ImportError:
        raise UserError("runs compare", "matplotlib", "is needed to draw the PNG", "pip install matplotlib") from None
    png = files.write_through(out, data, "--out", new)  # into the file the user named, never replacing it
    if args.json:
        print(json.dumps({"png": os.path.abspath(png), "runs": rows}, indent=2, allow_nan=False))
        return 0
    print("\n".join(table(_table(rows), rule=True)))
    print(f"[{PROG}] learning curves of {len(drawn)} run(s): {png}")
    return 0


def _labels(dirs: list[Path], ids: list[str]) -> list[str]:
    """Each run's overrides that not all of them share (its id when there are none)."""
    recorded = [(record.read_composition(d) or {}).get("overrides") for d in dirs]
    typed = [[o for o in r if isinstance(o, str)] if isinstance(r, list) else [] for r in recorded]
    own = swept(typed) if len(dirs) > 1 else [()] * len(dirs)
    return [f"{id_}: {' '.join(o)}" if o else id_ for id_, o in zip(ids, own)]


def _cell(value, fmt: str = "{}") -> str:
    return "?" if value is None else fmt.format(value)


def _table(rows: list[dict]) -> list[tuple[str, ...]]:
    out = [("run", "status", "iterations", "env steps", "last return", "best return", "goodput", "wall")]
    for row in rows:
        led = row.get("goodput") or {}
        out.append(
            (
                row["label"],
                row["status"],
                _cell(row["iterations"]),
                _cell(row["env_steps"]),
                _cell(row["last_return"], "{:.1f}"),
                _cell(row["best_return"], "{:.1f}"),
                _cell(led.get("goodput_pct"), "{:.0f}%"),
                _cell(led.get("wall_s"), "{:.0f}s"),
            )
        )
    return out
