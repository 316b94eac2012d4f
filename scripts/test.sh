#!/usr/bin/env bash
# Runs every test (unit, multi-process integration, PyTorch interop) on a
# fresh machine: set-up and build first, then ctest, in two lanes: build/
# against Debian's LibTorch and PyTorch 1.13 (GCC), build/torch2 against
# PyPI's PyTorch 2.x (clang; scripts/torch2-requirements.txt pins it).
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
# The PyTorch 2.x lane: a venv with PyPI's PyTorch and a build against its
# LibTorch (what links LibTorch or runs PyTorch, with clang).
scripts/setup-torch2.sh
# Both lanes run; either failing fails the whole.
status=0
(cd build && ctest -j2 --output-on-failure --timeout 600) || status=1
echo "test.sh: the PyTorch 2.x lane (build/torch2, torch $(build/torch2-venv/bin/python -c 'import torch; print(torch.__version__)' 2>/dev/null))"
(cd build/torch2 && ctest -j2 --output-on-failure --timeout 600) || status=1
exit $status
