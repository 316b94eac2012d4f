#!/usr/bin/env python3
"""The doc test: the README and docs/ may say only what is true of the code.

  check-docs.py ROOT BIN_DIR PARSE_CHECK

It checks, in README.md and docs/*.md:
- links: every relative link leads to a file that exists, and every #anchor
  to a heading of that file;
- paths: every repository path named in `backticks` (agent/lifecycle.cpp,
  bench/node_loss.py, ...) exists;
- names: every `Class::member` named in docs/architecture.md is defined in
  the sources, so the guide through the code cannot point at code that moved;
  in its table of where each decision is made, each function is defined in
  a file its row names;
- commands: every command in a code block.
  * `ddprun ...` parses with ddprun's own parser (PARSE_CHECK links it); a
    command shown with the error it gets (`ddprun: error: ...` on the next
    line) must get exactly that error. Our programs as entrypoints (train,
    gpt, hello, examples/...) must exist, and the flags given to them must
    be flags they have. `ddprun status|rendezvous|trace-merge|report` flags must be
    in that subcommand's --help.
  * bench/, scripts/, fuzz/ and build/bin/ programs must exist, and each
    --flag given to them must be one they have (in their --help, or, for
    scripts, in their source);
- blocks marked `<!-- doc-test: run -->` (optionally `expect "TEXT"`) run,
  line by line from ROOT with BIN_DIR's programs, and exit 0 (printing TEXT);
- blocks marked `<!-- doc-test: same-as PATH -->` appear in PATH verbatim;
- `ddprun --help` names, in each group of flags, guides that exist;
- figures: every measured figure in the README's prose (a number with a
  unit: s, ms, %, x, minutes, MB, ...) is in bench/RESULTS.md, there to the
  same or more digits (47.69 gives the README's 47.7), so that each one
  leads to the run, date and command behind it.
Exit 0 when all hold; otherwise every problem, one line each, and exit 1.
"""
import functools
import os
import re
import shlex
import subprocess
import sys

ROOT, BIN, PARSE_CHECK = (os.path.abspath(a) for a in sys.argv[1:4])
PROBLEMS = []
CHECKED = {"links": 0, "paths": 0, "names": 0, "ddprun commands": 0, "other commands": 0, "runs": 0,
           "README figures": 0}

# Programs of ours an entrypoint or command may name (built into BIN_DIR).
OUR_PROGRAMS = {"train", "gpt", "hello", "heal_throughput", "ddp_step_bench", "allreduce_worker",
                "first_allreduce_worker", "rendezvous_round", "probe", "collective_check"}
# Entrypoints in examples that stand for the user's own program or script.
PLACEHOLDERS = {"my_script.py", "my_train", "build/my_train", "script.py", "train.py", "/bin/true"}
SUBCOMMANDS = {"status", "rendezvous", "trace-merge", "report"}


def problem(where, what):
    PROBLEMS.append("%s: %s" % (where, what))


def doc_files():
    files = [os.path.join(ROOT, "README.md")]
    docs = os.path.join(ROOT, "docs")
    files += sorted(os.path.join(docs, f) for f in os.listdir(docs) if f.endswith(".md"))
    return files


def rel(path):
    return os.path.relpath(path, ROOT)


# ---- links and anchors ---------------------------------------------------

