"""One node's liveness channel and restart coordinator (launcher/run/monitor/coordinator.py) in a
process of its own, driven line by line on stdin as an attempt loop would drive it, for
tests/test_coordinator.py: ``coordinated_node.py NODE_RANK NNODES PORT TIMEOUT [MIN_NODES]``.

Prints ``UP`` once started (not node 0: once node 0 answered its hello; ``UP standby`` when node 0
said it joins the next attempt: then node 0's word when it comes), and ``FAILED <node> <code>``
once per attempt when the channel ends it (another node lost or failed). Stdin lines:
``end <code> <retry 0|1> <class|-> <text>``: this attempt ended here; prints node 0's word,
``WORD restart <attempt> <nodes> after <class>`` (``after <class>`` only when node 0 named one) or
``WORD stop <code> <text>``. ``close <code>``: says goodbye,
prints ``BYE``. SIGINT is noted as the attempt loop notes it (the coordinator's waits end).
"""

import signal
import sys
import threading
import time

from launcher.plan import NodeWatch
from launcher.run.monitor import liveness_wire as wire
from launcher.run.monitor.coordinator import NodesCoordinator, Verdict
from launcher.run.monitor.liveness import NodeLiveness

node, nnodes, port, timeout = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
min_nodes = int(sys.argv[5]) if len(sys.argv) > 5 else None
channel = NodeLiveness(NodeWatch(node, nnodes, "127.0.0.1", port, timeout, str(port), min_nodes))
coordinator = NodesCoordinator(channel, report_wait_s=10, word_wait_s=15)
channel.start()
received: list = [None]
signal.signal(signal.SIGINT, lambda signum, frame: received.__setitem__(0, signum))  # as the attempt loop's
coordinator.signal = lambda: received[0]
while node != 0 and not channel.watched():
    time.sleep(0.01)
time.sleep(0.2 if node != 0 else 0)  # a standby follows the welcome
print("UP standby" if channel.standing_by() else "UP", flush=True)
lock = threading.Lock()
found: list = [None]  # this attempt's failure (the channel's)


def watch() -> None:
    while True:
        with lock:
            if found[0] is None:
                failure = channel.check([])
                if failure is not None:
                    found[0] = failure
                    print("FAILED", failure.node, failure.exit_code, flush=True)
        time.sleep(0.02)


def said(word) -> None:
    global attempt
    if isinstance(word, wire.Restart):
        attempt = word.attempt
        print("WORD restart", word.attempt, word.nodes, *(["after", word.cause] if word.cause else []), flush=True)
    else:
        print("WORD stop", word.code, word.text, flush=True)


attempt = 0
joined = coordinator.wait_to_join()
if joined is not None:
    said(joined)
threading.Thread(target=watch, daemon=True).start()
for line in sys.stdin:
    words = line.split()
    if words[0] == "end":
        with lock:
            failure, found[0] = found[0], "settling"
        root = failure.node if failure not in (None, "settling") else 0
        cls = None if words[3] == "-" else words[3]
        said(coordinator.settle(attempt, Verdict(int(words[1]), words[2] == "1", " ".join(words[4:]), cls), root))
        with lock:
            found[0] = None
    elif words[0] == "close":
        channel.close(int(words[1]))
        print("BYE", flush=True)
        break
