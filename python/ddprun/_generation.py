"""What this interpreter is to ddprun's heals, and the store of one heal
generation: a worker of the round's first generation or a replacement (its
environment says), its heartbeat slot mapped once, the agent's c10d store
connected once, and each generation's prefix of it, whose waits give up
when a newer generation is named. heal.py builds on these."""
import datetime
import os
import time

import torch.distributed as dist

from . import _contract
from ._slot import Slot



class _Process:
    """What this interpreter was started as: a worker of the round's first
    generation, or a replacement joining generation `generation`."""

    def __init__(self):
        self.heals = os.environ.get(_contract.HEALS) == "1"
        self.generation = int(os.environ.get(_contract.HEAL_GENERATION, "0") or 0) if self.heals else 0
        self.joining = self.heals and self.generation > 0
        self.taking_state = False  # a replacement's Healer exchanges the state: its collectives are the heal's
        # The heartbeat slot, mapped once for the process (None: no heals).
        self.slot = Slot.from_env() if self.heals else None
        self.base_store = None  # the agent's c10d store, connected once
        self.store = None  # the current generation's
        # A replacement beats from its start until its Healer has the state
        # (building the model, loading data): the others wait for it.
        self.joining_beats = None
        if self.joining and self.slot is not None:
            self.joining_beats = self.slot.waiting()
            self.joining_beats.__enter__()


_process = _Process()


def joining():
    """True in a replacement until its Healer has the state: collectives of
    the script's own before the Healer would wait for peers inside a heal."""
    return _process.joining


def _timeout():
    seconds = float(os.environ.get(_contract.TIMEOUT_S, "0") or 0)
    return datetime.timedelta(seconds=seconds if seconds > 0 else 1800)


# How long a rank that voted "connect" still waits for a peer's address
# once the agent named a newer generation (the peer died after its vote).
# A live peer's comes within moments: all of them voted already, and what
# is left is a write to the store (on a machine loaded far past its cores,
# a second or two).
GIVE_UP_AFTER_S = 10.0


