"""The startd's state machine for one slot: `step(policy, slot, facts, job_ad, now, events)`.

It follows "State and Activity Transitions" in the reference, transition by
transition (the numbers in `Transition.number` are the reference's), and the
order in which the condor_startd checks them on every polling cycle: retirement
first, then PREEMPT, un-retirement, SUSPEND, CONTINUE, preempting claims, START,
CLAIM_WORKLIFE and draining on an idle claim. Entering Retiring or Idle is
re-evaluated at once, as the startd does, so a zero MaxJobRetirementTime goes
from Busy through Retiring to Preempting in one cycle.

Pure: no clock, no I/O. The caller passes `now` and gets back a new `SlotState`
and the actions for the agent.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import classad2

from kondor_core.policy import defaults
from kondor_core.policy.evaluation import StartdPolicy, describe, number, truth
from kondor_core.policy.model import (
    Action,
    ActionKind,
    ActivateClaim,
    Activity,
    BackfillExited,
    BackfillStarted,
    BenchmarksDone,
    CancelDrain,
    Claim,
    ClaimRequest,
    Drain,
    DrainMode,
    EngineError,
    Event,
    Fact,
    JobAd,
    JobExited,
    JobGone,
    LeaseRenewed,
    MachineContext,
    Match,
    PreemptingClaimWithdrawn,
    ReleaseClaim,
    ResumeForCod,
    Shutdown,
    ShutdownMode,
    SlotKind,
    SlotState,
    State,
    SuspendForCod,
    Transition,
    Vacate,
)

_INF = math.inf
#: Attributes the engine itself writes into the evaluation ad.
_ENGINE_ATTRS = frozenset(
    a.lower()
    for a in (
        *defaults.PUBLISHED_ATTRIBUTES,
        "CpuIsBusy",
        "RemoteUser",
        "PreemptingOwner",
    )
)
_MAX_CHANGES = 32
#: The reasons of the suspension for COD and of its end (the startd's own log lines).
_COD_RUNNING = "a COD job is now running"
_COD_ENDED = "no COD job active"


def step(  # noqa: PLR0917 - the engine's documented positional signature
    policy: StartdPolicy,
    slot: SlotState,
    facts: Mapping[str, Fact],
    job_ad: JobAd | None,
    now: float,
    events: Sequence[Event] = (),
    *,
    machine: MachineContext | None = None,
) -> tuple[SlotState, list[Action]]:
    """Apply `events` to `slot` at time `now`, then run one policy evaluation cycle.

    `facts` are the slot's machine attributes (LoadAvg, CondorLoadAvg, KeyboardIdle,
    ConsoleIdle, Cpus, Memory, ...); the engine adds State, Activity, the timers and the
    claim's attributes itself. `job_ad`, when given, refreshes the ad of the job on the
    current claim (the claim keeps the ad it was made with otherwise). The returned slot's
    `transitions` lists the changes made, each with its reason.
    """
    if slot.deleted:
        raise EngineError(f"{slot.name}: the dynamic slot was released; it takes no more steps")
    if slot.last_step is not None and now < slot.last_step:
        raise EngineError(
            f"{slot.name}: time went backwards: now={now} is before the last step at "
            f"{slot.last_step}; steps must come in time order"
        )
    stepper = _Stepper(policy, slot, facts, now, machine or MachineContext())
    if job_ad is not None and slot.claim is not None:
        stepper.refresh_job(job_ad)
    for event in events:
        stepper.handle(event)
    stepper.evaluate()
    return stepper.finish()


def accepts(
    policy: StartdPolicy,
    slot: SlotState,
    facts: Mapping[str, Fact],
    job_ad: JobAd,
    now: float,
    *,
    machine: MachineContext | None = None,
) -> tuple[bool, str]:
    """Whether the slot's START accepts `job_ad` now (the startd's check of a claim request)."""
    stepper = _Stepper(policy, slot, facts, now, machine or MachineContext())
    claim = stepper.new_claim("check", "check", job_ad)
    return stepper.start_accepts(claim)


def rank(
    policy: StartdPolicy,
    slot: SlotState,
    facts: Mapping[str, Fact],
    job_ad: JobAd,
    now: float,
    *,
    machine: MachineContext | None = None,
) -> float:
    """The slot's RANK for `job_ad` (0 when UNDEFINED), to compare with CurrentRank."""
    stepper = _Stepper(policy, slot, facts, now, machine or MachineContext())
    return stepper.new_claim("rank", "rank", job_ad).rank


def retirement_remaining(
    policy: StartdPolicy,
    slot: SlotState,
    facts: Mapping[str, Fact],
    now: float,
    *,
    machine: MachineContext | None = None,
) -> float:
    """Seconds of retirement the slot's running job has left (0 without a job; may be inf)."""
    stepper = _Stepper(policy, slot, facts, now, machine or MachineContext())
    return stepper.retirement_remaining()


def advertised(
    policy: StartdPolicy,
    slot: SlotState,
    facts: Mapping[str, Fact],
    now: float,
    *,
    machine: MachineContext | None = None,
) -> dict[str, Fact]:
    """The policy attributes the slot publishes in its ad at `now`.

    Requirements is FALSE while the slot takes no match: Matched, Preempting, Drained, a
    preempting claim already waiting, shutting down, or a claim whose retirement cannot be
    undone (draining, PREEMPT) — so a negotiator reading only the ad offers it no job;
    otherwise it is TRUE when START locally evaluates to TRUE, and START's
    text when it depends on the job ("The START Expression", "Matched State").
    """
    stepper = _Stepper(policy, slot, facts, now, machine or MachineContext())
    out: dict[str, Fact] = {
        "State": str(slot.state),
        "Activity": str(slot.activity),
        "EnteredCurrentState": _timestamp(slot.entered_state),
        "EnteredCurrentActivity": _timestamp(slot.entered_activity),
        "CurrentRank": slot.claim.rank if slot.claim is not None else 0.0,
        "LastBenchmark": _timestamp(slot.last_benchmark),
    }
    if not _takes_matches(slot, stepper):
        out["Requirements"] = False
    elif truth(stepper.evaluate_knob("START", None)) is True:
        out["Requirements"] = True
    else:
        out["Requirements"] = stepper.machine.drain_start or policy.knob("START") or "False"
    claim = slot.claim
    if claim is not None:
        owner = _job_value(claim, "Owner")
        if isinstance(owner, str):
            out["RemoteOwner"] = owner
        if claim.job_started_at is not None:
            out["JobId"] = claim.job_id
            out["JobStart"] = _timestamp(claim.job_started_at)
            out["TotalJobRunTime"] = _timestamp(stepper.job_age(claim))
            out["TotalJobSuspendTime"] = _timestamp(stepper.suspended_time(claim))
    if slot.pending_claim is not None and slot.state is State.CLAIMED:
        out["PreemptingRank"] = slot.pending_claim.rank
    return out


