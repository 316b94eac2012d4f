"""The agent <-> worker contract, read from its one definition.

C++'s channel/ headers define it: heartbeat_layout.h (the heartbeat slot's
offsets, its pulse), env_names.h (the environment variables ddprun sets)
and heal_vote.h (the words of a heal generation's connect vote). This
package ships them (links to them in the source tree) and
reads them here at import, so that no offset, period or variable name is
written twice; tests/unit/python/contract_test.py fails on a contract
literal written in the package instead.

No torch here.
"""
import os
import re

_HERE = os.path.dirname(os.path.abspath(__file__))


def _read(name):
    try:
        with open(os.path.join(_HERE, name), encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise ImportError(f"ddprun: cannot read the contract with the agent ({e}); "
                          f"the package ships {name} beside _contract.py") from e


def _require(found, needed, where):
    """found, once it holds every name of `needed` (else ImportError naming where they are missing)."""
    missing = [n for n in needed if n not in found]
    if missing:
        raise ImportError(f"ddprun: {where} does not define {', '.join(missing)}")
    return found


_LAYOUT = _read("heartbeat_layout.h")
_LAYOUT_PATH = os.path.join(_HERE, "heartbeat_layout.h")

# The heartbeat slot: its `inline constexpr size_t kName = N;` constants.
WORDS = _require({k: int(v) for k, v in re.findall(r"inline constexpr size_t (k\w+) = (\d+);", _LAYOUT)},
                 ("kHeartbeatSlotBytes", "kBeatsOffset", "kHealReadyOffset", "kHealGenerationOffset",
                  "kNoHealComingOffset", "kPlacementOffset", "kPlacementWordCount", "kInStepOffset", "kReplicaOffset",
                  "kReplicaSeqOffset", "kReplicaAgreedStepOffset", "kReplicaChecksOffset", "kReplicaVerdictsOffset",
                  "kReplicaVerdictOffset", "kReplicaVerdictStepOffset", "kReplicaSelfOffset", "kReplicaEveryOffset",
                  "kReplicaTextOffset", "kReplicaTextBytes", "kWaitPulseMs"), _LAYOUT_PATH)

# How often a worker waiting for its peers beats, in seconds.
PULSE_S = WORDS["kWaitPulseMs"] / 1000


def _enum(name, needed):
    """heartbeat_layout.h's `enum class NAME : uint32_t { kA = 0, ... }`: {kA: 0, ...}."""
    m = re.search(r"enum class %s : uint32_t \{(.*?)\};" % name, _LAYOUT, re.S)
    values = {k: int(v) for k, v in re.findall(r"\b(k\w+) = (\d+)", m.group(1))} if m else {}
    return _require(values, needed, f"{_LAYOUT_PATH}'s {name}")


# What the newest comparison of the replicas found (the slot's replicas block).
REPLICA_VERDICT = _enum("ReplicaVerdict", ("kRepaired", "kNoMajority", "kByDesign"))
REPLICA_SELF = _enum("ReplicaSelf", ("kAgrees", "kApart", "kReplace"))

def _strings(text):
    """A header's `inline constexpr const char* kName = "TEXT";` constants: {kName: TEXT}."""
    return dict(re.findall(r'inline constexpr const char\* (k\w+) = "([^"]+)";', text))


# The environment variables.
_ENV = _strings(_read("env_names.h"))


def _env(name):
    return _require(_ENV, (name,), os.path.join(_HERE, "env_names.h"))[name]


RANK = _env("kRank")
WORLD_SIZE = _env("kWorldSize")
GROUP_RANK = _env("kGroupRank")
MASTER_ADDR = _env("kMasterAddr")
MASTER_PORT = _env("kMasterPort")
HEARTBEAT_FILE = _env("kHeartbeatFile")
HEARTBEAT_SLOT = _env("kHeartbeatSlot")
HEALS = _env("kHeals")
HEAL_GENERATION = _env("kHealGeneration")
TIMEOUT_S = _env("kTimeoutS")
ROUND = _env("kRound")
VERIFY_EVERY = _env("kVerifyEvery")
HARDWARE_KIND = _env("kHardwareKind")

# The heal generation's connect vote (heal_vote.h): its keys, its verdict's
# words, and what a rank that gives up adds to the count.
_VOTE_PATH = os.path.join(_HERE, "heal_vote.h")
_VOTE_TEXT = _read("heal_vote.h")
_VOTE = _require(_strings(_VOTE_TEXT),
                 ("kVoteCountKey", "kVoteVerdictKey", "kVoteConnect", "kVoteGiveUp"), _VOTE_PATH)
VOTE_COUNT_KEY = _VOTE["kVoteCountKey"]
VOTE_VERDICT_KEY = _VOTE["kVoteVerdictKey"]
VOTE_CONNECT = _VOTE["kVoteConnect"]
VOTE_GIVE_UP = _VOTE["kVoteGiveUp"]
VOTE_GIVE_UP_AMOUNT = int(_require(dict(re.findall(r"inline constexpr int64_t (k\w+) = (\d+);", _VOTE_TEXT)),
                                   ("kVoteGiveUpAmount",), _VOTE_PATH)["kVoteGiveUpAmount"])
