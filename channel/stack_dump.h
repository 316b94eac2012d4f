// The agent ↔ worker contract, part 6: stack dumps. When a worker hangs
// (and on `ddprun status --stacks`), the agent empties the worker's stack
// file, sends stack_dump_signal() to the worker's main thread with tgkill,
// and reads the file once the signal is handled: the thread neither has it
// pending nor blocked (the handler blocks it while it runs), as
// /proc/PID/task/PID/status says. A worker that never handles it (stopped,
// in uninterruptible sleep, the signal blocked) is named as such.
//
// What the worker writes there:
// - a worker_lib program (ddp::init installs the handler): for each of its
//   threads, a block
//       native thread TID NAME
//         0xADDRESS            (one line per frame, innermost first)
//       <empty line>
//   with raw return addresses, which the agent symbolizes against the
//   worker's /proc/PID/maps (async-signal-safe on the worker's side);
// - a Python program: the interpreter's faulthandler, registered for the
//   signal by the start-up file ddprun puts on PYTHONPATH
//   (python_startup.h), writes every Python thread's traceback.
#pragma once

#include <csignal>
#include <string>

namespace ddprun::channel {

// A real-time signal, so that nobody's SIGUSR1/SIGUSR2 is taken.
inline int stack_dump_signal() { return SIGRTMIN + 5; }

// The stack file of heartbeat slot `slot`, beside the heartbeat file.
inline std::string stack_file_path(const std::string& heartbeat_file, int slot) {
  return heartbeat_file + ".stacks." + std::to_string(slot);
}

inline constexpr const char* kNativeThreadMark = "native thread ";

// Python's side, one definition for the start-up file (python_startup.h)
// and the standby (python_standby.h): _ddprun_stacks_to(HEARTBEAT_FILE,
// SLOT) registers faulthandler for stack_dump_signal(), writing every
// thread's traceback into that slot's stack_file_path(). The standby calls
// it again once given its slot (which may differ from the one it was
// started with): that registration replaces the start-up file's, whose
// file stays open, unused.
inline constexpr const char* kPythonStackHandler = R"PY(
_ddprun_stack_files = []  # faulthandler writes to the file's fd: kept open


def _ddprun_stacks_to(hb, slot):
    if not hb or slot is None:
        return
    import faulthandler
    import signal
    try:
        f = open(hb + ".stacks." + str(slot), "a")
    except OSError:
        return
    faulthandler.register(signal.SIGRTMIN + 5, file=f, all_threads=True, chain=False)
    _ddprun_stack_files.append(f)
)PY";

}  // namespace ddprun::channel
