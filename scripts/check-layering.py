#!/usr/bin/env python3
"""Checks the layering each top-level folder's README.md states: every
`#include` under the folder against the README's line

    - Must never include: `agent/`, `torch/`, `rendezvous/server/server.h`, ...

A token ending in "/" forbids every include under that path; any other
forbids that one header. worker_lib/README.md also orders the folders of
its src/, floor first, floors separated by "|":

    - Inside `src/`, floor first (...): `base/` | `comm/` | `checkpoint/` `heal/` | `launch/`

and a source under src/F may include "G/..." of another src folder G only
when G stands on a lower floor. Its public headers (include/ddp/X.h) stand
on the floor of the folder that implements them (src/G/X.cpp; a header
without a source on the floor its README names in the line

    - Public headers without a source, by folder: `comm/` `collective_error.h`; ...

): an include of "ddp/X.h" is read as one of that folder, in src/ and in
the public headers alike, so no folder reaches up through the API either.
rendezvous/README.md orders its folders likewise (nested ones too: the
longest folder that holds a file is its).
Prints each violation as FILE:LINE and the rule it breaks, and exits 1 if
there is any (or a folder lost its rule); 0 if none.

    scripts/check-layering.py [ROOT]
"""
import os
import re
import sys

# The folders whose README must state a rule (a README that loses its rule
# would otherwise check nothing).
FOLDERS = ["agent", "agent/base", "agent/output", "agent/health", "agent/processes", "agent/supervision", "channel", "launcher", "rendezvous", "rendezvous/store", "rendezvous/wire", "rendezvous/client",
           "rendezvous/control_plane", "rendezvous/server", "tcpstore", "trace", "worker_lib"]
RULE = re.compile(r"^- Must never include:(.*)$", re.MULTILINE)
TOKEN = re.compile(r"`([^`]+)`")
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]')
SOURCES = (".h", ".hpp", ".cc", ".cpp")


def includes_in(top, every_file=False):
    """(path, line number, included name) of every #include in the sources
    under `top` (build folders and hidden ones left out); with every_file,
    also (path, 0, None) for each source, before its includes."""
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = [d for d in dirnames if not d.startswith(("build", "."))]
        for name in sorted(filenames):
            if not name.endswith(SOURCES):
                continue
            path = os.path.join(dirpath, name)
            if every_file:
                yield path, 0, None
            with open(path, encoding="utf-8", errors="replace") as f:
                for number, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if m:
                        yield path, number, m.group(1)


def forbidden_by(folder_readme):
    with open(folder_readme, encoding="utf-8") as f:
        m = RULE.search(f.read())
    return None if m is None else TOKEN.findall(m.group(1))


FLOORS = re.compile(r"^- Inside `[^`]+`, floor first[^:]*:(.*)$", re.MULTILINE)

# Libraries whose README orders their folders: (README's folder, the folder
# the floors are in, the prefix an #include of them starts with, and the
# folder of its public headers with their include prefix, if it has one).
FLOORED = [("worker_lib", "worker_lib/src", "", ("worker_lib/include/ddp", "ddp/")),
           ("rendezvous", "rendezvous", "rendezvous/", None), ("agent", "agent", "agent/", None)]
HEADER_ONLY = re.compile(r"^- Public headers without a source[^:]*:(.*)$", re.MULTILINE)


def floors_of(folder_readme):
    """{folder: floor number} from a README's floor line, or None."""
    with open(folder_readme, encoding="utf-8") as f:
        m = FLOORS.search(f.read())
    if m is None:
        return None
    return {name.rstrip("/"): i for i, floor in enumerate(m.group(1).split("|")) for name in TOKEN.findall(floor)}


def floor_of(path, floors):
    """The longest floor folder that `path` (relative, with /) is in, or None."""
    best = None
    for name in floors:
        if (path == name or path.startswith(name + "/")) and (best is None or len(name) > len(best)):
            best = name
    return best


