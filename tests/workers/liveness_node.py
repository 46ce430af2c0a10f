"""One node's liveness channel (launcher/run/monitor/liveness.py) alone, as a launcher would run it, for
tests/test_liveness.py: ``liveness_node.py NODE_RANK NNODES PORT TIMEOUT`` (node 0's host: 127.0.0.1).

Prints ``UP`` once started (not node 0: once node 0 answered its hello), ``LOST <text>`` when it
finds a node lost (then ends, as a launch would), and ends normally, saying goodbye, when its stdin
closes (``BYE``).
"""

import sys
import threading
import time

from launcher.plan import NodeWatch
from launcher.run.monitor.liveness import NodeLiveness

node, nnodes, port, timeout = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
channel = NodeLiveness(NodeWatch(node, nnodes, "127.0.0.1", port, timeout, str(port)))
channel.start()
while node != 0 and not channel.watched():
    time.sleep(0.01)
print("UP", flush=True)
ended = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), ended.set()), daemon=True).start()
while not ended.is_set():
    failure = channel.check([])
    if failure is not None:
        print("LOST", failure.exception, flush=True)
        break
    time.sleep(0.05)
channel.close()
print("BYE", flush=True)
