"""``runs timeline ID [--out PNG]``: a run's timeline picture on demand, also while it runs
(launcher/timeline.py draws it; docs/goodput.md). Written into the run directory (``timeline.png``,
replaced atomically: the file the launch writes at its end) unless ``--out`` names a file, which is
written through, never replaced."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from .. import files, timeline
from ..errors import UserError
from ..names import PROG
from . import cache, read


def configure(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``runs timeline`` (cli.py calls this and adds ``--out PNG``; the command is
    :func:`draw`)."""
    parser.add_argument("id", metavar="ID", help="a run id, a unique prefix of one, or last")


def draw(args: argparse.Namespace) -> int:
    out = Path(args.out) if args.out else None
    if out is not None:
        problem = files.refusal(out, "--out")  # before any work
        if problem is not None:
            raise problem
    run_dir = cache.resolve(args.root, args.id)
    rows = timeline.rows_of(run_dir, read.root_of(args.root, run_dir) or str(run_dir))
    if not rows:
        raise UserError("ID", args.id, "has no status.json to draw a timeline from", "a run that has started")
    try:
        data = timeline.png_bytes(rows, timeline.title_of(run_dir, rows))
    except ImportError:
        raise UserError("runs timeline", "matplotlib", "is needed to draw the PNG", "pip install matplotlib") from None
    if out is None:
        try:
            png = timeline.save(run_dir, data)
        except OSError as err:
            raise UserError(
                "ID",
                args.id,
                f"cannot write {run_dir / timeline.PNG}: {err.strerror or err}",
                "give --out PNG elsewhere",
            ) from None
    else:
        png = files.write_through(out, data, "--out")
    lines = [r.get("line") for r in rows if r.get("line")]
    if args.json:
        print(json.dumps({"png": os.path.abspath(png), "rows": [r["label"] for r in rows], "goodput": lines}))
        return 0
    for line in lines:
        print(line)
    print(f"[{PROG}] timeline: {png}")
    return 0
