"""The ranks compare their replicas (ddprun --verify-every): in data
parallelism every rank must hold the same bits, so each rank tells a
fingerprint of its tensors and every rank learns who is apart. A rank apart
from a strict majority is named with the first tensor that differs (heal.py
then gives it the majority's state); no majority (2 of 4 apart, 1 of 2) is
named too, and nobody can say which side is right. Ranks on hardware of
different kinds (DDPRUN_HARDWARE_KIND, else the CPU's and the GPU's names)
are compared within their kind: a difference between kinds whose ranks
agree among themselves is by design, not a fault.

worker_lib's verify/replica_check.cpp does the same for C++ workers, with
the same lines for people; the fingerprints themselves need not match
between the two (no rank compares with the other kind of worker).

A tensor's fingerprint is a weighted sum of its 64-bit (or 32-bit, or
byte) words with odd pseudo-random weights, wrapping, computed where the
tensor lives (a GPU's never leave it but for one number a tensor): a change
confined to one word always changes it, and the dtype and shape count too.
No float sum: one flipped low bit changes it.
"""
import hashlib
import os

import torch
import torch.distributed as dist
from . import _contract

_MASK = (1 << 64) - 1
_CHUNK = 1 << 22  # words weighed at a time: what a fingerprint allocates, whatever the tensor's size
_KIND_NAME_BYTES = 96
_weights = {}  # per device: constants, made once


def _signed(x):
    x &= _MASK
    return x - (1 << 64) if x >= 1 << 63 else x


def _mix(h, word):
    """One word into a running 64-bit value: a bijection of each for the
    other fixed (odd multipliers), then spread (splitmix64's finaliser)."""
    h = (h + (word & _MASK) * 0x9E3779B97F4A7C15) & _MASK
    h = ((h << 29) | (h >> 35)) & _MASK
    h = (h * 0xC2B2AE3D27D4EB4F) & _MASK
    h ^= h >> 31
    h = (h * 0xBF58476D1CE4E5B9) & _MASK
    h ^= h >> 29
    h = (h * 0x94D049BB133111EB) & _MASK
    return h ^ (h >> 32)


def _weights_for(device):
    w = _weights.get(device)
    if w is None:
        # splitmix64 of a counter in int64 arithmetic (it wraps), made odd.
        x = torch.arange(1, _CHUNK + 1, dtype=torch.int64) * _signed(0x9E3779B97F4A7C15)
        x = (x ^ (x >> 30)) * _signed(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> 27)) * _signed(0x94D049BB133111EB)
        w = ((x ^ (x >> 31)) | 1).to(device)
        _weights[device] = w
    return w


def _chunk_sums(t):
    """The weighted sums of t's words, chunk by chunk, as 0-d int64 tensors
    on t's device (one transfer for all of them later)."""
    flat = t.detach().contiguous().reshape(-1)
    nbytes = flat.numel() * flat.element_size()
    offset = flat.storage_offset() * flat.element_size()
    data = flat.view(torch.uint8)
    if nbytes % 8 == 0 and offset % 8 == 0:
        words = data.view(torch.int64)
    elif nbytes % 4 == 0 and offset % 4 == 0:
        words = data.view(torch.int32).to(torch.int64)
    else:
        words = data.to(torch.int64)
    w = _weights_for(t.device)
    return [(words[at:at + _CHUNK] * w[:min(_CHUNK, words.numel() - at)]).sum()
            for at in range(0, words.numel(), _CHUNK)]


def fingerprints(tensors):
    """Each tensor's fingerprint (an int in [0, 2^64)), in order."""
    sums = [_chunk_sums(t) for t in tensors]
    flat = [s for per_tensor in sums for s in per_tensor]
    # One trip to the host for every number (a GPU's stream waits once).
    values = iter(torch.stack([s.cpu() for s in flat]).tolist() if flat else [])
    out = []
    for t, per_tensor in zip(tensors, sums):
        shape = hashlib.blake2b(f"{t.dtype}{tuple(t.shape)}".encode(), digest_size=8).digest()
        h = _mix(len(per_tensor), int.from_bytes(shape, "little"))
        for _ in per_tensor:
            h = _mix(h, next(values))
        out.append(h)
    return out


def fingerprint_of_all(fps):
    h = len(fps)
    for f in fps:
        h = _mix(h, f)
    return h


def hardware_kind(device):
    """This node's kind: DDPRUN_HARDWARE_KIND, else the CPU's model name and,
    for a model on a GPU, the GPU's."""
    named = os.environ.get(_contract.HARDWARE_KIND)
    if named:
        return named
    kind, part = "", ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    kind = value.strip()
                    break
                if key.strip() == "CPU part" and not part:
                    part = "CPU part " + value.strip()
    except OSError:
        pass
    kind = kind or part or "unknown CPU"
    if device.type == "cuda":
        kind += ", " + torch.cuda.get_device_name(device)
    return kind


def rank_list(ranks):
    """"0, 1, 3", "0-3, 5": ranks in order, runs of three or more as ranges."""
    ranks = sorted(set(ranks))
    out, i = [], 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        out += [f"{ranks[i]}-{ranks[j]}"] if j - i >= 2 else [str(r) for r in ranks[i:j + 1]]
        i = j + 1
    return ", ".join(out)


def _ranks_text(ranks):
    return ("rank " if len(ranks) == 1 else "ranks ") + rank_list(ranks)


