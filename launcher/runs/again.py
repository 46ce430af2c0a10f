"""``runs rerun ID [overrides...]`` and ``runs resume ID``: launch a recorded composition again
(owner: the runs-again work; a stub until then)."""

from __future__ import annotations

import argparse

from ..errors import UserError


def configure_rerun(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``runs rerun`` (cli.py calls this; the command is :func:`rerun`)."""
    parser.add_argument("id", help="the run to launch again (a unique prefix of its id, or last)")
    parser.add_argument("overrides", nargs=argparse.REMAINDER, help="overrides applied on top of the recorded ones")


def configure_resume(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``runs resume`` (the command is :func:`resume`)."""
    parser.add_argument("id", help="the run to continue from its last checkpoint (a unique prefix, or last)")


def rerun(args: argparse.Namespace) -> int:
    raise UserError("runs rerun", args.id, "not implemented yet")


def resume(args: argparse.Namespace) -> int:
    raise UserError("runs resume", args.id, "not implemented yet")
