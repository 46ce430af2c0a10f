"""``submit=ssh``: one train_multigpu per host, started over SSH from this machine (docs/ssh.md).

- :mod:`.hosts` -- ``ssh.hosts`` or a DeepSpeed hostfile (``host slots=N``) as the launch's nodes;
- :mod:`.command` -- pure: each node's ssh argv and the launcher argv it runs there (:class:`SshPlan`);
- :mod:`.preflight` -- every host asked, in parallel and bounded, before anything starts anywhere;
- :mod:`.backend` -- :class:`SshBackend`, the :class:`~launcher.backends.base.Backend` of ``submit=ssh``.
"""
