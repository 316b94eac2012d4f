"""Checkpointless recovery for PyTorch scripts: when a peer dies inside a
step, the ranks that survive keep their processes, a replacement takes the
dead rank's place, and it gets the training state from a survivor over the
process group instead of everyone restarting from the last checkpoint.

A plain loop (examples/python/plain_loop_healed.py) changes 4 lines:

    import ddprun
    healer = ddprun.Healer(model, optimizer, extra=[scheduler])
    for epoch in healer.epochs(epochs):
        sampler.set_epoch(epoch)
        for x, y in healer.batches(loader):
            ...  # the body as it was: forward, backward, optimizer.step()

or the loop's step as a function:

    import ddprun
    dist.init_process_group("gloo")
    model = DDP(Net())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    progress = {"epoch": 0, "batch": 0}
    with ddprun.Healer(model, optimizer, state=progress) as healer:
        while progress["epoch"] < epochs:
            healer.step(train_step, batch_at(progress))  # forward, backward, optimizer.step()

What happens when a peer dies inside step() (or a batches() body: there
the failed collective is flagged instead of raised, the optimizer step is
skipped, and the body runs again with the same batch) (ddprun runs the job,
DDPRUN_HEALS=1; elsewhere step() just calls the function):
  1. a collective of the step fails on the survivors (DDP's all-reduce goes
     through this healer's communication hook; a dead peer is seen at once
     on Gloo). step() puts back what the step changed before its optimizer
     step: `state`, the `extra` objects, the random generators and the
     module's buffers;
  2. it drops the process group (its sockets close, so a peer still blocked
     on this rank fails too), waits for the agent to name the heal
     generation (its heartbeat slot's word, with a futex), and makes the
     default process group afresh under that generation's store prefix;
  3. the ranks agree on the newest state: each tells its optimizer steps,
     and the lowest rank with the most sends the module, the optimizer, the
     steps, `state`, `extra` and the generator to the ranks behind it;
  4. step() runs the function again, unless this rank had already taken the
     optimizer step (then the heal brought everyone to it).
The replacement runs the script from the top. This package, imported there,
makes its init_process_group() join the heal generation, and its
DistributedDataParallel start without collectives (its peers are inside
their heal); its Healer receives the state, and its loop goes on from it.
Collectives of its own before the Healer would wait for peers that never
come: skip them when ddprun.joining() is true.

This file is the Healer and its step; how the heal itself goes (steps 2 and
3) is _state_exchange.py's, a plain loop's steps _loop.py's, the comparison
of replicas _replicas.py's.

DDP's buckets are fixed when the Healer is made (before the first forward):
every rank, a replacement included, then reduces the same buckets in the
same order, and DDP never rebuilds them (a rebuild is a collective on the
process group DDP was made with, which a heal replaces).
"""
import atexit
import copy
import functools
import gc
import pickle
import sys
import threading
import weakref

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from ._generation import _process, joining  # noqa: F401 (joining: the package's API)
from ._replacement import _init_generation, group_sockets
from ._loop import _LoopPosition, _PlainLoop, _done
from ._replicas import _ReplicaChecks
from ._state import _first_line, _hyper_parameters, _rng_state, _set_hyper_parameters, _set_rng_state
from ._state_exchange import _collective_failed, _StateExchange
from ._verify import ReplicasDiffer  # noqa: F401 (the package's API)


def _allreduce_hook(healer, bucket):
    """DDP's all-reduce, on the current default group (a heal replaces it):
    the bucket averaged over the ranks, as DDP's own hook does. While it is
    under way the slot's pulse beats: a rank waiting for a slow or stopped
    peer is not the one that hangs (a stopped rank's pulse stops with it)."""
    tensor = bucket.buffer()
    if healer._loop_mode and healer._hook_failed:
        return _done(tensor)  # the step failed already: its optimizer step is skipped
    tensor.div_(dist.get_world_size())
    healer._collectives_begin()
    try:
        fut = dist.all_reduce(tensor, async_op=True).get_future()
    except Exception as e:
        healer._collectives_end()
        healer._flag_failure(e)
        if not healer._loop_mode:
            raise
        return _done(tensor)

    def reduced(f):
        try:
            return f.value()[0]
        except Exception as e:
            healer._flag_failure(e)
            if not healer._loop_mode:
                raise
            return tensor  # not applied: the optimizer step is skipped
        finally:
            healer._collectives_end()

    return fut.then(reduced)


