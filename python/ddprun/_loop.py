"""A plain training loop under a Healer (healer.epochs(), healer.batches()):
where the loop stands, kept in the Healer so that a heal carries it, and
the step each batch is, healed around a failed collective (the heal itself:
_state_exchange.py; the Healer: heal.py)."""
import torch

from ._state import _first_line, _hyper_parameters, _rng_state, _set_hyper_parameters, _set_rng_state


def _done(tensor):
    """A future that holds `tensor` already (a comm hook's answer when the
    step failed: nothing to reduce)."""
    fut = torch.futures.Future()
    fut.set_result(tensor)
    return fut


def _batches_from(loader, skip):
    """The loader's iterator past its first `skip` batches. Making it draws
    a seed from the global random generator (for its workers); the
    generator is put back after, so that a replacement, which makes its
    iterator mid-epoch, draws the same random numbers as its peers
    (dropout)."""
    rng = torch.get_rng_state()
    batches = iter(loader)
    torch.set_rng_state(rng)
    for _ in range(skip):  # a replacement: the epoch's batches its peers did
        next(batches)
    return batches


class _LoopPosition:
    """Where a plain loop stands: its epoch and the batches of it done."""

    def __init__(self):
        self.epoch = 0
        self.batch = 0

    def state_dict(self):
        return {"epoch": self.epoch, "batch": self.batch}

    def load_state_dict(self, sd):
        self.epoch, self.batch = sd["epoch"], sd["batch"]


class _PlainLoop:
    """Healer's plain-loop methods (a mixin: the Healer has the heal)."""

    def state_dict(self):
        """Where the loop stands, for a checkpoint of the script's own: the
        epoch, the batches of it done, the optimizer steps and the random
        generators. With the model's, the optimizer's and the scheduler's,
        a run resumed from it (load_state_dict before epochs()) goes on
        from the same batch, bit for bit."""
        loop = self._loop.state_dict()
        if self._body_steps is not None and self.steps > self._body_steps:
            loop["batch"] += 1  # asked inside the body, after its optimizer step: this batch is done
        return {"loop": loop, "steps": self.steps, "rng": _rng_state()}

    def load_state_dict(self, sd):
        self._loop.load_state_dict(sd["loop"])
        self.steps = sd["steps"]
        _set_rng_state(sd["rng"])

    def epochs(self, epochs):
        """The epochs still to run: `for epoch in healer.epochs(10):` instead
        of `for epoch in range(10):`. Where the loop stands travels with a
        heal: a replacement starts in its peers' epoch."""
        self._in_epochs = True
        try:
            while self._loop.epoch < epochs:
                yield self._loop.epoch
                self._loop.epoch += 1
                self._loop.batch = 0
        finally:
            self._in_epochs = False

    def batches(self, loader, until=None):
        """The loader's batches from where the loop stands: `for x, y in
        healer.batches(loader):` instead of `for x, y in loader:`. What the
        loop's body does with one batch is a step. A collective that fails
        in it (DDP's all-reduce, its buffers' broadcast) is flagged instead
        of raised, the step's optimizer.step() is skipped, and instead of
        the next batch the group heals and the body runs again with the same
        one (or, when the heal brought the step done, the next). Collectives
        of the script's own in the body are not covered: one that fails
        raises, and ddprun restarts the group.

        Making the loader's iterator draws a seed from the global random
        generator (for its workers); here the generator is put back after,
        so that a replacement, which makes its iterator mid-epoch, draws the
        same random numbers as its peers (dropout). Give the DataLoader a
        generator of its own when its workers' randomness matters.

        A loop bounded by steps: `until=N` yields no batch once the Healer
        counts N optimizer steps (healer.steps: a failed body's skipped
        step is not counted, a step a heal brought done is), and a loader
        run through begins the next pass at its first batch, so that
        `while healer.steps < N: for x, y in healer.batches(loader,
        until=N):` runs exactly N steps, a replacement included."""
        for batch in _batches_from(loader, self._loop.batch):
            if until is not None and self.steps >= until:
                return
            self._body_steps = self.steps  # the optimizer steps before this batch's body
            try:
                if not self.heals:
                    yield batch
                    brought = False
                else:
                    brought = yield from self._loop_step(batch)
            finally:
                self._body_steps = None
            if not brought:
                self._loop.batch += 1
        if not getattr(self, "_in_epochs", False):
            # Run through outside epochs(): the next call is the next pass.
            self._loop.epoch += 1
            self._loop.batch = 0

    def _summed_in_step(self, tensor):
        """tensor summed over the ranks, inside a healed body (_healed_call):
        a failed collective is flagged as DDP's are (the body runs again
        after the heal) and None returned."""
        import torch.distributed as dist
        total = tensor.clone() if torch.is_tensor(tensor) else torch.tensor(tensor)
        try:
            dist.all_reduce(total)
        except Exception as e:  # a peer failed: the heal follows the body
            self._flag_failure(e)
            return None
        return total

    def _healed_call(self, fn, stepped_after=()):
        """fn() (a framework's step: forward and backward, its optimizer
        step after) as a plain loop's body: run again after a heal when one
        of its collectives failed. Returns (what the last run returned,
        whether the heal brought the step done instead). `stepped_after`:
        objects with state_dict() (LR schedulers) that the framework steps
        after fn, even when the heal brought the step done: they come back
        from the peers stepped already, so they go back to where they were
        before fn, and the framework's own step brings them level."""
        if not self.heals:
            return fn(), False
        # The optimizer's settings too: a chainable scheduler (StepLR,
        # ExponentialLR) steps from the rate in the optimizer, and the peers'
        # holds their step already.
        before = [o.state_dict() for o in stepped_after], _hyper_parameters(self.optimizer)
        attempts = self._loop_step(None)
        result = None
        while True:
            try:
                next(attempts)
            except StopIteration as done:
                brought = done.value
                break
            result = fn()
        if brought:
            for o, sd in zip(stepped_after, before[0]):
                o.load_state_dict(sd)
            _set_hyper_parameters(self.optimizer, before[1])
        return result, brought

    def _loop_step(self, batch):
        """One step of a plain loop (see batches()): yields the batch until
        the body ran without a failed collective. True when a heal brought
        the step done (the loop's position came with it)."""
        self._slot.set_in_step(True)
        self._loop_mode = True
        try:
            self._start_step()
            start = self.steps
            while True:
                before = self._snapshot()
                self._hook_failed = False
                self._failure = None
                yield batch
                if not self._hook_failed:
                    return False
                why = _first_line(self._failure) if self._failure is not None else "a collective failed"
                if self._no_heal_coming():
                    raise RuntimeError(why)  # ddprun stops the group: no replacement comes
                if self._heal_failed_step(before, start, why):
                    return True  # done by the peers: the heal brought it (and the loop's position)
        finally:
            self._loop_mode = False
            self._hook_failed = False
            self._slot.set_in_step(False)
