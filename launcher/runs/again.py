"""``runs rerun ID [overrides...]`` and ``runs resume ID [overrides...]``: launch a recorded
composition again, through the launcher's own path (``launcher/cli.py``'s ``launch_line``, handed in
as ``args.launch``: nothing imports cli), never by running ``command.sh``.

The record is ``<run_dir>/composition.json`` (record.composition): the overrides as typed (secret
values masked), the script's arguments, their typed order, Hydra's flags, the working directory.

- **rerun**: the composition, the new overrides on top (Hydra's rule: the later value of a key wins),
  in the recorded working directory; a new run directory whose composition notes ``rerun_of``. A sweep
  job reruns as the single run of its point; a node directory of a multi-node launch reruns that node.
- **resume**: the same composition again with the training script pointed at the run's last
  checkpoint in the same trainer directory (the bundled trainers: ``--resume`` with
  ``TRAIN_MULTIGPU_RUN_DIR`` = that directory, the mechanism a requeued SLURM job uses; Isaac Lab:
  ``--resume --load_run``/``--checkpoint`` from its log directory). The new record notes
  ``resumed_from`` and ``trainer_dir``.

A secret value the record masked is read from the environment variable of the same name; missing:
one error naming every one (nothing starts).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
from collections.abc import Callable
from pathlib import Path

from .. import files, record, secrets
from ..checkpoints import CHECKPOINTS, isaaclab_resume_args, latest_checkpoint
from ..errors import UserError
from ..names import RUN_DIR_VAR, override_key
from ..record import RERUN_OF, RESUMED_FROM, TRAINER_DIR
from ..rundir import COMPOSITION, RunPaths
from . import cache, read

RESUME_ARGS = "resume_args"  # what launch_line's ``again`` carries for the session (not recorded)


def configure_rerun(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``runs rerun`` (cli.py calls this; the command is :func:`rerun`)."""
    parser.add_argument("id", help="the run to launch again (a unique prefix of its id, or last)")
    parser.add_argument(
        "overrides",
        nargs=argparse.REMAINDER,
        help="overrides on top of the recorded ones (the later value of a key wins); -- ARGS: more script arguments",
    )


