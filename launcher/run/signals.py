"""Which signals a launch handles, and one context manager that installs handlers and restores the
previous ones on the way out (a launch, and a parallel sweep's lanes, both use it)."""

from __future__ import annotations

import signal
from contextlib import contextmanager
from typing import Callable, Iterator, Mapping, Union

FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # stop the launch
RELAYED_SIGNALS = (signal.SIGUSR1,)  # passed on to every group, never a reason to stop

Handler = Union[Callable[[int, object], None], int, signal.Handlers]


@contextmanager
def handlers(installed: Mapping[int, Handler]) -> Iterator[None]:
    """Install ``installed`` (signal -> handler); restore every previous handler on exit, also those
    of signals given a new handler inside the block."""
    previous = {sig: signal.getsignal(sig) for sig in installed}
    try:
        for sig, handler in installed.items():
            signal.signal(sig, handler)
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
