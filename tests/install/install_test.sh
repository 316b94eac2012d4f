#!/usr/bin/env bash
# `cmake --install` into a fresh prefix, a project outside the source tree
# that does find_package(ddprun) and links ddprun::worker, then the
# installed ddprun runs it with 2 workers; the installed ddprun must also
# find its bundled `train` next to itself.
# With a wheel's LibTorch, the package names the Python it came from
# (DDPRUN_PYTHON), which may lie anywhere, the build folder included.
# Usage: install_test.sh BUILD_DIR SOURCE_DIR [PYTHON]
set -uo pipefail
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd)
python=${3:-}
tmp=$(mktemp -d /tmp/ddprun-install.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAILED: $*"; exit 1; }

cmake --install "$build" --prefix "$tmp/prefix" >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; fail "cmake --install"; }
for f in bin/ddprun bin/train include/ddprun/ddp/ddp.h include/ddprun/rendezvous/store/store.h \
         lib/cmake/ddprun/ddprunConfig.cmake lib/cmake/ddprun/ddprunConfigVersion.cmake lib/cmake/ddprun/ddprunTargets.cmake; do
  [ -e "$tmp/prefix/$f" ] || fail "$f not installed"
done

# The installed headers are the public API alone: each one includes only
# headers installed beside it (an internal header of worker_lib's src/ would
# be missing for the user).
for h in $(cd "$tmp/prefix/include/ddprun" && find . -name '*.h'); do
  for inc in $(sed -n 's/^#include "\(.*\)"$/\1/p' "$tmp/prefix/include/ddprun/$h"); do
    [ -e "$tmp/prefix/include/ddprun/$inc" ] || fail "installed $h includes $inc, which is not installed"
  done
done
[ -e "$tmp/prefix/include/ddprun/ddp/shm_group.h" ] && fail "worker_lib's internals (ddp/shm_group.h) are installed"

# The user's project sees only the prefix: no path into this build or source tree.
cmake -S "$src/tests/install/hello" -B "$tmp/hello" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$tmp/prefix" >"$tmp/configure.log" 2>&1 || { cat "$tmp/configure.log"; fail "configure the hello project"; }
cmake --build "$tmp/hello" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; fail "build the hello project"; }
named=$(grep -rh -e "$build" -e "$src" "$tmp/prefix/lib/cmake")
if [ -n "$python" ]; then
  venv=$(dirname "$(dirname "$python")")
  named=$(echo "$named" | grep -v -F "$venv")
fi
if [ -n "$named" ]; then echo "$named"; fail "the installed package names the build or source tree"; fi

out=$(cd "$tmp" && "$tmp/prefix/bin/ddprun" --nproc 2 "$tmp/hello/hello" 2>&1)
rc=$?
echo "$out"
[ $rc -eq 0 ] || fail "installed ddprun --nproc 2 hello exited with $rc"
[ "$(echo "$out" | grep -c 'of 2: sum 3$')" -eq 2 ] || fail "expected both ranks to print 'of 2: sum 3'"

# `train` is found next to the installed ddprun, not through PATH or the build.
out=$(cd "$tmp" && PATH=/usr/bin:/bin "$tmp/prefix/bin/ddprun" --nproc 1 train --help 2>&1)
rc=$?
[ $rc -eq 0 ] || { echo "$out"; fail "installed ddprun could not run its train ($rc)"; }
echo "PASSED"