def public_owners(root, lib, base, public, problems):
    """{public header's name: the floor folder it stands on}: the folder of
    base whose source implements it (X.cpp for X.h), else the one the
    README's "Public headers without a source" line names (None there: an
    umbrella header on no floor)."""
    directory, _ = public
    with open(os.path.join(root, lib, "README.md"), encoding="utf-8") as f:
        m = HEADER_ONLY.search(f.read())
    named = {}
    for segment in (m.group(1).split(";") if m else []):
        folder = None
        for token in TOKEN.findall(segment):
            if token.endswith("/"):
                folder = token.rstrip("/")
            else:
                named[token] = folder
    sources = {}
    for dirpath, _, filenames in os.walk(os.path.join(root, base)):
        for name in filenames:
            if name.endswith((".cpp", ".cc")):
                sources[os.path.splitext(name)[0] + ".h"] = os.path.relpath(dirpath, os.path.join(root, base))
    owners = {}
    for name in sorted(os.listdir(os.path.join(root, directory))):
        if name in sources:
            owners[name] = sources[name].replace(os.sep, "/")
        elif name in named:
            owners[name] = named[name]
        else:
            problems.add("%s/%s: no source of %s implements it and %s/README.md's 'Public headers without a source' "
                         "line does not name its folder" % (directory, name, base, lib))
    return owners


def floor_problems(root, lib, base, prefix, public, floors):
    """Includes inside `base` (and its public headers) that reach a folder
    on the same or a higher floor."""
    top = os.path.join(root, base)
    problems = set()
    owners = public_owners(root, lib, base, public, problems) if public else {}
    files = list(includes_in(top, every_file=True))
    if public:
        files += list(includes_in(os.path.join(root, public[0]), every_file=True))
    for path, number, include in files:
        if public and os.path.dirname(path) == os.path.join(root, public[0]):
            here = owners.get(os.path.basename(path))
            if here is None:  # an umbrella header, or one reported above
                continue
            if here not in floors:
                problems.add("%s: stands on %s/, which is not on %s/README.md's floors" % (
                    os.path.relpath(path, root), here, lib))
                continue
        else:
            rel = os.path.relpath(os.path.dirname(path), top).replace(os.sep, "/")
            if rel == ".":  # the top holds no floor (worker_lib/src/torch_pch.cpp)
                continue
            here = floor_of(rel, floors)
            if here is None:
                problems.add("%s/%s: sources in a folder not on %s/README.md's floors" % (base, rel, lib))
                continue
        if include is None:
            continue
        if public and include.startswith(public[1]) and include[len(public[1]):] in owners:
            target = owners[include[len(public[1]):]]
        elif include.startswith(prefix):
            target = floor_of(os.path.dirname(include[len(prefix):]), floors)
        else:
            continue
        if target and target != here and floors.get(target, -1) >= floors[here]:
            problems.add("%s:%d includes %s: %s/ is not below %s/ on %s/README.md's floors" % (
                os.path.relpath(path, root), number, include, target, here, lib))
    return sorted(problems)


def breaks(include, rules):
    return next((r for r in rules if (include.startswith(r) if r.endswith("/") else include == r)), None)


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    problems = []
    for folder in FOLDERS:
        readme = os.path.join(root, folder, "README.md")
        rules = forbidden_by(readme) if os.path.exists(readme) else None
        if not rules:
            problems.append("%s/README.md: no '- Must never include:' line (the folder's layering rule)" % folder)
            continue
        for path, number, include in includes_in(os.path.join(root, folder)):
            rule = breaks(include, rules)
            if rule:
                problems.append("%s:%d includes %s, which %s/README.md forbids (`%s`)" % (
                    os.path.relpath(path, root), number, include, folder, rule))
    floored = 0
    for lib, base, prefix, public in FLOORED:
        floors = floors_of(os.path.join(root, lib, "README.md"))
        if not floors:
            problems.append("%s/README.md: no '- Inside `...`, floor first' line (its folders' order)" % lib)
            continue
        floored += len(floors)
        problems += floor_problems(root, lib, base, prefix, public, floors)
    for p in problems:
        print(p)
    if problems:
        print("layering: %d problem(s); move the code, or change the rule in the folder's README "
              "(and the layering in docs/architecture.md) in the same change" % len(problems))
        return 1
    print("layering: %d folders and %d floored ones inside worker_lib/src (its public headers on their folders' "
          "floors), rendezvous and agent, every include within its rules" % (len(FOLDERS), floored))
    return 0


if __name__ == "__main__":
    sys.exit(main())
