"""``train_multigpu submit=ssh ...`` through SshBackend itself, for the tests until the generic session
(branch ``session``) routes ``submit=ssh`` to its back end: the command line is parsed as the CLI
parses it (the secret hidden from Hydra into a vault), composed, and the launch goes
``dryrun`` -> ``submit`` -> ``wait`` exactly as the session's one path does. Exits with the launch's code.

    python tests/ssh_driver.py <train_multigpu arguments>
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str]) -> int:
    from launcher import record
    from launcher.backends.base import Launch, Typed
    from launcher.config import compose, grammar
    from launcher.errors import UserError
    from launcher.session import error
    from launcher.ssh.backend import SshBackend

    try:
        line = grammar.parse(argv)
        masked, vault = grammar.hide(line.overrides, False)
        cfg = vault.reveal(compose.compose(masked, line.script_args))
        typed = Typed(overrides=tuple(masked), script_args=tuple(line.script_args), order=tuple(line.order))
        run_dir = Path(os.path.abspath(cfg.run_root)) / record.run_dir_name(cfg.run_name)
        backend = SshBackend()
        request = backend.dryrun(Launch(cfg, typed, run_dir, vault))
        if cfg.dry_run:
            print(request.shown)
            return 0
        handle = backend.submit(request)
    except UserError as err:
        error(str(err))
        return 2
    return backend.wait([handle])[0]


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
