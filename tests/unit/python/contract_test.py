"""The agent <-> worker contract is written once, in C++'s channel/ headers.

Python speaks it in two places: the ddprun package (python/ddprun, which
reads the headers at import through _contract.py) and the Python the agent
writes for its workers (channel/python_startup.h, python_standby.h,
stack_dump.h: raw strings, given the values by python_contract.h). This
fails when either writes a piece of the contract itself:
  - a string that is the name of an environment variable of env_names.h,
    or looks like one of ddprun's (DDPRUN_*, TORCHELASTIC_*);
  - the pulse as a number (0.05), or a phase as a number (say(5));
  - a key or word of the heal generation's connect vote (heal_vote.h);
  - in the agent's Python, a _DDPRUN_* name that python_contract.h does
    not give it (it would fail only in a worker, at run time);
and when _contract.py cannot read what it needs from the headers, or
reads other values than the headers define.

Usage: contract_test.py SOURCE_DIR
"""
import ast
import glob
import importlib.util
import os
import re
import sys

SRC = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", "..", ".."))
PROBLEMS = []


def problem(where, what):
    PROBLEMS.append(f"{where}: {what}")


def read(*parts):
    with open(os.path.join(SRC, *parts), encoding="utf-8") as f:
        return f.read()


def strings(header):
    """channel/HEADER's `inline constexpr const char* kName = "TEXT";` constants: {kName: TEXT}."""
    return dict(re.findall(r'inline constexpr const char\* (k\w+) = "([^"]+)";', read("channel", header)))


ENV_NAMES = set(strings("env_names.h").values())
# The heal vote's words, and its one number.
VOTE = strings("heal_vote.h")
VOTE_WORDS = set(VOTE.values())
VOTE.update(re.findall(r"inline constexpr int64_t (k\w+) = (\d+);", read("channel", "heal_vote.h")))
OURS = re.compile(r"^(DDPRUN|TORCHELASTIC)_[A-Z0-9_]+=?$")


def scan(where, code, first_line=1):
    """The contract's literals in a piece of Python."""
    try:
        tree = ast.parse(code)
    except SyntaxError as e:
        problem(where, f"does not parse as Python: {e}")
        return
    for node in ast.walk(tree):
        line = first_line + getattr(node, "lineno", 1) - 1
        if isinstance(node, ast.Constant):
            value = node.value.decode() if isinstance(node.value, bytes) else node.value
            if isinstance(value, str) and (value in ENV_NAMES or OURS.match(value)):
                problem(f"{where}:{line}", f"spells the environment variable {value!r} (env_names.h names it)")
            if isinstance(value, str) and value.removeprefix("ddprun/") in VOTE_WORDS:
                problem(f"{where}:{line}", f"spells the heal vote's {value!r} (heal_vote.h has it)")
            if isinstance(value, float) and value == 0.05:
                problem(f"{where}:{line}", "spells the pulse, 0.05 s (heartbeat_layout.h's kWaitPulseMs)")
        if isinstance(node, ast.Call):
            name = getattr(node.func, "attr", getattr(node.func, "id", ""))
            if name in ("say", "within", "enter") and node.args and isinstance(node.args[0], ast.Constant) \
                    and isinstance(node.args[0].value, int):
                problem(f"{where}:{line}", f"spells a phase as {node.args[0].value} (heartbeat_layout.h's Phase)")


# The package.
for path in sorted(glob.glob(os.path.join(SRC, "python", "ddprun", "*.py"))):
    if os.path.basename(path) != "_contract.py":
        scan(os.path.relpath(path, SRC), open(path, encoding="utf-8").read())

# The agent's Python: each raw string of the headers, and the names it may use.
given = set(re.findall(r'\{"(_DDPRUN_\w+)"', read("channel", "python_contract.h")))
if len(given) < 5:
    problem("channel/python_contract.h", f"gives {len(given)} names: the extraction is broken")
chunks = 0
for header in ("python_startup.h", "python_standby.h", "stack_dump.h"):
    text = read("channel", header)
    for m in re.finditer(r'R"PY\((.*?)\)PY"', text, re.S):
        chunks += 1
        first = text.count("\n", 0, m.start(1)) + 1
        where = f"channel/{header}"
        scan(where, m.group(1), first)
        defined_here = set(re.findall(r"^(_DDPRUN_\w+)\s*=", m.group(1), re.M))
        for used in sorted(set(re.findall(r"\b_DDPRUN_[A-Z0-9_]+\b", m.group(1))) - given - defined_here):
            problem(where, f"uses {used}, which python_contract.h does not give it")
if chunks < 4:
    problem("channel/", f"{chunks} raw Python strings found: the extraction is broken")

# _contract.py reads the headers (through the package's links to them).
spec = importlib.util.spec_from_file_location("ddprun_contract", os.path.join(SRC, "python", "ddprun", "_contract.py"))
contract = importlib.util.module_from_spec(spec)
try:
    spec.loader.exec_module(contract)
except ImportError as e:
    problem("python/ddprun/_contract.py", f"cannot read the contract: {e}")
else:
    layout = read("channel", "heartbeat_layout.h")
    pulse = int(re.search(r"kWaitPulseMs = (\d+);", layout).group(1))
    if contract.PULSE_S != pulse / 1000:
        problem("python/ddprun/_contract.py", f"pulse {contract.PULSE_S} s, heartbeat_layout.h says {pulse} ms")
    for name, key in (("VOTE_COUNT_KEY", "kVoteCountKey"), ("VOTE_VERDICT_KEY", "kVoteVerdictKey"),
                      ("VOTE_CONNECT", "kVoteConnect"), ("VOTE_GIVE_UP", "kVoteGiveUp"),
                      ("VOTE_GIVE_UP_AMOUNT", "kVoteGiveUpAmount")):
        if str(getattr(contract, name, None)) != VOTE.get(key):
            problem("python/ddprun/_contract.py", f"{name} is {getattr(contract, name, None)!r}, "
                    f"heal_vote.h's {key} {VOTE.get(key)!r}")
    for name in ("HEARTBEAT_FILE", "HEALS", "HEAL_GENERATION", "RANK", "MASTER_PORT"):
        if getattr(contract, name) not in ENV_NAMES:
            problem("python/ddprun/_contract.py", f"{name} is {getattr(contract, name)!r}, not a name of env_names.h")

for p in PROBLEMS:
    print(p)
print(f"contract: {len(PROBLEMS)} problem(s) in the package and {chunks} pieces of the agent's Python")
sys.exit(1 if PROBLEMS else 0)
