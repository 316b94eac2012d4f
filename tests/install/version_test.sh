#!/usr/bin/env bash
# `ddprun --version` names the version written in python/ddprun/__init__.py
# (the one place) and, in a git checkout, the commit it was built from.
#   version_test.sh DDPRUN SOURCE_DIR
set -euo pipefail
ddprun=$1 src=$2
version=$(sed -n 's/^__version__ = "\([0-9.]*\)"$/\1/p' "$src/python/ddprun/__init__.py")
[ -n "$version" ] || { echo "no __version__ in $src/python/ddprun/__init__.py"; exit 1; }
commit=$(git -C "$src" rev-parse --short=12 HEAD 2>/dev/null || true)
want="ddprun $version${commit:+ (commit $commit)}"
got=$("$ddprun" --version)
if [ "$got" != "$want" ]; then
  echo "ddprun --version says '$got', want '$want'"
  exit 1
fi
echo "ok: $got"
