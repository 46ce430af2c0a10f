#!/usr/bin/env bash
# Bring up a one-host SLURM cluster on THIS machine, for tests (idempotent).
#
#   tests/infra/slurm_up.sh        # install if missing, configure, start, wait for idle node
#   tests/infra/slurm_down.sh      # stop the daemons again
#
# Needs root (it installs Debian packages and starts slurmctld/slurmd as root).
# Environment knobs:
#   SLURM_UP_TIMEOUT   seconds to wait for the node to be idle (default 60)
#   SLURM_UP_NO_INSTALL=1  never run apt-get; fail (exit 3) when slurm is missing
#   SLURM_UP_FORCE=1   overwrite an /etc/slurm/slurm.conf that this script did not write
#                      (without it the script refuses, exit 3: never clobber a real cluster)
# Exit codes: 0 up, 2 not root, 3 cannot install, 4 daemons did not come up.
#
# What it takes to run SLURM in a container without systemd (learned here, Debian 12, slurm 22.05):
# - No systemd: daemons are started directly (munged as user munge, slurmctld/slurmd as root
#   with SlurmUser=root); pid files and logs go to /run/slurm-test and /var/log/slurm-test.
# - No usable cgroups: ProctrackType=proctrack/linuxproc, TaskPlugin=task/none,
#   JobAcctGatherType=jobacct_gather/none, no cgroup.conf needed.
# - No accounting DB: AccountingStorageType=accounting_storage/none, so sacct does not work;
#   use `scontrol show job` (MinJobAge keeps finished jobs visible for 10 min).
# - The node line comes from `slurmd -C` (the hardware slurmd itself detects), with
#   RealMemory lowered by 5 % so the node is never drained for "Low RealMemory".
# - The host name must resolve; NodeAddr/SlurmctldHost use 127.0.0.1 to avoid DNS surprises.
# - apt's post-install scripts may try to start services; a temporary policy-rc.d forbids it.
#
# Measured on a 2-core Debian 12 container (gVisor runtime, no systemd): packages not
# installed -> idle node in ~8 s (apt-get update + install included); installed but stopped
# -> 0.2 s (once 9 s); already up -> 0.1 s.
set -euo pipefail

TIMEOUT="${SLURM_UP_TIMEOUT:-60}"
CONF_DIR=/etc/slurm
CONF="$CONF_DIR/slurm.conf"
RUN_DIR=/run/slurm-test
LOG_DIR=/var/log/slurm-test
SPOOL=/var/spool/slurm-test
HOST="$(hostname -s)"

log() { echo "slurm_up: $*" >&2; }
die() { local code="$1"; shift; echo "slurm_up: ERROR: $*" >&2; exit "$code"; }

[ "$(id -u)" -eq 0 ] || die 2 "must run as root (installs packages, starts daemons)"

node_state() { sinfo -h -n "$HOST" -o '%T' 2>/dev/null | head -n1 || true; }

if [ -f "$CONF" ] && ! grep -q '^# written by slurm_up.sh' "$CONF" && [ "${SLURM_UP_FORCE:-0}" != 1 ]; then
  die 3 "$CONF exists and was not written by slurm_up.sh (a real cluster?); set SLURM_UP_FORCE=1 to overwrite"
fi

# ---- 1. install -------------------------------------------------------------------------
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null \
   || ! command -v munged >/dev/null || ! command -v sbatch >/dev/null; then
  [ "${SLURM_UP_NO_INSTALL:-0}" = 1 ] && die 3 "slurm not installed and SLURM_UP_NO_INSTALL=1"
  command -v apt-get >/dev/null || die 3 "slurm not installed and apt-get not available"
  log "installing slurm-wlm and munge (apt-get)"
  policy_created=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d
    policy_created=1
  fi
  export DEBIAN_FRONTEND=noninteractive
  rc=0
  { apt-get update -q && apt-get install -y -q --no-install-recommends slurm-wlm munge; } \
    > /tmp/slurm_up.apt.log 2>&1 || rc=$?
  [ "$policy_created" = 1 ] && rm -f /usr/sbin/policy-rc.d
  [ "$rc" = 0 ] || { tail -n 20 /tmp/slurm_up.apt.log >&2; die 3 "apt-get install failed (log: /tmp/slurm_up.apt.log)"; }
fi

# ---- 2. munge ---------------------------------------------------------------------------
mkdir -p /etc/munge /run/munge /var/lib/munge /var/log/munge
if [ ! -s /etc/munge/munge.key ]; then
  log "creating munge key"
  if command -v mungekey >/dev/null; then mungekey --create --force --keyfile=/etc/munge/munge.key
  else dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none; fi
