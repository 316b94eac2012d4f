#!/usr/bin/env bash
# Runs every test (unit, multi-process integration, PyTorch interop) on a
# fresh machine: set-up and build first, then ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cd build
ctest -j2 --output-on-failure --timeout 600
