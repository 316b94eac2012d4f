#!/usr/bin/env bash
# Slurm across two "hosts": two network namespaces joined by a bridge (in a
# namespace of its own; the root namespace's network is not touched), with
# slurmctld + slurmd on host sn0 and slurmd on host sn1, each in a private
# mount namespace whose /etc/hosts names both hosts. Then, from sn0,
#   srun -N2 --ntasks-per-node=1 ddprun --nproc 2 probe env
# must give 4 ranks on 2 nodes meeting at sn0 on the port derived from the
# job id, each node binding its own address, and
#   srun -N2 ddprun --nproc 2 collective_check
# must run every collective across the two hosts.
# Usage: netns_test.sh DDPRUN PROBE COLLECTIVE_CHECK. Exit 77 (skipped)
# without Slurm, root, ip, nsenter or unshare.
set -uo pipefail
. "$(dirname "$0")/conf_common.sh"
ddprun=$1 probe=$2 collective_check=$3

skip() { echo "SKIPPED: $*"; exit 77; }
for p in slurmctld slurmd srun sinfo ip nsenter unshare; do
  command -v "$p" >/dev/null || skip "$p not found (slurmctld slurmd slurm-client iproute2 util-linux)"
done
[ "$(id -u)" -eq 0 ] || skip "needs root for network namespaces and slurmd"

tmp=$(mktemp -d /tmp/ddprun-slurmns.XXXXXX)
tag=dsl$$
subnet=10.252.$((RANDOM % 250)).
pids=()
namespaces=()
fail() { echo "FAILED: $*"; for f in "$tmp"/*.log; do echo "--- $f"; grep -v pmix "$f" | tail -n 20; done; exit 1; }
cleanup() {
  # The daemons' own pid files as well: a daemon must not outlive the test.
  for f in "$tmp"/*.pid; do [ -f "$f" ] && pids+=("$(cat "$f")"); done
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null; done
  for pid in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; python3 -c 'import time; time.sleep(0.1)'; done
  done
  for n in "${namespaces[@]}"; do ip netns delete "$n" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT

# The network: ${tag}b holds the bridge; host i is ${tag}h<i> at ${subnet}(i+1).
ip netns add "${tag}b" || skip "ip netns add failed"
namespaces+=("${tag}b")
ip -n "${tag}b" link add br0 type bridge && ip -n "${tag}b" link set br0 up || skip "no bridge in a namespace"
for i in 0 1; do
  h=${tag}h$i
  ip netns add "$h" && namespaces+=("$h") &&
  ip -n "$h" link set lo up &&
  ip -n "$h" link add v$i type veth peer name p$i netns "${tag}b" &&
  ip -n "${tag}b" link set p$i master br0 && ip -n "${tag}b" link set p$i up &&
  ip -n "$h" addr add "${subnet}$((i + 1))/24" dev v$i && ip -n "$h" link set v$i up ||
    skip "could not build the two-host network"
done
printf '127.0.0.1 localhost\n%s1 sn0\n%s2 sn1\n' "$subnet" "$subnet" > "$tmp/hosts"

# Runs a command on host i: its network namespace, and a private mount
# namespace where /etc/hosts is ours. (Not `ip netns exec`: it remounts
# /sys, and slurmd then finds no cgroup filesystem.) `exec` and the execs of
# nsenter, unshare and sh make `on_host ... &`'s $! the daemon itself.
on_host() {
  local i=$1
  shift
  exec nsenter --net="/run/netns/${tag}h$i" unshare -m sh -c 'mount --bind "$0" /etc/hosts && exec "$@"' "$tmp/hosts" "$@"
}

mkdir -p "$tmp/state" "$tmp/spool.sn0" "$tmp/spool.sn1"
# Ports: each host is a fresh namespace, nothing else listens there.
cat > "$tmp/slurm.conf" <<CONF
ClusterName=ddprunns
SlurmctldHost=$(hostname -s)(${subnet}1)
CONF
slurm_common_conf >> "$tmp/slurm.conf"
cat >> "$tmp/slurm.conf" <<CONF
NodeName=sn0 NodeAddr=${subnet}1 CPUs=$(nproc) State=UNKNOWN
NodeName=sn1 NodeAddr=${subnet}2 CPUs=$(nproc) State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF=$tmp/slurm.conf
unset DDPRUN_NO_SLURM

on_host 0 slurmctld -D -i >"$tmp/slurmctld.out.log" 2>&1 & pids+=($!)
on_host 0 slurmd -D -N sn0 >"$tmp/slurmd.sn0.out.log" 2>&1 & pids+=($!)
on_host 1 slurmd -D -N sn1 >"$tmp/slurmd.sn1.out.log" 2>&1 & pids+=($!)

deadline=$((SECONDS + 60))
until [ "$(on_host 0 sinfo -h -o %T 2>/dev/null | sort -u)" = idle ] && [ "$(on_host 0 sinfo -h -o %D 2>/dev/null)" = 2 ]; do
  for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null || skip "a Slurm daemon exited at start: $(grep -hv pmix "$tmp"/*.out.log | tail -n 3 | tr '\n' ' ')"; done
  [ $SECONDS -lt $deadline ] || skip "the Slurm nodes did not become idle in 60 s"
  python3 -c 'import time; time.sleep(0.1)'
done
echo "slurm is up across two hosts: $(on_host 0 sinfo -h -o '%D %T %N')"

out=$(on_host 0 timeout 120 srun -N2 --ntasks-per-node=1 bash -c 'echo "JOB=$SLURM_JOB_ID"; exec "$0" --nproc 2 "$1" env' \
      "$ddprun" "$probe" 2>"$tmp/run1.log")
rc=$?
cat "$tmp/run1.log"
echo "$out" | grep -E "JOB=|RANK=|GROUP|RUN_ID|RDZV_ADDR|LOCAL_ADDR"
[ $rc -eq 0 ] || fail "srun -N2 ddprun exited with $rc"
job=$(echo "$out" | sed -n 's/^JOB=//p' | head -n 1)
port=$((29400 + job % 1000))
for r in 0 1; do
  grep -q "from Slurm.*--nnodes 2 --node-rank $r --rdzv-endpoint sn0:$port --rdzv-id $job" "$tmp/run1.log" ||
    fail "no 'from Slurm' line for node rank $r, endpoint sn0:$port, job $job"
  [ "$(echo "$out" | grep -c "GROUP_RANK=$r\$")" -eq 2 ] || fail "not 2 workers on node rank $r"
  [ "$(echo "$out" | grep -c "DDPRUN_LOCAL_ADDR=${subnet}$((r + 1))\$")" -eq 2 ] || fail "node $r's workers do not bind ${subnet}$((r + 1))"
done
[ "$(echo "$out" | grep -c '^\[rank[0-9]\]:WORLD_SIZE=4$')" -eq 4 ] || fail "not 4 workers in a world of 4"
[ "$(echo "$out" | grep -c "DDPRUN_RDZV_ADDR=${subnet}1:$port\$")" -eq 4 ] || fail "the rendezvous is not at ${subnet}1:$port"

out=$(on_host 0 timeout 180 srun -N2 --ntasks-per-node=1 "$ddprun" --nproc 2 "$collective_check" 2>"$tmp/run2.log")
rc=$?
echo "$out"
[ $rc -eq 0 ] || fail "srun -N2 ddprun collective_check exited with $rc"
[ "$(echo "$out" | grep -c 'collectives ok on rank [0-3] of 4')" -eq 4 ] || fail "not every rank's collectives held"
echo "PASSED"
