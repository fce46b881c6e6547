"""`kondor simulate`: where would these jobs land on this machine under this policy?

Answered by the same parts that run a live pool: the node's startd (`kondor_core.startd`,
what the agent drives) publishes its slot ads after its first polling cycle, and the
negotiator (`kondor_core.negotiation.negotiator`, what the operator runs) matches the
requests to them, best JobPrio first and then in the order given; each match goes to the
startd, which re-checks START and the resources and carves a dynamic slot out of a
partitionable one. Cycles repeat while the startd refuses a match the negotiator made, as
the negotiator's next cycle would retry it elsewhere. A request no slot takes gets the
reasons, slot by slot. Time is simulated from 0 (the timeline's clock); there are no live facts.

An unqualified attribute is looked up in MY and then in TARGET, as HTCondor's
matchmaking does (`kondor_core.classads.match_scope`), so a pasted job
`Requirements = OpSys == "LINUX" && Memory > 1024` means the slot's OpSys and Memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kondor_core import startd
from kondor_core.api.machine import Machine
from kondor_core.config import EffectivePolicy
from kondor_core.negotiation.negotiator import IdleJob, negotiate, slot_offer
from kondor_core.policy import ActionKind, ActivateClaim, Event, Match
from kondor_core.slots import Layout, Slot, SlotAd


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
    """The machine's startd after the requests were placed, its ads, and where each went."""

    startd: startd.Startd = field(repr=False)
    ads: tuple[SlotAd, ...] = field(repr=False)
    placements: list[Placement]

    @property
    def layout(self) -> Layout:
        return self.startd.layout

    @property
    def state(self) -> tuple[Slot, ...]:
        """The carve model's slots (what each partitionable slot has left)."""
        return self.startd.slots

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


def simulate(
    machine: Machine,
    policy: EffectivePolicy,
    requests: Sequence[tuple[str, Any]],
    *,
    now: float = 0,
) -> Simulation:
    """Start `machine`'s startd under `policy`, then place each (name, job ad).

    Raises `kondor_core.slots.LayoutError` for a policy that does not fit the machine."""
    node = startd.tick(startd.start(machine, policy, now), {}, now).startd
    placed: dict[str, str] = {}
    reasons: dict[str, str] = {}
    waiting = [IdleJob(name, ad, order) for order, (name, ad) in enumerate(requests)]
    while waiting:
        offers = [
            slot_offer(ad.attributes, ad.expressions, now)
            for ad in startd.published_ads(node, {}, now)
        ]
        cycle = negotiate(waiting, offers)
        reasons.update(cycle.rejections)
        if not cycle.matches:
            break
        events: dict[str, list[Event]] = {}
        for matched in cycle.matches:
            job = next(j for j in waiting if j.id == matched.job)
            events.setdefault(matched.slot, []).extend(
                [Match(matched.job, job.ad, job_id=matched.job), ActivateClaim()]
            )
        result = startd.tick(node, {}, now, slot_events=events)
        node = result.startd
        refused = [a for a in result.actions if a.kind is ActionKind.REFUSE_CLAIM and a.job_id]
        for action in refused:
            reasons[str(action.job_id)] = f"{action.slot}: {action.reason}"
        before = len(placed)
        for slot in node.state.slots:
            if slot.claim is not None:
                placed.setdefault(slot.claim.job_id, slot.name)
        waiting = [job for job in waiting if job.id not in placed]
        if not refused or len(placed) == before:  # the next cycle would see what this one saw
            break
    placements = [
        Placement(name, placed[name])
        if name in placed
        else Placement(name, None, f"no slot takes {name}: {reasons.get(name, 'no slot')}")
        for name, _ in requests
    ]
    return Simulation(node, tuple(startd.published_ads(node, {}, now)), placements)
