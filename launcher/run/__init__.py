"""Running a plan on this node: the only place that starts processes or touches signals.

Here, what a launch is made of: ``attempts`` (the launch as attempts, restarted by cause while
they make progress: ``restart.*``), ``supervise`` (one attempt from start to outcome, built from the
rooms below), ``console`` (the console view: rank logs tailed to the terminal, the launcher's own
lines), ``logs`` (per-rank log files), and two separate programs: ``worker`` (the rank wrapper,
standard library only) and ``watchdog`` (a process that kills what a SIGKILLed launcher left
behind). They stay here because other interpreters run them by path or module name
(``launcher.paths.WORKER_WRAPPER``, ``python -m launcher.run.watchdog``). ``submit=ssh``'s two ends:
``ssh_nodes`` (here: one ssh client per node, supervised as one launch) and ``leash`` (on each host:
the secrets read from the SSH channel, the launch stopped when the channel ends).

- ``process/``: the process group. ``group`` starts, signals, kills and reaps the launch's
  processes; ``procs`` finds and kills processes through /proc and prctl (standard library only);
  ``signals`` installs and restores signal handlers, and holds a sweep's stop signals (``Interrupts``).
- ``monitor/``: while the launch runs. ``beats`` (heartbeat files); ``observer`` reads every rank's
  beat and log once per tick into one snapshot with one rate estimator; over it, two policies:
  ``progress`` (the hang watchdog: a stalled rank ends the launch, ``logs/progress.json``) and
  ``stragglers`` (ranks much slower than the others, named); ``liveness`` (the nodes' launchers
  watch each other: a lost node ends the launch) speaks ``liveness_wire`` (the pure wire protocol).
- ``postmortem/``: how it ended. ``detect`` (which rank failed first, and how), ``failure`` (exit
  records and the failure summary), ``causes`` (why a rank died: class, fix, followers), ``oom``
  (the kernel's OOM-kill counters), ``stacks`` (every rank's Python stack, py-spy, into
  ``<run_dir>/stacks/``, on a hang or SIGUSR2), ``flight_recorder`` (PyTorch's NCCL flight recorder).

A change to "how ranks are killed" belongs in ``process/group.py`` (and ``process/procs.py``); a new
watch over the ranks is one more policy over ``monitor/observer.py``'s snapshot.

Imports the package's leaves and ``plan``'s data types; never ``config/``, ``sweep/``, ``slurm/``.
"""
