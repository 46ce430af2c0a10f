"""The command line's two grammars, turned into one list of Hydra overrides.

``train_multigpu [hydra flags] [key=value ...] [Isaac Lab flags] [-- script args ...]``

- Everything after the first ``--`` goes to the training script verbatim.
- Isaac Lab's ``train_multigpu`` flags (``--num_gpus 4``, ``--rdzv_endpoint=host:port``, ...) become
  the same overrides the Hydra grammar would give (``launcher.nproc_per_node=4``, ...).
- Hydra's own flags (``--cfg job``, ``-m``, ``--config-dir D``, ...) are kept for Hydra, in front.
- ``env.*`` and ``agent.*`` overrides (Isaac Lab's training script's own Hydra keys) and any other
  ``--flag`` are forwarded to the training script, as Isaac Lab does.
- A secret value typed for a ``worker_env``/``profile.env`` key never reaches Hydra: :func:`hide`
  swaps it for a placeholder and keeps it in a :class:`launcher.secrets.Vault`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..errors import UserError
from ..secrets import (
    MASK,
    SECRET_KEYS,
    SECTIONS,
    Vault,
    holds_secret,
    is_secret,
    mask_override,
    remember,
    remember_values,
    section_name,
)
from .schema import TORCHRUN_FLAGS, keys_of_type

# Isaac Lab flag -> config key
_LAUNCHER_FLAGS = ("nproc_per_node", "nnodes", "node_rank", *TORCHRUN_FLAGS, "coordinator_address")
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
    "dry_run": "dry_run=true",
    "log_all_ranks": "log_all_ranks=true",
    "virtual_local_rank": "launcher.virtual_local_rank=true",  # torchrun's boolean flag
}
# Hydra's flags, and whether each takes a value
HYDRA_FLAGS = {
    "--help": False,
    "-h": False,
    "--hydra-help": False,
    "--version": False,
    "--cfg": True,
    "-c": True,
    "--resolve": False,
    "--package": True,
    "-p": True,
    "--run": False,
    "-r": False,
    "--multirun": False,
    "-m": False,
    "--shell-completion": False,
    "-sc": False,
    "--config-path": True,
    "-cp": True,
    "--config-name": True,
    "-cn": True,
    "--config-dir": True,
    "-cd": True,
    "--experimental-rerun": True,
    "--info": False,
    "-i": False,
}
INFO_TOPICS = ("all", "config", "defaults", "defaults-tree", "plugins", "searchpath")
CFG_VALUES = ("job", "hydra", "all")
# the long name of each short Hydra flag, for messages and for "given twice"
HYDRA_LONG = {
    "-h": "--help",
    "-c": "--cfg",
    "-p": "--package",
    "-r": "--run",
    "-m": "--multirun",
    "-i": "--info",
    "-sc": "--shell-completion",
    "-cp": "--config-path",
    "-cn": "--config-name",
    "-cd": "--config-dir",
}
# Hydra flags that would replace train_multigpu's own primary config: refused, with what to use instead
UNSUPPORTED_HYDRA_FLAGS = {
    "--config-path": "train_multigpu's primary config is built in; add a config directory with --config-dir DIR",
    "--config-name": "train_multigpu's primary config is built in; choose a profile with profile=NAME",
    "--experimental-rerun": "train_multigpu writes no Hydra pickle; each run directory's command.sh re-runs its launch",
}
SHELL_COMPLETION_COMMANDS = ("install", "uninstall", "query")
# config groups: their options are plain names, looked up in the config directories (profiles.py)
GROUPS = ("profile", "launcher", "rl_library", "presets")
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
    num_gpus: str | None = None
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
    for token in argv:  # a secret value typed here is masked in every error line (secrets.redact)
        remember(token)
    forwarded: list[str] = []
    order = line.order
    multinode_flags = False
    hydra_values: list[tuple[str, str]] = []  # (flag, value) of Hydra's valued flags
    given: dict[str, tuple[str, str]] = {}  # key -> (value, as typed): a second, different value is an error
    framework = None  # --ml_framework as typed, with its value
    i = 0
    while i < len(argv):
        token = argv[i]
        flag, has_value, value = token.partition("=")
        if flag in HYDRA_FLAGS:
            takes = HYDRA_FLAGS[flag]
            if has_value:  # --cfg=job, --config-dir=/x, -cd=/x: argparse's "=" form
                if not takes and HYDRA_LONG.get(flag, flag) != "--info":
                    raise UserError(token.partition("=")[0], value, "a Hydra switch without a value", f"write {flag}")
                if not value:
                    raise UserError(
                        flag,
                        "",
                        "Hydra's flag needs a value",
                        _HYDRA_EXAMPLES.get(HYDRA_LONG.get(flag, flag), f"e.g. {flag} VALUE"),
                    )
                hydra_values.append((flag, value))
                line.hydra_flags += [flag, value]
            else:
                if HYDRA_LONG.get(flag, flag) == "--info":
                    # the topic is optional: without one, Hydra's default (all) is written out, so that
                    # argparse never takes the next argument (an override) for the topic
                    if i + 1 < len(argv) and argv[i + 1] in INFO_TOPICS:
                        takes = True
                    else:
                        line.hydra_flags += [flag, "all"]
                        i += 1
                        continue
                line.hydra_flags.append(flag)
                if takes:
                    if i + 1 >= len(argv):
                        raise UserError(
                            flag,
                            "",
                            "Hydra's flag needs a value",
                            _HYDRA_EXAMPLES.get(HYDRA_LONG.get(flag, flag), f"e.g. {flag} VALUE"),
                        )
                    hydra_values.append((flag, argv[i + 1]))
                    line.hydra_flags.append(argv[i + 1])
                    i += 1
        elif token.startswith("--") and len(token) > 2:
            name, has_value, value = token[2:].partition("=")
            name = name.replace("-", "_")
            if name in SWITCHES:
                if has_value:
                    raise UserError(f"--{name}", value, "a switch without a value", f"write --{name}")
                _given(given, *SWITCHES[name].split("="), f"--{name}")
                line.overrides.append(SWITCHES[name])
            elif name == "ml_framework" or name in FLAG_TO_KEY or name == "rl_library":
                if not has_value:
                    if i + 1 >= len(argv) or argv[i + 1].startswith("--"):
                        raise UserError(f"--{name}", "", "this flag needs a value", f"e.g. --{name}=VALUE")
                    value = argv[i + 1]
                    i += 1
                if not value.strip():
                    raise UserError(f"--{name}", value, "this flag needs a value", f"e.g. --{name}=VALUE")
                typed = f"--{name} {value}"
                if name == "ml_framework":
                    if framework is not None and framework[1] != value:
                        raise UserError(f"--{name}", value, f"contradicts {framework[0]}", "give each flag once")
                    framework = (typed, value)
                else:
                    _given(given, "rl_library" if name == "rl_library" else FLAG_TO_KEY[name], value, typed)
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
                key, _, value = token.partition("=")
                if not key.startswith("~"):
                    _given(given, key.lstrip("+"), value, token)
                _plain_option(key.lstrip("+~"), value)
                line.overrides.append(_bracketed_address(token))
                key = _OVERRIDE.match(token).group(1)
                if key in ORDERED_KEYS:
                    order.append(key)
                elif key == PRESETS_KEY:
                    order.append(f"{PRESETS_KEY}:{','.join(preset_names(token.partition('=')[2]))}")
        else:
            raise UserError(
                "argument",
                mask_override(token),
                "expected key=value, a --flag, or script arguments after --",
                "put the training script's own arguments after --",
            )
        i += 1
    line.script_args = forwarded + after
    order += [ARG] * len(after)
    _check_hydra_flags(line, hydra_values)
    if framework is not None:
        line.overrides = _framework(framework, given, line.overrides)
    if multinode_flags and not any(o.startswith("launcher=") for o in line.overrides):
        # Isaac Lab's grammar has no topology: multi-node flags select it
        line.overrides.insert(0, "launcher=multinode")
    line.overrides = [_one_item_list(o) for o in line.overrides]
    return line


# Every list key takes one item written bare (the one rule for a list key given a bare value):
# k8s.secret_env=HF_TOKEN:hf-token/token, ssh.hosts=gpu-a, restart.classes=hang, ssh.options=-v.
BARE_ITEM_LISTS = keys_of_type(list)


def _one_item_list(override: str) -> str:
    """``k8s.secret_env=A:s/k`` is ``k8s.secret_env=[A:s/k]``; a list, null, an empty value or a
    comma list (a sweep with -m; refused without it: a list is written in brackets) stays.

    >>> _one_item_list("k8s.secret_env=HF_TOKEN:hf/token"), _one_item_list("k8s.secret_env=[A:b/c,D:e/f]")
    ('k8s.secret_env=[HF_TOKEN:hf/token]', 'k8s.secret_env=[A:b/c,D:e/f]')
    >>> _one_item_list("restart.classes=hang"), _one_item_list("ssh.options=-v"), _one_item_list("ssh.options=A=b")
    ('restart.classes=[hang]', 'ssh.options=[-v]', "ssh.options=['A=b']")
    """
    key, eq, value = override.partition("=")
    if not eq or key.lstrip("+") not in BARE_ITEM_LISTS:
        return override
    if not value.strip() or value.lstrip().startswith("[") or value.strip() == "null" or "," in value:
        return override
    if not _BARE_WORD.fullmatch(value) and not value.startswith(("'", '"')) and "${" not in value:
        value = quote(value)  # one item as typed (A=b, a b): Hydra reads = and spaces only quoted
    return f"{key}=[{value}]"


_BARE_WORD = re.compile(r"[\w\-+./:%@~]+")


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


_HYDRA_EXAMPLES = {
    "--cfg": "e.g. --cfg job",
    "--package": "e.g. --cfg job --package launcher",
    "--config-dir": "e.g. --config-dir ~/my_profiles",
    "--info": "e.g. --info searchpath",
}


def _given(given: dict[str, tuple[str, str]], key: str, value: str, typed: str) -> None:
    """The same key twice with two values: Hydra would keep the last one silently; we refuse. A
    secret's values show as ``***`` (both of them).

    >>> _given({"launcher.nproc_per_node": ("2", "--num_gpus 2")}, "launcher.nproc_per_node", "4", "launcher.nproc_per_node=4")
    Traceback (most recent call last):
    ...
    launcher.errors.UserError: launcher.nproc_per_node=4: contradicts --num_gpus 2 (give each key once)
    >>> _given({"worker_env.HF_TOKEN": ("abc", "+worker_env.HF_TOKEN=abc")}, "worker_env.HF_TOKEN", "x", "worker_env.HF_TOKEN=x")
    Traceback (most recent call last):
    ...
    launcher.errors.UserError: worker_env.HF_TOKEN=***: contradicts +worker_env.HF_TOKEN=*** (give each key once)
    """  # noqa: E501
    earlier = given.get(key)
    if earlier is not None and _unquoted(earlier[0]) != _unquoted(value):
        raise UserError(key, value, f"contradicts {mask_override(earlier[1])}", "give each key once")
    given.setdefault(key, (value, typed))


def _unquoted(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def _framework(framework: tuple[str, str], given: dict[str, tuple[str, str]], overrides: list[str]) -> list[str]:
    """``--ml_framework`` against an explicit ``launcher=``: JAX runs on skrl_jax, slurm_jax or k8s_jax only."""
    typed, value = framework
    explicit = given.get("launcher")
    if explicit is None:
        return overrides
    jax_launchers = ("skrl_jax", "slurm_jax", "k8s_jax")
    if (value == "jax") != (_unquoted(explicit[0]) in jax_launchers):
        raise UserError(
            "launcher",
            explicit[0],
            f"contradicts {typed}",
            "JAX runs on launcher=skrl_jax (or slurm_jax); torch on the others",
        )
    # the explicit launcher (slurm_jax) is the more precise choice: drop the one the flag implied
    return [o for o in overrides if o != "launcher=skrl_jax"] + ([explicit[1]] if explicit[1] not in overrides else [])


def _plain_option(key: str, value: str) -> None:
    """A config group's option is a name in the config directories, never a path: a path would load
    any YAML file on the machine (``profile=../../x``). A directory belongs in --config-dir or
    TRAIN_MULTIGPU_CONFIG_PATH.

    >>> _plain_option("presets", "[debug,newton_mjwarp]")
    >>> _plain_option("profile", "../../tmp/evil")
    Traceback (most recent call last):
    ...
    launcher.errors.UserError: profile=../../tmp/evil: a profile name, not a path (put the directory in --config-dir DIR or TRAIN_MULTIGPU_CONFIG_PATH, then select profile=NAME)
    """  # noqa: E501
    group = key.split("@", 1)[0]
    if group not in GROUPS:
        return
    if re.search(r"[/\\]", value):
        raise UserError(
            group,
            value,
            f"a {group} name, not a path",
            f"put the directory in --config-dir DIR or TRAIN_MULTIGPU_CONFIG_PATH, then select {group}=NAME",
        )
    body = value.strip()
    # presets: compose.open_presets reads the names (an open set under some profiles); a sweep
    # function (glob(*), choice(a,b)): Hydra reads it
    if group == "presets" or re.fullmatch(r"\w+\(.*\)", body):
        return
    for name in (n.strip() for n in body.removeprefix("[").removesuffix("]").split(",")):
        if name and name[0] not in "'\"" and (_reads_as_scalar(name) or re.search(r"[\[\]{}]", name)):
            raise UserError(
                group,
                value,
                f"a {group} name, not a number, true/false or null",
                f"a name that reads as one needs quotes: '{name}'",
            )


def _reads_as_scalar(text: str) -> bool:
    """Hydra reads this unquoted text as a number, a bool or null, not a name.

    >>> [_reads_as_scalar(t) for t in ("3", "1e5", "nan", "true", "null", "debug", "v1")]
    [True, True, True, True, True, False, False]
    """
    if text.lower() in ("true", "false", "null"):
        return True
    try:
        float(text)
    except ValueError:
        return False
    return True


RUN_MODE_FLAGS = ("--run", "--multirun", "--cfg", "--info", "--shell-completion")


def _check_hydra_flags(line: CommandLine, values: list[tuple[str, str]]) -> None:
    """Hydra's flags as Hydra's argparse would read them, each mistake one line."""
    seen: dict[str, str] = {}
    for flag, value in values:
        name = HYDRA_LONG.get(flag, flag)
        if name in UNSUPPORTED_HYDRA_FLAGS:
            raise UserError(flag, value, "not supported by train_multigpu", UNSUPPORTED_HYDRA_FLAGS[name])
        if name == "--cfg" and value not in CFG_VALUES:
            raise UserError(flag, value, f"one of {', '.join(CFG_VALUES)}", "e.g. --cfg job")
        if name == "--info" and value not in INFO_TOPICS:
            raise UserError(flag, value, f"one of {', '.join(INFO_TOPICS)}", "or --info alone")
        if name in seen and seen[name] != value:
            raise UserError(flag, value, f"contradicts {name} {seen[name]}", "give each flag once")
        seen[name] = value
    modes: list[tuple[str, str]] = []  # Hydra's run modes as typed; its own check of two is a traceback
    for i, token in enumerate(line.hydra_flags):
        name = HYDRA_LONG.get(token, token)
        if name in RUN_MODE_FLAGS and token in HYDRA_FLAGS:
            valued = HYDRA_FLAGS[token] or name == "--info"
            mode = (name, line.hydra_flags[i + 1] if valued and i + 1 < len(line.hydra_flags) else "")
            if modes and mode[0] != modes[0][0]:
                raise UserError(
                    mode[0],
                    mode[1],
                    f"contradicts {modes[0][0]}",
                    f"Hydra does one of {', '.join(RUN_MODE_FLAGS)} at a time",
                )
            modes.append(mode)
    flags = {HYDRA_LONG.get(f, f) for f in line.hydra_flags}
    if "--resolve" in flags and not flags & {"--cfg", "--help"}:
        raise UserError("--resolve", "", "only with --cfg or --help", "e.g. --cfg job --resolve")
    if "--shell-completion" in flags:
        commands = [o for o in line.overrides if o.split("=", 1)[0] in SHELL_COMPLETION_COMMANDS]
        if len(commands) != 1:
            raise UserError(
                "--shell-completion",
                " ".join(commands),
                "needs one of install=SHELL, uninstall=SHELL or query=SHELL",
                'e.g. eval "$(train_multigpu -sc install=bash)"',
            )
        others = [o for o in line.overrides if o not in commands]
        if others or line.script_args:
            raise UserError(
                "--shell-completion",
                commands[0],
                f"takes no other arguments (got {' '.join(others + line.script_args)})",
                'e.g. eval "$(train_multigpu -sc install=bash)"',
            )


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


def bad_env_name(key: str, shown: str) -> UserError | None:
    """``worker_env.1ABC``: Hydra's grammar cannot read such a key, whatever the quoting; the name
    is the mistake (the same line as checks.py gives a name Hydra can read, ``BAD-NAME``).

    >>> print(bad_env_name("+worker_env.1ABC", "x"))
    worker_env.1ABC=x: not an environment variable name: letters, digits and '_', not starting with a digit
    >>> bad_env_name("worker_env.A_1", "x") is None
    True
    """
    key = key.lstrip("+~")
    for section in ("worker_env.", "profile.env."):
        name = key[len(section) :]
        if key.startswith(section) and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name, flags=re.ASCII):
            return UserError(
                key, shown, "not an environment variable name: letters, digits and '_', not starting with a digit"
            )
    return None


# -- secret values typed on the command line: hidden from Hydra, kept in a Vault (launcher.secrets) --


def _quote_hint(key: str) -> str:
    return f"""quote the whole value: '{key}="..."'"""


def hide(overrides: Sequence[str], multirun: bool) -> tuple[list[str], Vault]:
    """Replace the values of secret ``worker_env``/``profile.env`` overrides by placeholders.

    >>> hide(["seed=1,2", "+worker_env.HF_TOKEN=abc"], True)
    (['seed=1,2', '+worker_env.HF_TOKEN=***'], Vault(values={'worker_env.HF_TOKEN': {'***': 'abc'}}, referenced={}))
    >>> hide(["+worker_env.HF_TOKEN=a,b"], True)[0], hide(["+worker_env.HF_TOKEN=${oc.env:T}"], False)[0]
    (['+worker_env.HF_TOKEN=***1,***2'], ['+worker_env.HF_TOKEN=${oc.env:T}'])
    >>> from launcher.secrets import forget; forget()  # the values above are masked no more
    """
    vault, out = Vault(), []
    for override in overrides:
        remember(override)
        key, eq, text = override.partition("=")
        path = key.lstrip("+~")
        section, name = section_name(path)
        # a map holding a section (worker_env, ray.runtime_env: {env_vars: ...}) with a secret-named key
        section_of = next((s for s in SECTIONS if s == path or s.startswith(path + ".")), None)
        if section_of and eq and holds_secret(text):
            raise UserError(
                path, MASK, "secrets are given one by one, never as a map", f"e.g. +{section_of}.NAME=VALUE"
            )
        secret = path in SECRET_KEYS if section is None else is_secret(name)  # SECRET_KEYS: notify.url
        if not secret or not eq or not text:
            out.append(override)
            continue
        values = _parse_values(key, path, text, multirun)
        if values is None:  # null, or a reference such as ${oc.env:NAME}: no secret value here
            out.append(override)
            continue
        if key.startswith("~"):  # a delete: the value is only a guard; delete by name
            out.append(key)
            continue
        remember_values(values)
        placeholders = [MASK] if len(values) == 1 else [f"{MASK}{i}" for i in range(1, len(values) + 1)]
        vault.values[path] = dict(zip(placeholders, values))
        out.append(f"{key}={','.join(placeholders)}")
    return out, vault


def _parse_values(key: str, path: str, text: str, multirun: bool) -> list[str] | None:
    """The value(s) of one secret override as Hydra reads them (quotes, sweeps), never echoed."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        parsed = OverridesParser.create().parse_override(f"{key}={text}")
    except Exception:
        raise bad_env_name(key, MASK) or UserError(
            path, MASK, "not a value Hydra's override grammar can read", _quote_hint(key)
        ) from None
    if parsed.is_sweep_override():
        if not multirun:
            raise UserError(
                path, MASK, "one value (a ',' outside quotes makes a list of values to sweep with -m)", _quote_hint(key)
            )
        try:
            values = list(parsed.sweep_iterator())
        except Exception:  # glob(): it chooses among a config group's options, and needs Hydra's loader
            raise UserError(
                path, MASK, "one value, or values to sweep: a,b, choice(a,b) or range(1,3)", _quote_hint(key)
            ) from None
    else:
        values = [parsed.value()]
    if values == [None]:
        return None
    if any(isinstance(value, (list, dict)) or value is None for value in values):
        raise UserError(path, MASK, "a string", _quote_hint(key))
    values = [str(value) for value in values]
    if len(values) == 1 and "${" in values[0]:
        return None
    return values
