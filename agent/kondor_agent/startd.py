"""The agent's startd: the carved slots and the policy engine's state, advanced one tick at a time.

Pure: every function takes the machine, the policy, the facts and the time as arguments and
returns new values; the loop (`kondor_agent.loop`) does the I/O. It follows the reference's
"condor_startd Policy Configuration": every POLLING_INTERVAL each slot is evaluated
(`kondor_core.policy.step_machine`), and the slot ads carry the layout's attributes
(`kondor_core.slots`), the machine's facts and what the policy advertises.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kondor_core.api import Machine, ResolvedPolicy, SlotPolicySpec, Unit, format_quantity
from kondor_core.api.base import Condition
from kondor_core.api.executionpoint import ExecutionPointStatus, SlotStatus, SlotSummary
from kondor_core.config import compile_policy, policy_hash
from kondor_core.cron import CronAd, CronJob, CronSettings, merge_into_slots
from kondor_core.policy import (
    Action,
    Event,
    MachineState,
    SlotKind,
    SlotState,
    StartdPolicy,
    State,
    Transition,
    advertised,
    defaults,
    step_machine,
)
from kondor_core.policy import Activity as EngineActivity
from kondor_core.slots import AdRenderer, Layout, PartitionableSlot, Slot, SlotAd, initial_slots
from kondor_core.slots import layout as lay_out

Fact = Any

#: Attributes the engine computes: never taken from the layout's ad as facts.
_ENGINE_NAMES = frozenset(
    name.lower() for name in (*defaults.PUBLISHED_ATTRIBUTES, "Start", "Rank", "Requirements")
)
#: States a restarted agent takes back from its published status: they hold no claim, which
#: an agent without its job cannot restore ("Machine States").
_RESTORABLE = (State.OWNER, State.UNCLAIMED)


@dataclass(frozen=True)
class Startd:
    """One node's slots under one policy: the carve model, the engine's states and the renderer."""

    machine: Machine
    spec: SlotPolicySpec
    applied: ResolvedPolicy
    layout: Layout = field(repr=False)
    engine: StartdPolicy = field(repr=False, compare=False)
    renderer: AdRenderer = field(repr=False, compare=False)
    slots: tuple[Slot, ...] = field(repr=False)
    state: MachineState = field(repr=False)
    #: `policy_hash` of the policy as compiled here (the operator's may differ across versions).
    compiled_hash: str = ""
    warnings: tuple[str, ...] = ()
    #: The policy's startd cron jobs and knobs (what `kondor_agent.cron` runs).
    cron_jobs: tuple[CronJob, ...] = ()
    cron_settings: CronSettings = field(default_factory=CronSettings)
    #: The cron jobs' latest ads by full name, merged into every rendered slot ad.
    cron_ads: Mapping[str, CronAd] = field(default_factory=dict, compare=False)
    #: Mips, KFlops (and LastBenchmark) from the last benchmarks: on the machine and every slot.
    benchmarks: Mapping[str, Fact] = field(default_factory=dict, compare=False)

    @property
    def polling_interval(self) -> float:
        """POLLING_INTERVAL of the policy (5 s unless it sets one)."""
        return self.engine.polling_interval

    @property
    def update_interval(self) -> float:
        """UPDATE_INTERVAL of the policy (300 s unless it sets one)."""
        return self.engine.update_interval

    def ads(self) -> list[SlotAd]:
        """The layout's slot ads, in condor_status order (what `kondor simulate` prints), with
        the benchmarks' Mips and KFlops and the startd cron ads merged in."""
        ads = self.renderer.render(self.slots)
        if self.benchmarks:
            ads = [
                SlotAd(ad.name, {**ad.attributes, **_benchmark_facts(self)}, ad.expressions)
                for ad in ads
            ]
        if self.cron_ads:
            ads = merge_into_slots(ads, self.cron_ads, [job.name for job in self.cron_jobs])
        return ads


@dataclass(frozen=True)
class Tick:
    """What one polling cycle produced."""

    startd: Startd
    actions: list[Action]
    transitions: list[Transition]


