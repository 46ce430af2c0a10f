"""Aligned text tables (the sweep summaries). Pure."""

from __future__ import annotations

from collections.abc import Sequence


def table(rows: Sequence[Sequence[str]], indent: str = "", rule: bool = False) -> list[str]:
    """Rows as lines, every column but the last padded to its widest cell; ``rule``: a line of
    dashes under the header row.

    >>> print("\\n".join(table([("a", "bb", "c"), ("ccc", "d", "eeeee")], rule=True)))
    a    bb  c
    ----------
    ccc  d   eeeee
    """
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = [indent + "  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[-1] for row in rows]
    if rule:
        lines.insert(1, "-" * len(lines[0]))
    return [line.rstrip() for line in lines]
