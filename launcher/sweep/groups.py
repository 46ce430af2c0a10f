"""A sweep's points composed once per distinct choice of config groups.

Hydra composes every point of a ``-m`` sweep from scratch (``load_sweep_config``: the defaults
list, every YAML file merged, the overrides applied): about 65 ms a point, a minute for a
1,000-point sweep. Yet most points of a sweep differ only in values (``seed=1,2,3``): the config
groups they choose (``launcher=...``, ``presets=[...]``, ``+presets=x``, ``~presets``) are the same,
so the merged defaults are too. Hydra's own composition splits in the same two stages
(``ConfigLoaderImpl._load_configuration_impl``): the defaults list and the merge depend only on the
overrides that name a config group (Hydra's ``defaults_list.Overrides`` sorts them out: a key that
is a group and a value that is not a dict), and the other overrides are then applied in order by
``ConfigLoaderImpl._apply_overrides_to_config``. So here:

- each point's overrides are parsed by Hydra's parser (each distinct line once) and sorted by
  Hydra's ``Overrides``;
- the first point of each distinct tuple of group overrides is composed by Hydra itself
  (``load_configuration`` with the sweep's Hydra overrides and those group overrides only): the
  *base*, kept;
- every point is a copy of its base with its value overrides applied by Hydra's own
  ``_apply_overrides_to_config``, and the fields Hydra derives from the whole override list
  (``hydra.overrides.task``, ``hydra.job.override_dirname``) set as Hydra sets them.

The cost is one Hydra composition per distinct group choice plus a copy and a few updates per
point: linear in the points. ``tests/test_sweep_groups.py`` proves the result equal to Hydra's
``load_sweep_config`` for every point of sweeps over mixed group and value overrides,
interpolations, ``+``/``~``/``++`` overrides and presets. A point whose overrides hold a ``hydra.``
key (a ``hydra.sweeper.params`` entry) is composed by Hydra whole, as before.
"""

from __future__ import annotations

import copy
import pickle
from collections.abc import Sequence
from typing import NamedTuple


class Composed(NamedTuple):
    """A point's configs and where they come from: ``base`` (its group override lines: the points of
    one base differ only in the top-level keys their value overrides set, ``touched``); None where
    Hydra composed the point whole (or the job's config is a copy of the point's)."""

    config: object
    job_config: object
    base: tuple[str, ...] | None = None
    touched: frozenset[str] = frozenset()


class Composer:
    """Composes the points of one sweep (``master``: the sweep's config, as hydra.main's -m makes it)."""

    def __init__(self, loader, master) -> None:
        from omegaconf import OmegaConf

        self.loader = loader
        self.master = master
        self.config_name = master.hydra.job.config_name
        self.hydra_lines = list(OmegaConf.to_container(master.hydra.overrides.hydra))
        self._parsed: dict[str, object] = {}
        self._bases: dict[tuple[str, ...], tuple[bytes, bytes]] = {}
        self._repo = None
        self.hydra_compositions = 0  # how many times Hydra composed (tests count them)

    def _parse(self, lines: Sequence[str]) -> list:
        """Hydra's parse of each line, each distinct line parsed once."""
        from hydra.core.override_parser.overrides_parser import OverridesParser

        missing = [line for line in lines if line not in self._parsed]
        if missing:
            for line, parsed in zip(missing, OverridesParser.create().parse_overrides(missing)):
                self._parsed[line] = parsed
        return [self._parsed[line] for line in lines]

    def _group_lines(self, parsed: list) -> tuple[list, tuple[str, ...]]:
        """(value overrides, group override lines) as Hydra's defaults list sorts them."""
        from hydra._internal.defaults_list import Overrides

        if self._repo is None:
            _, repo = self.loader._parse_overrides_and_create_caching_repo(self.config_name, self.hydra_lines)
            self._repo = _KnownGroups(repo)
        values = Overrides(self._repo, parsed).config_overrides
        chosen = {id(o) for o in values}
        return values, tuple(o.input_line for o in parsed if id(o) not in chosen)

    def _base(self, groups: tuple[str, ...]) -> tuple[bytes, bytes]:
        """Hydra's composition with the sweep's Hydra overrides and these group overrides, once; kept
        pickled (a copy is an unpickling: several times faster than ``copy.deepcopy`` of a
        DictConfig), whole and without its ``hydra`` node."""
        from hydra.types import RunMode
        from omegaconf import OmegaConf

        if groups not in self._bases:
            self.hydra_compositions += 1
            base = self.loader.load_configuration(
                config_name=self.config_name, overrides=[*self.hydra_lines, *groups], run_mode=RunMode.RUN
            )
            OmegaConf.copy_cache(from_config=self.master, to_config=base)
            self._bases[groups] = (pickle.dumps(base), pickle.dumps(_without_hydra(base)))
        return self._bases[groups]

    def compose(self, point_overrides: Sequence[str]):
        """(the point's config, its job config): the first equal to Hydra's
        ``load_sweep_config(master, point_overrides)``, the second the same without its ``hydra`` node."""
        return tuple(self.point(point_overrides))[:2]

    def point(self, point_overrides: Sequence[str]) -> Composed:
        """:meth:`compose`'s configs, with their base and the top-level keys the point's value overrides set."""
        from hydra._internal.config_loader_impl import ConfigLoaderImpl, get_overrides_dirname
        from omegaconf import OmegaConf

        parsed = self._parse(list(point_overrides))
        if not any(o.is_hydra_override() for o in parsed):
            values, groups = self._group_lines(parsed)
            whole, job_only = self._base(groups)
            cfg = pickle.loads(whole)
            ConfigLoaderImpl._apply_overrides_to_config(values, cfg)
            job = cfg.hydra.job
            cfg.hydra.overrides.task = [o.input_line for o in parsed]
            job.override_dirname = get_overrides_dirname(
                overrides=parsed,
                kv_sep=job.config.override_dirname.kv_sep,
                item_sep=job.config.override_dirname.item_sep,
                exclude_keys=job.config.override_dirname.exclude_keys,
            )
            OmegaConf.copy_cache(from_config=self.master, to_config=cfg)
            try:  # the same overrides on the copy without the hydra node: the job's config
                job_config = pickle.loads(job_only)
                ConfigLoaderImpl._apply_overrides_to_config(values, job_config)
                OmegaConf.copy_cache(from_config=self.master, to_config=job_config)
                return Composed(cfg, job_config, groups, frozenset(o.key_or_group.split(".")[0] for o in values))
            except Exception:  # an override that reads the hydra node (~key=value, +key): copy the whole
                pass
        else:  # a hydra.* key swept (hydra.sweeper.params): Hydra composes the point
            self.hydra_compositions += 1
            cfg = self.loader.load_sweep_config(self.master, list(point_overrides))
        return Composed(cfg, _without_hydra(cfg))


class _KnownGroups:
    """A config repository's ``group_exists`` (all that Hydra's ``Overrides`` asks of it), each key
    looked up once a sweep: the search of the repository's sources for ``seed`` was 0.3 ms a point."""

    def __init__(self, repo) -> None:
        self._repo = repo
        self._known: dict[str, bool] = {}

    def group_exists(self, key: str) -> bool:
        if key not in self._known:
            self._known[key] = self._repo.group_exists(key)
        return self._known[key]


def _without_hydra(cfg):
    """A copy of ``cfg`` without its ``hydra`` node (a job's config)."""
    from omegaconf import open_dict, read_write

    job = copy.deepcopy(cfg)
    with read_write(job), open_dict(job):
        del job["hydra"]
    return job
