"""The timeline picture: what happened to a run, at a glance (docs/goodput.md). A leaf: status.json's
phases and ledger (launcher/goodput.py) in, a PNG out; matplotlib (Agg) is imported only when drawing.

One row per node record (a launch's own; a job's ``node<R>/`` records, each labelled with its ranks),
time across: each attempt's start-up, first iteration, training, hang and teardown as the ledger's
segments (the same colours as its categories), lost work hatched, each failure marked with its cause
and each restart decision with its word; a launch still running ends in a bar "under way" up to now.
The PNG carries what it draws as JSON in its ``Description`` text chunk (rows and segments), as the
learning curves' PNG does (launcher/figures.py), so a reader or a test can check the data.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from . import figures, files, goodput
from .rundir import NODE_DIR, STATUS

PNG = "timeline.png"
UNDER_WAY = "under_way"  # a running launch's time since its last state change
COLOURS = {
    goodput.QUEUE: "#d7bde2",
    goodput.LAUNCHER_STARTUP: "#8e44ad",
    goodput.RANK_STARTUP: "#f39c12",
    goodput.FIRST_ITERATION: "#f1c40f",
    goodput.PRODUCTIVE: "#27ae60",
    goodput.LOST_WORK: "#e74c3c",
    goodput.HANG: "#7b241c",
    goodput.RESTART: "#2980b9",
    goodput.TEARDOWN: "#7f8c8d",
    UNDER_WAY: "#aed6f1",
}
LABELS = {
    goodput.QUEUE: "queue",
    goodput.LAUNCHER_STARTUP: "launcher start-up",
    goodput.RANK_STARTUP: "ranks' start-up",
    goodput.FIRST_ITERATION: "first iteration",
    goodput.PRODUCTIVE: "productive",
    goodput.LOST_WORK: "lost work (redone)",
    goodput.HANG: "hang",
    goodput.RESTART: "restart",
    goodput.TEARDOWN: "teardown",
    UNDER_WAY: "under way",
}


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _started(status: Mapping) -> float | None:
    from datetime import datetime

    try:
        return datetime.fromisoformat(str(status.get("started"))).timestamp()
    except ValueError:
        return None


def row(status: Mapping, label: str, now: float | None = None) -> dict | None:
    """One node record's row: its segments (goodput.segments) and marks, from its status.json.
    A closed record ends at its ``ended``; an open one at ``now`` (its last stretch: under way)."""
    phases = status.get(goodput.PHASES_KEY)
    phases = [p for p in phases if isinstance(p, Mapping)] if isinstance(phases, list) else []
    began = _number(status.get(goodput.BEGAN_KEY)) or _started(status)
    if began is None:
        return None
    ledger = status.get(goodput.KEY) if isinstance(status.get(goodput.KEY), Mapping) else {}
    queue = _number(ledger.get(goodput.QUEUE)) or 0.0
    live = status.get("exit_code") is None
    if not live:  # closed: the ledger's wall (less its queue) from its start
        wall, duration = _number(ledger.get("wall_s")), _number(status.get("duration_s"))
        if wall is not None:
            closed = began + wall - queue
        elif duration is not None:  # a record older than the ledger
            closed = (_started(status) or began) + duration
        else:
            closed = began
    else:
        closed = now if now is not None else time.time()
    parts = goodput.segments(began, closed, phases, tail=UNDER_WAY if live else goodput.TEARDOWN)
    if queue > 0:  # the batch queue's wait, before the launcher began
        parts.insert(0, (began - queue, began, goodput.QUEUE, None))
        began -= queue
    marks = []
    for phase in phases:
        found = _number(phase.get("failure_found"))
        if found is not None and phase.get("cause"):
            marks.append({"time": found, "kind": "failure", "text": str(phase.get("cause"))})
        ended = _number(phase.get("ended"))
        if ended is not None and phase.get("restart"):
            marks.append({"time": ended, "kind": "restart", "text": f"restart {int(phase.get('attempt') or 0) + 1}"})
    return {
        "label": label,
        "began": began,
        "segments": [[a, b, category, attempt] for a, b, category, attempt in parts],
        "marks": marks,
        "live": live,
    }


def rows_of(run_dir: Path, within: str | None = None, now: float | None = None) -> list[dict]:
    """Every node record of ``run_dir``: its own status.json, else its ``node<R>/`` ones (a job's)."""
    records: list[tuple[str, Path]] = []
    if (run_dir / STATUS).exists():
        records.append(("", run_dir))
    else:
        try:
            names = sorted(os.listdir(run_dir))
        except OSError:
            names = []
        for name in names:
            if NODE_DIR.match(name) and (run_dir / name / STATUS).exists():
                records.append((name, run_dir / name))
    out = []
    for name, path in records:
        try:
            status = files.read_json(path / STATUS, files.JSON_MAX, within or str(run_dir))
        except OSError:
            continue
        if not isinstance(status, dict):
            continue
        ledger = status.get(goodput.KEY) if isinstance(status.get(goodput.KEY), dict) else {}
        ranks = ledger.get("ranks")
        label = (name or "node") + (f": {ranks} rank{'s' if ranks != 1 else ''}" if isinstance(ranks, int) else "")
        made = row(status, label, now)
        if made is not None:
            made["line"] = ledger.get("line")
            out.append(made)
    return out


def png_bytes(rows: Sequence[dict], title: str) -> bytes:
    """The picture of ``rows`` (time in minutes from the earliest start)."""
    plt = figures.pyplot()
    from matplotlib.patches import Patch

    t0 = min(r["began"] for r in rows) if rows else 0.0
    end = max((s[1] for r in rows for s in r["segments"]), default=t0 + 1)
    span = max(end - t0, 1e-3)
    unit, scale = ("min", 60.0) if span >= 180 else ("s", 1.0)
    height = 1.0 + 0.7 * max(len(rows), 1)
    fig, ax = plt.subplots(figsize=(10, height + 1.2), dpi=100)
    present: list[str] = []
    for y, r in enumerate(rows):
        for start, stop, category, _ in r["segments"]:
            ax.broken_barh(
                [((start - t0) / scale, (stop - start) / scale)],
                (y - 0.35, 0.7),
                facecolors=COLOURS.get(category, "#000000"),
                hatch="//" if category == goodput.LOST_WORK else None,
                edgecolor="#ffffff" if category == goodput.LOST_WORK else None,
                linewidth=0,
            )
            if category not in present:
                present.append(category)
        for mark in r["marks"]:
            x = (mark["time"] - t0) / scale
            if mark["kind"] == "failure":
                ax.plot([x], [y + 0.42], marker="v", color="#000000", markersize=8)
                ax.annotate(mark["text"], (x, y + 0.42), xytext=(2, 4), textcoords="offset points", fontsize=8)
            else:
                ax.axvline(x, ymin=0, ymax=1, color="#000000", linestyle=":", linewidth=1)
                ax.annotate(mark["text"], (x, y - 0.42), xytext=(2, -10), textcoords="offset points", fontsize=8)
    ax.set_yticks(range(len(rows)), [r["label"] for r in rows])
    ax.set_ylim(-0.8, len(rows) - 0.2 + 0.4)
    ax.invert_yaxis()
    ax.set_xlim(0, span / scale)
    ax.set_xlabel(f"time since the launch began ({unit})")
    ax.set_title(title, fontsize=10)
    order = [c for c in (*goodput.CATEGORIES, UNDER_WAY) if c in present]
    fig.legend(
        handles=[Patch(facecolor=COLOURS[c], label=LABELS[c]) for c in order],
        loc="lower center",
        ncol=min(len(order), 5) or 1,
        fontsize=8,
        frameon=False,
    )
    fig.tight_layout(rect=(0, 0.9 / (height + 1.2), 1, 1))
    return figures.png_bytes(fig, {"rows": [{k: r[k] for k in ("label", "segments", "marks", "live")} for r in rows]})


def title_of(run_dir: Path, rows: Sequence[dict]) -> str:
    line = next((r.get("line") for r in rows if r.get("line")), None)
    live = any(r["live"] for r in rows)
    return f"{run_dir.name}" + (" (under way)" if live else "") + (f": {line}" if line else "")


def save(run_dir: Path, data: bytes) -> Path:
    """``data`` into ``<run_dir>/timeline.png``, replaced atomically (the launcher's own file; a path
    the user names goes through files.write_through); OSError: not written, nothing left behind."""
    png = run_dir / PNG
    # ``runs timeline`` writes into run directories others may own: a fresh temporary file, a link at
    # timeline.png replaced, never followed
    files.replace_whole(png, data)
    return png


def write_for(run_dir: Path) -> str:
    """The launch's timeline into ``<run_dir>/timeline.png`` (atomically; the launcher's own file).
    Returns the console's note ("" when there is nothing to draw); never raises."""
    run_dir = Path(run_dir)
    try:
        rows = rows_of(run_dir)
        if not rows:
            return ""
        save(run_dir, png_bytes(rows, title_of(run_dir, rows)))
    except ImportError:
        return "timeline not drawn: matplotlib is not installed"
    except OSError as err:
        return f"timeline not drawn: {err.strerror or err}"
    return f"timeline: {run_dir / PNG}"
