"""One node's condor_startd: its slots, their policy states and claims, and the ads it publishes.

The agent, `kondor simulate` and `kondor simulate --timeline` all drive this one model, so
what the simulation shows is what the agent does. It joins two pure parts:

- the carve model (`kondor_core.slots`): the layout's slots and what each partitionable slot
  has left, from which the slot ads' resources are rendered;
- the policy engine (`kondor_core.policy`): every slot's state, activity and claim, advanced
  one polling cycle at a time ("condor_startd Policy Configuration": POLLING_INTERVAL).

A match sent to the startd is checked against both before the engine sees it — a
partitionable slot must have the resources left, a static slot must hold what the job
requests ("Dynamic Provisioning") — and START is re-evaluated by the engine: the startd
has the last word. When the engine carves a dynamic slot the carve model carves the same
one (same number), and when the engine releases it the resources go back.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kondor_core.api import Machine, ResolvedPolicy
from kondor_core.api.executionpoint import ExecutionPointStatus
from kondor_core.config import EffectivePolicy, policy_hash
from kondor_core.cron import CronAd, CronJob, CronSettings
from kondor_core.lazy import cached
from kondor_core.policy import (
    Action,
    ActionKind,
    ActivateClaim,
    EngineError,
    Event,
    MachineContext,
    MachineState,
    Match,
    SlotKind,
    SlotState,
    StartdPolicy,
    State,
    Transition,
    advertised,
    defaults,
    retirement_remaining,
    step_machine,
)
from kondor_core.policy import Activity as EngineActivity
from kondor_core.policy.machine import cross_slot_attrs, drain_start_now
from kondor_core.slots import (
    AdRenderer,
    Layout,
    PartitionableSlot,
    Refusal,
    Slot,
    SlotAd,
    carve,
    claim,
    initial_slots,
    layout,
    release,
)
from kondor_core.startd.cron_ads import merge_into_slots

Fact = Any

#: Attributes the engine computes for every slot: a layout's value of one is not a fact.
_ENGINE_NAMES = frozenset(
    name.lower() for name in (*defaults.PUBLISHED_ATTRIBUTES, "Start", "Rank", "Requirements")
)
#: The clock as the startd publishes it with every ad; it changes on every cycle, so it is
#: not a state change (the agent treats it as volatile).
CLOCK_ATTRIBUTES = ("MyCurrentTime", "ClockMin", "ClockDay")
#: States a restarted agent takes back from its published status: they hold no claim, which
#: an agent without its job cannot restore ("Machine States").
_RESTORABLE = (State.OWNER, State.UNCLAIMED)


@dataclass(frozen=True)
class Startd:
    """One node's slots under one policy: the carve model, the engine's states, the renderer."""

    machine: Machine
    policy: EffectivePolicy = field(repr=False)
    layout: Layout = field(repr=False)
    engine: StartdPolicy = field(repr=False, compare=False)
    renderer: AdRenderer = field(repr=False, compare=False)
    #: The carve model's slots (resources left, dynamic slots), by layout order.
    slots: tuple[Slot, ...] = field(repr=False)
    #: The engine's slots (state, activity, claim), by the published slot names.
    state: MachineState = field(repr=False)
    #: The SlotPolicy this startd runs, as the operator resolved it (name, generation, hash).
    applied: ResolvedPolicy = field(default_factory=lambda: ResolvedPolicy(name=""))
    #: `policy_hash` of the policy as compiled here (the operator's may differ across versions).
    compiled_hash: str = ""
    #: The startd cron jobs' latest ads by full name, merged into every slot ad.
    cron_ads: Mapping[str, CronAd] = field(default_factory=dict, compare=False)
    #: Mips, KFlops (and LastBenchmark) from the last benchmarks: on the machine and every slot.
    benchmarks: Mapping[str, Fact] = field(default_factory=dict, compare=False)

    @property
    def warnings(self) -> tuple[str, ...]:
        """The policy compiler's warnings (knobs Kondor does not implement, ...)."""
        return tuple(self.policy.warnings)

    @property
    def cron_jobs(self) -> tuple[CronJob, ...]:
        """The policy's startd cron jobs (what the agent's cron runner runs)."""
        return self.policy.cron_jobs

    @property
    def cron_settings(self) -> CronSettings:
        return self.policy.cron

    @property
    def polling_interval(self) -> float:
        """POLLING_INTERVAL of the policy (5 s unless it sets one)."""
        return self.engine.polling_interval

    @property
    def update_interval(self) -> float:
        """UPDATE_INTERVAL of the policy (300 s unless it sets one)."""
        return self.engine.update_interval

    @cached
    def layout_ads(self) -> tuple[SlotAd, ...]:
        """The carve model's slot ads, in condor_status order, with the benchmarks' Mips and
        KFlops and the startd cron ads merged in: the layout's side of every published ad."""
        ads = self.renderer.render(self.slots)
        if self.benchmarks:
            measured = {k: v for k, v in self.benchmarks.items() if k != "LastBenchmark"}
            ads = [SlotAd(ad.name, {**ad.attributes, **measured}, ad.expressions) for ad in ads]
        if self.cron_ads:
            ads = merge_into_slots(ads, self.cron_ads, [job.name for job in self.cron_jobs])
        return tuple(ads)

    @cached
    def facts(self) -> Mapping[str, Mapping[str, Fact]]:
        """Per slot name, the layout's literal attributes (Cpus, Memory, OpSys, ...) that the
        engine evaluates the policy with; the engine's own attributes are left to it."""
        return {
            ad.name: {
                key: value
                for key, value in ad.attributes.items()
                if isinstance(value, bool | int | float | str)
                and key not in ad.expressions
                and key.lower() not in _ENGINE_NAMES
            }
            for ad in self.layout_ads
        }


