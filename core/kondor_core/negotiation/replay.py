"""Replaying a scenario: a job queue, a negotiator and a node's startd over simulated time.

The driver behind `kondor simulate --timeline`. Every polling interval
("condor_startd Policy Configuration": POLLING_INTERVAL) it applies the steps that
are due, matches the queue's idle jobs to slots as the negotiator would
(`kondor_core.negotiation.matchmaking`), and runs one policy cycle of the whole
machine (`kondor_core.policy.step_machine`). A transition caused by a step
therefore appears at the first tick at or after the step.

The queue follows HTCondor's jobs ("Machine States", "Claimed State"):
- `submit` puts a job in the queue, Idle; idle jobs are matched in submission
  order. A match to a partitionable slot carves a dynamic slot, sized by
  `kondor_core.slots.carve` (a job that does not fit is not matched there). A
  claimed slot whose RANK prefers the new job is preempted (RANK preemption).
- the schedd activates a claim as soon as it holds the claim's job, renews
  leases every ALIVE_INTERVAL, and releases a claim once its job exits.
- a job's process ends on an `exit` step (the job completes and leaves the
  queue) or on a soft kill, unless the job's manifest has the annotation
  `kondor.io/ignore-soft-kill: "true"` (then only the hard kill ends it, so
  Preempting/Killing can be shown). A hard kill always ends it.
- a job whose claim is gone without it completing (vacated, killed, refused)
  returns to the queue Idle and is matched again.

Kondor's jobs are vanilla-universe jobs: a job ad gets `JobUniverse = 5` unless
the manifest's attributes set it, so the manual's `$(IsVanilla)` policies apply.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import classad2

from kondor_core.api import ExecutionJob
from kondor_core.config import compile_policy
from kondor_core.negotiation.matchmaking import Candidate, choose
from kondor_core.policy import (
    Action,
    ActionKind,
    ActivateClaim,
    Activity,
    CancelDrain,
    Drain,
    DrainMode,
    Event,
    JobExited,
    LeaseRenewed,
    MachineContext,
    MachineState,
    Match,
    PolicyError,
    ReleaseClaim,
    Shutdown,
    ShutdownMode,
    SimulatedAgent,
    SlotKind,
    SlotState,
    StartdPolicy,
    State,
    Transition,
    Vacate,
    accepts,
    advertised,
    defaults,
    rank,
    step_machine,
)
from kondor_core.policy.machine import cross_slot_attrs
from kondor_core.policy.model import Fact
from kondor_core.policy.scenario import Scenario, Step
from kondor_core.policy.timeline import agent_answer, grown_facts
from kondor_core.slots import (
    AdRenderer,
    PartitionableSlot,
    Refusal,
    SlotAd,
    carve,
    initial_slots,
    job_ad,
    layout,
    release,
)

#: The annotation that makes a job ignore its soft-kill signal (KillSig).
IGNORE_SOFT_KILL = "kondor.io/ignore-soft-kill"

#: Slot-ad attributes the engine computes itself; the layout's values are not facts.
_ENGINE_NAMES = frozenset(
    name.lower() for name in (*defaults.PUBLISHED_ATTRIBUTES, "Start", "Rank", "Requirements")
)

_COMMANDS: Mapping[str, Event] = {
    "vacate": Vacate(),
    "vacate-fast": Vacate(fast=True),
    "drain-graceful": Drain(DrainMode.GRACEFUL),
    "drain-quick": Drain(DrainMode.QUICK),
    "drain-fast": Drain(DrainMode.FAST),
    "drain-cancel": CancelDrain(),
    "shutdown-graceful": Shutdown(ShutdownMode.GRACEFUL),
    "shutdown-peaceful": Shutdown(ShutdownMode.PEACEFUL),
    "shutdown-fast": Shutdown(ShutdownMode.FAST),
}


class JobStatus(StrEnum):
    """Where a job is in the queue (HTCondor's JobStatus, with Matched for a claim not yet
    running it)."""

    IDLE = "Idle"
    MATCHED = "Matched"
    RUNNING = "Running"
    COMPLETED = "Completed"


@dataclass(frozen=True)
class QueuedJob:
    name: str
    ad: Any = field(compare=False, repr=False)
    ignores_soft_kill: bool = False
    status: JobStatus = JobStatus.IDLE
    slot: str | None = None
    matches: int = 0
    #: Why the negotiator last found no slot for the job (None once it was matched).
    unmatched: str | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "status": str(self.status)}
        if self.slot is not None:
            out["slot"] = self.slot
        if self.status is JobStatus.IDLE and self.unmatched:
            out["reason"] = self.unmatched
        return out


@dataclass(frozen=True)
class Replay:
    """What happened: every transition and action, and the machine and queue at the end."""

    transitions: tuple[Transition, ...]
    actions: tuple[tuple[float, Action], ...]
    machine: MachineState
    jobs: tuple[QueuedJob, ...]
    #: The policy compiler's warnings (knobs Kondor does not implement, ...).
    warnings: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """The `kondor simulate --timeline --output json` document; `jobs` is the queue at the
        end, with why an Idle job found no slot."""
        return {
            "transitions": [transition_dict(t) for t in self.transitions],
            "actions": [{"time": time, **action.as_dict()} for time, action in self.actions],
            "jobs": [job.as_dict() for job in self.jobs],
        }


def transition_dict(transition: Transition) -> dict[str, Any]:
    """A transition as the timeline's JSON shows it: time, slot, state, activity, job,
    reason, then where it came from and its number in the reference's diagram."""
    out: dict[str, Any] = {
        "time": transition.time,
        "slot": transition.slot,
        "state": str(transition.state),
        "activity": str(transition.activity),
        "job": transition.job_id,
        "reason": transition.reason,
        "from": f"{transition.from_state}/{transition.from_activity}",
    }
    if transition.number is not None:
        out["transition"] = transition.number
    return out


