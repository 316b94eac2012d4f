// The agent ↔ worker contract, part 7: the start-up of Python workers. For
// a Python entrypoint the agent writes python_startup() as sitecustomize.py
// into a folder of its own and puts that folder first on the workers'
// PYTHONPATH, so that every interpreter it starts, unmodified script and
// all, handles the stack dump signal (stack_dump.h) with faulthandler,
// writing every thread's traceback into its stack file. Then it loads the
// sitecustomize it hides, if there is one (Debian's, a virtualenv's), as
// the interpreter would have.
//
// It also gives an unmodified PyTorch script a heartbeat (heartbeat_layout.h)
// for hang detection: once torch is imported, every optimizer step beats
// and counts as progress (torch 2.x's global step hook; on 1.x,
// Optimizer.zero_grad), and the
// script's own phases are announced in the slot's phase word: an
// evaluation from module.eval() until module.train(), a checkpoint inside
// torch.save/torch.load, and the end of the script (its interpreter's exit,
// however long that takes) as finishing. While it waits inside a torch.distributed call a
// thread beats for it (a peer's long phase is no hang of its own). A heal's
// replacement started afresh beats from its start until the ddprun package
// (python/ddprun) is loaded, which beats while it joins. An uncaught
// exception's last line goes to TORCHELASTIC_ERROR_FILE (error_file.h)
// unless the script wrote that file. An interpreter run with -I, -E or -S skips
// it; the agent then sees no handler and says so instead of signalling.
#pragma once

#include <string>

#include "channel/python_contract.h"
#include "channel/stack_dump.h"

namespace ddprun::channel {

inline constexpr const char* kPythonStartupFile = "sitecustomize.py";

inline constexpr const char* kPythonStartupHead = R"PY(# Written by ddprun (channel/python_startup.h); removed when the job ends.
import os
import sys
)PY";

inline constexpr const char* kPythonStartupBody = R"PY(


def _ddprun_heartbeat():
    hb = os.environ.get(_DDPRUN_ENV_HEARTBEAT_FILE)
    slot = os.environ.get(_DDPRUN_ENV_HEARTBEAT_SLOT)
    if not hb or slot is None:
        return None
    import ctypes
    import mmap
    try:
        with open(hb, "r+b") as f:
            m = mmap.mmap(f.fileno(), 0)
        base = int(slot) * _DDPRUN_SLOT_BYTES
        # The counter (the slot's first 8 bytes), the phase word and the
        # progress counter (flight_record.h: the steps that moved).
        return (ctypes.c_uint64.from_buffer(m, base), ctypes.c_uint32.from_buffer(m, base + _DDPRUN_PHASE_OFFSET),
                ctypes.c_uint64.from_buffer(m, base + _DDPRUN_ADVANCED_OFFSET))
    except (OSError, ValueError):
        return None