@dataclass(frozen=True)
class Tick:
    """What one polling cycle produced: the new startd, the actions to carry out (including
    refused matches) and the state/activity transitions."""

    startd: Startd
    actions: list[Action]
    transitions: list[Transition]


def start(
    machine: Machine,
    policy: EffectivePolicy,
    now: float,
    *,
    applied: ResolvedPolicy | None = None,
    previous: Startd | None = None,
    published: ExecutionPointStatus | None = None,
) -> Startd:
    """Carve `machine` under the compiled `policy`: a fresh startd, or one re-carved after a
    change.

    Slots that keep their name keep their state and entered times from `previous` (a
    reconfigured startd) or from `published` (a restarted agent reading its own status) when
    they hold no claim; the others start in Owner/Idle as a freshly spawned startd does. A
    reconfigured startd keeps its drain: its slots go on draining.
    Raises `kondor_core.slots.LayoutError` for a policy that does not fit the machine.
    """
    now = whole_seconds(now)
    result = layout(machine, policy)
    renderer = AdRenderer(result)
    slots = initial_slots(result)
    names = [ad.name for ad in renderer.render(slots)]
    pslots = [f"{s.name}@{machine.name}" for s in slots if isinstance(s, PartitionableSlot)]
    fresh = MachineState.start(names, now=now, partitionable=pslots)
    compiled_hash = policy_hash(policy)
    applied = applied or ResolvedPolicy(name="")
    if not applied.hash:
        applied = applied.model_copy(update={"hash": compiled_hash})
    kept = _kept_states(previous, published, applied)
    restored = tuple(
        kept[slot.name] if slot.name in kept and kept[slot.name].kind == slot.kind else slot
        for slot in fresh.slots
    )
    state = dataclasses.replace(fresh, slots=restored)
    if previous is not None:
        # A drain goes on through a reconfig: the new slots drain as the old ones did.
        old = previous.state
        state = dataclasses.replace(
            state,
            draining=old.draining,
            resume_on_completion=old.resume_on_completion,
            drain_start=old.drain_start,
        )
    return Startd(
        machine=machine,
        policy=policy,
        layout=result,
        engine=StartdPolicy.from_effective(policy),
        renderer=renderer,
        slots=slots,
        state=state,
        applied=applied,
        compiled_hash=compiled_hash,
        cron_ads=previous.cron_ads if previous is not None else {},
        benchmarks=previous.benchmarks if previous is not None else {},
    )


