"""How a heal goes once a step's collective failed (heal.py's Healer mixes
this in): the rank drops its group and moves to the generation the agent
names (again, while newer ones come), a replacement joins its peers, and
the ranks agree on the newest state, which the lowest rank with the most
optimizer steps sends to the ranks behind it, each tensor straight into
the receiver's memory. Also which errors are failed collectives (a peer
died, the group was dropped) rather than the script's own bugs."""
import os
import sys
import time
import traceback

import torch
import torch.distributed as dist

from ._generation import _process
from ._replacement import _forget_failed_init, _init_generation
from ._state import (_first_line, _model_mismatch, _rng_state, _set_rng_state, _tensors_in, _with_empty_tensors,
                     _without_tensors)


def _collective_failed(error, healer):
    """Whether `error` is a failed collective (a peer died, or the group was
    dropped), not the script's own bug: the comm hook saw it fail, or it is
    PyTorch's distributed error, or it came out of torch.distributed."""
    if healer._hook_failed:
        return True
    dist_error = getattr(dist, "DistError", None)
    if dist_error is not None and isinstance(error, dist_error):
        return True
    if not isinstance(error, RuntimeError):
        return False
    for frame, _ in traceback.walk_tb(error.__traceback__):
        if f"{os.sep}distributed{os.sep}" in frame.f_code.co_filename:
            return True
    text = str(error)
    return any(word in text for word in ("gloo", "Gloo", "NCCL", "Connection closed", "Connection reset"))


