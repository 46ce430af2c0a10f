"""The command line's two grammars, turned into one list of Hydra overrides.

``train_multigpu [hydra flags] [key=value ...] [Isaac Lab flags] [-- script args ...]``

- Everything after the first ``--`` goes to the training script verbatim.
- Isaac Lab's ``train_multigpu`` flags (``--num_gpus 4``, ``--rdzv_endpoint=host:port``, ...) become
  the same overrides the Hydra grammar would give (``launcher.nproc_per_node=4``, ...).
- Hydra's own flags (``--cfg job``, ``-m``, ``--config-dir D``, ...) are kept for Hydra, in front.
- ``env.*`` and ``agent.*`` overrides (Isaac Lab's training script's own Hydra keys) and any other
  ``--flag`` are forwarded to the training script, as Isaac Lab does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

from .errors import UserError

# Isaac Lab flag -> config key
_LAUNCHER_FLAGS = (
    "nproc_per_node", "nnodes", "node_rank", "master_addr", "master_port", "rdzv_backend",
    "rdzv_endpoint", "rdzv_id", "rdzv_conf", "max_restarts", "monitor_interval", "start_method",
    "role", "tee", "redirects", "local_ranks_filter", "log_dir", "coordinator_address",
)
FLAG_TO_KEY = {name: f"launcher.{name}" for name in _LAUNCHER_FLAGS}
FLAG_TO_KEY.update(
    num_gpus="launcher.nproc_per_node",
    task="task",
    num_envs="num_envs",
    max_iterations="max_iterations",
    seed="seed",
    run_name="run_name",
    device="device",
    python="python",
)
# Isaac Lab flags that only make sense across nodes: they select launcher=multinode
MULTINODE_FLAGS = ("nnodes", "node_rank", "master_addr", "rdzv_endpoint", "rdzv_backend", "rdzv_id")
# flags that take no value
SWITCHES = {"dry_run": "dry_run=true", "log_all_ranks": "log_all_ranks=true"}
# Hydra's flags, and whether each takes a value
HYDRA_FLAGS = {
    "--help": False, "-h": False, "--hydra-help": False, "--version": False,
    "--cfg": True, "-c": True, "--resolve": False, "--package": True, "-p": True,
    "--run": False, "-r": False, "--multirun": False, "-m": False,
    "--shell-completion": False, "-sc": False, "--config-path": True, "-cp": True,
    "--config-name": True, "-cn": True, "--config-dir": True, "-cd": True,
    "--experimental-rerun": True, "--info": False,
}
INFO_TOPICS = ("all", "config", "defaults", "defaults-tree", "plugins", "searchpath")
# keys whose values may be bracketed IPv6 addresses
ADDRESS_KEYS = ("launcher.rdzv_endpoint", "launcher.coordinator_address", "launcher.master_addr", "launcher.local_addr")
# first segment of an override that belongs to Isaac Lab's training script, not to us
SCRIPT_OVERRIDE_ROOTS = ("env", "agent")
_OVERRIDE = re.compile(r"^[+~]{0,2}([A-Za-z_][\w.\-/@]*)(=|$)")


@dataclass
class CommandLine:
    hydra_flags: list[str] = field(default_factory=list)
    overrides: list[str] = field(default_factory=list)
    script_args: list[str] = field(default_factory=list)
    # the value of Isaac Lab's --num_gpus, when given: it asks for GPUs (checks.num_gpus_flag)
    num_gpus: Optional[str] = None

    def hydra_argv(self) -> list[str]:
        """Hydra flags first, then overrides: Hydra refuses flags between overrides."""
        return self.hydra_flags + self.overrides


def quote(value: str) -> str:
    """A Hydra override value that stays the literal string it is (quotes, spaces, ``${``).

    >>> quote("Isaac-Cartpole-v0"), quote("it's"), quote("a b")
    ("'Isaac-Cartpole-v0'", "'it\\\\'s'", "'a b'")
    """
    escaped = value.replace("\\", "\\\\").replace("'", "\\'").replace("${", "\\${")
    return f"'{escaped}'"


def _known_override(token: str) -> bool:
    match = _OVERRIDE.match(token)
    return bool(match and "=" in token)


def parse(argv: list[str]) -> CommandLine:
    line = CommandLine()
    if "--" in argv:
        cut = argv.index("--")
        argv, line.script_args = argv[:cut], list(argv[cut + 1 :])
    forwarded: list[str] = []
    multinode_flags = False
    i = 0
    while i < len(argv):
        token = argv[i]
        if token in HYDRA_FLAGS:
            line.hydra_flags.append(token)
            takes = HYDRA_FLAGS[token]
            if token == "--info" and i + 1 < len(argv) and argv[i + 1] in INFO_TOPICS:
                takes = True
            if takes:
                if i + 1 >= len(argv):
                    raise UserError(token, "", "Hydra's flag needs a value", "e.g. --cfg job")
                line.hydra_flags.append(argv[i + 1])
                i += 1
        elif token.startswith("--") and len(token) > 2:
            name, has_value, value = token[2:].partition("=")
            name = name.replace("-", "_")
            if name in SWITCHES:
                if has_value:
                    raise UserError(f"--{name}", value, "a switch without a value", f"write --{name}")
                line.overrides.append(SWITCHES[name])
            elif name == "ml_framework" or name in FLAG_TO_KEY or name == "rl_library":
                if not has_value:
                    if i + 1 >= len(argv) or argv[i + 1].startswith("--"):
                        raise UserError(f"--{name}", "", "this flag needs a value", f"e.g. --{name}=VALUE")
                    value = argv[i + 1]
                    i += 1
                line.overrides += _translate(name, value)
                if name == "num_gpus":
                    line.num_gpus = value
                if name in MULTINODE_FLAGS and not (name == "nnodes" and value.strip() == "1"):
                    multinode_flags = True
            else:
                # a training-script flag, with its value when the next token is one
                forwarded.append(token)
                if not has_value and i + 1 < len(argv) and not argv[i + 1].startswith("-") and "=" not in argv[i + 1]:
                    forwarded.append(argv[i + 1])
                    i += 1
        elif _known_override(token):
            root = _OVERRIDE.match(token).group(1).split(".")[0]
            if root in SCRIPT_OVERRIDE_ROOTS:
                forwarded.append(token)
            else:
                line.overrides.append(_bracketed_address(token))
        else:
            raise UserError(
                "argument", token,
                "expected key=value, a --flag, or script arguments after --",
                "put the training script's own arguments after --",
            )
        i += 1
    line.script_args = forwarded + line.script_args
    if multinode_flags and not any(o.startswith("launcher=") for o in line.overrides):
        # Isaac Lab's grammar has no topology: multi-node flags select it
        line.overrides.insert(0, "launcher=multinode")
    return line


def _bracketed_address(override: str) -> str:
    """``launcher.rdzv_endpoint=[::1]:29400`` as typed: Hydra's grammar would read ``[`` as a list,
    so an address key's bracketed IPv6 value is quoted for it.

    >>> _bracketed_address("launcher.coordinator_address=[fd00::1]:5000")
    "launcher.coordinator_address='[fd00::1]:5000'"
    >>> _bracketed_address("presets=[debug]")
    'presets=[debug]'
    """
    key, _, value = override.partition("=")
    if key.lstrip("+") in ADDRESS_KEYS and value.startswith("["):
        return f"{key}={quote(value)}"
    return override


def _translate(name: str, value: str) -> list[str]:
    if name == "rl_library":
        return [f"rl_library={value}"]
    if name == "ml_framework":
        if value == "jax":
            return ["launcher=skrl_jax"]
        if value == "torch":
            return []
        raise UserError("--ml_framework", value, "jax or torch")
    return [f"{FLAG_TO_KEY[name]}={quote(value)}"]
