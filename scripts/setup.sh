#!/usr/bin/env bash
# Sets up a fresh machine and builds everything into build/:
# installs the missing Debian packages, configures with CMake, builds.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
# Debian's LibTorch here, even with a venv active (scripts/setup-torch2.sh builds against PyPI's).
env -u VIRTUAL_ENV cmake -S . -B build -G Ninja -DDDPRUN_WERROR=ON
cmake --build build