class _StateExchange:
    """The heal's part of the Healer (its state: the module, the optimizer,
    the steps, `state`, `extra`, the report; heal.py)."""

    def _heal(self, why):
        r = self.report
        r.wait_seconds = r.connect_seconds = r.transfer_seconds = 0.0
        cause = why
        world_before = r.world_size
        with self._slot.waiting():
            while True:
                self._next_generation(cause)
                began = time.monotonic()
                try:
                    self._verify_after_heal(self._sync_state(have_state=True))
                    r.transfer_seconds += time.monotonic() - began
                    break
                except Exception as e:
                    if not _collective_failed(e, self):
                        raise
                    r.transfer_seconds += time.monotonic() - began
                    cause = _first_line(e)  # a peer failed during the heal itself
        self._adopt_group()
        r.heals += 1
        if self._reports_heal:
            resized = ("" if r.world_size == world_before else
                       f"; the world goes on with {r.world_size} ranks instead of {world_before}")
            print(f"ddprun: healed in generation {self.generation} ({why}): {r.wait_seconds:.3f} s waiting, "
                  f"{r.connect_seconds:.3f} s connecting, {r.transfer_seconds:.3f} s sending {r.bytes} bytes of "
                  f"state{resized}", file=sys.stderr, flush=True)

    def _next_generation(self, why):
        """Drops the group, waits for the agent to name a newer generation,
        and makes the default group of it (again, if a peer fails meanwhile)."""
        while True:
            seen = self.generation
            self._drop_group()
            began = time.monotonic()
            generation = self._slot.wait_generation(seen, self.wait_timeout)
            self.report.wait_seconds += time.monotonic() - began
            if generation == seen:
                raise RuntimeError(f"{why} (no replacement came to heal the group within {self.wait_timeout:g} s: "
                                   "ddprun stops the group instead; see --max-heals)")
            began = time.monotonic()
            try:
                _init_generation(self._backend, generation, self._slot)
                self.generation = generation
                self.report.connect_seconds += time.monotonic() - began
                return
            except Exception as e:
                # Another peer failed while this generation connected (or a
                # newer one began): the agent names the next.
                self.report.connect_seconds += time.monotonic() - began
                self.generation = generation
                why = _first_line(e)
                _forget_failed_init()

    def _join(self):
        """A replacement's part: take the newest state from the survivors."""
        self.joined = True
        began = time.monotonic()
        _process.taking_state = True
        try:
            with self._slot.waiting():
                while True:
                    try:
                        self._verify_after_heal(self._sync_state(have_state=False))
                        break
                    except Exception as e:
                        if not _collective_failed(e, self):
                            raise
                        why = _first_line(e)
                    self._next_generation(why)  # a peer failed while this process joined
        finally:
            _process.taking_state = False
        _process.joining = False
        if _process.joining_beats is not None:
            _process.joining_beats.__exit__(None, None, None)
            _process.joining_beats = None
        self.report.heals = 1
        self.report.transfer_seconds = time.monotonic() - began

    def _tensors(self):
        return list(self.module.parameters()) + list(self.module.buffers())

    def _sync_state(self, have_state):
        """Every rank tells its steps (a replacement: -1); the lowest rank with
        the most sends its state to every rank behind it. True when state
        went across."""
        device = next(self.module.parameters()).device
        mine = self.steps if have_state else -1
        world = dist.get_world_size()
        steps = [torch.zeros(1, dtype=torch.int64, device=device) for _ in range(world)]
        self._wait_for(dist.all_gather(steps, torch.tensor([mine], dtype=torch.int64, device=device), async_op=True))
        steps = [int(s.item()) for s in steps]
        newest = max(steps)
        if newest < 0:
            raise ValueError("ddprun: heal: no rank holds the training state (every rank is new)")
        source = steps.index(newest)
        self._reports_heal = dist.get_rank() == source  # one rank says how the heal went
        if all(s == newest for s in steps):
            self.report.bytes = 0
            return False
        self._send_state(source, receiving=mine != newest, keep_own=False, whole=True)
        return True

    def _send_state(self, source, receiving, keep_own, whole):
        """Rank `source` sends its module's tensors and optimizer state (and,
        `whole`, its steps, `state`, `extra` and generators) to every rank;
        those `receiving` take them. Small things go pickled; each tensor
        goes by its own broadcast, straight into the receiver's memory. The
        others take part in the broadcasts: into their own tensors (in a
        heal they hold the same bytes), or with `keep_own` (a repair) into
        memory they let go."""
        device = next(self.module.parameters()).device
        sending = dist.get_rank() == source
        live = self.optimizer.state_dict()  # the live tensors, not copies
        skeleton = None
        if sending:
            skeleton = {
                "model": [(tuple(t.shape), str(t.dtype)) for t in self._tensors()],
                "optimizer": _without_tensors(live),
            }
            if whole:
                skeleton.update({
                    "steps": self.steps,
                    "state": self.state,
                    "extra": [o.state_dict() for o in self.extra],
                    "rng": _rng_state(),
                    # DDP's forward syncs the buffers only if the forward
                    # before it ran with gradients: a flag of the survivors'
                    # history that a replacement's own start (an evaluation
                    # forward before its Healer) may have left otherwise, and
                    # a broadcast that one rank skips deadlocks the others in it.
                    "forward_sync": getattr(self.ddp, "require_forward_param_sync", None),
                })
        skeleton = self._broadcast_object(skeleton, source, self._collective_device())
        mismatch = _model_mismatch(skeleton["model"], self._tensors())
        if mismatch:
            raise ValueError(f"ddprun: heal: this rank's model does not match the state rank {source} sends: "
                             f"{mismatch} (is every rank running the same script, with the same model?)")
        discard = keep_own and not receiving and not sending
        nbytes = 0
        with torch.no_grad():
            for t in self._tensors():
                self._wait_for(dist.broadcast(torch.empty_like(t.data) if discard else t.data, src=source,
                                              async_op=True))
                nbytes += t.numel() * t.element_size()
            # The optimizer's tensors: a rank with the newest state receives
            # into its own (the same bytes); the others into new memory.
            fresh = receiving or discard
            target = _with_empty_tensors(skeleton["optimizer"], device) if fresh else live
            for t in _tensors_in(target):
                self._wait_for(dist.broadcast(t, src=source, async_op=True))
                nbytes += t.numel() * t.element_size()
        self.report.bytes = nbytes
        if not receiving:
            return
        self.optimizer.load_state_dict(target)
        if not whole:
            return
        self.steps = skeleton["steps"]
        self.state.clear()
        self.state.update(skeleton["state"])
        for o, sd in zip(self.extra, skeleton["extra"]):
            o.load_state_dict(sd)
        _set_rng_state(skeleton["rng"])
        # The generators as the sender had them at its step's start: set
        # again when this rank's next step starts (a framework may draw from
        # them meanwhile: a replacement's loaders, which its peers made long ago).
        self._rng_next_step = skeleton["rng"]
        if skeleton.get("forward_sync") is not None and self.ddp is not None:
            self.ddp.require_forward_param_sync = skeleton["forward_sync"]
