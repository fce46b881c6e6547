"""Replaying a scenario: a job queue, a negotiator and a node's startd over simulated time.

The driver behind `kondor simulate --timeline`. Every polling interval
("condor_startd Policy Configuration": POLLING_INTERVAL) it applies the steps that
are due, runs one negotiation cycle over the slot ads the node's startd publishes
(`kondor_core.negotiation.negotiator`, the operator's negotiator), and runs one cycle of
that startd (`kondor_core.startd`, the agent's). A transition caused by a step therefore
appears at the first tick at or after the step.

The queue follows HTCondor's jobs ("Machine States", "Claimed State"):
- `submit` puts a job in the queue, Idle; idle jobs are matched by JobPrio, then in
  submission order. A match to a partitionable slot carves a dynamic slot, sized by
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
- a deferred or crontab job ("Time Scheduling for Job Execution",
  `kondor_core.jobs.deferral`; the timeline's t=0 is the epoch, so a crontab reads it as
  1970-01-01 00:00 UTC) is matched once `t + POLLING_INTERVAL >= DeferralTime -
  DeferralPrepTime`, and its claim is activated at DeferralTime, not earlier; a deferred
  job still unmatched past its window is Held (a crontab job waits for its next time); a
  crontab job that exits stays in the queue, Idle until its next time (on_exit_remove
  false).

Job ads come from `kondor_core.jobs.job_ad`, as everywhere else.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from kondor_core import startd
from kondor_core.api import ExecutionJob, ExecutionJobSpec
from kondor_core.config import compile_policy
from kondor_core.jobs import submit_ad
from kondor_core.jobs.deferral import crontab_of, match_prep_time, may_match, missed, next_cron_time
from kondor_core.negotiation.negotiator import IdleJob, negotiate, slot_offer
from kondor_core.negotiation.preemption import PreemptionPolicy
from kondor_core.policy import (
    Action,
    ActivateClaim,
    Activity,
    CancelDrain,
    Drain,
    DrainMode,
    EngineError,
    Event,
    JobExited,
    LeaseRenewed,
    MachineState,
    Match,
    ReleaseClaim,
    Shutdown,
    ShutdownMode,
    State,
    Transition,
    Vacate,
)
from kondor_core.policy.model import Fact
from kondor_core.sim.codsim import CodTimeline
from kondor_core.sim.scenario import Scenario, Step
from kondor_core.sim.timeline import SimulatedAgent, agent_answer, grown_facts

#: The annotation that makes a job ignore its soft-kill signal (KillSig).
IGNORE_SOFT_KILL = "kondor.io/ignore-soft-kill"

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

#: RANK preemption only (PREEMPTION_REQUIREMENTS False), early preemption considered.
_TIMELINE_PREEMPTION = PreemptionPolicy(early=True)


class JobStatus(StrEnum):
    """Where a job is in the queue (HTCondor's JobStatus, with Matched for a claim not yet
    running it)."""

    IDLE = "Idle"
    MATCHED = "Matched"
    RUNNING = "Running"
    COMPLETED = "Completed"
    #: A deferred job whose window passed before it was matched (HoldReasonCode 20).
    HELD = "Held"


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
    #: The submitted spec (its deferral or crontab), and its DeferralTime now.
    spec: ExecutionJobSpec | None = field(default=None, compare=False, repr=False)
    deferral_time: int | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "status": str(self.status)}
        if self.slot is not None:
            out["slot"] = self.slot
        if self.deferral_time is not None:
            out["deferralTime"] = self.deferral_time
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
    #: The node's startd at the end (its published ads are what the last cycle showed).
    startd: startd.Startd = field(repr=False, compare=False)
    #: The policy compiler's warnings (knobs Kondor does not implement, ...).
    warnings: tuple[str, ...] = ()
    #: The COD claims' state changes (`kondor_core.sim.codsim`), with the batch claim's.
    cod: tuple[dict[str, Any], ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """The `kondor simulate --timeline --output json` document; `jobs` is the queue at the
        end, with why an Idle job found no slot."""
        return {
            "transitions": [transition_dict(t) for t in self.transitions],
            "actions": [{"time": time, **action.as_dict()} for time, action in self.actions],
            "jobs": [job.as_dict() for job in self.jobs],
            **({"cod": list(self.cod)} if self.cod else {}),
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


def ignores_soft_kill(job: ExecutionJob) -> bool:
    return job.metadata.annotations.get(IGNORE_SOFT_KILL, "").strip().lower() == "true"


def replay(scenario: Scenario, *, agent: SimulatedAgent | None = None) -> Replay:
    """Replay `scenario` from t=0 to `until`, one tick per polling interval.

    Raises `config.EngineError` for a policy that does not compile, and `EngineError` for a
    step the machine cannot carry out (an `exit` for a job that is not running then)."""
    effective = compile_policy(scenario.policy.spec)
    node = startd.start(scenario.machine, effective, 0)
    return dataclasses.replace(_Driver(scenario, node, agent).run(), warnings=effective.warnings)


@dataclass
class _Driver:
    """The replay loop: the queue, the clock and the schedd's part. Mutable only inside
    `run`; the startd, the negotiator and the engine it drives are pure."""

    scenario: Scenario
    node: startd.Startd
    agent: SimulatedAgent | None = None
    jobs: dict[str, QueuedJob] = field(default_factory=dict)
    facts: dict[str, Fact] = field(default_factory=dict)
    set_at: dict[str, float] = field(default_factory=dict)
    transitions: list[Transition] = field(default_factory=list)
    actions: list[tuple[float, Action]] = field(default_factory=list)
    due: list[tuple[float, str, Event]] = field(default_factory=list)
    last_alive: float = 0.0
    cod: CodTimeline | None = None

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
            live = grown_facts(self.facts, self.set_at, now)
            self._negotiate(now, live, events)
            if self.cod is not None:
                self.cod.tick(self.node, now)
                for slot, said in self.cod.events(self.node).items():
                    events.setdefault(slot, []).extend(said)
            result = startd.tick(
                self.node, live, now, slot_events=events, machine_events=machine_events
            )
            self.node = result.startd
            if self.cod is not None:
                self.cod.settle(self.node)
            self.transitions.extend(result.transitions)
            for action in result.actions:
                self._after(action, now, interval)
            self._reconcile()
        return Replay(
            tuple(self.transitions),
            tuple(self.actions),
            self.node.state,
            tuple(self.jobs.values()),
            self.node,
            cod=tuple(self.cod.rows) if self.cod is not None else (),
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
            ad = submit_ad(job.spec, name)
            queued = QueuedJob(name, ad, ignores_soft_kill(job), spec=job.spec)
            self.jobs[name] = _scheduled(queued, now)
        elif item.exit is not None:
            self._exit(item, now, events)
        elif item.command is not None:
            machine.append(_COMMANDS[item.command])
        elif item.cod is not None:
            if self.cod is None:
                self.cod = CodTimeline(self.scenario.machine.name)
            self.cod.apply(item.cod, self.node, now)

    def _exit(self, item: Step, now: float, events: dict[str, list[Event]]) -> None:
        assert item.exit is not None
        job = self.jobs[item.exit.job]
        if job.status is not JobStatus.RUNNING or job.slot is None:
            raise EngineError(
                f"{item.where}.exit.job: job {job.name!r} is not running at t={now} (it is "
                f"{job.status}); an exit step ends a running job's process"
            )
        slot_events = events.setdefault(job.slot, [])
        slot_events.append(JobExited(item.exit.exit_code))
        slot = self.node.state.slot(job.slot)
        if slot.pending_claim is None and slot.activity is not Activity.RETIRING:
            # The schedd has no more work for the claim. A retiring claim ends by itself,
            # and a preempting claim waiting on the slot is not the schedd's to release.
            slot_events.append(ReleaseClaim())
        if job.spec is not None and job.spec.is_crontab:
            requeued = dataclasses.replace(
                job, status=JobStatus.IDLE, slot=None, deferral_time=None
            )
            self.jobs[job.name] = _scheduled(requeued, now)
        else:
            self.jobs[job.name] = dataclasses.replace(job, status=JobStatus.COMPLETED)

    # -- the schedd and the node's answers -----------------------------------------------

    def _keep_alive(self, now: float, events: dict[str, list[Event]]) -> None:
        interval = (self.agent or SimulatedAgent()).alive_interval
        if interval is None or now - self.last_alive < interval:
            return
        self.last_alive = now
        for slot in self.node.state.slots:
            if slot.claim is not None:
                events.setdefault(slot.name, []).insert(0, LeaseRenewed())

    def _answers(self, now: float, events: dict[str, list[Event]]) -> None:
        present = {slot.name for slot in self.node.state.slots}
        still = []
        for when, name, event in self.due:
            if when > now:
                still.append((when, name, event))
            elif name in present:
                events.setdefault(name, []).append(event)
        self.due = still

    def _after(self, action: Action, now: float, interval: float) -> None:
        self.actions.append((now, action))
        ignoring = frozenset(job.name for job in self.jobs.values() if job.ignores_soft_kill)
        base = self.agent or SimulatedAgent()
        agent = dataclasses.replace(base, ignores_soft_kill=base.ignores_soft_kill | ignoring)
        answer = agent_answer(action, agent, now, interval)
        if answer is not None:
            self.due.append(answer)

    def _reconcile(self) -> None:
        """Each job's status from the claims on the machine: a job no claim holds is Idle."""
        holders: dict[str, tuple[str, bool]] = {}
        for slot in self.node.state.slots:
            if slot.claim is not None:
                holders[slot.claim.job_id] = (slot.name, slot.claim.active)
            if slot.pending_claim is not None:
                holders.setdefault(slot.pending_claim.job_id, (slot.name, False))
        for name, job in self.jobs.items():
            if job.status in (JobStatus.COMPLETED, JobStatus.HELD):
                continue
            held = holders.get(name)
            if held is None:
                status, where = JobStatus.IDLE, None
            else:
                where = held[0]
                status = JobStatus.RUNNING if held[1] else JobStatus.MATCHED
            self.jobs[name] = dataclasses.replace(job, status=status, slot=where)

    # -- the negotiator ------------------------------------------------------------------

    def _negotiate(
        self, now: float, live: Mapping[str, Fact], events: dict[str, list[Event]]
    ) -> None:
        """One negotiation cycle over the slot ads as the startd publishes them now; each
        match goes to the startd as the schedd's claim, activated at once on an Unclaimed
        slot (`_activate` does it later for a claim that must wait)."""
        self._activate(events, now)
        interval = self.scenario.polling_interval
        for name, job in list(self.jobs.items()):
            if job.status is JobStatus.IDLE and job.deferral_time is not None:
                self.jobs[name] = _scheduled(job, now)
        idle = [
            IdleJob(job.name, job.ad, order)
            for order, job in enumerate(self.jobs.values())
            if job.status is JobStatus.IDLE and _may_match(job, now, interval)
        ]
        if not idle:
            return
        offers = [
            slot_offer(ad.attributes, ad.expressions, now)
            for ad in startd.published_ads(self.node, live, now)
        ]
        # The timeline plays the startd's side of the policy texts, whose preempting claims
        # retire the running job ("MAXJOBRETIREMENTTIME", "Disabling and Enabling
        # Preemption"): its negotiator considers early preemption, so a claim with
        # retirement time left is still matched (the operator's follows the Pool's knob).
        cycle = negotiate(idle, offers, preemption=_TIMELINE_PREEMPTION)
        for job_id, why in cycle.rejections.items():
            self.jobs[job_id] = dataclasses.replace(self.jobs[job_id], unmatched=why)
        for matched in cycle.matches:
            job = self.jobs[matched.job]
            claim_id = f"{job.name}#{job.matches + 1}"
            sent: list[Event] = [Match(claim_id, job.ad, job_id=job.name)]
            unclaimed = self.node.state.slot(matched.slot).state is State.UNCLAIMED
            if unclaimed and _due(job, now):
                sent.append(ActivateClaim())
            events.setdefault(matched.slot, []).extend(sent)
            self.jobs[job.name] = dataclasses.replace(
                job,
                status=JobStatus.MATCHED,
                slot=matched.slot,
                matches=job.matches + 1,
                unmatched=None,
            )

    def _activate(self, events: dict[str, list[Event]], now: float) -> None:
        """The schedd starts the claim's job on a Claimed/Idle slot (a preempting claim that
        took over, transition 23, a claim whose first activation was refused, or a deferred
        job's claim at its DeferralTime)."""
        for slot in self.node.state.slots:
            claim = slot.claim
            if slot.state is not State.CLAIMED or slot.activity is not Activity.IDLE:
                continue
            job = self.jobs.get(claim.job_id) if claim is not None else None
            if job is not None and job.status is JobStatus.MATCHED and _due(job, now):
                events.setdefault(slot.name, []).append(ActivateClaim())


