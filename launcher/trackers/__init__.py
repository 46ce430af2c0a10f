"""Experiment trackers the launcher sets up (``tracker=wandb``, ``tracker=mlflow``; docs/trackers.md).

- :mod:`.identity`: a launch's identity in its trackers, ``trackers.json`` in the directory the
  training script writes to (``TRAIN_MULTIGPU_RUN_DIR``): made once, read again by every restart, a
  SLURM requeue and ``runs resume``, so the run id stays the launch's.
- :mod:`.wandb_env`: pure: the ``WANDB_*`` variables of a launch; the mode (``auto``: online when a
  key is given and W&B answers a bounded probe, else offline, said once).
- :mod:`.mlflow_runs`: the launcher's own MLflow client (imported only with ``tracker=mlflow``): the
  server probed before anything starts, one run per launch (a parent per ``-m`` sweep), its outcome
  at the end.
- :mod:`.launch`: what the local launch calls: ``check`` (dryrun), ``begin`` (the run directory
  made: the variables), ``end`` (how it ended).
"""
