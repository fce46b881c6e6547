"""The batch claim under a COD application: the startd's suspendForCOD / resumeForCOD.

From the reference's "Computing On Demand" ("any batch HTCondor job on the same resource will
be suspended" while a COD claim is Running; "The batch HTCondor job then resumes") and the
startd it describes: Resource::suspendForCOD changes a running claim (Busy or Retiring) to
Claimed/Suspended and leaves a preempting, suspended or idle one as it is; while suspended for
COD, eval_policy evaluates nothing for the claim (no SUSPEND, CONTINUE, PREEMPT, retirement);
resumeForCOD takes Claimed/Suspended back to Busy; the slot is unavailable (Requirements
FALSE) and runs no benchmarks meanwhile. The suspension counts in TotalJobSuspendTime.
"""

from __future__ import annotations

import pytest
from policy_helpers import Driver, driver, job, policy_from

from kondor_core.policy import (
    ActionKind,
    ActivateClaim,
    JobExited,
    Match,
    PreemptingClaimWithdrawn,
    ResumeForCod,
    SlotState,
    SuspendForCod,
    Vacate,
    advertised,
)
from kondor_core.startd import cod

SUSPENDING = """
WANT_SUSPEND = True
WANT_VACATE = True
SUSPEND = $(KeyboardBusy)
CONTINUE = KeyboardIdle > $(ContinueIdleTime)
PREEMPT = (Activity == "Suspended") && ($(ActivityTimer) > $(MaxSuspendTime))
KILL = $(ActivityTimer) > 60
"""


def running(policy_text: str = "", **job_attrs: object) -> Driver:
    d = driver(policy_from(policy_text)).at(0)
    d.at(0, Match("c1", job(**job_attrs), job_id="bob.1"), ActivateClaim())
    assert d.where == "Claimed/Busy"
    return d


def test_a_cod_job_suspends_the_busy_claim_and_its_end_resumes_it() -> None:
    d = running()
    d.at(60, SuspendForCod())
    assert d.where == "Claimed/Suspended"
    assert d.slot.suspended_for_cod
    assert d.numbers() == [14]
    assert d.slot.transitions[0].reason == "a COD job is now running"
    assert d.kinds() == [ActionKind.SUSPEND_JOB]
    d.at(90)
    assert d.path() == [] and d.kinds() == []
    d.at(120, ResumeForCod())
    assert d.where == "Claimed/Busy"
    assert not d.slot.suspended_for_cod
    assert d.numbers() == [15]
    assert d.slot.transitions[0].reason == "no COD job active"
    assert d.kinds() == [ActionKind.CONTINUE_JOB]
    ad = advertised(d.policy, d.slot, d.facts, 150)
    assert ad["TotalJobSuspendTime"] == 60
    assert ad["TotalJobRunTime"] == 90  # 150 s since the start, less 60 suspended


def test_the_suspension_for_cod_counts_in_total_job_suspend_time_while_it_lasts() -> None:
    d = running()
    d.at(60, SuspendForCod())
    d.at(100)
    ad = advertised(d.policy, d.slot, d.facts, 100)
    assert ad["Activity"] == "Suspended"
    assert ad["TotalJobSuspendTime"] == 40
    assert ad["TotalJobRunTime"] == 60


@pytest.mark.parametrize(
    ("facts", "why"),
    [
        ({"KeyboardIdle": 3600}, "CONTINUE is TRUE"),
        ({"KeyboardIdle": 5}, "SUSPEND and, past MaxSuspendTime, PREEMPT are TRUE"),
    ],
)
def test_the_policy_does_not_thaw_or_preempt_a_job_suspended_for_cod(
    facts: dict[str, object], why: str
) -> None:
    d = running(SUSPENDING)
    d.at(60, SuspendForCod())
    assert d.where == "Claimed/Suspended", why
    for now in (65, 700, 2000):  # MaxSuspendTime is 10 minutes
        d.at(now, **facts)
        assert d.where == "Claimed/Suspended", why
        assert d.kinds() == [], why
        assert not d.slot.claim or not d.slot.claim.preempt_was_true, why


def test_a_claim_the_policy_suspended_stays_suspended_and_cod_end_resumes_it() -> None:
    # suspendForCOD: "opportunistic claim is already suspended" - no change; while the COD
    # job runs, CONTINUE is not evaluated; resumeForCOD changes Suspended to Busy (15), and
    # the policy, evaluated again in the same cycle, suspends it again if the keyboard is
    # still busy (14), or leaves it running.
    d = running(SUSPENDING)
    d.at(30, KeyboardIdle=5)
    assert d.where == "Claimed/Suspended" and d.numbers() == [14]
    d.at(60, SuspendForCod())
    assert d.path() == [] and d.kinds() == []
    assert d.slot.suspended_for_cod
    d.at(400, KeyboardIdle=3600)
    assert d.where == "Claimed/Suspended" and d.kinds() == []
    d.at(500, ResumeForCod(), KeyboardIdle=5)
    assert d.path() == ["Claimed/Busy", "Claimed/Suspended"]
    assert [t.reason for t in d.slot.transitions] == ["no COD job active", "SUSPEND"]
    assert d.kinds() == [ActionKind.CONTINUE_JOB, ActionKind.SUSPEND_JOB]
    d.at(560, SuspendForCod())
    d.at(600, ResumeForCod(), KeyboardIdle=3600)
    assert d.path() == ["Claimed/Busy"]


