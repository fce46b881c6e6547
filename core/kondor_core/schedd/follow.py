"""Following one job's life (docs/jobs.md, steps 4 and 5): what its status becomes from its
user commands (`spec.hold`, `spec.remove`: condor_hold, condor_release, condor_rm), the
agent's answer to its current claim, and MATCH_TIMEOUT (`follow`), and whether time alone may
change a job (`changes_with_time`). As HTCondor's startd reports and its schedd decides, the
agent writes only its answer (`status.execution`); every other field of the status is
written here, by the operator.

Time is epoch seconds, given; nothing here reads a clock.
"""

from __future__ import annotations

import math
from typing import Any

from kondor_core.api import (
    ExecutionJob,
    ExecutionJobStatus,
    JobExecution,
    PoolSpec,
    condition,
    format_time,
    parse_time,
    set_condition,
)
from kondor_core.classads import ExpressionError
from kondor_core.jobs.deferral import (
    HOLD_MISSED_DEFERRED_EXECUTION_TIME,
    MISSED_REASON,
    crontab_of,
    missed,
    next_cron_time,
)
from kondor_core.schedd.change import JobChange, operator_part
from kondor_core.schedd.identity import ad_of

#: HoldReasonCode 1, UserRequest ("Job ClassAd Attributes": HoldReasonCode).
HOLD_USER_REQUEST = 1
#: HoldReasonCode 6, FailedToCreateProcess: a Failed answer that names no code of its own.
HOLD_FAILED_TO_CREATE_PROCESS = 6
#: Statuses a job never leaves (a Completed or Removed job leaves HTCondor's queue).
FINAL = ("Completed", "Removed")
#: Answers that mean the job's process started under the claim (numJobStarts counts them).
_STARTED = ("Running", "Suspended", "Exited", "Killed")
#: The condition that says whether the job holds a match, and names its last claim: the
#: claim number survives a match that ended unanswered, so the next claim never repeats it.
MATCHED = "Matched"


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
    kills its process); a job back to Idle has neither. A job whose JobStatus changes gets
    EnteredCurrentStatus `now`.

    The schedd is the one writer of these fields: the agent only reports (`execution`).
    """
    if job.metadata.deletion_timestamp:
        return None
    old = job.status
    status = old if old is not None else ExecutionJobStatus()
    if status.cluster_id is None and cluster_id is not None:
        status = status.model_copy(update={"cluster_id": cluster_id})
    new, why = _next(job, status, now, settings)
    new, why = _scheduled(job, status, new, why, now)
    if new.job_status != status.job_status:
        new = new.model_copy(update={"entered_current_status": format_time(now)})
    if old is not None and operator_part(old) == operator_part(new):
        return None
    return JobChange.of(job, new, new.execution_point, why)


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
        return claim_answer(status) is None
    return job.spec.is_time_scheduled


def _next(
    job: ExecutionJob, status: ExecutionJobStatus, now: float, settings: PoolSpec
) -> tuple[ExecutionJobStatus, str]:
    spec = job.spec
    if status.job_status in FINAL:
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
    answer = claim_answer(status)
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


def claim_answer(status: ExecutionJobStatus) -> JobExecution | None:
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
        value = ad_of(job).eval("DeferralTime")
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
