// The agent ↔ worker contract, part 7: the start-up of Python workers. For
// a Python entrypoint the agent writes kPythonStartup as sitecustomize.py
// into a folder of its own and puts that folder first on the workers'
// PYTHONPATH, so that every interpreter it starts, unmodified script and
// all, handles the stack dump signal (stack_dump.h) with faulthandler,
// writing every thread's traceback into its stack file. Then it loads the
// sitecustomize it hides, if there is one (Debian's, a virtualenv's), as
// the interpreter would have. An interpreter run with -I, -E or -S skips
// it; the agent then sees no handler and says so instead of signalling.
#pragma once

namespace ddprun::channel {

inline constexpr const char* kPythonStartupFile = "sitecustomize.py";

inline constexpr const char* kPythonStartup = R"PY(# Written by ddprun (channel/python_startup.h); removed when the job ends.
import os
import sys


def _ddprun_stacks_on_signal():
    hb = os.environ.get("DDPRUN_HEARTBEAT_FILE")
    slot = os.environ.get("DDPRUN_HEARTBEAT_SLOT")
    if not hb or slot is None:
        return
    import faulthandler
    import signal
    try:
        f = open(hb + ".stacks." + slot, "a")
    except OSError:
        return
    faulthandler.register(signal.SIGRTMIN + 5, file=f, all_threads=True, chain=False)
    globals()["_ddprun_stack_file"] = f  # faulthandler writes to its fd


def _ddprun_next_sitecustomize():
    here = os.path.dirname(os.path.abspath(__file__))
    import importlib.machinery
    import importlib.util
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


_ddprun_stacks_on_signal()
_ddprun_next_sitecustomize()
)PY";

}  // namespace ddprun::channel