def with_machine(startd: Startd, machine: Machine) -> Startd | None:
    """`startd` advertising `machine`'s new facts (KeyboardIdle, labels, OpSys, ...) with its
    slots, claims and states kept, as a startd keeps its claims when its ads change; None
    when the change alters the layout (resources, slots), which needs a re-carve."""
    result = layout(machine, startd.policy)
    before, after = startd.layout, result
    if after.slots != before.slots or dataclasses.replace(
        after.machine, facts={}
    ) != dataclasses.replace(before.machine, facts={}):
        return None
    return dataclasses.replace(startd, machine=machine, layout=result, renderer=AdRenderer(result))


def with_cron_ads(startd: Startd, ads: Mapping[str, CronAd]) -> Startd:
    """`startd` whose slot ads merge `ads` (the cron runner's latest)."""
    if ads == startd.cron_ads:
        return startd
    return dataclasses.replace(startd, cron_ads=dict(ads))


def with_benchmarks(startd: Startd, measured: Mapping[str, Fact]) -> Startd:
    """`startd` advertising the benchmarks' results (Mips, KFlops, LastBenchmark)."""
    return dataclasses.replace(startd, benchmarks=dict(measured))


def tick(
    startd: Startd,
    live: Mapping[str, Fact],
    now: float,
    *,
    slot_events: Mapping[str, Sequence[Event]] | None = None,
    machine_events: Sequence[Event] = (),
) -> Tick:
    """One polling cycle at `now` with the node's live facts (LoadAvg, KeyboardIdle, ...),
    events for some slots (Match, ActivateClaim, JobExited, BenchmarksDone, ...) and
    machine-wide events (Drain, Shutdown, Vacate)."""
    now = whole_seconds(now)
    events, refused = _fitting(startd, slot_events or {})
    facts = startd.facts
    result = step_machine(
        startd.engine,
        startd.state,
        dict(live),
        now,
        machine_events,
        slot_facts={s.name: facts[s.name] for s in startd.state.slots if s.name in facts},
        slot_events=events,
    )
    ads = {
        event.claim_id: event.job_ad
        for sent in events.values()
        for event in sent
        if isinstance(event, Match)
    }
    slots = _follow(startd, result.actions, ads)
    new = dataclasses.replace(startd, state=result.machine, slots=slots)
    if slots == startd.slots:  # the same layout: its ads need not be rendered again
        for name in ("layout_ads", "facts"):
            if name in startd.__dict__:
                new.__dict__[name] = startd.__dict__[name]
    return Tick(new, [*refused, *result.actions], result.transitions)


def _fitting(
    startd: Startd, slot_events: Mapping[str, Sequence[Event]]
) -> tuple[dict[str, list[Event]], list[Action]]:
    """The events with every Match the slot's resources cannot hold taken out (with the
    ActivateClaim right after it), and a REFUSE_CLAIM action for each."""
    model = {f"{slot.name}@{startd.machine.name}": slot for slot in startd.slots}
    out: dict[str, list[Event]] = {}
    refused: list[Action] = []
    for name, sent in slot_events.items():
        kept: list[Event] = []
        dropped = False
        for event in sent:
            if dropped and isinstance(event, ActivateClaim):
                dropped = False
                continue
            dropped = False
            slot = model.get(name)
            if isinstance(event, Match) and slot is not None:
                outcome = _fit(slot, event)
                if isinstance(outcome, Refusal):
                    refused.append(
                        Action(
                            kind=ActionKind.REFUSE_CLAIM,
                            slot=name,
                            reason=f"match refused: {outcome.reason}",
                            job_id=event.job_id or None,
                            claim_id=event.claim_id,
                        )
                    )
                    dropped = True
                    continue
                if isinstance(outcome, PartitionableSlot):
                    model[name] = outcome  # the next match sees what this one takes
            kept.append(event)
        out[name] = kept
    return out, refused


def _fit(slot: Slot, match: Match) -> Slot | Refusal:
    if isinstance(slot, PartitionableSlot):
        outcome = carve(slot, match.job_ad, request=match.job_id or match.claim_id)
        return outcome if isinstance(outcome, Refusal) else outcome[0]
    checked = claim(dataclasses.replace(slot, claim=None), match.job_ad)
    return checked if isinstance(checked, Refusal) else slot


