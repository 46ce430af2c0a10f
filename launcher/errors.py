"""The one error type a user can cause. The CLI prints it in one line and exits with code 2.

Hydra's and OmegaConf's own errors (unknown key, wrong type, unknown option) are turned into the
same one-line form by :mod:`launcher.config.translate`. A leaf: it imports only ``secrets`` (to mask
a secret's value wherever a message quotes it).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from . import secrets

EXIT_USAGE = 2


class UserError(Exception):
    """A mistake in the command line or config: names the key, the bad value and what is allowed.

    A secret never shows: the value of a secret key (or a map holding one) is ``***``, and so is
    that value, or any other secret value this process was given, wherever ``allowed`` or ``hint``
    quote it (:func:`launcher.secrets.shown`, :func:`launcher.secrets.redact`).

    >>> print(UserError("worker_env.HF_TOKEN", "abc", "contradicts +worker_env.HF_TOKEN=x", "not 'abc'"))
    worker_env.HF_TOKEN=***: contradicts +worker_env.HF_TOKEN=x (not '***')
    """

    def __init__(self, key: str, value: Any, allowed: str, hint: str | None = None) -> None:
        shown = secrets.shown(key, value)
        self.key, self.value, self.allowed, self.hint = key, shown, allowed, hint
        message = f"{key}={shown!s}: {allowed}"
        if hint:
            message += f" ({hint})"
        hidden = [value, value.strip("'\" ")] if shown is not value and isinstance(value, str) else []
        super().__init__(secrets.redact(message, hidden))


# characters that end a line for str.splitlines (or a terminal): shown escaped in a message
_LINE_BREAKING = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def exit_with(main: Callable[[], int]) -> NoReturn:
    """Run a command's ``main`` and exit with its code; a reader that went away (``train_multigpu
    --help | head``) is exit code 1, without a traceback."""
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 1
    sys.exit(code)


def one_lines(cells: tuple[str, ...]) -> tuple[str, ...]:
    r"""Each cell of a table's row as :func:`one_line` gives it: one look at the whole row where there
    is nothing to mask and nothing to escape (a listing has ten thousand rows).

    >>> one_lines(("a", "b")), one_lines(("a", "b\nc"))
    (('a', 'b'), ('a', 'b\\nc'))
    """
    if not secrets.masking() and not _LINE_BREAKING.search("".join(cells)):
        return cells
    return tuple(one_line(cell) for cell in cells)


def one_line(message: str) -> str:
    r"""The message as one printable line: control characters (a value may hold any) escaped, and
    every secret value this process was given masked (:func:`launcher.secrets.redact`: the one error
    path prints through here).

    >>> one_line("task=a\nb\x1e: bad")
    'task=a\\nb\\x1e: bad'
    """
    message = secrets.redact(message)
    return _LINE_BREAKING.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), message)