def scenario_job_ad(job: ExecutionJob) -> Any:
    """The job's ClassAd (`kondor_core.slots.job_ad`), vanilla universe unless it says not."""
    ad = job_ad(job.spec, job.metadata.name)
    if "JobUniverse" not in ad:
        ad["JobUniverse"] = 5
    return ad


def ignores_soft_kill(job: ExecutionJob) -> bool:
    return job.metadata.annotations.get(IGNORE_SOFT_KILL, "").strip().lower() == "true"


def replay(scenario: Scenario, *, agent: SimulatedAgent | None = None) -> Replay:
    """Replay `scenario` from t=0 to `until`, one tick per polling interval.

    Raises `config.PolicyError` for a policy that does not compile, and `PolicyError` for a
    step the machine cannot carry out (an `exit` for a job that is not running then)."""
    effective = compile_policy(scenario.policy.spec)
    engine = StartdPolicy.from_effective(effective)
    driver = _Driver(scenario, engine, _Slots.start(scenario, effective), agent)
    return dataclasses.replace(driver.run(), warnings=effective.warnings)


# --------------------------------------------------------------------------- slot resources


@dataclass(frozen=True)
class _Slots:
    """The layout's side of the machine: slot ads' static attributes and partitionable slots'
    remaining resources (`kondor_core.slots`), by the engine's slot names."""

    renderer: AdRenderer = field(repr=False)
    machine_name: str
    pslots: Mapping[str, PartitionableSlot]
    #: Engine dynamic slot name -> (partitionable slot name, the carve model's child name).
    children: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    statics: Mapping[str, Mapping[str, Fact]] = field(default_factory=dict)

    @classmethod
    def start(cls, scenario: Scenario, effective: Any) -> _Slots:
        result = layout(scenario.machine, effective)
        renderer = AdRenderer(result)
        slots = initial_slots(result)
        name = scenario.machine.name
        pslots = {f"{s.name}@{name}": s for s in slots if isinstance(s, PartitionableSlot)}
        statics = {f"{ad.name}": _static_facts(ad) for ad in renderer.render(slots)}
        return cls(renderer, name, pslots, {}, statics)

    def names(self) -> list[str]:
        return list(self.statics)

    def facts(self, slot: str) -> Mapping[str, Fact]:
        return self.statics.get(slot, {})

    def carved(self, pslot: str, child: str, engine_name: str, new: PartitionableSlot) -> _Slots:
        children = {**self.children, engine_name: (pslot, child)}
        return self._with(pslot, new, children)

    def released(self, engine_name: str) -> _Slots:
        pslot, child = self.children[engine_name]
        children = {k: v for k, v in self.children.items() if k != engine_name}
        return self._with(pslot, release(self.pslots[pslot], child), children)

    def _with(
        self, pslot: str, new: PartitionableSlot, children: Mapping[str, tuple[str, str]]
    ) -> _Slots:
        pslots = {**self.pslots, pslot: new}
        ads = {ad.name: ad for ad in self.renderer.render(pslots.values())}
        statics = dict(self.statics)
        statics[pslot] = _static_facts(ads[pslot])
        for engine_name, (parent, child) in children.items():
            ad = ads.get(f"{child}@{self.machine_name}")
            if parent == pslot and ad is not None:
                statics[engine_name] = _static_facts(ad)
        for gone in set(self.children) - set(children):
            statics.pop(gone, None)
        return dataclasses.replace(self, pslots=pslots, children=children, statics=statics)


