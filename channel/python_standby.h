// The agent ↔ worker contract, part 4: a standby for Python entrypoints.
// The agent runs `python -u -c python_standby() SCRIPT ARGS...` (or
// `... -c python_standby() -m MODULE ARGS...`). The interpreter imports torch
// (the slow part of a PyTorch worker's start, seconds), then waits on
// DDPRUN_STANDBY_FD (on a thread of its own, which beats in the assigned slot
// when the assignment comes before the imports end) for the same message worker_lib standbys read
// (standby_message.h), puts the variables into its environment and runs the
// script as __main__, as `python SCRIPT` would have. A heal's replacement
// imports the ddprun package first (python/ddprun/heal.py).
#pragma once

#include <string>

#include "channel/python_contract.h"
#include "channel/stack_dump.h"

namespace ddprun::channel {

// The standby message (standby_message.h) as the Python standby reads it:
// whether a message is whole, and its entries in order, (KEY, VALUE) or
// (KEY, None) for a variable to remove. Its two bytes come from
// python_contract_words(); tests/unit/channel_test.cpp decodes what
// encode_standby_message() writes with it.
inline constexpr const char* kPythonStandbyMessage = R"PY(
def _ddprun_standby_complete(msg):
    return msg == _DDPRUN_STANDBY_END or msg.endswith(_DDPRUN_STANDBY_END * 2)


def _ddprun_standby_entries(msg):
    entries = []
    for entry in msg.split(_DDPRUN_STANDBY_END):
        if not entry:
            break  # the message's closing end
        key, assign, value = entry.partition(_DDPRUN_STANDBY_ASSIGN)
        entries.append((key, value if assign else None))
    return entries
)PY";

inline constexpr const char* kPythonStandbyBody = R"PY(
import os, sys

def _ddprun_read_assignment(fd, box, assigned, imported):
    msg = b""
    while not _ddprun_standby_complete(msg):
        chunk = os.read(fd, 65536)
        if not chunk:
            sys.stderr.write("ddprun standby: the agent closed DDPRUN_STANDBY_FD without an assignment\n")
            os._exit(1)
        msg += chunk
    os.close(fd)
    box.append(msg)
    assigned.set()
    # Assigned while torch still loads (a standby not yet warm): beat in the
    # assigned slot until the imports are done, so that the agent does not
    # take the start for a hang.
    env = {k: v for k, v in _ddprun_standby_entries(msg) if v is not None}
    path, slot = env.get(_DDPRUN_ENV_HEARTBEAT_FILE.encode()), env.get(_DDPRUN_ENV_HEARTBEAT_SLOT.encode())
    if not path or slot is None:
        return
    try:
        import ctypes, mmap
        with open(path, "r+b") as f:
            m = mmap.mmap(f.fileno(), 0)
        beats = ctypes.c_uint64.from_buffer(m, int(slot) * _DDPRUN_SLOT_BYTES)
    except (OSError, ValueError):
        return
    while not imported.is_set():
        beats.value += 1
        imported.wait(_DDPRUN_PULSE_S)


def _ddprun_standby():
    import threading
    fd = int(os.environ.pop(_DDPRUN_ENV_STANDBY_FD))
    box, assigned, imported = [], threading.Event(), threading.Event()
    threading.Thread(target=_ddprun_read_assignment, args=(fd, box, assigned, imported), daemon=True).start()
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
    imported.set()
    assigned.wait()
    for key, value in _ddprun_standby_entries(box[0]):
        if value is not None:
            os.environb[key] = value
        else:
            os.environb.pop(key, None)  # set for another assignment
    # Stacks go to the assigned slot's file (the start-up file opened the
    # slot this standby was started for, perhaps another rank's).
    _ddprun_stacks_to(os.environ.get(_DDPRUN_ENV_HEARTBEAT_FILE), os.environ.get(_DDPRUN_ENV_HEARTBEAT_SLOT))
    # A heal's replacement: the ddprun package (python/ddprun) makes the
    # script's init_process_group join the heal generation; imported here,
    # it does so even for a script that imports it after that call.
    if os.environ.get(_DDPRUN_ENV_HEAL_GENERATION):
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

// The program: the slot's words (heartbeat_layout.h), the stack handler
// (stack_dump.h), then the standby.
inline std::string python_standby() {
  return python_contract_words() + kPythonStackHandler + kPythonStandbyMessage + kPythonStandbyBody;
}

}  // namespace ddprun::channel