def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to '-'."""
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


@functools.lru_cache(maxsize=None)  # read each file once, however many links lead to it
def anchors_of(path):
    out = set()
    in_fence = False
    for line in open(path, encoding="utf-8"):
        if line.startswith("```"):
            in_fence = not in_fence
        elif not in_fence and line.startswith("#"):
            out.add(slug(line.lstrip("#")))
    return out


def check_links(path, text):
    for m in re.finditer(r"\[[^\]]*\]\(([^)\s]+)\)", text):
        target = m.group(1)
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        CHECKED["links"] += 1
        file_part, _, anchor = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
        line = text.count("\n", 0, m.start()) + 1
        if not os.path.exists(dest):
            problem("%s:%d" % (rel(path), line), "link to %s, which does not exist" % target)
        elif anchor and dest.endswith(".md") and anchor not in anchors_of(dest):
            problem("%s:%d" % (rel(path), line), "link to #%s, which is no heading of %s" % (anchor, rel(dest)))


# ---- paths and names -----------------------------------------------------

TOP = {"agent", "bench", "channel", "cmake", "deploy", "docs", "examples", "fuzz", "launcher", "proto",
       "rendezvous", "scripts", "tcpstore", "tests", "trace", "worker_lib", ".ci"}
PATH_RE = re.compile(r"^([\w.-]+)/[\w./-]*[\w]$")


def check_paths(path, text):
    for m in re.finditer(r"`([^`\n]+)`", text):
        token = m.group(1)
        pm = PATH_RE.match(token)
        if not pm or pm.group(1) not in TOP or "*" in token:
            continue
        CHECKED["paths"] += 1
        if not os.path.exists(os.path.join(ROOT, token)):
            line = text.count("\n", 0, m.start()) + 1
            problem("%s:%d" % (rel(path), line), "names `%s`, which does not exist" % token)


def source_text():
    chunks = []
    for top in ("agent", "channel", "launcher", "rendezvous", "tcpstore", "trace", "worker_lib", "examples"):
        for dirpath, _, names in os.walk(os.path.join(ROOT, top)):
            for n in names:
                if n.endswith((".cpp", ".h")):
                    chunks.append(open(os.path.join(dirpath, n), encoding="utf-8").read())
    return "\n".join(chunks)


def check_names(path, text):
    sources = source_text()
    for m in re.finditer(r"`(\w+)::(\w+)`", text):
        cls, member = m.groups()
        if cls in ("ddp", "ddprun", "std", "torch", "at", "c10d", "CLI", "grpc", "tcpstore", "trace"):
            continue
        CHECKED["names"] += 1
        defined = re.search(r"\b%s::%s\b" % (cls, member), sources) or (
            re.search(r"\b(class|struct|enum class|enum)\s+%s\b" % cls, sources)
            and re.search(r"\b%s\b" % member, sources))
        if not defined:
            line = text.count("\n", 0, m.start()) + 1
            problem("%s:%d" % (rel(path), line), "names `%s::%s`, which the sources do not define" % (cls, member))


def defines(file_text, name, python):
    """Whether a source defines or declares `name`: Class::member,
    Class.method (Python), a class, or a free function."""
    if python:
        parts = name.split(".")
        return all(re.search(r"^\s*(def|class)\s+%s\b" % re.escape(p), file_text, re.M) for p in parts)
    if "::" in name:
        cls, member = name.split("::")
        if re.search(r"\b%s::%s\s*\(" % (cls, member), file_text):
            return True  # defined out of line (a .cpp)
        return bool(re.search(r"\b(class|struct)\s+%s\b" % cls, file_text)
                    and re.search(r"^[ \t]*[\w:<>,*& \t]*\b%s\s*\(" % member, file_text, re.M))
    return bool(re.search(r"\b(class|struct|enum class)\s+%s\b" % name, file_text)
                or re.search(r"^[\w:<>,*& \t]*[\w>*&]\s+%s\s*\(" % name, file_text, re.M))


def check_decision_table(path, text):
    """docs/architecture.md's table of where each decision is made: every
    row names the files (`agent/x.cpp`) and the functions there; each
    function must be defined in one of its row's files, so the map cannot
    send a reader to a file that no longer decides it."""
    start = text.find("Where each decision is made")
    if start < 0:
        problem(rel(path), "has no table of where each decision is made")
        return
    table_start = text.index("\n|", start) + 1
    end = text.find("\n\n", table_start)
    table = text[table_start:end if end > 0 else len(text)]
    rows = 0
    for m in re.finditer(r"^\| (.+?) \| (.+?) \|$", table, re.M):
        what, where = m.groups()
        if what == "decision" or set(what) <= set("-|"):
            continue
        line = text.count("\n", 0, table_start + m.start()) + 1
        rows += 1
        tokens = re.findall(r"`([^`]+)`", where)
        files = [t for t in tokens if "/" in t and re.search(r"\.(cpp|h|py)$", t)]
        names = [t for t in tokens if re.fullmatch(r"[A-Za-z_]\w*((::|\.)\w+)?", t)
                 and not re.search(r"\.(cpp|h|py)$", t)]
        named_alone = [t for t in tokens if re.fullmatch(r"[\w.]+\.(cpp|h|py)", t)]
        for t in named_alone:
            problem("%s:%d" % (rel(path), line), "the decision '%s' names `%s` without its folder" % (what, t))
        if not files or not names:
            problem("%s:%d" % (rel(path), line), "the decision '%s' names no file or no function" % what)
            continue
        texts = {f: open(os.path.join(ROOT, f), encoding="utf-8").read() for f in files
                 if os.path.isfile(os.path.join(ROOT, f))}
        for name in names:
            CHECKED["names"] += 1
            if not any(defines(t, name, f.endswith(".py")) for f, t in texts.items()):
                problem("%s:%d" % (rel(path), line), "the decision '%s': `%s` is not defined in %s"
                        % (what, name, ", ".join(files)))
    if rows < 10:
        problem(rel(path), "the table of where each decision is made has %d rows: the extraction is broken" % rows)


# ---- code blocks ---------------------------------------------------------

def code_blocks(text):
    """(first line number, lines, marker) for each fenced or indented block;
    marker is the `<!-- doc-test: ... -->` just before it, if any."""
    lines = text.split("\n")
    blocks = []
    i = 0
    marker = None
    while i < len(lines):
        line = lines[i]
        mk = re.match(r"\s*<!-- doc-test: (.*) -->\s*$", line)
        if mk:
            marker = mk.group(1)
            i += 1
            continue
        fence = re.match(r"(\s*)```(\w*)", line)
        if fence:
            indent, lang = fence.groups()
            j = i + 1
            body = []
            while j < len(lines) and not lines[j].strip().startswith("```"):
                body.append(lines[j][len(indent):])
                j += 1
            blocks.append((i + 2, body, marker, lang))
            marker = None
            i = j + 1
            continue
        if re.match(r"( {4,})\S", line) and (i == 0 or not lines[i - 1].strip() or lines[i - 1].strip().startswith("<!-- doc-test:")):
            indent = len(line) - len(line.lstrip(" "))
            j = i
            body = []
            while j < len(lines) and (lines[j].startswith(" " * indent) or not lines[j].strip()):
                if not lines[j].strip() and (j + 1 >= len(lines) or not lines[j + 1].startswith(" " * indent)):
                    break
                body.append(lines[j][indent:])
                j += 1
            blocks.append((i + 1, body, marker, ""))
            marker = None
            i = j
            continue
        if line.strip():
            marker = None if not line.strip().startswith("<!--") else marker
        i += 1
    return blocks


def commands_of(body):
    """(offset in block, command text, next line) with continuations joined."""
    out = []
    k = 0
    while k < len(body):
        start = k
        cmd = body[k].rstrip()
        while cmd.endswith("\\") and k + 1 < len(body):
            k += 1
            cmd = cmd[:-1] + " " + body[k].strip()
        nxt = body[k + 1] if k + 1 < len(body) else ""
        out.append((start, cmd.strip(), nxt))
        k += 1
    return out


def split_command(cmd):
    """The command's words without a prompt, a trailing comment, `time` and
    VAR=value assignments; None when it is not one to check."""
    if cmd.startswith("$ "):
        cmd = cmd[2:]
    cmd = re.sub(r"\s+#\s.*$", "", cmd)
    if "$(" in cmd or "..." in cmd or "|" in cmd:
        return None
    try:
        words = shlex.split(cmd)
    except ValueError:
        return None
    while words and (re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]) or words[0] == "time"):
        words = words[1:]
    return words or None


def is_ddprun(word):
    return word == "ddprun" or word.endswith("/bin/ddprun")


def flags_in(words):
    return [w.split("=", 1)[0] for w in words if w.startswith("--") and len(w) > 2]


HELP_CACHE = {}


def help_of(argv):
    key = tuple(argv)
    if key not in HELP_CACHE:
        try:
            r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
            HELP_CACHE[key] = r.stdout + r.stderr
        except (OSError, subprocess.TimeoutExpired) as e:
            HELP_CACHE[key] = "<%s>" % e
    return HELP_CACHE[key]


def has_flag(help_text, flag):
    return re.search(r"(^|[\s,\[(])%s([\s,=\])]|$)" % re.escape(flag), help_text, re.M) is not None


def check_program_flags(where, program_path, args, source=False):
    text = open(program_path, encoding="utf-8", errors="replace").read() if source else help_of([program_path, "--help"])
    for flag in flags_in(args):
        if source:
            ok = re.search(r"""["'\s(]%s["'\s=)]""" % re.escape(flag), text) is not None
        else:
            ok = has_flag(text, flag)
        if not ok:
            problem(where, "%s has no flag %s" % (rel(program_path) if program_path.startswith(ROOT) else program_path, flag))


def check_entrypoint(where, entry, args):
    if entry in PLACEHOLDERS:
        return
    name = entry[len("build/bin/"):] if entry.startswith("build/bin/") else entry
    if "/" not in name and not name.endswith(".py"):
        if name in OUR_PROGRAMS:
            prog = os.path.join(BIN, name)
            if not os.path.exists(prog):
                problem(where, "the entrypoint %s is not built into %s" % (name, BIN))
            elif name != "hello":
                check_program_flags(where, prog, args)
            elif args:
                problem(where, "hello takes no arguments, got %s" % " ".join(args))
        else:
            problem(where, "the entrypoint %s is none of our programs (nor a placeholder the doc test knows)" % name)
        return
    path = os.path.join(ROOT, entry)
    if entry.split("/")[0] in TOP:
        if not os.path.exists(path):
            problem(where, "the entrypoint %s does not exist" % entry)
        elif entry.endswith(".py"):
            check_program_flags(where, path, args, source=True)
    else:
        problem(where, "the entrypoint %s is none of our programs (nor a placeholder the doc test knows)" % entry)


def check_ddprun(where, words, next_line, parse_results):
    args = words[1:]
    CHECKED["ddprun commands"] += 1
    if args and args[0] in SUBCOMMANDS:
        text = help_of([os.path.join(BIN, "ddprun"), args[0], "--help"])
        for flag in flags_in(args[1:]):
            if not has_flag(text, flag):
                problem(where, "ddprun %s has no flag %s" % (args[0], flag))
        return
    parse_results.append((where, args, next_line))


def run_parse_checks(pending):
    if not pending:
        return
    stdin = "".join("\t".join(args) + "\n" for _, args, _ in pending)
    r = subprocess.run([PARSE_CHECK], input=stdin, capture_output=True, text=True, timeout=60)
    answers = r.stdout.split("\n")
    for (where, args, next_line), answer in zip(pending, answers):
        fields = answer.split("\t")
        expected = next_line.strip()
        if expected.startswith("ddprun: error: "):
            got = "ddprun: error: " + fields[1] if fields[0] == "error" else "(it parses)"
            if got != expected:
                problem(where, "the docs show `%s`, ddprun says `%s`" % (expected, got))
            continue
        if fields[0] == "error":
            problem(where, "ddprun rejects it: %s" % fields[1])
        elif fields[0] == "ok":
            check_entrypoint(where, fields[1], fields[2:])


def check_other(where, words):
    """bench/, scripts/, fuzz/ and build/bin/ programs, run directly or by a Python."""
    if re.match(r".*python[\d.]*$", words[0]) and len(words) > 1:
        words = words[1:]
    prog = words[0]
    if prog.split("/")[0] in ("bench", "scripts", "fuzz", ".ci"):
        CHECKED["other commands"] += 1
        path = os.path.join(ROOT, prog)
        if not os.path.exists(path):
            problem(where, "%s does not exist" % prog)
            return
        binary = open(path, "rb").read(4) == b"\x7fELF"
        check_program_flags(where, path, words[1:], source=not binary)
    elif prog.startswith("build/bin/"):
        CHECKED["other commands"] += 1
        name = prog[len("build/bin/"):]
        path = os.path.join(BIN, name)
        if not os.path.exists(path):
            problem(where, "%s is not built into %s" % (name, BIN))
        else:
            check_program_flags(where, path, words[1:])


def run_block(where, body, marker):
    expect = re.search(r'expect "([^"]*)"', marker)
    env = dict(os.environ)
    env["PATH"] = BIN + os.pathsep + env.get("PATH", "")
    for offset, cmd, _ in commands_of(body):
        if not cmd or cmd.startswith("#"):
            continue
        absent = [p for p in re.findall(r"(?:^|[\s=])(build/[\w./-]+)", cmd)
                  if not p.startswith("build/bin/") and not os.path.exists(os.path.join(ROOT, p))]
        if absent:
            print("docs: SKIPPED `%s`: %s is not there (scripts/setup-torch2.sh makes it)" % (cmd, absent[0]))
            continue
        CHECKED["runs"] += 1
        line = cmd.replace("build/bin/", BIN + "/")
        try:
            r = subprocess.run(["bash", "-c", line], cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
        except subprocess.TimeoutExpired:
            problem(where, "`%s` ran past 240 s" % cmd)
            continue
        out = r.stdout + r.stderr
        if r.returncode != 0:
            problem(where, "`%s` exited %d; its last lines:\n    %s" % (
                cmd, r.returncode, "\n    ".join(out.strip().splitlines()[-15:])))
        elif expect and expect.group(1) not in out:
            problem(where, "`%s` did not print %r; it printed: %s" % (cmd, expect.group(1), out.strip()[-300:]))


def check_command(where, cmd, next_line, pending):
    words = split_command(cmd)
    if not words:
        return
    if words[0] == "srun" and any(is_ddprun(w) for w in words):
        words = words[next(i for i, w in enumerate(words) if is_ddprun(w)):]
    if is_ddprun(words[0]):
        check_ddprun(where, words, next_line, pending)
    else:
        check_other(where, words)


def check_blocks(path, text):
    pending = []
    for first, body, marker, lang in code_blocks(text):
        where0 = rel(path)
        if marker and marker.startswith("same-as "):
            src = os.path.join(ROOT, marker.split()[1])
            if "\n".join(body).strip() not in open(src, encoding="utf-8").read():
                problem("%s:%d" % (where0, first), "this block is not what %s holds" % marker.split()[1])
        if lang not in ("", "sh", "bash", "console", "shell"):
            continue
        if marker == "output":
            continue
        for offset, line, nxt in commands_of(body):
            for cmd in re.split(r"\s+(?:&&|;)\s+", line):
                check_command("%s:%d" % (where0, first + offset), cmd, nxt, pending)
        if marker and marker.startswith("run"):
            run_block("%s:%d" % (where0, first), body, marker)
    run_parse_checks(pending)


def check_help_names_guides():
    """`ddprun --help` groups its flags as the guides do, each group naming its guide."""
    text = help_of([os.path.join(BIN, "ddprun"), "--help"])
    guides = re.findall(r"docs/[\w-]+\.md", text)
    if not guides:
        problem("ddprun --help", "names no guide (docs/*.md) in its groups")
    for g in guides:
        CHECKED["paths"] += 1
        if not os.path.exists(os.path.join(ROOT, g)):
            problem("ddprun --help", "names %s, which does not exist" % g)


# ---- the README's figures ------------------------------------------------

FIGURE = re.compile(r"(?<![\w.,])(\d+(?:,\d{3})*(?:\.\d+)?)\s?(?:ms|s|%|x|minutes?|MB|MiB|GB|GiB|KB|KiB|seconds?)(?!\w)")
NUMBER = re.compile(r"(?<![\w.])\d+(?:,\d{3})*(?:\.\d+)?")


def prose_of(text):
    """The text without its code blocks (code_blocks', fences included), comments, `inline code` and link targets."""
    lines = text.split("\n")
    code = set()
    for first, body, _, _ in code_blocks(text):
        start = first - 1  # the body's first line, from 0
        fenced = int(start > 0 and lines[start - 1].lstrip().startswith("```"))
        code.update(range(start - fenced, start + len(body) + fenced))
    prose = "\n".join(l for i, l in enumerate(lines) if i not in code and not l.lstrip().startswith("<!--"))
    prose = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", prose)
    return re.sub(r"`[^`]*`", "", prose)


def written(number):
    """A number as text ("2,175", "0.04"): its count of decimals and its value."""
    plain = number.replace(",", "")
    return len(plain.partition(".")[2]), float(plain)


def check_readme_figures():
    results = open(os.path.join(ROOT, "bench", "RESULTS.md"), encoding="utf-8").read()
    known = [written(n) for n in NUMBER.findall(results)]
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    for m in FIGURE.finditer(prose_of(readme)):
        CHECKED["README figures"] += 1
        digits, value = written(m.group(1))
        # Written there with as many decimals, or more and rounding to it.
        if not any(d >= digits and round(x, digits) == value for d, x in known):
            problem("README.md", "the figure %r is in no row of bench/RESULTS.md (measure it there, with its command)"
                    % m.group(0))


def main():
    check_help_names_guides()
    for path in doc_files():
        text = open(path, encoding="utf-8").read()
        check_links(path, text)
        check_paths(path, text)
        if path.endswith("architecture.md"):
            check_names(path, text)
            check_decision_table(path, text)
        check_blocks(path, text)
    check_readme_figures()
    print("docs: checked %s" % ", ".join("%d %s" % (n, k) for k, n in CHECKED.items()))
    if CHECKED["ddprun commands"] == 0 or CHECKED["runs"] == 0:
        PROBLEMS.append("no ddprun command or no run found: the extraction is broken")
    for p in PROBLEMS:
        print(p)
    if PROBLEMS:
        print("docs: %d problem(s); fix the docs, or the code they describe" % len(PROBLEMS))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
