"""SLURM as a back end.

- ``env``: what SLURM tells a process about its allocation (pure; reads a mapping).
- ``launch``: ``launcher=slurm``: fills the topology of a multi-node launch from the allocation.
- ``batch``: renders the batch script from the schema's ``SlurmConfig`` (pure).
- ``backend``: ``submit=slurm`` as a Backend: dryrun (the job's checks and its script), submit
  (``sbatch``; a sweep is one job array), describe (squeue/sacct/scontrol), logs, cancel (scancel).
- ``submit``: the pure helpers it uses: the job's command, the planned allocation, the secrets check,
  the sweep's summary table.

Imports ``config/``, ``checks``, ``probe`` and the leaves; never ``run/`` (the job runs the launcher
again on each node). Other back ends (``ray/``, ``k8s/``) get a subpackage of their own beside this
one. A change to "how a SLURM script is written" belongs in ``batch.py``.
"""
