"""What a ``-m`` sweep costs per point, counted rather than timed (timings on a shared machine are
noise): a ``submit=slurm`` sweep of 10 and of 30 points (other seeds), in-process, dry run. Per
point it unpickles its config twice (the job's and the whole, with the hydra node), dumps one
top-level key of its ``config.yaml`` (the swept one: the others' texts are kept) and converts 5 of
its config's 34 typed dicts with ``OmegaConf.to_object`` (the others, with no interpolation in
them, are an earlier point's: compose.Typing); it looks up no config group (``seed``: once a sweep),
builds no OmegaConf tree from the typed config
(``config.yaml`` was ``OmegaConf.structured`` + ``to_yaml``: 26 ms a point), copies no hydra node
(``HydraConfig.set_config``'s ``masked_copy``: 3 ms a point), and Hydra composes once. Nothing in
the sweep grows faster than the points (benchmarks/sweep_points.py times it)."""

from __future__ import annotations

import collections
import functools
import pickle

import yaml
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.config_repository import CachingConfigRepository
from omegaconf import OmegaConf

from inproc import environment, run_main


def _counted(monkeypatch, counts, owner, name, label):
    real = getattr(owner, name)

    @functools.wraps(real)
    def wrapper(*args, **kwargs):
        counts[label] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, wrapper)


def _sweep(monkeypatch, tmp_path, points: int, first: int) -> collections.Counter:
    counts: collections.Counter = collections.Counter()
    with monkeypatch.context() as patch:
        _counted(patch, counts, OmegaConf, "structured", "OmegaConf.structured")
        _counted(patch, counts, OmegaConf, "masked_copy", "OmegaConf.masked_copy")
        _counted(patch, counts, OmegaConf, "to_yaml", "OmegaConf.to_yaml")
        _counted(patch, counts, OmegaConf, "to_object", "OmegaConf.to_object")
        _counted(patch, counts, pickle, "loads", "pickle.loads")
        _counted(patch, counts, yaml, "dump", "yaml.dump")
        _counted(patch, counts, ConfigLoaderImpl, "load_configuration", "Hydra compositions")
        _counted(patch, counts, CachingConfigRepository, "group_exists", "config group look-ups")
        folder = tmp_path / f"{first}-{points}"
        folder.mkdir()
        result = run_main(
            ["-m", f"seed=range({first},{first + points})", "presets=[debug]", "submit=slurm", "dry_run=true"],
            str(folder),
            environment(str(tmp_path)),
        )
    assert result.returncode == 0, result.stderr
    assert f"# job array of {points} task(s)" in result.stdout
    assert not list(folder.iterdir())  # a dry run writes nothing
    return counts


def test_a_sweeps_cost_per_point_is_counted_and_constant(monkeypatch, tmp_path):
    _sweep(monkeypatch, tmp_path, 3, 0)  # what is done once per process (caches) is done
    small, large = _sweep(monkeypatch, tmp_path, 10, 1000), _sweep(monkeypatch, tmp_path, 30, 2000)
    labels = ["OmegaConf.structured", "OmegaConf.masked_copy", "OmegaConf.to_yaml", "pickle.loads", "yaml.dump"]
    labels += ["OmegaConf.to_object", "config group look-ups"]
    per_point = {label: (large[label] - small[label]) / 20 for label in [*labels, "Hydra compositions"]}
    assert per_point == {
        "OmegaConf.structured": 0,
        "OmegaConf.masked_copy": 0,
        "OmegaConf.to_yaml": 0,
        "pickle.loads": 2,
        "yaml.dump": 1,
        "OmegaConf.to_object": 5,
        "config group look-ups": 0,
        "Hydra compositions": 0,
    }, (small, large)
    assert small["Hydra compositions"] <= 2, small  # the sweep's own, and its one choice of config groups


def test_the_collector_is_held_while_points_are_composed_and_prepared(monkeypatch, tmp_path):
    """Every point's configs live until the sweep ends; a full collection walks them all (13 during a
    1,000-point sweep: a quarter of its CPU time). The collector is off while the points are composed
    and prepared, and on again after, also when a point is refused."""
    import gc

    from launcher.session import Session
    from launcher.sweep import groups

    seen: list[tuple[str, bool]] = []
    for owner, name in ((groups.Composer, "point"), (Session, "prepare")):
        real = getattr(owner, name)

        def wrapper(*args, _real=real, _name=name, **kwargs):
            seen.append((_name, gc.isenabled()))
            return _real(*args, **kwargs)

        monkeypatch.setattr(owner, name, wrapper)
    assert gc.isenabled()
    for extra, code in ((["seed=1,2,3"], 0), (["seed=1,2", "sweep.parallel=0"], 2)):
        seen.clear()
        folder = tmp_path / str(code)
        folder.mkdir()
        result = run_main(["-m", "presets=[debug]", "dry_run=true", *extra], str(folder), environment(str(tmp_path)))
        assert result.returncode == code, result.stderr
        assert [name for name, _ in seen] == ["point"] * (len(extra[0].split(","))) + ["prepare"]
        assert not any(enabled for _, enabled in seen), seen
        assert gc.isenabled()


def test_the_points_are_frozen_while_the_jobs_are_submitted(monkeypatch, tmp_path):
    """Re-enabled alone, the collector walked every point's configs again in its first collections
    after the preparation (they were all young: a third of a 1,000-point submission's time). They
    are frozen while the jobs are submitted (gc.freeze: never walked), the collector on, and the
    collector's again when the sweep ends, also when a point is refused."""
    import gc

    from launcher.session import Session

    during: list[tuple[int, bool]] = []
    real = Session.execute

    def execute(self, prepared):
        during.append((gc.get_freeze_count(), gc.isenabled()))
        return real(self, prepared)

    monkeypatch.setattr(Session, "execute", execute)
    before = gc.get_freeze_count()
    for extra, code in ((["seed=range(0,20)"], 0), (["seed=1,2", "sweep.parallel=0"], 2)):
        during.clear()
        folder = tmp_path / str(code)
        folder.mkdir()
        result = run_main(["-m", "presets=[debug]", "dry_run=true", *extra], str(folder), environment(str(tmp_path)))
        assert result.returncode == code, result.stderr
        if code == 0:
            [(frozen, enabled)] = during
            assert frozen > before + 20 * 1000 and enabled, during  # thousands of objects a point
        assert gc.get_freeze_count() == before and gc.isenabled()


def test_a_sweep_leaves_its_configs_to_the_process_exit(tmp_path):
    """The interpreter's last collection freed a finished sweep's configs one by one (3.5 s after 1,000
    points): the entry freezes them for the exit to free instead (what gc.get_freeze_count says in
    an atexit handler, which still runs); a single launch's exit is left as it was."""
    import subprocess
    import sys

    from conftest import clean_env

    probe = (
        "import atexit, gc, sys\n"
        "atexit.register(lambda: print('frozen', gc.get_freeze_count(), file=sys.stderr))\n"
        "from launcher.cli import entry\n"
        "sys.argv = ['train_multigpu', *sys.argv[1:]]\n"
        "entry()\n"
    )
    for args, frozen in ((["-m", "seed=range(0,20)"], True), (["seed=3"], False)):
        done = subprocess.run(
            [sys.executable, "-c", probe, *args, "presets=[debug]", "dry_run=true"],
            cwd=tmp_path,
            env=clean_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        count = int(done.stderr.split("frozen ")[-1].split()[0])
        assert (count > 10_000) if frozen else count == 0, (args, count)
