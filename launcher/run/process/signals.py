"""Which signals a launch handles; one context manager that installs handlers and restores the
previous ones on the way out (a launch, a sweep and a parallel sweep's lanes all use it); a
sweep's hold on the stop signals (:class:`Interrupts`); and SIGTERM as Ctrl+C while a remote job is
followed (:class:`TermAsInterrupt`)."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Protocol

FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # stop the launch
RELAYED_SIGNALS = (signal.SIGUSR1,)  # passed on to every group, never a reason to stop
STACK_SIGNALS = (signal.SIGUSR2,)  # every rank's stack into the run directory (run/monitor/progress.py)

Handler = Callable[[int, object], None] | int | signal.Handlers


def install(installed: Mapping[int, Handler]) -> dict[int, Handler]:
    """Install ``installed`` (signal -> handler); the previous handlers. For a program that keeps its
    handlers to the end (ray_submit/job.py's driver); a launch restores them: :func:`handlers`."""
    return {sig: signal.signal(sig, handler) for sig, handler in installed.items()}


@contextmanager
def handlers(installed: Mapping[int, Handler]) -> Iterator[None]:
    """Install ``installed`` (signal -> handler); restore every previous handler on exit, also those
    of signals given a new handler inside the block."""
    previous = {sig: signal.getsignal(sig) for sig in installed}
    try:
        install(installed)
        yield
    finally:
        install(previous)


class TermAsInterrupt:
    """While following a remote job (ray_submit/submit.py): SIGTERM and SIGHUP raise
    KeyboardInterrupt, so they stop the job as Ctrl+C does; ``received`` is the signal a
    KeyboardInterrupt raised inside stands for (the exit code is 128 + it): SIGTERM or SIGHUP when
    one came, else SIGINT (Ctrl+C, Python's own KeyboardInterrupt).

    >>> TermAsInterrupt().received == signal.SIGINT
    True
    """

    def __init__(self) -> None:
        self._stack = contextlib.ExitStack()
        self.received: int = signal.SIGINT

    def __enter__(self) -> TermAsInterrupt:
        self._stack.enter_context(handlers({sig: self._raise for sig in (signal.SIGTERM, signal.SIGHUP)}))
        return self

    def _raise(self, signum: int, frame: object) -> None:
        self.received = signum
        raise KeyboardInterrupt

    def __exit__(self, *_exc: object) -> None:
        self._stack.close()


class Stoppable(Protocol):
    def on_signal(self, signum: int, frame: object) -> None: ...

    def on_stacks(self, signum: int, frame: object) -> None: ...


class Interrupts:
    """A sweep's hold on SIGINT/SIGTERM/SIGHUP, from its first job to its summary (a context
    manager); a launch's, from its first attempt to its last (run/supervise.LaunchSignals). The
    first signal is passed to every running launch (each stops as on its own) and stays in
    ``received``: the sweep starts nothing more. A second SIGINT reaches the running
    launches too, which kill at once. Between jobs a signal is only noted. SIGUSR2 (stacks on
    demand) goes to every running launch for the sweep's whole length too; between jobs it does
    nothing (the default action would end the sweep)."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._active: list[Stoppable] = []
        self._lock = threading.RLock()  # the handler runs in the main thread, which may hold it
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> Interrupts:
        installed = {sig: self._on_signal for sig in FORWARDED_SIGNALS}
        installed.update({sig: self._on_stacks for sig in STACK_SIGNALS})
        self._stack.enter_context(handlers(installed))
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stack.close()

    def _on_signal(self, signum: int, frame: object) -> None:
        if self.received is None:
            self.received = signum
        with self._lock:
            for launch in list(self._active):
                launch.on_signal(signum, frame)

    def _on_stacks(self, signum: int, frame: object) -> None:
        with self._lock:
            for launch in list(self._active):
                launch.on_stacks(signum, frame)

    def attach(self, launch: Stoppable) -> None:
        """``launch`` is running: signals reach it (one that came already, at once)."""
        with self._lock:
            self._active.append(launch)
            if self.received is not None:
                launch.on_signal(self.received, None)

    def detach(self, launch: Stoppable) -> None:
        with self._lock:
            if launch in self._active:
                self._active.remove(launch)

    def running(self) -> list:
        with self._lock:
            return list(self._active)
