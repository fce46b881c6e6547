"""User-priority preemption, as the condor_negotiator decides it ("User Priorities and
Negotiation": Negotiation; "Configuration Macros": PREEMPTION_REQUIREMENTS, PREEMPTION_RANK,
NEGOTIATOR_CONSIDER_EARLY_PREEMPTION; "Dynamic Provisioning": ALLOW_PSLOT_PREEMPTION), over
the slot ads a real startd publishes for claimed slots."""

from __future__ import annotations

from typing import Any

import pytest

from kondor_core import startd
from kondor_core.api import ExecutionJobSpec, PoolSpec
from kondor_core.jobs import submit_ad
from kondor_core.negotiation import IdleJob, negotiate, slot_offer
from kondor_core.negotiation.autocluster import IndexedMatchmaker
from kondor_core.negotiation.fairshare import negotiate_fair
from kondor_core.negotiation.preemption import PreemptionPolicy, negotiator_view, remote_user
from kondor_core.policy import ActivateClaim, Match

from .test_negotiator import node, offers

STATIC = "NUM_SLOTS = {n}\nNUM_CPUS = {n}\n"
#: Effective priorities: alice's is better (lower) than bob's, carol's nice-user one worst.
PRIORITIES = {"alice": 500.0, "bob": 5000.0, "nice-user.carol": 0.5e10, "dave": 50000.0}


def idle(name: str, submitter: str, order: int = 0, **spec: Any) -> IdleJob:
    owner = submitter.removeprefix("nice-user.")
    nice = {"attributes": {"NiceUser": "true"}} if submitter.startswith("nice-user.") else {}
    ad = submit_ad(ExecutionJobSpec.model_validate({"owner": owner, **nice, **spec}), name)
    return IdleJob(name, ad, order, submitter)


def claimed(
    config: str, runners: list[tuple[str, float]], *, cpus: int | None = None, free: int = 0
) -> Any:
    """A node whose slots run one job each, of the given submitters, started at the given
    times (static slots, `free` more Unclaimed; or dynamic slots of one partitionable slot
    of `cpus` cores when `cpus` is given)."""
    if cpus is None:
        n = len(runners) + free
        of = node(STATIC.format(n=n) + config, cpus=n)
    else:
        of = node(config, cpus=cpus)
    for i, (who, when) in enumerate(runners):
        running = idle(f"{who}-{i}", who, requestCpus=1, requestMemory="100Mi")
        slot = "slot1@n" if cpus is not None else f"slot{i + 1}@n"
        events = {slot: [Match(f"c{i}", running.ad, job_id=running.id), ActivateClaim()]}
        of = startd.tick(of, {}, when, slot_events=events).startd
    return of


def policy(**knobs: Any) -> PreemptionPolicy:
    return PreemptionPolicy.of(PoolSpec.model_validate(knobs), PRIORITIES)


PREEMPTIVE = {"preemptionRequirements": "True"}


def test_claimed_slot_ads_carry_what_the_preemption_rules_read() -> None:
    of = claimed("MAXJOBRETIREMENTTIME = 100", [("bob", 10), ("nice-user.carol", 20)])
    bob, carol = offers(of, now=50)
    assert (bob["RemoteOwner"], bob["RemoteUser"], bob["CurrentRank"]) == ("bob", "bob", 0.0)
    assert (bob["TotalJobRunTime"], bob.eval("RetirementTimeRemaining")) == (40, 60)
    # Published at 50, read by the negotiator at 80 and at 200: it counts down to 0.
    published = startd.published_ads(of, {}, 50)[0]
    for now, left in ((80, 30), (200, 0)):
        seen = slot_offer(published.attributes, published.expressions, now)
        assert seen.eval("RetirementTimeRemaining") == left
    assert "AccountingGroup" not in bob
    assert carol["AccountingGroup"] == "nice-user.carol"
    assert remote_user(carol) == "nice-user.carol"


