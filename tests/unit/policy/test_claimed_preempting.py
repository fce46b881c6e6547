"""Claimed and Preempting: transitions 10-25, retirement, vacate times, KILL, KILLING_TIMEOUT.

From "Claimed State", "Preempting State", "The Claimed State and Leases" and the
expression summary (MachineMaxVacateTime, MAXJOBRETIREMENTTIME, WANT_VACATE, KILL).
"""

from __future__ import annotations

from policy_helpers import Driver, driver, job, policy_from

from kondor_core.policy import (
    ActionKind,
    ActivateClaim,
    JobExited,
    JobGone,
    LeaseRenewed,
    Match,
    ReleaseClaim,
    Shutdown,
    ShutdownMode,
    Vacate,
    advertised,
)

SUSPENDING = """
WANT_SUSPEND = True
WANT_VACATE = True
SUSPEND = $(KeyboardBusy)
CONTINUE = KeyboardIdle > $(ContinueIdleTime)
PREEMPT = (Activity == "Suspended") && ($(ActivityTimer) > $(MaxSuspendTime))
KILL = $(ActivityTimer) > 60
"""


def running(policy_text: str = "", *, at: float = 0.0, **job_attrs: object) -> Driver:
    d = driver(policy_from(policy_text)).at(at)
    d.at(at, Match("c1", job(**job_attrs), job_id="a.1"), ActivateClaim())
    assert d.where == "Claimed/Busy"
    return d


def test_activation_and_job_exit_transitions_11_and_12() -> None:
    d = driver(policy_from()).at(0)
    d.at(10, Match("c1", job(), job_id="a.1"))
    assert d.where == "Claimed/Idle"
    d.at(15, ActivateClaim())
    assert d.numbers() == [11]
    assert d.kinds() == [ActionKind.START_JOB]
    assert advertised(d.policy, d.slot, d.facts, 15)["JobStart"] == 15
    d.at(100, JobExited(0))
    assert d.where == "Claimed/Idle"
    assert d.numbers() == [12]


def test_released_idle_claim_goes_through_preempting_to_owner_transition_10() -> None:
    d = running()
    d.at(50, JobExited(0))
    d.at(55, ReleaseClaim())
    assert d.path() == ["Preempting/Vacating", "Owner/Idle", "Unclaimed/Idle"]
    assert d.numbers() == [10, 22, 1]
    assert d.kinds() == [ActionKind.RELEASE_CLAIM]


def test_suspend_continue_transitions_14_and_15() -> None:
    d = running(SUSPENDING)
    d.at(100, KeyboardIdle=5)
    assert d.where == "Claimed/Suspended"
    assert d.numbers() == [14]
    assert d.kinds() == [ActionKind.SUSPEND_JOB]
    d.at(200, KeyboardIdle=400)
    assert d.where == "Claimed/Busy"
    assert d.numbers() == [15]
    assert d.kinds() == [ActionKind.CONTINUE_JOB]
    assert advertised(d.policy, d.slot, d.facts, 200)["TotalJobSuspendTime"] == 100


def test_suspended_too_long_is_preempted_vacated_then_killed() -> None:
    d = running(SUSPENDING)
    d.at(100, KeyboardIdle=5)
    d.at(700, KeyboardIdle=5)
    assert d.where == "Claimed/Suspended"
    d.at(705, KeyboardIdle=5)
    # PREEMPT (16), retirement 0 ends at once (18), WANT_VACATE -> Vacating with a soft kill
    assert d.path() == ["Claimed/Retiring", "Preempting/Vacating"]
    assert d.numbers() == [16, 18]
    assert [a.kind for a in d.last_actions] == [ActionKind.CONTINUE_JOB, ActionKind.SOFT_KILL]
    assert d.last_actions[1].signal == "SIGTERM"
    d.at(760)
    assert d.where == "Preempting/Vacating"
    d.at(770)  # KILL = ActivityTimer > 60
    assert d.where == "Preempting/Killing"
    assert d.numbers() == [21]
    assert d.kinds() == [ActionKind.HARD_KILL]
    d.at(775, JobGone())
    assert d.path() == ["Owner/Idle", "Unclaimed/Idle"]
    assert d.numbers() == [25, 1]


