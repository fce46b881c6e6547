"""The schedd's decisions (docs/jobs.md steps 1, 4, 5): a job follows its commands and the
agent's answers; one cycle matches idle jobs to fresh ExecutionPoints' slots."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import classad2
import pytest
import yaml

from kondor_core import startd
from kondor_core.api import (
    ExecutionJob,
    ExecutionJobStatus,
    ExecutionPoint,
    Machine,
    PoolSpec,
    SlotPolicySpec,
    format_time,
)
from kondor_core.config import compile_policy
from kondor_core.schedd.change import JobChange, status_patch
from kondor_core.schedd.cycle import plan_cycle, submitter_usage
from kondor_core.schedd.follow import changes_with_time, follow
from kondor_core.schedd.identity import ad_of, is_nice, reserve_cluster_ids, stored_cluster_id

ROOT = Path(__file__).resolve().parents[3]
NOW = 1_800_000_000.0
SETTINGS = PoolSpec()
CREATED = format_time(NOW - 600)
UID = "0000-aaaa"


def job(
    status: dict[str, Any] | None = None,
    *,
    name: str = "j1",
    labels: dict[str, str] | None = None,
    created: str = CREATED,
    uid: str = UID,
    **spec: Any,
) -> ExecutionJob:
    body: dict[str, Any] = {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": uid,
            "creationTimestamp": created,
            "labels": labels or {},
        },
        "spec": {"owner": "alice", "process": {"executable": "/bin/true"}, **spec},
    }
    if status is not None:
        body["status"] = status
    return ExecutionJob.model_validate(body)


MATCHED = {
    "jobStatus": "Idle",
    "clusterId": 7,
    "executionPoint": "node-a",
    "slot": "slot1@node-a",
    "claimId": f"{UID}#1",
    "numJobMatches": 1,
    "matchTime": format_time(NOW - 5),
}


def answer(state: str, claim: str = f"{UID}#1", **fields: Any) -> dict[str, Any]:
    return {"claimId": claim, "state": state, **fields}


def followed(j: ExecutionJob, now: float = NOW, **kw: Any) -> JobChange | None:
    return follow(j, now, SETTINGS, **kw)


# ---- follow: the table of docs/jobs.md steps 4 and 5 ------------------------------------------

FOLLOW_TABLE = [
    # (why, status, spec, expected status fields, expected ExecutionPoint)
    (
        "Rejected -> Idle, claim and ExecutionPoint cleared, LastRejMatchReason = the reason",
        {**MATCHED, "execution": answer("Rejected", reason="START is false for the job")},
        {},
        {
            "jobStatus": "Idle",
            "lastRejMatchReason": "START is false for the job",
            "claimId": None,
            "executionPoint": None,
            "slot": None,
            "matchTime": None,
            "numJobStarts": 0,
        },
        None,
    ),
    (
        "Running -> Running, NumJobStarts + 1",
        {**MATCHED, "execution": answer("Running", slot="slot1_1@node-a")},
        {},
        {"jobStatus": "Running", "numJobStarts": 1, "claimId": f"{UID}#1"},
        "node-a",
    ),
    (
        "Suspended (first answer) -> Suspended, the claim started once",
        {**MATCHED, "execution": answer("Suspended")},
        {},
        {"jobStatus": "Suspended", "numJobStarts": 1},
        "node-a",
    ),
    (
        "Suspended -> Running again: no second start for the same claim",
        {
            **MATCHED,
            "jobStatus": "Suspended",
            "numJobStarts": 1,
            "execution": answer("Running"),
        },
        {},
        {"jobStatus": "Running", "numJobStarts": 1},
        "node-a",
    ),
    (
        "Exited -> Completed with ExitCode and the agent's end time as CompletionDate",
        {
            **MATCHED,
            "jobStatus": "Running",
            "numJobStarts": 1,
            "execution": answer("Exited", exitCode=3, endTime="2027-01-01T00:00:00Z"),
        },
        {},
        {
            "jobStatus": "Completed",
            "exitCode": 3,
            "completionDate": "2027-01-01T00:00:00Z",
            "numJobStarts": 1,
        },
        "node-a",
    ),
    (
        "Exited by a signal, never seen Running: a start counted, CompletionDate = now",
        {**MATCHED, "execution": answer("Exited", exitSignal=9)},
        {},
        {
            "jobStatus": "Completed",
            "exitSignal": 9,
            "exitCode": None,
            "completionDate": format_time(NOW),
            "numJobStarts": 1,
        },
        "node-a",
    ),
    (
        "Failed -> Held with the agent's reason and code (14 IwdError)",
        {
            **MATCHED,
            "execution": answer("Failed", holdReason="no such directory", holdReasonCode=14),
        },
        {},
        {
            "jobStatus": "Held",
            "holdReason": "no such directory",
            "holdReasonCode": 14,
            "numJobStarts": 0,
        },
        "node-a",
    ),
    (
        "Failed without a code -> Held, 6 FailedToCreateProcess",
        {**MATCHED, "execution": answer("Failed")},
        {},
        {"jobStatus": "Held", "holdReasonCode": 6},
        "node-a",
    ),
    (
        "Killed without hold or remove (vacated) -> Idle, to be matched again",
        {**MATCHED, "jobStatus": "Running", "numJobStarts": 1, "execution": answer("Killed")},
        {},
        {
            "jobStatus": "Idle",
            "claimId": None,
            "executionPoint": None,
            "numJobStarts": 1,
            "lastVacateTime": format_time(NOW),
        },
        None,
    ),
    (
        "the first Running answer sets JobStartDate, from the run's start",
        {**MATCHED, "execution": answer("Running", startTime=format_time(NOW - 5))},
        {},
        {"jobStatus": "Running", "numJobStarts": 1, "jobStartDate": format_time(NOW - 5)},
        "node-a",
    ),
    (
        "a later start keeps the first JobStartDate",
        {
            **MATCHED,
            "numJobStarts": 1,
            "jobStartDate": format_time(NOW - 500),
            "execution": answer("Running", startTime=format_time(NOW - 5)),
        },
        {},
        {"jobStatus": "Running", "numJobStarts": 2, "jobStartDate": format_time(NOW - 500)},
        "node-a",
    ),
    (
        "an answer to an older claim is not an answer",
        {**MATCHED, "claimId": f"{UID}#2", "execution": answer("Rejected", reason="old")},
        {},
        None,
        "node-a",
    ),
    (
        "MATCH_TIMEOUT (120 s) expired -> Idle with why",
        {**MATCHED, "matchTime": format_time(NOW - 121)},
        {},
        {
            "jobStatus": "Idle",
            "claimId": None,
            "lastRejMatchReason": "node-a did not answer the match within MATCH_TIMEOUT (120s)",
        },
        None,
    ),
    (
        "MATCH_TIMEOUT not yet expired: no change",
        {**MATCHED, "matchTime": format_time(NOW - 119)},
        {},
        None,
        "node-a",
    ),
    (
        "spec.hold -> Held, HoldReasonCode 1, claim and ExecutionPoint kept for the agent",
        {**MATCHED, "jobStatus": "Running", "numJobStarts": 1, "execution": answer("Running")},
        {"hold": True},
        {
            "jobStatus": "Held",
            "holdReasonCode": 1,
            "holdReason": "via condor_hold (by user alice)",
            "claimId": f"{UID}#1",
        },
        "node-a",
    ),
    (
        "spec.hold beats the agent's Killed answer: stays Held",
        {
            **MATCHED,
            "jobStatus": "Held",
            "holdReasonCode": 1,
            "holdReason": "via condor_hold (by user alice)",
            "execution": answer("Killed"),
        },
        {"hold": True},
        None,
        "node-a",
    ),
    (
        "hold cleared on a job held by the user -> Idle (condor_release)",
        {
            **MATCHED,
            "jobStatus": "Held",
            "holdReasonCode": 1,
            "holdReason": "via condor_hold (by user alice)",
            "execution": answer("Killed"),
        },
        {},
        {"jobStatus": "Idle", "holdReason": None, "holdReasonCode": None, "claimId": None},
        None,
    ),
    (
        "held by the system (Failed) stays Held without spec.hold",
        {**MATCHED, "jobStatus": "Held", "holdReasonCode": 14, "execution": answer("Failed")},
        {},
        None,
        "node-a",
    ),
    (
        "spec.hold on a job held by the system makes it held by the user (then releasable)",
        {**MATCHED, "jobStatus": "Held", "holdReasonCode": 14, "holdReason": "no such dir"},
        {"hold": True},
        {"jobStatus": "Held", "holdReasonCode": 1},
        "node-a",
    ),
    (
        "spec.remove -> Removed, even Held",
        {**MATCHED, "jobStatus": "Held", "holdReasonCode": 1},
        {"remove": True, "hold": True},
        {"jobStatus": "Removed", "claimId": f"{UID}#1"},
        "node-a",
    ),
    (
        "Completed stays Completed (remove comes too late)",
        {**MATCHED, "jobStatus": "Completed", "exitCode": 0, "execution": answer("Exited")},
        {"remove": True},
        None,
        "node-a",
    ),
]


@pytest.mark.parametrize(
    ("status", "spec", "expected", "execution_point"),
    [row[1:] for row in FOLLOW_TABLE],
    ids=[row[0] for row in FOLLOW_TABLE],
)
def test_follow(
    status: dict[str, Any],
    spec: dict[str, Any],
    expected: dict[str, Any] | None,
    execution_point: str | None,
) -> None:
    before = job(status, **spec)
    change = followed(before)
    if expected is None:
        assert change is None
        return
    assert change is not None
    shown = change.status.model_dump(by_alias=True)
    assert {key: shown[key] for key in expected} == expected
    assert change.execution_point == execution_point
    # The agent's field is carried, never written.
    assert change.status.execution == before.status.execution  # type: ignore[union-attr]
    patch = status_patch(before.status, change.status)
    assert "execution" not in patch["status"]


def test_a_new_job_is_idle_with_its_cluster_id() -> None:
    change = followed(job(None), cluster_id=42)
    assert change is not None
    assert change.status == ExecutionJobStatus(job_status="Idle", cluster_id=42)
    assert status_patch(None, change.status) == {
        "status": {
            "jobStatus": "Idle",
            "clusterId": 42,
            "numJobStarts": 0,
            "numJobMatches": 0,
            "conditions": [],
        }
    }
    assert change.execution_point is None


def test_a_job_keeps_its_cluster_id() -> None:
    assert followed(job({"jobStatus": "Idle", "clusterId": 3}), cluster_id=9) is None


def test_a_deleted_job_is_not_followed() -> None:
    deleting = job(MATCHED).model_copy(deep=True)
    deleting = ExecutionJob.model_validate(
        {
            **deleting.model_dump(by_alias=True),
            "metadata": {
                **deleting.metadata.model_dump(by_alias=True),
                "deletionTimestamp": format_time(NOW),
            },
        }
    )
    assert followed(deleting, NOW + 1000) is None


def test_an_exit_after_running_is_followed_to_completed() -> None:
    # The agent writes its answer alone (status.execution); the operator's follow makes the
    # schedd's fields of it, EnteredCurrentStatus with them.
    running = {
        **MATCHED,
        "jobStatus": "Running",
        "numJobStarts": 1,
        "jobStartDate": format_time(NOW - 60),
        "execution": answer("Exited", exitCode=3, endTime=format_time(NOW)),
    }
    before = job(running)
    change = followed(before)
    assert change is not None
    assert status_patch(before.status, change.status)["status"] == {
        "jobStatus": "Completed",
        "enteredCurrentStatus": format_time(NOW),
        "exitCode": 3,
        "completionDate": format_time(NOW),
    }


@pytest.mark.parametrize(
    ("why", "status", "spec", "expected"),
    [
        ("new: its ClusterId", None, {}, True),
        ("a match not answered yet: MATCH_TIMEOUT", MATCHED, {}, True),
        (
            "a match answered: the answer's event",
            {**MATCHED, "execution": answer("Running")},
            {},
            False,
        ),
        ("idle, not deferred", {"jobStatus": "Idle", "clusterId": 7}, {}, False),
        (
            "idle, deferred: its window",
            {"jobStatus": "Idle", "clusterId": 7},
            {"deferralTime": "QDate + 600"},
            True,
        ),
        ("running", {**MATCHED, "jobStatus": "Running"}, {}, False),
        ("completed", {**MATCHED, "jobStatus": "Completed"}, {}, False),
        ("held", {"jobStatus": "Held", "clusterId": 7}, {}, False),
    ],
)
def test_which_jobs_time_alone_changes(
    why: str, status: dict[str, Any] | None, spec: dict[str, Any], expected: bool
) -> None:
    assert changes_with_time(job(status, **spec)) is expected, why


def test_a_new_generation_of_a_job_is_a_new_ad() -> None:
    # Ads are kept between cycles by uid and generation: a spec change (a new generation)
    # is seen, an unchanged job is not rebuilt.
    first = job({"jobStatus": "Idle", "clusterId": 7}, requestCpus=1)
    first = first.model_copy(
        update={"metadata": first.metadata.model_copy(update={"generation": 1})}
    )
    assert submitter_usage([first], SETTINGS) == {}
    ads = [ad_of(first), ad_of(first)]
    assert ads[0] is ads[1]
    second = job({"jobStatus": "Idle", "clusterId": 7}, requestCpus=4)
    second = second.model_copy(
        update={"metadata": second.metadata.model_copy(update={"generation": 2})}
    )
    assert ad_of(second).eval("RequestCpus") == 4
    assert ad_of(first).eval("RequestCpus") == 1


def test_the_patch_nulls_what_is_cleared_and_leaves_the_rest() -> None:
    before = job({**MATCHED, "execution": answer("Rejected", reason="no")})
    change = followed(before)
    assert change is not None
    assert status_patch(before.status, change.status) == {
        "status": {
            "executionPoint": None,
            "slot": None,
            "claimId": None,
            "matchTime": None,
            "lastRejMatchReason": "no",
            "conditions": [
                {
                    "type": "Matched",
                    "status": "False",
                    "reason": "Rejected",
                    "message": f"claim {UID}#1 given up: no",
                    "lastTransitionTime": format_time(NOW),
                }
            ],
        }
    }


def test_a_shorter_match_timeout_from_the_pool() -> None:
    pending = job({**MATCHED, "matchTime": format_time(NOW - 5)})
    assert follow(pending, NOW, PoolSpec(match_timeout=10)) is None
    change = follow(pending, NOW + 6, PoolSpec(match_timeout=10))
    assert change is not None and change.status.claim_id is None


def test_a_claim_that_timed_out_is_not_reused() -> None:
    # The agent never answered claim #1; the next match must not be #1 again (a late
    # answer to #1 would be taken for an answer to it).
    pending = job({**MATCHED, "matchTime": format_time(NOW - 500)})
    timed_out = follow(pending, NOW, SETTINGS)
    assert timed_out is not None
    idle_again = pending.model_copy(update={"status": timed_out.status})
    plan = plan_cycle([idle_again], [execution_point("node-a")], NOW, SETTINGS)
    [rematched] = plan.changes
    assert rematched.status.claim_id == f"{UID}#2"
    [held] = rematched.status.conditions
    assert (held.type, held.status, held.message) == (
        "Matched",
        "True",
        f"claim {UID}#2 on slot1@node-a",
    )


# ---- plan_cycle ---------------------------------------------------------------------------------


def machine(name: str, cpus: int = 4, memory: str = "8Gi") -> Machine:
    values = yaml.safe_load((ROOT / "examples/machines/kwok-small.yaml").read_text())
    return Machine.model_validate({**values, "name": name, "cpus": cpus, "memory": memory})


def execution_point(
    name: str,
    *,
    heartbeat: str = "Fresh",
    policy: dict[str, Any] | None = None,
    cpus: int = 4,
) -> ExecutionPoint:
    """An ExecutionPoint whose status is what an agent publishes for a fresh startd."""
    node = startd.start(
        machine(name, cpus), compile_policy(SlotPolicySpec.model_validate(policy or {})), NOW
    )
    node = startd.tick(node, {}, NOW).startd
    status = startd.status(node, {}, NOW).model_copy(update={"last_heartbeat": format_time(NOW)})
    body = {
        "metadata": {"name": name, "uid": f"uid-{name}"},
        "spec": {"nodeName": name},
        "status": {**status.dump(), "operator": {"heartbeat": heartbeat}},
    }
    return ExecutionPoint.model_validate(body)


def idle(name: str, cluster: int, created: float = NOW - 600, **spec: Any) -> ExecutionJob:
    return job(
        {"jobStatus": "Idle", "clusterId": cluster},
        name=name,
        uid=f"uid-{name}",
        created=format_time(created),
        **spec,
    )


def by_name(changes: tuple[JobChange, ...]) -> dict[str, JobChange]:
    return {change.name: change for change in changes}


def test_idle_jobs_are_matched_in_submission_order_into_a_partitionable_slot() -> None:
    jobs = [
        idle("late", 3, NOW - 10, requestCpus=2),
        idle("first", 1, NOW - 100, requestCpus=2),
        idle("second", 2, NOW - 100, requestCpus=2),  # same second: ClusterId decides
    ]
    plan = plan_cycle(jobs, [execution_point("node-a")], NOW, SETTINGS)
    changes = by_name(plan.changes)
    assert plan.idle == 3 and plan.matched == 2
    assert changes["first"].status.slot == "slot1@node-a"
    assert changes["first"].status.claim_id == "uid-first#1"
    assert changes["first"].status.match_time == format_time(NOW)
    assert changes["first"].status.job_status == "Idle"  # Idle until the agent runs it
    assert changes["first"].execution_point == "node-a"
    assert changes["second"].execution_point == "node-a"
    late = changes["late"]
    assert late.execution_point is None and late.status.claim_id is None
    assert late.status.last_rej_match_reason == (
        "slot1@node-a: not enough Cpus: the job needs 2 cores, 0 left of 4"
    )


def test_job_priority_first_then_submission_order() -> None:
    jobs = [
        idle("old", 1, NOW - 100, requestCpus=4),
        idle("urgent", 2, NOW - 1, requestCpus=4, priority=10),
    ]
    changes = by_name(plan_cycle(jobs, [execution_point("node-a")], NOW, SETTINGS).changes)
    assert changes["urgent"].execution_point == "node-a"
    assert changes["old"].execution_point is None


def test_the_job_ad_has_cluster_id_and_qdate() -> None:
    jobs = [idle("q", 5, requirements=f"ClusterId == 5 && QDate == {NOW - 600:.0f}")]
    changes = by_name(plan_cycle(jobs, [execution_point("node-a")], NOW, SETTINGS).changes)
    assert changes["q"].execution_point == "node-a"


def test_a_job_no_slot_meets_stays_idle_with_why_and_is_not_rewritten() -> None:
    jobs = [idle("big", 1, requestCpus=64)]
    plan = plan_cycle(jobs, [execution_point("node-a")], NOW, SETTINGS)
    [change] = plan.changes
    reason = change.status.last_rej_match_reason
    assert change.execution_point is None
    assert reason == "slot1@node-a: not enough Cpus: the job needs 64 cores, 4 left of 4"
    again = idle("big", 1, requestCpus=64).model_copy(update={"status": change.status})
    assert plan_cycle([again], [execution_point("node-a")], NOW, SETTINGS).changes == ()


def test_a_reason_of_the_same_kind_is_not_rewritten_a_new_kind_is() -> None:
    # A busy pool names another slot every cycle: not a write per waiting job per cycle.
    first = plan_cycle([idle("big", 1, requestCpus=64)], [execution_point("node-a")], NOW, SETTINGS)
    [change] = first.changes
    waiting = idle("big", 1, requestCpus=64).model_copy(update={"status": change.status})
    elsewhere = plan_cycle([waiting], [execution_point("node-b", cpus=8)], NOW, SETTINGS)
    assert elsewhere.changes == ()  # "slot1@node-b: not enough Cpus ...": the same kind
    picky = idle("big", 1, requirements='Machine == "node-z"')
    picky = picky.model_copy(update={"status": change.status})
    [other] = plan_cycle([picky], [execution_point("node-a")], NOW, SETTINGS).changes
    assert "Requirements" in (other.status.last_rej_match_reason or "")


def test_requirements_pick_the_execution_point_and_rank_prefers_one() -> None:
    eps = [execution_point("node-a", cpus=2), execution_point("node-b", cpus=8)]
    jobs = [
        idle("wants-b", 1, requirements='Machine == "node-b"'),
        idle("likes-big", 2, rank="TotalCpus"),
    ]
    changes = by_name(plan_cycle(jobs, eps, NOW, SETTINGS).changes)
    assert changes["wants-b"].execution_point == "node-b"
    assert changes["likes-big"].execution_point == "node-b"


def test_stale_and_unknown_execution_points_are_not_offered() -> None:
    eps = [
        execution_point("node-a", heartbeat="Stale"),
        execution_point("node-b", heartbeat="Unknown"),
    ]
    plan = plan_cycle([idle("j", 1)], eps, NOW, SETTINGS)
    [change] = plan.changes
    assert change.execution_point is None
    assert change.status.last_rej_match_reason == "no slot is Unclaimed"


def test_a_slot_is_withheld_until_its_ad_shows_the_match() -> None:
    # Unanswered, then answered Running before the agent published the slot running it
    # (two writes of the agent's): withheld both times; offered once the ad shows the job.
    ep = execution_point("node-a")
    pending = job({**MATCHED, "clusterId": 1}, name="pending", uid="uid-p")
    waiting = idle("next", 2)
    plan = plan_cycle([pending, waiting], [ep], NOW, SETTINGS)
    assert plan.withheld == ("node-a/slot1@node-a",)
    assert by_name(plan.changes)["next"].execution_point is None
    answered = job(
        {**MATCHED, "clusterId": 1, "jobStatus": "Running", "execution": answer("Running")},
        name="pending",
    )
    plan = plan_cycle([answered, waiting], [ep], NOW, SETTINGS)
    assert plan.withheld == ("node-a/slot1@node-a",)
    assert by_name(plan.changes)["next"].execution_point is None
    assert ep.status is not None
    [pslot] = ep.status.slots
    dynamic = pslot.model_copy(
        update={
            "name": "slot1_1@node-a",
            "type": "Dynamic",
            "job": "ns/pending",
            "ad": {**pslot.ad, "Name": "slot1_1@node-a", "JobId": "ns/pending"},
        }
    )
    shown = ep.model_copy(
        update={"status": ep.status.model_copy(update={"slots": [pslot, dynamic]})}
    )
    plan = plan_cycle([answered, waiting], [shown], NOW, SETTINGS)
    assert plan.withheld == ()
    assert by_name(plan.changes)["next"].execution_point == "node-a"


def test_held_removed_claimed_and_unnumbered_jobs_are_not_negotiated() -> None:
    jobs = [
        idle("held", 1, hold=True),
        idle("removed", 2, remove=True),
        job({**MATCHED, "clusterId": 3, "execution": answer("Running")}, name="running"),
        job({"jobStatus": "Idle"}, name="new"),  # no ClusterId yet: follow() gives it one
        job(None, name="unseen"),
    ]
    plan = plan_cycle(jobs, [execution_point("node-a")], NOW, SETTINGS)
    assert plan.idle == 0 and plan.changes == ()


def test_a_new_claim_never_repeats_the_last_answered_one() -> None:
    # Rejected once: #1 answered, back to Idle; the next match is #2 (NumJobMatches counts).
    again = idle("j", 1).model_copy(
        update={
            "status": ExecutionJobStatus(
                job_status="Idle",
                cluster_id=1,
                num_job_matches=1,
                execution={"claimId": "uid-j#1", "state": "Rejected"},  # type: ignore[arg-type]
            )
        }
    )
    [change] = plan_cycle([again], [execution_point("node-a")], NOW, SETTINGS).changes
    assert change.status.claim_id == "uid-j#2"


def test_a_slot_ad_that_does_not_parse_is_reported_not_offered() -> None:
    ep = execution_point("node-a")
    assert ep.status is not None
    broken = ep.status.slots[0].model_copy(
        update={"ad": {**ep.status.slots[0].ad, "Start": "((("}, "expressions": ["Start"]}
    )
    ep = ep.model_copy(update={"status": ep.status.model_copy(update={"slots": [broken]})})
    plan = plan_cycle([idle("j", 1)], [ep], NOW, SETTINGS)
    assert plan.problems and "node-a/slot1@node-a" in plan.problems[0]
    assert plan.changes[0].execution_point is None


@pytest.mark.parametrize(
    ("text", "nice"),
    [
        ("true", True),
        ("1", True),
        ("false", False),
        ("0", False),
        ("Undefined", False),
        ("Error", False),
        ("SomethingElse", False),
    ],
)
def test_a_nice_user_job_is_one_whose_nice_user_is_true(text: str, nice: bool) -> None:
    # classad2 gives Undefined and Error as IntEnum members: neither is a nice-user job.
    assert is_nice(classad2.ClassAd({"NiceUser": classad2.ExprTree(text)})) is nice
    assert is_nice(classad2.ClassAd({})) is False


@pytest.mark.parametrize(
    ("why", "last", "seen", "count", "expected"),
    [
        ("a new Pool: from 1", 0, 0, 2, (1, 2)),
        ("past the counter", 40, 12, 1, (41, 41)),
        ("the newest jobs deleted: the counter remembers", 40, 3, 3, (41, 43)),
        ("jobs from before the counter: past them", 0, 7, 1, (8, 8)),
    ],
)
def test_cluster_ids_are_reserved_past_the_counter_and_every_job_s(
    why: str, last: int, seen: int, count: int, expected: tuple[int, int]
) -> None:
    assert reserve_cluster_ids(last, seen, count) == expected, why


@pytest.mark.parametrize(
    ("pool", "expected"),
    [
        (None, 0),
        ({"metadata": {"name": "default"}}, 0),
        ({"status": {"lastClusterId": 9}}, 9),
        ({"status": {"lastClusterId": "9"}}, 0),
        ({"status": {"lastClusterId": True}}, 0),
    ],
)
def test_the_stored_counter_is_read_from_the_pool_s_status(
    pool: dict[str, Any] | None, expected: int
) -> None:
    assert stored_cluster_id(pool) == expected
