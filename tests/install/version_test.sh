#!/usr/bin/env bash
# `ddprun --version` names the version written in python/ddprun/__init__.py
# (the one place) and, in a git checkout, the commit it was built from: a
# commit of this checkout's history (HEAD itself on a fresh clone; an
# ancestor when commits came after the build was configured).
#   version_test.sh DDPRUN SOURCE_DIR
set -euo pipefail
ddprun=$1 src=$2
version=$(sed -n 's/^__version__ = "\([0-9.]*\)"$/\1/p' "$src/python/ddprun/__init__.py")
[ -n "$version" ] || { echo "no __version__ in $src/python/ddprun/__init__.py"; exit 1; }
got=$("$ddprun" --version)
if ! git -C "$src" rev-parse HEAD >/dev/null 2>&1; then
  [ "$got" = "ddprun $version" ] || { echo "ddprun --version says '$got', want 'ddprun $version'"; exit 1; }
  echo "ok: $got"
  exit 0
fi
if [[ ! "$got" =~ ^ddprun\ ${version//./\\.}\ \(commit\ ([0-9a-f]{12})\)$ ]]; then
  echo "ddprun --version says '$got', want 'ddprun $version (commit <12 hex digits>)'"
  exit 1
fi
commit=${BASH_REMATCH[1]}
git -C "$src" merge-base --is-ancestor "$commit" HEAD 2>/dev/null ||
  { echo "ddprun --version names commit $commit, which is not in this checkout's history"; exit 1; }
echo "ok: $got"
