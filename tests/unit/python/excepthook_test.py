"""A heal makes the default group again, and PyTorch 2.x's
init_process_group wraps sys.excepthook each time it runs, prefixing an
uncaught exception's lines with "[rankN]: ": ddprun's inits (a script's,
a heal's) leave one prefix, of the newest group's rank.

    excepthook_test.py PYTHONPATH_OF_THE_PACKAGE

A child makes a one-rank Gloo group three times through ddprun's init and
dies of an uncaught exception; exit 0 when its traceback has one prefix a
line (PyTorch 1.x prefixes none: then none is asked).
"""
import os
import subprocess
import sys

CHILD = r"""
import torch.distributed as dist
from ddprun import _replacement
for _ in range(3):
    if dist.is_initialized():
        dist.destroy_process_group()
    _replacement._original_init("gloo", store=dist.HashStore(), rank=0, world_size=1)
raise RuntimeError("uncaught after three inits")
"""


def main():
    env = dict(os.environ, PYTHONPATH=sys.argv[1])
    child = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=240)
    lines = [l for l in child.stderr.splitlines() if "Traceback" in l or "uncaught after three inits" in l]
    print("\n".join(lines))
    if child.returncode == 0 or len(lines) < 2:
        print(f"FAIL: the child should die of its exception (exit {child.returncode}):\n{child.stderr}")
        return 1
    prefixed = [l for l in lines if l.startswith("[rank0]: ")]
    if prefixed and len(prefixed) != len(lines):
        print("FAIL: some lines prefixed, some not")
        return 1
    doubled = [l for l in lines if l.startswith("[rank0]: [rank0]")]
    if doubled:
        print(f"FAIL: {len(doubled)} line(s) prefixed more than once")
        return 1
    print("ok: " + ("one prefix a line" if prefixed else "no prefix (PyTorch 1.x)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
