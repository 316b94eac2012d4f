"""The Healer's comparisons of the replicas (ddprun --verify-every; the
comparison itself is _verify.py's): at the start of a step once every N
optimizer steps the ranks compare their parameters, and after every heal
their whole state (and the parameters again at the next step). A rank apart
from a majority takes the majority's parameters, buffers and optimizer
state (a repair, as a replacement takes a survivor's); one apart a second
time is repaired again and asks ddprun to replace its process; no majority
raises ReplicasDiffer on every rank. What was found goes to the agent
through the heartbeat slot (console, event log, `ddprun status`).

A mixin of the Healer (heal.py), which has the heal and the state transfer.
"""
import os
import sys
import time

import torch
import torch.distributed as dist

from ._state import _first_line, _set_rng_state
from ._verify import ReplicasDiffer, compare, hardware_kind, rank_list
from . import _contract

# heartbeat_layout.h's ReplicaVerdict and ReplicaSelf.
_REPAIRED, _NO_MAJORITY, _BY_DESIGN = (_contract.REPLICA_VERDICT[k] for k in ("kRepaired", "kNoMajority", "kByDesign"))
_AGREES, _APART, _REPLACE = (_contract.REPLICA_SELF[k] for k in ("kAgrees", "kApart", "kReplace"))


def _verify_every_from_env():
    text = os.environ.get(_contract.VERIFY_EVERY, "0") or "0"
    try:
        every = int(text)
    except ValueError:
        every = -1
    if every < 0:
        raise ValueError(f"ddprun: {_contract.VERIFY_EVERY}={text!r} is not a number of steps >= 0 (ddprun --verify-every)")
    return every


