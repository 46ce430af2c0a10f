"""The launcher's entry: ``python -m launcher`` and the ``train_multigpu`` console script.

The rest of the launcher (``launcher.cli`` and what it imports: about 0.1 s) is imported inside
the entry, so that a Ctrl+C while Python imports it is the same quiet exit 130 as a Ctrl+C later,
not a KeyboardInterrupt traceback.
"""

import sys


def entry() -> None:
    if sys.argv[1:] == ["--version"]:  # answered before the rest is imported (Hydra: about a second)
        from .names import version_line

        print(version_line(), flush=True)
        sys.exit(0)
    try:
        from .cli import entry as run
    except KeyboardInterrupt:
        sys.exit(128 + 2)
    run()


if __name__ == "__main__":
    entry()
