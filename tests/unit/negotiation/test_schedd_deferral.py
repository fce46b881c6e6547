"""The schedd's part of time scheduling ("Time Scheduling for Job Execution"): DeferralTime
in the job's status, matched only within its prep time, held when the window passes
unmatched, and a crontab job re-queued at its next time after each exit."""

from __future__ import annotations

import datetime as dt

from kondor_core.api import ExecutionJob, ExecutionJobStatus, PoolSpec, format_time
from kondor_core.schedd.cycle import plan_cycle
from kondor_core.schedd.follow import follow

from .test_schedd import MATCHED, answer, execution_point, job

# 2027-01-15 08:00:00 UTC
NOW = float(int(dt.datetime(2027, 1, 15, 8, 0, tzinfo=dt.UTC).timestamp()))
SETTINGS = PoolSpec(negotiator_interval=20)
HOUR = {"cronMinute": 0, "cronPrepTime": 300}


def _status(j: ExecutionJob, now: float = NOW) -> ExecutionJobStatus:
    change = follow(j, now, SETTINGS, cluster_id=7)
    assert change is not None
    return change.status


def test_a_crontab_job_gets_its_next_time_when_it_enters_the_queue() -> None:
    status = _status(job(None, **HOUR), NOW + 30)
    assert status.job_status == "Idle"
    assert status.deferral_time == NOW + 3600  # 08:00:30 rounds later: 09:00


def test_a_deferred_job_gets_its_deferral_time_evaluated_in_its_ad() -> None:
    # QDate is the creationTimestamp: NOW - 600 in the shared fixture.
    status = _status(job(None, deferralTime="QDate + 660"))
    assert status.deferral_time == NOW + 60


def test_it_is_matched_only_within_its_prep_time() -> None:
    status = {"jobStatus": "Idle", "clusterId": 7, "deferralTime": int(NOW) + 600}
    waiting = job(status, deferralTime=int(NOW) + 600, deferralPrepTime=60)
    plan = plan_cycle([waiting], [execution_point("node-a")], NOW, SETTINGS)
    (change,) = plan.changes
    assert change.execution_point is None and plan.matched == 0
    # matched from DeferralTime - prep - SCHEDD_INTERVAL (the negotiator's interval)
    assert change.status.last_rej_match_reason == (
        f"deferred: DeferralTime {format_time(NOW + 600)}; matched from "
        f"{format_time(NOW + 600 - 60 - 20)}"
    )
    plan = plan_cycle([waiting], [execution_point("node-a")], NOW + 520, SETTINGS)
    assert plan.matched == 1


def test_without_a_prep_time_it_is_matched_at_once_and_waits_on_its_slot() -> None:
    status = {"jobStatus": "Idle", "clusterId": 7, "deferralTime": int(NOW) + 3600}
    plan = plan_cycle(
        [job(status, deferralTime=int(NOW) + 3600)], [execution_point("node-a")], NOW, SETTINGS
    )
    assert plan.matched == 1


def test_a_deferred_job_whose_window_passed_unmatched_is_held_with_code_20() -> None:
    spec = {"deferralTime": int(NOW) - 130, "deferralWindow": 120}
    status = _status(job(None, **spec))
    assert (status.job_status, status.hold_reason_code) == ("Held", 20)
    assert status.hold_reason == (
        "The job missed its deferred execution time and therefore failed to run."
    )
    within = _status(job(None, deferralTime=int(NOW) - 120, deferralWindow=120))
    assert within.job_status == "Idle"


def test_the_agents_missed_answer_holds_the_job_with_its_reason() -> None:
    failed = answer(
        "Failed",
        holdReason="The job missed its deferred execution time and therefore failed to run.",
        holdReasonCode=20,
    )
    j = job({**MATCHED, "deferralTime": int(NOW) - 5, "execution": failed}, deferralTime=1)
    status = _status(j)
    assert (status.job_status, status.hold_reason_code) == ("Held", 20)


def test_a_crontab_job_that_exits_is_requeued_at_its_next_time() -> None:
    running = {
        **MATCHED,
        "jobStatus": "Running",
        "numJobStarts": 1,
        "deferralTime": int(NOW),
        "execution": answer("Exited", exitCode=0, endTime=format_time(NOW + 40)),
    }
    status = _status(job(running, **HOUR), NOW + 40)
    assert status.job_status == "Idle" and status.claim_id is None
    assert status.deferral_time == NOW + 3600
    assert status.exit_code == 0 and status.num_job_starts == 1
    # a job that exits before the agent said Running also moves on: never twice at 08:00
    quick = {**MATCHED, "deferralTime": int(NOW), "execution": answer("Exited", exitCode=0)}
    assert _status(job(quick, **HOUR), NOW).deferral_time == NOW + 3600


def test_a_crontab_job_not_matched_within_its_window_waits_for_the_next_time() -> None:
    idle = {"jobStatus": "Idle", "clusterId": 7, "deferralTime": int(NOW) - 3600}
    status = _status(job(idle, cronMinute=0, cronWindow=60))
    assert (status.job_status, status.deferral_time) == ("Idle", NOW + 3600)
    kept = {"jobStatus": "Idle", "clusterId": 7, "deferralTime": int(NOW) - 30}
    assert follow(job(kept, cronMinute=0, cronWindow=60), NOW, SETTINGS) is None


def test_a_released_crontab_job_gets_a_new_time() -> None:
    held = {
        "jobStatus": "Held",
        "clusterId": 7,
        "holdReasonCode": 1,
        "holdReason": "via condor_hold (by user alice)",
        "deferralTime": int(NOW) - 7200,
    }
    status = _status(job(held, **HOUR))
    assert (status.job_status, status.deferral_time) == ("Idle", NOW + 3600)


def test_a_crontab_job_without_prep_time_is_matched_about_its_time() -> None:
    status = {"jobStatus": "Idle", "clusterId": 7, "deferralTime": int(NOW) + 3600}
    hourly = job(status, cronMinute=0)
    ep = [execution_point("node-a")]
    assert plan_cycle([hourly], ep, NOW, SETTINGS).matched == 0
    assert plan_cycle([hourly], ep, NOW + 3600 - 20, SETTINGS).matched == 1
