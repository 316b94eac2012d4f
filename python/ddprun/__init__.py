"""ddprun's Python package: what a PyTorch script imports to heal under
ddprun (ddprun.Healer: a crashed rank costs a step, not a restart).

ddprun puts this package on its Python workers' path, so a script needs no
install step; `pip install` of the folder above this one works too. Under
another launcher, or without ddprun's heals, a Healer changes nothing: its
step() calls the function.

Frameworks (imported on their own, each needs its framework):
ddprun.lightning.DDPStrategy (Lightning) and ddprun.transformers.Trainer
(the Hugging Face Trainer): the import is the one line a script changes.
"""
from .heal import Healer, HealReport, ReplicasDiffer, joining

__all__ = ["Healer", "HealReport", "ReplicasDiffer", "joining"]
__version__ = "0.1.0"
