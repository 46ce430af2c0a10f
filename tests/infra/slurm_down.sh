#!/usr/bin/env bash
# Stop the one-host test cluster started by slurm_up.sh (slurmd, slurmctld, munged).
# Leaves packages and /etc/slurm/slurm.conf in place, so the next slurm_up.sh is fast.
set -uo pipefail
RUN_DIR=/run/slurm-test
stop() {  # stop <name> <pidfile>
  local pf="$2" pid
  [ -f "$pf" ] || return 0
  pid="$(cat "$pf")"
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid"
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$pid" 2>/dev/null && { echo "slurm_down: $1 ($pid) ignores SIGTERM, SIGKILL" >&2; kill -9 "$pid"; }
  fi
  rm -f "$pf"
  echo "slurm_down: stopped $1" >&2
}
stop slurmd "$RUN_DIR/slurmd.pid"
stop slurmctld "$RUN_DIR/slurmctld.pid"
[ "${1:-}" = "--keep-munge" ] || stop munged /run/munge/munged.pid
exit 0