def test_a_retiring_claim_is_suspended_for_cod_and_resumes_retiring() -> None:
    d = running('MAXJOBRETIREMENTTIME = 1000\nRANK = Owner == "carol"')
    d.at(10, Match("c2", job("carol"), job_id="carol.1"))
    assert d.where == "Claimed/Retiring"
    d.at(60, SuspendForCod())
    assert d.where == "Claimed/Suspended" and d.numbers() == [20]
    d.at(2000)  # the retirement would be over, but nothing is evaluated while COD runs
    assert d.where == "Claimed/Suspended"
    d.at(2005, ResumeForCod())
    assert d.numbers()[0] == 16
    assert d.slot.transitions[0].state == "Claimed"
    assert d.slot.transitions[0].activity == "Retiring"


def test_a_preempting_claim_is_left_to_vacate() -> None:
    d = running("PREEMPT = KeyboardIdle < 60\nWANT_VACATE = True\nKILL = False")
    d.at(30, KeyboardIdle=1)
    assert d.where == "Preempting/Vacating"
    d.at(35, SuspendForCod())
    assert d.where == "Preempting/Vacating" and d.path() == [] and d.kinds() == []
    assert d.slot.suspended_for_cod


def test_an_eviction_while_suspended_for_cod_still_vacates_the_batch_job() -> None:
    d = running()
    d.at(60, SuspendForCod())
    d.at(70, Vacate())
    assert d.where == "Preempting/Vacating"
    assert d.kinds() == [ActionKind.CONTINUE_JOB, ActionKind.SOFT_KILL]
    assert d.slot.claim is not None and d.slot.claim.suspended_total == 10


def test_a_job_activated_on_the_claim_while_cod_runs_is_suspended_at_once() -> None:
    d = driver(policy_from()).at(0)
    d.at(5, Match("c1", job(), job_id="bob.1"))
    d.at(10, SuspendForCod())
    assert d.where == "Claimed/Idle" and d.path() == []
    d.at(20, ActivateClaim())
    assert d.path() == ["Claimed/Busy", "Claimed/Suspended"]
    assert d.kinds() == [ActionKind.START_JOB, ActionKind.SUSPEND_JOB]
    d.at(30, JobExited(0))
    assert d.where == "Claimed/Idle"
    assert d.slot.suspended_for_cod  # the COD job still runs; the claim has no job now


def test_the_claim_lease_still_expires_while_suspended_for_cod() -> None:
    d = driver(policy_from()).at(0)
    d.at(0, Match("c1", job(JobLeaseDuration=100), job_id="bob.1"), ActivateClaim())
    d.at(10, SuspendForCod())
    d.at(200)
    assert d.where == "Preempting/Killing"
    assert d.slot.transitions[0].reason == "claim lease expired"


def test_an_unclaimed_slot_under_a_cod_job_takes_no_match_and_runs_no_benchmarks() -> None:
    d = driver(policy_from("RUNBENCHMARKS = True"))
    d.at(0, SuspendForCod())  # the first benchmarks are not run while the COD job runs
    d.at(1)
    assert d.where == "Unclaimed/Idle" and d.kinds() == []
    assert advertised(d.policy, d.slot, d.facts, 1)["Requirements"] is False
    d.at(2, ResumeForCod())
    assert d.path() == ["Unclaimed/Benchmarking"]
    assert d.kinds() == [ActionKind.RUN_BENCHMARKS]


def test_requirements_come_back_once_no_cod_job_runs() -> None:
    d = driver(policy_from()).at(0)
    assert advertised(d.policy, d.slot, d.facts, 0)["Requirements"] is True
    d.at(5, SuspendForCod())
    assert advertised(d.policy, d.slot, d.facts, 5)["Requirements"] is False
    d.at(9, ResumeForCod())
    assert advertised(d.policy, d.slot, d.facts, 9)["Requirements"] is True


def test_repeated_events_change_nothing() -> None:
    d = running()
    d.at(10, ResumeForCod())  # not suspended for COD: resumeForCOD returns at once
    assert d.path() == [] and d.kinds() == []
    d.at(20, SuspendForCod(), SuspendForCod())
    assert d.numbers() == [14] and d.kinds() == [ActionKind.SUSPEND_JOB]
    d.at(30, SuspendForCod(), PreemptingClaimWithdrawn())
    assert d.path() == [] and d.kinds() == []


@pytest.mark.parametrize(
    ("flags", "wanted", "expected"),
    [
        ({"a": False, "b": False}, set(), {}),
        ({"a": False, "b": False}, {"a"}, {"a": "SuspendForCod"}),
        ({"a": True, "b": False}, {"a"}, {}),
        ({"a": True, "b": True}, {"b"}, {"a": "ResumeForCod"}),
        ({"a": True, "b": False}, {"b"}, {"a": "ResumeForCod", "b": "SuspendForCod"}),
        ({"a": False}, {"gone"}, {}),  # a slot the node no longer has gets no event
    ],
)
def test_engine_events_bring_the_slots_in_line_with_the_running_cod_jobs(
    flags: dict[str, bool], wanted: set[str], expected: dict[str, str]
) -> None:
    slots = [SlotState(name=name, suspended_for_cod=flag) for name, flag in flags.items()]
    events = cod.engine_events(slots, wanted)
    assert {name: [type(e).__name__ for e in said] for name, said in events.items()} == {
        name: [kind] for name, kind in expected.items()
    }