class _GenerationStore(dist.Store):
    """The store of one heal generation: the agent's c10d store, under a
    prefix no other generation or round uses. Its waits give up as soon as
    the agent names a newer generation (the peer they wait for died while
    this one connected): they check the key, then sleep on the slot's
    generation word (a futex) for at most 5 ms, and so on."""

    _POLL_S = 0.005

    def __init__(self, generation, slot):
        super().__init__()
        if _process.base_store is None:
            _process.base_store = dist.TCPStore(os.environ[_contract.MASTER_ADDR], int(os.environ[_contract.MASTER_PORT]),
                                                is_master=False, timeout=_timeout())
        prefix = f"/ddprun/heal/round_{os.environ.get(_contract.ROUND, '0')}/generation_{generation}"
        self._store = dist.PrefixStore(prefix, _process.base_store)
        self._generation = generation
        self._slot = slot
        self._timeout = _timeout()
        self._committed = False  # the vote said "connect"
        self._superseded_at = None  # when a wait past "connect" saw a newer generation

    # connect_vote.h's vote, its words from channel/heal_vote.h: all the
    # generation's ranks connect, or none does.
    _GIVE_UP = _contract.VOTE_GIVE_UP_AMOUNT
    _COUNT = _contract.VOTE_COUNT_KEY
    _VERDICT = _contract.VOTE_VERDICT_KEY

    def _superseded(self):
        return self._slot is not None and self._slot.generation() > self._generation

    def vote_to_connect(self, size):
        """True when every rank of the generation connects; False when a
        rank gave it up first (a newer generation began before all had
        come). A rank that gives up after publishing its address would
        leave its peers inside Gloo's C++ set-up, which nothing in Python
        can end, until the group's timeout: so 1. arriving adds 1 to a
        counter, and the arrival that brings it to `size` decides
        "connect"; 2. a rank whose generation is superseded adds _GIVE_UP,
        and the first to do so decides ("connect" if all had arrived before
        it, else "give up"); 3. the others wait for that verdict. Past
        "connect" the store's waits give up only on a key still missing
        GIVE_UP_AFTER_S after a newer generation began (its peer died after
        its vote); a newer generation otherwise fails the first collective."""
        if self._store.add(self._COUNT, 1) == size:
            return self._decide(True)
        gave_up = False
        deadline = time.monotonic() + self._timeout.total_seconds()
        while True:
            if not gave_up and self._superseded():
                gave_up = True
                after = self._store.add(self._COUNT, self._GIVE_UP)
                if after < 2 * self._GIVE_UP:
                    return self._decide(after - self._GIVE_UP >= size)
            if self._present([self._VERDICT]):
                connect = self._store.get(self._VERDICT).decode() == _contract.VOTE_CONNECT
                self._committed = connect
                return connect
            if time.monotonic() > deadline:
                raise RuntimeError(f"ddprun: heal generation {self._generation}: timed out waiting for its ranks "
                                   "to come")
            self._pause()

    def _decide(self, connect):
        self._store.set(self._VERDICT, _contract.VOTE_CONNECT if connect else _contract.VOTE_GIVE_UP)
        self._committed = connect
        return connect

    def _still_current(self):
        if not self._superseded():
            return
        if not self._committed:
            raise RuntimeError(f"ddprun: heal generation {self._slot.generation()} began while generation "
                               f"{self._generation} connected (a peer failed meanwhile)")
        # Every rank voted "connect", so every rank comes, unless one died
        # after its vote (the newer generation is for its death): its key
        # never comes. A live peer's comes within moments; so once the
        # generation is superseded, a key still missing GIVE_UP_AFTER_S
        # later is a dead peer's, and every rank waiting for it gives up.
        now = time.monotonic()
        if self._superseded_at is None:
            self._superseded_at = now
        elif now - self._superseded_at > GIVE_UP_AFTER_S:
            raise RuntimeError(f"ddprun: heal generation {self._slot.generation()} began while generation "
                               f"{self._generation} connected, and a peer's address was still missing "
                               f"{GIVE_UP_AFTER_S:g} s later (it died after its vote)")

    def wait(self, keys, timeout=None):
        # Before "connect", the generation first: keys a peer set before it
        # died are present, but a generation the agent has gone past never
        # completes. Past it, the keys first: every rank connects, and a
        # present key is a peer that goes on, however late this one reads.
        deadline = time.monotonic() + (timeout or self._timeout).total_seconds()
        while True:
            if self._committed:
                if self._present(keys):
                    return
                self._still_current()
            else:
                self._still_current()
                if self._present(keys):
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(f"ddprun: heal generation {self._generation}: timed out waiting for {keys}")
            self._pause()

    def _pause(self):
        """At most _POLL_S, on the slot's generation word (a newer one wakes it)."""
        if self._slot is not None:
            self._slot.wait_generation(self._generation, self._POLL_S)
        else:
            time.sleep(self._POLL_S)

    # A value no key holds: compare_set with it never sets (the key is absent
    # and the expectation not empty, or the value differs) and returns the
    # expectation only for an absent key. (PyTorch 1.x's Store has no check.)
    _ABSENT = "\0ddprun: absent"

    def _present(self, keys):
        return all(self._store.compare_set(k, self._ABSENT, self._ABSENT + "!") != self._ABSENT.encode()
                   for k in keys)

    def get(self, key):
        self.wait([key])
        return self._store.get(key)

    def set(self, key, value):
        self._store.set(key, value)

    def add(self, key, amount):
        self._still_current()  # PyTorch 1.x's start-up barrier polls add(key, 0)
        return self._store.add(key, amount)

    def compare_set(self, key, expected, desired):
        return self._store.compare_set(key, expected, desired)

    def check(self, keys):
        return self._present(keys)

    def delete_key(self, key):
        return self._store.delete_key(key)

    def num_keys(self):
        return self._store.num_keys()

    def set_timeout(self, timeout):
        self._timeout = timeout
