"""``train_multigpu runs``: the run records read back (docs/runs.md).

- ``cli``: the subcommand's argument parser and its commands (list, show, logs, stacks; rerun,
  resume and compare hand over to ``again`` and ``curves``).
- ``read``: one run directory → one :class:`~launcher.runs.read.RunInfo`; a run root → every run,
  sweeps and multi-node launches grouped; ``resolve`` turns an id (a unique prefix, ``last``) into a
  run directory. Standard library only: listing never imports Hydra.
- ``again``: rerun / resume a recorded launch. ``curves``: learning curves side by side.

``cli.py`` dispatches ``train_multigpu runs ...`` here before any Hydra work.
"""
