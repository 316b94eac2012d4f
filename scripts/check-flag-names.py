#!/usr/bin/env python3
"""Every flag that ddprun's own messages name exists: each `--flag` in a string
literal under launcher/, agent/, rendezvous/, tcpstore/, trace/ and
worker_lib/src/ must be one that `ddprun --help` or one of its subcommands'
help lists (a token ending in "-", as in "--rdzv-tls-" + what, must begin
one), or another program's flag named below with its owner. Prints each one
that is not as FILE:LINE and exits 1; 0 when all exist.

    scripts/check-flag-names.py DDPRUN_BIN [ROOT]
"""
import os
import re
import subprocess
import sys

FOLDERS = ["launcher", "agent", "rendezvous", "tcpstore", "trace", os.path.join("worker_lib", "src")]
SUBCOMMANDS = [[], ["status"], ["rendezvous"], ["trace-merge"], ["report"]]
# Flags of other programs that messages tell the user to pass there.
OTHERS = {"--shm-size": "docker run", "--ntasks-per-node": "srun"}
LITERAL = re.compile(r'"((?:[^"\\]|\\.)*)"')
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9_-]*")


def help_flags(ddprun):
    flags = set()
    for sub in SUBCOMMANDS:
        out = subprocess.run([ddprun] + sub + ["--help"], capture_output=True, text=True, timeout=30)
        flags.update(FLAG.findall(out.stdout + out.stderr))
    return flags


def exists(flag, known):
    if flag.endswith("-"):
        return any(k.startswith(flag) for k in known)
    return flag in known or flag in OTHERS


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    ddprun = sys.argv[1]
    root = os.path.abspath(sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), ".."))
    known = help_flags(ddprun)
    if "--nproc" not in known:
        print("check-flag-names: `%s --help` lists no --nproc; is it ddprun?" % ddprun)
        return 1
    problems = []
    for folder in FOLDERS:
        for dirpath, _, filenames in os.walk(os.path.join(root, folder)):
            for name in sorted(filenames):
                if not name.endswith((".h", ".cpp")):
                    continue
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8", errors="replace") as f:
                    for number, line in enumerate(f, 1):
                        if line.lstrip().startswith("//"):
                            continue  # comments may name anything
                        for literal in LITERAL.findall(line):
                            for flag in FLAG.findall(literal):
                                if not exists(flag, known):
                                    problems.append("%s:%d names %s, which no ddprun help lists" % (
                                        os.path.relpath(path, root), number, flag))
    for p in problems:
        print(p)
    if problems:
        print("check-flag-names: %d message(s) name a flag that does not exist" % len(problems))
        return 1
    print("check-flag-names: every flag named in ddprun's messages exists (%d known)" % len(known))
    return 0


if __name__ == "__main__":
    sys.exit(main())