class _ReplicaChecks:
    """Healer's comparisons of the replicas (a mixin: the Healer has the
    state transfer, _send_state)."""

    def _init_replicas(self, verify_every):
        self.verify_every = _verify_every_from_env() if verify_every is None else int(verify_every)
        if self.verify_every < 0:
            raise ValueError(f"ddprun.Healer: verify_every must be >= 0 (0: never), not {verify_every}")
        self._verify_after = None  # the parameters are compared after the step past this one too (a heal's)
        self._last_verified = -1
        self._apart = 0  # the times this process was found apart
        self._told_by_design = False
        self._verdict = (0, 0, 0, -1, "")  # verdicts so far, the newest's kind, self, step, line
        self._rng_next_step = None  # the generators a heal brought, for the next step's start
        self._kind = None

    def _start_step(self):
        """A step's start: a heal named meanwhile first, then the generators
        a heal brought (the peers' at their step's start, whatever this
        process drew since: a framework's loaders), then a comparison due."""
        self._catch_up()
        while True:
            if self._rng_next_step is not None:
                _set_rng_state(self._rng_next_step)
                self._rng_next_step = None
            try:
                self._verify_if_due()
                return
            except Exception as e:
                if isinstance(e, ReplicasDiffer) or not self._failed_collective(e) or self._no_heal_coming():
                    raise
                why = _first_line(e)
            # A peer failed in the comparison: healed around, compared after
            # (outside the except block: see Healer.step).
            self._heal(why)

    def _verify_if_due(self):
        if self.verify_every <= 0 or self.steps == self._last_verified:
            return
        periodic = self.steps > 0 and self.steps % self.verify_every == 0
        after_heal = self._verify_after is not None and self.steps > self._verify_after
        if periodic or after_heal:
            self._verify_after = None
            self._verify(whole_state=False, with_buffers=False)

    def _verify_after_heal(self, sent):
        """Every rank of a heal comes here alike (the survivors in _heal, a
        replacement in _join): the state that went across is compared whole
        (with the buffers when it went to every rank), and the parameters
        again after the next step."""
        if self.verify_every <= 0:
            return
        self._verify(whole_state=True, with_buffers=sent)
        self._verify_after = self.steps

    def _replica_tensors(self, whole_state, with_buffers):
        out = list(self.module.named_parameters())
        if with_buffers:
            out += list(self.module.named_buffers())
        if not whole_state:
            return out
        names = {id(p): n for n, p in self.module.named_parameters()}
        params = [p for group in self.optimizer.param_groups for p in group["params"]]
        sd = self.optimizer.state_dict()
        for index in sorted(sd["state"]):
            param = names.get(id(params[index]), f"parameter {index}") if index < len(params) else f"parameter {index}"
            for key in sorted(sd["state"][index]):
                value = sd["state"][index][key]
                if not isinstance(value, torch.Tensor):
                    value = torch.tensor(float(value), dtype=torch.float64)
                out.append((f"optimizer state of {param} ({key})", value))
        out.append(("optimizer learning rates",
                    torch.tensor([float(g.get("lr", 0.0)) for g in self.optimizer.param_groups], dtype=torch.float64)))
        return out

    def _collective_device(self):
        if dist.get_backend() == "nccl":
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")

    def _verify(self, whole_state, with_buffers):
        began = time.monotonic()
        try:
            self._compare_and_act(whole_state, with_buffers)
        finally:
            self.report.verify_seconds += time.monotonic() - began

    def _compare_and_act(self, whole_state, with_buffers):
        if self._kind is None:
            first = next(self.module.parameters(), None)
            self._kind = hardware_kind(first.device if first is not None else torch.device("cpu"))
        what = "parameters" if not whole_state else "state" if with_buffers else "parameters and optimizer state"
        node = int(os.environ.get(_contract.GROUP_RANK, "0") or 0)
        found = compare(self._replica_tensors(whole_state, with_buffers), self.steps, what, self._kind, node,
                        self._collective_device(), self._wait_for)
        self.report.checks += 1
        if found.by_design and not self._told_by_design:
            self._told_by_design = True
            self._record_verdict(_BY_DESIGN, _AGREES, found.by_design_text)
        if found.outcome == "no_majority":
            self._stop_apart(found.text)
        if found.outcome == "apart":
            self._repair(found, node)
        self.report.verified_step = self._last_verified = self.steps
        self._publish_replicas()

    def _repair(self, found, node):
        """Each kind's ranks apart take the state of the lowest rank of its
        majority (its parameters, buffers and optimizer state: their loop's
        position and generators are their own); the majority keeps its own.
        Then the ranks compare again: they must agree now."""
        me = dist.get_rank()
        if found.self_apart:
            self._apart += 1
        replace = found.self_apart and self._apart >= 2
        action = ", ".join(
            f"{'rank' if len(apart) == 1 else 'ranks'} {rank_list(apart)} {'takes' if len(apart) == 1 else 'take'} "
            f"rank {source}'s state" for source, apart in found.repairs)
        text = f"{found.text}; repaired: {action}"
        if replace:
            text += f"; rank {me} was apart before, so ddprun replaces its process (it cannot be trusted)"
        heal_bytes = self.report.bytes
        for source, apart in found.repairs:
            self._send_state(source, receiving=me in apart, keep_own=True, whole=False)
        self.report.bytes = heal_bytes
        self.report.repairs += 1
        confirmed = compare(self._replica_tensors(True, False), self.steps, "parameters and optimizer state",
                            self._kind, node, self._collective_device(), self._wait_for)
        self.report.checks += 1
        if confirmed.outcome != "agree":
            self._stop_apart(confirmed.text + " right after a repair (the state a rank received does not hold there)")
        # Told once the ranks agree again: a rank to be replaced is killed
        # after the comparison, not in the middle of it.
        self._record_verdict(_REPAIRED, _REPLACE if replace else _APART if found.self_apart else _AGREES, text)

    def _stop_apart(self, found):
        agreed = self.report.verified_step
        text = (f"{found}; no majority to repair from: every rank stops, and a restart (--max-restarts) resumes from "
                "the script's newest checkpoint" + (f" (the replicas last agreed at step {agreed}: a checkpoint "
                                                    "written after it may hold a state apart)" if agreed >= 0 else ""))
        self._record_verdict(_NO_MAJORITY, _AGREES, text)
        if self._slot is not None:
            self._slot.set_heal_ready(False)  # not a failure to heal around
        raise ReplicasDiffer("ddprun: " + text, self.steps, agreed)

    def _record_verdict(self, verdict, self_, text):
        self._verdict = (self._verdict[0] + 1, verdict, self_, self.steps, text)
        self._publish_replicas()
        if self._slot is None and dist.get_rank() == 0:  # under ddprun its agent says it, once for the job
            print(f"ddprun: replicas: {text}", file=sys.stderr, flush=True)

    def _publish_replicas(self):
        verdicts, verdict, self_, step, text = self._verdict
        if self._slot is not None:
            self._slot.report_replicas(self.report.verified_step, self.report.checks, verdicts, verdict, step, self_,
                                       min(self.verify_every, 2**32 - 1), text)
