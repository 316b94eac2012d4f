"""A heal's replacement (a process started for a failed rank, which holds no
state yet): its init_process_group joins the heal generation, its
DistributedDataParallel starts on a group of its own, and a collective of
the script's own on the default group before its Healer took the state is
an error that says why (its peers wait in the heal, not in that call: it
would wait for ever). Also how any rank makes a generation's default group
(_init_generation), which heals use too."""
import inspect
import functools
import os
import sys
import threading

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from ._generation import _GenerationStore, _process, _timeout
from ._sockets import GroupSockets
from . import _contract


def _rank_in(generation, slot):
    """This worker's rank and the world size in `generation`: where the agent
    placed it when the round shrank or grew, else where it was started."""
    if slot is not None:
        placed, rank, world = slot.placement()
        if 0 < placed <= generation:
            return rank, world
    return int(os.environ[_contract.RANK]), int(os.environ[_contract.WORLD_SIZE])


_torch_init = dist.init_process_group
group_sockets = GroupSockets()  # the newest heal generation's group's
_original_ddp_init = DistributedDataParallel.__init__


def _without_rank_prefix(hook):
    """sys.excepthook without the wrappers PyTorch 2.x's init_process_group
    adds (each prefixes an uncaught exception's lines with "[rankN]: "): a
    heal makes the default group again, and a second wrapper printed
    "[rank1]: [rank1]: Traceback"."""
    while getattr(hook, "__name__", "") == "_distributed_excepthook" and hook.__closure__:
        cells = dict(zip(hook.__code__.co_freevars, hook.__closure__))
        if "old_hook" not in cells:
            break
        hook = cells["old_hook"].cell_contents
    return hook


def _original_init(*args, **kwargs):
    """PyTorch's init_process_group, whose exception hook prefixes the rank
    once (the rank of the newest group)."""
    sys.excepthook = _without_rank_prefix(sys.excepthook)
    return _torch_init(*args, **kwargs)


def _init_generation(backend, generation, slot):
    rank, world = _rank_in(generation, slot)
    # The group keeps its store; so does this process (a Python store must
    # outlive the C++ references to it).
    store = _process.store = _GenerationStore(generation, slot)
    # 1. Every rank of the generation votes to connect, in Python, where a
    #    newer generation ends the wait: all connect or none does (a peer
    #    that gave up half-way would leave the others in step 2 until the
    #    timeout). A peer that dies before all have come is seen here.
    if not store.vote_to_connect(world):
        raise RuntimeError(f"ddprun: heal generation {slot.generation()} began while generation {generation} "
                           "connected (a peer failed meanwhile)")
    # 2. Gloo connects the ranks in C++. A rank that waits there for a peer
    #    that died meanwhile waits out the group's timeout: nothing in
    #    Python can end that wait (see _Overtaken).
    #    The group's sockets are noted: a heal shuts them down (_sockets.py).
    with _Overtaken(generation, slot):
        group_sockets.around(
            lambda: _original_init(backend, store=store, rank=rank, world_size=world, timeout=_timeout()))


class _Overtaken:
    """While a replacement (which holds no state yet) connects generation g:
    if the agent names a newer generation and the connect has not given up
    _GRACE_S later, it waits in C++ for a peer that died after saying it was
    here. The process then ends itself, saying so, and the agent starts a
    replacement for the newest generation (a replacement that fails before
    it joined is replaced again, once). A survivor holds state and waits:
    its connect gives up at the group's timeout."""

    _GRACE_S = 10.0

    def __init__(self, generation, slot):
        self._generation = generation
        self._slot = slot
        self._done = threading.Event()

    def __enter__(self):
        if _process.joining and self._slot is not None:
            threading.Thread(target=self._watch, name="ddprun-overtaken", daemon=True).start()

    def __exit__(self, *exc):
        self._done.set()

    def _watch(self):
        newer = self._generation
        while not self._done.is_set() and newer <= self._generation:
            if self._slot.no_heal_coming():
                return  # the agent stops the group: it ends this process too
            newer = self._slot.wait_generation(self._generation, 0.5)
        if self._done.wait(self._GRACE_S):
            return
        print(f"ddprun: heal generation {newer} began while this replacement connected generation "
              f"{self._generation}, and its connect still waits {self._GRACE_S:g} s later (for a peer that "
              "died): it holds no state yet, so it ends and ddprun starts one for the newest generation",
              file=sys.stderr, flush=True)
        os._exit(1)


