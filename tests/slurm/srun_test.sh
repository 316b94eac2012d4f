#!/usr/bin/env bash
# A real Slurm on this machine (Debian's slurm-wlm: slurmctld + two slurmd
# playing two nodes, auth/none, everything under a temporary folder, free
# ports), then
#   srun -N1 ddprun --nproc 2 probe env: the workers must see what ddprun
#     took from Slurm (one node, node rank 0, the job id as run id);
#   srun -N2 ddprun --nproc 1 probe env: two nodes, ranks 0 and 1, meeting
#     at the first node's name on the port derived from the job id;
#   a step with two tasks on one node is refused with exit code 2, and
#   DDPRUN_NO_SLURM=1 turns it all off.
# The nodes are this machine's name (it must resolve: it is the endpoint)
# and NAME-2, which sorts after it; Slurm's node names are not separate
# hosts here (one network), but every Slurm variable is real.
# Usage: srun_test.sh DDPRUN PROBE. Exit 77 (skipped) when Slurm is missing.
set -uo pipefail
. "$(dirname "$0")/conf_common.sh"
ddprun=$1 probe=$2

skip() { echo "SKIPPED: $*"; exit 77; }
fail() { echo "FAILED: $*"; for f in "$tmp"/*.log; do echo "--- $f"; grep -v pmix "$f" | tail -n 20; done; exit 1; }
for p in slurmctld slurmd srun sinfo; do
  command -v "$p" >/dev/null || skip "$p not found: apt-get install slurmctld slurmd slurm-client (scripts/install-deps.sh)"
done
[ "$(id -u)" -eq 0 ] || skip "slurmd must run as root to start job steps"

tmp=$(mktemp -d /tmp/ddprun-slurm.XXXXXX)
pids=()
cleanup() {
  # The daemons' own pid files as well: a daemon must not outlive the test.
  for f in "$tmp"/*.pid; do [ -f "$f" ] && pids+=("$(cat "$f")"); done
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
node=$(hostname -s)
getent hosts "$node" >/dev/null || skip "this machine's name '$node' does not resolve"
mkdir -p "$tmp/state" "$tmp/spool.$node" "$tmp/spool.$node-2"
# The job ids start where the derived rendezvous ports (29400 + id mod
# 1000) of the first jobs are free now.
first_job=$(python3 -c '
import random, socket
for _ in range(200):
    port = random.randrange(29400, 30397)
    try:
        for p in range(port, port + 3):
            socket.socket().bind(("0.0.0.0", p))
    except OSError:
        continue
    print(random.randrange(10, 1000) * 1000 + port - 29400)
    break')
cat > "$tmp/slurm.conf" <<CONF
ClusterName=ddpruntest
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$(free_port)
FirstJobId=$first_job
CONF
slurm_common_conf >> "$tmp/slurm.conf"
cat >> "$tmp/slurm.conf" <<CONF
NodeName=$node NodeHostname=$node NodeAddr=127.0.0.1 Port=$(free_port) CPUs=$(nproc) State=UNKNOWN
NodeName=$node-2 NodeHostname=$node-2 NodeAddr=127.0.0.2 Port=$(free_port) CPUs=$(nproc) State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF=$tmp/slurm.conf
unset DDPRUN_NO_SLURM

slurmctld -D -i >"$tmp/slurmctld.out.log" 2>&1 & pids+=($!)
slurmd -D -N "$node" >"$tmp/slurmd.$node.out.log" 2>&1 & pids+=($!)
slurmd -D -N "$node-2" >"$tmp/slurmd.$node-2.out.log" 2>&1 & pids+=($!)

# Ready when the node shows idle (a deadline, not a fixed pause).
deadline=$((SECONDS + 60))
until [ "$(sinfo -h -o %T 2>/dev/null | sort -u)" = idle ] && [ "$(sinfo -h -o %D)" = 2 ]; do
  for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null || skip "a Slurm daemon exited at start: $(tail -n 3 "$tmp"/*.out.log | tr '\n' ' ')"; done
  [ $SECONDS -lt $deadline ] || skip "the Slurm nodes did not become idle in 60 s: $(sinfo 2>&1 | tr '\n' ' ')"
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

# 2. Two nodes: ranks 0 and 1, the endpoint is the first node's name.
out=$(timeout 120 srun -N2 --ntasks-per-node=1 bash -c 'echo "JOB=$SLURM_JOB_ID"; exec "$0" --nproc 1 "$1" env' \
      "$ddprun" "$probe" 2>"$tmp/run2n.log")
rc=$?
cat "$tmp/run2n.log"
echo "$out"
[ $rc -eq 0 ] || fail "srun -N2 ddprun exited with $rc"
job=$(echo "$out" | sed -n 's/^JOB=//p' | head -n 1)
port=$((29400 + job % 1000))
for r in 0 1; do
  grep -q "from Slurm.*--nnodes 2 --node-rank $r --rdzv-endpoint $node:$port --rdzv-id $job" "$tmp/run2n.log" ||
    fail "no 'from Slurm' line for node rank $r, endpoint $node:$port, job $job"
  [ "$(echo "$out" | grep -c "GROUP_RANK=$r\$")" -eq 1 ] || fail "no worker on node rank $r"
done
[ "$(echo "$out" | grep -c 'GROUP_WORLD_SIZE=2$')" -eq 2 ] || fail "workers do not see two nodes"
[ "$(echo "$out" | grep -c "TORCHELASTIC_RUN_ID=$job\$")" -eq 2 ] || fail "two nodes: run id is not the job id $job"
[ "$(echo "$out" | grep -c "DDPRUN_RDZV_ADDR=.*:$port\$")" -eq 2 ] || fail "two nodes: the rendezvous is not on port $port"

# 3. Two tasks on one node: refused with a usage error by each task.
timeout 60 srun -N1 -n2 "$ddprun" --nproc 1 "$probe" env >"$tmp/run2.out.log" 2>&1
rc=$?
cat "$tmp/run2.out.log"
[ $rc -eq 2 ] || fail "two tasks per node: exit $rc, expected 2"
grep -q -- "--ntasks-per-node=1" "$tmp/run2.out.log" || fail "two tasks per node: no hint to --ntasks-per-node=1"

# 4. DDPRUN_NO_SLURM=1: nothing derived.
out=$(DDPRUN_NO_SLURM=1 timeout 60 srun -N1 bash -c 'echo "JOB=$SLURM_JOB_ID"; exec "$0" --nproc 1 "$1" env' \
      "$ddprun" "$probe" 2>"$tmp/run3.log")
rc=$?
[ $rc -eq 0 ] || fail "DDPRUN_NO_SLURM=1: exit $rc"
job=$(echo "$out" | sed -n 's/^JOB=//p')
[ -n "$job" ] || fail "no job id printed"
grep -q "from Slurm" "$tmp/run3.log" && fail "DDPRUN_NO_SLURM=1 still derived from Slurm"
echo "$out" | grep -q "TORCHELASTIC_RUN_ID=$job\$" && fail "DDPRUN_NO_SLURM=1: run id is still the job id $job"
echo "PASSED"
