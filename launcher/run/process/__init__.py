"""The process group: start, signal, kill and reap a launch's processes (``group``), find and kill
them through /proc and prctl (``procs``), and install and restore signal handlers (``signals``).

Imported by the watchdog, which runs with ``-S``: this package stays standard library only."""
