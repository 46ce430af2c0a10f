"""``runs compare ID ID ...``: the learning curves of several runs in one PNG (owner: the
runs-again work; a stub until then)."""

from __future__ import annotations

import argparse

from ..errors import UserError


def configure_compare(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``runs compare`` (cli.py calls this; the command is :func:`compare`)."""
    parser.add_argument("ids", nargs="+", metavar="ID", help="the runs to compare (unique prefixes, or last)")


def compare(args: argparse.Namespace) -> int:
    raise UserError("runs compare", " ".join(args.ids), "not implemented yet")
