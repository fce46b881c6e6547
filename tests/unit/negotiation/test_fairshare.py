"""Fair share in one cycle ("Job Scheduling": job and user priorities): submitters served by
effective priority with slices of the pie, JobPrio within a user, unmatchable jobs passed
over, nice users last; through `schedd.plan_cycle` as the operator calls it."""

from __future__ import annotations

from collections import Counter
from typing import Any

from kondor_core.api import ExecutionJob, ExecutionPoint, format_time
from kondor_core.api.pool import PoolSpec, PoolStatus
from kondor_core.schedd.cycle import CyclePlan, plan_cycle

from .test_schedd import NOW, execution_point, job

STATIC = "SLOT_TYPE_1 = cpus=1\nNUM_SLOTS_TYPE_1 = {n}\nSLOT_TYPE_1_PARTITIONABLE = FALSE"


def slots(name: str, n: int) -> ExecutionPoint:
    """An ExecutionPoint of `n` one-core static slots, all Unclaimed."""
    return execution_point(name, cpus=n, policy={"condorConfig": STATIC.format(n=n)})


def queued(owner: str, count: int, start: int = 0, **spec: Any) -> list[ExecutionJob]:
    return [
        job(
            {"jobStatus": "Idle", "clusterId": start + i + 1},
            name=f"{owner}-{start + i}",
            uid=f"uid-{owner}-{start + i}",
            created=format_time(NOW - 600 + start + i),
            owner=owner,
            requestCpus=1,
            **spec,
        )
        for i in range(count)
    ]


def running(owner: str, count: int, **spec: Any) -> list[ExecutionJob]:
    return [
        job(
            {
                "jobStatus": "Running",
                "clusterId": 1000 + i,
                "executionPoint": "elsewhere",
                "slot": f"slot{i}@elsewhere",
                "claimId": f"uid-r-{owner}-{i}#1",
                "execution": {"claimId": f"uid-r-{owner}-{i}#1", "state": "Running"},
            },
            name=f"{owner}-running-{i}",
            uid=f"uid-r-{owner}-{i}",
            owner=owner,
            requestCpus=1,
            **spec,
        )
        for i in range(count)
    ]


def owners(plan: CyclePlan) -> Counter[str]:
    return Counter(c.name.rsplit("-", 1)[0] for c in plan.changes if c.execution_point)


def matched(plan: CyclePlan) -> set[str]:
    return {c.name for c in plan.changes if c.execution_point}


def test_two_users_of_equal_priority_share_eight_slots_four_and_four() -> None:
    jobs = queued("alice", 20) + queued("bob", 20, start=20)  # alice submitted first
    plan = plan_cycle(jobs, [slots("node", 8)], NOW, PoolSpec())
    assert owners(plan) == {"alice": 4, "bob": 4}
    assert plan.stats.matches == 8 and plan.stats.jobs_considered == 40
    assert plan.stats.submitters == 2


def test_a_user_whose_effective_priority_is_three_times_gets_a_quarter() -> None:
    spec = PoolSpec(priority_factors={"bob": 3000.0})
    jobs = queued("alice", 20) + queued("bob", 20, start=20)
    assert owners(plan_cycle(jobs, [slots("node", 8)], NOW, spec)) == {"alice": 6, "bob": 2}


def test_freed_slots_go_to_the_user_below_their_share_until_six_to_two() -> None:
    spec = PoolSpec(priority_factors={"bob": 3000.0})
    # 4 and 4 ran; one of bob's ended: the free slot is alice's (she is 2 below her share).
    jobs = running("alice", 4) + running("bob", 3) + queued("alice", 5) + queued("bob", 5, 5)
    assert owners(plan_cycle(jobs, [slots("node", 1)], NOW, spec)) == {"alice": 1}
    # 6 and 1: bob is below his share of 2, and gets the free slot.
    jobs = running("alice", 6) + running("bob", 1) + queued("alice", 5) + queued("bob", 5, 5)
    assert owners(plan_cycle(jobs, [slots("node", 1)], NOW, spec)) == {"bob": 1}


