"""ddprun.heal's generation rules, in processes of their own (the package
reads its environment once, at import): a generation the agent has gone
past never completes, its ranks all give it up together (the vote), and a
replacement stuck connecting one ends itself.

    heal_generation_test.py PYTHONPATH_OF_THE_PACKAGE

Each case runs a child Python as a replacement of generation 1 (heartbeat
slot 0 of a file made here), raises the slot's generation word to 2 from
this process, and checks how the child ends. Exit 0 when every case holds.
"""
import os
import subprocess
import sys
import tempfile


# The child: a replacement of generation 1 whose peers' keys are all
# present. It says "ready" once inside the case, then waits for stdin.
CHILD = r"""
import sys, time
import torch.distributed as dist
from ddprun import _replacement
case = sys.argv[1]
_replacement._process.base_store = dist.HashStore()
store = _replacement._GenerationStore(1, _replacement._process.slot)
store.set("ddprun/here/0", "1")
if case == "stale-keys":
    print("ready", flush=True)
    sys.stdin.readline()
    try:
        store.wait(["ddprun/here/0"])
        print("the wait returned in a generation the agent had gone past")
    except RuntimeError as e:
        print("raised:", e)
elif case == "vote":
    print("ready", flush=True)
    sys.stdin.readline()
    # The first of 2 ranks votes after the generation moved on; its peer
    # (its own slot not yet raised) votes after it: neither may connect.
    first = store.vote_to_connect(2)
    late = _replacement._GenerationStore(1, None).vote_to_connect(2)
    print("votes:", first, late)
elif case == "stuck-connect":
    _replacement._Overtaken._GRACE_S = 0.5
    with _replacement._Overtaken(1, _replacement._process.slot):
        print("ready", flush=True)
        time.sleep(600)  # as gloo's C++ connect: nothing in Python ends it
    print("the connect returned")
"""


def run_case(case, package, slot):
    with tempfile.NamedTemporaryFile() as hb:
        hb.write(b"\0" * slot.SLOT_BYTES)
        hb.flush()
        env = dict(os.environ, PYTHONPATH=package, DDPRUN_HEALS="1", DDPRUN_HEAL_GENERATION="1",
                   DDPRUN_HEARTBEAT_FILE=hb.name, DDPRUN_HEARTBEAT_SLOT="0", DDPRUN_ROUND="0")
        child = subprocess.Popen([sys.executable, "-c", CHILD, case], env=env, stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        ready = child.stdout.readline()
        if ready.strip() != "ready":
            child.kill()
            return f"the child did not start: {ready!r} {child.stderr.read()}"
        # The agent's move: the next generation (a peer failed).
        with open(hb.name, "r+b") as f:
            f.seek(slot._HEAL_GENERATION)
            f.write((2).to_bytes(4, "little"))
        try:
            out, err = child.communicate("go\n", timeout=120)
        except subprocess.TimeoutExpired:
            child.kill()
            return "the child was still waiting 120 s after the generation moved on"
    if case == "stale-keys":
        if child.returncode != 0 or "raised: ddprun: heal generation 2 began while generation 1" not in out:
            return f"exit {child.returncode}; out: {out!r}; err: {err[-2000:]!r}"
    elif case == "vote":
        if child.returncode != 0 or "votes: False False" not in out:
            return f"exit {child.returncode}; out: {out!r}; err: {err[-2000:]!r}"
    else:
        if child.returncode != 1 or "it holds no state yet, so it ends" not in err or "returned" in out:
            return f"exit {child.returncode}; out: {out!r}; err: {err[-2000:]!r}"
    return None


def main():
    package = sys.argv[1]
    sys.path.insert(0, package)
    from ddprun import _slot as slot  # the slot's layout (no torch there)
    failed = 0
    for case in ("stale-keys", "vote", "stuck-connect"):
        why = run_case(case, package, slot)
        print(f"{'FAILED' if why else 'passed'}: {case}{': ' + why if why else ''}", flush=True)
        failed += bool(why)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