def _follow(startd: Startd, actions: Sequence[Action], ads: Mapping[str, Any]) -> tuple[Slot, ...]:
    """The carve model after the engine's carves and releases of dynamic slots."""
    machine = startd.machine.name
    slots = list(startd.slots)
    index = {f"{slot.name}@{machine}": i for i, slot in enumerate(slots)}
    for action in actions:
        dynamic = action.dynamic_slot
        if dynamic is None:
            continue
        if action.kind is ActionKind.CARVE_DYNAMIC_SLOT:
            i = index[action.slot]
            pslot = slots[i]
            assert isinstance(pslot, PartitionableSlot)
            job = ads[action.claim_id or ""]
            number = int(dynamic.split("@", 1)[0].rsplit("_", 1)[1])
            outcome = carve(pslot, job, request=action.job_id, child_id=number)
            if isinstance(outcome, Refusal):  # checked in `_fitting`; the engine agreed
                raise EngineError(f"{action.slot}: {outcome.reason}")
            slots[i] = outcome[0]
        elif action.kind is ActionKind.RELEASE_DYNAMIC_SLOT:
            short = dynamic.split("@", 1)[0]
            for i, slot in enumerate(slots):
                if isinstance(slot, PartitionableSlot) and any(
                    child.name == short for child in slot.children
                ):
                    slots[i] = release(slot, short)
    return tuple(slots)


def published_ads(
    startd: Startd,
    live: Mapping[str, Fact],
    now: float,
    usage: Mapping[str, Mapping[str, Fact]] | None = None,
) -> list[SlotAd]:
    """Every slot ad as published at `now`: the layout's ad and the live facts, with what the
    engine advertises laid over them (State, Activity, Entered*, CurrentRank, RemoteOwner,
    JobId, and Requirements FALSE while the slot takes no match), the clock (MyCurrentTime,
    ClockMin, ClockDay), STARTD_SLOT_ATTRS' `slot<N>_<attr>`, and a partitionable slot's
    ChildState/ChildActivity from its dynamic slots' states. `usage`, per slot name, is what
    the slot's job uses as the starter reports it (the slot's own CondorLoadAvg, the load of
    its job's cgroup, and RemoteUserCpu, ImageSize, MemoryUsage, ...), laid over last."""
    now = whole_seconds(now)
    engine = startd.engine
    states = {slot.name: slot for slot in startd.state.slots}
    facts = startd.facts

    def facts_for(slot: SlotState) -> Mapping[str, Fact]:
        return {**live, **facts.get(slot.name, facts.get(slot.parent or "", {}))}

    drain_start = drain_start_now(startd.state)
    context = MachineContext(
        draining=startd.state.draining,
        drain_start=drain_start,
        slot_attrs=cross_slot_attrs(engine, startd.state.slots, facts_for),
    )
    clock_min, clock_day = engine.clock(now)
    clock = {"MyCurrentTime": now, "ClockMin": clock_min, "ClockDay": clock_day}
    out: list[SlotAd] = []
    for ad in startd.layout_ads:
        attributes = {**live, **ad.attributes, **context.slot_attrs, **clock}
        expressions = set(ad.expressions)
        slot = states.get(ad.name)
        if slot is not None:
            shown = advertised(engine, slot, facts_for(slot), now, machine=context)
            requirements = shown.pop("Requirements", None)
            attributes.update(shown)
            expressions -= set(shown)
            claimed = _claim_attributes(engine, slot, facts_for(slot), now, context)
            attributes.update(claimed)
            expressions -= set(claimed)
            if isinstance(claimed.get("RetirementTimeRemaining"), str):
                expressions.add("RetirementTimeRemaining")
            if requirements is False:
                attributes["Requirements"] = False
                expressions.discard("Requirements")
            elif drain_start is not None and "Start" in ad.attributes:
                # condor_drain -start: the negotiator sees the START the slot goes by.
                attributes["Start"] = drain_start
                expressions.add("Start")
            if slot.kind is SlotKind.PARTITIONABLE:
                children = [states.get(name) for name in attributes.get("ChildName", [])]
                attributes["ChildState"] = [str(c.state) if c else "Claimed" for c in children]
                attributes["ChildActivity"] = [str(c.activity) if c else "Busy" for c in children]
        if usage and ad.name in usage:
            attributes.update(usage[ad.name])
            expressions -= set(usage[ad.name])
        out.append(SlotAd(ad.name, attributes, frozenset(expressions)))
    return out


