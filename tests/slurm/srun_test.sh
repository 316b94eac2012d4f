#!/usr/bin/env bash
# A real Slurm on this machine (Debian's slurm-wlm: slurmctld + one slurmd,
# auth/none, everything under a temporary folder, free ports), then
# `srun -N1 ddprun --nproc 2 probe env`: the workers must see what ddprun
# took from Slurm (one node, node rank 0, the job id as run id), a step with
# two tasks on one node must be refused with exit code 2, and
# DDPRUN_NO_SLURM=1 must turn it all off.
# Usage: srun_test.sh DDPRUN PROBE. Exit 77 (skipped) when Slurm is missing.
set -uo pipefail
ddprun=$1 probe=$2

skip() { echo "SKIPPED: $*"; exit 77; }
fail() { echo "FAILED: $*"; for f in "$tmp"/*.log; do echo "--- $f"; tail -n 20 "$f"; done; exit 1; }
for p in slurmctld slurmd srun sinfo; do
  command -v "$p" >/dev/null || skip "$p not found: apt-get install slurmctld slurmd slurm-client (scripts/install-deps.sh)"
done
[ "$(id -u)" -eq 0 ] || skip "slurmd must run as root to start job steps"

tmp=$(mktemp -d /tmp/ddprun-slurm.XXXXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
node=$(hostname -s)
mkdir -p "$tmp/state" "$tmp/spool"
cat > "$tmp/slurm.conf" <<CONF
ClusterName=ddpruntest
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
AuthType=auth/none
CredType=cred/none
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/slurmctld.log
SlurmdLogFile=$tmp/slurmd.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName=$node NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF=$tmp/slurm.conf
unset DDPRUN_NO_SLURM

slurmctld -D -i >"$tmp/slurmctld.out.log" 2>&1 & pids+=($!)
slurmd -D >"$tmp/slurmd.out.log" 2>&1 & pids+=($!)

# Ready when the node shows idle (a deadline, not a fixed pause).
deadline=$((SECONDS + 60))
until [ "$(sinfo -h -n "$node" -o %T 2>/dev/null)" = idle ]; do
  for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null || skip "a Slurm daemon exited at start: $(tail -n 3 "$tmp"/*.out.log | tr '\n' ' ')"; done
  [ $SECONDS -lt $deadline ] || skip "the Slurm node did not become idle in 60 s: $(sinfo 2>&1 | tr '\n' ' ')"
  python3 -c 'import time; time.sleep(0.1)'
done
echo "slurm is up: $(sinfo -h -o '%P %D %T %N')"

# 1. Derived values reach the workers.
out=$(timeout 120 srun -N1 --ntasks-per-node=1 bash -c 'echo "JOB=$SLURM_JOB_ID"; exec "$0" --nproc 2 "$1" env' \
      "$ddprun" "$probe" 2>"$tmp/run1.log")
rc=$?
cat "$tmp/run1.log"
echo "$out"
[ $rc -eq 0 ] || fail "srun ddprun exited with $rc"
job=$(echo "$out" | sed -n 's/^JOB=//p')
[ -n "$job" ] || fail "no job id printed"
grep -q "from Slurm.*--nnodes 1 --node-rank 0 --rdzv-id $job" "$tmp/run1.log" || fail "no 'from Slurm' line naming job $job"
[ "$(echo "$out" | grep -c "TORCHELASTIC_RUN_ID=$job\$")" -eq 2 ] || fail "workers' run id is not the Slurm job id $job"
[ "$(echo "$out" | grep -c 'GROUP_WORLD_SIZE=1$')" -eq 2 ] || fail "workers do not see one node"
[ "$(echo "$out" | grep -c 'GROUP_RANK=0$')" -eq 2 ] || fail "workers do not see node rank 0"
[ "$(echo "$out" | grep -c 'WORLD_SIZE=2$')" -ge 2 ] || fail "workers do not see 2 ranks"

# 2. Two tasks on one node: refused with a usage error by each task.
timeout 60 srun -N1 -n2 "$ddprun" --nproc 1 "$probe" env >"$tmp/run2.out.log" 2>&1
rc=$?
cat "$tmp/run2.out.log"
[ $rc -eq 2 ] || fail "two tasks per node: exit $rc, expected 2"
grep -q -- "--ntasks-per-node=1" "$tmp/run2.out.log" || fail "two tasks per node: no hint to --ntasks-per-node=1"

# 3. DDPRUN_NO_SLURM=1: nothing derived.
out=$(DDPRUN_NO_SLURM=1 timeout 60 srun -N1 bash -c 'echo "JOB=$SLURM_JOB_ID"; exec "$0" --nproc 1 "$1" env' \
      "$ddprun" "$probe" 2>"$tmp/run3.log")
rc=$?
[ $rc -eq 0 ] || fail "DDPRUN_NO_SLURM=1: exit $rc"
job=$(echo "$out" | sed -n 's/^JOB=//p')
[ -n "$job" ] || fail "no job id printed"
grep -q "from Slurm" "$tmp/run3.log" && fail "DDPRUN_NO_SLURM=1 still derived from Slurm"
echo "$out" | grep -q "TORCHELASTIC_RUN_ID=$job\$" && fail "DDPRUN_NO_SLURM=1: run id is still the job id $job"
echo "PASSED"
