"""``submit=ray``: a launch (or each point of a sweep) as a Ray job (docs/ray.md).

- :mod:`.spec` (pure): the job specification from the session's composed, validated config:
  entrypoint, entrypoint resources, runtime_env (secret values apart), the resolved config it carries.
- :mod:`.submit`: the submitter's side: dry run, the Job Submission API, follow/stop, the sweep table.
- :mod:`.job`: the cluster's side (``python -m launcher.ray_submit.job``): one launch from the
  resolved config the job carries; with ``launcher.nnodes=N`` a STRICT_SPREAD placement group and one
  launch per bundle.

Ray is imported by :mod:`.submit` and :mod:`.job` only, when ``submit=ray`` is used.
"""
