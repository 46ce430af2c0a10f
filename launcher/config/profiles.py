"""Cluster profiles: where they are found, and writing the current composition as a new one.

Search order (first match of a config name wins)::

    1. --config-dir DIR                      (Hydra's flag; one directory)
    2. $TRAIN_MULTIGPU_CONFIG_PATH            (colon-separated directories, in order)
    3. ./.train_multigpu/                     (the project folder in the working directory)
    4. $XDG_CONFIG_HOME/train_multigpu        (else ~/.config/train_multigpu)
    5. the shipped conf/                      (inside the package in a wheel)

Each directory is a Hydra config directory: profiles live in its ``profile/`` subfolder, and it
may add ``presets/`` (or any other group option) too. The list is handed to Hydra as a
``hydra.searchpath`` override; the app itself is started without a primary config directory, so
the shipped ``conf/`` is simply the last entry. No Hydra plugin is involved: a SearchPathPlugin
would touch every Hydra app installed next to us and must be packaged as ``hydra_plugins``.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from .. import paths
from ..errors import UserError
from ..names import override_key
from . import grammar

CONFIG_PATH_ENV = "TRAIN_MULTIGPU_CONFIG_PATH"
PROJECT_DIR = ".train_multigpu"
SAVE_KEY = "save_profile"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
# per-run values a saved profile leaves out
PER_RUN_KEYS = ("seed", "run_name", "dry_run", "script_args", "launcher.node_rank")


def user_dir(env: Mapping[str, str], home: str | None = None) -> Path:
    base = env.get("XDG_CONFIG_HOME") or os.path.join(home or os.path.expanduser("~"), ".config")
    return Path(base) / "train_multigpu"


def search_dirs(env: Mapping[str, str], cwd: str, home: str | None = None) -> list[Path]:
    """The directories searched before the shipped configs, in order; only those that exist.

    A directory named in TRAIN_MULTIGPU_CONFIG_PATH must exist (a typo would silently fall back to
    another profile); the project and user folders are optional.
    """
    found: list[Path] = []
    for item in env.get(CONFIG_PATH_ENV, "").split(os.pathsep):
        if not item:
            continue
        path = Path(item).expanduser()
        if not path.is_absolute():
            path = Path(cwd) / path
        if not os.path.isdir(path):
            raise UserError(
                CONFIG_PATH_ENV,
                env[CONFIG_PATH_ENV],
                f"{item} is not a directory",
                "colon-separated config directories, each with a profile/ folder",
            )
        found.append(path.resolve())
    for path in (Path(cwd) / PROJECT_DIR, user_dir(env, home)):
        if os.path.isdir(path):  # False, not PermissionError, for a folder this user may not look into
            found.append(path.resolve())
    unique: list[Path] = []
    for path in found:
        if path not in unique:
            unique.append(path)
    return unique


def all_dirs(env: Mapping[str, str], cwd: str, home: str | None = None) -> list[Path]:
    return [*search_dirs(env, cwd, home), paths.conf_dir()]


def searchpath_override(env: Mapping[str, str], cwd: str, home: str | None = None) -> str:
    """``hydra.searchpath=[...]``: the search directories, then the shipped configs."""
    entries = [f"file://{p}" for p in all_dirs(env, cwd, home)]
    return "hydra.searchpath=[" + ",".join(grammar.quote(e) for e in entries) + "]"


def group_listing(dirs: Sequence[Path]) -> str:
    """``group: option, option`` lines for --help, from every directory on the search path."""
    groups: dict[str, set[str]] = {}
    for root in dirs:
        for group_dir in sorted(p for p in Path(root).iterdir() if p.is_dir() and not p.name.startswith(("_", "."))):
            names = {f.stem for f in group_dir.glob("*.yaml")}
            if names:
                groups.setdefault(group_dir.name, set()).update(names)
    return "\n".join(f"{group}: {', '.join(sorted(names))}" for group, names in sorted(groups.items()))


# -- config files Hydra cannot read ------------------------------------------------------------


def _option(path: Path, dirs: Sequence[Path]) -> tuple[str, str]:
    """``("profile", "bad")`` for ``<dir>/profile/bad.yaml``: the group and option a file is."""
    for root in dirs:
        try:
            relative = path.resolve().relative_to(Path(root).resolve())
        except ValueError:
            continue
        if relative.parent != Path("."):
            return relative.parent.as_posix(), relative.with_suffix("").name
    return path.parent.name or "config", path.stem


def _innermost_local(tb, function: str, name: str):
    """The value of local ``name`` in the innermost frame of ``function`` in a traceback."""
    found = None
    while tb is not None:
        if tb.tb_frame.f_code.co_name == function and name in tb.tb_frame.f_locals:
            found = tb.tb_frame.f_locals[name]
        tb = tb.tb_next
    return found


def _defaults_cycle(err: BaseException) -> list[str]:
    """The config paths of a defaults list that includes itself, from Hydra's recursion (innermost
    tree node, walked to the root); empty when the traceback does not show one."""
    node = _innermost_local(err.__traceback__, "_create_defaults_tree_impl", "root")
    chain: list[str] = []
    while node is not None and len(chain) < 10_000:
        try:
            chain.append(str(node.node.get_config_path()))
        except Exception:
            return []
        node = getattr(node, "parent", None)
    chain.reverse()
    for start, path in enumerate(chain):
        if path in chain[start + 1 :]:
            end = chain.index(path, start + 1)
            return chain[start : end + 1]
    return []


def config_file_error(err: BaseException, dirs: Sequence[Path]) -> UserError | None:
    """A config file (profile, preset, ...) that Hydra could not read, as one line naming the file:
    a YAML syntax error, a file that is not UTF-8, a defaults list that includes itself."""
    import yaml

    if isinstance(err, yaml.YAMLError):
        mark = getattr(err, "problem_mark", None)
        path = Path(mark.name) if mark is not None and mark.name and not mark.name.startswith("<") else None
        if path is None:  # YAML read from a string, not a config file
            return None
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        group, option = _option(path, dirs)
        return UserError(group, option, f"{path} is not valid YAML: {problem}{where}", "fix the file")
    if isinstance(err, UnicodeDecodeError):
        path = _innermost_local(err.__traceback__, "load_config", "full_path")
        if path is None:
            return None
        group, option = _option(Path(path), dirs)
        return UserError(
            group, option, f"{path} is not UTF-8 text ({err.reason} at byte {err.start})", "save the file as UTF-8"
        )
    if isinstance(err, RecursionError):
        cycle = _defaults_cycle(err)
        if not cycle:
            return None
        group, _, option = cycle[0].rpartition("/")
        return UserError(
            group or "config",
            option,
            f"its defaults list includes itself: {' -> '.join(cycle)}",
            "remove the entry that leads back to it",
        )
    return None


# -- save_profile=NAME -------------------------------------------------------------------------


def split_save(overrides: Sequence[str]) -> tuple[str | None, list[str]]:
    """Take ``save_profile=NAME`` out of the overrides (it is a command, not a config key)."""
    name, rest = None, []
    for override in overrides:
        key, eq, value = override.partition("=")
        if override_key(key) == SAVE_KEY and eq:
            name = value.strip().strip("'\"")
            if not name:
                raise UserError(
                    SAVE_KEY, "", "a profile name or a path ending in .yaml", "e.g. save_profile=my_cluster"
                )
        else:
            rest.append(override)
    return name, rest


def save_target(name: str, cwd: str, config_dir: str | None = None) -> Path:
    """Where ``save_profile=NAME`` writes: ``<dir>/profile/NAME.yaml`` where dir is the
    ``--config-dir`` when given, else ``./.train_multigpu``; a value ending in ``.yaml`` is a path."""
    if name.endswith((".yaml", ".yml")):
        target = Path(name).expanduser()
        target = target if target.is_absolute() else Path(cwd) / target
        stem = target.stem
    else:
        if not _NAME.match(name):
            raise UserError(SAVE_KEY, name, "a name of letters, digits, '_', '.', '-' (or a path ending in .yaml)")
        stem = name
        root = Path(config_dir) if config_dir else Path(cwd) / PROJECT_DIR
        target = (root if root.is_absolute() else Path(cwd) / root) / "profile" / f"{name}.yaml"
    if not _NAME.match(stem):
        raise UserError(
            SAVE_KEY, name, "the file name must be letters, digits, '_', '.', '-' (it becomes profile=NAME)"
        )
    if os.path.lexists(target):
        from ..files import refusal

        problem = refusal(target, SAVE_KEY)  # a FIFO, a device, a directory, a link to nothing: named as such
        if problem is not None:
            raise problem
        raise UserError(SAVE_KEY, name, f"{target} already exists", "choose another name or delete the file")
    from ..probe import unwritable_dir

    problem = unwritable_dir(str(target.parent))
    if problem is not None:
        raise UserError(SAVE_KEY, name, f"cannot write {target}: {problem}", "save it in a directory you can write")
    return target


def selection(target: Path, env: Mapping[str, str], cwd: str, home: str | None = None) -> str:
    """How a later command selects the profile written at ``target``: ``profile=NAME`` where its
    folder is on the search path, ``--config-dir DIR profile=NAME`` for a ``DIR/profile/`` folder that
    is not, and for a file outside any ``profile/`` folder where to put it (a config group is a folder).

    >>> selection(Path("/abs/p1.yaml"), {}, "/w", "/h")
    'to select it, put it in a profile/ folder (e.g. /abs/profile/p1.yaml) and add --config-dir /abs profile=p1'
    >>> selection(Path("/abs/profile/p1.yaml"), {}, "/w", "/h")
    'select it with --config-dir /abs profile=p1'
    """
    name, folder = target.stem, target.parent
    if folder.name != "profile":
        return (
            f"to select it, put it in a profile/ folder (e.g. {folder / 'profile' / target.name}) "
            f"and add --config-dir {folder} profile={name}"
        )
    try:
        on_path = folder.parent.resolve() in search_dirs(env, cwd, home)
    except UserError:  # TRAIN_MULTIGPU_CONFIG_PATH names a missing folder: the next command says so
        on_path = False
    return (
        f"select it with profile={name}" if on_path else f"select it with --config-dir {folder.parent} profile={name}"
    )


def _drop(container: dict, dotted: str) -> None:
    *parents, last = dotted.split(".")
    node = container
    for part in parents:
        node = node.get(part)
        if not isinstance(node, dict):
            return
    node.pop(last, None)


def _diff(value: dict, default: dict) -> dict:
    """The entries of ``value`` that differ from ``default`` (recursively for nested dicts)."""
    out = {}
    for key, item in value.items():
        base = default.get(key, object()) if isinstance(default, dict) else object()
        if isinstance(item, dict) and isinstance(base, dict) and item and base:
            sub = _diff(item, base)
            if sub:
                out[key] = sub
        elif item != base:
            out[key] = item
    return out


def _secret_references(container: dict) -> None:
    """Secret values never go into a profile file: they become ``${oc.env:NAME}`` references (a secret
    key outside the env sections, ``notify.url``, the variable a submitted job reads it from).

    >>> body = {"worker_env": {"HF_TOKEN": "***", "A": "1"}, "notify": {"url": "***"}}
    >>> _secret_references(body); body
    {'worker_env': {'HF_TOKEN': '${oc.env:HF_TOKEN}', 'A': '1'}, 'notify': {'url': '${oc.env:TRAIN_MULTIGPU_NOTIFY_URL}'}}
    """  # noqa: E501
    from ..secrets import SECRET_KEYS, is_secret

    for dotted, variable in SECRET_KEYS.items():
        *owner, key = dotted.split(".")
        node = container
        for part in owner:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict) and node.get(key) and not str(node[key]).startswith("${"):
            node[key] = "${oc.env:" + variable + "}"

    for section in ("worker_env",):
        env = container.get(section) or {}
        for key in list(env):
            if is_secret(key) and not str(env[key]).startswith("${"):
                env[key] = "${oc.env:" + key + "}"
    profile_env = (container.get("profile") or {}).get("env") or {}
    for key in list(profile_env):
        if is_secret(key) and not str(profile_env[key]).startswith("${"):
            profile_env[key] = "${oc.env:" + key + "}"


def render(dict_cfg, choices: Mapping[str, str | None], name: str, command: Sequence[str]) -> str:
    """The profile file for a composed (unresolved) config: the rl_library choice as a defaults-list
    override, launcher.topology as a value, every value that differs from the schema's default (presets folded in),
    per-run values left out, secrets as environment references."""
    from omegaconf import OmegaConf

    from ..secrets import mask_override
    from . import schema

    values = OmegaConf.to_container(dict_cfg, resolve=False, enum_to_str=True)
    values.pop("hydra", None)
    for key in PER_RUN_KEYS:
        _drop(values, key)
    defaults = OmegaConf.to_container(OmegaConf.structured(schema.TrainConfig), enum_to_str=True)
    body = _diff(values, defaults)
    body.setdefault("profile", {})["name"] = name
    _secret_references(body)
    header = [
        "# @package _global_",
        f"# train_multigpu profile '{name}', written by: train_multigpu {' '.join(map(mask_override, command))}",
        f"# on {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}. "
        "Per-run values (node_rank, seed, run_name, dry_run) are left out.",
    ]
    presets = choices.get("presets")
    if presets and presets != "[]":
        header.append(f"# presets folded into the values below: {presets}")
    lines = ["defaults:"]
    # a profile may override only groups listed before it (rl_library); the topology is a value
    for group in ("rl_library",):
        if choices.get(group):
            lines.append(f"  - override /{group}: {choices[group]}")
    lines.append("  - _self_")
    return "\n".join(header + lines) + "\n\n" + OmegaConf.to_yaml(OmegaConf.create(body))


@contextlib.contextmanager
def env_references_unresolved():
    """While a profile to be saved is type-checked: a reference to the environment (``${oc.env:NAME}``,
    ``${tmg_isaaclab_root:}``) that cannot resolve here reads as ``"0"``. Profiles are written where
    the cluster's variables are not set (a laptop without ISAACLAB_PATH); the file keeps the
    reference, resolved where the profile is used."""
    from omegaconf import OmegaConf
    from omegaconf.resolvers import oc

    from .isaaclab import isaaclab_root

    originals = {"oc.env": oc.env, "tmg_isaaclab_root": isaaclab_root}

    def lenient(resolver):
        def call(*args):
            try:
                return resolver(*args)
            except Exception:
                return "0"

        return call

    for name, resolver in originals.items():
        OmegaConf.register_new_resolver(name, lenient(resolver), replace=True)
    try:
        yield
    finally:
        for name, resolver in originals.items():
            OmegaConf.register_new_resolver(name, resolver, replace=True)


def write(target: Path, text: str) -> None:
    """A new profile file: never over an existing one, even in a race (files.write_through, exclusive:
    nothing half written is left when writing fails)."""
    from ..files import write_through

    target.parent.mkdir(parents=True, exist_ok=True)
    write_through(target, text.encode(), SAVE_KEY, exclusive=True)
