"""train_multigpu: configuration-driven launcher for distributed RL training.

The package is laid out in the order a launch flows through it (README.md, "Layout")::

    cli ──► session ──► config/ ──► checks ──► probe ──► plan ──► run/      (run here)
                                                              └──► slurm/   (submit=slurm)
                                                              └──► ray_submit/ (submit=ray)
                           sweep/: -m sweeps (per-job values, lanes, the parallel runner)
                           record: the run record written (rundir: its names)

Import rules (tests/test_layout.py checks them):

- ``errors``, ``names``, ``paths``, ``secrets``, ``addresses``, ``tables``, ``files``, ``facts``,
  ``rundir`` (every path of a run directory, and how a launch ended) are leaves: any module may import
  them, they import only each other. No import cycle anywhere (lazy imports count): a shared name
  lives in a leaf.
- ``config/`` and the pure stages (``checks``, ``rendezvous``, ``plan``) never import ``run/``,
  ``sweep/``, ``slurm/``, ``record``, ``session`` or ``cli``.
- ``run/`` (processes and signals: the only code that starts, signals or kills a process or
  installs a signal handler) imports only the leaves and ``plan``'s data types;
  ``run/worker.py`` and ``run/watchdog.py`` run as separate processes and import nothing of the
  package beyond the standard library (the watchdog: ``run/process/procs.py``).
- ``slurm/``, ``ray_submit/`` and ``sweep/`` may use the stages before them; ``session`` may use
  everything; nothing imports ``cli``. A back end (``backends/``, ``slurm/``, ``k8s/``,
  ``ray_submit/``, ``ssh/``) imports neither ``session`` nor ``cli``: where it launches again (a SLURM
  job, a pod, a Ray job's entrypoint, a host) it runs the command-line entry, ``python -m launcher``.
- ``runs/`` (``train_multigpu runs``) is reached only from ``cli``; reading and listing records
  use the standard library, the leaves and ``record``'s names (no Hydra).
"""

__version__ = "0.1.0"