def start(
    machine: Machine,
    spec: SlotPolicySpec,
    applied: ResolvedPolicy,
    now: float,
    *,
    previous: Startd | None = None,
    published: ExecutionPointStatus | None = None,
) -> Startd:
    """Carve `machine` under `spec`: a fresh startd, or one re-carved after a change.

    Slots that keep their name keep their state and entered times from `previous` (a
    reconfigured startd) or from `published` (a restarted agent reading its own status) when
    they hold no claim; the others start in Owner/Idle as a freshly spawned startd does.
    Raises `kondor_core.config.PolicyError` or `kondor_core.slots.LayoutError` for a policy
    that does not fit the machine.
    """
    now = whole_seconds(now)
    effective = compile_policy(spec)
    result = lay_out(machine, effective)
    engine = StartdPolicy.from_effective(effective)
    renderer = AdRenderer(result)
    slots = initial_slots(result)
    names = [ad.name for ad in renderer.render(slots)]
    pslots = [f"{s.name}@{machine.name}" for s in slots if isinstance(s, PartitionableSlot)]
    fresh = MachineState.start(names, now=now, partitionable=pslots)
    compiled_hash = policy_hash(effective)
    if not applied.hash:
        applied = applied.model_copy(update={"hash": compiled_hash})
    kept = _kept_states(previous, published, applied)
    restored = tuple(
        kept[slot.name] if slot.name in kept and kept[slot.name].kind == slot.kind else slot
        for slot in fresh.slots
    )
    state = dataclasses.replace(fresh, slots=restored)
    return Startd(
        machine=machine,
        spec=spec,
        applied=applied,
        layout=result,
        engine=engine,
        renderer=renderer,
        slots=slots,
        state=state,
        compiled_hash=compiled_hash,
        warnings=tuple(effective.warnings),
        cron_jobs=effective.cron_jobs,
        cron_settings=effective.cron,
        cron_ads=previous.cron_ads if previous is not None else {},
        benchmarks=previous.benchmarks if previous is not None else {},
    )


def _benchmark_facts(startd: Startd) -> dict[str, Fact]:
    # LastBenchmark is the engine's, per slot; the slot ads take only the measurements.
    return {k: v for k, v in startd.benchmarks.items() if k != "LastBenchmark"}


def with_cron_ads(startd: Startd, ads: Mapping[str, CronAd]) -> Startd:
    """`startd` whose slot ads merge `ads` (the cron runner's latest)."""
    if ads == startd.cron_ads:
        return startd
    return dataclasses.replace(startd, cron_ads=dict(ads))


def with_benchmarks(startd: Startd, measured: Mapping[str, Fact]) -> Startd:
    """`startd` advertising the benchmarks' results (Mips, KFlops, LastBenchmark)."""
    return dataclasses.replace(startd, benchmarks=dict(measured))


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


def static_facts(ad: SlotAd) -> dict[str, Fact]:
    """The layout's literal attributes of a slot ad (Cpus, Memory, OpSys, ...) as facts."""
    return {
        key: value
        for key, value in ad.attributes.items()
        if isinstance(value, bool | int | float | str)
        and key not in ad.expressions
        and key.lower() not in _ENGINE_NAMES
    }


def tick(
    startd: Startd,
    live: Mapping[str, Fact],
    now: float,
    *,
    slot_events: Mapping[str, Sequence[Event]] | None = None,
) -> Tick:
    """One polling cycle at `now` with the node's live facts (LoadAvg, KeyboardIdle, ...) and
    the events for some slots (BenchmarksDone)."""
    now = whole_seconds(now)
    ads = {ad.name: ad for ad in startd.ads()}
    slot_facts = {name: static_facts(ad) for name, ad in ads.items()}
    result = step_machine(
        startd.engine,
        startd.state,
        dict(live),
        now,
        slot_facts={s.name: slot_facts[s.name] for s in startd.state.slots if s.name in slot_facts},
        slot_events=slot_events,
    )
    return Tick(
        dataclasses.replace(startd, state=result.machine), result.actions, result.transitions
    )


