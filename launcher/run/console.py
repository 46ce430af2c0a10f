"""The console view of a launch: which ranks the terminal shows, the rank logs tailed to it
(:class:`launcher.run.logs.ConsoleTail`), torchrun's own lines, and the launcher's own messages."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import IO, Callable, Optional

from ..names import PROG
from ..plan import LaunchPlan
from . import logs


class Console:
    def __init__(self, plan: LaunchPlan, stream: IO[bytes], agent_quiet: Callable[[], bool]) -> None:
        """``agent_quiet()``: True once torchrun's own lines should no longer be shown (the launch is
        ending and the rank logs have the story)."""
        self.plan, self.stream, self.agent_quiet = plan, stream, agent_quiet
        self.tail: Optional[logs.ConsoleTail] = None

    def shown(self, rank: int) -> bool:
        """Whether global rank ``rank`` is shown on this node's console."""
        plan = self.plan
        if plan.log_all_ranks:
            return True
        if plan.console_local_ranks is not None:
            return rank - plan.node_rank * plan.nproc_per_node in plan.console_local_ranks
        return rank == 0

    def shows_any_local_rank(self) -> bool:
        first = self.plan.node_rank * self.plan.nproc_per_node
        return any(self.shown(rank) for rank in range(first, first + self.plan.nproc_per_node))

    def say(self, text: str) -> None:
        """A line of the launcher's own."""
        with contextlib.suppress(OSError, ValueError):
            self.stream.write(f"[{PROG}] {text}\n".encode())
            self.stream.flush()

    def echo_agent(self, line: bytes) -> None:
        """torchrun's own lines: shown while it owns the output, or until the launch is ending."""
        if self.plan.rank_logs and self.agent_quiet():
            return
        with contextlib.suppress(OSError, ValueError):
            self.stream.write(line)
            self.stream.flush()

    def start(self, log_dir: Path) -> None:
        """Follow the shown ranks' logs (when the ranks write them)."""
        if not self.plan.rank_logs:
            return
        if not self.shows_any_local_rank():
            self.say(f"the console shows global rank 0 (on node 0); this node's ranks log to {log_dir}"
                     " (log_all_ranks=true shows them here)")
        self.tail = logs.ConsoleTail(log_dir, self.stream, self.shown, self.plan.node_rank, self.plan.log_all_ranks)
        self.tail.start()

    def stop(self) -> None:
        if self.tail is not None:
            self.tail.stop()
