"""The schedd's part of the job path (docs/jobs.md, steps 1, 4 and 5) as pure functions.

HTCondor's condor_schedd keeps the job queue and claims the slots the negotiator matched;
in Kondor the queue is the ExecutionJobs, the claim is the agent's answer in
`status.execution`, and the operator writes what the schedd would record. Two decisions:

- `follow(job, now, settings)`: what one job's status becomes from its user commands
  (`spec.hold`, `spec.remove`: condor_hold, condor_release, condor_rm), the agent's answer
  to its current claim, and MATCH_TIMEOUT;
- `plan_cycle(jobs, execution_points, now, settings)`: one negotiation cycle
  (`kondor_core.negotiation.negotiator.negotiate`) over the idle jobs and the slot ads of
  the fresh ExecutionPoints, and what each job's status becomes from it.

Both return `JobChange`s: the operator's new part of the status (an `ExecutionJobStatus`;
`execution` is the agent's and is never written), which `status_patch` turns into the merge
patch the operator sends. The agent finds its node's jobs by `status.executionPoint` (a
selectable field of the CRD), so a match is one write.

`answer_patch(job, execution, now)` is `follow` run on the agent's side: the schedd's fields
an answer of the agent makes (Running, Completed, ...), written by the agent in the same
request as its answer, so the operator finds nothing left to follow (issue 16: four writes
per job from match to completion).

Time is epoch seconds, given; nothing here reads a clock.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

import classad2

from kondor_core.api import (
    ExecutionJob,
    ExecutionJobStatus,
    ExecutionPoint,
    JobExecution,
    PoolSpec,
    apply_merge_patch,
    condition,
    format_time,
    merge_patch,
    model_patch,
    parse_time,
    set_condition,
)
from kondor_core.api.pool import CycleStats, PoolStatus
from kondor_core.classads import ExpressionError
from kondor_core.jobs import job_ad
from kondor_core.jobs.deferral import (
    HOLD_MISSED_DEFERRED_EXECUTION_TIME,
    MISSED_REASON,
    crontab_of,
    match_prep_time,
    matchable_at,
    may_match,
    missed,
    next_cron_time,
)
from kondor_core.negotiation.accountant import effective_priorities, submitter
from kondor_core.negotiation.accountant import update as update_accountant
from kondor_core.negotiation.fairshare import (
    negotiate_fair,
    offered_weight,
    request_weight,
    weight_of,
)
from kondor_core.negotiation.negotiator import IdleJob, slot_offer
from kondor_core.negotiation.preemption import PreemptionPolicy
from kondor_core.startd.claims import job_id as startd_job_id

#: HoldReasonCode 1, UserRequest ("Job ClassAd Attributes": HoldReasonCode).
HOLD_USER_REQUEST = 1
#: HoldReasonCode 6, FailedToCreateProcess: a Failed answer that names no code of its own.
HOLD_FAILED_TO_CREATE_PROCESS = 6
#: Statuses a job never leaves (a Completed or Removed job leaves HTCondor's queue).
_FINAL = ("Completed", "Removed")
#: Answers that mean the job's process started under the claim (numJobStarts counts them).
_STARTED = ("Running", "Suspended", "Exited", "Killed")
#: The operator's part of the status: every field but the agent's `execution`.
_AGENT_FIELD = "execution"
#: The condition that says whether the job holds a match, and names its last claim: the
#: claim number survives a match that ended unanswered, so the next claim never repeats it.
MATCHED = "Matched"


@dataclass(frozen=True)
class JobChange:
    """What the operator writes for one job: its new status (the operator's fields; the
    agent's `execution` is carried as read and never written) and the ExecutionPoint it is
    matched to (None: none), with a short why for the log."""

    namespace: str
    name: str
    status: ExecutionJobStatus
    execution_point: str | None
    why: str


# ---- follow: one job's status from its commands and the agent's answer -------------------------


def follow(
    job: ExecutionJob, now: float, settings: PoolSpec, *, cluster_id: int | None = None
) -> JobChange | None:
    """The job's status after its user commands, the agent's answer to its claim and
    MATCH_TIMEOUT at `now` (docs/jobs.md, steps 4 and 5); None when nothing changes.

    `cluster_id` is the ClusterId to give a job that has none yet (a new job: Idle, its
    ClusterId, no starts). A deleted job (deletionTimestamp) changes no more.

    In order: a Completed or Removed job stays so; `spec.remove` makes it Removed
    (condor_rm); `spec.hold` makes it Held with HoldReasonCode 1 (condor_hold; a job held
    by the system becomes held by the user, so clearing `spec.hold` releases it); a job
    Held by the user whose `spec.hold` is cleared is Idle (condor_release); then the
    agent's answer to the current claim: Rejected -> Idle with LastRejMatchReason,
    Running -> Running (NumJobStarts + 1 once per claim), Suspended -> Suspended, Exited ->
    Completed with ExitCode/ExitSignal and CompletionDate, Failed -> Held with the agent's
    hold reason, Killed -> Idle, matched again; a match unanswered after MATCH_TIMEOUT ->
    Idle. Commands keep the claim and the ExecutionPoint (the agent finds the job by it and
    kills its process); a job back to Idle has neither.
    """
    if job.metadata.deletion_timestamp:
        return None
    old = job.status
    status = old if old is not None else ExecutionJobStatus()
    if status.cluster_id is None and cluster_id is not None:
        status = status.model_copy(update={"cluster_id": cluster_id})
    new, why = _next(job, status, now, settings)
    new, why = _scheduled(job, status, new, why, now)
    if old is not None and _operator_part(old) == _operator_part(new):
        return None
    return JobChange(job.metadata.namespace or "", job.metadata.name, new, new.execution_point, why)


def answer_patch(job: ExecutionJob, execution: JobExecution, now: float) -> dict[str, Any]:
    """The schedd's fields (a merge patch of `status`, without `execution`) that the agent's
    answer `execution` to the job's current claim makes: `follow` of the job as it is once
    the answer is written. Empty for an answer to another claim, or one that changes none
    of them. The pool's settings play no part: with an answer to the current claim,
    MATCH_TIMEOUT, the only setting `follow` reads, is not looked at."""
    status = job.status
    if status is None or status.claim_id is None or execution.claim_id != status.claim_id:
        return {}
    before = status.execution.dump() if status.execution is not None else {}
    if before.get("claimId") != execution.claim_id:
        before = {}
    merged = JobExecution.model_validate(apply_merge_patch(before, model_patch(execution)))
    answered = job.model_copy(update={"status": status.model_copy(update={"execution": merged})})
    change = follow(answered, now, PoolSpec())
    if change is None:
        return {}
    fields: dict[str, Any] = status_patch(status, change.status).get("status", {})
    return fields


def changes_with_time(job: ExecutionJob) -> bool:
    """Whether `follow` may change the job with no new event, time passing alone: a job
    with no ClusterId yet, a match the agent has not answered (MATCH_TIMEOUT), an idle
    deferred or crontab job (its DeferralTime and window). Every other change comes with
    a change of the job; a caller that follows each changed job needs to follow only these
    besides."""
    status = job.status
    if job.metadata.deletion_timestamp:
        return False
    if status is None or status.cluster_id is None:
        return True
    if status.job_status != "Idle":
        return False
    if status.claim_id is not None:
        return _answer(status) is None
    return job.spec.is_time_scheduled


def _next(
    job: ExecutionJob, status: ExecutionJobStatus, now: float, settings: PoolSpec
) -> tuple[ExecutionJobStatus, str]:
    spec = job.spec
    if status.job_status in _FINAL:
        return status, f"stays {status.job_status}"
    if spec.remove:
        return status.model_copy(update={"job_status": "Removed"}), "condor_rm"
    held_by_user = status.job_status == "Held" and status.hold_reason_code == HOLD_USER_REQUEST
    if spec.hold:
        if held_by_user:
            return status, "stays Held"
        owner = spec.owner or "unknown"
        return status.model_copy(
            update={
                "job_status": "Held",
                "hold_reason": f"via condor_hold (by user {owner})",
                "hold_reason_code": HOLD_USER_REQUEST,
            }
        ), "condor_hold"
    if held_by_user:
        return _idle(status, now, "Released"), "condor_release"
    if status.job_status == "Held":
        return status, "stays Held (held by the system: set spec.hold, then clear it, to release)"
    answer = _answer(status)
    if answer is not None:
        return _answered(status, answer, now, requeue=spec.is_crontab)
    if status.claim_id is not None and status.job_status == "Idle":
        matched = parse_time(status.match_time or "")
        if matched is None or now - matched.timestamp() >= settings.match_timeout:
            where = status.execution_point or "the execution point"
            reason = (
                f"{where} did not answer the match within MATCH_TIMEOUT ({settings.match_timeout}s)"
            )
            return _idle(status, now, "MatchTimeout", reason), "MATCH_TIMEOUT"
    return status, "no change"


def _answer(status: ExecutionJobStatus) -> JobExecution | None:
    """The agent's answer to the job's current claim (None: none yet, or an older claim's)."""
    execution = status.execution
    if execution is None or status.claim_id is None or execution.claim_id != status.claim_id:
        return None
    return execution


def _answered(
    status: ExecutionJobStatus, answer: JobExecution, now: float, *, requeue: bool = False
) -> tuple[ExecutionJobStatus, str]:
    # The job is Idle while its claim is not started: a first answer that says it started
    # counts one start, and later answers of the same claim see it Running already.
    starts = status.num_job_starts
    first_start = status.job_start_date
    if answer.state in _STARTED and status.job_status == "Idle":
        starts += 1
        first_start = first_start or answer.start_time or format_time(now)
    if answer.state == "Rejected":
        reason = answer.reason or f"{status.execution_point} refused the match"
        return _idle(status, now, "Rejected", reason), "match rejected by the startd"
    if answer.state in ("Running", "Suspended"):
        update = {
            "job_status": answer.state,
            "num_job_starts": starts,
            "job_start_date": first_start,
        }
        return status.model_copy(update=update), answer.state
    if answer.state == "Exited" and requeue:
        # A crontab job stays in the queue (on_exit_remove = false) and runs again at its
        # next time, computed when it is re-queued (`_scheduled`).
        idle = _idle(status, now, "Exited", "exited; runs again at its next crontab time")
        update = {
            "num_job_starts": starts,
            "job_start_date": first_start,
            "exit_code": answer.exit_code,
            "exit_signal": answer.exit_signal,
            "deferral_time": None,
        }
        return idle.model_copy(update=update), "exited, re-queued (crontab)"
    if answer.state == "Exited":
        return status.model_copy(
            update={
                "job_status": "Completed",
                "num_job_starts": starts,
                "job_start_date": first_start,
                "exit_code": answer.exit_code,
                "exit_signal": answer.exit_signal,
                "completion_date": answer.end_time or format_time(now),
            }
        ), "exited"
    if answer.state == "Failed":
        return status.model_copy(
            update={
                "job_status": "Held",
                "hold_reason": answer.hold_reason or "the job could not be started",
                "hold_reason_code": answer.hold_reason_code or HOLD_FAILED_TO_CREATE_PROCESS,
            }
        ), "failed to start"
    # Killed with neither hold nor remove (those were handled first): vacated by policy.
    idle = _idle(status, now, "Vacated")
    update = {
        "num_job_starts": starts,
        "job_start_date": first_start,
        "last_vacate_time": format_time(now),
    }
    return idle.model_copy(update=update), "vacated"


def _scheduled(
    job: ExecutionJob,
    before: ExecutionJobStatus,
    status: ExecutionJobStatus,
    why: str,
    now: float,
) -> tuple[ExecutionJobStatus, str]:
    """DeferralTime of an idle, unmatched deferred or crontab job ("Time Scheduling for Job
    Execution"): a crontab job gets its next time when it enters the queue, is re-queued
    or released, and when it could not be matched within its window (it "must wait for
    the next execution time"); a deferred job gets its deferralTime evaluated once, and is
    held with HoldReasonCode 20 once its window has passed unmatched (the starter would
    hold it on arrival)."""
    spec = job.spec
    if not spec.is_time_scheduled or status.job_status != "Idle" or status.claim_id is not None:
        return status, why
    at = status.deferral_time
    crontab = crontab_of(spec)
    if crontab is not None:
        requeued = before.job_status in ("Held", "Running", "Suspended")
        if at is None or requeued or missed(at, spec.window_seconds, now):
            then = next_cron_time(crontab, now)
            if then != at:
                moved = f"next run at {format_time(then)}" if then is not None else "no next run"
                return status.model_copy(update={"deferral_time": then}), f"{why}; {moved}"
        return status, why
    if at is None:
        value = _deferral_time(job)
        if value is None:
            return status.model_copy(
                update={
                    "job_status": "Held",
                    "hold_reason": f"deferralTime {spec.deferral_time!r} does not evaluate to "
                    "a time (seconds since the epoch)",
                    "hold_reason_code": HOLD_FAILED_TO_CREATE_PROCESS,
                }
            ), "deferralTime is no time"
        at = value
        status = status.model_copy(update={"deferral_time": at})
        why = f"{why}; deferred to {format_time(at)}"
    if missed(at, spec.window_seconds, now):
        return status.model_copy(
            update={
                "job_status": "Held",
                "hold_reason": MISSED_REASON,
                "hold_reason_code": HOLD_MISSED_DEFERRED_EXECUTION_TIME,
            }
        ), "missed its deferral window"
    return status, why


def _deferral_time(job: ExecutionJob) -> int | None:
    """The job's deferralTime evaluated in its ad (QDate + 60 ...); None when it is no number."""
    try:
        value = _ad(job).eval("DeferralTime")
    except ExpressionError:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return math.floor(value)


def _idle(
    status: ExecutionJobStatus, now: float, why: str, reason: str | None = None
) -> ExecutionJobStatus:
    """Idle again, to be matched anew: no claim, no hold; LastRejMatchReason when given;
    the Matched condition False, still naming the claim given up."""
    update: dict[str, Any] = {
        "job_status": "Idle",
        "execution_point": None,
        "slot": None,
        "claim_id": None,
        "match_time": None,
        "preemption": None,
        "preempt_slots": None,
        "hold_reason": None,
        "hold_reason_code": None,
    }
    if reason is not None:
        update["last_rej_match_reason"] = reason
    if status.claim_id is not None:
        message = f"claim {status.claim_id} given up: {reason or why}"
        given_up = condition(MATCHED, False, why, message)
        update["conditions"] = set_condition(status.conditions, given_up, now)
    return status.model_copy(update=update)


# ---- patches ------------------------------------------------------------------------------------


def _operator_part(status: ExecutionJobStatus) -> dict[str, Any]:
    dumped = status.dump()
    dumped.pop(_AGENT_FIELD, None)
    return dumped


def status_patch(old: ExecutionJobStatus | None, new: ExecutionJobStatus) -> dict[str, Any]:
    """The merge patch of the status subresource that turns the operator's fields of `old`
    into those of `new` (a field gone becomes null); `execution`, the agent's, is never in
    it. Empty when nothing changes."""
    before = _operator_part(old) if old is not None else {}
    patch = merge_patch(before, _operator_part(new))
    return {"status": patch} if patch else {}


# ---- the negotiation cycle ---------------------------------------------------------------------


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
        or status.job_status in _FINAL
    ):
        return None
    answer = _answer(status)
    if answer is None:
        return status.execution_point, status.slot
    shown = (status.execution_point, startd_job_id(job)) in published
    if answer.state in ("Running", "Suspended") and not shown:
        return status.execution_point, status.slot
    return None


def job_key(job: ExecutionJob) -> str:
    """The job's id in a cycle: namespace/name."""
    return f"{job.metadata.namespace or ''}/{job.metadata.name}"


def submission_key(job: ExecutionJob) -> tuple[float, int, str]:
    """Submission order: creationTimestamp, then ClusterId (then the name, for equal ones)."""
    created = parse_time(job.metadata.creation_timestamp or "")
    status = job.status
    cluster = status.cluster_id if status is not None and status.cluster_id is not None else 0
    return (created.timestamp() if created else math.inf, cluster, job_key(job))


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
    published = {
        (ep.metadata.name, slot.job)
        for ep in execution_points
        if ep.status is not None
        for slot in ep.status.slots
        if slot.job
    }
    pending = {where for job in all_jobs if (where := pending_claim(job, published)) is not None}
    idle = sorted((job for job in all_jobs if is_idle(job)), key=submission_key)
    changes: list[JobChange] = []
    ready = [job for job in idle if _may_match_now(job, now, settings)]
    if len(ready) < len(idle):
        keys = {job_key(job) for job in ready}
        for job in idle:
            if job_key(job) not in keys:
                changes += _rejected(job, _deferred_reason(job, settings))
        idle = ready
    by_key = {job_key(job): job for job in idle}
    queue: list[IdleJob] = []
    for order, job in enumerate(idle):
        try:
            ad = _ad(job)
            name, weight = _submitter_weight(job, ad, settings.slot_weight)
            queue.append(IdleJob(job_key(job), ad, order, name, weight))
        except ExpressionError as error:  # admission parses these; a job from before may not
            changes += _rejected(job, f"the job's ad cannot be built: {error}")
    offers: list[Any] = []
    owners: dict[str, str] = {}
    problems: list[str] = []
    withheld: list[str] = []
    if queue:  # with no job to match, the slots need not become offers
        offers, owners, problems, withheld = _offers(execution_points, pending, now)
    usage = submitter_usage(all_jobs, settings)
    aged = update_accountant(accountant, usage, now, settings)
    priorities = effective_priorities(aged, settings, {job.submitter for job in queue})
    admitted = queue
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
    stamp = format_time(now)
    for matched in cycle.matches:
        job = by_key[matched.job]
        status = job.status or ExecutionJobStatus()
        ep = owners[matched.slot]
        number = status.num_job_matches + 1
        claim = f"{job.metadata.uid or job.metadata.name}#{number}"
        holds = condition(MATCHED, True, "Matched", f"claim {claim} on {matched.slot}")
        new = status.model_copy(
            update={
                "execution_point": ep,
                "slot": matched.slot,
                "claim_id": claim,
                "num_job_matches": number,
                "match_time": stamp,
                "preemption": matched.reason if matched.preempts else None,
                "preempt_slots": list(matched.victims) or None,
                "conditions": set_condition(status.conditions, holds, now),
            }
        )
        why = f"matched to {matched.slot}" + (
            f" (preempting for {matched.reason})" if matched.preempts else ""
        )
        namespace = job.metadata.namespace or ""
        changes.append(JobChange(namespace, job.metadata.name, new, ep, why))
    for key, reason in cycle.rejections.items():
        changes += _rejected(by_key[key], reason)
    stats = CycleStats(
        time=stamp,
        jobs_considered=len(admitted),
        matches=len(cycle.matches),
        preemptions=sum(1 for m in cycle.matches if m.preempts),
        submitters=len(cycle.order),
        rejections=dict(Counter(_reason_kind(r) for r in cycle.rejections.values())),
    )
    return CyclePlan(
        tuple(changes),
        len(admitted),
        len(cycle.matches),
        tuple(problems),
        tuple(withheld),
        aged,
        stats,
    )


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
            name, weight = _submitter_weight(job, _ad(job), settings.slot_weight)
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


def is_nice(ad: Any) -> bool:
    """A nice-user job: NiceUser TRUE in its ad (condor_submit's nice_user; an ExecutionJob
    sets it with `attributes: {NiceUser: "true"}`)."""
    value = ad.get("NiceUser")
    # classad2's Undefined and Error are IntEnum members: not a number that is TRUE.
    plain = isinstance(value, int) and not isinstance(value, bool | classad2.Value)
    return value is True or (plain and value != 0)


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


#: Job ads already built, and the (submitter, SLOT_WEIGHT) of each, by what they are built
#: from. A job's spec cannot change after submission but by a new generation (admission),
#: so a queue of 10,000 jobs is not turned into ClassAds again every cycle (issue 16).
#: Only jobs read from the API server (with a uid and a generation) are kept; the cache is
#: emptied when full. The ads are never modified once built.
_ADS: dict[tuple[Any, ...], Any] = {}
_WEIGHTS: dict[tuple[Any, ...], tuple[str, float]] = {}
_CACHE_SIZE = 100_000


def _ad_key(job: ExecutionJob) -> tuple[Any, ...] | None:
    meta, status = job.metadata, job.status
    if meta.uid is None or meta.generation is None:
        return None
    return (
        meta.uid,
        meta.generation,
        meta.creation_timestamp,
        status.cluster_id if status is not None else None,
        status.deferral_time if status is not None else None,
    )


def _remember(cache: dict[tuple[Any, ...], Any], key: tuple[Any, ...], value: Any) -> None:
    if len(cache) >= _CACHE_SIZE:
        cache.clear()
    cache[key] = value


def _ad(job: ExecutionJob) -> Any:
    key = _ad_key(job)
    if key is not None and (found := _ADS.get(key)) is not None:
        return found
    status = job.status
    created = parse_time(job.metadata.creation_timestamp or "")
    ad = job_ad(
        job.spec,
        job_key(job),
        cluster_id=status.cluster_id if status is not None else None,
        qdate=math.floor(created.timestamp()) if created is not None else None,
        deferral_time=status.deferral_time if status is not None else None,
    )
    if key is not None:
        _remember(_ADS, key, ad)
    return ad


def _submitter_weight(job: ExecutionJob, ad: Any, slot_weight: str) -> tuple[str, float]:
    """The job's submitter (its owner, or nice-user.<owner>) and SLOT_WEIGHT of what it
    requests."""
    key = _ad_key(job)
    if key is not None and (found := _WEIGHTS.get((*key, slot_weight))) is not None:
        return found
    facts = (submitter(job.spec.owner, nice_user=is_nice(ad)), request_weight(slot_weight, ad))
    if key is not None:
        _remember(_WEIGHTS, (*key, slot_weight), facts)
    return facts


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
    namespace = job.metadata.namespace or ""
    return [JobChange(namespace, job.metadata.name, new, None, "no match")]


#: Slot offers already built, by (ExecutionPoint, its resourceVersion, slot): an
#: ExecutionPoint that did not change since the last cycle is not turned into ClassAds
#: again (1,000 nodes, a few of which change between cycles: issue 16). Only the clock
#: (MyCurrentTime) is set anew each cycle.
_OFFERS: dict[tuple[str, str, str], Any] = {}


def _offer(ep: ExecutionPoint, slot: Any, now: float) -> Any:
    version = ep.metadata.resource_version
    if version is None:
        return slot_offer(slot.ad, set(slot.expressions), now)
    key = (ep.metadata.name, version, slot.name)
    offer = _OFFERS.get(key)
    if offer is None:
        offer = slot_offer(slot.ad, set(slot.expressions), now)
        _remember(_OFFERS, key, offer)
    else:
        offer["MyCurrentTime"] = math.floor(now)
    return offer


def _offers(
    execution_points: Iterable[ExecutionPoint], pending: set[tuple[str, str]], now: float
) -> tuple[list[Any], dict[str, str], list[str], list[str]]:
    """The slot ads offered (in ExecutionPoint-name then slot order), which ExecutionPoint
    each slot name is on, the slots that could not be read, and the slots withheld."""
    offers: list[Any] = []
    owners: dict[str, str] = {}
    problems: list[str] = []
    withheld: list[str] = []
    for ep in sorted(execution_points, key=lambda ep: ep.metadata.name):
        status = ep.status
        name = ep.metadata.name
        if status is None or status.operator.heartbeat != "Fresh" or ep.metadata.deletion_timestamp:
            continue
        for slot in status.slots:
            if (name, slot.name) in pending:
                withheld.append(f"{name}/{slot.name}")
                continue
            if not slot.ad:
                problems.append(f"{name}/{slot.name}: the slot publishes no ad")
                continue
            try:
                offers.append(_offer(ep, slot, now))
            except ExpressionError as error:
                problems.append(f"{name}/{slot.name}: {error}")
                continue
            owners[str(slot.ad.get("Name", slot.name))] = name
    return offers, owners, problems, withheld
