#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for the tests of
# `llmperf profile --launcher srun` (tests/launchers.rs): munged, slurmctld
# and slurmd from Debian's slurm-wlm and munge, with a generated slurm.conf,
# state, logs and sockets all under DIR (nothing written to /etc or /var).
#
#   scripts/slurm-local.sh start DIR   start it; prints `export SLURM_CONF=...`
#   scripts/slurm-local.sh stop DIR    stop it (DIR stays, with its logs)
#
# Ports 16817/16818 unless SLURM_LOCAL_PORT (slurmctld; slurmd gets +1).
# Needs root (slurmd starts the job steps as their user).
set -euo pipefail

die() { printf 'slurm-local: error: %s\n' "$1" >&2; [ $# -lt 2 ] || printf 'hint: %s\n' "$2" >&2; exit 1; }

cmd="${1:-}"
dir="${2:-}"
[ -n "$cmd" ] && [ -n "$dir" ] || die "usage: $0 start|stop DIR" "DIR holds the cluster's config, state and logs"

stop() {
    local p
    for p in slurmd slurmctld munged; do
        [ -f "$dir/run/$p.pid" ] || continue
        kill "$(cat "$dir/run/$p.pid")" 2>/dev/null || true
    done
    # Wait for them to go: a later start reuses the ports.
    for _ in $(seq 50); do
        local alive=0
        for p in slurmd slurmctld munged; do
            [ -f "$dir/run/$p.pid" ] && kill -0 "$(cat "$dir/run/$p.pid")" 2>/dev/null && alive=1
        done
        [ "$alive" = 0 ] && return 0
        sleep 0.1
    done
}

start() {
    for p in munged slurmctld slurmd srun; do
        command -v "$p" >/dev/null 2>&1 || export PATH="$PATH:/usr/sbin"
        command -v "$p" >/dev/null 2>&1 || die "$p not found" "apt-get install slurm-wlm munge (scripts/setup.sh does)"
    done
    [ "$(id -u)" -eq 0 ] || die "a local slurmd needs root" "run the tests as root, as CI does"
    mkdir -p "$dir"/{spool,state,log,run}
    chmod 700 "$dir"
    head -c 1024 /dev/urandom >"$dir/munge.key"
    chmod 400 "$dir/munge.key"
    munged --socket="$dir/run/munge.sock" --key-file="$dir/munge.key" --pid-file="$dir/run/munged.pid" \
        --log-file="$dir/log/munged.log" --seed-file="$dir/run/munge.seed" --force
    local host port cpus mem
    host=$(hostname)
    port="${SLURM_LOCAL_PORT:-16817}"
    cpus=$(nproc)
    mem=$(($(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 2))
    : >"$dir/plugstack.conf"
    cat >"$dir/slurm.conf" <<CONF
ClusterName=llmperf-local
SlurmctldHost=$host
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/munge
AuthInfo=socket=$dir/run/munge.sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
PlugStackConfig=$dir/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=local Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
CONF
    export SLURM_CONF="$dir/slurm.conf"
    slurmctld -f "$SLURM_CONF" -i
    slurmd -f "$SLURM_CONF"
    # Ready when the node is idle.
    for _ in $(seq 100); do
        if sinfo -h -o '%t' 2>/dev/null | grep -qx idle; then
            echo "export SLURM_CONF=$SLURM_CONF"
            return 0
        fi
        sleep 0.2
    done
    stop
    die "the local Slurm cluster did not come up in 20 s" "see $dir/log/slurmctld.log and slurmd.log"
}

case "$cmd" in
    start) start ;;
    stop) stop ;;
    *) die "unknown command $cmd" "start or stop" ;;
esac
