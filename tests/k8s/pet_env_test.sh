#!/usr/bin/env bash
# The variables deploy/k8s/ddprun-job.yaml gives its pods, as ddprun sees
# them: two "pods" on this machine, each with the manifest's PET_* names
# and DDPRUN_RDZV_TOKEN, Kubernetes' values replaced by local ones (pod 0's
# DNS name by 127.0.0.1 and a free port, the completion index by 0 and 1,
# the Job's uid by a test id), must form one job of two nodes.
# Usage: pet_env_test.sh DDPRUN PROBE MANIFEST
set -uo pipefail
ddprun=$1 probe=$2 manifest=$3
fail() { echo "FAILED: $*"; exit 1; }

# The names the manifest sets, in its order; this test knows what each means.
names=$(sed -n 's/^ *- name: \(PET_[A-Z_]*\|DDPRUN_[A-Z_]*\)$/\1/p' "$manifest" | sort | tr '\n' ' ')
expected="DDPRUN_RDZV_TOKEN PET_NNODES PET_NODE_RANK PET_NPROC_PER_NODE PET_RDZV_ENDPOINT PET_RDZV_ID "
[ "$names" = "$expected" ] || fail "the manifest sets '$names'; this test knows '$expected'"
nnodes=$(grep -A1 'name: PET_NNODES' "$manifest" | sed -n 's/.*value: "\([0-9]*\)".*/\1/p')
[ -n "$nnodes" ] || fail "no PET_NNODES value in the manifest"

tmp=$(mktemp -d /tmp/ddprun-pet.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
pids=()
for ((r = 0; r < nnodes; r++)); do
  env -u SLURM_JOB_ID PET_NNODES="$nnodes" PET_NPROC_PER_NODE=1 PET_NODE_RANK=$r \
      PET_RDZV_ENDPOINT="127.0.0.1:$port" PET_RDZV_ID=k8s-uid-test DDPRUN_RDZV_TOKEN=test-token \
      timeout 60 "$ddprun" "$probe" env >"$tmp/pod$r.log" 2>&1 &
  pids+=($!)
done
rc=0
for pid in "${pids[@]}"; do wait "$pid" || rc=$?; done
cat "$tmp"/pod*.log
[ $rc -eq 0 ] || fail "a pod's ddprun exited with $rc"
for ((r = 0; r < nnodes; r++)); do
  grep -q "GROUP_RANK=$r\$" "$tmp/pod$r.log" || fail "pod $r is not node rank $r"
  grep -q "GROUP_WORLD_SIZE=$nnodes\$" "$tmp/pod$r.log" || fail "pod $r does not see $nnodes nodes"
  grep -q "TORCHELASTIC_RUN_ID=k8s-uid-test\$" "$tmp/pod$r.log" || fail "pod $r's run id is not PET_RDZV_ID"
done
grep -q "takes calls from anyone" "$tmp"/pod*.log && fail "the token from DDPRUN_RDZV_TOKEN was not used"
echo "PASSED"
