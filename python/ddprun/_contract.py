"""The agent <-> worker contract, read from its one definition.

C++'s channel/ headers define it: heartbeat_layout.h (the heartbeat slot's
offsets, its pulse) and env_names.h (the environment variables ddprun
sets). This package ships both (links to them in the source tree) and
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


def _defined(name, pattern, needed):
    found = dict(re.findall(pattern, _read(name)))
    missing = [n for n in needed if n not in found]
    if missing:
        raise ImportError(f"ddprun: {os.path.join(_HERE, name)} does not define {', '.join(missing)}")
    return found


# The heartbeat slot: its `inline constexpr size_t kName = N;` constants.
WORDS = {k: int(v) for k, v in _defined(
    "heartbeat_layout.h", r"inline constexpr size_t (k\w+) = (\d+);",
    ("kHeartbeatSlotBytes", "kBeatsOffset", "kHealReadyOffset", "kHealGenerationOffset", "kNoHealComingOffset",
     "kPlacementOffset", "kPlacementWordCount", "kInStepOffset", "kReplicaOffset", "kReplicaSeqOffset",
     "kReplicaAgreedStepOffset", "kReplicaChecksOffset", "kReplicaVerdictsOffset", "kReplicaVerdictOffset",
     "kReplicaVerdictStepOffset", "kReplicaSelfOffset", "kReplicaEveryOffset", "kReplicaTextOffset",
     "kReplicaTextBytes", "kWaitPulseMs")).items()}

# How often a worker waiting for its peers beats, in seconds.
PULSE_S = WORDS["kWaitPulseMs"] / 1000


def _enum(header, name, needed):
    """An `enum class NAME : uint32_t { kA = 0, ... }` of a header: {kA: 0, ...}."""
    m = re.search(r"enum class %s : uint32_t \{(.*?)\};" % name, _read(header), re.S)
    values = dict((k, int(v)) for k, v in re.findall(r"\b(k\w+) = (\d+)", m.group(1))) if m else {}
    missing = [n for n in needed if n not in values]
    if missing:
        raise ImportError(f"ddprun: {os.path.join(_HERE, header)}'s {name} does not define {', '.join(missing)}")
    return values


# What the newest comparison of the replicas found (the slot's replicas block).
REPLICA_VERDICT = _enum("heartbeat_layout.h", "ReplicaVerdict", ("kRepaired", "kNoMajority", "kByDesign"))
REPLICA_SELF = _enum("heartbeat_layout.h", "ReplicaSelf", ("kAgrees", "kApart", "kReplace"))

# The environment variables: `inline constexpr const char* kName = "NAME";`.
_ENV = _defined("env_names.h", r'inline constexpr const char\* (k\w+) = "([^"]+)";',
                ("kRank", "kWorldSize", "kGroupRank", "kMasterAddr", "kMasterPort", "kHeartbeatFile",
                 "kHeartbeatSlot", "kHeals", "kHealGeneration", "kTimeoutS", "kRound", "kVerifyEvery",
                 "kHardwareKind"))
RANK = _ENV["kRank"]
WORLD_SIZE = _ENV["kWorldSize"]
GROUP_RANK = _ENV["kGroupRank"]
MASTER_ADDR = _ENV["kMasterAddr"]
MASTER_PORT = _ENV["kMasterPort"]
HEARTBEAT_FILE = _ENV["kHeartbeatFile"]
HEARTBEAT_SLOT = _ENV["kHeartbeatSlot"]
HEALS = _ENV["kHeals"]
HEAL_GENERATION = _ENV["kHealGeneration"]
TIMEOUT_S = _ENV["kTimeoutS"]
ROUND = _ENV["kRound"]
VERIFY_EVERY = _ENV["kVerifyEvery"]
HARDWARE_KIND = _ENV["kHardwareKind"]
