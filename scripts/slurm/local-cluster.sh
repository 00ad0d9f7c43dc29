#!/usr/bin/env bash
# A real single-host Slurm cluster for tests and trials: munged, slurmctld and slurmd on this
# machine, every daemon bound to 127.0.0.1, its own configuration and state in DIR (the system's
# /etc/slurm is not touched). The node offers CPUS job slots (default 4, more than the cores are
# fine: jobs share them).
#
# Usage: scripts/slurm/local-cluster.sh start DIR [CPUS]   # prints `export SLURM_CONF=...`
#        scripts/slurm/local-cluster.sh stop DIR
# Needs root and Debian's slurmctld, slurmd, slurm-client and munge
# (scripts/install-deps.sh --tests installs them).
set -euo pipefail

usage() { sed -n '2,11p' "$0" >&2; exit 2; }
[[ $# -ge 2 ]] || usage
cmd=$1
dir=$(realpath -m "$2")
cpus=${3:-4}

stop() {
    for name in slurmd slurmctld munged; do
        pidfile="$dir/$name.pid"
        if [[ -s $pidfile ]]; then
            pid=$(cat "$pidfile")
            kill "$pid" 2>/dev/null || true
            for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            kill -9 "$pid" 2>/dev/null || true
            rm -f "$pidfile"
        fi
    done
}

case $cmd in
stop) stop; exit 0 ;;
start) ;;
*) usage ;;
esac

for c in munged slurmctld slurmd sbatch; do
    command -v "$c" >/dev/null || { echo "local-cluster: $c not found (scripts/install-deps.sh --tests)" >&2; exit 1; }
done
node=$(hostname -s)
mkdir -p "$dir"/{state,spool,log,munge}
chmod 700 "$dir/munge"

# munge: its own key, socket and pid in DIR.
dd if=/dev/urandom of="$dir/munge/munge.key" bs=1 count=1024 status=none
chmod 400 "$dir/munge/munge.key"
socket="$dir/munge/munge.socket"
munged --force --key-file="$dir/munge/munge.key" --socket="$socket" \
    --pid-file="$dir/munged.pid" --log-file="$dir/log/munged.log" --seed-file="$dir/munge/seed"

# Ports: free ones near 16817, so that a second cluster or a system Slurm does not collide.
port() {
    local p=$1
    while ss -Hltn "sport = :$p" | grep -q .; do p=$((p + 1)); done
    echo "$p"
}
ctld_port=$(port 16817)
slurmd_port=$(port $((ctld_port + 1)))

cat >"$dir/slurm.conf" <<CONF
ClusterName=sprat-test
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$socket
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
SchedulerParameters=bf_interval=1,sched_interval=1
MinJobAge=300
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=local Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONF
export SLURM_CONF=$dir/slurm.conf
slurmctld -i -f "$SLURM_CONF"
slurmd -f "$SLURM_CONF"

# Ready when the node takes jobs.
for _ in $(seq 100); do
    state=$(sinfo -h -N -o '%T' 2>/dev/null | head -1 || true)
    case $state in
    idle* | mixed* | allocated*) echo "export SLURM_CONF=$SLURM_CONF"; exit 0 ;;
    esac
    sleep 0.2
done
echo "local-cluster: the node did not come up (state: ${state:-none}); logs in $dir/log" >&2
tail -5 "$dir/log/slurmctld.log" "$dir/log/slurmd.log" >&2 || true
stop
exit 1
