"""The Hugging Face Trainer heals under ddprun: a rank that dies inside a
training step is replaced while the others keep their processes, and the
run ends with the parameters of one nothing interrupted.

A script changes the import it takes the Trainer from (1 line): the rest
of transformers comes through ddprun.transformers too.

    from ddprun.transformers import Trainer, TrainingArguments  # was: from transformers import ...

Under another launcher, or without ddprun's heals, it is the Trainer.

What it does (Healer in heal.py does the heal itself):
  1. when train() has the DDP model, the optimizer and the LR scheduler: a
     Healer over them and where training stands (the TrainerState: global
     step, epoch, log history; a replacement takes it, survivors keep
     their own);
  2. training_step() (forward, backward, DDP's all-reduce) runs as a plain
     loop's body does under healer.batches(): a failed all-reduce is
     flagged, the group heals, the step runs again; when the heal brought
     the step done (the peers had taken it), the Trainer's optimizer and
     scheduler steps after it are skipped;
  3. a replacement starts in its peers' epoch, skips the batches of it they
     did (the Trainer's own resume path), and takes their random generators
     after its first batch, as a resume from a checkpoint does.
  4. the count of a batch's tokens over the ranks
     (average_tokens_across_devices, transformers' default for a model
     whose forward takes the loss's keyword arguments) is summed inside the
     healed step, not gathered before it.
A rank that dies outside a training step (logging's gather, evaluation, a
checkpoint's save) is not healed: ddprun restarts the group. Tested with
the versions scripts/frameworks-requirements.txt pins (transformers 5.24,
accelerate 1.15).
"""
import functools

import torch
from transformers import Trainer as _HuggingFaceTrainer

from .heal import Healer, joining

__all__ = ["Trainer", "HealingTrainer"]

# Where a replacement "resumes from": the Trainer's resume path skips the
# batches its peers did; no files are read from it.
_FROM_PEERS = "<ddprun: the state of the peers>"

_STATE_FIELDS = ("global_step", "epoch", "log_history", "total_flos", "num_input_tokens_seen", "best_metric",
                 "best_global_step", "best_model_checkpoint")


class _TrainingPosition:
    """Where train() stands (the TrainerState's counters and history): sent
    with a heal, taken by a replacement only."""

    def __init__(self, trainer):
        self._trainer = trainer

    def state_dict(self):
        return {name: getattr(self._trainer.state, name, None) for name in _STATE_FIELDS}

    def load_state_dict(self, sd):
        if joining():
            for name, value in sd.items():
                setattr(self._trainer.state, name, value)


class _LocalCount:
    """A batch's token count on this rank only, to be summed over the ranks
    inside the healed step (HealingTrainer._get_num_items_in_batch)."""

    def __init__(self, local):
        self.local = local


