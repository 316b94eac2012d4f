#!/usr/bin/env bash
# The second lane: PyTorch 2.x from PyPI and a build against its LibTorch.
#   1. build/torch2-venv: a venv with what scripts/torch2-requirements.txt
#      pins (a few GB, the CUDA wheel; reused while the pins are unchanged),
#      then scripts/frameworks-requirements.txt's (Lightning, the Hugging
#      Face Trainer: small, installed again only when that file changes);
#   2. build/torch2: worker_lib, the examples and every test that links
#      LibTorch or runs PyTorch, built with clang against the venv's
#      LibTorch; the launcher, agent and rendezvous are build/'s (run
#      scripts/setup.sh first).
# Safe to run again. Usage: scripts/setup-torch2.sh [--venv-only]
#   --venv-only   step 1 alone (scripts/test.sh downloads it while build/ compiles)
set -euo pipefail
cd "$(dirname "$0")/.."
venv=build/torch2-venv
pins=scripts/torch2-requirements.txt
case "${1:-}" in
  "" | --venv-only) ;;
  *) echo "setup-torch2: unknown option '$1' (--venv-only)" >&2; exit 2 ;;
esac
if [ "${1:-}" != --venv-only ] && [ ! -x build/bin/ddprun ]; then
  echo "setup-torch2: build/bin/ddprun is missing: run scripts/setup.sh first" >&2
  exit 2
fi
mkdir -p build
if ! cmp -s "$pins" "$venv/installed-requirements.txt" 2>/dev/null; then
  echo "setup-torch2: installing $(grep -c '==' "$pins") pinned packages into $venv"
  python=$(command -v python3)
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$pins"
  cp "$pins" "$venv/installed-requirements.txt"
  rm -f "$venv/installed-frameworks.txt"
fi
frameworks=scripts/frameworks-requirements.txt
if ! cmp -s "$frameworks" "$venv/installed-frameworks.txt" 2>/dev/null; then
  echo "setup-torch2: installing $(grep -c '==' "$frameworks") pinned framework packages into $venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -c "$pins" -r "$frameworks"
  cp "$frameworks" "$venv/installed-frameworks.txt"
fi
[ "${1:-}" != --venv-only ] || exit 0
"$venv/bin/python" -c 'import torch; print("setup-torch2: torch", torch.__version__)'
cxx=g++
command -v clang++ >/dev/null && cxx=clang++
cmake -S . -B build/torch2 -G Ninja -DDDPRUN_WERROR=ON -DCMAKE_CXX_COMPILER="$cxx" \
      -DDDPRUN_PYTHON="$PWD/$venv/bin/python" -DDDPRUN_TOOLS_FROM="$PWD/build/bin" -DDDPRUN_REQUIRE_TESTS=ON
cmake --build build/torch2
