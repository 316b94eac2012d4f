"""Lightning's Trainer.fit heals under ddprun: a rank that dies inside a
training step is replaced while the others keep their processes, and the
run ends with the parameters of one nothing interrupted.

A script that names Lightning's DDPStrategy changes its import (1 line):

    from ddprun.lightning import DDPStrategy  # was: from lightning.pytorch.strategies import DDPStrategy
    trainer = L.Trainer(strategy=DDPStrategy(), ...)

one that says strategy="ddp" says strategy=HealingDDPStrategy() (with its
import: 2 lines). Under another launcher, or without ddprun's heals, the
strategy is Lightning's DDPStrategy.

What it does (Healer in heal.py does the heal itself):
  1. setup(): a Healer over the DDP module, the optimizer, the LR
     schedulers and where the fit loop stands (Lightning's loop counters
     and the callbacks' state: a replacement takes them, survivors keep
     their own; a replacement of a script that resumes from its newest
     checkpoint keeps them, not the checkpoint's);
  2. optimizer_step(): the closure (forward, backward, DDP's all-reduce)
     runs as a plain loop's body does under healer.batches(): a failed
     all-reduce is flagged, the group heals, the closure runs again; then
     Lightning's optimizer step;
  3. a replacement skips the batches of the epoch its peers did, and its
     collectives between its Healer and its first step (Lightning's
     start-up barriers, the per-batch broadcast) stay local: its peers are
     inside their step, not in those calls;
  4. so do a survivor's when the heal brought its step done (a peer that
     had taken that step sent the state): its peers made the next batch's
     calls before they healed and are inside the next step. (Seen when two
     ranks died together and the survivors' last all-reduce ended on one
     and failed on the other: the one behind then waited in the next
     batch's broadcast for peers inside their step.)
A rank that dies outside a training step: in a validation without
collectives (Lightning's default self.log) the others finish it and heal at
their next training step (the replacement starts that step with the
generators its peers had there, whatever its own start drew); where a
survivor meets a collective outside a step first (a sync_dist=True log, a
checkpoint's save, which waits in a barrier), it fails, and ddprun
restarts the group, as without this strategy. Gradient accumulation
(accumulate_grad_batches > 1) is refused: the batches accumulated before a
failure live in each rank's gradients alone.
Tested with the versions scripts/frameworks-requirements.txt pins
(lightning 2.6.6); `lightning.pytorch` only, not the older
`pytorch_lightning` namespace.
"""
import os

from lightning.fabric.utilities.data import _set_sampler_epoch
from lightning.pytorch.callbacks import GradientAccumulationScheduler, ModelCheckpoint
from lightning.pytorch.strategies import DDPStrategy as _LightningDDPStrategy
from lightning.pytorch.trainer import call as _call

from ._generation import _process
from ._loop import _batches_from
from .heal import Healer, joining

__all__ = ["DDPStrategy", "HealingDDPStrategy"]


class _FitPosition:
    """Where Trainer.fit stands (the fit loop's counters, the callbacks'
    state, the folders the loggers and checkpoints write to): sent with a
    heal, taken by a replacement only. A survivor is inside the same step
    as its peers; its own are right."""

    def __init__(self, trainer):
        self._trainer = trainer

    def _checkpoints(self):
        return [c for c in self._trainer.callbacks if isinstance(c, ModelCheckpoint)]

    def state_dict(self):
        return {"fit_loop": self._trainer.fit_loop.state_dict(),
                "callbacks": _call._call_callbacks_state_dict(self._trainer),
                # A replacement of rank 0 would pick the next free version
                # folder (its peers made theirs): it takes theirs instead.
                "logger_versions": [getattr(lg, "_version", None) for lg in self._trainer.loggers],
                "checkpoint_dirs": [c.dirpath for c in self._checkpoints()]}

    def load_state_dict(self, sd):
        if not joining():
            return
        self._trainer.fit_loop.load_state_dict(sd["fit_loop"])
        for logger, version in zip(self._trainer.loggers, sd["logger_versions"]):
            if version is not None and getattr(logger, "_version", version) != version:
                _take_version(logger, version)
        for checkpoint, dirpath in zip(self._checkpoints(), sd["checkpoint_dirs"]):
            checkpoint.dirpath = dirpath
        _call._call_callbacks_load_state_dict(self._trainer, sd)


def _take_version(logger, version):
    """The logger writes into its peers' version folder. Lightning made its
    experiment (CSVLogger: the folder of the next free version) before the
    heal: it is made again, lazily, and the folder goes if still empty."""
    made = getattr(logger, "_experiment", None) is not None
    own_dir = logger.log_dir if made else None
    logger._version = version
    if made:
        logger._experiment = None
        try:
            os.rmdir(own_dir)  # only an empty folder
        except OSError:
            pass


class _FromWherePeersAre:
    """The training dataloader, whose first iterator in a replacement is of
    its peers' epoch and skips the batches of it they did (_batches_from:
    the global generator as it was)."""

    def __init__(self, loader, batches_done):
        self._loader = loader
        self._batches_done = batches_done

    def __iter__(self):
        return _batches_from(self._loader, self._batches_done(self._loader))

    def __len__(self):
        return len(self._loader)

    def __getattr__(self, name):  # sampler, batch_size, dataset: Lightning reads them
        return getattr(self._loader, name)