def _static_facts(ad: SlotAd) -> dict[str, Fact]:
    """The layout's literal attributes of a slot ad (Cpus, Memory, OpSys, ...) as facts."""
    return {
        key: value
        for key, value in ad.attributes.items()
        if isinstance(value, bool | int | float | str)
        and key not in ad.expressions
        and key.lower() not in _ENGINE_NAMES
    }


# --------------------------------------------------------------------------- the driver


@dataclass
class _Driver:
    """The replay loop. Mutable only inside `run`; everything it calls is pure."""

    scenario: Scenario
    policy: StartdPolicy
    slots: _Slots
    agent: SimulatedAgent | None = None
    machine: MachineState = field(init=False)
    jobs: dict[str, QueuedJob] = field(default_factory=dict)
    facts: dict[str, Fact] = field(default_factory=dict)
    set_at: dict[str, float] = field(default_factory=dict)
    transitions: list[Transition] = field(default_factory=list)
    actions: list[tuple[float, Action]] = field(default_factory=list)
    due: list[tuple[float, str, Event]] = field(default_factory=list)
    last_alive: float = 0.0

    def __post_init__(self) -> None:
        names = self.slots.names()
        self.machine = MachineState.start(names, partitionable=list(self.slots.pslots))

    def run(self) -> Replay:
        interval = self.scenario.polling_interval
        steps = list(self.scenario.steps)
        index = 0
        for tick in range(math.floor(self.scenario.until / interval) + 1):
            now = _whole(tick * interval)
            events: dict[str, list[Event]] = {}
            machine_events: list[Event] = []
            while index < len(steps) and steps[index].at <= now:
                self._apply(steps[index], now, events, machine_events)
                index += 1
            self._keep_alive(now, events)
            self._answers(now, events)
            facts = self._slot_facts(now)
            self._negotiate(now, facts, events)
            result = step_machine(
                self.policy,
                self.machine,
                grown_facts(self.facts, self.set_at, now),
                now,
                machine_events,
                slot_facts=facts,
                slot_events=events,
            )
            self.machine = result.machine
            self.transitions.extend(result.transitions)
            for action in result.actions:
                self._after(action, now, interval)
            self._reconcile()
        return Replay(
            tuple(self.transitions), tuple(self.actions), self.machine, tuple(self.jobs.values())
        )

    # -- steps ---------------------------------------------------------------------------

    def _apply(
        self, item: Step, now: float, events: dict[str, list[Event]], machine: list[Event]
    ) -> None:
        if item.facts is not None:
            for key, value in item.facts.items():
                self.facts[key] = value
                self.set_at[key] = item.at
        elif item.submit is not None:
            job = item.submit
            name = job.metadata.name
            self.jobs[name] = QueuedJob(name, scenario_job_ad(job), ignores_soft_kill(job))
        elif item.exit is not None:
            self._exit(item, now, events)
        elif item.command is not None:
            machine.append(_COMMANDS[item.command])

    def _exit(self, item: Step, now: float, events: dict[str, list[Event]]) -> None:
        assert item.exit is not None
        job = self.jobs[item.exit.job]
        if job.status is not JobStatus.RUNNING or job.slot is None:
            raise PolicyError(
                f"{item.where}.exit.job: job {job.name!r} is not running at t={now} (it is "
                f"{job.status}); an exit step ends a running job's process"
            )
        slot_events = events.setdefault(job.slot, [])
        slot_events.append(JobExited(item.exit.exit_code))
        slot = self.machine.slot(job.slot)
        if slot.pending_claim is None and slot.activity is not Activity.RETIRING:
            # The schedd has no more work for the claim. A retiring claim ends by itself,
            # and a preempting claim waiting on the slot is not the schedd's to release.
            slot_events.append(ReleaseClaim())
        self.jobs[job.name] = dataclasses.replace(job, status=JobStatus.COMPLETED)

    # -- the schedd and the node's answers -----------------------------------------------

    def _keep_alive(self, now: float, events: dict[str, list[Event]]) -> None:
        interval = (self.agent or SimulatedAgent()).alive_interval
        if interval is None or now - self.last_alive < interval:
            return
        self.last_alive = now
        for slot in self.machine.slots:
            if slot.claim is not None:
                events.setdefault(slot.name, []).insert(0, LeaseRenewed())

    def _answers(self, now: float, events: dict[str, list[Event]]) -> None:
        present = {slot.name for slot in self.machine.slots}
        still = []
        for when, name, event in self.due:
            if when > now:
                still.append((when, name, event))
            elif name in present:
                events.setdefault(name, []).append(event)
        self.due = still

    def _after(self, action: Action, now: float, interval: float) -> None:
        self.actions.append((now, action))
        agent = self._agent()
        answer = agent_answer(action, agent, now, interval)
        if answer is not None:
            self.due.append(answer)
        if action.kind is ActionKind.RELEASE_DYNAMIC_SLOT and action.dynamic_slot:
            if action.dynamic_slot in self.slots.children:
                self.slots = self.slots.released(action.dynamic_slot)
        elif action.kind is ActionKind.CARVE_DYNAMIC_SLOT and action.dynamic_slot:
            self._carved(action)

    def _agent(self) -> SimulatedAgent:
        ignoring = frozenset(job.name for job in self.jobs.values() if job.ignores_soft_kill)
        base = self.agent or SimulatedAgent()
        return dataclasses.replace(base, ignores_soft_kill=base.ignores_soft_kill | ignoring)

    def _carved(self, action: Action) -> None:
        """The engine carved the dynamic slot the negotiator sized: record its resources."""
        job = self.jobs.get(action.job_id or "")
        pslot = self.slots.pslots.get(action.slot)
        if job is None or pslot is None or action.dynamic_slot is None:
            return
        outcome = carve(pslot, job.ad, request=job.name)
        if isinstance(outcome, Refusal):  # checked at matching; the engine agreed
            raise PolicyError(f"{action.slot}: {outcome.reason}")
        new, child = outcome
        self.slots = self.slots.carved(action.slot, child.name, action.dynamic_slot, new)

    def _reconcile(self) -> None:
        """Each job's status from the claims on the machine: a job no claim holds is Idle."""
        holders: dict[str, tuple[str, bool]] = {}
        for slot in self.machine.slots:
            if slot.claim is not None:
                holders[slot.claim.job_id] = (slot.name, slot.claim.active)
            if slot.pending_claim is not None:
                holders.setdefault(slot.pending_claim.job_id, (slot.name, False))
        for name, job in self.jobs.items():
            if job.status is JobStatus.COMPLETED:
                continue
            held = holders.get(name)
            if held is None:
                status, where = JobStatus.IDLE, None
            else:
                where = held[0]
                status = JobStatus.RUNNING if held[1] else JobStatus.MATCHED
            self.jobs[name] = dataclasses.replace(job, status=status, slot=where)

    # -- the negotiator ------------------------------------------------------------------

    def _slot_facts(self, now: float) -> dict[str, dict[str, Fact]]:
        shared = grown_facts(self.facts, self.set_at, now)
        return {slot.name: {**self.slots.facts(slot.name), **shared} for slot in self.machine.slots}

    def _negotiate(
        self, now: float, facts: Mapping[str, Mapping[str, Fact]], events: dict[str, list[Event]]
    ) -> None:
        self._activate(events)
        context = MachineContext(
            draining=self.machine.draining,
            slot_attrs=cross_slot_attrs(
                self.policy, self.machine.slots, lambda s: facts.get(s.name, {})
            ),
        )
        taken: set[str] = set()
        planned: dict[str, PartitionableSlot] = dict(self.slots.pslots)
        for job in list(self.jobs.values()):
            if job.status is not JobStatus.IDLE:
                continue
            refusals: list[str] = []
            candidates = self._candidates(
                job,
                now=now,
                facts=facts,
                context=context,
                taken=taken,
                planned=planned,
                refusals=refusals,
            )
            choice = choose(job.ad, candidates)
            if choice.slot is None:
                why = "; ".join([*refusals, *choice.reasons]) or "no slot is Unclaimed"
                self.jobs[job.name] = dataclasses.replace(job, unmatched=why)
                continue
            target = self.machine.slot(choice.slot)
            if target.kind is SlotKind.PARTITIONABLE:
                outcome = carve(planned[target.name], job.ad, request=job.name)
                if not isinstance(outcome, Refusal):
                    planned[target.name] = outcome[0]
            else:
                taken.add(target.name)
            claim_id = f"{job.name}#{job.matches + 1}"
            sent: list[Event] = [Match(claim_id, job.ad, job_id=job.name)]
            if target.state is State.UNCLAIMED:
                # Otherwise (a preempting claim, a slot still killing its backfill client) the
                # claim is activated once it holds the slot (`_activate`).
                sent.append(ActivateClaim())
            events.setdefault(target.name, []).extend(sent)
            self.jobs[job.name] = dataclasses.replace(
                job,
                status=JobStatus.MATCHED,
                slot=target.name,
                matches=job.matches + 1,
                unmatched=None,
            )

    def _activate(self, events: dict[str, list[Event]]) -> None:
        """The schedd starts the claim's job on a Claimed/Idle slot (a preempting claim that
        took over, transition 23, or a claim whose first activation was refused)."""
        for slot in self.machine.slots:
            claim = slot.claim
            if slot.state is not State.CLAIMED or slot.activity is not Activity.IDLE:
                continue
            job = self.jobs.get(claim.job_id) if claim is not None else None
            if job is not None and job.status is JobStatus.MATCHED:
                events.setdefault(slot.name, []).append(ActivateClaim())

    def _candidates(
        self,
        job: QueuedJob,
        *,
        now: float,
        facts: Mapping[str, Mapping[str, Fact]],
        context: MachineContext,
        taken: set[str],
        planned: Mapping[str, PartitionableSlot],
        refusals: list[str],
    ) -> list[Candidate]:
        out: list[Candidate] = []
        for order, slot in enumerate(self.machine.slots):
            if slot.name in taken:
                continue
            own = facts.get(slot.name, {})
            preempts = _preemptable(self.policy, slot, facts=own, job=job, now=now, context=context)
            if not preempts and not _open(slot):
                continue
            if slot.kind is SlotKind.PARTITIONABLE:
                outcome = carve(planned[slot.name], job.ad, request=job.name)
                if isinstance(outcome, Refusal):
                    refusals.append(outcome.reason)
                    continue
            ok, why = accepts(self.policy, slot, own, job.ad, now, machine=context)
            ad = _slot_ad(self.policy, slot, own, now, context)
            slot_rank = rank(self.policy, slot, own, job.ad, now, machine=context)
            out.append(Candidate(slot.name, ad, ok, slot_rank, preempts, order, why))
        return out


