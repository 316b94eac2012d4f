"""The worker's side of its heartbeat slot.

The layout's one definition is C++'s channel/heartbeat_layout.h: this
package ships a copy of that header (a link to it in the source tree) and
_contract.py reads its offsets from it at import, so the two cannot disagree.

The agent maps the same file. A worker that heals says so in its slot (the
heal-ready word), says when it is inside a step (the in-step word), and
sleeps on the heal-generation word, which the agent raises (then wakes every
sleeper with a futex) when it has started a replacement or the world
changed. While the worker waits for its peers a thread beats for it: waiting
is not hanging (the silent peer is the one that hangs).

No torch here: this file is plain ctypes over an mmap.
"""
import ctypes
import mmap
import os
import platform
import threading
import time

from . import _contract

_WORDS = _contract.WORDS  # the layout (heartbeat_layout.h, read by _contract.py)
SLOT_BYTES = _WORDS["kHeartbeatSlotBytes"]
_BEATS = _WORDS["kBeatsOffset"]
_HEAL_READY = _WORDS["kHealReadyOffset"]
_HEAL_GENERATION = _WORDS["kHealGenerationOffset"]
_NO_HEAL_COMING = _WORDS["kNoHealComingOffset"]
_PLACEMENT = _WORDS["kPlacementOffset"]  # generation, rank, world size, node rank, number of nodes
_PLACEMENT_WORDS = _WORDS["kPlacementWordCount"]
_IN_STEP = _WORDS["kInStepOffset"]
_REPLICAS = _WORDS["kReplicaOffset"]  # what the last comparison of the replicas found (a seqlock'd block)
_REPLICA_TEXT_BYTES = _WORDS["kReplicaTextBytes"]