def test_a_user_of_better_priority_preempts_under_preemption_requirements() -> None:
    ads = offers(claimed("", [("bob", 0)]), now=100)
    cycle = negotiate([idle("a", "alice")], ads, preemption=policy(**PREEMPTIVE))
    assert [(m.job, m.slot, m.preempts, m.reason) for m in cycle.matches] == [
        ("a", "slot1@n", True, "UserPriority")
    ]


@pytest.mark.parametrize(
    ("submitter", "knobs", "why"),
    [
        # HTCondor's default PREEMPTION_REQUIREMENTS is False: no priority preemption.
        ("alice", {}, "slot1@n is Claimed by bob: PREEMPTION_REQUIREMENTS is FALSE"),
        (
            "alice",
            {"preemptionRequirements": "RemoteUserPrio > SubmitterUserPrio * 20"},
            "slot1@n is Claimed by bob: PREEMPTION_REQUIREMENTS is FALSE",
        ),
        (
            "dave",
            PREEMPTIVE,
            "slot1@n is Claimed by bob, whose priority 5000 is not worse than dave's 50000",
        ),
        ("bob", PREEMPTIVE, "slot1@n is Claimed by bob"),
        (
            "alice",
            {**PREEMPTIVE, "negotiatorConsiderPreemption": False},
            "slot1@n is Claimed (NEGOTIATOR_CONSIDER_PREEMPTION is false)",
        ),
    ],
)
def test_who_may_not_preempt_and_why(submitter: str, knobs: dict[str, Any], why: str) -> None:
    ads = offers(claimed("", [("bob", 0)]), now=100)
    cycle = negotiate([idle("j", submitter)], ads, preemption=policy(**knobs))
    assert cycle.matches == ()
    assert cycle.rejections["j"] == why


def test_preemption_requirements_read_the_slot_as_my_and_the_job_as_target() -> None:
    # The UWCS example: a 20% better priority, and only after the job ran an hour.
    knobs = {
        "preemptionRequirements": "TotalJobRunTime > 3600 && "
        "RemoteUserPrio > TARGET.SubmitterUserPrio * 1.2"
    }
    early = offers(claimed("", [("bob", 0)]), now=3000)
    assert negotiate([idle("a", "alice")], early, preemption=policy(**knobs)).matches == ()
    late = offers(claimed("", [("bob", 0)]), now=4000)
    matches = negotiate([idle("a", "alice")], late, preemption=policy(**knobs)).matches
    assert [m.reason for m in matches] == ["UserPriority"]


def test_a_slot_whose_rank_prefers_the_running_job_is_not_preempted_for_priority() -> None:
    ads = offers(claimed('RANK = Owner == "bob"', [("bob", 0)]), now=100)
    cycle = negotiate([idle("a", "alice")], ads, preemption=policy(**PREEMPTIVE))
    assert cycle.rejections["a"] == "slot1@n is Claimed by bob: RANK 0 is below CurrentRank 1"


def test_preemption_rank_takes_the_worst_user_first_then_the_job_that_ran_least() -> None:
    runners = [("bob", 0), ("nice-user.carol", 0), ("bob", 50), ("dave", 90)]
    ads = offers(claimed("", runners), now=100)
    alice = PreemptionPolicy.of(PoolSpec(preemption_requirements="True"), {**PRIORITIES, "dave": 1})
    cycle = negotiate([idle(f"a{i}", "alice", i) for i in range(3)], ads, preemption=alice)
    # carol's nice-user job first, then bob's that ran 50 s before the one that ran 100 s;
    # dave's priority is better than alice's: never preempted.
    assert [m.slot for m in cycle.matches] == ["slot2@n", "slot3@n", "slot1@n"]
    assert "dave's" not in cycle.rejections.get("a3", "")