def test_preempt_without_want_suspend_retires_busy_job_transition_13() -> None:
    d = running("PREEMPT = KeyboardIdle < 60\nWANT_VACATE = True")
    d.at(30, KeyboardIdle=1)
    assert d.path() == ["Claimed/Retiring", "Preempting/Vacating"]
    assert d.numbers() == [13, 18]
    assert d.slot.transitions[0].reason == "PREEMPT"


def test_want_vacate_false_goes_straight_to_killing() -> None:
    d = running("PREEMPT = KeyboardIdle < 60\nWANT_VACATE = False")
    d.at(30, KeyboardIdle=1)
    assert d.path() == ["Claimed/Retiring", "Preempting/Killing"]
    assert d.kinds() == [ActionKind.HARD_KILL]
    assert "WANT_VACATE is FALSE" in d.slot.transitions[-1].reason
    d.at(35, JobGone())
    assert d.numbers() == [25, 1]


def test_vacating_job_that_exits_returns_to_owner_transition_22() -> None:
    d = running("PREEMPT = KeyboardIdle < 60\nWANT_VACATE = True")
    d.at(30, KeyboardIdle=1)
    d.at(35, JobGone())
    # Owner, and since IS_OWNER is FALSE by default, straight on to Unclaimed (1).
    assert d.path() == ["Owner/Idle", "Unclaimed/Idle"]
    assert d.numbers() == [22, 1]


def test_machine_max_vacate_time_hard_kills_and_killing_timeout_escalates() -> None:
    d = running("PREEMPT = KeyboardIdle < 60\nWANT_VACATE = True\nMachineMaxVacateTime = 120")
    d.at(30, KeyboardIdle=1)
    assert d.slot.vacate_deadline == 150
    d.at(145)
    assert d.where == "Preempting/Vacating"
    d.at(150)
    assert d.where == "Preempting/Killing"
    assert d.slot.transitions[0].reason.startswith("MachineMaxVacateTime")
    d.at(175)
    assert d.kinds() == []
    d.at(180)  # KILLING_TIMEOUT = 30
    assert [(a.kind, a.escalate) for a in d.last_actions] == [(ActionKind.HARD_KILL, True)]
    d.at(185)
    assert d.kinds() == []


def test_job_max_vacate_time_lower_than_the_machines_is_used() -> None:
    d = running("PREEMPT = KeyboardIdle < 60\nWANT_VACATE = True", JobMaxVacateTime=20)
    d.at(30, KeyboardIdle=1)
    assert d.slot.vacate_deadline == 50


def test_job_max_vacate_time_above_the_machines_uses_spare_retirement() -> None:
    # MachineMaxVacateTime 600, retirement 3600: the job asks 1200 s to vacate.
    text = "MaxJobRetirementTime = 3600\nWANT_VACATE = True"
    d = running(text, JobMaxVacateTime=1200)
    d.at(100, Vacate())  # irreversible, no retirement: vacate now with converted time
    assert d.where == "Preempting/Vacating"
    assert d.slot.vacate_deadline == 100 + 1200
    # With little retirement left, only what remains (more than the machine's 600) is given.
    d = running(text, JobMaxVacateTime=1200)
    d.at(2800, Vacate())
    assert d.slot.vacate_deadline == 2800 + 800
    # With less retirement left than MachineMaxVacateTime, the machine's time applies.
    d = running(text, JobMaxVacateTime=1200)
    d.at(3300, Vacate())
    assert d.slot.vacate_deadline == 3300 + 600


def test_kill_sig_comes_from_the_job() -> None:
    d = running("PREEMPT = KeyboardIdle < 60\nWANT_VACATE = True", KillSig="SIGQUIT")
    d.at(30, KeyboardIdle=1)
    assert d.last_actions[-1].signal == "SIGQUIT"