#: The accounting name of a nice-user job (HTCondor's nice-user.<owner>); the negotiator's
#: accountant keys the job's usage and priority by it.
NICE_USER_PREFIX = "nice-user."
#: RetirementTimeRemaining published for a claim whose retirement has no end (an int, as
#: the startd's).
_NO_END = 2**31 - 1


def _claim_attributes(
    engine: StartdPolicy,
    slot: SlotState,
    facts: Mapping[str, Fact],
    now: float,
    context: MachineContext,
) -> dict[str, Any]:
    """What the negotiator's preemption rules read of a claimed slot: RetirementTimeRemaining
    (seconds of retirement the running job has left, "MAXJOBRETIREMENTTIME"), RemoteUser,
    and the AccountingGroup of a nice-user job.

    While the job runs, RetirementTimeRemaining is an expression of MyCurrentTime counting
    down to the retirement's end, so that the negotiator reads it right between two updates
    of the ad (a suspension, which stops the count, is a state change and updates it)."""
    claim = slot.claim
    if claim is None:
        return {}
    out: dict[str, Any] = {}
    left = retirement_remaining(engine, slot, facts, now, machine=context)
    if math.isinf(left):
        out["RetirementTimeRemaining"] = _NO_END
    elif left > 0 and claim.active and claim.suspended_since is None:
        end = math.ceil(now + left)
        out["RetirementTimeRemaining"] = (
            f"ifThenElse(MyCurrentTime < {end}, {end} - MyCurrentTime, 0)"
        )
    else:
        out["RetirementTimeRemaining"] = max(0, math.ceil(left))
    if claim.owner:
        out["RemoteUser"] = claim.owner
    nice = claim.job_ad.get("NiceUser") if claim.job_ad is not None else None
    if nice is True and claim.owner:
        out["AccountingGroup"] = f"{NICE_USER_PREFIX}{claim.owner}"
    return out


def machine_ad(startd: Startd, live: Mapping[str, Fact]) -> dict[str, Any]:
    """The machine ad: what every slot ad shares (Machine, Total*, Detected*, the facts), the
    benchmarks' results and the live facts."""
    ad: dict[str, Any] = {
        key: value for key, value in startd.renderer.base.items() if key not in ("Start", "Rank")
    }
    ad["MyType"] = "Machine"
    ad.update(startd.benchmarks)
    ad.update(live)
    return ad


def _kept_states(
    previous: Startd | None,
    published: ExecutionPointStatus | None,
    applied_ref: ResolvedPolicy,
) -> dict[str, SlotState]:
    """Slot states to carry over: a restarted agent's own published ones if they were carved
    under the same policy (name, generation and hash), or those of the startd being re-carved."""
    kept: dict[str, SlotState] = {}
    if published is not None and published.policy == applied_ref:
        for shown in published.slots:
            try:
                state, activity = State(shown.state), EngineActivity(shown.activity)
            except ValueError:
                continue
            if state not in _RESTORABLE or shown.type == "Dynamic":
                continue
            kind = SlotKind.PARTITIONABLE if shown.type == "Partitionable" else SlotKind.STATIC
            entered_state = shown.entered_current_state or 0
            kept[shown.name] = SlotState(
                name=shown.name,
                slot_id=int(shown.ad.get("SlotID", 1)),
                kind=kind,
                state=state,
                activity=activity,
                entered_state=entered_state,
                entered_activity=shown.entered_current_activity or entered_state,
            )
    if previous is not None:
        for slot in previous.state.slots:
            if slot.claim is None and slot.state in _RESTORABLE and slot.kind != SlotKind.DYNAMIC:
                kept[slot.name] = dataclasses.replace(slot, transitions=())
    return kept


def whole_seconds(now: float) -> int:
    """Slot ads carry whole epoch seconds, as the startd's do."""
    return math.floor(now)
