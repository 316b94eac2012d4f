#!/usr/bin/env bash
# Runs every test (unit, multi-process integration, PyTorch interop) on a
# fresh machine: set-up and build first, then ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# The Kubernetes manifest's validator comes from the npm registry (once).
if [ ! -d build/k8s-check/node_modules/kubernetes-models ]; then
  if ! command -v npm >/dev/null; then
    sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends nodejs npm || true
  fi
  scripts/check-k8s.sh --install || echo "test.sh: WARNING: no Kubernetes validator; k8s.manifests_validate will be skipped"
fi
cd build
ctest -j2 --output-on-failure --timeout 600
