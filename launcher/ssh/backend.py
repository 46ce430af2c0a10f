"""``submit=ssh`` as a :class:`~launcher.backends.base.Backend`: one launcher per host, over SSH.

- ``dryrun`` (this module): the ``ssh.*`` checks, the hosts (``ssh.hosts`` or the hostfile, read
  here: the only thing dryrun reads), and every node's command (launcher/ssh/command.py). What the
  dry run prints is every ssh command line exactly as ``submit`` starts it, and each node's plan.
  It connects to nothing and writes nothing;
- ``submit`` / ``wait``: the preflight (launcher/ssh/preflight.py: every host, in parallel, before
  any rank starts), then the ssh clients, started and supervised by launcher/run/;
- ``describe`` / ``logs`` / ``cancel``: from the handle (the local record names every node's).

The describe/logs/cancel side imports no Hydra (``runs`` calls it); ``dryrun`` imports what it needs.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

from ..backends.base import Handle, Launch, Refused, Request, Status, submit_each
from ..errors import UserError

NAME = "ssh"
HOSTFILE_MAX = 1 << 20  # bytes: a hostfile is a few lines


class SshBackend:
    name = NAME

    def __init__(self, python: str | None = None, cwd: str | None = None) -> None:
        self._python, self._cwd = python, cwd  # tests pin this machine's interpreter and directory
        self.interrupts = None  # a sweep's signal handling (the session sets it)
        self.results: dict[str, int] = {}  # exit code by run directory, of the launches submitted here

    # -- the launch ----------------------------------------------------------------------------
    def dryrun(self, launch: Launch) -> Request:
        import os
        import sys

        from . import checks, command, hosts

        cfg, typed = launch.cfg, launch.typed
        cwd = self._cwd or os.getcwd()
        checks.check(cfg.ssh)
        text = read_hostfile(cfg.ssh.hostfile, cwd) if cfg.ssh.hostfile is not None else None
        found = hosts.from_config(cfg.ssh.hosts, cfg.ssh.hostfile, text)
        run_dir = os.path.abspath(os.path.join(cwd, str(launch.run_dir)))
        plan = command.build(
            cfg,
            typed,
            found,
            run_dir,
            vault=launch.vault,
            python=self._python or sys.executable,
            cwd=cwd,
        )
        shown = f"# {NAME} (dry run: nothing connected, nothing written)\n{plan.shown()}"
        return Request(NAME, str(launch.run_dir), shown, {}, plan)

    def submit(self, request: Request) -> Handle:
        """One blocking launch, as the local back end's: every node's ssh client started and
        supervised to the end (launcher/ssh/launch.py); its exit code is in ``results``."""
        from . import launch

        handle, outcome = launch.submit(request.payload, self.interrupts)
        self.results[handle.run_dir] = outcome.exit_code
        return handle

    def show(self, requests: Sequence[Request]) -> None:
        """Every node's ssh command line and plan, for each request: nothing connected."""
        for request in requests:
            print(request.shown, flush=True)

    def submit_all(
        self, requests: Sequence[Request], interrupts=None, fail_fast: bool = False
    ) -> list[Handle | Refused | None]:
        """One launch after another (each blocks); a refusal (the preflight's) printed once."""
        if interrupts is not None:  # a sweep's: one Ctrl+C reaches the running launch's nodes
            self.interrupts = interrupts
        return submit_each(self, requests, self.interrupts, fail_fast)

    def wait(self, handles: Sequence[Handle | Refused | None], interrupts=None, fail_fast: bool = False) -> list[int]:
        """A submit has already waited: the codes the launches ended with."""
        codes = []
        for handle in handles:
            if isinstance(handle, Refused):
                codes.append(handle.exit_code)
            elif handle is not None:
                codes.append(self.results.get(handle.run_dir, self.describe(handle).exit_code or 0))
        return codes

    def summary(self, points) -> str | None:
        """A sweep's table: each launch's run directory here, or why it has none."""
        from ..backends import summary

        return summary.submitted(points, followed=self._followed)

    def _followed(self, handle: Handle) -> tuple[str | None, int | None]:
        code = self.results.get(handle.run_dir)
        return ("ended" if code is not None else None), code

    # -- a launch under way: from its handle alone (launcher/ssh/state.py, no Hydra) ----------------
    def describe(self, handle: Handle) -> Status:
        from . import state

        return state.describe(handle)

    def logs(self, handle: Handle, rank: int | None = None, follow: bool = False) -> Iterator[str]:
        from . import state

        return state.logs(handle, rank, follow)

    def cancel(self, handle: Handle) -> None:
        """One Ctrl+C to this machine's launcher: every node stops."""
        from . import state

        state.cancel(handle)


def read_hostfile(path: str, cwd: str) -> str:
    """The hostfile's text (relative to the working directory); unreadable: one UserError."""
    from .. import files
    from .hosts import HINT

    where = Path(cwd, path)
    try:
        return files.read_text(where, HOSTFILE_MAX)
    except (OSError, UnicodeDecodeError) as err:
        why = getattr(err, "strerror", None) or str(err)
        raise UserError("ssh.hostfile", path, f"a readable hostfile ({why})", HINT) from None