def _takes_matches(slot: SlotState, stepper: _Stepper) -> bool:
    """Whether the slot takes a new match now: on a Claimed slot, a preempting one."""
    if slot.state in (State.MATCHED, State.PREEMPTING, State.DRAINED) or slot.deleted:
        return False
    if slot.pending_claim is not None or slot.shutting_down is not None:
        return False
    if slot.suspended_for_cod:
        return False  # Resource::suspendForCOD makes the slot unavailable (COD_REQ)
    return slot.state is not State.CLAIMED or stepper.may_unretire()


def hibernate(
    policy: StartdPolicy,
    slot: SlotState,
    facts: Mapping[str, Fact],
    now: float,
    *,
    machine: MachineContext | None = None,
) -> str | None:
    """HIBERNATE evaluated locally: the sleep state the slot asks for ("NONE", "RAM", ...),
    or None when the policy has no HIBERNATE or it is not a string."""
    if not policy.has("HIBERNATE"):
        return None
    stepper = _Stepper(policy, slot, facts, now, machine or MachineContext())
    value = stepper.evaluate_knob("HIBERNATE", None)
    return value if isinstance(value, str) else None


def as_classad(job_ad: JobAd) -> Any:
    """A job ad as a classad2 ClassAd (a mapping is converted, strings are string values)."""
    if isinstance(job_ad, classad2.ClassAd):
        return job_ad
    if isinstance(job_ad, Mapping):
        return classad2.ClassAd(dict(job_ad))
    raise EngineError(f"a job ad must be a ClassAd or a mapping, not {type(job_ad).__name__}")


def slot_prefix(name: str) -> str:
    """`slot1_2@node-a` -> `slot1_2`: the prefix of cross-slot attribute names."""
    return name.split("@", 1)[0]


def _timestamp(value: float) -> int | float:
    if type(value) is int:  # the common case, on every attribute of every cycle
        return value
    return int(value) if float(value).is_integer() else value


