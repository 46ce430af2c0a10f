"""The launcher's entry: ``python -m launcher`` and the ``train_multigpu`` console script.

The rest of the launcher (``launcher.cli`` and what it imports: about 0.1 s) is imported inside
the entry, so that a Ctrl+C while Python imports it is the same quiet exit 130 as a Ctrl+C later,
not a KeyboardInterrupt traceback. ``runs`` (the records read back) imports only its own modules:
launcher/cli.py's main would hand it on the same way, after importing everything a launch needs.
"""

import os
import sys


def entry() -> None:
    if sys.argv[1:] == ["--version"]:  # answered before the rest is imported (Hydra: about a second)
        from .names import version_line

        print(version_line(), flush=True)
        sys.exit(0)
    try:
        from .names import RAY_CONFIG_VAR

        if sys.argv[1:2] == ["runs"] and RAY_CONFIG_VAR not in os.environ:  # (a Ray job's node: cli's)
            from .errors import exit_with
            from .runs import cli as runs_cli

            def run() -> None:
                exit_with(lambda: runs_cli.main(sys.argv[2:], launch=_launch_line))
        else:
            from .ssh import early

            early.start(sys.argv[1:])  # submit=ssh: every host's ssh client, before Hydra is imported
            from .cli import entry as run
    except KeyboardInterrupt:
        _close_early()
        _forget_caught_interrupts()
        sys.exit(128 + 2)
    try:
        run()
    finally:
        _close_early()
        _forget_caught_interrupts()


def _close_early() -> None:
    """submit=ssh's clients started early and not taken by the launch (launcher/ssh/early.py): closed."""
    early = sys.modules.get("launcher.ssh.early")
    if early is not None:
        early.close()


def _forget_caught_interrupts() -> None:
    """A Ctrl+C that the launcher caught ends it with its own exit code (130), not killed by SIGINT.

    CPython 3.11 marks an interrupt "unhandled" when it leaves any ``exec``/``eval`` of a string --
    dataclasses' and namedtuple's generated methods while Hydra is imported -- even when the
    launcher catches it further up; the interpreter then ends by SIGINT whatever the exit code.
    Every ``exec`` of a string clears that mark first; a KeyboardInterrupt that really leaves
    ``entry`` is marked again after this, as it should be.
    """
    exec("")


def _launch_line(*args, **kwargs) -> int:
    """launcher/cli.py's ``launch_line``, imported when ``runs rerun``/``runs resume`` launches."""
    from .cli import launch_line

    return launch_line(*args, **kwargs)


if __name__ == "__main__":
    entry()