def test_what_a_user_cannot_use_goes_to_the_others() -> None:
    # bob's jobs all need more cores than any machine has: alice gets all eight.
    jobs = queued("alice", 20) + queued("bob", 20, start=20, requirements="TotalCpus > 64")
    plan = plan_cycle(jobs, [slots("node", 8)], NOW, PoolSpec())
    assert owners(plan) == {"alice": 8}


def test_higher_jobprio_first_and_an_unmatchable_one_does_not_block() -> None:
    jobs = [
        *queued("alice", 3),
        *queued("alice", 1, start=3, priority=5),
        *queued("alice", 1, start=4, priority=10, requirements="Cpus > 64"),
    ]
    plan = plan_cycle(jobs, [slots("node", 2)], NOW, PoolSpec())
    assert matched(plan) == {"alice-3", "alice-0"}  # JobPrio 5, then the oldest
    rejected = {c.name: c.status.last_rej_match_reason for c in plan.changes}
    assert "Requirements" in (rejected["alice-4"] or "")


def test_a_nice_user_job_runs_only_on_what_nobody_else_wants() -> None:
    nice = queued("carol", 1, start=50, attributes={"NiceUser": "true"})
    others = queued("alice", 3) + queued("bob", 3, start=10)
    plan = plan_cycle(nice + others, [slots("node", 6)], NOW, PoolSpec())
    assert "carol-50" not in matched(plan)
    assert owners(plan) == {"alice": 3, "bob": 3}
    plan = plan_cycle(nice + others, [slots("node", 7)], NOW, PoolSpec())
    assert "carol-50" in matched(plan)
    names = {user.name for user in plan.accountant.users}
    assert names <= {"alice", "bob", "nice-user.carol"}


def test_the_accountant_is_aged_with_the_usage_of_jobs_holding_claims() -> None:
    before = PoolStatus.model_validate(
        {
            "lastUpdate": format_time(NOW - 86400),
            "users": [{"name": "alice", "realPriority": 10.0}],
        }
    )
    jobs = running("alice", 4) + running("bob", 2) + queued("bob", 1)
    plan = plan_cycle(jobs, [slots("node", 1)], NOW, PoolSpec(), accountant=before)
    users = {user.name: user for user in plan.accountant.users}
    assert users["alice"].real_priority == 7.0  # half way from 10 to 4 in one half-life
    assert users["alice"].resources_used == 4.0
    assert users["bob"].resources_used == 2.0
    assert plan.accountant.last_update == format_time(NOW)


def test_with_consider_preemption_false_a_claimed_slot_is_never_matched() -> None:
    ep = slots("node", 1)
    assert ep.status is not None
    claimed = ep.status.slots[0].model_copy(
        update={
            "state": "Claimed",
            "ad": {**ep.status.slots[0].ad, "State": "Claimed", "Rank": "1", "CurrentRank": 0},
            "expressions": [*ep.status.slots[0].expressions, "Rank"],
        }
    )
    ep = ep.model_copy(update={"status": ep.status.model_copy(update={"slots": [claimed]})})
    jobs = queued("alice", 1)
    assert owners(plan_cycle(jobs, [ep], NOW, PoolSpec())) == {"alice": 1}  # RANK preempts
    off = PoolSpec(negotiator_consider_preemption=False)
    assert owners(plan_cycle(jobs, [ep], NOW, off)) == {}


def test_a_user_at_their_share_with_nothing_free_waits_for_user_priority() -> None:
    ep = slots("node", 1)
    assert ep.status is not None
    taken = ep.status.slots[0].model_copy(
        update={"state": "Claimed", "ad": {**ep.status.slots[0].ad, "State": "Claimed"}}
    )
    ep = ep.model_copy(update={"status": ep.status.model_copy(update={"slots": [taken]})})
    # alice holds the slot; bob's job is matched nowhere, and alice's waits for priority.
    jobs = running("alice", 1) + queued("alice", 1) + queued("bob", 1, start=5)
    reasons = {
        c.name: c.status.last_rej_match_reason
        for c in plan_cycle(jobs, [ep], NOW, PoolSpec()).changes
    }
    assert reasons["alice-0"] == (
        "no slot left this cycle: alice holds 1 of a fair share of 0.50 (waiting for user priority)"
    )
    assert reasons["bob-5"] == "slot1@node is Claimed"
