"""SLURM as a back end.

- ``env``: what SLURM tells a process about its allocation (pure; reads a mapping).
- ``launch``: ``launcher=slurm``: fills the topology of a multi-node launch from the allocation.
- ``batch``: renders the batch script from the schema's ``SlurmConfig`` (pure).
- ``submit``: ``submit=slurm``: checks the job, writes the script and runs ``sbatch``.

Imports ``config/``, ``checks``, ``probe`` and the leaves; never ``run/`` (the job runs the launcher
again on each node). Other back ends (``ray/``, ``k8s/``) get a subpackage of their own beside this
one. A change to "how a SLURM script is written" belongs in ``batch.py``.
"""
