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
    _check_step(machine, now, slot_facts, slot_events, job_ads)
    orders = _machine_orders(machine, events)
    cycle = _Cycle(policy, machine, facts, slot_facts or {}, now, orders)
    pending_events: dict[str, list[Event]] = {k: list(v) for k, v in (slot_events or {}).items()}
    cycle.step_slots(orders.broadcast, pending_events, job_ads or {})
    cycle.slots = [s for s in cycle.slots if not s.deleted]
    resume = cycle.settle_drain(orders.resume)
    new_machine = MachineState(
        slots=tuple(cycle.slots),
        draining=cycle.draining,
        resume_on_completion=resume,
        drain_start=cycle.drain_start,
        shutting_down=orders.shutting_down,
        last_step=now,
        next_dynamic=cycle.next_dynamic,
    )
    return MachineStep(machine=new_machine, actions=cycle.actions, transitions=cycle.transitions)


def _check_step(
    machine: MachineState,
    now: float,
    slot_facts: Mapping[str, Any] | None,
    slot_events: Mapping[str, Any] | None,
    job_ads: Mapping[str, Any] | None,
) -> None:
    """Refuse time going backwards, and an event, fact or job ad for a slot the machine lacks."""
    if machine.last_step is not None and now < machine.last_step:
        raise EngineError(
            f"time went backwards: now={now} is before the machine's last step at "
            f"{machine.last_step}; steps must come in time order"
        )
    known = {s.name for s in machine.slots}
    for name in [*(slot_events or {}), *(slot_facts or {}), *(job_ads or {})]:
        if name not in known:
            raise EngineError(
                f"an event, fact or job ad names slot {name!r}, which this machine does not "
                f"have (slots: {', '.join(sorted(known)) or 'none'})"
            )


@dataclass
class _Orders:
    """The machine-wide orders after this step's events: the drain and the shutdown, and
    the events every slot is sent."""

    draining: DrainMode | None
    resume: bool
    drain_start: str | None
    shutting_down: ShutdownMode | None
    broadcast: list[Event]


def _machine_orders(machine: MachineState, events: Sequence[Event]) -> _Orders:
    """Apply the machine-wide events (condor_drain, its cancel, condor_off, condor_vacate)."""
    orders = _Orders(
        machine.draining,
        machine.resume_on_completion,
        machine.drain_start,
        machine.shutting_down,
        [],
    )
    for event in events:
        if isinstance(event, Drain):
            if orders.draining is None:
                orders.draining, orders.resume = event.mode, event.resume_on_completion
                # condor_drain takes -start with -graceful only.
                orders.drain_start = event.start if event.mode is DrainMode.GRACEFUL else None
                orders.broadcast.append(event)
        elif isinstance(event, CancelDrain):
            orders.draining, orders.resume, orders.drain_start = None, False, None
        elif isinstance(event, Shutdown):
            orders.shutting_down = event.mode
            orders.broadcast.append(event)
        elif isinstance(event, Vacate):
            orders.broadcast.append(event)
        else:
            raise EngineError(
                f"{type(event).__name__} is addressed to one slot; pass it in slot_events"
            )
    return orders


