#!/usr/bin/env bash
# A single-node SLURM cluster on 127.0.0.1 inside this (Debian) machine, for testing the project's
# SLURM launcher for real: tests/test_slurm.py runs a sweep through it.
#
#   sudo scripts/slurm_local.sh start   # install slurm-wlm + munge (apt), configure, start, wait
#   sudo scripts/slurm_local.sh stop    # stop the daemons this script started
#
# Needs root (apt-get, daemons). Only loopback is used: the controller and the node both listen
# on 127.0.0.1. The node offers every CPU of the machine as partition "local" (no GPUs, no
# cgroups: proctrack/linuxproc, task/none), without accounting (submitit falls back to squeue).
# Files: /etc/slurm/slurm.conf, /etc/munge/munge.key (created if missing), logs and state under
# /var/lib/differank-slurm. Set SLURM_LOCAL_SKIP_INSTALL=1 when the packages are installed.
set -euo pipefail

STATE=/var/lib/differank-slurm
NODE=$(hostname -s)

install_packages() {
  if [[ "${SLURM_LOCAL_SKIP_INSTALL:-0}" == 1 ]] && command -v slurmctld >/dev/null; then
    return
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    slurm-wlm munge >/dev/null
}

write_config() {
  local cpus memory
  cpus=$(nproc)
  memory=$(awk '/MemTotal/ {print int($2 / 1024 * 0.8)}' /proc/meminfo)
  mkdir -p /etc/slurm "$STATE"/{ctld,d,log}
  cat >/etc/slurm/slurm.conf <<EOF
ClusterName=differank-local
SlurmctldHost=${NODE}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=${STATE}/ctld
SlurmdSpoolDir=${STATE}/d
SlurmctldPidFile=${STATE}/slurmctld.pid
SlurmdPidFile=${STATE}/slurmd.pid
SlurmctldLogFile=${STATE}/log/slurmctld.log
SlurmdLogFile=${STATE}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
JobRequeue=1
KillWait=10
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
NodeName=${NODE} NodeAddr=127.0.0.1 CPUs=${cpus} RealMemory=${memory} State=UNKNOWN
PartitionName=local Nodes=${NODE} Default=YES MaxTime=INFINITE State=UP
EOF
}

start_munge() {
  if [[ ! -s /etc/munge/munge.key ]]; then
    mungekey --create --keyfile=/etc/munge/munge.key
  fi
  chown munge:munge /etc/munge/munge.key
  chmod 400 /etc/munge/munge.key
  mkdir -p /run/munge && chown munge:munge /run/munge
  if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    runuser -u munge -- /usr/sbin/munged
  fi
}

start() {
  install_packages
  if scontrol ping 2>/dev/null | grep -q UP; then  # already running: reuse it
    sinfo
    return
  fi
  write_config
  start_munge
  /usr/sbin/slurmctld -c -i
  /usr/sbin/slurmd -c
  for _ in $(seq 60); do  # the node registers within seconds
    if sinfo -h -N -o %t 2>/dev/null | grep -qE '^(idle|mix|alloc)'; then
      sinfo
      return
    fi
    sleep 1
  done
  echo "slurm did not come up; logs in ${STATE}/log" >&2
  exit 1
}

stop() {
  for pid_file in "$STATE"/slurmd.pid "$STATE"/slurmctld.pid; do
    if [[ -s "$pid_file" ]]; then
      kill "$(cat "$pid_file")" 2>/dev/null || true
    fi
  done
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
