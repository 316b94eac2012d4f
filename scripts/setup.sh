#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine and builds into build/: installs the
# missing Debian packages (scripts/install-deps.sh), configures with CMake,
# builds.
#
#   scripts/setup.sh                  the main job: ddprun and train (and the
#                                     libraries they link), nothing else
#   scripts/setup.sh --launcher-only  ddprun alone, no LibTorch: for PyTorch scripts
#   scripts/setup.sh --all            everything: the tests, benchmarks and examples
#                                     too (scripts/test.sh runs this)
# Safe to run again; a later run builds what an earlier one left out.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=job
case "${1:-}" in
  "") ;;
  --launcher-only) mode=launcher ;;
  --all) mode=tests ;;
  *) echo "setup.sh: unknown option '$1' (--launcher-only or --all)" >&2; exit 2 ;;
esac
[ "$#" -le 1 ] || { echo "setup.sh: one option at most (--launcher-only or --all)" >&2; exit 2; }
scripts/install-deps.sh "$mode"
launcher_only=OFF require_tests=OFF targets=(--target ddprun train)
case "$mode" in
  launcher) launcher_only=ON targets=(--target ddprun) ;;
  tests) require_tests=ON targets=() ;;
esac
# Debian's LibTorch here, even with a venv active (scripts/setup-torch2.sh builds against PyPI's).
env -u VIRTUAL_ENV cmake -S . -B build -G Ninja -DDDPRUN_WERROR=ON -DDDPRUN_LAUNCHER_ONLY="$launcher_only" \
    -DDDPRUN_REQUIRE_TESTS="$require_tests"
cmake --build build "${targets[@]}"
