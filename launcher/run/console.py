"""The console view of a launch: which ranks the terminal shows, the rank logs tailed to it
(:class:`launcher.run.logs.ConsoleTail`), torchrun's own lines, and the launcher's own messages."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO

from ..names import PROG
from ..plan import LaunchPlan
from . import logs
from .postmortem.detect import PORT_IN_USE


class Console:
    def __init__(self, plan: LaunchPlan, stream: IO[bytes], agent_quiet: Callable[[], bool]) -> None:
        """``agent_quiet()``: True once torchrun's own lines should no longer be shown (the launch is
        ending and the rank logs have the story)."""
        self.plan, self.stream, self.agent_quiet = plan, stream, agent_quiet
        self.tail: logs.ConsoleTail | None = None
        self.torchrun = plan.processes[0].name == "torchrun"
        self._held: list[bytes] | None = None  # a traceback of torchrun's, being read
        self._port_taken = False

    def shown(self, rank: int) -> bool:
        """Whether global rank ``rank`` is shown on this node's console."""
        plan = self.plan
        if plan.log_all_ranks:
            return True
        if plan.console_local_ranks is not None:
            return rank - plan.node_rank * plan.nproc_per_node in plan.console_local_ranks
        return rank == 0

    def _ranks_by_rendezvous(self) -> bool:
        """A multi-node torchrun launch with an endpoint rendezvous (c10d): which node gets which
        global ranks is decided when the nodes meet, not by node_rank (static only)."""
        return self.torchrun and self.plan.nnodes != "1" and "--rdzv_endpoint" in self.plan.processes[0].argv

    def shows_any_local_rank(self) -> bool:
        first = self.plan.node_rank * self.plan.nproc_per_node
        return any(self.shown(rank) for rank in range(first, first + self.plan.nproc_per_node))

    def say(self, text: str) -> None:
        """A line of the launcher's own."""
        if self.tail is not None:
            self.tail.break_line()
        try:
            self.stream.write(f"[{PROG}] {text}\n".encode())
            self.stream.flush()
        except BrokenPipeError:
            self._gone()
        except (OSError, ValueError):
            pass

    def echo_agent(self, line: bytes) -> None:
        """torchrun's own lines: shown while it owns the output, or until the launch is ending. A
        traceback is held until its last line: one for a port found taken is not shown (the CLI
        prints the port's one-line error instead; torchrun.log keeps it), nor anything after it."""
        if self.plan.rank_logs and self.agent_quiet():
            return
        if self._port_taken:
            return
        if self._held is None and line.startswith(b"Traceback (most recent call last):"):
            self._held = []
        if self._held is not None:
            self._held.append(line)
            if len(self._held) == 1 or line.startswith((b" ", b"\t")):
                return
            block, self._held = b"".join(self._held), None
            if PORT_IN_USE.search(block):
                self._port_taken = True
                return
            line = block
        self._write(line)

    def _write(self, data: bytes) -> None:
        if self.tail is not None:
            self.tail.break_line()
        try:
            self.stream.write(data)
            self.stream.flush()
        except BrokenPipeError:
            self._gone()
        except (OSError, ValueError):
            pass

    def _gone(self) -> None:
        """The console's reader went away: when the console is the launcher's stdout, it goes to /dev/null."""
        with contextlib.suppress(AttributeError, OSError, ValueError):
            if self.stream.fileno() == sys.__stdout__.fileno():
                stdout_gone()

    def flush_held(self) -> None:
        """A traceback torchrun left unfinished."""
        if self._held:
            block, self._held = b"".join(self._held), None
            self._write(block)

    def start(self, log_dir: Path) -> None:
        """Follow the shown ranks' logs (when the ranks write them)."""
        if not self.plan.rank_logs:
            return
        if self._ranks_by_rendezvous() and not self.plan.log_all_ranks:
            # c10d (any endpoint rendezvous) ranks the nodes in rendezvous order, not by node_rank:
            # global rank 0 may land on any node, so every node says where its ranks' logs are
            self.say(
                "the console shows global rank 0 if the rendezvous gives it to this node (c10d ranks "
                f"nodes by rendezvous order, not node_rank); this node's ranks log to {log_dir}"
                " (log_all_ranks=true shows them here)"
            )
        elif not self.shows_any_local_rank():
            self.say(
                f"the console shows global rank 0 (on node 0); this node's ranks log to {log_dir}"
                " (log_all_ranks=true shows them here)"
            )
        self.tail = logs.ConsoleTail(
            log_dir, self.stream, self.shown, self.plan.node_rank, self.plan.log_all_ranks, collapse=self._terminal()
        )
        self.tail.start()

    def _terminal(self) -> bool:
        """The launcher's stdout is a terminal: progress lines are collapsed (logs.Collapse)."""
        try:
            return self.stream.isatty()
        except (AttributeError, ValueError, OSError):
            return False

    def stop(self) -> None:
        if self.tail is not None:
            self.tail.stop()


class _OutlivedStdout:
    """``sys.stdout`` for a launch whose reader may go away (``train_multigpu ... | head``): the first
    write that finds the pipe closed points file descriptor 1 at /dev/null, so that every later write
    (the console's, ``print``'s, the interpreter's last flush) goes nowhere instead of failing; the
    launch goes on and ends with its own exit code."""

    def __init__(self, stream) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            stdout_gone()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            stdout_gone()
            with contextlib.suppress(OSError, ValueError):
                self._stream.flush()  # what was held goes to /dev/null now

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def outlive_stdout() -> None:
    """From now on a closed stdout (its reader gone) does not fail the launch (:class:`_OutlivedStdout`)."""
    if not isinstance(sys.stdout, _OutlivedStdout) and sys.stdout is not None:
        sys.stdout = _OutlivedStdout(sys.stdout)


def stdout_gone() -> None:
    """The launcher's stdout lost its reader: file descriptor 1 becomes /dev/null (once)."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        fd = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(fd, sys.__stdout__.fileno())
        finally:
            os.close(fd)