def test_an_idle_slot_before_a_rank_preemption_before_a_priority_preemption() -> None:
    # slot1's RANK prefers alice; slot2 may be preempted for priority only, though dave's
    # claim has the higher PREEMPTION_RANK.
    rank = 'RANK = (Owner == "alice") * (SlotID == 1)'
    ads = offers(claimed(rank, [("bob", 0), ("dave", 0)]), now=100)
    cycle = negotiate([idle("a", "alice")], ads, preemption=policy(**PREEMPTIVE))
    assert [(m.slot, m.reason) for m in cycle.matches] == [("slot1@n", "Rank")]
    ads = offers(claimed(rank, [("bob", 0), ("dave", 0)], free=1), now=100)
    both = negotiate([idle("a", "alice")], ads, preemption=policy(**PREEMPTIVE))
    assert [(m.slot, m.preempts) for m in both.matches] == [("slot3@n", False)]
    three = negotiate(
        [idle(f"a{i}", "alice", i) for i in range(3)], ads, preemption=policy(**PREEMPTIVE)
    )
    assert [(m.slot, m.reason) for m in three.matches] == [
        ("slot3@n", None),
        ("slot1@n", "Rank"),
        ("slot2@n", "UserPriority"),
    ]


def test_no_claim_with_retirement_time_left_unless_early_preemption() -> None:
    ads = offers(claimed("MAXJOBRETIREMENTTIME = 300", [("bob", 0)]), now=100)
    cycle = negotiate([idle("a", "alice")], ads, preemption=policy(**PREEMPTIVE))
    assert cycle.rejections["a"] == "slot1@n is Claimed with 200s of retirement time left"
    early = policy(**PREEMPTIVE, negotiatorConsiderEarlyPreemption=True)
    assert [m.reason for m in negotiate([idle("a", "alice")], ads, preemption=early).matches] == [
        "UserPriority"
    ]
    # RANK preemption waits for the retirement too.
    ranked = offers(claimed('MAXJOBRETIREMENTTIME = 300\nRANK = Owner == "alice"', [("bob", 0)]))
    assert negotiate([idle("a", "alice")], ranked, preemption=policy()).matches == ()
    later = offers(
        claimed('MAXJOBRETIREMENTTIME = 300\nRANK = Owner == "alice"', [("bob", 0)]), now=300
    )
    assert [m.reason for m in negotiate([idle("a", "alice")], later).matches] == ["Rank"]


def test_pslot_preemption_frees_dynamic_slots_by_current_rank_until_the_job_fits() -> None:
    runners = [("bob", 0), ("nice-user.carol", 0), ("bob", 50), ("dave", 60)]
    of = claimed('RANK = Owner == "dave"', runners, cpus=4)
    ads = offers(of, now=100)
    two = idle("a", "alice", requestCpus=2, requestMemory="1Gi")
    knobs = {**PREEMPTIVE, "allowPslotPreemption": True}
    cycle = negotiate([two], ads, preemption=policy(**knobs))
    # dave's dynamic slot has CurrentRank 1: looked at last; carol's then bob's newer job.
    assert [(m.slot, m.reason, m.victims) for m in cycle.matches] == [
        ("slot1@n", "UserPriority", ("slot1_2@n", "slot1_3@n"))
    ]
    # Without ALLOW_PSLOT_PREEMPTION a dynamic slot is preempted alone, and two are not.
    plain = negotiate([two], ads, preemption=policy(**PREEMPTIVE))
    assert plain.matches == ()
    assert "not enough Cpus" in plain.rejections["a"]
    one = negotiate([idle("b", "alice")], ads, preemption=policy(**PREEMPTIVE))
    assert [(m.slot, m.victims) for m in one.matches] == [("slot1_2@n", ())]


def test_pslot_preemption_never_takes_a_dynamic_slot_with_retirement_left() -> None:
    of = claimed("MAXJOBRETIREMENTTIME = 300", [("bob", 0), ("bob", 0)], cpus=2)
    knobs = {**PREEMPTIVE, "allowPslotPreemption": True, "negotiatorConsiderEarlyPreemption": True}
    cycle = negotiate([idle("a", "alice")], offers(of, now=100), preemption=policy(**knobs))
    assert cycle.matches == ()
    assert "retirement time left" in cycle.rejections["a"]