def _scheduled(job: QueuedJob, now: float) -> QueuedJob:
    """An idle job's DeferralTime (`schedd._scheduled` for the timeline's queue): a crontab
    job's next time when it has none or missed its window unmatched; a deferred job's
    deferralTime evaluated at submission (QDate = now), Held once its window passed."""
    spec = job.spec
    if spec is None or not spec.is_time_scheduled:
        return job
    at = job.deferral_time
    crontab = crontab_of(spec)
    if crontab is not None:
        if at is None or missed(at, spec.window_seconds, now):
            then = next_cron_time(crontab, now)
            ad = submit_ad(spec, job.name, deferral_time=then)
            return dataclasses.replace(job, ad=ad, deferral_time=then)
        return job
    if at is None:
        value = submit_ad(spec, job.name, qdate=math.floor(now)).eval("DeferralTime")
        if isinstance(value, bool) or not isinstance(value, int | float):
            return dataclasses.replace(job, status=JobStatus.HELD)
        at = math.floor(value)
        job = dataclasses.replace(
            job, ad=submit_ad(spec, job.name, deferral_time=at), deferral_time=at
        )
    if missed(at, spec.window_seconds, now):
        return dataclasses.replace(job, status=JobStatus.HELD)
    return job


def _may_match(job: QueuedJob, now: float, interval: float) -> bool:
    if job.spec is None or not job.spec.is_time_scheduled:
        return True
    if job.deferral_time is None:
        return False
    return may_match(job.deferral_time, match_prep_time(job.spec), now, interval)


def _due(job: QueuedJob, now: float) -> bool:
    """Whether the job's claim may be activated: its DeferralTime (if any) has come."""
    return job.deferral_time is None or now >= job.deferral_time


def _whole(value: float) -> float:
    return int(value) if float(value).is_integer() else value
