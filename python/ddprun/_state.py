"""The training state as heal.py sends it and puts back: the random
generators' state, the optimizer's settings (the learning rate),
nested containers with their tensors taken out (sent apart, each straight
into the receiver's memory) and put back empty on the receiving side, the
order both sides derive for those tensors, and what to say when the models
differ."""
import copy

import torch

def _first_line(error):
    text = str(error).strip().splitlines()
    line = text[0] if text else type(error).__name__
    # A failed all-reduce reaches DDP through the hook's callback.
    return line.replace("Got the following error when running the callback: ", "")


def _rng_state():
    return {"cpu": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def _set_rng_state(s):
    torch.set_rng_state(s["cpu"])
    if s["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(s["cuda"])


def _hyper_parameters(optimizer):
    """Each parameter group's settings (the learning rate an LR scheduler
    writes, the momentum, ...), copied: all but its parameters."""
    return [{k: copy.deepcopy(v) for k, v in g.items() if k != "params"} for g in optimizer.param_groups]


def _set_hyper_parameters(optimizer, saved):
    for group, settings in zip(optimizer.param_groups, saved):
        for k, v in settings.items():
            if isinstance(group.get(k), torch.Tensor) and isinstance(v, torch.Tensor):
                group[k].copy_(v)  # a tensor rate (capturable optimizers) stays the one object
            else:
                group[k] = v


class _TensorSlot:
    """A tensor left out of a pickled skeleton: its shape and dtype."""

    def __init__(self, t):
        self.shape = tuple(t.shape)
        self.dtype = t.dtype
        self.on_device = t.device.type != "cpu"


def _without_tensors(obj):
    if isinstance(obj, torch.Tensor):
        return _TensorSlot(obj)
    if isinstance(obj, dict):
        return {k: _without_tensors(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_without_tensors(v) for v in obj)
    return obj


def _with_empty_tensors(obj, device):
    if isinstance(obj, _TensorSlot):
        return torch.empty(obj.shape, dtype=obj.dtype, device=device if obj.on_device else "cpu")
    if isinstance(obj, dict):
        return {k: _with_empty_tensors(v, device) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_with_empty_tensors(v, device) for v in obj)
    return obj


def _tensors_in(obj):
    """The tensors of a nested structure, in an order both sides derive from
    its structure (dict keys sorted)."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for k in sorted(obj, key=repr):
            yield from _tensors_in(obj[k])
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _tensors_in(v)


def _model_mismatch(theirs, tensors):
    mine = [(tuple(t.shape), str(t.dtype)) for t in tensors]
    if len(mine) != len(theirs):
        return f"{len(theirs)} parameters and buffers there, {len(mine)} here"
    for i, (a, b) in enumerate(zip(theirs, mine)):
        if a != b:
            return f"tensor {i} is {list(a[0])} {a[1]} there, {list(b[0])} {b[1]} here"
    return ""
