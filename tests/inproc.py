"""Run the CLI's ``main()`` in this process, as the console script would run it in its own.

Dozens of command lines a second instead of one (no interpreter start, no imports): the grammar fuzz
test (test_fuzz_grammar.py) lives on it. What the console script adds is reproduced here: the working
directory and environment are the run's own, stdout and stderr are captured, ``SystemExit`` gives the
exit code and an uncaught exception prints its traceback and exits 1, as the interpreter does.
test_fuzz_grammar.py::test_in_process_is_faithful checks it against real subprocesses.
"""

from __future__ import annotations

import contextlib
import io
import os
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from conftest import clean_env


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


def environment(home: str, **extra: str) -> dict[str, str]:
    """The tests' clean environment, with no SLURM allocation and the user's config folder in ``home``."""
    env = {k: v for k, v in clean_env().items() if not k.startswith(("SLURM_", "TRAIN_MULTIGPU_"))}
    env["XDG_CONFIG_HOME"] = os.path.join(home, ".config")
    env.update(extra)
    return env


@contextlib.contextmanager
def _isolated(cwd: str, env: Mapping[str, str]):
    saved_cwd, saved_env = os.getcwd(), dict(os.environ)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)


def run_main(argv: Sequence[str], cwd: str, env: Mapping[str, str]) -> Result:
    from hydra.core.global_hydra import GlobalHydra

    from launcher import cli

    # text streams over bytes, as a console's are (``runs logs --follow`` writes to sys.stdout.buffer)
    out, err = (io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True) for _ in range(2))
    with _isolated(cwd, env), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(list(argv))
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
        except Exception:  # what the interpreter does with an uncaught exception
            traceback.print_exc()
            code = 1
        finally:
            GlobalHydra.instance().clear()
    out.flush(), err.flush()
    return Result(code, out.buffer.getvalue().decode(errors="replace"), err.buffer.getvalue().decode(errors="replace"))