def _unpin_groups():
    """PyTorch 2.x's torch.distributed.nn.functional, first imported by
    DDP's constructor, binds the default group of that moment in its
    functions' default arguments, so that nothing frees that group (its
    threads and sockets) once a heal or the exit drops it, and it dies in
    the interpreter's teardown. Those defaults become None: the default
    group of the call's moment."""
    functional = sys.modules.get("torch.distributed.nn.functional")
    for fn in vars(functional).values() if functional is not None else ():
        defaults = getattr(fn, "__defaults__", None)
        if defaults and any(isinstance(d, dist.ProcessGroup) for d in defaults):
            fn.__defaults__ = tuple(None if isinstance(d, dist.ProcessGroup) else d for d in defaults)


def _release_at_exit(healer_ref):
    """At the interpreter's exit, while Python still runs: the process
    groups a Healer made or replaced go now. Left to the interpreter's
    teardown (the Healer is held by the heartbeat slot and DDP's comm hook,
    so nothing frees it before), a Gloo group's threads can be destroyed
    running and abort the process ('terminate called without an active
    exception') after a good run."""
    healer = healer_ref()
    if healer is None:
        return
    healer.close()
    healer._slot.quiet_when = None
    if healer.ddp is not None:
        # DDP holds its group in the reducer (with the hook's Healer), in
        # its logger (which holds the reducer) and as .process_group. A
        # Trainer or a Lightning strategy keeps the DDP until the teardown,
        # so all go here.
        for held in ("reducer", "logger"):
            if hasattr(healer.ddp, held):
                delattr(healer.ddp, held)
        healer.ddp.process_group = None
    healer.ddp = None
    gc.collect()
    if dist.is_initialized():
        dist.destroy_process_group()


class HealReport:
    """What the heals of this process cost (this rank's view)."""

    def __init__(self):
        self.heals = 0  # heals this process took part in
        self.steps_redone = 0  # steps it ran again after a heal
        self.bytes = 0  # state bytes sent or received, the last heal
        self.wait_seconds = 0.0  # from the failure to the agent's generation, the last heal
        self.connect_seconds = 0.0  # making the generation's process group
        self.transfer_seconds = 0.0  # agreeing on the newest state and sending it
        self.generation = 0
        self.world_size = 0
        # The comparisons of the replicas (--verify-every).
        self.checks = 0  # comparisons this process took part in
        self.repairs = 0  # the times ranks apart took a majority's state
        self.verified_step = -1  # the newest step at which every rank agreed
        self.verify_seconds = 0.0  # spent comparing (and repairing), all of them