def _forget_failed_init():
    """After an init_process_group that failed half-way: no default group,
    and the group counter back at 0 (PyTorch names the default group's store
    keys after it, so every rank of the next generation must count alike)."""
    if dist.is_initialized():
        dist.destroy_process_group()
        return
    c10d = dist.distributed_c10d
    if hasattr(getattr(c10d, "_world", None), "group_count"):
        c10d._world.group_count = 0  # PyTorch 2.x
    elif hasattr(c10d, "_group_count"):
        c10d._group_count = 0  # PyTorch 1.x


def _replacement_init(backend=None, init_method=None, *args, **kwargs):
    """init_process_group in a replacement: the default group of the heal
    generation it joins, with the survivors (whatever the script asked)."""
    if not _process.joining or kwargs.get("store") is not None:
        return _original_init(backend, init_method, *args, **kwargs)
    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    slot = _process.slot
    while True:
        try:
            _init_generation(backend, _process.generation, slot)
            return
        except Exception:
            # Another peer failed while this one joined: join the next.
            if slot is None or slot.generation() <= _process.generation:
                raise
            _process.generation = slot.generation()
            _forget_failed_init()


def _local_group():
    """A process group of this process alone (DDP's start-up collectives in
    a replacement stay local; the state comes in the Healer)."""
    if hasattr(dist, "ProcessGroupGloo") and issubclass(dist.ProcessGroupGloo, dist.ProcessGroup):
        return dist.ProcessGroupGloo(dist.HashStore(), 0, 1, _timeout())  # PyTorch 1.x
    return dist.new_group([dist.get_rank()], backend="gloo", use_local_synchronization=True)


def _replacement_ddp_init(self, module, *args, **kwargs):
    if _process.joining and len(args) < 5 and kwargs.get("process_group") is None:
        kwargs["process_group"] = _local_group()
    _original_ddp_init(self, module, *args, **kwargs)



# The collectives a script (or a framework: Lightning's start-up barriers,
# its per-batch broadcast) may call on the default group.
_COLLECTIVES = ("all_reduce", "broadcast", "barrier", "all_gather", "all_gather_object", "broadcast_object_list",
                "reduce", "gather", "gather_object", "scatter", "scatter_object_list", "reduce_scatter",
                "all_to_all", "all_to_all_single", "all_gather_into_tensor", "reduce_scatter_tensor",
                "monitored_barrier", "all_reduce_coalesced", "all_gather_coalesced")


def _before_its_healer(name, fn):
    """fn, refusing to run on the default group while this replacement has
    not taken the state: its peers wait in the heal's exchange, so the call
    would wait for ever (or, matched with the heal's own collectives,
    corrupt them)."""
    try:
        group_at = list(inspect.signature(fn).parameters).index("group")
    except (TypeError, ValueError):
        group_at = None

    @functools.wraps(fn)
    def guarded(*args, **kwargs):
        if _process.joining and not _process.taking_state:
            group = kwargs.get("group")
            if group is None and group_at is not None and len(args) > group_at:
                group = args[group_at]
            if group is None or group is dist.GroupMember.WORLD:
                raise RuntimeError(
                    f"ddprun: heal: this replacement called torch.distributed.{name}() on the default group "
                    "before its ddprun.Healer took the training state; its peers wait in the heal, not in "
                    f"{name}(), so it would wait for ever. Make the Healer first, or skip the script's own "
                    "collectives while ddprun.joining() is true (Lightning: strategy=ddprun.lightning.HealingDDPStrategy())")
        return fn(*args, **kwargs)

    return guarded


def _guard_collectives():
    # Each namespace's own function is wrapped: ddprun's start-up may have
    # wrapped torch.distributed's already (its pulse while a call waits).
    for name in _COLLECTIVES:
        for namespace in (dist, dist.distributed_c10d):
            fn = getattr(namespace, name, None)
            if fn is not None:
                setattr(namespace, name, _before_its_healer(name, fn))


if _process.joining:
    dist.init_process_group = _replacement_init
    dist.distributed_c10d.init_process_group = _replacement_init
    DistributedDataParallel.__init__ = _replacement_ddp_init
    _guard_collectives()
