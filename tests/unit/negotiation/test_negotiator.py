"""One negotiation cycle over the slot ads a real startd publishes ("Matchmaking with ClassAds",
"The RANK Expression", "Dynamic Provisioning" in the reference)."""

from __future__ import annotations

from typing import Any

from kondor_core import startd
from kondor_core.api import ExecutionJobSpec, Machine, SlotPolicySpec
from kondor_core.config import compile_policy
from kondor_core.jobs import submit_ad
from kondor_core.negotiation import IdleJob, negotiate, slot_offer
from kondor_core.negotiation.matchmaking import job_rank, requirements_met
from kondor_core.policy import ActivateClaim, Match


def node(condor_config: str = "", cpus: int = 8, now: float = 0.0) -> startd.Startd:
    machine = Machine.model_validate(
        {
            "name": "n",
            "cpus": cpus,
            "memory": "16Gi",
            "disk": "100Gi",
            "attributes": {"OpSys": "LINUX"},
        }
    )
    policy = compile_policy(SlotPolicySpec.model_validate({"condorConfig": condor_config}))
    return startd.tick(startd.start(machine, policy, now), {}, now).startd


def offers(of: startd.Startd, now: float = 0.0) -> list[Any]:
    return [
        slot_offer(ad.attributes, ad.expressions, now) for ad in startd.published_ads(of, {}, now)
    ]


def job(name: str, order: int = 0, **spec: Any) -> IdleJob:
    return IdleJob(name, submit_ad(ExecutionJobSpec.model_validate(spec), name), order)


def test_a_partitionable_slot_of_eight_cores_takes_eight_one_core_jobs_in_one_cycle() -> None:
    jobs = [job(f"j{i}", i, requestCpus=1, requestMemory="1Gi") for i in range(9)]
    cycle = negotiate(jobs, offers(node()))
    assert [(m.job, m.slot) for m in cycle.matches] == [(f"j{i}", "slot1@n") for i in range(8)]
    assert cycle.rejections["j8"] == "slot1@n: not enough Cpus: the job needs 1 cores, 0 left of 8"


def test_the_offers_are_not_consumed_by_a_cycle() -> None:
    ads = offers(node())
    negotiate([job("a", requestCpus=8)], ads)
    assert [m.job for m in negotiate([job("b", requestCpus=8)], ads).matches] == ["b"]


def test_higher_jobprio_first_then_submission_order() -> None:
    jobs = [job("first", 0, requestCpus=8), job("urgent", 1, requestCpus=8, priority=5)]
    cycle = negotiate(jobs, offers(node()))
    assert [m.job for m in cycle.matches] == ["urgent"]
    assert "not enough Cpus" in cycle.rejections["first"]


def test_start_refuses_a_job_and_requirements_no_slot_meets_keep_it_idle() -> None:
    ads = offers(node('START = Owner != "bob"'))
    cycle = negotiate(
        [
            job("bobs", 0, owner="bob"),
            job("alices", 1, owner="alice"),
            job("windows", 2, owner="alice", requirements='OpSys == "WINDOWS"'),
        ],
        ads,
    )
    assert [m.job for m in cycle.matches] == ["alices"]
    assert cycle.rejections["bobs"] == "slot1@n: START is FALSE for the job"
    assert cycle.rejections["windows"] == "slot1@n: the job's Requirements are not TRUE for it"


def test_static_slots_hold_what_the_job_requests_and_take_one_job_each() -> None:
    ads = offers(node("NUM_SLOTS = 2\nNUM_CPUS = 2"))
    cycle = negotiate([job("big", 0, requestCpus=2), job("a", 1), job("b", 2), job("c", 3)], ads)
    assert [(m.job, m.slot) for m in cycle.matches] == [("a", "slot1@n"), ("b", "slot2@n")]
    assert "not enough Cpus: the job needs 2 cores, 1 left of 1" in cycle.rejections["big"]
    assert "slot1@n is Claimed" in cycle.rejections["c"]


def test_a_slot_taking_no_match_is_not_offered() -> None:
    busy = node("NUM_SLOTS = 1\nNUM_CPUS = 1")
    first = job("first", requestCpus=1)
    ran = startd.tick(
        busy,
        {},
        0,
        slot_events={"slot1@n": [Match("c1", first.ad, job_id="first"), ActivateClaim()]},
    ).startd
    cycle = negotiate([job("second", requestCpus=1)], offers(ran))
    assert cycle.matches == ()
    assert cycle.rejections["second"] == "slot1@n is Claimed"


def test_rank_preemption_of_a_claimed_slot() -> None:
    policy = 'NUM_SLOTS = 1\nNUM_CPUS = 1\nRANK = Owner == "jones"'
    claimed = node(policy)
    garrison = job("garrison", owner="garrison")
    ran = startd.tick(
        claimed,
        {},
        0,
        slot_events={"slot1@n": [Match("c1", garrison.ad, job_id="garrison"), ActivateClaim()]},
    ).startd
    cycle = negotiate([job("jones", owner="jones"), job("smith", 1, owner="smith")], offers(ran))
    assert [(m.job, m.slot, m.preempts, m.slot_rank) for m in cycle.matches] == [
        ("jones", "slot1@n", True, 1.0)
    ]
    assert cycle.rejections["smith"] == "slot1@n is Claimed"


def test_time_in_a_slot_expression_is_the_cycle_s_time() -> None:
    # START reads time(): the negotiator evaluates it at its own now, as the startd does.
    late = node("START = time() >= 1000")
    assert negotiate([job("a")], offers(late, now=999)).matches == ()
    assert [m.job for m in negotiate([job("a")], offers(late, now=1000)).matches] == ["a"]


def test_an_undefined_rank_counts_as_zero_not_as_the_enum_s_integer() -> None:
    # classad2.Value.Undefined is an IntEnum (2): a Rank of UNDEFINED must rank as 0.

    ad = job("a", rank="NoSuchAttribute").ad
    slot = offers(node())[0]
    assert job_rank(ad, slot) == 0.0
    undefined = job("b", requirements="NoSuchAttribute").ad
    assert requirements_met(undefined, slot) is False