class _Stepper:
    """The working state of one `step`: a slot replaced (never mutated) as transitions happen."""

    def __init__(
        self,
        policy: StartdPolicy,
        slot: SlotState,
        facts: Mapping[str, Fact],
        now: float,
        machine: MachineContext,
    ) -> None:
        self.policy = policy
        # act_was_benchmark only stops the re-evaluation right after benchmarks finish.
        if slot.transitions or slot.act_was_benchmark:
            slot = _evolve(slot, {"transitions": (), "act_was_benchmark": False})
        self.s = slot
        self.facts = facts
        self.now = now
        self.machine = machine
        self.transitions: list[Transition] = []
        self.actions: list[Action] = []
        self._cache: dict[tuple[str, str | None], Any] = {}
        # The evaluation ad as last synced, and for which claim; reset by every replace().
        self._ad: Any = None
        self._ad_claim: str | None = None
        self._facts = policy.without_static(facts)

    # ------------------------------------------------------------------ plumbing

    def replace(self, **changes: Any) -> None:
        self.s = _evolve(self.s, changes)
        self._cache.clear()
        self._ad = None

    def replace_claim(self, **changes: Any) -> None:
        assert self.s.claim is not None
        self.replace(claim=dataclasses.replace(self.s.claim, **changes))

    def act(self, kind: ActionKind, reason: str, claim: Claim | None = None, **extra: Any) -> None:
        claim = claim if claim is not None else self.s.claim
        self.actions.append(
            Action(
                kind=kind,
                slot=self.s.name,
                reason=reason,
                job_id=claim.job_id if claim is not None else None,
                claim_id=claim.claim_id if claim is not None else None,
                **extra,
            )
        )

    def finish(self) -> tuple[SlotState, list[Action]]:
        final = _evolve(self.s, {"transitions": tuple(self.transitions), "last_step": self.now})
        return final, self.actions

    # ------------------------------------------------------------------ the evaluation ad

    def _desired(self, claim: Claim | None) -> tuple[dict[str, Any], dict[str, Any]]:
        """(the engine's own attributes, the whole evaluation ad): the job's attributes under
        the cross-slot attributes, under the facts, under the engine's attributes."""
        engine = self._engine_attrs()
        desired: dict[str, Any] = {}
        if claim is not None:
            desired.update(claim.job_attrs)
        desired.update(self.machine.slot_attrs)
        desired.update(self._facts)
        desired.update(engine)
        return engine, desired

    def _engine_attrs(self) -> dict[str, Any]:
        s = self.s
        now = self.now
        desired: dict[str, Any] = {}
        policy = self.policy
        # Time-dependent attributes are expressions of MyCurrentTime, so a polling cycle
        # rewrites only MyCurrentTime (and the facts that changed) in the evaluation ad.
        desired["MyCurrentTime"] = _timestamp(now)
        desired["CurrentTime"] = policy.expr("MyCurrentTime")
        desired["ClockMin"] = policy.clock_min_expr
        desired["ClockDay"] = policy.clock_day_expr
        desired["State"] = str(s.state)
        desired["Activity"] = str(s.activity)
        desired["EnteredCurrentState"] = _timestamp(s.entered_state)
        desired["EnteredCurrentActivity"] = _timestamp(s.entered_activity)
        desired["SlotID"] = s.slot_id
        desired["Name"] = s.name
        desired["LastBenchmark"] = _timestamp(s.last_benchmark)
        since = s.cpu_busy_since
        desired["CpuIsBusy"] = since is not None
        desired["CpuBusyTime"] = (
            policy.expr(f"MyCurrentTime - {_timestamp(since)}") if since is not None else 0
        )
        current = s.claim
        desired["CurrentRank"] = current.rank if current is not None else 0.0
        if current is not None:
            if current.owner is not None:
                desired["RemoteOwner"] = current.owner
                desired["RemoteUser"] = current.owner
            if current.job_started_at is not None:
                desired["JobStart"] = _timestamp(current.job_started_at)
                desired["JobId"] = current.job_id
                total = _timestamp(current.suspended_total)
                if current.suspended_since is not None:
                    desired["TotalJobSuspendTime"] = policy.expr(
                        f"{total} + (MyCurrentTime - {_timestamp(current.suspended_since)})"
                    )
                else:
                    desired["TotalJobSuspendTime"] = total
                desired["TotalJobRunTime"] = policy.expr(
                    "MyCurrentTime - JobStart - TotalJobSuspendTime"
                )
        pending = s.pending_claim
        if pending is not None and s.state is State.CLAIMED:
            desired["PreemptingRank"] = pending.rank
            if pending.owner is not None:
                desired["PreemptingOwner"] = pending.owner
        return desired

    def ad(self, claim: Claim | None) -> Any:
        key = claim.claim_id if claim is not None else None
        if self._ad is None or self._ad_claim != key:
            s = self.s
            # Everything the engine's attributes and the job's are built from; while these
            # are the same objects as last cycle, only facts and MyCurrentTime are written.
            base = (
                claim,
                s.claim,
                s.pending_claim,
                s.state,
                s.activity,
                s.entered_state,
                s.entered_activity,
                s.last_benchmark,
                s.cpu_busy_since,
                s.slot_id,
                s.name,
                self.machine.slot_attrs or None,
            )
            # Separate cached ads with and without a job keep each one's writes small.
            self._ad = self.policy.evaluation_ad(
                s.name,
                with_job=claim is not None,
                base=base,
                facts=self._facts,
                clock=_timestamp(self.now),
                build=lambda: self._desired(claim),
            )
            self._ad_claim = key
        return self._ad

    def evaluate_knob(self, name: str, claim: Claim | None) -> Any:
        """Evaluate knob `name` against `claim`'s job as TARGET, or locally when claim is None.

        For a vanilla-universe job, `<name>_VANILLA` is used when it is defined and evaluates
        to something other than UNDEFINED ("Claimed State" in the reference).
        """
        key = (name, claim.claim_id if claim is not None else None)
        if key in self._cache:
            return self._cache[key]
        value: Any = classad2.Value.Undefined
        job = claim.job_ad if claim is not None else None
        if name == "START" and self.machine.drain_start is not None:
            # condor_drain -start replaces START while the machine drains.
            tree = self.policy.job_tree(self.machine.drain_start, field="drain -start")
            ad = self.ad(claim)
            value = tree.eval(ad, job) if job is not None else tree.eval(ad)
            self._cache[key] = value
            return value
        if claim is not None and name in defaults.VANILLA_VARIANTS:
            universe = _job_value(claim, "JobUniverse")
            vanilla = self.policy.tree(f"{name}_VANILLA")
            if universe == 5 and vanilla is not None:
                value = vanilla.eval(self.ad(claim), job)
        if isinstance(value, classad2.Value):
            tree = self.policy.tree(name)
            if tree is not None:
                ad = self.ad(claim)
                value = tree.eval(ad, job) if job is not None else tree.eval(ad)
        self._cache[key] = value
        return value

    def knob_is_true(self, name: str, claim: Claim | None) -> bool:
        return truth(self.evaluate_knob(name, claim)) is True

    # ------------------------------------------------------------------ claims and jobs

    def new_claim(self, claim_id: str, job_id: str, job_ad: JobAd, **extra: Any) -> Claim:
        ad = as_classad(job_ad)
        attrs = self.job_attrs(ad)
        if not job_id:
            job_id = _job_id(ad) or claim_id
        lease = number(_lookup_attr(ad, "JobLeaseDuration"))
        lease_duration = lease if lease else defaults.DEFAULT_JOB_LEASE_DURATION
        if lease == 0:
            lease_duration = self.policy.default_lease
        claim = Claim(
            claim_id=claim_id,
            job_id=job_id,
            job_ad=ad,
            claimed_at=self.now,
            lease_duration=lease_duration,
            lease_renewed_at=self.now,
            job_attrs=attrs,
            **extra,
        )
        owner = _job_value(claim, "Owner")
        claim = dataclasses.replace(claim, owner=owner if isinstance(owner, str) else None)
        rank = number(self.evaluate_knob("RANK", claim))
        return dataclasses.replace(claim, rank=rank if rank is not None else 0.0)

    def job_attrs(self, ad: Any) -> dict[str, Any]:
        """The job's attributes to place under the slot's own (never over them)."""
        attrs: dict[str, Any] = {}
        static = self.policy.static_names()
        for key, value in ad.items():
            if key.lower() in static or key.lower() in _ENGINE_ATTRS:
                continue
            if isinstance(value, classad2.ExprTree) and "time" in str(value).lower():
                attrs[key] = self.policy.job_tree(value, field=f"job attribute {key}")
            else:
                attrs[key] = value
        return attrs

    def refresh_job(self, job_ad: JobAd) -> None:
        assert self.s.claim is not None
        ad = as_classad(job_ad)
        if ad is self.s.claim.job_ad:
            return
        owner = _job_value(dataclasses.replace(self.s.claim, job_ad=ad), "Owner")
        self.replace_claim(
            job_ad=ad,
            job_attrs=self.job_attrs(ad),
            owner=owner if isinstance(owner, str) else None,
        )

    def start_accepts(self, claim: Claim) -> tuple[bool, str]:
        value = self.evaluate_knob("START", claim)
        if truth(value) is True:
            return True, "START is TRUE for the job"
        return False, f"START is {describe(value)} for the job"

    def suspended_time(self, claim: Claim) -> float:
        total = claim.suspended_total
        if claim.suspended_since is not None:
            total += self.now - claim.suspended_since
        return total

    def job_age(self, claim: Claim) -> float:
        """The job's run time since the startd started it, minus time suspended."""
        if claim.job_started_at is None:
            return 0.0
        return max(0.0, self.now - claim.job_started_at - self.suspended_time(claim))

    # ------------------------------------------------------------------ retirement

    def in_retirement(self) -> bool:
        return self.s.pending_claim is not None or not self.may_unretire()

    def drain_applies(self) -> bool:
        """Whether the machine's drain applies to this slot's claim: always, but to a claim
        accepted while draining (condor_drain -start) only once the drain is finishing."""
        if self.machine.draining is None:
            return False
        claim = self.s.claim
        return not (
            claim is not None and claim.accepted_while_draining and not self.machine.drain_finishing
        )

    def draining_refuses(self) -> bool:
        """The machine drains and takes no new job (no -start, or the drain is finishing)."""
        return self.machine.draining is not None and self.machine.drain_start is None

    def may_unretire(self) -> bool:
        claim = self.s.claim
        return (
            not self.drain_applies()
            and self.s.shutting_down is None
            and claim is not None
            and claim.may_unretire
            and self.s.pending_claim is None
        )

    def retirement_remaining(self) -> float:
        """MaxJobRetirementTime minus the job's age ("MAXJOBRETIREMENTTIME" in the summary).

        The startd's value is evaluated against the job; the job's own MaxJobRetirementTime
        may lower it, never raise it. Peaceful shutdown makes it infinite (unless the policy
        says -1, "preempt at once"); quick draining makes it zero.
        """
        claim = self.s.claim
        if claim is None or not claim.active:
            return 0.0
        value = number(self.evaluate_knob("MaxJobRetirementTime", claim))
        mjrt = value if value is not None else 0.0
        if (claim.retire_peacefully or self.s.shutting_down is ShutdownMode.PEACEFUL) and (
            mjrt != -1
        ):
            mjrt = _INF
        if self.machine.draining is DrainMode.QUICK:
            mjrt = 0.0
        if claim.accepted_while_draining and self.machine.drain_finishing:
            mjrt = 0.0  # the last job that ran when the drain began is gone
        job_value = _lookup_attr(claim.job_ad, "MaxJobRetirementTime")
        if isinstance(job_value, classad2.ExprTree):
            tree = self.policy.job_tree(job_value, field="job MaxJobRetirementTime", job_is_my=True)
            job_value = tree.eval(claim.job_ad, self.ad(claim))
        job_mjrt = number(job_value)
        if job_mjrt is not None and job_mjrt < mjrt:
            mjrt = job_mjrt
        return max(0.0, mjrt - self.job_age(claim))

    def max_vacate_time(self) -> float:
        """MachineMaxVacateTime, lowered by JobMaxVacateTime, or raised by converting
        retirement time the job still has ("MachineMaxVacateTime" in the summary)."""
        claim = self.s.claim
        if claim is None:
            return 0.0
        machine_time = claim.pledged_max_vacate_time
        job_value = _lookup_attr(claim.job_ad, "JobMaxVacateTime")
        if job_value is None:
            job_value = _lookup_attr(claim.job_ad, "KillSigTimeout")
        if job_value is None:
            return machine_time
        if isinstance(job_value, classad2.ExprTree):
            tree = self.policy.job_tree(job_value, field="job JobMaxVacateTime", job_is_my=True)
            job_value = tree.eval(claim.job_ad, self.ad(claim))
        job_time = number(job_value)
        if job_time is None:
            job_time = 0.0
        if job_time <= machine_time:
            return job_time
        remaining = self.retirement_remaining()
        if remaining >= job_time:
            return job_time
        if remaining > machine_time:
            return remaining
        return machine_time

    def retirement_expired(self) -> bool:
        remaining = self.retirement_remaining()
        coordinated = self.machine.drain_retirement_remaining
        accepted = self.s.claim is not None and self.s.claim.accepted_while_draining
        if self.machine.draining is DrainMode.GRACEFUL and coordinated is not None and not accepted:
            # condor_drain -graceful: every job gets the longest retirement any slot has.
            remaining = max(remaining, coordinated) if self.s.claim_active() else coordinated
        if remaining <= 0:
            return True
        # Enter Preempting early enough that the vacate time ends with the retirement.
        return self.max_vacate_time() >= remaining

    def worklife_expired(self) -> bool:
        claim = self.s.claim
        worklife = self.policy.claim_worklife
        if claim is None or worklife is None or claim.activations == 0:
            return False
        return self.now - claim.claimed_at > worklife

    def claim_closing(self) -> bool:
        s = self.s
        return (
            s.pending_claim is not None
            or s.activity is Activity.RETIRING
            or s.state is State.PREEMPTING
            or self.worklife_expired()
            or self.drain_applies()
            or s.shutting_down is not None
        )

    # ------------------------------------------------------------------ changing state

    def change(
        self,
        state: State,
        activity: Activity,
        reason: str,
        number: int | None = None,
    ) -> None:
        s = self.s
        if s.state is state and s.activity is activity:
            return
        old_state, old_activity = s.state, s.activity
        # Leaving Suspended resumes the job, whatever comes next (it must see the soft kill).
        if old_state is State.CLAIMED and old_activity is Activity.SUSPENDED and s.claim:
            claim = s.claim
            if claim.suspended_since is not None:
                self.replace_claim(
                    suspended_total=claim.suspended_total + (self.now - claim.suspended_since),
                    suspended_since=None,
                )
            if state in (State.CLAIMED, State.PREEMPTING) and self.s.claim and self.s.claim.active:
                self.act(ActionKind.CONTINUE_JOB, reason)
        changes: dict[str, Any] = {"state": state, "activity": activity}
        if state is not old_state:
            changes["entered_state"] = self.now
            changes["entered_activity"] = self.now
        else:
            changes["entered_activity"] = self.now
        changes["act_was_benchmark"] = old_activity is Activity.BENCHMARKING
        self.replace(**changes)
        job = self.s.claim.job_id if self.s.claim is not None else None
        self.transitions.append(
            Transition(
                time=self.now,
                slot=s.name,
                from_state=old_state,
                from_activity=old_activity,
                state=state,
                activity=activity,
                reason=reason,
                number=number,
                job_id=job,
            )
        )
        self.enter(state, activity, reason, state is not old_state)

    def enter(self, state: State, activity: Activity, reason: str, state_changed: bool) -> None:
        s = self.s
        if state is State.OWNER:
            self.drop_claims(reason)
            if s.kind is SlotKind.DYNAMIC:
                self.delete(reason)
                return
            if self.draining_refuses():
                self.change(State.DRAINED, Activity.RETIRING, f"drain-{self.machine.draining}", 36)
                return
            if s.shutting_down is None:
                value = self.evaluate_knob("IS_OWNER", None)
                if truth(value) is not True:
                    self.change(State.UNCLAIMED, Activity.IDLE, f"IS_OWNER is {describe(value)}", 1)
            return
        if state is State.UNCLAIMED:
            if s.kind is SlotKind.DYNAMIC:
                self.delete(reason)
            return
        if state is State.CLAIMED:
            if activity is Activity.SUSPENDED and s.claim is not None:
                self.replace_claim(suspended_since=self.now)
                self.act(ActionKind.SUSPEND_JOB, reason)
            elif activity is Activity.BUSY and self.in_retirement():
                self.change(State.CLAIMED, Activity.RETIRING, self.s.retire_reason or reason, None)
            elif activity is Activity.RETIRING and (s.claim is None or not s.claim.active):
                self.preempt(reason, number=18)
            return
        if state is State.PREEMPTING:
            claim = s.claim
            active = claim is not None and claim.active
            if activity is Activity.VACATING:
                if active:
                    deadline = self.now + self.max_vacate_time()
                    self.replace(vacate_deadline=deadline)
                    assert claim is not None
                    self.act(ActionKind.SOFT_KILL, reason, signal=claim.kill_sig)
                else:
                    self.leave_preempting("no job was running")
            elif activity is Activity.KILLING:
                if active:
                    self.replace(vacate_deadline=None, kill_escalated=False)
                    self.act(ActionKind.HARD_KILL, reason, signal="SIGKILL")
                else:
                    self.leave_preempting("no job was running")
            return
        if state is State.BACKFILL:
            # Backfill/Idle on the way out (to Owner, Matched or Claimed) starts nothing.
            if activity is Activity.IDLE and not s.backfill_running and s.destination is None:
                self.act(ActionKind.START_BACKFILL, reason, claim=None)
            elif activity is Activity.KILLING:
                self.act(ActionKind.KILL_BACKFILL, reason, claim=None)
            return

    def delete(self, reason: str) -> None:
        self.act(
            ActionKind.RELEASE_DYNAMIC_SLOT,
            reason,
            claim=None,
            dynamic_slot=self.s.name,
            parent=self.s.parent,
        )
        self.replace(deleted=True)

    def drop_claims(self, reason: str) -> None:
        s = self.s
        if s.claim is not None:
            self.act(ActionKind.RELEASE_CLAIM, reason)
        if s.pending_claim is not None:
            self.act(ActionKind.RELEASE_CLAIM, reason, claim=s.pending_claim)
        if s.claim is not None or s.pending_claim is not None or s.destination is not None:
            self.replace(
                claim=None,
                pending_claim=None,
                destination=None,
                retire_reason=None,
                evict_fast=False,
                vacate_deadline=None,
            )

    def preempt(self, reason: str, *, number: int | None = None, fast: bool = False) -> None:
        """Enter Preempting: Killing when fast or when PREEMPT was TRUE and WANT_VACATE is not;
        Vacating otherwise ("Preempting State", WANT_VACATE in the summary)."""
        s = self.s
        claim = s.claim
        fast = fast or s.evict_fast
        if fast:
            activity = Activity.KILLING
        elif claim is not None and claim.preempt_was_true and claim.active:
            want_vacate = self.evaluate_knob("WANT_VACATE", claim)
            activity = Activity.KILLING if truth(want_vacate) is False else Activity.VACATING
            if activity is Activity.KILLING:
                reason = f"{reason}; WANT_VACATE is {describe(want_vacate)}"
        else:
            activity = Activity.VACATING
        destination = State.CLAIMED if s.pending_claim is not None else State.OWNER
        self.replace(destination=destination, evict_fast=fast, retire_reason=reason)
        self.change(State.PREEMPTING, activity, reason, number)

    def leave_preempting(self, why: str) -> None:
        s = self.s
        killing = s.activity is Activity.KILLING
        cause = s.retire_reason or "preempted"
        if s.claim is not None:
            self.act(ActionKind.RELEASE_CLAIM, f"{cause}; {why}")
        pending = s.pending_claim
        if (
            pending is not None
            and s.destination is State.CLAIMED
            and self.machine.draining is None
            and s.shutting_down is None
        ):
            self.replace(
                claim=pending,
                pending_claim=None,
                destination=None,
                retire_reason=None,
                evict_fast=False,
                vacate_deadline=None,
            )
            self.change(
                State.CLAIMED,
                Activity.IDLE,
                f"{cause}; {why}; the preempting claim takes over",
                24 if killing else 23,
            )
            return
        self.replace(claim=None, destination=None, vacate_deadline=None)
        self.change(State.OWNER, Activity.IDLE, f"{cause}; {why}", 25 if killing else 22)

    def retire(self, reason: str, *, reversible: bool, peaceful: bool = False) -> None:
        """retire_claim(): Claimed -> Retiring; irreversible for PREEMPT, shutdown and vacate."""
        s = self.s
        if s.state is State.MATCHED:
            self.change(State.OWNER, Activity.IDLE, reason, 8)
            return
        if s.state is not State.CLAIMED or s.claim is None:
            return
        if not reversible:
            self.replace_claim(may_unretire=False, retire_peacefully=peaceful)
        self.replace(retire_reason=reason)
        if s.activity is Activity.IDLE:
            self.preempt(reason, number=10)
        elif s.activity is Activity.BUSY:
            self.change(State.CLAIMED, Activity.RETIRING, reason, 13)
        elif s.activity is Activity.SUSPENDED and not self.s.claim_active():
            self.preempt(reason, number=17)

    # ------------------------------------------------------------------ events

    def handle(self, event: Event) -> None:
        s = self.s
        if isinstance(event, Match):
            self.on_match(event)
        elif isinstance(event, ClaimRequest):
            self.on_claim_request(event)
        elif isinstance(event, ActivateClaim):
            self.on_activate(event)
        elif isinstance(event, JobExited | JobGone):
            self.on_job_end(event)
        elif isinstance(event, LeaseRenewed):
            if s.claim is not None:
                self.replace_claim(lease_renewed_at=self.now)
        elif isinstance(event, ReleaseClaim):
            self.on_release()
        elif isinstance(event, PreemptingClaimWithdrawn):
            if s.pending_claim is not None and s.state is State.CLAIMED:
                self.act(ActionKind.RELEASE_CLAIM, "preempting claim withdrawn", s.pending_claim)
                self.replace(pending_claim=None, destination=None)
        elif isinstance(event, Vacate):
            self.on_vacate(event)
        elif isinstance(event, Shutdown):
            self.on_shutdown(event)
        elif isinstance(event, Drain):
            self.on_drain(event)
        elif isinstance(event, CancelDrain):
            pass  # the machine clears draining; the periodic evaluation does the rest
        elif isinstance(event, BenchmarksDone):
            if s.activity is Activity.BENCHMARKING:
                self.replace(last_benchmark=self.now)
                self.change(State.UNCLAIMED, Activity.IDLE, "benchmarks completed", 4)
            else:
                self.replace(last_benchmark=self.now)
        elif isinstance(event, BackfillStarted):
            if s.state is State.BACKFILL and s.activity is Activity.IDLE:
                self.replace(backfill_running=True)
                self.change(State.BACKFILL, Activity.BUSY, "backfill client started", 26)
        elif isinstance(event, BackfillExited):
            self.on_backfill_exit()
        elif isinstance(event, SuspendForCod):
            self.on_suspend_for_cod()
        elif isinstance(event, ResumeForCod):
            self.on_resume_for_cod()
        else:  # pragma: no cover - the Event union is closed
            raise EngineError(f"{s.name}: unknown event {event!r}")

    def on_suspend_for_cod(self) -> None:
        """Resource::suspendForCOD: a running batch job is suspended ("Suspending because a
        COD job is now running"); a preempting, suspended, idle or absent one is left as it
        is, the slot only marked (it takes no match meanwhile)."""
        s = self.s
        if s.suspended_for_cod:
            return
        self.replace(suspended_for_cod=True)
        if s.state is State.CLAIMED and s.activity in (Activity.BUSY, Activity.RETIRING):
            number = 20 if s.activity is Activity.RETIRING else 14
            self.change(State.CLAIMED, Activity.SUSPENDED, _COD_RUNNING, number)

    def on_resume_for_cod(self) -> None:
        """Resource::resumeForCOD: a batch job suspended meanwhile resumes ("Resuming because
        no COD job active"), into Retiring if its claim is being retired."""
        s = self.s
        if not s.suspended_for_cod:
            return
        self.replace(suspended_for_cod=False)
        if s.state is State.CLAIMED and s.activity is Activity.SUSPENDED:
            if self.in_retirement():
                self.change(State.CLAIMED, Activity.RETIRING, _COD_ENDED, 16)
            else:
                self.change(State.CLAIMED, Activity.BUSY, _COD_ENDED, 15)

    def on_match(self, event: Match) -> None:
        s = self.s
        try:
            claim = self.new_claim(
                event.claim_id,
                event.job_id,
                event.job_ad,
                for_user_priority=event.for_user_priority,
            )
        except EngineError as err:
            raise EngineError(f"{s.name}: match {event.claim_id}: {err}") from None
        refuse = None
        if s.kind is SlotKind.PARTITIONABLE:
            refuse = "a partitionable slot is claimed through a dynamic slot (use step_machine)"
        elif s.state in (State.PREEMPTING, State.DRAINED, State.MATCHED) or s.deleted:
            refuse = f"the slot is {s.state}"
        elif s.shutting_down is not None or self.draining_refuses():
            refuse = "the startd is shutting down or draining"
        elif s.state is State.CLAIMED:
            refuse = self.preempting_claim_refusal(claim)
        if refuse is None:
            ok, why = self.start_accepts(claim)
            if not ok:
                refuse = why
        if refuse is not None:
            self.act(ActionKind.REFUSE_CLAIM, f"match refused: {refuse}", claim)
            return
        if self.machine.draining is not None:  # accepted by condor_drain -start
            claim = dataclasses.replace(claim, accepted_while_draining=True)
        who = f"match with {claim.job_id}"
        if s.state is State.CLAIMED:
            kind = "user priority" if claim.for_user_priority else "RANK"
            self.replace(
                pending_claim=claim,
                destination=State.CLAIMED,
                retire_reason=f"{kind} preemption by {claim.job_id} (RANK {claim.rank:g} > "
                f"CurrentRank {s.claim.rank if s.claim else 0:g})",
            )
            return
        if s.state is State.BACKFILL:
            target = State.CLAIMED if event.claimed else State.MATCHED
            self.replace(pending_claim=claim, destination=target)
            if s.activity is Activity.IDLE:
                self.finish_backfill(who)
            elif s.activity is Activity.BUSY:
                self.change(State.BACKFILL, Activity.KILLING, who, 28)
            return
        if event.claimed:
            self.replace(claim=claim, pending_claim=None, destination=None)
            self.change(
                State.CLAIMED, Activity.IDLE, who, 5 if s.state is State.UNCLAIMED else None
            )
        else:
            self.replace(pending_claim=claim)
            self.change(
                State.MATCHED, Activity.IDLE, who, 6 if s.state is State.UNCLAIMED else None
            )

    def preempting_claim_refusal(self, claim: Claim) -> str | None:
        s = self.s
        if s.pending_claim is not None:
            return "a preempting claim is already waiting"
        if s.activity is Activity.RETIRING and s.claim and not s.claim.may_unretire:
            return "the claim is already being evicted"
        current = s.claim.rank if s.claim is not None else 0.0
        if claim.for_user_priority or claim.rank > current:
            return None
        return f"RANK {claim.rank:g} does not exceed CurrentRank {current:g}"

    def on_claim_request(self, event: ClaimRequest) -> None:
        s = self.s
        pending = s.pending_claim
        if s.state is State.MATCHED and pending is not None and pending.claim_id == event.claim_id:
            claim = dataclasses.replace(pending, claimed_at=self.now, lease_renewed_at=self.now)
            self.replace(claim=claim, pending_claim=None)
            self.change(State.CLAIMED, Activity.IDLE, f"claimed by {claim.job_id}", 9)
            return
        self.actions.append(
            Action(
                kind=ActionKind.REFUSE_CLAIM,
                slot=s.name,
                reason=f"claim request refused: the slot is {s.state}/{s.activity}, "
                f"not matched with claim {event.claim_id}",
                claim_id=event.claim_id,
            )
        )

    def on_activate(self, event: ActivateClaim) -> None:
        s = self.s
        claim = s.claim
        if s.state is not State.CLAIMED or s.activity is not Activity.IDLE or claim is None:
            self.actions.append(
                Action(
                    kind=ActionKind.REFUSE_CLAIM,
                    slot=s.name,
                    reason=f"activation refused: the slot is {s.state}/{s.activity}",
                    job_id=event.job_id,
                )
            )
            return
        if event.job_ad is not None:
            fresh = self.new_claim(claim.claim_id, event.job_id or "", event.job_ad)
            claim = dataclasses.replace(
                claim,
                job_ad=fresh.job_ad,
                owner=fresh.owner,
                job_attrs=fresh.job_attrs,
                job_id=fresh.job_id,
                rank=fresh.rank,
            )
            self.replace(claim=claim)
        if self.claim_closing():
            why = "CLAIM_WORKLIFE expired" if self.worklife_expired() else "the claim is closing"
            self.act(ActionKind.REFUSE_CLAIM, f"activation refused: {why}")
            return
        ok, why = self.start_accepts(claim)
        if not ok:
            self.act(ActionKind.REFUSE_CLAIM, f"activation refused: {why}")
            return
        max_vacate = number(self.evaluate_knob("MachineMaxVacateTime", claim))
        kill_sig = _lookup_attr(claim.job_ad, "KillSig")
        self.replace_claim(
            activations=claim.activations + 1,
            job_started_at=self.now,
            suspended_total=0.0,
            suspended_since=None,
            preempt_was_true=False,
            pledged_max_vacate_time=max_vacate if max_vacate is not None else 600.0,
            kill_sig=str(kill_sig) if isinstance(kill_sig, str | int) else "SIGTERM",
        )
        assert self.s.claim is not None
        self.act(ActionKind.START_JOB, f"claim activated: {self.s.claim.job_id}")
        self.change(State.CLAIMED, Activity.BUSY, "claim activated", 11)

    def on_job_end(self, event: JobExited | JobGone) -> None:
        s = self.s
        what = "job exited" if isinstance(event, JobExited) else "job processes gone"
        if isinstance(event, JobExited):
            what = f"job exited with code {event.exit_code}"
        if s.claim is not None and s.claim.active:
            self.replace_claim(job_started_at=None, suspended_since=None)
        if s.state is State.CLAIMED:
            if s.activity in (Activity.BUSY, Activity.SUSPENDED):
                self.change(State.CLAIMED, Activity.IDLE, what, 12)
            elif s.activity is Activity.RETIRING:
                self.preempt(what, number=18)
        elif s.state is State.PREEMPTING:
            self.leave_preempting(what)

    def on_release(self) -> None:
        s = self.s
        if s.state is State.MATCHED:
            self.change(State.OWNER, Activity.IDLE, "match released by the schedd", 8)
        elif s.state is State.CLAIMED and s.claim is not None:
            self.replace_claim(may_unretire=False)
            self.preempt("claim released by the schedd", number=10)

    def on_vacate(self, event: Vacate) -> None:
        s = self.s
        reason = "vacate -fast" if event.fast else "vacate"
        if s.state is State.MATCHED:
            self.change(State.OWNER, Activity.IDLE, reason, 8)
        elif s.state is State.CLAIMED:
            if s.pending_claim is not None:
                self.act(ActionKind.RELEASE_CLAIM, reason, s.pending_claim)
                self.replace(pending_claim=None)
            if s.claim is not None:
                self.replace_claim(may_unretire=False)
            self.preempt(
                reason, number=10 if s.activity is Activity.IDLE else None, fast=event.fast
            )
        elif s.state is State.PREEMPTING and event.fast and s.activity is Activity.VACATING:
            self.replace(evict_fast=True)
            self.change(State.PREEMPTING, Activity.KILLING, reason, 21)
        elif s.state is State.BACKFILL:
            self.evict_backfill(reason)

    def on_shutdown(self, event: Shutdown) -> None:
        s = self.s
        reason = f"shutdown-{event.mode}"
        self.replace(shutting_down=event.mode)
        if s.state is State.MATCHED:
            self.change(State.OWNER, Activity.IDLE, reason, 8)
        elif s.state is State.CLAIMED:
            if event.mode is ShutdownMode.FAST:
                if s.claim is not None:
                    self.replace_claim(may_unretire=False)
                self.preempt(reason, number=None, fast=True)
            else:
                self.retire(reason, reversible=False, peaceful=event.mode is ShutdownMode.PEACEFUL)
        elif s.state is State.PREEMPTING and event.mode is ShutdownMode.FAST:
            if s.activity is Activity.VACATING:
                self.replace(evict_fast=True)
                self.change(State.PREEMPTING, Activity.KILLING, reason, 21)
        elif s.state is State.BACKFILL:
            self.evict_backfill(reason)
        elif s.state is State.UNCLAIMED:
            self.change(State.OWNER, Activity.IDLE, reason, 2)

    def on_drain(self, event: Drain) -> None:
        if self.machine.draining is None:
            raise EngineError(
                f"{self.s.name}: draining is machine-wide; pass Drain to step_machine"
            )
        s = self.s
        reason = f"drain-{event.mode}"
        if s.state is State.MATCHED:
            self.change(State.OWNER, Activity.IDLE, reason, 8)
        elif s.state is State.CLAIMED:
            if event.mode is DrainMode.GRACEFUL:
                self.retire(reason, reversible=True)
            else:
                if s.claim is not None:
                    self.replace_claim(may_unretire=False)
                self.preempt(
                    reason,
                    fast=event.mode is DrainMode.FAST,
                    number=10 if s.activity is Activity.IDLE else None,
                )
        elif s.state is State.PREEMPTING and event.mode is DrainMode.FAST:
            if s.activity is Activity.VACATING:
                self.replace(evict_fast=True)
                self.change(State.PREEMPTING, Activity.KILLING, reason, 21)
        elif s.state is State.BACKFILL:
            self.evict_backfill(reason)

    def evict_backfill(self, reason: str) -> None:
        s = self.s
        self.replace(destination=State.OWNER, pending_claim=None)
        if s.activity is Activity.IDLE:
            self.finish_backfill(reason)
        elif s.activity is Activity.BUSY:
            self.change(State.BACKFILL, Activity.KILLING, reason, 28)

    def on_backfill_exit(self) -> None:
        s = self.s
        if s.state is not State.BACKFILL:
            return
        self.replace(backfill_running=False)
        if s.activity is Activity.KILLING:
            self.change(State.BACKFILL, Activity.IDLE, "backfill client exited", 29)
            self.finish_backfill("backfill client killed")
        elif s.activity is Activity.BUSY:
            self.change(State.BACKFILL, Activity.IDLE, "backfill client exited on its own", 27)

    def finish_backfill(self, reason: str) -> None:
        """Backfill/Idle after the client is gone: go where the eviction was heading."""
        s = self.s
        destination = s.destination
        pending = s.pending_claim
        if destination is State.CLAIMED and pending is not None:
            self.replace(claim=pending, pending_claim=None, destination=None)
            self.change(State.CLAIMED, Activity.IDLE, f"{reason}; claimed by {pending.job_id}", 31)
        elif destination is State.MATCHED and pending is not None:
            self.replace(destination=None)
            self.change(
                State.MATCHED, Activity.IDLE, f"{reason}; matched with {pending.job_id}", 32
            )
        elif destination is State.OWNER:
            self.replace(destination=None)
            self.change(State.OWNER, Activity.IDLE, reason, 30)

    # ------------------------------------------------------------------ periodic evaluation

    def evaluate(self) -> None:
        """One polling cycle. Like the startd, a change into Retiring or Idle is evaluated
        again at once; any other change waits for the next cycle (so a policy whose SUSPEND
        and CONTINUE are both TRUE flips once per cycle, as HTCondor's does)."""
        self.update_cpu_busy()
        for _ in range(_MAX_CHANGES):
            before = (self.s.state, self.s.activity)
            if self.s.deleted or not self.evaluate_once():
                return
            after = (self.s.state, self.s.activity)
            if after == before:
                continue  # only flags or actions changed (e.g. PREEMPT while retiring)
            if self.s.state is State.BACKFILL or self.s.activity not in (
                Activity.RETIRING,
                Activity.IDLE,
            ):
                return
        raise EngineError(
            f"{self.s.name}: the policy did not settle after {_MAX_CHANGES} changes at "
            f"time {self.now} (last: {self.transitions[-1].reason if self.transitions else '-'})"
        )

    def update_cpu_busy(self) -> None:
        if not self.policy.has("CpuBusy"):
            return
        busy = truth(self.evaluate_knob("CpuBusy", None)) is True
        since = self.s.cpu_busy_since
        if busy and since is None:
            self.replace(cpu_busy_since=self.now)
        elif not busy and since is not None:
            self.replace(cpu_busy_since=None)

    def evaluate_once(self) -> bool:
        """One pass of the startd's eval_policy for the current state; True if something changed."""
        before = (self.s.state, self.s.activity, len(self.transitions), len(self.actions))
        state = self.s.state
        if state is State.OWNER:
            self.eval_owner()
        elif state is State.UNCLAIMED:
            self.eval_unclaimed()
        elif state is State.MATCHED:
            self.eval_matched()
        elif state is State.CLAIMED:
            self.eval_claimed()
        elif state is State.PREEMPTING:
            self.eval_preempting()
        elif state is State.BACKFILL:
            self.eval_backfill()
        elif state is State.DRAINED:
            self.eval_drained()
        after = (self.s.state, self.s.activity, len(self.transitions), len(self.actions))
        return before != after

    def eval_owner(self) -> None:
        s = self.s
        if s.kind is SlotKind.DYNAMIC:
            self.delete("dynamic slot in Owner")
        elif self.draining_refuses():
            self.change(State.DRAINED, Activity.RETIRING, f"drain-{self.machine.draining}", 36)
        elif s.shutting_down is None:
            value = self.evaluate_knob("IS_OWNER", None)
            if truth(value) is not True:
                self.change(State.UNCLAIMED, Activity.IDLE, f"IS_OWNER is {describe(value)}", 1)

    def eval_unclaimed(self) -> None:
        s = self.s
        if s.kind is SlotKind.DYNAMIC:
            self.delete("dynamic slot unclaimed")
            return
        if self.draining_refuses():
            self.change(State.DRAINED, Activity.RETIRING, f"drain-{self.machine.draining}", 37)
            return
        if s.shutting_down is not None:
            self.change(State.OWNER, Activity.IDLE, f"shutdown-{s.shutting_down}", 2)
            return
        is_owner = self.evaluate_knob("IS_OWNER", None)
        if truth(is_owner) is True:
            self.change(State.OWNER, Activity.IDLE, "IS_OWNER is TRUE", 2)
            return
        if s.activity is not Activity.IDLE:
            return
        if not s.act_was_benchmark and self.wants_benchmarks():
            self.act(ActionKind.RUN_BENCHMARKS, "RUNBENCHMARKS is TRUE", claim=None)
            self.change(State.UNCLAIMED, Activity.BENCHMARKING, "RUNBENCHMARKS is TRUE", 3)
            return
        if self.policy.enable_backfill and self.knob_is_true("START_BACKFILL", None):
            self.replace(destination=None, pending_claim=None)
            self.change(State.BACKFILL, Activity.IDLE, "START_BACKFILL is TRUE", 7)

    def wants_benchmarks(self) -> bool:
        text = self.policy.knob("RUNBENCHMARKS")
        if text is None or self.s.suspended_for_cod:
            return False  # "if there's a COD job, we definitely don't want to run benchmarks"
        if self.s.last_benchmark == 0 and text.strip().lower() not in ("false", "0"):
            # "If RUNBENCHMARKS is defined and set to something other than FALSE, the startd
            # will automatically run one set of benchmarks when it first starts up."
            return True
        return self.knob_is_true("RUNBENCHMARKS", None)

    def eval_matched(self) -> None:
        s = self.s
        start = self.evaluate_knob("START", None)
        if truth(start) is False:
            self.drop_claims("START is FALSE")
            self.change(State.OWNER, Activity.IDLE, "START is FALSE", 8)
        elif self.now - s.entered_state >= self.policy.match_timeout:
            self.drop_claims("MATCH_TIMEOUT")
            self.change(State.OWNER, Activity.IDLE, "MATCH_TIMEOUT", 8)

    def eval_claimed(self) -> None:
        s = self.s
        claim = s.claim
        if claim is None:  # defensive: a claimed slot always has a claim
            self.change(State.OWNER, Activity.IDLE, "claim lost")
            return
        if self.now - claim.lease_renewed_at > claim.lease_duration:
            self.replace_claim(may_unretire=False)
            self.replace(pending_claim=None)
            self.preempt("claim lease expired", fast=True)
            return
        activity = s.activity
        if s.suspended_for_cod:
            # ResState::eval_policy: "so long as there's an active COD job, we want to leave
            # the opportunistic claim" suspended: no SUSPEND, CONTINUE, PREEMPT or retirement.
            # A job activated on the claim meanwhile is suspended at once, as the agent
            # freezes it.
            if activity in (Activity.BUSY, Activity.RETIRING):
                number = 20 if activity is Activity.RETIRING else 14
                self.change(State.CLAIMED, Activity.SUSPENDED, _COD_RUNNING, number)
            if self.s.activity is Activity.SUSPENDED:
                return
        if self.in_retirement() and self.retirement_expired():
            if self.knob_is_true("PREEMPT", claim):
                self.replace_claim(preempt_was_true=True)
            reason = self.s.retire_reason or "retirement"
            if activity is Activity.BUSY:
                # Show the retirement the manual describes (13), then its end (18).
                self.change(State.CLAIMED, Activity.RETIRING, reason, 13)
                return
            number = {Activity.SUSPENDED: 17, Activity.RETIRING: 18}.get(activity, 10)
            self.preempt(f"{reason}: retirement time expired", number=number)
            return
        want_suspend = self.knob_is_true("WANT_SUSPEND", claim)
        preempted = claim.preempt_was_true
        if (
            (activity is Activity.BUSY and not want_suspend)
            or (activity is Activity.RETIRING and not preempted and not want_suspend)
            or (activity is Activity.SUSPENDED and not preempted)
        ) and self.knob_is_true("PREEMPT", claim):
            self.replace_claim(preempt_was_true=True, may_unretire=False)
            self.replace(retire_reason="PREEMPT")
            if activity is Activity.RETIRING:
                return  # already retiring; now irreversibly
            number = 16 if activity is Activity.SUSPENDED else 13
            self.change(State.CLAIMED, Activity.RETIRING, "PREEMPT", number)
            return
        if activity is Activity.RETIRING:
            if self.may_unretire():
                self.replace(retire_reason=None)
                self.change(State.CLAIMED, Activity.BUSY, "preempting claim went away", 19)
                return
            if self.retirement_expired():
                self.preempt(f"{s.retire_reason or 'retirement'}: retirement ended", number=18)
                return
        if (
            activity in (Activity.BUSY, Activity.RETIRING)
            and want_suspend
            and self.knob_is_true("SUSPEND", claim)
        ):
            number = 20 if activity is Activity.RETIRING else 14
            self.change(State.CLAIMED, Activity.SUSPENDED, "SUSPEND", number)
            return
        if activity is Activity.SUSPENDED and self.knob_is_true("CONTINUE", claim):
            if not self.in_retirement():
                self.change(State.CLAIMED, Activity.BUSY, "CONTINUE", 15)
            else:
                self.change(State.CLAIMED, Activity.RETIRING, "CONTINUE (in retirement)", 16)
            return
        if activity is Activity.BUSY and s.pending_claim is not None:
            self.change(State.CLAIMED, Activity.RETIRING, s.retire_reason or "preempting claim", 13)
            return
        if activity is Activity.IDLE:
            if s.pending_claim is not None:
                self.preempt(s.retire_reason or "preempting claim", number=10)
                return
            start = self.evaluate_knob("START", claim)
            if truth(start) is False:
                self.preempt("START is FALSE", number=10)
                return
            if self.worklife_expired():
                self.preempt("CLAIM_WORKLIFE expired", number=10)
                return
            if self.drain_applies():
                self.preempt(f"drain-{self.machine.draining}", number=10)
                return
            if s.shutting_down is not None:
                self.preempt(f"shutdown-{s.shutting_down}", number=10)

    def eval_preempting(self) -> None:
        s = self.s
        claim = s.claim
        if s.activity is Activity.VACATING:
            if self.knob_is_true("KILL", claim):
                self.change(State.PREEMPTING, Activity.KILLING, "KILL", 21)
                return
            if s.vacate_deadline is not None and self.now >= s.vacate_deadline:
                self.change(
                    State.PREEMPTING,
                    Activity.KILLING,
                    "MachineMaxVacateTime: the job took too long to vacate",
                    21,
                )
                return
        elif (
            s.activity is Activity.KILLING
            and not s.kill_escalated
            and self.now - s.entered_activity >= self.policy.killing_timeout
        ):
            self.replace(kill_escalated=True)
            self.act(
                ActionKind.HARD_KILL,
                "KILLING_TIMEOUT: killing the job's processes",
                signal="SIGKILL",
                escalate=True,
            )

    def eval_backfill(self) -> None:
        s = self.s
        if s.activity is Activity.KILLING:
            return
        if self.machine.draining is not None:
            self.evict_backfill(f"drain-{self.machine.draining}")
            return
        if s.shutting_down is not None:
            self.evict_backfill(f"shutdown-{s.shutting_down}")
            return
        value = self.evaluate_knob("EVICT_BACKFILL", None)
        if truth(value) is True:
            self.evict_backfill("EVICT_BACKFILL is TRUE")

    def eval_drained(self) -> None:
        s = self.s
        if self.machine.draining is None:
            number = 35 if s.activity is Activity.RETIRING else 34
            self.change(State.OWNER, Activity.IDLE, "draining ended", number)
            return
        if s.activity is Activity.RETIRING and self.machine.drain_complete:
            self.change(State.DRAINED, Activity.IDLE, "every slot is drained", 33)


def _evolve(slot: SlotState, changes: Mapping[str, Any]) -> SlotState:
    """`dataclasses.replace` for SlotState without re-running __init__ (it is on the hot path;
    SlotState has no __post_init__ or validation to skip)."""
    new = object.__new__(SlotState)
    new.__dict__.update(slot.__dict__)
    new.__dict__.update(changes)
    return new


def _lookup_attr(ad: Any, name: str) -> Any:
    try:
        return ad[name]
    except KeyError:
        return None


def _job_value(claim: Claim, name: str) -> Any:
    value = _lookup_attr(claim.job_ad, name)
    if isinstance(value, classad2.ExprTree):
        value = value.eval(claim.job_ad)
    if isinstance(value, classad2.Value):
        return None
    return value


def _job_id(ad: Any) -> str | None:
    cluster = _lookup_attr(ad, "ClusterId")
    proc = _lookup_attr(ad, "ProcId")
    if isinstance(cluster, int) and isinstance(proc, int):
        return f"{cluster}.{proc}"
    name = _lookup_attr(ad, "JobName") or _lookup_attr(ad, "Name")
    return name if isinstance(name, str) else None