def published_ads(startd: Startd, live: Mapping[str, Fact], now: float) -> list[SlotAd]:
    """Every slot ad as published: the layout's ad, the live facts and what the policy
    advertises (State, Activity, Entered*, CurrentRank, and Requirements FALSE while the slot
    takes no match)."""
    now = whole_seconds(now)
    states = {slot.name: slot for slot in startd.state.slots}
    out: list[SlotAd] = []
    for ad in startd.ads():
        attributes = dict(ad.attributes)
        expressions = set(ad.expressions)
        for key, value in live.items():
            attributes.setdefault(key, value)
        slot = states.get(ad.name)
        if slot is not None:
            facts = {**live, **static_facts(ad)}
            shown = advertised(startd.engine, slot, facts, now)
            requirements = shown.pop("Requirements", None)
            attributes.update(shown)
            expressions -= set(shown)
            if requirements is False:
                attributes["Requirements"] = False
                expressions.discard("Requirements")
        out.append(SlotAd(ad.name, attributes, frozenset(expressions)))
    return out


def slot_ads(startd: Startd, live: Mapping[str, Fact], now: float) -> list[dict[str, Any]]:
    """The published slot ads as JSON objects (`kondor simulate --output json`'s form)."""
    return [ad.to_json() for ad in published_ads(startd, live, now)]


def machine_ad(startd: Startd, live: Mapping[str, Fact]) -> dict[str, Any]:
    """The machine ad: what every slot ad shares (Machine, Total*, Detected*, the facts), and
    the live facts."""
    ad: dict[str, Any] = {
        key: value for key, value in startd.renderer.base.items() if key not in ("Start", "Rank")
    }
    ad["MyType"] = "Machine"
    ad.update(startd.benchmarks)
    ad.update(live)
    return ad


def slot_status(ad: SlotAd) -> SlotStatus:
    """The `status.slots[]` entry of one published slot ad."""
    attributes = ad.attributes
    return SlotStatus(
        name=str(attributes.get("Name", "")),
        type=str(attributes.get("SlotType", "")),
        state=str(attributes.get("State", "")),
        activity=str(attributes.get("Activity", "")),
        cpus=_number(attributes.get("Cpus")),
        memory=int(_number(attributes.get("Memory"))),
        disk=int(_number(attributes.get("Disk"))),
        gpus=int(_number(attributes.get("GPUs"))),
        entered_current_state=_epoch(attributes.get("EnteredCurrentState")),
        entered_current_activity=_epoch(attributes.get("EnteredCurrentActivity")),
        job=attributes.get("JobId") if isinstance(attributes.get("JobId"), str) else None,
        ad=dict(attributes),
        expressions=sorted(ad.expressions),
    )


def summary(slots: Sequence[SlotStatus]) -> SlotSummary:
    """The counts of `kubectl get executionpoints`: slots by state, and the node's resources
    (partitionable and static slots; a dynamic slot's share is already its parent's total)."""
    top = [slot for slot in slots if slot.type != "Dynamic"]
    cpus = sum(_total(slot, "Cpus") for slot in top)
    memory = int(sum(_total(slot, "Memory") for slot in top))
    gpus = int(sum(_total(slot, "GPUs") for slot in top))
    states = sorted({slot.state for slot in slots})
    return SlotSummary(
        slots=len(slots),
        claimed=sum(1 for slot in slots if slot.state == "Claimed"),
        unclaimed=sum(1 for slot in slots if slot.state == "Unclaimed"),
        owner=sum(1 for slot in slots if slot.state == "Owner"),
        cpus=int(cpus) if float(cpus).is_integer() else cpus,
        memory=format_quantity(memory, Unit.MIB) if memory else "0",
        gpus=gpus,
        state=states[0] if len(states) == 1 else ("Mixed" if states else "NoSlots"),
    )


def _total(slot: SlotStatus, attribute: str) -> float:
    """TotalSlot<attr> (what the slot was given), else its current amount."""
    return _number(slot.ad.get(f"TotalSlot{attribute}", slot.ad.get(attribute)))


def status(
    startd: Startd,
    live: Mapping[str, Fact],
    now: float,
    *,
    conditions: Sequence[Condition] = (),
) -> ExecutionPointStatus:
    """The agent's part of the ExecutionPoint status at `now` (lastHeartbeat is set at write)."""
    slots = [slot_status(ad) for ad in published_ads(startd, live, now)]
    return ExecutionPointStatus(
        summary=summary(slots),
        slots=slots,
        conditions=list(conditions),
        policy=startd.applied,
        machine=machine_ad(startd, live),
    )


def whole_seconds(now: float) -> int:
    """Slot ads carry whole epoch seconds, as the startd's do."""
    return math.floor(now)


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    return value


def _epoch(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        return None
    return int(value)
