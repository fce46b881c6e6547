"""The working state of one `step` of a slot: the slot as replaced so far, the transitions and
actions it made, and the ClassAd evaluation of its knobs against the slot's ad and a claim's
job ("condor_startd Policy Configuration"). The transitions themselves are functions of it,
in the sibling modules: `moves` (entering a state), `events` (what the schedd, the admin and
the agent tell the startd), `states` (the periodic evaluation, one function per state) and
`retirement` (the timers of a claim's eviction)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import classad2

from kondor_core.policy import defaults
from kondor_core.policy.evaluation import StartdPolicy, describe, number, truth
from kondor_core.policy.model import (
    Action,
    ActionKind,
    Claim,
    EngineError,
    Fact,
    JobAd,
    MachineContext,
    SlotState,
    State,
    Transition,
)

#: Attributes the engine itself writes into the evaluation ad.
ENGINE_ATTRS = frozenset(
    a.lower()
    for a in (
        *defaults.PUBLISHED_ATTRIBUTES,
        "CpuIsBusy",
        "RemoteUser",
        "PreemptingOwner",
    )
)


class Stepper:
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
            slot = evolve(slot, {"transitions": (), "act_was_benchmark": False})
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
        """The slot with `changes`; the cached evaluations are dropped."""
        self.s = evolve(self.s, changes)
        self._cache.clear()
        self._ad = None

    def replace_claim(self, **changes: Any) -> None:
        """The slot with its claim changed."""
        assert self.s.claim is not None
        self.replace(claim=dataclasses.replace(self.s.claim, **changes))

    def act(self, kind: ActionKind, reason: str, claim: Claim | None = None, **extra: Any) -> None:
        """An action for the agent, about `claim` (the current one by default)."""
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
        """The slot after this step (its transitions, the step's time) and the actions."""
        final = evolve(self.s, {"transitions": tuple(self.transitions), "last_step": self.now})
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
        """The attributes the engine writes into the evaluation ad: State, Activity, the
        timers (as expressions of MyCurrentTime), the claim's and the preempting claim's."""
        s = self.s
        now = self.now
        desired: dict[str, Any] = {}
        policy = self.policy
        # Time-dependent attributes are expressions of MyCurrentTime, so a polling cycle
        # rewrites only MyCurrentTime (and the facts that changed) in the evaluation ad.
        desired["MyCurrentTime"] = timestamp(now)
        desired["CurrentTime"] = policy.expr("MyCurrentTime")
        desired["ClockMin"] = policy.clock_min_expr
        desired["ClockDay"] = policy.clock_day_expr
        desired["State"] = str(s.state)
        desired["Activity"] = str(s.activity)
        desired["EnteredCurrentState"] = timestamp(s.entered_state)
        desired["EnteredCurrentActivity"] = timestamp(s.entered_activity)
        desired["SlotID"] = s.slot_id
        desired["Name"] = s.name
        desired["LastBenchmark"] = timestamp(s.last_benchmark)
        since = s.cpu_busy_since
        desired["CpuIsBusy"] = since is not None
        desired["CpuBusyTime"] = (
            policy.expr(f"MyCurrentTime - {timestamp(since)}") if since is not None else 0
        )
        current = s.claim
        desired["CurrentRank"] = current.rank if current is not None else 0.0
        if current is not None:
            if current.owner is not None:
                desired["RemoteOwner"] = current.owner
                desired["RemoteUser"] = current.owner
            if current.job_started_at is not None:
                desired["JobStart"] = timestamp(current.job_started_at)
                desired["JobId"] = current.job_id
                total = timestamp(current.suspended_total)
                if current.suspended_since is not None:
                    desired["TotalJobSuspendTime"] = policy.expr(
                        f"{total} + (MyCurrentTime - {timestamp(current.suspended_since)})"
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
        """The evaluation ad for `claim` (None: no job), rebuilt only when what it is built from
        changed."""
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
                clock=timestamp(self.now),
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
            universe = job_value(claim, "JobUniverse")
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
        """Whether knob `name` evaluates to TRUE against `claim`."""
        return truth(self.evaluate_knob(name, claim)) is True

    # ------------------------------------------------------------------ claims and jobs

    def new_claim(self, claim_id: str, job_id: str, job_ad: JobAd, **extra: Any) -> Claim:
        """A claim for a job ad: its id, lease, owner and RANK."""
        ad = as_classad(job_ad)
        attrs = self.job_attrs(ad)
        if not job_id:
            job_id = job_id_of(ad) or claim_id
        lease = number(lookup_attr(ad, "JobLeaseDuration"))
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
        owner = job_value(claim, "Owner")
        claim = dataclasses.replace(claim, owner=owner if isinstance(owner, str) else None)
        rank = number(self.evaluate_knob("RANK", claim))
        return dataclasses.replace(claim, rank=rank if rank is not None else 0.0)

    def job_attrs(self, ad: Any) -> dict[str, Any]:
        """The job's attributes to place under the slot's own (never over them)."""
        attrs: dict[str, Any] = {}
        static = self.policy.static_names()
        for key, value in ad.items():
            if key.lower() in static or key.lower() in ENGINE_ATTRS:
                continue
            if isinstance(value, classad2.ExprTree) and "time" in str(value).lower():
                attrs[key] = self.policy.job_tree(value, field=f"job attribute {key}")
            else:
                attrs[key] = value
        return attrs

    def refresh_job(self, job_ad: JobAd) -> None:
        """The current claim with a newer ad of its job."""
        assert self.s.claim is not None
        ad = as_classad(job_ad)
        if ad is self.s.claim.job_ad:
            return
        owner = job_value(dataclasses.replace(self.s.claim, job_ad=ad), "Owner")
        self.replace_claim(
            job_ad=ad,
            job_attrs=self.job_attrs(ad),
            owner=owner if isinstance(owner, str) else None,
        )

    def start_accepts(self, claim: Claim) -> tuple[bool, str]:
        """Whether START is TRUE for the claim's job, and why not."""
        value = self.evaluate_knob("START", claim)
        if truth(value) is True:
            return True, "START is TRUE for the job"
        return False, f"START is {describe(value)} for the job"

    def suspended_time(self, claim: Claim) -> float:
        """Seconds the claim's job has been suspended, now included."""
        total = claim.suspended_total
        if claim.suspended_since is not None:
            total += self.now - claim.suspended_since
        return total

    def job_age(self, claim: Claim) -> float:
        """The job's run time since the startd started it, minus time suspended."""
        if claim.job_started_at is None:
            return 0.0
        return max(0.0, self.now - claim.job_started_at - self.suspended_time(claim))


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


def timestamp(value: float) -> int | float:
    """A time as published: an int where it is whole."""
    if type(value) is int:  # the common case, on every attribute of every cycle
        return value
    return int(value) if float(value).is_integer() else value


def evolve(slot: SlotState, changes: Mapping[str, Any]) -> SlotState:
    """`dataclasses.replace` for SlotState without re-running __init__ (it is on the hot path;
    SlotState has no __post_init__ or validation to skip)."""
    new = object.__new__(SlotState)
    new.__dict__.update(slot.__dict__)
    new.__dict__.update(changes)
    return new


def lookup_attr(ad: Any, name: str) -> Any:
    """An ad's attribute, None where it has none."""
    try:
        return ad[name]
    except KeyError:
        return None


def job_value(claim: Claim, name: str) -> Any:
    """A job attribute of the claim, evaluated in the job's ad; None where undefined."""
    value = lookup_attr(claim.job_ad, name)
    if isinstance(value, classad2.ExprTree):
        value = value.eval(claim.job_ad)
    if isinstance(value, classad2.Value):
        return None
    return value


def job_id_of(ad: Any) -> str | None:
    """ClusterId.ProcId, else JobName or Name: the job's id where the match names none."""
    cluster = lookup_attr(ad, "ClusterId")
    proc = lookup_attr(ad, "ProcId")
    if isinstance(cluster, int) and isinstance(proc, int):
        return f"{cluster}.{proc}"
    name = lookup_attr(ad, "JobName") or lookup_attr(ad, "Name")
    return name if isinstance(name, str) else None
