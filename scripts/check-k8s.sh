#!/usr/bin/env bash
# Validates deploy/k8s/*.yaml (or the files given) with the Kubernetes API
# schemas of the npm package kubernetes-models, plus what ddprun needs of
# an indexed Job (scripts/check-k8s.mjs).
#   scripts/check-k8s.sh --install   fetch the validator from the npm registry (once)
#   scripts/check-k8s.sh [FILE...]   validate; no network. Exit 77 when the
#                                    validator is not installed.
# The validator lives in $DDPRUN_K8S_CHECK_DIR (default: build/k8s-check).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${DDPRUN_K8S_CHECK_DIR:-$root/build/k8s-check}

if [ "${1:-}" = "--install" ]; then
  command -v npm >/dev/null || { echo "check-k8s: npm not found (apt-get install npm)"; exit 1; }
  mkdir -p "$dir"
  [ -f "$dir/package.json" ] || echo '{"name":"ddprun-k8s-check","private":true}' > "$dir/package.json"
  (cd "$dir" && npm install --no-audit --no-fund --silent kubernetes-models@5.1.0 js-yaml@4.1.0)
  echo "check-k8s: validator installed in $dir"
  exit 0
fi
if [ ! -d "$dir/node_modules/kubernetes-models" ] || [ ! -d "$dir/node_modules/js-yaml" ]; then
  echo "check-k8s: SKIPPED: the validator is not installed in $dir; run scripts/check-k8s.sh --install (needs the npm registry)"
  exit 77
fi
command -v node >/dev/null || { echo "check-k8s: SKIPPED: node not found"; exit 77; }
[ $# -gt 0 ] || set -- "$root"/deploy/k8s/*.yaml
exec node "$root/scripts/check-k8s.mjs" "$dir/node_modules" "$@"
