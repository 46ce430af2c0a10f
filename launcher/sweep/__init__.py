"""``-m`` sweeps: what differs per job, and running the jobs of a parallel sweep.

- ``points``: expands ``-m`` into its points with Hydra's own parser and config loader (writes nothing).
- ``groups``: a point composed from Hydra's composition of its config-group choice, once per choice.
- ``lanes``: pure: per-job rendezvous values, disjoint device sets (lanes), the summary table.
- ``parallel``: runs a parallel sweep's planned jobs, lane by lane, on threads (uses ``run/``).
- ``curves``: the jobs' learning curves in one PNG (metrics.csv; matplotlib only when drawing).

- ``state``: a sweep's own state: its signal handling and each job's summary row (:class:`state.Sweep`).

How each job ran is its back end's (the local launch: :mod:`launcher.backends.local`, which also hands
out the JAX coordinator ports).
"""