def test_retirement_waits_for_max_job_retirement_time_minus_vacate_time() -> None:
    d = running("PREEMPT = KeyboardIdle < 60\nMaxJobRetirementTime = 3600\nWANT_VACATE = True")
    d.at(100, KeyboardIdle=1)
    assert d.where == "Claimed/Retiring"
    # Enter Preempting MachineMaxVacateTime (600 s) before retirement ends at 3600.
    d.at(2995)
    assert d.where == "Claimed/Retiring"
    d.at(3000)
    assert d.where == "Preempting/Vacating"
    assert d.numbers() == [18]
    assert d.slot.vacate_deadline == 3600


def test_a_job_that_finishes_in_retirement_is_not_killed() -> None:
    d = running("PREEMPT = KeyboardIdle < 60\nMaxJobRetirementTime = 3600")
    d.at(100, KeyboardIdle=1)
    d.at(200, JobExited(0))
    # No job is left, so Preempting is only passed through (no soft kill, WANT_VACATE unused).
    assert d.path() == ["Preempting/Vacating", "Owner/Idle", "Unclaimed/Idle"]
    assert d.numbers() == [18, 22, 1]
    assert ActionKind.SOFT_KILL not in d.kinds()


def test_the_job_may_lower_retirement_but_never_raise_it() -> None:
    text = (
        "PREEMPT = KeyboardIdle < 60\nMaxJobRetirementTime = 3600\nMachineMaxVacateTime = 0\n"
        "WANT_VACATE = True"
    )
    lower = running(text, MaxJobRetirementTime=60)
    lower.at(10, KeyboardIdle=1)
    assert lower.where == "Claimed/Retiring"
    lower.at(60)
    assert lower.path() == ["Preempting/Vacating"]
    lower.at(65)  # MachineMaxVacateTime 0: the hard kill follows at the next cycle
    assert lower.path() == ["Preempting/Killing"]
    higher = running(text, MaxJobRetirementTime=100_000)
    higher.at(10, KeyboardIdle=1)
    higher.at(3595)
    assert higher.where == "Claimed/Retiring"
    higher.at(3600)
    assert higher.path()[0] == "Preempting/Vacating"


def test_suspension_does_not_count_against_retirement_and_transition_20() -> None:
    text = SUSPENDING.replace("PREEMPT = ", "PREEMPT = ConsoleIdle < 10 || ")
    text += "\nMaxJobRetirementTime = 1000\nMachineMaxVacateTime = 0\nWANT_VACATE = True"
    d = running(text)
    d.at(100, KeyboardIdle=1)
    assert d.where == "Claimed/Suspended"
    d.at(150, KeyboardIdle=400)  # suspended 50 s
    assert d.where == "Claimed/Busy"
    d.at(200, KeyboardIdle=30)
    assert d.where == "Claimed/Suspended"
    # PREEMPT while suspended: resumed into Retiring (16), and SUSPEND still holds (20).
    d.at(500, ConsoleIdle=5)
    assert d.path() == ["Claimed/Retiring", "Claimed/Suspended"]
    assert d.numbers() == [16, 20]
    d.at(800, KeyboardIdle=400)  # CONTINUE in retirement: back to Retiring (16)
    assert d.path() == ["Claimed/Retiring"]
    assert d.numbers() == [16]
    # Run time at 800: 800 - 50 - 600 suspended = 150 s; 850 s of 1000 remain.
    d.at(1645)
    assert d.where == "Claimed/Retiring"
    d.at(1650)
    assert d.path()[0] == "Preempting/Vacating"
    assert d.numbers()[0] == 18


def test_retirement_expiring_while_suspended_transition_17() -> None:
    # MaxJobRetirementTime drops during the suspension (the manual's only way to get 17).
    text = """
WANT_SUSPEND = True
SUSPEND = KeyboardIdle < 60
CONTINUE = False
PREEMPT = KeyboardIdle < 60
WANT_VACATE = True
MaxJobRetirementTime = ifThenElse(ConsoleIdle < 60, 0, 3600)
"""
    d = running(text)
    d.at(100, KeyboardIdle=1)
    assert d.where == "Claimed/Suspended"
    d.at(105, KeyboardIdle=1)  # PREEMPT while suspended -> retiring, then suspended again
    d.at(110, KeyboardIdle=1)
    assert d.where == "Claimed/Suspended"
    d.at(115, ConsoleIdle=1)
    assert d.where == "Preempting/Vacating"
    assert 17 in d.numbers()


