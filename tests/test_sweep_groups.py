"""The fast composition of a sweep's points (launcher/sweep/groups.py: Hydra composes once per distinct
choice of config groups, each point's value overrides applied by Hydra's own code) equals Hydra's
own ``load_sweep_config`` for every point, and composes with Hydra once per distinct group choice."""

from __future__ import annotations

import os

import pytest
from hydra import initialize
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import ConfigCompositionException
from hydra.types import RunMode
from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict, read_write

from launcher.config import compose, profiles
from launcher.sweep import groups, points

# group overrides (launcher=, presets=, +presets=, ~presets), value overrides (seed=, ++, +key),
# interpolations (run_name=${task}), a dict value on a group key's neighbour, a list value
SWEEPS = {
    "mixed": [
        "launcher=single_node,skrl_jax",
        "presets=[debug],[]",
        "seed=1",
        "run_name=${task}_x,plain",
        "+worker_env.FOO=a",
        "++launcher.grace_period=5,7.5",
        "profile=examples",
    ],
    "add_and_delete": ["+presets=debug", "~launcher", "seed=range(0,3)", "++worker_env={A:'1'},{B:'2'}"],
    "values_only": ["seed=range(0,5)", "presets=[debug]", "task=CartPole-v1,Pendulum-v1"],
    # a group's dict that reads a swept key (its typed value is not an earlier point's)
    "interpolated_dicts": ["presets=[tagged]", "seed=1,2,3", "++slurm.partition=p,q"],
}
# the user's preset the last sweep chooses (./.train_multigpu/presets/)
TAGGED = "# @package _global_\nslurm:\n  job_name: run_${seed}\nworker_env:\n  SEED: s${seed}\nrestart:\n  max: 1\n"


def _nodes(node, path=""):
    """(path, node class, object type, flags) of every node, in order."""
    yield (
        path,
        type(node).__name__,
        OmegaConf.get_type(node) if isinstance(node, DictConfig) else None,
        (
            node._get_node_flag("readonly"),
            node._get_node_flag("struct"),
        ),
    )
    if isinstance(node, DictConfig) and not (node._is_missing() or node._is_none() or node._is_interpolation()):
        for key in node.keys():
            yield from _nodes(node._get_node(key), f"{path}.{key}")
    elif isinstance(node, ListConfig) and not (node._is_missing() or node._is_none() or node._is_interpolation()):
        for index in range(len(node)):
            yield from _nodes(node._get_node(index), f"{path}[{index}]")


def same(ours, hydras) -> None:
    assert OmegaConf.to_yaml(ours) == OmegaConf.to_yaml(hydras)
    assert list(_nodes(ours)) == list(_nodes(hydras))
    assert OmegaConf.to_container(ours, resolve=False) == OmegaConf.to_container(hydras, resolve=False)


def _expand(tmp_path, monkeypatch, sweep: list[str]):
    monkeypatch.chdir(tmp_path)
    compose.register()
    searchpath = profiles.searchpath_override(os.environ, str(tmp_path))
    with initialize(config_path=None, version_base="1.3", job_name="t"):
        loader = GlobalHydra.instance().hydra.config_loader
        master = GlobalHydra.instance().hydra.compose_config(
            compose.CONFIG_NAME, [searchpath, *sweep, "hydra.mode=MULTIRUN"], run_mode=RunMode.MULTIRUN
        )
        task = list(OmegaConf.to_container(master.hydra.overrides.task))
        parsed = OverridesParser.create(config_loader=loader).parse_overrides(task)
        yield loader, master, BasicSweeper.split_arguments(parsed, None)[0]


@pytest.mark.parametrize("name", sorted(SWEEPS))
def test_every_point_equals_hydras_composition(tmp_path, monkeypatch, name):
    (tmp_path / ".train_multigpu" / "presets").mkdir(parents=True)
    (tmp_path / ".train_multigpu" / "presets" / "tagged.yaml").write_text(TAGGED)
    for loader, master, split in _expand(tmp_path, monkeypatch, SWEEPS[name]):
        composer = groups.Composer(loader, master)
        typing, kept = compose.Typing(), 0  # the sweep's typed configs, as the session makes them
        for point in split:
            ours, job, base, touched = composer.point(point)
            kept += bool(typing.kept(base, touched)[1])
            typed = compose.to_typed(job, None, typing, base, touched)
            hydras = loader.load_sweep_config(master, list(point))
            same(ours, hydras)
            without = OmegaConf.masked_copy(hydras, [k for k in hydras if k != "hydra"])
            hydras_job = hydras.copy()
            with read_write(hydras_job), open_dict(hydras_job):
                del hydras_job["hydra"]
            same(job, hydras_job)
            assert OmegaConf.to_yaml(job) == OmegaConf.to_yaml(without)
            assert typed == compose.to_typed(job) == compose.to_typed(hydras_job) == OmegaConf.to_object(hydras_job)
            if name == "interpolated_dicts":
                assert (typed.slurm.job_name, typed.worker_env["SEED"]) == (f"run_{typed.seed}", f"s{typed.seed}")
        distinct = {
            tuple(o for o in p if o.split("=")[0].lstrip("+~") in ("launcher", "presets", "profile")) for p in split
        }
        assert composer.hydra_compositions == len(distinct) < len(split)
        assert kept == len(split) - len(distinct)  # every point but each base's first took keys from it