fi
chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge
chmod 0700 /etc/munge /var/lib/munge /var/log/munge; chmod 0755 /run/munge
chmod 0400 /etc/munge/munge.key
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  log "starting munged"
  rm -f /run/munge/munged.pid
  runuser -u munge -- /usr/sbin/munged || die 4 "munged did not start (see /var/log/munge/munged.log)"
  for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
  munge -n | unmunge >/dev/null || die 4 "munge credential round trip fails"
fi

# ---- 3. slurm.conf ----------------------------------------------------------------------
mkdir -p "$CONF_DIR" "$RUN_DIR" "$LOG_DIR" "$SPOOL/ctld" "$SPOOL/d"
# `slurmd -C` prints e.g. "NodeName=vm CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2
# ThreadsPerCore=1 RealMemory=24105"; fall back to nproc and /proc/meminfo.
hw="$(slurmd -C 2>/dev/null | head -n1 || true)"
cpus="$(sed -n 's/.*CPUs=\([0-9]*\).*/\1/p' <<<"$hw")"; cpus="${cpus:-$(nproc)}"
mem="$(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$hw")"
mem="${mem:-$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 ))}"
mem=$(( mem * 95 / 100 ))
topo="$(grep -o 'Boards=[0-9]* SocketsPerBoard=[0-9]* CoresPerSocket=[0-9]* ThreadsPerCore=[0-9]*' <<<"$hw" || true)"

new_conf="$(cat <<CONF
# written by slurm_up.sh: one-host test cluster, do not use in production
ClusterName=testcluster
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$SPOOL/ctld
SlurmdSpoolDir=$SPOOL/d
SlurmctldPidFile=$RUN_DIR/slurmctld.pid
SlurmdPidFile=$RUN_DIR/slurmd.pid
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
SlurmctldPort=6817
SlurmdPort=6818
MpiDefault=none
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MinJobAge=600
KillWait=10
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=60
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$cpus $topo RealMemory=$mem State=UNKNOWN
PartitionName=cpu Nodes=$HOST Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONF
)"
restart=0
alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
# Fast path: same configuration, both daemons alive, node usable.
if [ -f "$CONF" ] && [ "$(cat "$CONF")" = "$new_conf" ] \
   && alive "$RUN_DIR/slurmctld.pid" && alive "$RUN_DIR/slurmd.pid"; then
  case "$(node_state)" in
    idle|mixed|allocated|completing) log "already up ($HOST $(node_state))"; exit 0 ;;
  esac
fi
if [ ! -f "$CONF" ] || [ "$(cat "$CONF")" != "$new_conf" ]; then
  printf '%s\n' "$new_conf" > "$CONF"; restart=1
  log "wrote $CONF"
fi

# ---- 4. daemons -------------------------------------------------------------------------
if [ "$restart" = 1 ]; then
  for pf in "$RUN_DIR/slurmd.pid" "$RUN_DIR/slurmctld.pid"; do
    if alive "$pf"; then kill "$(cat "$pf")" || true; fi
  done
  for _ in $(seq 50); do alive "$RUN_DIR/slurmd.pid" || alive "$RUN_DIR/slurmctld.pid" || break; sleep 0.2; done
fi
if ! alive "$RUN_DIR/slurmctld.pid"; then
  log "starting slurmctld"
  # -c: clear saved state (jobs of an earlier run); -i: ignore state errors.
  slurmctld -c -i || die 4 "slurmctld did not start (see $LOG_DIR/slurmctld.log)"
fi
if ! alive "$RUN_DIR/slurmd.pid"; then
  log "starting slurmd"
  slurmd || die 4 "slurmd did not start (see $LOG_DIR/slurmd.log)"
fi

# ---- 5. wait ----------------------------------------------------------------------------
deadline=$(( $(date +%s) + TIMEOUT ))
state=""
while [ "$(date +%s)" -lt "$deadline" ]; do
  state="$(node_state)"
  case "$state" in
    idle|mixed|allocated) log "up: node $HOST $state"; exit 0 ;;
    *drain*|*down*) scontrol update NodeName="$HOST" State=RESUME >/dev/null 2>&1 || true ;;
  esac
  sleep 0.5
done
{
  echo "slurm_up: ERROR: node $HOST not idle after ${TIMEOUT}s (state: '${state:-unknown}')"
  sinfo -R 2>&1 || true
  echo "--- $LOG_DIR/slurmctld.log"; tail -n 15 "$LOG_DIR/slurmctld.log" 2>/dev/null || true
  echo "--- $LOG_DIR/slurmd.log"; tail -n 15 "$LOG_DIR/slurmd.log" 2>/dev/null || true
} >&2
exit 4
