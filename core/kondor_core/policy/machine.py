"""The whole execution point: every slot stepped in order, with the machine-wide parts.

What needs more than one slot lives here: draining (slots stay Drained/Retiring
until every slot is drained, graceful retirement is coordinated to the longest
one), shutdown, carving a dynamic slot out of a partitionable one on a match,
releasing it when its claim ends, and the cross-slot attributes of
STARTD_SLOT_ATTRS (`slot1_State`, ...) that the reference's suspendable /
non-suspendable slot pair reads. Slots are evaluated in order, each seeing the
others as they are at that moment, as the condor_startd walks its resources.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kondor_core.policy.evaluation import FilteredFacts, StartdPolicy
from kondor_core.policy.model import (
    Action,
    ActionKind,
    ActivateClaim,
    Activity,
    CancelDrain,
    Drain,
    DrainMode,
    EngineError,
    Event,
    Fact,
    MachineContext,
    Match,
    Shutdown,
    ShutdownMode,
    SlotKind,
    SlotState,
    State,
    Transition,
    Vacate,
)
from kondor_core.policy.transitions import accepts, retirement_remaining, slot_prefix, step

#: Machine-wide events; every other event is addressed to one slot.
MACHINE_EVENTS = (Drain, CancelDrain, Shutdown)


@dataclass(frozen=True)
class MachineState:
    """Every slot of one execution point, and what is happening to the machine as a whole."""

    slots: tuple[SlotState, ...]
    draining: DrainMode | None = None
    #: -resume-on-completion: leave Drained for Owner once every slot is drained.
    resume_on_completion: bool = False
    #: -start: the START expression while draining gracefully (condor_drain -start).
    drain_start: str | None = None
    shutting_down: ShutdownMode | None = None
    last_step: float | None = None
    #: Next dynamic slot number per partitionable slot name (slot1_1, slot1_2, ...).
    next_dynamic: Mapping[str, int] = field(default_factory=dict)

    def slot(self, name: str) -> SlotState:
        for slot in self.slots:
            if slot.name == name:
                return slot
        known = ", ".join(s.name for s in self.slots) or "none"
        raise EngineError(f"no slot named {name!r} on this machine (slots: {known})")

    @classmethod
    def start(
        cls, names: Sequence[str], *, now: float = 0.0, partitionable: Sequence[str] = ()
    ) -> MachineState:
        """A freshly started startd: every slot in Owner/Idle ("When the startd is first
        spawned, the machine it represents enters the Owner state")."""
        slots = []
        for index, name in enumerate(names, start=1):
            kind = SlotKind.PARTITIONABLE if name in partitionable else SlotKind.STATIC
            slots.append(
                SlotState(
                    name=name,
                    slot_id=_slot_number(name) or index,
                    kind=kind,
                    entered_state=now,
                    entered_activity=now,
                )
            )
        return cls(slots=tuple(slots))


@dataclass(frozen=True)
class MachineStep:
    """What `step_machine` returns."""

    machine: MachineState
    actions: list[Action]
    transitions: list[Transition]


def step_machine(
    policy: StartdPolicy,
    machine: MachineState,
    facts: Mapping[str, Fact],
    now: float,
    events: Sequence[Event] = (),
    *,
    slot_facts: Mapping[str, Mapping[str, Fact]] | None = None,
    slot_events: Mapping[str, Sequence[Event]] | None = None,
    job_ads: Mapping[str, Any] | None = None,
) -> MachineStep:
    """One polling cycle of the whole machine at time `now`.

    `facts` apply to every slot, `slot_facts[name]` add to or override them for one slot.
    `events` are machine-wide (Drain, CancelDrain, Shutdown, and Vacate for every slot);
    `slot_events[name]` go to one slot. A Match sent to a partitionable slot carves a
    dynamic slot (`CARVE_DYNAMIC_SLOT`) that takes the claim, and the ActivateClaim right
    after that Match; a dynamic slot whose claim ends is released (`RELEASE_DYNAMIC_SLOT`)
    and leaves `machine.slots`.
    """
    if machine.last_step is not None and now < machine.last_step:
        raise EngineError(
            f"time went backwards: now={now} is before the machine's last step at "
            f"{machine.last_step}; steps must come in time order"
        )
    slot_facts = slot_facts or {}
    pending_events: dict[str, list[Event]] = {k: list(v) for k, v in (slot_events or {}).items()}
    job_ads = job_ads or {}
    known = {s.name for s in machine.slots}
    for name in [*pending_events, *slot_facts, *job_ads]:
        if name not in known:
            raise EngineError(
                f"an event, fact or job ad names slot {name!r}, which this machine does not "
                f"have (slots: {', '.join(sorted(known)) or 'none'})"
            )

    draining = machine.draining
    resume = machine.resume_on_completion
    drain_start = machine.drain_start
    shutting_down = machine.shutting_down
    broadcast: list[Event] = []
    for event in events:
        if isinstance(event, Drain):
            if draining is None:
                draining, resume = event.mode, event.resume_on_completion
                # condor_drain takes -start with -graceful only.
                drain_start = event.start if event.mode is DrainMode.GRACEFUL else None
                broadcast.append(event)
        elif isinstance(event, CancelDrain):
            draining, resume, drain_start = None, False, None
        elif isinstance(event, Shutdown):
            shutting_down = event.mode
            broadcast.append(event)
        elif isinstance(event, Vacate):
            broadcast.append(event)
        else:
            raise EngineError(
                f"{type(event).__name__} is addressed to one slot; pass it in slot_events"
            )

    slots = list(machine.slots)
    next_dynamic = dict(machine.next_dynamic)
    actions: list[Action] = []
    transitions: list[Transition] = []

    shared = FilteredFacts(policy, facts)

    def facts_for(slot: SlotState) -> Mapping[str, Fact]:
        own = slot_facts.get(slot.name) or (
            slot_facts.get(slot.parent) if slot.parent is not None else None
        )
        return FilteredFacts(policy, {**facts, **own}) if own else shared

    finishing = drain_finishing(slots, draining)
    accepting = drain_start if draining is not None and not finishing else None
    coordinated = None
    if draining is DrainMode.GRACEFUL:
        base = MachineContext(draining=draining)
        coordinated = max(
            (
                retirement_remaining(policy, s, facts_for(s), now, machine=base)
                for s in slots
                if s.claim_active() and not (s.claim and s.claim.accepted_while_draining)
            ),
            default=0.0,
        )

    # Without STARTD_SLOT_ATTRS every slot sees the same machine context: build it once
    # (again if draining changes below, when a drain is finalized).
    same_context: list[MachineContext] = []

    def context(drain_complete: bool = False) -> MachineContext:
        if not policy.startd_slot_attrs and not drain_complete:
            if not same_context or same_context[0].draining is not draining:
                same_context[:] = [
                    MachineContext(
                        draining=draining,
                        drain_retirement_remaining=coordinated,
                        drain_start=accepting,
                        drain_finishing=finishing and drain_start is not None,
                    )
                ]
            return same_context[0]
        return MachineContext(
            draining=draining,
            drain_retirement_remaining=coordinated,
            drain_complete=drain_complete,
            drain_start=accepting if draining is not None else None,
            drain_finishing=finishing and drain_start is not None,
            slot_attrs=cross_slot_attrs(policy, slots, facts_for),
        )

    index = 0
    while index < len(slots):
        slot = slots[index]
        own_events = [*broadcast, *pending_events.pop(slot.name, [])]
        if slot.kind is SlotKind.PARTITIONABLE:
            matches = _matches_with_activation(own_events)
            paired = [id(activation) for _, activation in matches if activation is not None]
            own_events = [e for e in own_events if not isinstance(e, Match) and id(e) not in paired]
            for match, activation in matches:
                carved = _carve(
                    policy,
                    pslot=slot,
                    match=match,
                    facts=facts_for(slot),
                    now=now,
                    machine=context(),
                    next_dynamic=next_dynamic,
                )
                if isinstance(carved, Action):
                    actions.append(carved)
                    continue
                dslot, action = carved
                actions.append(action)
                slots.insert(index + 1, dslot)
                pending_events.setdefault(dslot.name, []).append(match)
                if activation is not None:
                    pending_events[dslot.name].append(activation)
        new_slot, slot_actions = step(
            policy,
            slot,
            facts_for(slot),
            job_ads.get(slot.name),
            now,
            own_events,
            machine=context(),
        )
        slots[index] = new_slot
        actions.extend(slot_actions)
        transitions.extend(new_slot.transitions)
        index += 1

    slots = [s for s in slots if not s.deleted]

    if draining is not None and slots and all(s.state is State.DRAINED for s in slots):
        # Transition 33 once every slot is drained; then finalize if asked (34).
        for i, slot in enumerate(slots):
            if slot.activity is Activity.RETIRING:
                new_slot, slot_actions = step(
                    policy, slot, facts_for(slot), None, now, (), machine=context(True)
                )
                slots[i] = new_slot
                actions.extend(slot_actions)
                transitions.extend(new_slot.transitions)
        if resume:
            draining, resume, drain_start = None, False, None
            for i, slot in enumerate(slots):
                new_slot, slot_actions = step(
                    policy, slot, facts_for(slot), None, now, (), machine=context()
                )
                slots[i] = new_slot
                actions.extend(slot_actions)
                transitions.extend(new_slot.transitions)

    new_machine = MachineState(
        slots=tuple(slots),
        draining=draining,
        resume_on_completion=resume,
        drain_start=drain_start,
        shutting_down=shutting_down,
        last_step=now,
        next_dynamic=next_dynamic,
    )
    return MachineStep(machine=new_machine, actions=actions, transitions=transitions)


def drain_finishing(slots: Sequence[SlotState], draining: DrainMode | None) -> bool:
    """condor_drain -start: jobs accepted while draining run until no job that ran when the
    drain began is left; from then on they are evicted and nothing more is accepted."""
    return draining is not None and not any(
        s.claim is not None and not s.claim.accepted_while_draining for s in slots
    )


def drain_start_now(machine: MachineState) -> str | None:
    """The START expression the machine's slots go by now: the drain's -start while it
    accepts jobs, else None (the policy's START)."""
    if machine.drain_start is None or drain_finishing(machine.slots, machine.draining):
        return None
    return machine.drain_start


def _matches_with_activation(
    events: Sequence[Event],
) -> list[tuple[Match, ActivateClaim | None]]:
    """The matches sent to a partitionable slot, each with the ActivateClaim right after it.

    A partitionable slot is never claimed itself ("Dynamic Provisioning"): the claim and
    its activation go to the dynamic slot carved for the match, in the same cycle.
    """
    out: list[tuple[Match, ActivateClaim | None]] = []
    for event in events:
        if isinstance(event, Match):
            out.append((event, None))
        elif isinstance(event, ActivateClaim) and out and out[-1][1] is None:
            out[-1] = (out[-1][0], event)
    return out


def _carve(
    policy: StartdPolicy,
    *,
    pslot: SlotState,
    match: Match,
    facts: Mapping[str, Fact],
    now: float,
    machine: MachineContext,
    next_dynamic: dict[str, int],
) -> tuple[SlotState, Action] | Action:
    """A dynamic slot for `match` out of partitionable slot `pslot`, or the refusal."""
    refusal = None
    if pslot.state not in (State.UNCLAIMED, State.OWNER):
        refusal = f"the partitionable slot is {pslot.state}"
    elif (machine.draining is not None and machine.drain_start is None) or (
        pslot.shutting_down is not None
    ):
        refusal = "the startd is draining or shutting down"
    else:
        ok, why = accepts(policy, pslot, facts, match.job_ad, now, machine=machine)
        if not ok:
            refusal = why
    if refusal is not None:
        return Action(
            kind=ActionKind.REFUSE_CLAIM,
            slot=pslot.name,
            reason=f"match refused: {refusal}",
            job_id=match.job_id or None,
            claim_id=match.claim_id,
        )
    number = next_dynamic.get(pslot.name, 1)
    next_dynamic[pslot.name] = number + 1
    prefix, _, host = pslot.name.partition("@")
    name = f"{prefix}_{number}@{host}" if host else f"{prefix}_{number}"
    dslot = SlotState(
        name=name,
        slot_id=pslot.slot_id,
        kind=SlotKind.DYNAMIC,
        parent=pslot.name,
        state=State.UNCLAIMED,
        activity=Activity.IDLE,
        entered_state=now,
        entered_activity=now,
        last_benchmark=pslot.last_benchmark,
    )
    action = Action(
        kind=ActionKind.CARVE_DYNAMIC_SLOT,
        slot=pslot.name,
        reason=f"match with {match.job_id or match.claim_id}",
        job_id=match.job_id or None,
        claim_id=match.claim_id,
        dynamic_slot=name,
        parent=pslot.name,
    )
    return dataclasses.replace(dslot), action


def cross_slot_attrs(
    policy: StartdPolicy,
    slots: Sequence[SlotState],
    facts_for: Callable[[SlotState], Mapping[str, Fact]],
) -> dict[str, Fact]:
    """STARTD_SLOT_ATTRS: `slot<N>_<Attr>` for every slot, in every slot's ad.

    The engine's own attributes (State, Activity, EnteredCurrentState,
    EnteredCurrentActivity, CurrentRank) and any fact of the slot can be shared."""
    if not policy.startd_slot_attrs:
        return {}
    out: dict[str, Fact] = {}
    for slot in slots:
        if slot.deleted:
            continue
        prefix = slot_prefix(slot.name)
        values: dict[str, Fact] = {
            "state": str(slot.state),
            "activity": str(slot.activity),
            "enteredcurrentstate": slot.entered_state,
            "enteredcurrentactivity": slot.entered_activity,
            "currentrank": slot.claim.rank if slot.claim is not None else 0.0,
        }
        facts: Mapping[str, Fact] | None = None
        for attr in policy.startd_slot_attrs:
            value = values.get(attr.lower())
            if value is None:
                facts = facts if facts is not None else facts_for(slot)
                value = facts.get(attr)
            if value is not None:
                out[f"{prefix}_{attr}"] = value
    return out


def _slot_number(name: str) -> int | None:
    prefix = slot_prefix(name)
    digits = prefix[4:] if prefix.lower().startswith("slot") else ""
    return int(digits) if digits.isdigit() else None