class HealingTrainer(_HuggingFaceTrainer):
    """transformers.Trainer, healed by ddprun (see the top of this file).
    Takes the Trainer's arguments."""

    healer = None
    _from_peers = False  # a replacement, until its first step begins where its peers are
    _resumed_loader = None
    _loader_rng_types = None
    _step_brought = False  # the heal brought this step done: no optimizer or scheduler step of its own

    def _build_accelerator_args(self, **kwargs):
        # The Trainer asks DDP to find unused parameters (an extra
        # collective on the group DDP was made with, which a heal cannot
        # replace) for any model unless told: here it is told not to.
        built = super()._build_accelerator_args(**kwargs)
        if self.args.ddp_find_unused_parameters is None:
            for handler in built.get("kwargs_handlers", []):
                if hasattr(handler, "find_unused_parameters"):
                    handler.find_unused_parameters = False
        return built

    def _prepare_for_training(self, max_steps, train_dataloader, resume_from_checkpoint):
        model, train_dataloader = super()._prepare_for_training(max_steps, train_dataloader, resume_from_checkpoint)
        self._check_healable()
        optimizer = getattr(self.optimizer, "optimizer", self.optimizer)  # accelerate wraps it
        self.healer = Healer(model, optimizer, extra=[self.lr_scheduler, _TrainingPosition(self)])
        if self.healer.joined:
            self._from_peers = True
        self._skip_when_brought(self.optimizer)
        return model, train_dataloader

    def _check_healable(self):
        if self.args.gradient_accumulation_steps != 1:
            raise ValueError("ddprun.transformers: the healing Trainer heals steps of one batch; set "
                             f"TrainingArguments(gradient_accumulation_steps=1) (it is "
                             f"{self.args.gradient_accumulation_steps})")
        if self.args.ddp_find_unused_parameters:
            raise ValueError("ddprun.transformers: DDP's search for unused parameters cannot heal; set "
                             "TrainingArguments(ddp_find_unused_parameters=False)")
        if not getattr(self.args.accelerator_config, "use_seedable_sampler", True):
            raise ValueError("ddprun.transformers: a replacement draws its epoch's order from the sampler's seed and "
                             "epoch; set TrainingArguments(accelerator_config={'use_seedable_sampler': True})")

    def _skip_when_brought(self, optimizer):
        step = optimizer.step

        @functools.wraps(step)  # keeps what the LR scheduler marked it with
        def step_unless_brought(*args, **kwargs):
            if self._step_brought:
                return None
            return step(*args, **kwargs)

        optimizer.step = step_unless_brought

    def _heals(self):
        return self.healer is not None and self.healer.heals

    def _get_num_items_in_batch(self, batch_samples, device):
        # average_tokens_across_devices (transformers' default) sums the
        # batch's token count over the ranks with a gather before the step,
        # where a failed peer cannot heal: here the count stays this rank's,
        # and training_step sums it inside the healed step.
        if not (self._heals() and self.args.average_tokens_across_devices and self.args.world_size > 1):
            return super()._get_num_items_in_batch(batch_samples, device)
        self.args.average_tokens_across_devices = False
        try:
            local = super()._get_num_items_in_batch(batch_samples, device)
        finally:
            self.args.average_tokens_across_devices = True
        return None if local is None else _LocalCount(local)

    def training_step(self, model, inputs, num_items_in_batch=None):
        healer = self.healer
        self._step_brought = False
        if not self._heals():
            return super().training_step(model, inputs, num_items_in_batch)

        def attempt():
            # The Trainer zeroes the gradients after its optimizer step: a
            # step run again after a heal starts from none, as the first did.
            model.zero_grad()
            count = num_items_in_batch
            if isinstance(count, _LocalCount):
                count = healer._summed_in_step(count.local)
                if count is None:
                    # A peer failed: the step runs again after the heal, or
                    # the heal brings it done (then this is the loss logged:
                    # none, which the Trainer's logging_nan_inf_filter skips).
                    return torch.tensor(float("nan"))
            return super(HealingTrainer, self).training_step(model, inputs, count)

        # The Trainer steps the scheduler after this returns (the optimizer
        # it skips when the heal brought the step done).
        loss, self._step_brought = healer._healed_call(attempt, stepped_after=[self.lr_scheduler])
        return loss

    def train(self, *args, **kwargs):
        try:
            return super().train(*args, **kwargs)
        finally:
            if self.healer is not None:
                self.healer.close()

    # A replacement: the epoch loop starts at 0; it goes to its peers' epoch
    # and batch through the Trainer's resume path.
    def _run_epoch(self, **kwargs):
        if not self._from_peers:
            return super()._run_epoch(**kwargs)
        per_epoch = kwargs["num_update_steps_per_epoch"]
        epoch, done = divmod(self.state.global_step, per_epoch)
        if kwargs["epoch"] < epoch:
            return None  # an epoch the peers finished
        kwargs.update(resume_from_checkpoint=_FROM_PEERS, epochs_trained=epoch, steps_trained_in_current_epoch=done)
        # accelerate's loader broadcasts rank 0's generator as it makes an
        # iterator (the peers did, at the epoch's start; they are inside a
        # step now). The seedable sampler orders the epoch by its seed and
        # epoch alone: this first iterator goes without.
        self._resumed_loader = kwargs["train_dataloader"]
        self._loader_rng_types = getattr(self._resumed_loader, "rng_types", None)
        if self._loader_rng_types is not None:
            self._resumed_loader.rng_types = None
        return super()._run_epoch(**kwargs)

    def _load_rng_state(self, checkpoint):
        if checkpoint != _FROM_PEERS:
            return super()._load_rng_state(checkpoint)
        # Asked before the epoch's iterator is made when the peers are at its
        # first batch: get_batch_samples() puts the generators back instead.
        return None

    def get_batch_samples(self, epoch_iterator, num_batches, device):
        batches = super().get_batch_samples(epoch_iterator, num_batches, device)
        if self._from_peers:
            # The first batch is fetched (making the iterator and skipping
            # drew from the generators: the Healer sets them as the peers had
            # them when the step begins).
            self._from_peers = False
            if self._loader_rng_types is not None:
                self._resumed_loader.rng_types = self._loader_rng_types
        return batches


# For scripts that name the Trainer: `from ddprun.transformers import Trainer`.
Trainer = HealingTrainer


def __getattr__(name):
    """The rest of transformers (TrainingArguments, callbacks, models), so
    that a script's one import line changes."""
    import transformers
    return getattr(transformers, name)
