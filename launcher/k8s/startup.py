"""A pod's first wait: node 0's host name resolves only once node 0's pod exists.

The operators give node 0 a DNS name through a headless service (``<job>-node-0-0.<job>``,
``<job>-master-0``); a pod that starts before node 0's pod has an address gets NXDOMAIN. The launcher
checks every host name before it starts anything (probe.locate) and would fail at once; inside a pod
it first waits, up to the rendezvous join timeout (``launcher.join_timeout``, else torchrun's c10d
600 s), retrying every few seconds. If the name still does not resolve, probe.locate's usual error follows.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ..names import PROG

DEFAULT_WAIT_S = 600.0  # torchrun's c10d join timeout
RETRY_S = 2.0


def wait_for_node0(
    host: str,
    timeout_s: float,
    resolve: Callable[[str], object],
    error: type[Exception],
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> bool:
    """True once ``host`` resolves (``resolve`` raises ``error`` until it does); False after ``timeout_s``.

    >>> answers = iter([KeyError, KeyError, ["10.0.0.7"]])
    >>> def resolve(name):
    ...     answer = next(answers)
    ...     if answer is KeyError:
    ...         raise KeyError(name)
    ...     return answer
    >>> now = [0.0]
    >>> wait_for_node0("ppo-node-0-0.ppo", 60, resolve, KeyError, lambda s: now.__setitem__(0, now[0] + s),
    ...                lambda: now[0])
    [train_multigpu] k8s: waiting for node 0's pod: ppo-node-0-0.ppo does not resolve yet (up to 60 s)
    True
    >>> now[0]
    4.0
    """
    deadline = clock() + timeout_s
    told = False
    while True:
        try:
            resolve(host)
            return True
        except error:
            if clock() >= deadline:
                return False
            if not told:
                print(
                    f"[{PROG}] k8s: waiting for node 0's pod: {host} does not resolve yet (up to {timeout_s:g} s)",
                    flush=True,
                )
                told = True
            sleep(RETRY_S)