class _Cycle:
    """One polling cycle of the machine in progress: its slots as stepped so far, the
    machine context each slot sees, and the actions and transitions made."""

    def __init__(  # noqa: PLR0917 - step_machine's own arguments, passed on
        self,
        policy: StartdPolicy,
        machine: MachineState,
        facts: Mapping[str, Fact],
        slot_facts: Mapping[str, Mapping[str, Fact]],
        now: float,
        orders: _Orders,
    ) -> None:
        self.policy = policy
        self.facts = facts
        self.slot_facts = slot_facts
        self.now = now
        self.draining = orders.draining
        self.drain_start = orders.drain_start
        self.slots = list(machine.slots)
        self.next_dynamic = dict(machine.next_dynamic)
        self.actions: list[Action] = []
        self.transitions: list[Transition] = []
        self._shared = FilteredFacts(policy, facts)
        self.finishing = drain_finishing(self.slots, self.draining)
        self.accepting = (
            self.drain_start if self.draining is not None and not self.finishing else None
        )
        self.coordinated = self._coordinated_retirement()
        # Without STARTD_SLOT_ATTRS every slot sees the same machine context: built once
        # (again if draining changes, when a drain is finalized).
        self._same_context: MachineContext | None = None

    def facts_for(self, slot: SlotState) -> Mapping[str, Fact]:
        """The slot's facts: the machine's, with its own (or its parent's) over them."""
        own = self.slot_facts.get(slot.name) or (
            self.slot_facts.get(slot.parent) if slot.parent is not None else None
        )
        return FilteredFacts(self.policy, {**self.facts, **own}) if own else self._shared

    def _coordinated_retirement(self) -> float | None:
        """condor_drain -graceful: the longest retirement any running job has left."""
        if self.draining is not DrainMode.GRACEFUL:
            return None
        base = MachineContext(draining=self.draining)
        return max(
            (
                retirement_remaining(self.policy, s, self.facts_for(s), self.now, machine=base)
                for s in self.slots
                if s.claim_active() and not (s.claim and s.claim.accepted_while_draining)
            ),
            default=0.0,
        )

    def context(self, drain_complete: bool = False) -> MachineContext:
        """What a slot sees of the machine: the drain, and STARTD_SLOT_ATTRS' cross-slot ads."""
        finishing = self.finishing and self.drain_start is not None
        if not self.policy.startd_slot_attrs and not drain_complete:
            same = self._same_context
            if same is None or same.draining is not self.draining:
                same = self._same_context = MachineContext(
                    draining=self.draining,
                    drain_retirement_remaining=self.coordinated,
                    drain_start=self.accepting,
                    drain_finishing=finishing,
                )
            return same
        return MachineContext(
            draining=self.draining,
            drain_retirement_remaining=self.coordinated,
            drain_complete=drain_complete,
            drain_start=self.accepting if self.draining is not None else None,
            drain_finishing=finishing,
            slot_attrs=cross_slot_attrs(self.policy, self.slots, self.facts_for),
        )

    def step_slots(
        self,
        broadcast: Sequence[Event],
        pending_events: dict[str, list[Event]],
        job_ads: Mapping[str, Any],
    ) -> None:
        """Every slot in order, each seeing the others as they are at that moment; a dynamic
        slot carved on the way is inserted after its parent and stepped in turn."""
        index = 0
        while index < len(self.slots):
            slot = self.slots[index]
            own_events = [*broadcast, *pending_events.pop(slot.name, [])]
            if slot.kind is SlotKind.PARTITIONABLE:
                own_events = self._carve_matches(index, own_events, pending_events)
            self._step(index, job_ads.get(slot.name), own_events, self.context())
            index += 1

    def _carve_matches(
        self, index: int, own_events: list[Event], pending_events: dict[str, list[Event]]
    ) -> list[Event]:
        """A partitionable slot's matches (and their activations) go to dynamic slots carved
        for them; the events left are the partitionable slot's own."""
        slot = self.slots[index]
        matches = _matches_with_activation(own_events)
        paired = [id(activation) for _, activation in matches if activation is not None]
        own_events = [e for e in own_events if not isinstance(e, Match) and id(e) not in paired]
        for match, activation in matches:
            carved = _carve(
                self.policy,
                pslot=slot,
                match=match,
                facts=self.facts_for(slot),
                now=self.now,
                machine=self.context(),
                next_dynamic=self.next_dynamic,
            )
            if isinstance(carved, Action):
                self.actions.append(carved)
                continue
            dslot, action = carved
            self.actions.append(action)
            self.slots.insert(index + 1, dslot)
            pending_events.setdefault(dslot.name, []).append(match)
            if activation is not None:
                pending_events[dslot.name].append(activation)
        return own_events

    def _step(
        self, index: int, job_ad: Any, events: Sequence[Event], machine: MachineContext
    ) -> None:
        """Step slot `index` with `events` in the machine context `machine`."""
        slot = self.slots[index]
        new_slot, slot_actions = step(
            self.policy, slot, self.facts_for(slot), job_ad, self.now, events, machine=machine
        )
        self.slots[index] = new_slot
        self.actions.extend(slot_actions)
        self.transitions.extend(new_slot.transitions)

    def settle_drain(self, resume: bool) -> bool:
        """Once every slot is drained: Retiring to Idle (33), then Owner if the drain was to
        resume on completion (34). Returns whether the machine still resumes on completion."""
        slots = self.slots
        if self.draining is None or not slots or any(s.state is not State.DRAINED for s in slots):
            return resume
        for i, slot in enumerate(slots):
            if slot.activity is Activity.RETIRING:
                self._step(i, None, (), self.context(True))
        if resume:
            self.draining, resume, self.drain_start = None, False, None
            for i in range(len(slots)):
                self._step(i, None, (), self.context())
        return resume


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
