#!/usr/bin/env bash
# The launcher-only set-up (scripts/setup.sh --launcher-only) needs no
# LibTorch: configured with find_package(Torch) disabled, it still
# configures, its build has ddprun and no LibTorch code (no worker_lib,
# no examples, no LibTorch include path), and setup.sh refuses an unknown
# option as a usage error.
# Usage: launcher_only_test.sh SOURCE_DIR
set -euo pipefail
src=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# Torch cannot be found here: a configure that looks for it fails.
cmake -S "$src" -B "$tmp/b" -G Ninja -DDDPRUN_LAUNCHER_ONLY=ON -DCMAKE_DISABLE_FIND_PACKAGE_Torch=ON \
      > "$tmp/configure.log" 2>&1 || { cat "$tmp/configure.log"; fail "the launcher-only configure failed"; }
targets=$(ninja -C "$tmp/b" -t targets all)
grep -q '^ddprun:' <<<"$targets" || fail "no ddprun target"
for t in ddp train gpt hello integration_tests; do
  if grep -q "^$t:" <<<"$targets"; then fail "the launcher-only build has the LibTorch target $t"; fi
done
if grep -q 'torch/csrc\|libtorch' "$tmp/b/build.ninja"; then fail "build.ninja names LibTorch"; fi
[ -f "$tmp/b/python/ddprun/heal.py" ] || fail "the Python package is not beside the programs"

# A careless option is a one-line usage error (exit 2), before any apt.
set +e
out=$("$src/scripts/setup.sh" --launcher 2>&1); rc=$?
set -e
[ "$rc" -eq 2 ] || fail "setup.sh --launcher exited $rc, not 2: $out"
[ "$(wc -l <<<"$out")" -eq 1 ] || fail "setup.sh --launcher said more than one line: $out"
grep -q -- "--launcher" <<<"$out" || fail "setup.sh's error does not name the option: $out"
echo "launcher-only: configures without LibTorch and names no LibTorch target"
