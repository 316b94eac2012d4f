// The agent ↔ worker contract, part 4: a standby for Python entrypoints.
// The agent runs `python -u -c kPythonStandby SCRIPT ARGS...` (or
// `... -c kPythonStandby -m MODULE ARGS...`). The interpreter imports torch
// (the slow part of a PyTorch worker's start, seconds), then waits on
// DDPRUN_STANDBY_FD for the same message worker_lib standbys read
// (standby_message.h), puts the variables into its environment and runs the
// script as __main__, as `python SCRIPT` would have. A heal's replacement
// imports the ddprun package first (python/ddprun/heal.py).
#pragma once

namespace ddprun::channel {

inline constexpr const char* kPythonStandby = R"PY(
import os, sys

def _ddprun_standby():
    fd = int(os.environ.pop("DDPRUN_STANDBY_FD"))
    # The slow part, done while the workers of this attempt run. A script
    # that does not use torch (or an interpreter without it) loses nothing.
    try:
        import torch, torch.distributed, torch.nn.parallel  # noqa: F401
    except Exception:
        pass
    # PyTorch 2.x's DistributedDataParallel imports torch._dynamo when it is
    # made: 1.6 s of CPU, 2.6 s for 4 workers on 2 cores, after a restart
    # unless done here.
    try:
        import torch._dynamo  # noqa: F401
    except Exception:
        pass
    # "KEY=VALUE\0" entries, then one more "\0" (the empty message is "\0").
    msg = b""
    while not (msg == b"\0" or msg.endswith(b"\0\0")):
        chunk = os.read(fd, 65536)
        if not chunk:
            sys.stderr.write("ddprun standby: the agent closed DDPRUN_STANDBY_FD without an assignment\n")
            os._exit(1)
        msg += chunk
    os.close(fd)
    for entry in msg.split(b"\0"):
        key, eq, value = entry.partition(b"=")
        if eq:
            os.environb[key] = value
        elif key:
            os.environb.pop(key, None)  # set for another assignment
    # A heal's replacement: the ddprun package (python/ddprun) makes the
    # script's init_process_group join the heal generation; imported here,
    # it does so even for a script that imports it after that call.
    if os.environ.get("DDPRUN_HEAL_GENERATION"):
        try:
            import ddprun  # noqa: F401
        except Exception:
            pass
    # Run the entrypoint as `python SCRIPT ARGS` / `python -m MODULE ARGS` would.
    import runpy
    args = sys.argv[1:]
    if args[0] == "-m":
        sys.argv = args[1:]
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = args
        sys.path[0] = os.path.dirname(os.path.abspath(args[0]))
        runpy.run_path(args[0], run_name="__main__")

_ddprun_standby()
)PY";

}  // namespace ddprun::channel