def test_the_index_preempts_as_the_plain_matchmaker_does() -> None:
    runners = [("bob", i) for i in range(30)] + [("nice-user.carol", 30)] * 10
    runners += [("dave", 30)] * 10 + [("alice", 30)] * 20
    ads = offers(claimed("", runners), now=100)
    jobs = [idle(f"a{i}", "alice", i) for i in range(15)]
    jobs += [idle(f"b{i}", "bob", 20 + i) for i in range(5)]
    preemption = policy(**PREEMPTIVE)
    plain = negotiate(jobs, ads, preemption=preemption)
    indexed = IndexedMatchmaker(ads, small_pool=0, preemption=preemption)
    assert indexed.slot_classes > 1
    order = sorted(jobs, key=lambda j: (-j.priority, j.order))
    assert [indexed.match(j) for j in order] == [
        next((m for m in plain.matches if m.job == j.id), None) or plain.rejections[j.id]
        for j in order
    ]
    # carol's nice-user jobs first, then dave's (worse than both alice and bob), never
    # alice's (slots 51 to 70), and bob's only once those are gone.
    victims = {int(m.slot.split("@")[0][4:]) for m in plain.matches}
    assert [m.reason for m in plain.matches] == ["UserPriority"] * 20
    assert victims == set(range(31, 51))


def test_fair_share_preempts_for_priority_only_within_a_submitter_s_slice() -> None:
    # bob holds all 8 slots; alice arrives with a better priority: her slice is 4 of 8
    # (equal priorities would give 4 each; hers is ten times better, so about 7).
    ads = offers(claimed("", [("bob", 0)] * 8), now=100)
    jobs = [idle(f"a{i}", "alice", i) for i in range(8)]
    jobs += [idle(f"b{i}", "bob", 10 + i) for i in range(4)]
    preemption = policy(**PREEMPTIVE)
    cycle = negotiate_fair(
        jobs,
        ads,
        priorities={"alice": 500.0, "bob": 5000.0},
        usage={"bob": 8.0},
        free=0.0,
        size=8.0,
        preemption=preemption,
    )
    assert [m.reason for m in cycle.matches] == ["UserPriority"] * 7
    assert {m.job for m in cycle.matches} == {f"a{i}" for i in range(7)}
    # Equal priorities: nobody's priority is worse, nothing is preempted.
    even = negotiate_fair(
        jobs,
        ads,
        priorities={"alice": 5000.0, "bob": 5000.0},
        usage={"bob": 8.0},
        free=0.0,
        size=8.0,
        preemption=PreemptionPolicy.of(PoolSpec(preemption_requirements="True")),
    )
    assert even.matches == ()


def test_the_pool_s_negotiator_defaults_are_htcondor_s() -> None:
    htcondor2 = pytest.importorskip("htcondor2")
    param = htcondor2.param
    spec = PoolSpec()

    def same(text: str) -> str:
        return "".join(text.split()).lower()  # ClassAd names are case-insensitive

    assert same(spec.preemption_requirements) == same(param["PREEMPTION_REQUIREMENTS"])
    assert same(spec.preemption_rank) == same(param["PREEMPTION_RANK"])

    def flag(value: Any) -> bool:
        return value if isinstance(value, bool) else str(value).lower() == "true"

    assert spec.negotiator_consider_preemption is flag(param["NEGOTIATOR_CONSIDER_PREEMPTION"])
    early = flag(param["NEGOTIATOR_CONSIDER_EARLY_PREEMPTION"])
    assert spec.negotiator_consider_early_preemption is early
    assert spec.allow_pslot_preemption is False  # not in the param table; the manual's default
    assert spec.default_prio_factor == float(param["DEFAULT_PRIO_FACTOR"])
    assert spec.nice_user_prio_factor == float(param["NICE_USER_PRIO_FACTOR"])
    assert spec.priority_halflife == float(param["PRIORITY_HALFLIFE"])


