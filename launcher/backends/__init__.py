"""Back ends: where a launch runs. One interface (:mod:`.base`), one registered implementation per
``submit=`` value, imported only when used (``runs`` imports the describe/logs/cancel side, which
imports no Hydra)."""

from __future__ import annotations

import importlib

from .base import Backend

# submit= value -> "module:class"; "none" is the local launch
REGISTRY = {
    "none": "launcher.backends.local:LocalBackend",
    "slurm": "launcher.slurm.backend:SlurmBackend",
    "ray": "launcher.ray_submit.backend:RayBackend",
    "k8s": "launcher.k8s.backend:K8sBackend",
    "ssh": "launcher.ssh.backend:SshBackend",
}


def get(name: str) -> Backend:
    """The back end registered for ``submit=name`` (a record's ``backend``)."""
    module, _, attr = REGISTRY[name].partition(":")
    return getattr(importlib.import_module(module), attr)()
