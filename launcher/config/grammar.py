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

from ..errors import UserError
from ..secrets import mask_override

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
SWITCHES = {
    "dry_run": "dry_run=true", "log_all_ranks": "log_all_ranks=true",
    "virtual_local_rank": "launcher.virtual_local_rank=true",  # torchrun's boolean flag
}
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
# keys the training script receives as arguments: where the user typed them is where they go
# (CommandLine.order)
ORDERED_KEYS = ("task", "num_envs", "max_iterations", "seed", "run_name", "device")
# an entry of CommandLine.order that stands for the next command-line script argument
ARG = ""  # = plan.ARG_ENTRY
PRESETS_KEY = "presets"


@dataclass
class CommandLine:
    hydra_flags: list[str] = field(default_factory=list)
    overrides: list[str] = field(default_factory=list)
    script_args: list[str] = field(default_factory=list)
    # the value of Isaac Lab's --num_gpus, when given: it asks for GPUs (checks.num_gpus_flag)
    num_gpus: Optional[str] = None
    # what reaches the training script, in the order typed: a key of ORDERED_KEYS, "ml_framework",
    # "presets:A,B" for a presets= override (its names), or ARG for the next entry of script_args
    order: list[str] = field(default_factory=list)


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
    after: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, after = argv[:cut], list(argv[cut + 1 :])
    forwarded: list[str] = []
    order = line.order
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
                if name in ORDERED_KEYS or name == "ml_framework":
                    order.append(name)
                if name in MULTINODE_FLAGS and not (name == "nnodes" and value.strip() == "1"):
                    multinode_flags = True
            else:
                # a training-script flag, with its value when the next token is one
                forwarded.append(token)
                order.append(ARG)
                if not has_value and i + 1 < len(argv) and not argv[i + 1].startswith("-") and "=" not in argv[i + 1]:
                    forwarded.append(argv[i + 1])
                    order.append(ARG)
                    i += 1
        elif _known_override(token):
            root = _OVERRIDE.match(token).group(1).split(".")[0]
            if root in SCRIPT_OVERRIDE_ROOTS:
                forwarded.append(token)
                order.append(ARG)
            else:
                line.overrides.append(_bracketed_address(token))
                key = _OVERRIDE.match(token).group(1)
                if key in ORDERED_KEYS:
                    order.append(key)
                elif key == PRESETS_KEY:
                    order.append(f"{PRESETS_KEY}:{','.join(preset_names(token.partition('=')[2]))}")
        else:
            raise UserError(
                "argument", mask_override(token),
                "expected key=value, a --flag, or script arguments after --",
                "put the training script's own arguments after --",
            )
        i += 1
    line.script_args = forwarded + after
    order += [ARG] * len(after)
    if multinode_flags and not any(o.startswith("launcher=") for o in line.overrides):
        # Isaac Lab's grammar has no topology: multi-node flags select it
        line.overrides.insert(0, "launcher=multinode")
    return line


def preset_names(value: str) -> list[str]:
    """The names in a ``presets=`` value: ``a``, ``[a,b]``, or ``a,b`` (a sweep with -m; Isaac Lab's
    list form otherwise).

    >>> preset_names("debug"), preset_names("[debug, newton]"), preset_names("a,b"), preset_names("[]")
    (['debug'], ['debug', 'newton'], ['a', 'b'], [])
    """
    value = value.strip()
    if value.startswith("[") and value.endswith("]"):
        value = value[1:-1]
    return [name.strip().strip("'\"") for name in value.split(",") if name.strip().strip("'\"")]


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
