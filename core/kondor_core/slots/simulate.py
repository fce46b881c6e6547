"""`kondor simulate`: place requests on a machine's slots in order, as the startd would.

For each request, in order, the first slot (in slot-number order) that takes it
wins: an Unclaimed static slot, or a partitionable slot, where the job's
Requirements (MY = the job, TARGET = the slot) and the slot's START (MY = the
slot, TARGET = the job) both evaluate to TRUE with classad2 and the job fits.
A static slot becomes Claimed/Busy; a partitionable slot carves a dynamic slot,
Claimed/Busy. A request that no slot takes gets a reason naming, slot by slot,
why not.

An unqualified attribute is looked up in MY and then in TARGET, as HTCondor's
matchmaking does (`kondor_core.classads.match_scope`), so a pasted job
`Requirements = OpSys == "LINUX" && Memory > 1024` means the slot's OpSys and Memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import classad2

from kondor_core.api.job import ExecutionJobSpec
from kondor_core.api.machine import Machine
from kondor_core.classads import literal, match_scope, parse_expr
from kondor_core.slots.ads import DEFAULT_START, AdRenderer, SlotAd
from kondor_core.slots.carve import (
    PartitionableSlot,
    Refusal,
    Slot,
    StaticSlot,
    carve,
    claim,
    initial_slots,
)
from kondor_core.slots.layout import Layout, attribute_name, layout

if TYPE_CHECKING:
    from kondor_core.config.effective import EffectivePolicy


@dataclass(frozen=True)
class Placement:
    """Where a request went: a slot name (slot1_1@node-a), or None and why nothing took it."""

    request: str
    slot: str | None
    reason: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The placement as `kondor simulate --output json` prints it."""
        if self.slot is not None:
            return {"request": self.request, "slot": self.slot}
        return {"request": self.request, "slot": None, "reason": self.reason}


@dataclass(frozen=True)
class Simulation:
    """The machine's slots after the requests were placed, and where each request went."""

    layout: Layout
    state: tuple[Slot, ...]
    ads: tuple[SlotAd, ...] = field(repr=False)
    placements: list[Placement]

    @property
    def slots(self) -> list[dict[str, Any]]:
        """The slot ads as JSON objects, in condor_status order (slot1, slot1_1, ..., slot2)."""
        return [ad.attributes for ad in self.ads]

    def to_json(self) -> dict[str, Any]:
        """The `kondor simulate --output json` object."""
        return {"slots": self.slots, "placements": [p.as_dict() for p in self.placements]}

    def classad_text(self) -> list[str]:
        """Each slot ad as ClassAd text, in the `attr = value` form condor_status -long prints."""
        return [ad.to_classad().printOld().rstrip("\n") for ad in self.ads]

    def classads(self) -> str:
        """Every slot ad as ClassAd text, one blank line between ads."""
        return "\n\n".join(self.classad_text()) + "\n"


def job_ad(spec: ExecutionJobSpec, name: str) -> Any:
    """The job ClassAd of an ExecutionJob: condor_submit's Request*/Require*/Requirements/Rank
    names, memory in MiB and disk in KiB, plus the spec's extra attributes."""
    values: dict[str, Any] = {
        "MyType": "Job",
        "TargetType": "Machine",
        "GlobalJobId": name,
        "RequestCpus": spec.request_cpus,
        "RequestMemory": spec.request_memory_mib,
        "RequestDisk": spec.request_disk_kib,
        "RequestGPUs": spec.request_gpus,
        "JobPrio": spec.priority,
    }
    for resource, amount in spec.request_resources.items():
        values[f"Request{attribute_name(resource)}"] = (
            int(amount) if amount == int(amount) else amount
        )
    if spec.owner is not None:
        values["Owner"] = spec.owner
    expressions = {
        "RequireGPUs": spec.require_gpus,
        "Requirements": spec.requirements,
        "Rank": spec.rank,
    }
    for attribute, text in expressions.items():
        if text is not None:
            values[attribute] = parse_expr(text, field=attribute)
    for attribute, text in spec.attributes.items():
        values[attribute] = parse_expr(text, field=f"attributes.{attribute}")
    if "Requirements" not in values:
        values["Requirements"] = True
    if "Rank" not in values:
        values["Rank"] = 0.0
    return classad2.ClassAd(values)


def simulate(
    machine: Machine, policy: EffectivePolicy, requests: Sequence[tuple[str, Any]]
) -> Simulation:
    """Lay out `machine` under `policy`, then place each (name, job ad) in order."""
    result = layout(machine, policy)
    state = list(initial_slots(result))
    start = parse_expr(policy.expressions.get("START", DEFAULT_START), field="START")
    # Slot ClassAds for evaluating START and the job's Requirements: built when first
    # needed and rebuilt only for the slot a placement changed.
    ads: dict[int, Any] = {}
    renderer = AdRenderer(result)
    placements: list[Placement] = []
    for name, request in requests:
        reasons: list[str] = []
        placed: Placement | None = None
        for index, slot in enumerate(state):
            if isinstance(slot, StaticSlot) and slot.claim is not None:
                reasons.append(f"{slot.name} is Claimed")
                continue
            if index not in ads:
                total = len(state) + sum(
                    len(s.children) for s in state if isinstance(s, PartitionableSlot)
                )
                ads[index] = renderer.render([slot], total)[0].to_classad()
            slot_ad = ads[index]
            why = _policy_refusal(slot.name, request, slot_ad, start)
            if why is not None:
                reasons.append(why)
                continue
            outcome: Any
            if isinstance(slot, PartitionableSlot):
                outcome = carve(slot, request, request=name)
                if isinstance(outcome, Refusal):
                    reasons.append(outcome.reason)
                    continue
                state[index], child = outcome
                slot_name = f"{child.name}@{machine.name}"
            else:
                outcome = claim(slot, request, request=name)
                if isinstance(outcome, Refusal):
                    reasons.append(outcome.reason)
                    continue
                state[index] = outcome
                slot_name = f"{slot.name}@{machine.name}"
            del ads[index]
            placed = Placement(name, slot_name)
            break
        if placed is None:
            detail = "; ".join(reasons) if reasons else "the machine has no slots"
            placed = Placement(name, None, f"no slot takes {name}: {detail}")
        placements.append(placed)
    final = tuple(state)
    return Simulation(result, final, tuple(renderer.render(final)), placements)


def _policy_refusal(slot: str, request: Any, slot_ad: Any, start: Any) -> str | None:
    requirements = request.get("Requirements")
    if requirements is not None:
        value = (
            requirements.eval(match_scope(request, slot_ad), slot_ad)
            if isinstance(requirements, classad2.ExprTree)
            else requirements
        )
        if value is not True:
            return f"{slot}: the job's Requirements are {_shown(value)} for this slot"
    value = start.eval(match_scope(slot_ad, request), request)
    if value is not True:
        return f"{slot}: START is {_shown(value)} for this job"
    return None


def _shown(value: Any) -> str:
    if value is classad2.Value.Undefined:
        return "UNDEFINED"
    if value is classad2.Value.Error:
        return "ERROR"
    try:
        return literal(value)
    except TypeError:
        return str(value)
