"""``submit=ray``: a launch (or each point of a sweep) as a Ray job (docs/ray.md).

- :mod:`.spec` (pure): the job specification from the session's composed, validated config:
  entrypoint, entrypoint resources, runtime_env (secret values apart), the resolved config it carries.
- :mod:`.backend`: ``RayBackend``, the :class:`launcher.backends.base.Backend` of ``submit=ray``:
  dryrun (the spec), submit (``submit.json``), wait (follow), and describe/logs/cancel from a handle
  alone over the dashboard's HTTP API (no Ray, no Hydra, every request bounded: ``runs`` uses them).
- :mod:`.submit`: the submitter's pieces: the Job Submission API with deadlines, the secrets' upload,
  follow/stop, the sweep table.
- :mod:`.job`: the cluster's side (``python -m launcher.ray_submit.job``): one launch from the
  resolved config the job carries; with ``launcher.nnodes=N`` a STRICT_SPREAD placement group and one
  launch per bundle.

Ray is imported by :mod:`.submit` and :mod:`.job` only, when ``submit=ray`` is used; :mod:`.backend`'s
query side never imports it.
"""
