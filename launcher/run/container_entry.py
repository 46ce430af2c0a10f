"""The first program inside a docker/podman container that carries secrets (a separate program:
standard library only, run by the image's interpreter, mounted read-only from the launcher's install).

``python container_entry.py ARGV...`` reads one JSON object from stdin -- the secret variables of the
launch, ``{"NAME": "value"}``, written there by the launcher (launcher/container.py) -- puts them into
its environment and replaces itself with ``ARGV``. So a secret value reaches the ranks' environment
without passing through the runtime: ``-e NAME`` would have docker/podman copy it into the
container's configuration on disk (podman: ``config.json`` and its state database).
"""

from __future__ import annotations

import json
import os
import sys


def main(argv: list[str]) -> None:
    line = sys.stdin.readline()
    try:
        values = json.loads(line) if line.strip() else {}
    except ValueError:
        values = {}
    if isinstance(values, dict):
        os.environ.update({str(k): str(v) for k, v in values.items()})
    devnull = os.open(os.devnull, os.O_RDONLY)  # the channel is done: the launch reads nothing from it
    os.dup2(devnull, 0)
    os.close(devnull)
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    main(sys.argv[1:])