class Healer(_PlainLoop, _ReplicaChecks, _StateExchange):
    """Heals a PyTorch DDP training loop around a failed peer (see the top
    of this file).

    model: the DistributedDataParallel module (or a plain module: then the
        script averages gradients itself, inside the step).
    optimizer: its optimizer; each optimizer.step() commits a step.
    state: a dict the loop keeps its position in (epoch, batch): put back
        when a step is abandoned, sent to whoever heals. Picklable values.
    extra: more objects with state_dict()/load_state_dict() (an LR
        scheduler, a sampler), treated as `state`.
    wait_timeout: seconds a survivor waits for the agent's replacement
        before the step's error is raised after all.
    verify_every: compare the ranks' parameters every this many optimizer
        steps (0: never); None: ddprun's --verify-every. See _replicas.py.
    """

    def __init__(self, model, optimizer, *, state=None, extra=(), wait_timeout=300.0, verify_every=None):
        if not isinstance(model, torch.nn.Module):
            raise TypeError("ddprun.Healer: model must be a torch.nn.Module (or DistributedDataParallel)")
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError("ddprun.Healer: optimizer must be a torch.optim.Optimizer")
        if state is not None and not isinstance(state, dict):
            raise TypeError("ddprun.Healer: state must be a dict (or None)")
        for o in extra:
            if not (hasattr(o, "state_dict") and hasattr(o, "load_state_dict")):
                raise TypeError(f"ddprun.Healer: extra object {o!r} has no state_dict()/load_state_dict()")
        self.ddp = model if isinstance(model, DistributedDataParallel) else None
        self.module = model.module if self.ddp is not None else model
        self.optimizer = optimizer
        self.state = state if state is not None else {}
        # Where a plain loop stands (epochs(), batches()): travels with a
        # heal and is put back with an abandoned step, as `extra` is.
        self._loop = _LoopPosition()
        self.extra = list(extra) + [self._loop]
        self._loop_mode = False  # inside batches(): a failed collective is flagged, not raised
        self._failure = None  # the first failed collective's error in this step (loop mode)
        self._body_steps = None  # inside a batches() body: the optimizer steps before it
        self.wait_timeout = float(wait_timeout)
        self.steps = 0  # optimizer steps taken: which rank is newest
        self.report = HealReport()
        self.joined = False  # whether this process replaced a failed rank
        self._hook_failed = False
        self._reports_heal = False
        self._count_optimizer_steps()
        self._init_replicas(verify_every)
        self._slot = _process.slot if dist.is_initialized() else None
        self.heals = self._slot is not None
        if not self.heals:
            return
        self._backend = dist.get_backend()
        self.generation = _process.generation
        self._under_way = 0
        self._under_way_lock = threading.Lock()
        self._slot.quiet_when = self._stale_wait
        _unpin_groups()
        if self.ddp is not None:
            if self.ddp.process_group is not dist.distributed_c10d._get_default_group() and not _process.joining:
                raise ValueError("ddprun.Healer: DDP on a process group of its own cannot heal; "
                                 "make it on the default group")
            if getattr(self.ddp, "find_unused_parameters", False):
                raise ValueError("ddprun.Healer: DDP(find_unused_parameters=True) reduces which parameters were used "
                                 "on the process group it was made with, which a heal cannot replace: make DDP with "
                                 "find_unused_parameters=False")
            self._fix_buckets()
            self.ddp.register_comm_hook(self, _allreduce_hook)
            self._pulse_while_buffers_sync()
        self.report.world_size = dist.get_world_size()
        if _process.joining:
            self._join()
        else:
            # DDP keeps the group it was made with (and its sockets) for good:
            # collectives go on a default group of the healer's own, which a
            # heal can drop.
            with self._slot.waiting():
                self._drop_group()
                _init_generation(self._backend, self.generation, self._slot)
        self._adopt_group()
        if not self.joined and self.verify_every > 0:
            # The start: every rank holds the same parameters and optimizer
            # state (DDP's broadcast, the script's restore); the comparison
            # makes that the first point they agreed at. (Not the buffers: a
            # forward before the Healer moved each rank's statistics its way.)
            with self._slot.waiting():
                self._verify(whole_state=True, with_buffers=False)
        self._slot.set_heal_ready(True)
        atexit.register(_release_at_exit, weakref.ref(self))

    # The context: the healer says the process can heal while it is open.
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """Says the process can no longer heal: what runs after is not a step."""
        if self.heals:
            self._slot.set_heal_ready(False)

    def _count_optimizer_steps(self):
        # In a plain loop a step's failed collective is flagged, not raised
        # (the loop's body runs on): its optimizer step is skipped, so that
        # no half-reduced gradient is applied, and the step runs again.
        inner_step = self.optimizer.step
        # PyTorch 2.x counts the step in a hook; 1.x here.
        counts_here = not hasattr(self.optimizer, "register_step_post_hook")
        if not counts_here:
            self.optimizer.register_step_post_hook(lambda *args, **kwargs: self._count_step())

        @functools.wraps(inner_step)  # keeps what an LR scheduler marked it with
        def step(*args, **kwargs):
            if self._loop_mode and self._hook_failed:
                return None
            result = inner_step(*args, **kwargs)
            if counts_here:
                self._count_step()
            return result

        self.optimizer.step = step

    def _count_step(self):
        self.steps += 1

    def _fix_buckets(self):
        # DDP's reducer rebuilds its buckets once, after the first backward,
        # in the order the gradients came, with a collective on its group. A
        # replacement's would then differ from the survivors'. Rebuilt now,
        # in parameter order, on every rank alike, they never change again.
        reducer = self.ddp.reducer
        too_late = ValueError("ddprun.Healer: make the Healer before the model's first forward with gradients "
                              "(DDP has begun an iteration or fixed its buckets already: a replacement's would "
                              "differ, and it could not heal bit for bit)")
        try:
            reducer._push_all_rebuilt_params()
            rebuilt = reducer._rebuild_buckets()
        except RuntimeError as e:  # "must NOT be called during autograd execution": a forward's graph waits
            raise too_late from e
        if not rebuilt and not _process.joining:
            raise too_late

    def _pulse_while_buffers_sync(self):
        # DDP broadcasts the module's buffers (batch norm's statistics) at
        # each forward, blocking: a rank waiting there for a stopped peer is
        # not the one that hangs.
        sync = getattr(self.ddp, "_sync_buffers", None)
        if sync is None:
            return

        def sync_waiting(*args, **kwargs):
            if self._loop_mode and self._hook_failed:
                return None  # the step failed already: it runs again after the heal
            self._collectives_begin()
            try:
                return sync(*args, **kwargs)
            except Exception as e:
                if not self._loop_mode or not _collective_failed(e, self):
                    raise
                self._flag_failure(e)
                return None
            finally:
                self._collectives_end()

        self.ddp._sync_buffers = sync_waiting

    # Collectives of DDP's under way (the hook's all-reduces, the buffers'
    # broadcast): the pulse beats while they wait for peers. Once the agent
    # names a newer generation they wait for nothing: the peers are in the
    # heal, and their dropped groups fail this one's at once (a peer heals
    # outside the except block of its failed collective, whose traceback
    # would hold the work and the group's sockets open). One that still
    # blocks (a peer's group outlived its drop) stops beating, and ddprun
    # finds it hung and replaces it, instead of everyone waiting for it.
    def _collectives_begin(self):
        with self._under_way_lock:
            self._under_way += 1
        self._slot.add_waiting(+1)

    def _collectives_end(self):
        with self._under_way_lock:
            self._under_way -= 1
        self._slot.add_waiting(-1)

    def _stale_wait(self):
        return self._under_way > 0 and self._slot.generation() > self.generation

    def _wait_for(self, work):
        """A collective of the Healer's own (a comparison of the replicas,
        a state going across), started asynchronously, waited for as DDP's
        are: beating while the peers are coming, silent once ddprun names a
        newer generation (the peers dropped this one: a wait that goes on
        is for a group that outlived its drop, and ddprun finds this rank
        hung and replaces it, instead of the job waiting for ever)."""
        self._collectives_begin()
        try:
            work.wait()
        finally:
            self._collectives_end()

    def _broadcast_object(self, obj, source, device):
        """broadcast_object_list's work, with collectives this Healer waits
        for (_wait_for): its size, then its pickled bytes."""
        sending = dist.get_rank() == source
        data = pickle.dumps(obj) if sending else b""
        size = torch.tensor([len(data)], dtype=torch.int64, device=device)
        self._wait_for(dist.broadcast(size, src=source, async_op=True))
        if sending:
            buf = torch.frombuffer(bytearray(data), dtype=torch.uint8).to(device)
        else:
            buf = torch.empty(int(size.item()), dtype=torch.uint8, device=device)
        self._wait_for(dist.broadcast(buf, src=source, async_op=True))
        return obj if sending else pickle.loads(buf.cpu().numpy().tobytes())

    def _adopt_group(self):
        if self.ddp is not None:
            self.ddp.process_group = dist.distributed_c10d._get_default_group()  # its buffers' broadcasts
        self.report.world_size = dist.get_world_size()
        self.report.generation = self.generation

    def _drop_group(self):
        """Lets the default group go, so its sockets close: peers blocked in
        a collective with this rank fail now, not at their timeout."""
        if self.ddp is not None:
            self.ddp.process_group = None
        if not dist.is_initialized():
            return
        # Its connections end now, though forked children (DataLoader
        # workers) hold copies of their sockets (_sockets.py).
        group_sockets.shut_down()
        group = dist.distributed_c10d._get_default_group()
        abort = getattr(group, "abort", None)  # PyTorch 2.x: in-flight work ends now
        if abort is not None:
            try:
                abort()
            except Exception:
                pass
        del group
        dist.destroy_process_group()

    # ----- a step -----

    def step(self, fn, *args, **kwargs):
        """One training step: fn(*args, **kwargs) runs forward, backward and
        optimizer.step(). A failed collective inside heals the group and runs
        fn again if this rank had not taken its optimizer step yet. Returns
        what fn returns (None when the heal brought the step done)."""
        if not self.heals:
            return fn(*args, **kwargs)
        self._slot.set_in_step(True)
        try:
            self._start_step()
            start = self.steps
            while True:
                before = self._snapshot()
                self._hook_failed = False
                self._failure = None
                try:
                    return fn(*args, **kwargs)
                except Exception as e:
                    if not _collective_failed(e, self):
                        raise
                    if self._no_heal_coming():
                        raise  # ddprun stops the group: no replacement comes
                    why = _first_line(e)
                # Healed outside the except block: the error's traceback
                # holds the frames of the collective that failed, and with
                # them its work and the group's sockets (_drop_group).
                if self._heal_failed_step(before, start, why):
                    return None  # done here, or by the peers (the heal brought it)
        finally:
            self._slot.set_in_step(False)

    def _catch_up(self):
        """At a step's start: a heal named while this rank was outside a
        step (its collectives had nothing to fail) comes first."""
        if self._slot.generation() > self.generation:
            self._heal(f"the world changed in generation {self._slot.generation()} while this rank "
                       "was outside a step")

    def _failed_collective(self, error):
        return _collective_failed(error, self)

    def _no_heal_coming(self):
        return self._slot.no_heal_coming() and self._slot.generation() <= self.generation

    def _flag_failure(self, error):
        """A collective of the step failed (the hook's, the buffers'): the
        first error is the step's."""
        self._hook_failed = True
        if self._failure is None:
            self._failure = error

    def _heal_failed_step(self, before, start, why):
        """After a collective failed inside a step begun at `start` optimizer
        steps: the step's changes put back (unless this rank had committed
        it), the group healed. True when the heal brought the step done (by
        this rank or its peers), False when it is to run again."""
        if self.steps == start:
            self._put_back(before)
        self._hook_failed = False
        self._failure = None
        self._heal(why)
        if self.steps > start:
            return True
        self._rng_next_step = None  # the step runs again now, from the generators the heal set
        self.report.steps_redone += 1
        return False

    def _snapshot(self):
        return {
            "state": copy.deepcopy(self.state),
            "extra": [copy.deepcopy(o.state_dict()) for o in self.extra],
            "rng": _rng_state(),
            "buffers": [b.detach().clone() for b in self.module.buffers()],
            "hyper": _hyper_parameters(self.optimizer),
        }

    def _put_back(self, snap):
        self.state.clear()
        self.state.update(snap["state"])
        for o, sd in zip(self.extra, snap["extra"]):
            o.load_state_dict(sd)
        # After the extra objects: an LR scheduler's load_state_dict() sets
        # its own counters, not the rate it wrote into the optimizer when
        # the abandoned step's body called scheduler.step() (a loop's body
        # runs on past a failed collective).
        _set_hyper_parameters(self.optimizer, snap["hyper"])
        _set_rng_state(snap["rng"])
        with torch.no_grad():
            for b, saved in zip(self.module.buffers(), snap["buffers"]):
                b.copy_(saved)
