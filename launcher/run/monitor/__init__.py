"""The monitors: what the ranks are doing while they run (``beats``: heartbeat files; ``progress``:
the hang watchdog; ``stragglers``: ranks much slower than the others) and whether the other nodes'
launchers are still there (``liveness``)."""
