"""``-m`` sweeps: what differs per job, and running the jobs of a parallel sweep.

- ``points``: expands ``-m`` into its points with Hydra's own parser and config loader (writes nothing).
- ``lanes``: pure: per-job rendezvous values, disjoint device sets (lanes), the summary table.
- ``parallel``: runs a parallel sweep's planned jobs, lane by lane, on threads (uses ``run/``).
- ``curves``: the jobs' learning curves in one PNG (metrics.csv; matplotlib only when drawing).

The state of a sweep (results, queued jobs, ports handed out) lives in :class:`launcher.session.Session`.
"""