def test_peaceful_shutdown_never_kills_and_fast_shutdown_kills_at_once() -> None:
    peaceful = running("MaxJobRetirementTime = 60")  # WANT_VACATE only matters after PREEMPT
    peaceful.at(10, Shutdown(ShutdownMode.PEACEFUL))
    assert peaceful.where == "Claimed/Retiring"
    peaceful.at(100_000)
    assert peaceful.where == "Claimed/Retiring"
    peaceful.at(100_005, JobExited(0))
    assert peaceful.path() == ["Preempting/Vacating", "Owner/Idle"]
    peaceful.at(100_010)
    assert peaceful.where == "Owner/Idle"  # a shutting-down startd stays out of the pool

    graceful = running("MaxJobRetirementTime = 60\nMachineMaxVacateTime = 0")
    graceful.at(10, Shutdown(ShutdownMode.GRACEFUL))
    graceful.at(55)
    assert graceful.where == "Claimed/Retiring"
    graceful.at(60)
    assert graceful.path() == ["Preempting/Vacating"]

    fast = running("MaxJobRetirementTime = 3600")
    fast.at(10, Shutdown(ShutdownMode.FAST))
    assert fast.where == "Preempting/Killing"
    assert fast.kinds() == [ActionKind.HARD_KILL]


def test_vacate_command_evicts_gracefully_or_fast() -> None:
    d = running("MaxJobRetirementTime = 3600")
    d.at(10, Vacate())
    assert d.where == "Preempting/Vacating"
    assert d.kinds() == [ActionKind.SOFT_KILL]
    d.at(20, Vacate(fast=True))
    assert d.where == "Preempting/Killing"
    d.at(25, JobGone())
    assert d.path() == ["Owner/Idle", "Unclaimed/Idle"]

    d = running()
    d.at(10, Vacate(fast=True))
    assert d.where == "Preempting/Killing"


def test_claim_lease_expiry_drops_the_claim_and_renewals_keep_it() -> None:
    d = running(JobLeaseDuration=100)
    d.at(90, LeaseRenewed())
    d.at(180)
    assert d.where == "Claimed/Busy"
    d.at(195)
    assert d.where == "Preempting/Killing"
    assert d.slot.transitions[0].reason == "claim lease expired"


def test_claim_worklife_closes_the_claim_after_its_job() -> None:
    d = running("CLAIM_WORKLIFE = 600")
    d.at(700, JobExited(0))
    # The claim is older than CLAIM_WORKLIFE and has run a job: it closes (transition 10).
    assert d.path() == ["Claimed/Idle", "Preempting/Vacating", "Owner/Idle", "Unclaimed/Idle"]
    assert "CLAIM_WORKLIFE" in d.slot.transitions[1].reason


def test_claim_worklife_refuses_another_job_on_an_old_claim() -> None:
    d = running("CLAIM_WORKLIFE = 600")
    d.at(100, JobExited(0))
    d.at(100, ActivateClaim(job_ad=job(), job_id="a.2"))
    assert d.where == "Claimed/Busy"  # still young: a second job runs on the claim
    assert d.slot.claim is not None and d.slot.claim.activations == 2


def test_start_false_on_an_idle_claim_preempts_it() -> None:
    d = driver(policy_from("START = KeyboardIdle > 60")).at(0)
    d.at(5, Match("c1", job(), job_id="a.1"))
    d.at(10, KeyboardIdle=2)
    assert d.path() == ["Preempting/Vacating", "Owner/Idle", "Unclaimed/Idle"]
    assert d.slot.transitions[0].reason == "START is FALSE"
