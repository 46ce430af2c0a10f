"""launcher/run/ssh_nodes.py on its own, for tests/test_ssh_nodes.py: each "node" is a launcher started
here with the channel variable set (its stdin the channel, as ssh would give it), not over ssh.

    python ssh_nodes_driver.py GRACE_S '[["host", [argv...]], ...]' '{"worker_env.X_TOKEN": "v"}'

Exits with the launch's exit code; prints ``OUTCOME <json>`` last on stdout.
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from launcher.run import ssh_nodes  # noqa: E402

grace, nodes, secrets = float(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3])
remote = [ssh_nodes.RemoteNode(rank, host, tuple(argv)) for rank, (host, argv) in enumerate(nodes)]


def judge(answers: dict) -> None:
    """Every node must pass the preflight (each launcher here says ready, as over ssh)."""
    if not all(answer.ready for answer in answers.values()):
        sys.exit(f"not every node is ready: {answers}")


outcome = ssh_nodes.run(remote, secrets, grace, timeout_s=30, preflight_s=120, judge=judge)
ends = [end.as_record() for end in outcome.nodes]
print("OUTCOME " + json.dumps({"code": outcome.exit_code, "reason": outcome.reason, "nodes": ends}), flush=True)
sys.exit(outcome.exit_code)