class HealingDDPStrategy(_LightningDDPStrategy):
    """Lightning's DDPStrategy, healed by ddprun (see the top of this file).
    Takes DDPStrategy's arguments."""

    healer = None
    # This rank's peers are inside a step it has not begun: a replacement's,
    # from its Healer to its first step; a survivor's whose step the heal
    # brought done, until its next. Its collectives meanwhile stay local.
    _peers_in_step = False

    def setup(self, trainer):
        super().setup(trainer)
        self._trainer = trainer
        if trainer.state.fn != "fit":
            return
        if len(self.optimizers) != 1:
            raise ValueError(f"ddprun.lightning: HealingDDPStrategy heals one optimizer; configure_optimizers "
                             f"gave {len(self.optimizers)}")
        self._check_healable(trainer)
        self._schedulers = [c.scheduler for c in self.lr_scheduler_configs]
        self.healer = Healer(self.model, self.optimizers[0],
                             extra=self._schedulers + [_FitPosition(trainer)])
        self._peers_in_step = self.healer.joined
        self._skip_pending = self.healer.joined
        if self.healer.joined:
            # A script that resumes (fit(ckpt_path=...)) had Lightning load
            # its newest checkpoint before this setup, and Lightning
            # restores that checkpoint's loops, optimizer and schedulers
            # after it: the peers' state just taken would go back to the
            # checkpoint's (the fit loop's position behind theirs: at the
            # next checkpoint's save they waited in its barrier for ever,
            # the replacement in the next batch's broadcast). A
            # replacement's training state is its peers'.
            trainer._checkpoint_connector._loaded_checkpoint = {}
        # Lightning broadcasts a SIGTERM flag from rank 0 before every batch.
        epoch_loop = trainer.fit_loop.epoch_loop
        broadcast_sigterm = epoch_loop._broadcast_sigterm_tensor

        def sigterm_flag():
            if not self._alone():
                broadcast_sigterm()

        epoch_loop._broadcast_sigterm_tensor = sigterm_flag

    def _check_healable(self, trainer):
        """What the heal cannot carry, refused at once (under ddprun's heals
        only: elsewhere the strategy is Lightning's)."""
        if not (_process.heals and _process.slot is not None):
            return
        # The batches accumulated before a failure live in each rank's
        # gradients alone: a replacement has none of them (and the heal
        # runs only the stepping batch again), so the step would differ.
        accumulating = [trainer.accumulate_grad_batches] + [
            factor for c in trainer.callbacks if isinstance(c, GradientAccumulationScheduler)
            for factor in c.scheduling.values()]
        if any(factor != 1 for factor in accumulating):
            raise ValueError("ddprun.lightning: HealingDDPStrategy heals steps of one batch; set "
                             f"Trainer(accumulate_grad_batches=1) (it is {max(accumulating)}), and no "
                             "GradientAccumulationScheduler; a larger batch takes the place of accumulation")

    def teardown(self):
        if self.healer is not None:
            self.healer.close()
        super().teardown()

    def process_dataloader(self, dataloader):
        if self.healer is None or not self._trainer.training:
            return dataloader
        return _FromWherePeersAre(dataloader, self._batches_done_by_peers)

    def _batches_done_by_peers(self, loader):
        if not self._skip_pending:
            return 0
        self._skip_pending = False
        # Lightning makes this first iterator before it tells the sampler
        # the epoch (and, restarted mid-epoch, keeps it): told here.
        fit_loop = self._trainer.fit_loop
        _set_sampler_epoch(loader, fit_loop.epoch_progress.current.processed)
        return fit_loop.epoch_loop.batch_progress.current.completed

    def optimizer_step(self, optimizer, closure, model=None, **kwargs):
        healer = self.healer
        self._peers_in_step = False
        if healer is None or not healer.heals:
            return super().optimizer_step(optimizer, closure, model, **kwargs)
        # Lightning steps the schedulers after this returns.
        loss, brought = healer._healed_call(closure, stepped_after=self._schedulers)
        if brought:
            self._peers_in_step = True  # see 4. at the top
            return loss
        return super().optimizer_step(optimizer, lambda: loss, model, **kwargs)

    # A replacement's collectives before its first step stay local, and a
    # survivor's after a step the heal brought, until its next.
    def _alone(self):
        return joining() or self._peers_in_step

    def barrier(self, *args, **kwargs):
        if not self._alone():
            super().barrier(*args, **kwargs)

    def broadcast(self, obj, src=0):
        return obj if self._alone() else super().broadcast(obj, src)

    def reduce(self, tensor, group=None, reduce_op="mean"):
        return tensor if self._alone() else super().reduce(tensor, group, reduce_op)

    def reduce_boolean_decision(self, decision, all=True):
        return decision if self._alone() else super().reduce_boolean_decision(decision, all)

    def all_gather(self, tensor, group=None, sync_grads=False):
        if self._alone():
            raise RuntimeError("ddprun.lightning: all_gather between a heal and this rank's next step: its peers "
                               "are inside their step, not in this call")
        return super().all_gather(tensor, group, sync_grads)


# For scripts that name Lightning's: `from ddprun.lightning import DDPStrategy`.
DDPStrategy = HealingDDPStrategy