class Comparison:
    """What a comparison found; the same on every rank but self_apart."""

    def __init__(self):
        self.outcome = "agree"  # or "apart" (a majority to repair from), "no_majority"
        self.repairs = []  # (source, [ranks apart]) per kind with ranks apart
        self.by_design = False
        self.by_design_text = ""
        self.text = ""
        self.self_apart = False


def _gather(values, device, wait):
    t = torch.tensor([_signed(v) for v in values], dtype=torch.int64, device=device)
    out = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    wait(dist.all_gather(out, t, async_op=True))
    return [[v & _MASK for v in row.tolist()] for row in out]


def compare(named, step, what, kind, node, device, wait):
    """Collective over the default group: named is [(name, tensor)] in an
    order every rank derives alike; device: where the group's collectives
    take tensors (NCCL: the GPU); wait(work): how to wait for one started
    asynchronously (the Healer's: a wait a newer heal generation left for
    nothing stops beating, and ddprun finds it hung)."""
    c = Comparison()
    fps = fingerprints([t for _, t in named])
    world = dist.get_world_size()
    if world == 1:
        return c
    kind_hash = int.from_bytes(hashlib.blake2b(kind.encode(), digest_size=8).digest(), "little")
    rows = _gather([fingerprint_of_all(fps), kind_hash, step, len(fps), node], device, wait)
    at_step = f" at step {step}"
    for q in range(1, world):
        if rows[q][3] != rows[0][3]:
            c.outcome = "no_majority"
            c.text = (f"rank {q}'s model has {rows[q][3]} tensors, rank 0's {rows[0][3]}{at_step} (is every rank "
                      "running the same script, with the same model?)")
            return c
    # Within each hardware kind (in the order of their lowest rank), who
    # agrees with whom.
    kinds = {}
    for r, row in enumerate(rows):
        groups = kinds.setdefault(row[1], {})
        groups.setdefault(row[0], []).append(r)
    def majority_of(groups):
        size = sum(len(g) for g in groups.values())
        return next((fp for fp, g in groups.items() if 2 * len(g) > size), None)
    all_agree = all(len(groups) == 1 for groups in kinds.values())
    kind_fps = {majority_of(groups) for groups in kinds.values()} - {None}
    kinds_differ = len(kinds) > 1 and len(kind_fps) > 1
    if all_agree and not kinds_differ:
        return c
    # Someone differs: each rank's fingerprint of each tensor, to name the
    # first that differs.
    per_tensor = _gather(fps, device, wait) if fps else [[] for _ in range(world)]
    def first_difference(a, b):
        for i, (x, y) in enumerate(zip(per_tensor[a], per_tensor[b])):
            if x != y:
                return named[i][0]
        return "none: the tensors agree, their number or order differs"
    lines = []
    me = dist.get_rank()
    for groups in kinds.values():
        if len(groups) == 1:
            continue
        fp = majority_of(groups)
        if fp is None:
            c.outcome = "no_majority"
            ordered = list(groups.values())
            lines.append(f"the ranks' {what} differ with no majority{at_step}: "
                         + " | ".join(_ranks_text(g) for g in ordered)
                         + f" (first differing tensor: {first_difference(ordered[0][0], ordered[1][0])})")
            continue
        majority = groups[fp]
        apart = sorted(r for f, g in groups.items() if f != fp for r in g)
        c.repairs.append((majority[0], apart))
        c.self_apart = c.self_apart or me in apart
        who = f"rank {apart[0]}'s {what}" if len(apart) == 1 else f"the {what} of {_ranks_text(apart)}"
        lines.append(f"{who} differ from {_ranks_text(majority)}{at_step} (first differing tensor: "
                     f"{first_difference(apart[0], majority[0])})")
    if c.outcome == "no_majority":
        c.repairs, c.self_apart = [], False
    elif c.repairs:
        c.outcome = "apart"
    c.text = "; ".join(lines)
    if kinds_differ:
        c.by_design = True
        name = torch.zeros(_KIND_NAME_BYTES, dtype=torch.uint8)
        encoded = kind.encode()[:_KIND_NAME_BYTES - 1]
        name[:len(encoded)] = torch.tensor(list(encoded), dtype=torch.uint8)
        names = [torch.empty_like(name, device=device) for _ in range(world)]
        wait(dist.all_gather(names, name.to(device), async_op=True))
        sides = []
        firsts = []
        for groups in kinds.values():
            ranks = sorted(r for g in groups.values() for r in g)
            fp = majority_of(groups)
            firsts.append(groups[fp][0] if fp is not None else ranks[0])
            nodes = sorted({rows[r][4] for r in ranks})
            text = bytes(names[ranks[0]].cpu().tolist()).split(b"\0")[0].decode(errors="replace")
            sides.append(f"{_ranks_text(ranks)} ({'node' if len(nodes) == 1 else 'nodes'} {rank_list(nodes)}: {text})")
        c.by_design_text = (" and ".join(sides) + f" hold different {what}{at_step} while each kind agrees within "
                            f"itself (first differing tensor: {first_difference(firsts[0], firsts[1])}): hardware of "
                            "different kinds may round differently; ddprun compares each kind within itself and "
                            "repairs nothing between them")
    return c


class ReplicasDiffer(RuntimeError):
    """The ranks' replicas differ and no majority says which is right (2 of
    4 apart, 1 of 2), or their models differ: every rank raises it alike,
    the attempt ends, and a restart (ddprun --max-restarts) resumes from the
    script's checkpoint."""

    def __init__(self, text, step, agreed_step):
        super().__init__(text)
        self.step = step
        self.agreed_step = agreed_step


ReplicasDiffer.__module__ = "ddprun"  # as the package exports it