def test_a_bad_value_override_fails_as_hydras_does(tmp_path, monkeypatch):
    for loader, master, split in _expand(tmp_path, monkeypatch, ["launcher.no_such_key=1,2"]):
        composer = groups.Composer(loader, master)
        with pytest.raises(ConfigCompositionException) as ours:
            composer.compose(split[0])
        with pytest.raises(ConfigCompositionException) as hydras:
            loader.load_sweep_config(master, list(split[0]))
        assert str(ours.value) == str(hydras.value)


def test_points_compose_hydra_once_per_group_choice_and_parse_each_line_once(tmp_path, monkeypatch):
    """A 200-point sweep over values: one Hydra composition, each distinct override line parsed once."""
    monkeypatch.chdir(tmp_path)
    parses = []
    real = OverridesParser.parse_overrides

    def counted(self, overrides):
        parses.extend(overrides)
        return real(self, overrides)

    monkeypatch.setattr(OverridesParser, "parse_overrides", counted)
    calls = []
    real_compose = groups.Composer._base

    def counted_base(self, chosen):
        calls.append(chosen)
        return real_compose(self, chosen)

    monkeypatch.setattr(groups.Composer, "_base", counted_base)
    compose.register()
    searchpath = profiles.searchpath_override(os.environ, str(tmp_path))
    with points.expand(compose.CONFIG_NAME, [searchpath, "seed=range(0,200)", "presets=[debug]"], "t") as found:
        assert [p.config.seed for p in found] == list(range(200))
        assert len({id(p.config) for p in found}) == 200
    assert len(set(calls)) == 1
    point_lines = [line for line in parses if line.startswith("seed=") and "range" not in line]
    assert len(point_lines) == len(set(point_lines)) == 200


def test_a_points_hydra_config_is_what_set_config_makes_of_it(tmp_path, monkeypatch):
    """points.use (the point's hydra node placed, not copied) leaves HydraConfig as Hydra's
    ``set_config`` does: the same nodes, types and flags, interpolations into the point's config
    (``${run_root}`` in hydra.sweep.dir) and from it (``${hydra:job.num}``) resolving the same."""
    import copy

    from hydra.core.hydra_config import HydraConfig

    monkeypatch.chdir(tmp_path)
    compose.register()
    searchpath = profiles.searchpath_override(os.environ, str(tmp_path))
    sweep = [searchpath, "launcher=single_node,skrl_jax", "run_root=a,b", "run_name=${hydra:job.num}_x", "seed=1,2"]
    with points.expand(compose.CONFIG_NAME, sweep, "t") as found:
        assert len(found) == 8
        for point in found:
            HydraConfig.instance().set_config(copy.deepcopy(point.hydra_config))
            hydras = HydraConfig.instance().cfg
            theirs = (HydraConfig.get().sweep.dir, HydraConfig.get().runtime.output_dir, compose.to_typed(point.config))
            points.use(point.hydra_config)
            ours = HydraConfig.instance().cfg
            assert ours is not hydras
            same(ours, hydras)
            assert ours.hydra._get_parent() is point.hydra_config
            mine = (HydraConfig.get().sweep.dir, HydraConfig.get().runtime.output_dir, compose.to_typed(point.config))
            assert mine == theirs
            assert mine[2].run_name == f"{point.num}_x" and mine[0].startswith(mine[2].run_root + "/multirun/")


def test_each_points_output_dir_is_hydras_and_the_sweep_dir_is_parsed_once(tmp_path, monkeypatch):
    """A point's output directory is OmegaConf.select's hydra.sweep.dir / hydra.sweep.subdir (what
    Hydra's run_job makes of them), also where points change what they read (run_root, a
    subdir that reads a swept value, a group); the interpolations' texts are parsed once a sweep,
    not once a point."""
    from omegaconf import base, grammar_parser

    import launcher.sweep.points as points_module

    parsed: list[str] = []
    real = grammar_parser.parse

    def counted(text, *args, **kwargs):
        parsed.append(text)
        return real(text, *args, **kwargs)

    monkeypatch.setattr(grammar_parser, "parse", counted)
    monkeypatch.setattr(base, "parse", counted)  # what OmegaConf's own resolution calls
    monkeypatch.chdir(tmp_path)
    compose.register()
    searchpath = profiles.searchpath_override(os.environ, str(tmp_path))
    sweeps = [
        ["seed=range(0,30)", "presets=[debug]"],
        ["launcher=single_node,skrl_jax", "run_root=a,b", "seed=1,2"],
        ["hydra.sweep.subdir=s${seed}_${hydra.job.num}", "seed=3,4"],
    ]
    for sweep in sweeps:
        parsed.clear()
        with points_module.expand(compose.CONFIG_NAME, [searchpath, *sweep], "t") as found:
            by_expand = list(parsed)
            for point in found:
                config = point.hydra_config
                hydras = os.path.join(
                    str(OmegaConf.select(config, "hydra.sweep.dir")),
                    str(OmegaConf.select(config, "hydra.sweep.subdir")),
                )
                assert config.hydra.runtime.output_dir == os.path.abspath(hydras)
        if sweep[0].startswith("seed"):
            assert len(found) == 30
            text = found[0].hydra_config.hydra.sweep._get_node("dir")._value()
            assert by_expand.count(text) == 2, by_expand  # the sweep's own (its ${now:} cached), then the points'
    assert {p.hydra_config.hydra.runtime.output_dir.rsplit("/", 1)[1] for p in found} == {"s3_0", "s4_1"}
