"""``train_multigpu runs [COMMAND] ...``: the run records read back (docs/runs.md).

``launcher/cli.py`` hands every command line whose first word is ``runs`` to :func:`main` before
any Hydra work. Every command takes ``--root DIR`` (or ``run_root=DIR``; default ``./runs``) and
``--json``; an id is a run's id, a unique prefix of it, or ``last``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..errors import EXIT_USAGE, UserError, one_line
from ..names import PROG
from . import again, curves, timeline

DEFAULT_ROOT = "runs"
COMMANDS = ("list", "show", "logs", "stop", "stacks", "rerun", "resume", "compare", "timeline")


class UsageError(UserError):
    """argparse's own mistakes (an unknown flag, a missing id), in the one error path's form."""

    def __init__(self, prog: str, message: str) -> None:
        self.key, self.value, self.allowed, self.hint = prog, "", message, None
        Exception.__init__(self, f"{prog}: {message} ({prog} --help)")


class _Parser(argparse.ArgumentParser):
    """argparse whose mistakes are the one error path's: one line, exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(self.prog, message)


def _common(parser: argparse.ArgumentParser, top: bool = False) -> None:
    """--root and --json, before or after the command (a command's own copy never resets the top's)."""
    unset = None if top else argparse.SUPPRESS
    parser.add_argument(
        "--root", metavar="DIR", default=unset, help="the run root to read (default: ./runs, or run_root=DIR)"
    )
    parser.add_argument(
        "--json", action="store_true", default=False if top else argparse.SUPPRESS, help="print JSON (docs/runs.md)"
    )


def parser() -> argparse.ArgumentParser:
    top = _Parser(
        prog=f"{PROG} runs",
        description="The launches recorded under the run root: list them, show one, read its logs, "
        "stop one, ask a running one for its stacks, launch one again. A submitted run's state, logs and "
        "stop go through its back end (SLURM, Ray, Kubernetes). The listing keeps what it read from the "
        "runs that ended in your cache directory (~/.cache/train_multigpu/runs; TRAIN_MULTIGPU_RUNS_CACHE=DIR "
        "or off) and reads a run again when any of its files changed. Docs: docs/runs.md.",
    )
    _common(top, top=True)
    sub = top.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    listing = sub.add_parser(
        "list", help="the runs, newest first; a sweep's jobs under it with their swept values (the default command)"
    )
    _common(listing)
    show = sub.add_parser("show", help="one run: status, what was chosen, the command, the failure, where things are")
    _common(show)
    show.add_argument("id", help="a run id, a unique prefix of one, or last")
    logs = sub.add_parser("logs", help="a run's log (rank 0 by default; a submitted run's from its back end)")
    _common(logs)
    logs.add_argument("id", help="a run id, a unique prefix of one, or last")
    logs.add_argument("--rank", default="0", help="a global rank, or all (interleaved, [node:rank] prefixes)")
    logs.add_argument(
        "--follow", "-f", action="store_true", help="keep printing until the launch ends (across its restarts)"
    )
    stop = sub.add_parser(
        "stop",
        help="stop a run on its back end: a local launch as Ctrl+C does (SIGINT to its launcher), "
        "a SLURM job (scancel), a Ray job (stop), a Kubernetes job (kubectl delete)",
    )
    _common(stop)
    stop.add_argument("id", help="a run id, a unique prefix of one, or last")
    stacks = sub.add_parser("stacks", help="ask a running launch for every rank's stack")
    _common(stacks)
    stacks.add_argument("id", help="a run id, a unique prefix of one, or last")
    stacks.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the stacks (60)")
    for name, configure, run, text, png in (
        ("rerun", again.configure_rerun, again.rerun, "launch a recorded run again (overrides on top)", None),
        ("resume", again.configure_resume, again.resume, "continue a run from its last checkpoint", None),
        (
            "compare",
            curves.configure_compare,
            curves.compare,
            "the learning curves of several runs in one PNG",
            "./compare_<date_time>.png",
        ),
        (
            "timeline",
            timeline.configure,
            timeline.draw,
            "where a run's time went, as a picture: attempts, start-up, training, hangs, restarts, lost work",
            "<run dir>/timeline.png",
        ),
    ):
        command = sub.add_parser(name, help=text)
        _common(command)
        configure(command)
        if png is not None:
            _out_png(command, png)
        command.set_defaults(run=run)
    return top


def _out_png(parser: argparse.ArgumentParser, default: str) -> None:
    """--out PNG of the commands that draw (compare, timeline): a path the user names, written through."""
    parser.add_argument(
        "--out",
        metavar="PNG",
        default=None,
        help=f"where to write the PNG (default: {default}); an existing file is written through, "
        "never replaced; a device, FIFO or directory is refused",
    )


def split_root(argv: list[str]) -> tuple[list[str], str | None]:
    """``run_root=DIR`` (the launcher's key) anywhere on the line, as ``--root DIR``.

    >>> split_root(["show", "run_root=/x", "last"])
    (['show', 'last'], '/x')
    """
    rest, root = [], None
    for word in argv:
        if word.startswith("run_root=") and root is None:
            root = word.split("=", 1)[1]
        else:
            rest.append(word)
    return rest, root


def main(argv: list[str], launch=None) -> int:
    """``argv``: what follows ``runs``. One-line errors, exit code 2. ``launch``: launcher/cli.py's
    ``launch_line``, the path ``rerun``/``resume`` launch through (nothing imports cli)."""
    try:
        return _main(argv, launch)
    except UserError as err:
        print(f"{PROG}: error: {one_line(str(err))}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        raise
    except KeyboardInterrupt:
        return 128 + 2


def _main(argv: list[str], launch=None) -> int:
    argv, run_root = split_root(argv)
    command = _command(argv)
    if command is None:
        argv = ["list", *argv]
    elif command not in COMMANDS and command not in ("-h", "--help"):
        raise UserError("runs", command, f"not a runs command; the commands: {', '.join(COMMANDS)}")
    args = parser().parse_args(argv)
    args.root = Path(args.root or run_root or DEFAULT_ROOT)
    if getattr(args, "run", None) is not None:
        args.launch = launch
        return args.run(args)
    from . import live, logs, show

    commands = {"list": show.listing, "show": show.show, "logs": logs.logs, "stop": show.stop, "stacks": live.stacks}
    return commands[args.command or "list"](args)


def _command(argv: list[str]) -> str | None:
    """The first word that is not a flag (None: none, the default command list).

    >>> _command(["--root", "x", "show", "last"]), _command(["--json"]), _command(["-h"])
    ('show', None, '-h')
    """
    skip = False
    for word in argv:
        if skip:
            skip = False
        elif word == "--root":
            skip = True
        elif word in ("-h", "--help"):
            return word
        elif not word.startswith("-"):
            return word
    return None


def emit_json(data) -> None:
    print(json.dumps(data, indent=2, default=str))
