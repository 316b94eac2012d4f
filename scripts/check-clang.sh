#!/usr/bin/env bash
# Every source warning-free under a second compiler: the PyTorch 2.x lane
# (build/torch2) compiles what links LibTorch with clang; this checks the
# rest of the first build (launcher, agent, rendezvous server, trace, bench
# and their tests, built there with GCC) with clang's -fsyntax-only and the
# same flags, -Werror included. (The first build's LibTorch 1.13 sources are
# left out: 1.13's headers do not parse under clang 14 in C++20.)
#   scripts/check-clang.sh FIRST_BUILD_DIR CLANG_BUILD_DIR
set -euo pipefail
first=$1 second=$2
clangxx=$(command -v clang++ || true)
if [ -z "$clangxx" ]; then
  echo "check-clang: no clang++ (scripts/install-deps.sh installs it)" >&2
  exit 1
fi
for db in "$first/compile_commands.json" "$second/compile_commands.json"; do
  [ -f "$db" ] || { echo "check-clang: $db is missing" >&2; exit 1; }
done
list=$(mktemp)
trap 'rm -f "$list"' EXIT
python3 - "$first/compile_commands.json" "$second/compile_commands.json" "$clangxx" >"$list" <<'EOF'
import json, os, shlex, sys
first, second, clang = sys.argv[1:4]
generated = os.path.dirname(os.path.abspath(first)) + "/"  # protoc's output, under the first build
done_by_clang = {e["file"] for e in json.load(open(second))}

def check(e, f):
    """Prints the directory and the clang -fsyntax-only command for source f
    compiled with entry e's flags."""
    args = shlex.split(e["command"])
    # the compiler (after ccache), then its flags without the output ones
    while args and args[0].endswith("ccache"):
        args.pop(0)
    out, skip = [clang, "-fsyntax-only"], False
    for a in args[1:]:
        if skip:
            skip = False
            continue
        if a in ("-o", "-MF", "-MT", "-c"):
            skip = a != "-c"
            continue
        if a == "-MD" or a == e["file"]:
            continue
        out.append(a)
    out.append(f)
    print(e["directory"] + "\t" + shlex.join(out))


def sources(f):
    """A unity source (CMAKE_UNITY_BUILD) stands for the sources it
    includes: each is checked on its own, so a file that leans on an
    include of the file before it in its unit is still caught."""
    if "/Unity/unity_" not in f:
        return [f]
    return [l.split('"')[1] for l in open(f) if l.startswith('#include "')]

for e in json.load(open(first)):
    # LibTorch 1.13's headers do not parse under clang 14 in C++20; what
    # links LibTorch gets clang in the second lane, against 2.x.
    if "torch/csrc/api/include" in e["command"]:
        continue
    for f in sources(e["file"]):
        if f in done_by_clang or f.startswith(generated):
            continue
        check(e, f)
EOF
n=$(wc -l <"$list")
echo "check-clang: $n sources of $first not compiled by clang in $second"
fail=0
while IFS=$'\t' read -r dir cmd; do
  printf '%s\t%s\n' "$dir" "$cmd"
done <"$list" | xargs -P "$(nproc)" -d '\n' -n 1 bash -c '
  IFS=$'"'"'\t'"'"' read -r dir cmd <<<"$0"
  cd "$dir" && eval "$cmd" 2>&1 || { echo "check-clang: FAILED: ${cmd##* }"; exit 255; }' || fail=1
if [ $fail -ne 0 ]; then
  echo "check-clang: warnings or errors under clang (above)" >&2
  exit 1
fi
echo "check-clang: all $n warning-free under $($clangxx --version | head -1)"
