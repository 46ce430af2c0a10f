"""``runs compare ID ID ...``: the learning curves of the chosen runs in one PNG (the same drawing as
a sweep's, launcher/sweep/curves.py) and a small table: each run's label (the overrides in which
the runs differ), iterations, env steps, last and best mean return, status."""

from __future__ import annotations

import argparse
import json
from datetime import datetime
from pathlib import Path

from .. import record
from ..errors import UserError
from ..names import PROG, swept
from ..sweep import curves
from ..tables import table
from . import again, read


def configure_compare(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``runs compare`` (cli.py calls this; the command is :func:`compare`)."""
    parser.add_argument("ids", nargs="+", metavar="ID", help="the runs to compare (unique prefixes, or last)")
    parser.add_argument(
        "--out", metavar="PNG", default=None, help="where to write the PNG (default: ./compare_<date_time>.png)"
    )


def compare(args: argparse.Namespace) -> int:
    dirs = [read.resolve(args.root, ident) for ident in args.ids]
    ids = [again.run_id(args.root, d) for d in dirs]
    if len(set(ids)) < len(ids):
        raise UserError("ID", " ".join(args.ids), "names the same run twice", "give each run once")
    labels = _labels(dirs, ids)
    rows, drawn = [], []
    for run_dir, id_, label in zip(dirs, ids, labels):
        composition = record.read_composition(run_dir) or {}
        trainer_dir = Path(again.trainer_dir_of(run_dir, composition))
        curve = curves.read_curve(trainer_dir / curves.METRICS, label)
        if curve is not None:
            drawn.append(curve)
        returns = [r for _, r in curve.points] if curve else []
        rows.append(
            {
                "id": id_,
                "label": label,
                "status": read.read(run_dir).status,
                "iterations": curve.iterations if curve else None,
                "env_steps": curve.points[-1][0] if curve and curve.points else None,
                "last_return": returns[-1] if returns else None,
                "best_return": max(returns) if returns else None,
                "metrics": str(trainer_dir / curves.METRICS) if curve else None,
            }
        )
    if not drawn:
        raise UserError("ID", " ".join(args.ids), "none of these runs has a learning curve (metrics.csv)")
    out = Path(args.out or f"compare_{datetime.now().strftime('%Y-%m-%d_%H-%M-%S')}.png")
    try:
        png = curves.write_png(out, drawn, f"{len(drawn)} run(s)")
    except ImportError:
        raise UserError("runs compare", "matplotlib", "is needed to draw the PNG", "pip install matplotlib") from None
    except OSError as err:
        raise UserError("--out", str(out), f"cannot write it: {err.strerror or err}") from None
    if args.json:
        print(json.dumps({"png": str(png.resolve()), "runs": rows}, indent=2))
        return 0
    print("\n".join(table(_table(rows), rule=True)))
    print(f"[{PROG}] learning curves of {len(drawn)} run(s): {png}")
    return 0


def _labels(dirs: list[Path], ids: list[str]) -> list[str]:
    """Each run's overrides that not all of them share (its id when there are none)."""
    typed = [[o for o in (record.read_composition(d) or {}).get("overrides", []) if isinstance(o, str)] for d in dirs]
    own = swept(typed) if len(dirs) > 1 else [()] * len(dirs)
    return [f"{id_}: {' '.join(o)}" if o else id_ for id_, o in zip(ids, own)]


def _cell(value, fmt: str = "{}") -> str:
    return "?" if value is None else fmt.format(value)


def _table(rows: list[dict]) -> list[tuple[str, ...]]:
    out = [("run", "status", "iterations", "env steps", "last return", "best return")]
    for row in rows:
        out.append(
            (
                row["label"],
                row["status"],
                _cell(row["iterations"]),
                _cell(row["env_steps"]),
                _cell(row["last_return"], "{:.1f}"),
                _cell(row["best_return"], "{:.1f}"),
            )
        )
    return out
