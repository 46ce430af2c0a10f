"""``-m``: expand a sweep into its points with Hydra's own parser and config loader, and hand each
point's config to the job function, with the same HydraConfig ``hydra.main`` would give it.

Why not ``hydra.main``'s multirun: Hydra's BasicSweeper writes ``<sweep dir>/multirun.yaml`` (every
override in clear, secrets included) and BasicLauncher creates every job's directory before the
job function runs, so a dry run, or a sweep refused by a check, left ``runs/multirun/<t>/``
behind. Here nothing is written: a job creates its own run directory when it really starts.
The points are those BasicSweeper makes (its ``split_arguments``: the product of the sweep
overrides, in order); job ``k`` gets ``hydra.job.num=k`` and ``hydra.runtime.output_dir`` =
``hydra.sweep.dir/hydra.sweep.subdir``, resolved as Hydra resolves them (one ``${now:}`` for the
whole sweep). Each point is composed by :mod:`.groups`: Hydra composes once per distinct
choice of config groups, each point's value overrides applied by Hydra's own code (proved equal to
``load_sweep_config`` point by point: tests/test_sweep_groups.py).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from ..errors import UserError
from . import groups

# Hydra flags this module handles; any other (--cfg, --info, --help, --config-path, ...) goes to hydra.main
FLAGS = ("-m", "--multirun", "--config-dir", "-cd")


@dataclass(frozen=True)
class Point:
    num: int
    overrides: tuple[str, ...]  # the point's overrides (hydra.overrides.task)
    config: object  # the DictConfig, without its hydra node, as a job function receives it
    hydra_config: object  # the DictConfig with the hydra node, for HydraConfig
    base: tuple[str, ...] | None = None  # groups.Composed's: which points' typed configs share keys
    touched: frozenset[str] = frozenset()


def handles(hydra_flags: Sequence[str]) -> bool:
    """Whether a command line with these Hydra flags is a sweep this module runs."""
    flags = [f for i, f in enumerate(hydra_flags) if i == 0 or hydra_flags[i - 1] not in ("--config-dir", "-cd")]
    return bool({"-m", "--multirun"} & set(flags)) and set(flags) <= set(FLAGS)


def searchpath_with(config_dir: str | None, searchpath: str) -> str:
    """The ``hydra.searchpath=[...]`` override with ``--config-dir`` first, as ``hydra.main`` puts it.

    >>> searchpath_with("/", "hydra.searchpath=['file:///a']")
    "hydra.searchpath=['file:///','file:///a']"
    """
    if config_dir is None:
        return searchpath
    from hydra.errors import SearchPathException

    from ..config import grammar

    path = os.path.abspath(config_dir)
    if not os.path.isdir(path):
        raise SearchPathException(f"Additional config directory '{path}' not found")
    head, _, rest = searchpath.partition("[")
    return f"{head}[{grammar.quote('file://' + path)}" + ("," + rest if rest != "]" else "]")


@contextlib.contextmanager
def collector_held() -> Iterator[None]:
    """Python's cyclic garbage collector held while a sweep's points are composed and prepared, and
    what they made frozen after (``gc.freeze``: the collector is on again, but never walks them;
    :func:`expand` unfreezes them when the sweep ends). Every point's configs stay alive until the
    sweep ends, and each full collection walks every live object: 13 of them during a 1,000-point
    sweep took a quarter of its CPU time, more the more points. Re-enabled alone, the collector
    walked them all again at once (the millions of objects made while it was off are all young):
    9 s of a held 1,000-point submission's 31 (a loaded machine), in the 8 collections after the
    preparation. What a point leaves for the collector is a few temporaries (about 7% of the
    objects): they wait until the sweep ends."""
    import gc

    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was:
            gc.enable()


@contextlib.contextmanager
def collector_released() -> Iterator[None]:
    """What :func:`collector_held` froze during the block is the collector's again after it (its
    oldest generation: collected at the next full collection, or left to the process's exit)."""
    import gc

    try:
        yield
    finally:
        gc.unfreeze()


