"""Run ``submit=ssh``'s dry run and preflight from inside a network namespace (tests/test_ssh_preflight.py).

``python ssh_preflight.py <train_multigpu arguments>``: the arguments as the command line takes them
(overrides, ``-- script args``), composed as the launcher composes them, then
``SshBackend.dryrun`` and ``preflight.run`` -- the ssh clients are real, started here, in the
namespace this runs in (the test process outside cannot reach the hosts). Prints ``ready`` (exit 0),
or the not-ready hosts' lines on stderr as the one error path prints them (exit 2).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from launcher.backends.base import Launch, Typed
from launcher.backends.local import error
from launcher.config import compose, grammar
from launcher.errors import EXIT_USAGE, UserError
from launcher.ssh import preflight
from launcher.ssh.backend import SshBackend


def main(argv: list[str]) -> int:
    started = time.monotonic()
    try:
        line = grammar.parse(argv)
        overrides, vault = grammar.hide(line.overrides, multirun=False)
        cfg = vault.reveal(compose.compose(compose.with_default_profile(overrides, os.environ)))
        typed = Typed(overrides=tuple(overrides), script_args=tuple(line.script_args), order=tuple(line.order))
        request = SshBackend().dryrun(Launch(cfg, typed, Path(cfg.run_root) / "preflight", vault))
        preflight.run(request.payload, error)
    except UserError as err:
        error(str(err))
        print(f"preflight took {time.monotonic() - started:.2f} s", flush=True)
        return EXIT_USAGE
    print(f"ready; preflight took {time.monotonic() - started:.2f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