def _open(slot: SlotState) -> bool:
    """The slot takes a new match: Unclaimed (static or partitionable), or running backfill."""
    if slot.pending_claim is not None or slot.shutting_down is not None:
        return False
    if slot.kind is SlotKind.PARTITIONABLE:
        return slot.state is State.UNCLAIMED
    return slot.state in (State.UNCLAIMED, State.BACKFILL)


def _preemptable(
    policy: StartdPolicy,
    slot: SlotState,
    *,
    facts: Mapping[str, Fact],
    job: QueuedJob,
    now: float,
    context: MachineContext,
) -> bool:
    """A Claimed slot whose RANK for `job` exceeds CurrentRank ("The RANK Expression")."""
    claim = slot.claim
    if slot.state is not State.CLAIMED or claim is None or slot.pending_claim is not None:
        return False
    if slot.activity is Activity.RETIRING and not claim.may_unretire:
        return False
    return rank(policy, slot, facts, job.ad, now, machine=context) > claim.rank


def _slot_ad(
    policy: StartdPolicy,
    slot: SlotState,
    facts: Mapping[str, Fact],
    now: float,
    context: MachineContext,
) -> Any:
    """The slot ad the negotiator sees: the layout's attributes, the facts, and what the
    policy advertises (State, Activity, CurrentRank, Requirements)."""
    values: dict[str, Any] = dict(facts)
    for key, value in advertised(policy, slot, facts, now, machine=context).items():
        values[key] = value
    values.pop("Requirements", None)  # a job's Requirements never read the slot's
    values["Name"] = slot.name
    return classad2.ClassAd(values)


def _whole(value: float) -> float:
    return int(value) if float(value).is_integer() else value