def test_the_index_preempts_dynamic_slots_as_the_plain_matchmaker_does() -> None:
    runners = [("bob", 0), ("nice-user.carol", 0), ("bob", 50), ("dave", 60)]
    runners += [("bob", 60), ("nice-user.carol", 60), ("bob", 70), ("dave", 70)]
    ads = offers(claimed('RANK = Owner == "dave"', runners, cpus=8), now=100)
    jobs = [
        idle("wide", "alice", 0, requestCpus=3, requestMemory="1Gi"),
        idle("one", "alice", 1, requestCpus=1, requestMemory="1Gi"),
        idle("bob", "bob", 2, requestCpus=1, requestMemory="1Gi"),
        idle("huge", "alice", 3, requestCpus=16, requestMemory="1Gi"),
    ]
    preemption = policy(**PREEMPTIVE, allowPslotPreemption=True)
    plain = negotiate(jobs, ads, preemption=preemption)
    indexed = IndexedMatchmaker(ads, small_pool=0, preemption=preemption)
    got = [indexed.match(j) for j in jobs]
    assert [m for m in got if not isinstance(m, str)] == list(plain.matches)
    assert [(m.job, m.slot, len(m.victims), m.reason) for m in plain.matches] == [
        ("wide", "slot1@n", 3, "UserPriority"),  # carol's two, then bob's newer
    ]
    assert isinstance(got[-1], str)


def test_the_negotiator_gives_claimed_slots_their_remote_user_s_priority() -> None:
    # "Negotiation": RemoteUserPrio and RemoteUserResourcesInUse are ephemeral attributes,
    # the negotiator's, of "the user currently using the resource" (condor_negotiator's
    # addRemoteUserPrios sets them in the cycle's slot ads); the startd does not publish them.
    ads = offers(claimed("", [("bob", 0), ("nice-user.carol", 0), ("erin", 0)], free=1), 100)
    assert not any("RemoteUserPrio" in ad for ad in ads)
    usage = {"bob": 3.0, "nice-user.carol": 1.0}
    seen = negotiator_view(ads, PreemptionPolicy.of(PoolSpec(), PRIORITIES, usage))
    prios = [(ad.get("RemoteUserPrio"), ad.get("RemoteUserResourcesInUse")) for ad in seen]
    # erin is not known to the accountant (nor is an Unclaimed slot's user): undefined.
    assert prios == [(5000.0, 3.0), (0.5e10, 1.0), (None, None), (None, None)]
    # A user the accountant no longer knows: taken out again, not left from a cycle before.
    again = negotiator_view(ads, PreemptionPolicy.of(PoolSpec(), {"alice": 500.0}))
    assert not any("RemoteUserPrio" in ad for ad in again)


def test_a_slot_s_rank_reads_its_remote_user_s_priority() -> None:
    # RANK preemption of a claim whose user's priority is poor, with no
    # PREEMPTION_REQUIREMENTS: CurrentRank was 0 when the startd took bob's job (the startd
    # has no RemoteUserPrio); the negotiator's RANK for alice's job is 1.
    rank = "RANK = ifThenElse(RemoteUserPrio > 1000, 1, 0)"
    ads = offers(claimed(rank, [("bob", 0)]), now=100)
    assert ads[0]["CurrentRank"] == 0.0
    cycle = negotiate([idle("a", "alice")], ads, preemption=policy())
    assert [(m.slot, m.reason) for m in cycle.matches] == [("slot1@n", "Rank")]
    # dave's priority (50000) is poor too, but alice's (500) is not: no preemption of alice.
    ads = offers(claimed(rank, [("alice", 0)]), now=100)
    cycle = negotiate([idle("d", "dave")], ads, preemption=policy())
    assert cycle.matches == ()
    why = "slot1@n is Claimed by alice, whose priority 500 is not worse than dave's 50000"
    assert cycle.rejections["d"] == why


@pytest.mark.parametrize("small_pool", [64, 0])
def test_a_job_s_requirements_read_the_slot_s_remote_user_priority(small_pool: int) -> None:
    # Only a claim of a user better than 10000 may be taken: bob's (5000), not dave's
    # (50000), though PREEMPTION_RANK (the worst user first) would have taken dave's.
    ads = offers(claimed("", [("bob", 0), ("dave", 0)]), now=100)
    wants = idle("a", "alice", requirements="TARGET.RemoteUserPrio < 10000")
    matcher = IndexedMatchmaker(ads, small_pool=small_pool, preemption=policy(**PREEMPTIVE))
    matched = matcher.match(wants)
    assert not isinstance(matched, str)
    assert (matched.slot, matched.reason) == ("slot1@n", "UserPriority")
