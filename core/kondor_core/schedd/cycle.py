"""One negotiation cycle (docs/jobs.md, step 1) as the schedd plans it: the idle jobs'
ads against the fresh ExecutionPoints' slot ads, one fair-share negotiation, and what
each job's status becomes from it (`plan_cycle`); the submitters' usage and the pool's
size it measures.

Time is epoch seconds, given; nothing here reads a clock.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

from kondor_core.api import (
    ExecutionJob,
    ExecutionJobStatus,
    ExecutionPoint,
    PoolSpec,
    condition,
    format_time,
    set_condition,
)
from kondor_core.api.pool import CycleStats, PoolStatus
from kondor_core.classads import ExpressionError
from kondor_core.jobs import job_id
from kondor_core.jobs.deferral import (
    match_prep_time,
    matchable_at,
    may_match,
)
from kondor_core.negotiation.accountant import effective_priorities
from kondor_core.negotiation.accountant import update as update_accountant
from kondor_core.negotiation.fairshare import (
    negotiate_fair,
    offered_weight,
    weight_of,
)
from kondor_core.negotiation.negotiator import IdleJob, Matched
from kondor_core.negotiation.preemption import PreemptionPolicy
from kondor_core.schedd.change import JobChange
from kondor_core.schedd.follow import FINAL, MATCHED, claim_answer
from kondor_core.schedd.identity import ad_of, submission_key, submitter_weight
from kondor_core.schedd.offers import slot_offers


@dataclass(frozen=True)
class CyclePlan:
    """What one cycle decided: the job changes (matches and new LastRejMatchReasons), how
    many jobs it negotiated for and matched, the slots it could not read (why), and the
    accountant after it."""

    changes: tuple[JobChange, ...]
    idle: int
    matched: int
    problems: tuple[str, ...] = ()
    withheld: tuple[str, ...] = field(default=())
    #: The accountant aged to the cycle's time, with the usage it measured.
    accountant: PoolStatus = field(default_factory=PoolStatus)
    #: The cycle's figures (Pool status.lastCycle; the duration is the caller's to add).
    stats: CycleStats = field(default_factory=CycleStats)


def is_idle(job: ExecutionJob) -> bool:
    """Negotiated for: Idle, not held, not removed, no claim, not being deleted."""
    status = job.status
    return (
        status is not None
        and status.cluster_id is not None
        and status.job_status == "Idle"
        and status.claim_id is None
        and not job.spec.hold
        and not job.spec.remove
        and not job.metadata.deletion_timestamp
    )


def pending_claim(
    job: ExecutionJob, published: Collection[tuple[str, str]] = frozenset()
) -> tuple[str, str] | None:
    """(ExecutionPoint, slot) of a match its slot's published ad does not show yet, else
    None: one the agent has not answered, or answered Running or Suspended before its
    ExecutionPoint published the slot running it (`published`: (ExecutionPoint, JobId) of
    the slot ads; the agent's answer and its slot ads are separate writes)."""
    status = job.status
    if (
        status is None
        or status.claim_id is None
        or status.execution_point is None
        or status.slot is None
        or status.job_status in FINAL
    ):
        return None
    answer = claim_answer(status)
    if answer is None:
        return status.execution_point, status.slot
    shown = (status.execution_point, job_id(job)) in published
    if answer.state in ("Running", "Suspended") and not shown:
        return status.execution_point, status.slot
    return None


def plan_cycle(
    jobs: Iterable[ExecutionJob],
    execution_points: Iterable[ExecutionPoint],
    now: float,
    settings: PoolSpec,
    *,
    accountant: PoolStatus | None = None,
) -> CyclePlan:
    """One negotiation cycle (docs/jobs.md, step 1): the idle jobs (`is_idle`), as job ads
    with ClusterId and QDate, in submission order (`submission_key`), against the slot ads
    of the ExecutionPoints whose heartbeat the operator judged Fresh, in ExecutionPoint-name
    then slot order; one `fairshare.negotiate_fair` call.

    Fair share: `accountant` (the Pool's status) is first aged to `now` with the usage the
    jobs holding a claim make (SLOT_WEIGHT of what each requests; a suspended job counts
    nothing under NEGOTIATOR_DISCOUNT_SUSPENDED_RESOURCES), each job is accounted to its
    submitter (its owner, or nice-user.<owner> for a NiceUser job), and the submitters are
    served by effective priority with their slices of the pie.

    A match makes the job's status name the ExecutionPoint, the slot, a new claim
    (`<uid>#<n>`, n one past any claim the job had) and the match time;
    the job stays Idle until the agent runs it. An unmatched job gets LastRejMatchReason.

    A slot with a match the agent has not answered yet, or has answered before publishing
    the slot running it (`pending_claim`), is not offered: its published ad does not show
    the claim yet, and offering it again would hand the same resources out twice.
    Withholding it, rather than taking the pending jobs' share off its ad, keeps the
    consumption arithmetic in one place (the negotiator's) and cannot double-count once
    the agent publishes the carved slot; the cost is that a partitionable slot takes no
    further job until the agent has answered and published (a polling interval and an
    update's debounce, or MATCH_TIMEOUT at worst).
    """
    all_jobs = list(jobs)
    execution_points = list(execution_points)
    pending = _pending_slots(all_jobs, execution_points)
    idle = sorted((job for job in all_jobs if is_idle(job)), key=submission_key)
    queue, by_key, changes = _queue(idle, now, settings)
    offers: list[Any] = []
    owners: dict[str, str] = {}
    problems: list[str] = []
    withheld: list[str] = []
    if queue:  # with no job to match, the slots need not become offers
        offers, owners, problems, withheld = slot_offers(execution_points, pending, now)
    usage = submitter_usage(all_jobs, settings)
    aged = update_accountant(accountant, usage, now, settings)
    priorities = effective_priorities(aged, settings, {job.submitter for job in queue})
    preemption = PreemptionPolicy.of(settings, priorities, usage)
    cycle = negotiate_fair(
        queue,
        offers,
        priorities=priorities,
        usage=usage,
        free=offered_weight(settings.slot_weight, offers),
        size=pool_weight(settings.slot_weight, execution_points) if queue else 0.0,
        consider_preemption=settings.negotiator_consider_preemption,
        preemption=preemption,
    )
    for matched in cycle.matches:
        changes.append(_matched(by_key[matched.job], matched, owners[matched.slot], now))
    for key, reason in cycle.rejections.items():
        changes += _rejected(by_key[key], reason)
    stats = CycleStats(
        time=format_time(now),
        jobs_considered=len(queue),
        matches=len(cycle.matches),
        preemptions=sum(1 for m in cycle.matches if m.preempts),
        submitters=len(cycle.order),
        rejections=dict(Counter(_reason_kind(r) for r in cycle.rejections.values())),
    )
    return CyclePlan(
        tuple(changes),
        len(queue),
        len(cycle.matches),
        tuple(problems),
        tuple(withheld),
        aged,
        stats,
    )


def _pending_slots(
    jobs: list[ExecutionJob], execution_points: list[ExecutionPoint]
) -> set[tuple[str, str]]:
    """(ExecutionPoint, slot) of every match its slot's published ad does not show yet
    (`pending_claim`): those slots are withheld from the cycle."""
    published = {
        (ep.metadata.name, slot.job)
        for ep in execution_points
        if ep.status is not None
        for slot in ep.status.slots
        if slot.job
    }
    return {where for job in jobs if (where := pending_claim(job, published)) is not None}


def _queue(
    idle: list[ExecutionJob], now: float, settings: PoolSpec
) -> tuple[list[IdleJob], dict[str, ExecutionJob], list[JobChange]]:
    """The negotiator's queue from the idle jobs in submission order: those that may be
    matched now (a deferred job only near its DeferralTime), each as its ad, submitter and
    weight; the jobs by key; and the LastRejMatchReason of those left out (deferred, or
    whose ad cannot be built)."""
    changes: list[JobChange] = []
    ready = [job for job in idle if _may_match_now(job, now, settings)]
    if len(ready) < len(idle):
        keys = {job_id(job) for job in ready}
        for job in idle:
            if job_id(job) not in keys:
                changes += _rejected(job, _deferred_reason(job, settings))
        idle = ready
    by_key = {job_id(job): job for job in idle}
    queue: list[IdleJob] = []
    for order, job in enumerate(idle):
        try:
            ad = ad_of(job)
            name, weight = submitter_weight(job, ad, settings.slot_weight)
            queue.append(IdleJob(job_id(job), ad, order, name, weight))
        except ExpressionError as error:  # admission parses these; a job from before may not
            changes += _rejected(job, f"the job's ad cannot be built: {error}")
    return queue, by_key, changes


def _matched(job: ExecutionJob, matched: Matched, ep: str, now: float) -> JobChange:
    """The job's status once matched to a slot of ExecutionPoint `ep`: the slot, a new
    claim (`<uid>#<n>`, n one past any claim the job had), the match time, what it preempts;
    the Matched condition True."""
    status = job.status or ExecutionJobStatus()
    number = status.num_job_matches + 1
    claim = f"{job.metadata.uid or job.metadata.name}#{number}"
    holds = condition(MATCHED, True, "Matched", f"claim {claim} on {matched.slot}")
    new = status.model_copy(
        update={
            "execution_point": ep,
            "slot": matched.slot,
            "claim_id": claim,
            "num_job_matches": number,
            "match_time": format_time(now),
            "preemption": matched.reason if matched.preempts else None,
            "preempt_slots": list(matched.victims) or None,
            "conditions": set_condition(status.conditions, holds, now),
        }
    )
    why = f"matched to {matched.slot}" + (
        f" (preempting for {matched.reason})" if matched.preempts else ""
    )
    return JobChange.of(job, new, ep, why)


#: Statuses in which a job holds a claim and so counts in its submitter's usage.
_HOLDING = ("Idle", "Running", "Suspended")


def submitter_usage(jobs: Iterable[ExecutionJob], settings: PoolSpec) -> dict[str, float]:
    """Weighted resources in use by submitter: every job holding a claim (matched, running
    or suspended) counts SLOT_WEIGHT of what it requests."""
    usage: dict[str, float] = {}
    for job in jobs:
        status = job.status
        if status is None or status.claim_id is None or status.job_status not in _HOLDING:
            continue
        if status.job_status == "Suspended" and settings.negotiator_discount_suspended_resources:
            continue
        try:
            name, weight = submitter_weight(job, ad_of(job), settings.slot_weight)
        except ExpressionError:
            continue
        usage[name] = usage.get(name, 0.0) + weight
    return usage


def pool_weight(slot_weight: str, execution_points: Iterable[ExecutionPoint]) -> float:
    """The pool's size for the pie: SLOT_WEIGHT summed over every slot (claimed or not;
    a partitionable slot's unclaimed rest and its dynamic slots) of the fresh
    ExecutionPoints. Counting the slots, not the claims, keeps a slot whose job has ended
    but whose job status the operator has not seen yet from counting twice."""
    total = 0.0
    for ep in execution_points:
        status = ep.status
        if status is None or status.operator.heartbeat != "Fresh" or ep.metadata.deletion_timestamp:
            continue
        for slot in status.slots:
            resources = {key: slot.ad.get(key, 0) for key in ("Cpus", "Memory", "Disk", "GPUs")}
            if all(isinstance(v, int | float) for v in resources.values()):
                total += weight_of(slot_weight, resources)
    return total


def _reason_kind(reason: str) -> str:
    """A rejection's kind, for the cycle's counts: what it says of the last slot it names."""
    last = reason.rsplit("; ", 1)[-1]
    last = last.split(": ", 1)[-1] if "@" in last.split(": ", 1)[0] else last
    for kind in ("not enough", "Requirements", "START", "waiting for user priority"):
        if kind in last:
            return kind
    if " is " in last:
        return "slot " + last.split(" is ", 1)[1].split()[0]
    return last[:40]


def _may_match_now(job: ExecutionJob, now: float, settings: PoolSpec) -> bool:
    """A deferred or crontab job is offered to the negotiator only once `time() +
    SCHEDD_INTERVAL >= DeferralTime - DeferralPrepTime` (the negotiator's interval is
    Kondor's SCHEDD_INTERVAL: the queue is looked at once a cycle); one whose DeferralTime
    the schedd has not set yet (or a crontab with no next run) is not offered."""
    spec = job.spec
    if not spec.is_time_scheduled:
        return True
    at = job.status.deferral_time if job.status is not None else None
    if at is None:
        return False
    return may_match(at, match_prep_time(spec), now, settings.negotiator_interval)


def _deferred_reason(job: ExecutionJob, settings: PoolSpec) -> str:
    at = job.status.deferral_time if job.status is not None else None
    if at is None:
        return "deferred: no DeferralTime yet"
    start = matchable_at(at, match_prep_time(job.spec), settings.negotiator_interval)
    after = f"; matched from {format_time(start)}" if start is not None else ""
    return f"deferred: DeferralTime {format_time(at)}{after}"


def _rejected(job: ExecutionJob, reason: str) -> list[JobChange]:
    """LastRejMatchReason, written only when its kind changes (`_reason_kind`: not enough
    of a resource, Requirements, START, user priority, ...): in a busy pool the slot a
    reason names changes every cycle, and a write per waiting job per cycle is what a queue
    of 10,000 jobs cannot afford (issue 16)."""
    status = job.status or ExecutionJobStatus()
    before = status.last_rej_match_reason
    if before == reason or (before is not None and _reason_kind(before) == _reason_kind(reason)):
        return []
    new = status.model_copy(update={"last_rej_match_reason": reason})
    return [JobChange.of(job, new, None, "no match")]
