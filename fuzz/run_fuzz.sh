#!/usr/bin/env bash
# A bounded fuzz run of the rendezvous handlers: seeds one well-formed
# request per method (with and without the token), then lets libFuzzer
# mutate them for SECONDS. Usage: run_fuzz.sh FUZZER SECONDS [CORPUS_DIR]
set -euo pipefail
fuzzer=$1
seconds=$2
here="$(cd "$(dirname "$0")" && pwd)"
corpus=${3:-$(mktemp -d /tmp/ddprun-fuzz-corpus.XXXXXX)}
mkdir -p "$corpus"
proto_dir="$here/../proto"

# seed METHOD_BYTE MESSAGE 'text format'
seed() {
  local name="$corpus/seed-$1-$2"
  for token in 0 1; do
    { printf "\\x$(printf %02x "$1")\\x0$token"
      printf '%s' "$3" | protoc --proto_path="$proto_dir" --encode="ddprun.v1.$2" \
        ddprun/v1/rendezvous.proto; } > "$name-$token"
  done
}
seed 0 JoinRequest 'job_id: "j" node { node_id: "n" local_world_size: 2 } min_nodes: 1 max_nodes: 2 timeout_ms: 10'
seed 1 KeepAliveRequest 'job_id: "j" node_id: "n"'
seed 2 KeepAliveRequest 'job_id: "j" node_id: "n"'
seed 3 LeaveRequest 'job_id: "j" node_id: "n" kind: LEAVE_STOPPED'
seed 4 SetRequest 'job_id: "j" key: "k" value: "v" round: 0'
seed 5 GetRequest 'job_id: "j" key: "k" timeout_ms: 5'
seed 6 WaitRequest 'job_id: "j" keys: "k" keys: "k2" timeout_ms: 5'
seed 7 AddRequest 'job_id: "j" key: "c" delta: 9223372036854775807'

# Leaks are not what this run looks for (gRPC keeps its own for the
# process's life); anything else stops it with the input that did it.
export ASAN_OPTIONS=detect_leaks=0
exec "$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 \
  -artifact_prefix="$corpus/" "$corpus"
