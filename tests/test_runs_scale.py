"""``runs`` over many run directories: the listing's work grows with the runs, never with the runs
times the groups (counted, not timed; benchmarks/runs_listing.py times 10,000)."""

from __future__ import annotations

import subprocess
import sys

from conftest import clean_env
from launcher.runs import show
from launcher.runs.read import RunInfo


class Counted(list):
    """A list that counts the items handed out, by iteration or by index and slice."""

    handed = 0

    def __iter__(self):
        for item in super().__iter__():
            Counted.handed += 1
            yield item

    def __getitem__(self, index):
        found = super().__getitem__(index)
        Counted.handed += len(found) if isinstance(index, slice) else 1
        return found


def test_the_table_looks_at_each_run_a_bounded_number_of_times():
    """Before: each group's members were gathered by scanning every later run (19 s of 52 for
    10,000 runs in 1,167 groups): here 600 sweeps of 2 jobs and 600 single runs."""
    runs = []
    for index in range(600):
        runs += [
            RunInfo(id=f"multirun/s{index}/{job}", run_dir=f"/r/{index}/{job}", group=f"multirun/s{index}", job=job)
            for job in range(2)
        ]
        runs.append(RunInfo(id=f"single{index}", run_dir=f"/r/single{index}"))
    Counted.handed = 0
    lines = show.listing_lines(Counted(runs))
    assert Counted.handed <= 2 * len(runs)
    assert len(lines) == 1 + len(runs) + 600  # the header, one row per run and per sweep
    first = [line.split()[0] for line in lines[1:5]]
    assert first == ["multirun/s0", "multirun/s0/0", "multirun/s0/1", "single0"]


def test_runs_imports_none_of_the_launchs_modules(tmp_path):
    """``train_multigpu runs`` goes from __main__ straight to launcher/runs/: no Hydra, no OmegaConf,
    no plan, session or config (before: launcher/cli.py imported them all first, 0.22 of an empty
    root's 0.12 CPU seconds now)."""
    argv = [sys.executable, "-X", "importtime", "-m", "launcher", "runs", "--root", str(tmp_path)]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=clean_env(), cwd=tmp_path)
    assert result.returncode == 0 and result.stdout.startswith("no runs under"), result
    imported = {line.split("|")[-1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")}
    assert "launcher.runs.show" in imported
    heavy = {"hydra", "omegaconf", "launcher.plan", "launcher.session", "launcher.cli", "launcher.config"}
    assert not heavy & imported, sorted(heavy & imported)