_SYS_FUTEX = {"x86_64": 202, "aarch64": 98}.get(platform.machine())
_FUTEX_WAIT = 0  # not FUTEX_PRIVATE: the agent wakes us through its own mapping
_PULSE_S = _contract.PULSE_S  # how often a waiting worker beats


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class Slot:
    """One worker's slot of the agent's heartbeat file."""

    def __init__(self, path, slot):
        with open(path, "r+b") as f:
            self._map = mmap.mmap(f.fileno(), 0)
        base = int(slot) * SLOT_BYTES
        if base + SLOT_BYTES > len(self._map):
            raise ValueError(f"ddprun: heartbeat slot {slot} is past the end of {path}")

        def word(offset, kind=ctypes.c_uint32):
            return kind.from_buffer(self._map, base + offset)

        self._beats = word(_BEATS, ctypes.c_uint64)
        self._ready = word(_HEAL_READY)
        self._generation = word(_HEAL_GENERATION)
        self._no_heal = word(_NO_HEAL_COMING)
        self._placement = [word(_PLACEMENT + 4 * i) for i in range(_PLACEMENT_WORDS)]
        self._in_step = word(_IN_STEP)
        r = _REPLICAS
        self._replica_seq = word(r + _WORDS["kReplicaSeqOffset"], ctypes.c_uint64)
        self._replica_fields = [  # in ReplicaReport's order
            word(r + _WORDS["kReplicaAgreedStepOffset"], ctypes.c_int64),
            word(r + _WORDS["kReplicaChecksOffset"], ctypes.c_uint64),
            word(r + _WORDS["kReplicaVerdictsOffset"]),
            word(r + _WORDS["kReplicaVerdictOffset"]),
            word(r + _WORDS["kReplicaVerdictStepOffset"], ctypes.c_int64),
            word(r + _WORDS["kReplicaSelfOffset"]),
            word(r + _WORDS["kReplicaEveryOffset"]),
        ]
        self._replica_text = (ctypes.c_char * _REPLICA_TEXT_BYTES).from_buffer(
            self._map, base + r + _WORDS["kReplicaTextOffset"])
        self._libc = ctypes.CDLL(None, use_errno=True)  # CDLL: the GIL is let go while it sleeps
        self._waiting = 0
        self._lock = threading.Lock()
        self._pulse = None
        # When set and true, the pulse keeps quiet although a wait is open:
        # the wait is no longer for peers (see Healer._stale_wait).
        self.quiet_when = None

    @classmethod
    def from_env(cls):
        """The slot ddprun gave this process, or None (not under ddprun)."""
        path = os.environ.get(_contract.HEARTBEAT_FILE)
        slot = os.environ.get(_contract.HEARTBEAT_SLOT)
        if not path or slot is None:
            return None
        return cls(path, slot)

    def beat(self):
        self._beats.value += 1

    def set_heal_ready(self, ready):
        self._ready.value = 1 if ready else 0

    def set_in_step(self, in_step):
        self._in_step.value = 1 if in_step else 0

    def generation(self):
        return self._generation.value

    def report_replicas(self, agreed_step, checks, verdicts, verdict, verdict_step, self_, every, text):
        """What the last comparison of the replicas found, for the agent
        (heartbeat_layout.h's ReplicaReport): the sequence word odd while
        written, even after; the agent copies it only between two equal even
        values (this process is its one writer)."""
        seq = self._replica_seq.value
        self._replica_seq.value = seq + 1
        for field, value in zip(self._replica_fields, (agreed_step, checks, verdicts, verdict, verdict_step, self_,
                                                       every)):
            field.value = value
        encoded = text.encode(errors="replace")[:_REPLICA_TEXT_BYTES - 1]
        ctypes.memset(ctypes.addressof(self._replica_text), 0, _REPLICA_TEXT_BYTES)
        ctypes.memmove(ctypes.addressof(self._replica_text), encoded, len(encoded))
        self._replica_seq.value = seq + 2

    def no_heal_coming(self):
        return self._no_heal.value == 1

    def placement(self):
        """(generation, rank, world size): where the agent moved this worker
        when the round shrank or grew; generation 0 means never."""
        g, rank, world = (w.value for w in self._placement[:3])
        return g, rank, world

    def wait_generation(self, seen, timeout_s):
        """Sleeps until the generation differs from `seen`, the agent says no
        heal comes, or `timeout_s` passes; returns the generation then."""
        deadline = time.monotonic() + timeout_s
        addr = ctypes.addressof(self._generation)
        with self.waiting():
            while True:
                now = self.generation()
                if now != seen or self.no_heal_coming():
                    return now
                left = deadline - time.monotonic()
                if left <= 0 or _SYS_FUTEX is None:
                    return now
                # The agent stores the word, then wakes every sleeper on it;
                # if it changed before we sleep, FUTEX_WAIT returns at once.
                ts = _Timespec(int(left), int((left - int(left)) * 1e9))
                self._libc.syscall(ctypes.c_long(_SYS_FUTEX), ctypes.c_void_p(addr), ctypes.c_int(_FUTEX_WAIT),
                                   ctypes.c_uint32(seen), ctypes.byref(ts), None, ctypes.c_int(0))

    class _Waiting:
        def __init__(self, slot):
            self.slot = slot

        def __enter__(self):
            self.slot.add_waiting(+1)

        def __exit__(self, *exc):
            self.slot.add_waiting(-1)

    def waiting(self):
        """A context: while one is open, a thread beats for this worker."""
        return Slot._Waiting(self)

    def add_waiting(self, delta):
        """Opens (+1) or closes (-1) a wait: the pulse beats while any is open."""
        with self._lock:
            self._waiting += delta
            self.beat()
            if self._pulse is None:
                self._pulse = threading.Thread(target=self._pulse_loop, name="ddprun-heal-pulse", daemon=True)
                self._pulse.start()

    def _pulse_loop(self):
        tick = threading.Event()  # never set: a timer, not a synchronisation
        while True:
            tick.wait(_PULSE_S)
            if self._waiting > 0 and not (self.quiet_when and self.quiet_when()):
                self.beat()
