"""Running a plan on this node: the only place that starts processes or touches signals.

- ``supervise``: one launch from start to outcome, built from the components below.
- ``group``: the process group: start, signal, kill and reap the launch's processes.
- ``detect``: failure detection: which rank failed first, and how.
- ``console``: the console view (rank logs tailed to the terminal, the launcher's own lines).
- ``signals``: one context manager that installs and restores signal handlers, and a sweep's
  hold on the stop signals (``Interrupts``).
- ``procs``: finding and killing processes through /proc and prctl (standard library only).
- ``logs``: per-rank log files; ``failure``: exit records and the failure summary.
- ``causes``: why a rank died (class, fix, followers); ``oom``: the kernel's OOM-kill counters;
  ``flight_recorder``: PyTorch's NCCL flight recorder (dump directory, dumps on demand);
  ``stragglers``: ranks much slower than the others, named from their heartbeats.
- ``worker``: the rank wrapper, a separate program (standard library only).
- ``watchdog``: a separate process that kills what a SIGKILLed launcher left behind.
- ``liveness``: the nodes' launchers watch each other (a monitor); a lost node ends the launch.
- ``progress``: the hang watchdog, a monitor like ``detect``'s: every rank's progress (``beats``:
  heartbeat files, and rank-log output), ``logs/progress.json``, a stalled rank ends the launch;
  ``stacks``: every rank's Python stack (py-spy) into ``<run_dir>/stacks/``, on a hang or SIGUSR2.

A change to "how ranks are killed" belongs in ``group.py`` (and ``procs.py``).

Imports the package's leaves and ``plan``'s data types; never ``config/``, ``sweep/``, ``slurm/``.
"""