class _DdprunTorchHooks:
    """A meta path finder that lets torch load, then hooks it (once)."""

    words = None  # the slot's counter and phase word, mapped at the first use
    evaluating = False
    depth = 0  # announced phases under way (nested)
    waiting = 0  # torch.distributed calls under way
    pulse = None  # the thread that beats while one is

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(cls)
        import importlib.util
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        load = spec.loader.exec_module

        def exec_then_hook(module):
            load(module)
            try:
                cls.install(module)
            except Exception as e:  # never the script's failure
                print(f"ddprun: no heartbeat from this script ({e})", file=sys.stderr)

        spec.loader.exec_module = exec_then_hook
        return spec

    @classmethod
    def slot(cls):
        # Mapped when first needed: a standby imports torch before its
        # assignment names its slot (python_standby.h).
        if cls.words is None:
            cls.words = _ddprun_heartbeat() or False
        return cls.words

    @classmethod
    def beat(cls, *args, **kwargs):
        if cls.slot():
            cls.words[0].value += 1

    @classmethod
    def step(cls, *args, **kwargs):
        # An optimizer step: the script's training moved (and it lives).
        if cls.slot():
            cls.words[0].value += 1
            cls.words[2].value += 1

    @classmethod
    def say(cls, phase):
        if cls.slot() and not cls.finished:
            cls.words[1].value = phase

    finished = False

    @classmethod
    def finish(cls):
        # channel::Phase::kFinishing: the interpreter exits, past the last
        # step; however long that takes, it is no hang.
        cls.beat()
        cls.say(_DDPRUN_PHASE_FINISHING)
        cls.finished = True

    @classmethod
    def enter(cls, phase):
        cls.depth += 1
        if cls.depth == 1:
            cls.say(phase)
        cls.beat()

    @classmethod
    def leave(cls):
        cls.beat()
        cls.depth -= 1
        if cls.depth == 0:
            cls.say(_DDPRUN_PHASE_EVALUATION if cls.evaluating else _DDPRUN_PHASE_NONE)

    @classmethod
    def within(cls, phase, fn):
        import functools

        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            cls.enter(phase)
            try:
                return fn(*args, **kwargs)
            finally:
                cls.leave()
        return wrapped

    @classmethod
    def waits(cls, fn):
        """fn, beating every pulse while it runs: a rank that waits in a
        collective for a peer is alive (the peer's silence names the hang);
        a stopped process stops the pulse too."""
        import functools
        import threading

        def pulse():
            tick = threading.Event()
            while True:
                tick.wait(_DDPRUN_PULSE_S)
                if cls.waiting > 0:
                    cls.beat()

        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            if cls.pulse is None:
                cls.pulse = threading.Thread(target=pulse, name="ddprun-pulse", daemon=True)
                cls.pulse.start()
            cls.waiting += 1
            try:
                return fn(*args, **kwargs)
            finally:
                cls.waiting -= 1
        return wrapped

    @classmethod
    def install(cls, torch):
        import atexit
        import importlib
        import torch.nn
        import torch.optim
        # The script's last line has run: finishing, before the interpreter
        # joins the threads it left running (threading's own exit hook, 3.9+)
        # and before any atexit handler (plain atexit where there is none).
        try:
            import threading
            threading._register_atexit(cls.finish)
        except (AttributeError, RuntimeError):
            atexit.register(cls.finish)
        optimizer = importlib.import_module("torch.optim.optimizer")
        if hasattr(optimizer, "register_optimizer_step_post_hook"):
            optimizer.register_optimizer_step_post_hook(cls.step)
        else:
            zero_grad = torch.optim.Optimizer.zero_grad

            def step_then_zero_grad(*args, **kwargs):
                cls.step()
                return zero_grad(*args, **kwargs)

            torch.optim.Optimizer.zero_grad = step_then_zero_grad
        # module.eval() / module.train(): the outermost call says which.
        train = torch.nn.Module.train

        def train_then_say(module, mode=True):
            outer = not getattr(cls, "in_train", False)
            cls.in_train = True
            try:
                return train(module, mode)
            finally:
                if outer:
                    cls.in_train = False
                    cls.evaluating = not mode
                    if cls.depth == 0:
                        cls.say(_DDPRUN_PHASE_EVALUATION if cls.evaluating else _DDPRUN_PHASE_NONE)
                    cls.beat()

        torch.nn.Module.train = train_then_say
        torch.save = cls.within(_DDPRUN_PHASE_CHECKPOINT, torch.save)
        torch.load = cls.within(_DDPRUN_PHASE_CHECKPOINT, torch.load)
        import torch.distributed as dist
        if dist.is_available():
            c10d = dist.distributed_c10d
            for name in ("all_reduce", "broadcast", "all_gather", "all_gather_object", "broadcast_object_list",
                         "reduce", "gather", "scatter", "reduce_scatter", "all_to_all", "barrier",
                         "monitored_barrier", "all_gather_into_tensor", "reduce_scatter_tensor", "destroy_process_group"):
                fn = getattr(c10d, name, None)
                if fn is None:
                    continue
                wrapped = cls.waits(fn)
                setattr(c10d, name, wrapped)
                if getattr(dist, name, None) is fn:
                    setattr(dist, name, wrapped)


def _ddprun_record_uncaught():
    """An uncaught exception's own account, for the agent: its last line in
    TORCHELASTIC_ERROR_FILE (torchrun's format), unless the script wrote the
    file itself (torch.distributed.elastic's @record does). Written before
    the interpreter's teardown, which may outlast the peers that lost this
    rank and the stop that follows: the rank that failed first still says
    so, and is counted as failed, not as stopped."""
    previous = sys.excepthook

    def hook(kind, value, tb):
        path = os.environ.get(_DDPRUN_ENV_ERROR_FILE)
        if path and not issubclass(kind, KeyboardInterrupt) and not os.path.lexists(path):
            try:
                import json
                import time
                import traceback
                message = "".join(traceback.format_exception_only(kind, value)).strip()
                data = {"message": {"message": message,
                                    "extraInfo": {"py_callstack": "", "timestamp": str(int(time.time()))}}}
                part = "%s.%d.part" % (path, os.getpid())
                with open(part, "w") as f:
                    json.dump(data, f)
                os.replace(part, path)
            except Exception:
                pass
        previous(kind, value, tb)

    sys.excepthook = hook


def _ddprun_hook_torch():
    if "torch" in sys.modules:
        return
    if not (os.environ.get(_DDPRUN_ENV_HEARTBEAT_FILE) or os.environ.get(_DDPRUN_ENV_STANDBY_FD)):
        return
    sys.meta_path.insert(0, _DdprunTorchHooks)


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


def _ddprun_replacement_pulse():
    """A heal's replacement started afresh (no warm standby) imports torch
    for seconds before the ddprun package (python/ddprun) beats for it while
    it joins: beat until that package is loaded."""
    if not os.environ.get(_DDPRUN_ENV_HEAL_GENERATION):
        return
    words = _ddprun_heartbeat()
    if not words:
        return
    import threading

    def pulse():
        tick = threading.Event()  # never set: a timer
        while "ddprun.heal" not in sys.modules:
            words[0].value += 1
            tick.wait(_DDPRUN_PULSE_S)

    threading.Thread(target=pulse, name="ddprun-replacement-pulse", daemon=True).start()


_ddprun_stacks_to(os.environ.get(_DDPRUN_ENV_HEARTBEAT_FILE), os.environ.get(_DDPRUN_ENV_HEARTBEAT_SLOT))
_ddprun_replacement_pulse()
_ddprun_record_uncaught()
_ddprun_hook_torch()
_ddprun_next_sitecustomize()
)PY";

// The file's text: the head, the slot's words (heartbeat_layout.h), the
// stack handler (stack_dump.h), the body.
inline std::string python_startup() {
  return std::string(kPythonStartupHead) + python_contract_words() + kPythonStackHandler + kPythonStartupBody;
}

}  // namespace ddprun::channel