def use(config) -> None:
    """Make ``config`` (a point's, with its ``hydra`` node) the HydraConfig: what
    ``HydraConfig.set_config`` leaves (the hydra node read-only, alone in a config of its own, its
    parent the point's config, so its interpolations resolve there), without its deep copy of the
    hydra node (3 ms a point): the point's config is this sweep's own and the node is read-only, so
    the node itself is placed (OmegaConf's ``no_deepcopy_set_nodes``, as its merge does).
    tests/test_sweep_groups.py compares the two."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import DictConfig, OmegaConf, flag_override

    node = config._get_node("hydra")
    OmegaConf.set_readonly(node, True)
    view = DictConfig(content={})
    with flag_override(view, "no_deepcopy_set_nodes", True):
        view["hydra"] = node
    node._set_parent(config)
    HydraConfig.instance().cfg = view


def selected(config, key: str, trees: dict[str, object]):
    """``OmegaConf.select(config, key)`` (``key``: a dotted path to a dict's item), an interpolation's
    text parsed once for all the sweep's points (``trees``: text -> parse tree) instead of at every
    select (hydra.sweep.dir and subdir: 0.5 ms of a point's 9 in a 1,000-point SLURM submission, both
    parsed again for every point). The rest is OmegaConf's own ``select``: the same resolution."""
    from omegaconf import DictConfig, OmegaConf
    from omegaconf._utils import _get_value
    from omegaconf.grammar_parser import parse

    parent_key, _, leaf = key.rpartition(".")
    parent = OmegaConf.select(config, parent_key)
    node = parent._get_node(leaf) if isinstance(parent, DictConfig) else None
    if node is None or not node._is_interpolation():
        return OmegaConf.select(config, key)
    text = node._value()
    if text not in trees:
        trees[text] = parse(text)
    value = parent._resolve_interpolation_from_parse_tree(
        parent=parent, key=leaf, value=node, parse_tree=trees[text], throw_on_resolution_failure=True, memo=set()
    )
    return None if value is None or value._is_missing() else _get_value(value)


@contextlib.contextmanager
def expand(config_name: str, overrides: Sequence[str], job_name: str) -> Iterator[list[Point]]:
    """Every point of the sweep, composed; Hydra stays initialised while the jobs run."""
    from hydra import initialize
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.types import RunMode
    from omegaconf import OmegaConf, open_dict, read_write

    with initialize(config_path=None, version_base="1.3", job_name=job_name), collector_released():
        hydra = GlobalHydra.instance().hydra
        loader = hydra.config_loader
        # hydra.main's -m adds hydra.mode=MULTIRUN too: the points inherit it (HydraConfig.mode)
        master = hydra.compose_config(config_name, [*overrides, "hydra.mode=MULTIRUN"], run_mode=RunMode.MULTIRUN)
        OmegaConf.select(master, "hydra.sweep.dir")  # resolved once: its ${now:} is cached for every point
        task = list(OmegaConf.to_container(master.hydra.overrides.task, resolve=False))
        params = [f"{key}={value}" for key, value in (master.hydra.sweeper.get("params") or {}).items()]
        parsed = OverridesParser.create(config_loader=loader).parse_overrides(params + task)
        for override in parsed:  # a sweep over nothing would run no job and exit 0 as if it had
            if override.is_sweep_override() and next(iter(override.sweep_string_iterator()), None) is None:
                raise UserError(
                    override.input_line.split("=", 1)[0],
                    override.input_line.split("=", 1)[1],
                    "sweeps over no values: the -m sweep would run no job",
                    "give it at least one value",
                )
        composer = groups.Composer(loader, master)
        trees: dict[str, object] = {}
        points = []
        with collector_held():
            for num, point_overrides in enumerate(BasicSweeper.split_arguments(parsed, None)[0]):
                config, job_config, base, touched = composer.point(point_overrides)
                with open_dict(config):
                    config.hydra.job.id = num
                    config.hydra.job.num = num
                sweep_dir, subdir = (selected(config, f"hydra.sweep.{key}", trees) for key in ("dir", "subdir"))
                output_dir = os.path.join(str(sweep_dir), str(subdir))
                with read_write(config.hydra.runtime), open_dict(config.hydra.runtime):
                    config.hydra.runtime.output_dir = os.path.abspath(output_dir)
                task = tuple(OmegaConf.to_container(config.hydra.overrides.task))
                points.append(Point(num, task, job_config, config, base, touched))
        yield points