def configure_resume(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``runs resume`` (the command is :func:`resume`)."""
    parser.add_argument("id", help="the run to continue from its last checkpoint (a unique prefix, or last)")
    parser.add_argument(
        "overrides", nargs=argparse.REMAINDER, help="overrides on top of the recorded ones (e.g. max_iterations=20)"
    )


def _own_flags(args: argparse.Namespace) -> None:
    """``--root DIR`` typed among the overrides (before any ``--``) is the runs command's own flag.

    >>> ns = argparse.Namespace(root=Path("runs"), overrides=["seed=1", "--root", "/r", "--", "--root", "x"])
    >>> _own_flags(ns); ns.root, ns.overrides
    (PosixPath('/r'), ['seed=1', '--', '--root', 'x'])
    """
    words, rest = list(args.overrides), []
    while words:
        word = words.pop(0)
        if word == "--":
            rest += [word, *words]
            break
        if word == "--root" and words:
            args.root = Path(words.pop(0))
        elif word.startswith("--root="):
            args.root = Path(word.split("=", 1)[1])
        else:
            rest.append(word)
    args.overrides = rest


def rerun(args: argparse.Namespace) -> int:
    _own_flags(args)
    run_dir = cache.resolve(args.root, args.id)
    composition = recorded(run_dir, args.id)
    line = merged(composition, list(args.overrides))
    return _launch(args, line, composition, {RERUN_OF: run_id(args.root, run_dir)})


def resume(args: argparse.Namespace) -> int:
    _own_flags(args)
    run_dir = cache.resolve(args.root, args.id)
    info = read.read(run_dir, root=read.root_of(args.root, run_dir))
    if info.status == read.RUNNING:
        raise UserError("id", args.id, "is still running; resume continues a run that ended", "wait, or stop it first")
    composition = recorded(run_dir, args.id)
    trainer_dir = trainer_dir_of(run_dir, composition)
    within = read.root_of(args.root, run_dir) or str(run_dir)
    if not files.inside(trainer_dir, within):  # a record is a file anyone who can write the root can edit
        raise UserError(
            "id",
            args.id,
            f"its record names a trainer directory outside {within} ({trainer_dir}): not resumed there",
            "rerun it instead: train_multigpu runs rerun ID",
        )
    profile, library = _profile_and_library(run_dir)
    if profile == "isaaclab":
        extra = isaaclab_resume_args(library, _rank0_log(run_dir), args.id)
    else:
        extra = ["--resume"]
        newest = latest_checkpoint(Path(trainer_dir)) if profile in (None, "examples") else None
        if profile in (None, "examples") and newest is None:
            raise UserError(
                "id",
                args.id,
                f"has no checkpoint to resume from (none in {Path(trainer_dir) / CHECKPOINTS})",
                "rerun it from the start: train_multigpu runs rerun ID",
            )
        if newest is not None:
            _refuse_finished(args, newest, trainer_dir, composition)
    line = merged(composition, list(args.overrides))
    notes = {RESUMED_FROM: run_id(args.root, run_dir), TRAINER_DIR: trainer_dir, RESUME_ARGS: extra}
    return _launch(args, line, composition, notes)


def _refuse_finished(args: argparse.Namespace, newest: Path, trainer_dir: str, composition: dict) -> None:
    """One line, nothing started, when the bundled trainer would have nothing to train: its newest
    checkpoint is at (or past) the last iteration the resumed run would run to -- ``max_iterations=``
    typed now, else what the run had (its run_info.json). Not decided (the launch goes ahead) where
    neither says, or the script's own ``--max_iterations`` is among the arguments."""
    iteration = read.small_int(newest.name.removeprefix("iter_").removesuffix(".ckpt"))
    typed = [o.split("=", 1)[1] for o in args.overrides if override_key(o) == "max_iterations" and "=" in o]
    arguments = [*composition.get("script_args", []), *args.overrides]
    if iteration is None or any(a.split("=")[0] == "--max_iterations" for a in arguments):
        return
    if typed:
        last = read.small_int(typed[-1])
    else:
        info = read._read_json(Path(trainer_dir) / read.RUN_INFO, [], trainer_dir) or {}
        value = info.get("max_iterations")
        last = value if isinstance(value, int) and not isinstance(value, bool) else None
    if last is not None and iteration >= last:
        raise UserError(
            "id",
            args.id,
            f"nothing to resume: the run finished all its {last} iterations (newest checkpoint: iteration {iteration})",
            f"train further with max_iterations=N above {iteration}: train_multigpu runs resume ID max_iterations=N",
        )


# -- the record -----------------------------------------------------------------------------------
# composition.json's fields a rerun reads, and what each must be (docs/runs_again.md)
_LISTS = ("overrides", "script_args", "order", "hydra_flags")
_REQUIRED = ("overrides", "script_args")


def recorded(run_dir: Path, ident: str) -> dict:
    """composition.json, checked enough to launch from: every field a rerun reads has its type."""
    path = run_dir / COMPOSITION
    try:
        data, owner = files.read_json_owned(path, files.JSON_MAX)
    except FileNotFoundError:
        raise UserError(
            "id",
            ident,
            f"its record has no {COMPOSITION} (launched by an older train_multigpu, or never started)",
            f"its command.sh re-runs the launch: {RunPaths(run_dir).command}",
        ) from None
    except OSError as err:
        why = err.strerror or err
        raise UserError("id", ident, f"{path} cannot be read ({why})", "its command.sh re-runs the launch") from None
    if owner != os.geteuid():  # a shared run root: anyone who can write there can plant any record
        raise UserError(
            "id",
            ident,
            f"its record ({COMPOSITION}) belongs to uid {owner}, not to you (uid {os.geteuid()}): what another "
            "user's record says is never launched as you",
            "runs show ID prints its overrides: type the ones you want yourself",
        )
    if not isinstance(data, dict) or not all(isinstance(data.get(k), list) for k in _REQUIRED):
        raise UserError("id", ident, f"{path} has no overrides/script_args lists (edited?)", "fix or remove it")
    for key in _LISTS:
        value = data.get(key)
        if value is not None and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            raise UserError(
                "id", ident, f"{path}: {key} is not a list of strings ({_shown(value)}; edited?)", "fix or remove it"
            )
    if isinstance(data.get("num_gpus"), int) and not isinstance(data["num_gpus"], bool):
        data["num_gpus"] = str(data["num_gpus"])  # as typed: a string (an edited record may hold the number)
    for key in ("num_gpus", "cwd", TRAINER_DIR):
        value = data.get(key)
        if value is not None and (not isinstance(value, str) or "\0" in value):
            raise UserError(
                "id", ident, f"{path}: {key} is not a string ({_shown(value)}; edited?)", "fix or remove it"
            )
    return data


def _shown(value) -> str:
    """A recorded value in a message: JSON, cut short."""
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def run_id(root: Path, run_dir: Path) -> str:
    """The id ``runs`` lists for ``run_dir`` (its path under the root), else its absolute path."""
    try:
        return str(Path(run_dir).resolve().relative_to(Path(root).resolve()))
    except ValueError:
        return str(Path(run_dir).resolve())


def trainer_dir_of(run_dir: Path, composition: dict) -> str:
    """Where the run's training script wrote (TRAIN_MULTIGPU_RUN_DIR): a resumed run's trainer_dir,
    else what env.json says, else the run directory itself."""
    if isinstance(composition.get(TRAINER_DIR), str):
        return composition[TRAINER_DIR]
    with contextlib.suppress(OSError, AttributeError):
        value = files.read_json(RunPaths(run_dir).env, files.JSON_MAX).get(RUN_DIR_VAR)
        if isinstance(value, str) and value and "\0" not in value:
            return value
    return str(run_dir)


def _profile_and_library(run_dir: Path) -> tuple[str | None, str | None]:
    try:
        text = files.read_text(RunPaths(run_dir).config, files.CONFIG_MAX)
    except OSError:
        return None, None
    values = read.config_values(text, {"profile.name", "rl_library.name"})
    return values.get("profile.name"), values.get("rl_library.name")


def _rank0_log(run_dir: Path) -> str:
    """The head of rank 0's log (Isaac Lab says where it logs as it starts)."""
    with contextlib.suppress(OSError):
        return files.read_head(RunPaths(run_dir).rank_log(0), files.TEXT_MAX)
    return ""


# -- the composition again, overrides on top ------------------------------------------------------
def merged(composition: dict, typed: list[str]):
    """The recorded command line with ``typed`` on top: a key typed again replaces the recorded
    override of it (where it stood in the order of what reaches the script), a new key is added last;
    ``-- ARGS`` adds script arguments; secret values come from the environment."""
    from ..config import grammar

    new = grammar.parse(typed)
    new_keys = {override_key(o) for o in new.overrides}
    plus = {override_key(o) for o in composition["overrides"] if o.startswith("+") and not o.startswith("++")}
    line = grammar.CommandLine()
    line.hydra_flags = [*composition.get("hydra_flags", []), *new.hydra_flags]
    line.overrides = [o for o in composition["overrides"] if override_key(o) not in new_keys] + [
        f"+{o}" if override_key(o) in plus and not o.startswith(("+", "~")) else o for o in new.overrides
    ]
    line.overrides = with_secrets(line.overrides)
    line.script_args = [*composition["script_args"], *new.script_args]
    order = list(composition.get("order") or [])
    if any(o.startswith(grammar.PRESETS_KEY + ":") for o in new.order):
        order = [o for o in order if not o.startswith(grammar.PRESETS_KEY + ":")]
    order += [o for o in new.order if o != grammar.ARG and o not in order]
    line.order = _reordered(order, len(composition["script_args"]), len(new.script_args))
    nproc_typed = "launcher.nproc_per_node" in new_keys
    line.num_gpus = new.num_gpus if (new.num_gpus is not None or nproc_typed) else composition.get("num_gpus")
    return line


def _reordered(order: list[str], recorded_args: int, new_args: int) -> list[str]:
    """The typed order with exactly one ARG entry per script argument: the recorded ones where they
    were, the new ones last.

    >>> _reordered(["task", "", "seed", ""], 1, 1)
    ['task', '', 'seed', '']
    """
    from ..config import grammar

    out, seen = [], 0
    for entry in order:
        if entry == grammar.ARG:
            if seen >= recorded_args:
                continue
            seen += 1
        out.append(entry)
    return out + [grammar.ARG] * (recorded_args - seen + new_args)


def with_secrets(overrides: list[str]) -> list[str]:
    """A masked secret override (``+worker_env.HF_TOKEN=***``) with its value from the environment
    variable of the same name; one error naming every one that is not set."""
    from ..config import grammar

    out, missing = [], []
    for override in overrides:
        key, eq, value = override.partition("=")
        path = override_key(override)
        if eq and record.is_placeholder(value) and secrets.secret_key(path):
            # notify.url: the variable a submitted job reads it from (secrets.SECRET_KEYS)
            name = secrets.SECRET_KEYS.get(path) or path.rsplit(".", 1)[-1]
            if name in os.environ:
                override = f"{key}={grammar.quote(os.environ[name])}"
            else:
                missing.append((path, name))
        out.append(override)
    if missing:
        raise UserError(
            ", ".join(key for key, _ in missing),
            secrets.MASK,
            "the record keeps no secret values: set them in the environment before the rerun",
            "export " + " ".join(f"{name}=..." for _, name in missing) + ", or give +KEY=VALUE on the rerun's line",
        )
    return out


def _launch(args: argparse.Namespace, line, composition: dict, notes: dict) -> int:
    launch: Callable | None = getattr(args, "launch", None)
    if launch is None:
        raise UserError("runs", args.command, "needs the launcher (train_multigpu runs ...)")
    cwd = composition.get("cwd")
    command = ["runs", args.command, args.id, *args.overrides]
    if not isinstance(cwd, str) or not os.path.isdir(cwd):
        raise UserError("cwd", cwd, "the recorded working directory no longer exists", "recreate it, or launch anew")
    saved = os.getcwd()
    os.chdir(cwd)  # relative paths of the record (run_root, scripts) mean what they meant then
    try:
        return launch(line, command, notes)
    finally:
        os.chdir(saved)
