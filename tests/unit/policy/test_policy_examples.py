"""The reference's "Examples of Policy Configuration", run over time.

Default policy, POLICY : Desktop, the test-job (coltrane) policy, time of day,
Desktop/Non-Desktop with IsDesktop, disabled preemption, RANK preemption
(jones, then garrison, on garrison's machine bass) and the suspendable /
non-suspendable slot pair.
"""

from __future__ import annotations

from collections.abc import Sequence

from policy_helpers import DESKTOP, Driver, driver, job, policy_from

from kondor_core.policy import (
    ActionKind,
    ActivateClaim,
    JobExited,
    JobGone,
    MachineState,
    Match,
    PreemptingClaimWithdrawn,
    State,
    advertised,
    step_machine,
)

TEST_JOB = """
START      = ($(START)) || Owner == "coltrane"
SUSPEND    = ($(SUSPEND)) && Owner != "coltrane"
CONTINUE   = $(CONTINUE)
PREEMPT    = ($(PREEMPT)) && Owner != "coltrane"
KILL       = $(KILL)
"""

TIME_OF_DAY = """
WorkHours = ( (ClockMin >= 480 && ClockMin < 1020) && \\
              (ClockDay > 0 && ClockDay < 6) )
AfterHours = ( (ClockMin < 480 || ClockMin >= 1020) || \\
               (ClockDay == 0 || ClockDay == 6) )
# Only start jobs after hours.
START = $(AfterHours)
# Consider the machine busy during work hours, or if the keyboard or
# CPU are busy.
MachineBusy = ( $(WorkHours) || $(CPUBusy) || $(KeyboardBusy) )
WANT_SUSPEND = False
PREEMPT = $(MachineBusy)
WANT_VACATE = True
"""

DESKTOP_NON_DESKTOP = """
STARTD_ATTRS = IsDesktop
START = ( ($(CPUIdle) || (State != "Unclaimed" && State != "Owner")) \\
          && (IsDesktop =!= True || (KeyboardIdle > $(StartIdleTime))) )
WANT_SUSPEND = ( $(SmallJob) || $(JustCpu) \\
                 || $(IsVanilla) )
WANT_VACATE  = ( $(ActivationTimer) > 10 * $(MINUTE) \\
                 || $(IsVanilla) )
SUSPEND = ( ((CpuBusyTime > 2 * $(MINUTE)) && ($(ActivationTimer) > 90)) \\
            || ( IsDesktop =?= True && $(KeyboardBusy) ) )
CONTINUE = ( $(CPUIdle) && ($(ActivityTimer) > 300) \\
             && (IsDesktop =!= True || (KeyboardIdle > $(ContinueIdleTime))) )
PREEMPT = ( ((Activity == "Suspended") && \\
            ($(ActivityTimer) > $(MaxSuspendTime))) \\
           || (SUSPEND && (WANT_SUSPEND == False)) )
MAXJOBRETIREMENTTIME = (IsDesktop =!= True) * 0
MachineMaxVacateTime = 10 * $(MINUTE)
KILL = False
"""

# 2026-11-23 was a Monday (ClockDay 1); times are UTC (utc_offset 0).
MONDAY = 1_795_392_000


def run(policy_text: str, *, use: Sequence[str] = (), **facts: object) -> Driver:
    policy = policy_from(policy_text, use=use)
    return driver(policy, **facts).at(0)


def test_default_policy_always_starts_and_never_preempts() -> None:
    d = run("")
    d.at(10, Match("c1", job(), job_id="a.1"), ActivateClaim())
    for t, keyboard, load in [(20, 1, 0.0), (100, 1, 4.0), (900, 0, 9.0)]:
        d.at(t, KeyboardIdle=keyboard, LoadAvg=load)
        assert d.where == "Claimed/Busy"
    d.at(1000, JobExited(0))
    assert d.where == "Claimed/Idle"
    d.at(1000, ActivateClaim(job_ad=job(), job_id="a.2"))
    assert d.where == "Claimed/Busy"
    # The job ends after CLAIM_WORKLIFE (1200 s by default): the claim takes no more jobs.
    d.at(6000, JobExited(0))
    assert d.path() == ["Claimed/Idle", "Preempting/Vacating", "Owner/Idle", "Unclaimed/Idle"]


def test_desktop_runs_when_idle_suspends_on_keyboard_and_vacates_after_max_suspend_time() -> None:
    d = run("", use=DESKTOP)
    assert d.where == "Unclaimed/Idle"
    d.at(10, Match("c1", job(), job_id="a.1"), ActivateClaim())
    d.at(100, KeyboardIdle=5)  # owner is back: SUSPEND; WANT_SUSPEND is TRUE (vanilla)
    assert d.where == "Claimed/Suspended"
    d.at(400, KeyboardIdle=5)
    d.at(700, KeyboardIdle=5)
    assert d.where == "Claimed/Suspended"
    # MaxSuspendTime (10 minutes) passed: PREEMPT, retirement 0, WANT_VACATE (vanilla): vacate.
    d.at(705, KeyboardIdle=10)
    assert d.path() == ["Claimed/Retiring", "Preempting/Vacating"]
    d.at(710, JobGone())
    # IS_OWNER = START =?= FALSE: the keyboard is busy, so the slot stays with its owner.
    assert d.path() == ["Owner/Idle"]
    d.at(2000, KeyboardIdle=1000)
    assert d.where == "Unclaimed/Idle"


def test_desktop_continues_when_the_owner_leaves() -> None:
    d = run("", use=DESKTOP)
    d.at(10, Match("c1", job(), job_id="a.1"), ActivateClaim())
    d.at(100, KeyboardIdle=5)
    d.at(200, KeyboardIdle=305)  # idle for more than ContinueIdleTime, CPU idle
    assert d.where == "Claimed/Busy"
    assert d.numbers() == [15]


def test_desktop_cpu_busy_suspends_after_two_minutes_of_busy_cpu() -> None:
    d = run("", use=DESKTOP)
    d.at(10, Match("c1", job(), job_id="a.1"), ActivateClaim())
    d.at(200, LoadAvg=1.5)  # CpuBusy latches at 200
    assert d.where == "Claimed/Busy"
    assert advertised(d.policy, d.slot, d.facts, 200)["State"] == "Claimed"
    d.at(320)
    assert d.where == "Claimed/Busy"
    d.at(325)  # CpuBusyTime 125 > 120 and the job has run more than 90 s
    assert d.where == "Claimed/Suspended"
    d.at(330, LoadAvg=0.1)  # the latch resets when CpuBusy turns false
    assert d.slot.cpu_busy_since is None


def test_coltrane_test_jobs_are_never_suspended_or_preempted() -> None:
    d = run(TEST_JOB, use=DESKTOP, KeyboardIdle=5)
    # START is (FALSE) || UNDEFINED locally: the owner is typing, yet the slot is Unclaimed.
    assert d.where == "Unclaimed/Idle"
    d.at(10, Match("c1", job("coltrane"), job_id="coltrane.1"), ActivateClaim())
    assert d.where == "Claimed/Busy"  # a job matching START is run even from Owner
    for t in (100, 1000, 2000):
        d.at(t, KeyboardIdle=1, LoadAvg=3.0)
        assert d.where == "Claimed/Busy"

    other = run(TEST_JOB, use=DESKTOP)
    other.at(10, Match("c1", job("jones"), job_id="jones.1"), ActivateClaim())
    other.at(100, KeyboardIdle=1)
    assert other.where == "Claimed/Suspended"


def test_time_of_day_policy_starts_only_after_hours_and_evicts_at_work_hours() -> None:
    ten_am = MONDAY + 10 * 3600
    d = driver(policy_from(TIME_OF_DAY)).at(ten_am)
    d.at(ten_am + 5, Match("c1", job(), job_id="a.1"))
    assert d.kinds() == [ActionKind.REFUSE_CLAIM]
    six_pm = MONDAY + 18 * 3600
    d.at(six_pm, Match("c2", job(), job_id="a.2"), ActivateClaim())
    assert d.where == "Claimed/Busy"
    d.at(MONDAY + 24 * 3600 + 7 * 3600 + 55 * 60)  # Tuesday 07:55
    assert d.where == "Claimed/Busy"
    d.at(MONDAY + 24 * 3600 + 8 * 3600)  # Tuesday 08:00: WorkHours make MachineBusy
    assert d.path() == ["Claimed/Retiring", "Preempting/Vacating"]
    saturday_noon = MONDAY + 5 * 86400 + 12 * 3600
    d.at(saturday_noon, JobGone())
    d.at(saturday_noon + 5, Match("c3", job(), job_id="a.3"))
    assert d.where == "Claimed/Idle"


def test_desktop_and_non_desktop_machines_differ_only_in_isdesktop() -> None:
    desktop = driver(policy_from(DESKTOP_NON_DESKTOP + "\nIsDesktop = True")).at(0)
    # STARTD_ATTRS lists IsDesktop, and the compiler wants what it lists defined: a
    # dedicated machine says False (=!= True and =?= True read it as they read UNDEFINED).
    dedicated = driver(policy_from(DESKTOP_NON_DESKTOP + "\nIsDesktop = False")).at(0)
    for d in (desktop, dedicated):
        d.at(10, Match("c1", job(), job_id="a.1"), ActivateClaim())
        assert d.where == "Claimed/Busy"
        d.at(500, KeyboardIdle=2)
    assert desktop.where == "Claimed/Suspended"
    assert dedicated.where == "Claimed/Busy"  # keyboard activity is ignored
    # A busy CPU suspends both after 2 minutes (and 90 s of run time).
    dedicated.at(600, LoadAvg=2.0)
    dedicated.at(725)
    assert dedicated.where == "Claimed/Suspended"


def test_desktop_start_uses_the_keyboard_only_on_desktops() -> None:
    desktop = driver(policy_from(DESKTOP_NON_DESKTOP + "\nIsDesktop = True"), KeyboardIdle=5)
    desktop.at(0, Match("c1", job(), job_id="a.1"))
    assert desktop.kinds() == [ActionKind.REFUSE_CLAIM]
    dedicated = driver(policy_from(DESKTOP_NON_DESKTOP + "\nIsDesktop = False"), KeyboardIdle=5)
    dedicated.at(0, Match("c1", job(), job_id="a.1"))
    assert dedicated.where == "Claimed/Idle"


def test_disabled_preemption_keeps_jobs_running() -> None:
    d = run("START = True\nSUSPEND = False\nPREEMPT = False\nKILL = False", use=DESKTOP)
    d.at(10, Match("c1", job(), job_id="a.1"), ActivateClaim())
    for t in (20, 600, 7200):
        d.at(t, KeyboardIdle=0, LoadAvg=8.0)
        assert d.where == "Claimed/Busy"


BASS = """
RANK = (Owner == "coltrane") + (Owner == "tyner") \\
    + ((Owner == "garrison") * 10) + (Owner == "jones")
"""


def test_rank_preemption_jones_then_garrison_on_bass() -> None:
    d = run(BASS)
    d.at(10, Match("c0", job("elvis"), job_id="elvis.1"), ActivateClaim())
    assert d.slot.claim is not None and d.slot.claim.rank == 0
    # Elvin Jones's job: RANK 1 > CurrentRank 0, so it may preempt the running job.
    d.at(100, Match("c1", job("jones"), job_id="jones.1"))
    assert d.path() == ["Claimed/Retiring", "Preempting/Vacating"]
    assert d.numbers() == [13, 18]
    assert "RANK preemption by jones.1" in d.slot.transitions[0].reason
    assert d.kinds() == [ActionKind.SOFT_KILL]
    assert advertised(d.policy, d.slot, d.facts, 100)["Requirements"] is False
    d.at(105, JobGone())
    assert d.path() == ["Claimed/Idle"]
    assert d.numbers() == [23]
    assert d.slot.claim is not None and d.slot.claim.job_id == "jones.1"
    assert advertised(d.policy, d.slot, d.facts, 105)["CurrentRank"] == 1
    d.at(110, ActivateClaim())
    # A second jones job ranks no higher: refused.
    d.at(200, Match("c2", job("jones"), job_id="jones.2"))
    assert d.kinds() == [ActionKind.REFUSE_CLAIM]
    # Jimmy Garrison's job ranks 10 on his own machine: it preempts Jones.
    d.at(300, Match("c3", job("garrison"), job_id="garrison.1"))
    assert d.where == "Preempting/Vacating"
    d.at(305, JobGone())
    assert d.slot.claim is not None and d.slot.claim.job_id == "garrison.1"
    assert d.slot.claim.rank == 10


def test_rank_preemption_retirement_is_cancelled_when_the_preempting_claim_goes_away() -> None:
    d = run(BASS + "\nMaxJobRetirementTime = 3600")
    d.at(10, Match("c0", job("elvis"), job_id="elvis.1"), ActivateClaim())
    d.at(100, Match("c1", job("jones"), job_id="jones.1"))
    assert d.where == "Claimed/Retiring"
    d.at(200, PreemptingClaimWithdrawn())
    assert d.where == "Claimed/Busy"
    assert d.numbers() == [19]


def test_owner_preemption_is_not_undone() -> None:
    d = run("PREEMPT = KeyboardIdle < 60\nMaxJobRetirementTime = 3600")
    d.at(10, Match("c0", job(), job_id="a.1"), ActivateClaim())
    d.at(100, KeyboardIdle=1)
    d.at(200, KeyboardIdle=5000)
    assert d.where == "Claimed/Retiring"  # "no unretirement is possible"


def test_vanilla_variants_are_used_for_vanilla_jobs() -> None:
    text = "WANT_SUSPEND = True\nSUSPEND = False\nSUSPEND_VANILLA = KeyboardIdle < 60"
    vanilla = run(text)
    vanilla.at(10, Match("c1", job(), job_id="a.1"), ActivateClaim())
    vanilla.at(20, KeyboardIdle=1)
    assert vanilla.where == "Claimed/Suspended"
    other = run(text)
    other.at(10, Match("c1", job(JobUniverse=7), job_id="a.1"), ActivateClaim())
    other.at(20, KeyboardIdle=1)
    assert other.where == "Claimed/Busy"


SUSPENDABLE_PAIR = """
IsSuspendableSlot = SlotID > 1
NonSuspendableSlotState = eval(strcat("slot",SlotID-1,"_State"))
STARTD_SLOT_ATTRS = State
STARTD_ATTRS = IsSuspendableSlot NonSuspendableSlotState
MyNonSuspendableSlotIsIdle = \\
  (NonSuspendableSlotState =!= "Claimed" && NonSuspendableSlotState =!= "Preempting")
START = \\
  IsSuspendableSlot!=True && IsSuspendableJob=!=True || \\
  IsSuspendableSlot && IsSuspendableJob==True && $(MyNonSuspendableSlotIsIdle)
SUSPEND = \\
  IsSuspendableSlot && $(MyNonSuspendableSlotIsIdle)!=True
WANT_SUSPEND = $(SUSPEND)
CONTINUE = ($(SUSPEND)) != True
"""


def test_suspendable_slot_pair_suspends_for_the_nonsuspendable_job() -> None:
    # One core: slot1 is non-suspendable, slot2 suspendable. (The manual's
    # NonSuspendableSlotState lacks a closing parenthesis; it is balanced here.)
    policy = policy_from(SUSPENDABLE_PAIR)
    machine = MachineState.start(["slot1@node", "slot2@node"])
    facts = {"LoadAvg": 0.0, "CondorLoadAvg": 0.0, "KeyboardIdle": 9999}
    result = step_machine(policy, machine, facts, 0)
    assert [s.state for s in result.machine.slots] == [State.UNCLAIMED, State.UNCLAIMED]

    suspendable = job("alice", IsSuspendableJob=True)
    result = step_machine(
        policy,
        result.machine,
        facts,
        10,
        slot_events={"slot1@node": [Match("x", suspendable, job_id="s.0")]},
    )
    assert result.actions[0].kind is ActionKind.REFUSE_CLAIM  # slot1 takes no suspendable job
    result = step_machine(
        policy,
        result.machine,
        facts,
        20,
        slot_events={"slot2@node": [Match("c2", suspendable, job_id="s.1"), ActivateClaim()]},
    )
    assert result.machine.slot("slot2@node").activity.value == "Busy"

    plain = job("bob")
    result = step_machine(
        policy,
        result.machine,
        facts,
        30,
        slot_events={"slot1@node": [Match("c1", plain, job_id="n.1"), ActivateClaim()]},
    )
    slot1, slot2 = result.machine.slots
    assert (slot1.state.value, slot1.activity.value) == ("Claimed", "Busy")
    # slot2 sees slot1_State == "Claimed" in the same cycle and suspends its job.
    assert (slot2.state.value, slot2.activity.value) == ("Claimed", "Suspended")
    assert [a.kind for a in result.actions if a.slot == "slot2@node"] == [ActionKind.SUSPEND_JOB]

    result = step_machine(
        policy,
        result.machine,
        facts,
        40,
        slot_events={"slot1@node": [JobExited(0)]},
    )
    result = step_machine(policy, result.machine, facts, 45, slot_events={})
    assert result.machine.slot("slot2@node").activity.value == "Suspended"  # slot1 still claimed
    from kondor_core.policy import ReleaseClaim

    result = step_machine(
        policy, result.machine, facts, 50, slot_events={"slot1@node": [ReleaseClaim()]}
    )
    assert result.machine.slot("slot2@node").activity.value == "Busy"


def test_rank_preemption_killed_with_kill_ends_claimed_idle_transition_24() -> None:
    d = run(BASS + "\nKILL = $(ActivityTimer) > 30")
    d.at(10, Match("c0", job("elvis"), job_id="elvis.1"), ActivateClaim())
    d.at(100, Match("c1", job("garrison"), job_id="garrison.1"))
    assert d.where == "Preempting/Vacating"  # a RANK preemption always vacates first
    d.at(135)
    assert d.where == "Preempting/Killing"
    d.at(140, JobGone())
    assert d.path() == ["Claimed/Idle"]
    assert d.numbers() == [24]


def test_time_in_policies_follows_simulated_time() -> None:
    d = run("START = $(StateTimer) < 3600 || $(StateTimer) > 7200")
    d.at(3000, Match("c1", job(), job_id="a.1"))
    assert d.where == "Claimed/Idle"  # StateTimer 3000 (time() is the simulated now)
    other = run("START = $(StateTimer) < 3600 || $(StateTimer) > 7200")
    other.at(5000, Match("c1", job(), job_id="a.1"))
    assert other.kinds() == [ActionKind.REFUSE_CLAIM]


def test_job_expressions_see_simulated_time_too() -> None:
    # The job asks for retirement only during its first hour, in terms of time().
    text = "PREEMPT = KeyboardIdle < 60\nMaxJobRetirementTime = 100000\nMachineMaxVacateTime = 0"
    d = run(text)
    d.at(
        10,
        Match(
            "c1", job(MaxJobRetirementTime=_expr("ifThenElse(time() < 500, 1000, 0)")), job_id="a.1"
        ),
        ActivateClaim(),
    )
    d.at(100, KeyboardIdle=1)
    assert d.where == "Claimed/Retiring"
    d.at(500)
    assert d.where.startswith("Preempting")


def _expr(text: str) -> object:
    import classad2

    return classad2.ExprTree(text)


def test_hibernate_is_evaluated_locally() -> None:
    from kondor_core.policy import hibernate

    d = run('HIBERNATE = ifThenElse(KeyboardIdle > 7200, "RAM", "NONE")')
    assert hibernate(d.policy, d.slot, d.facts, 0) == "NONE"
    assert hibernate(d.policy, d.slot, {**d.facts, "KeyboardIdle": 8000}, 0) == "RAM"
    assert hibernate(run("").policy, d.slot, d.facts, 0) is None


def test_from_effective_reads_expressions_startd_attrs_and_macros() -> None:
    from kondor_core.config.effective import EffectivePolicy
    from kondor_core.policy import StartdPolicy

    effective = EffectivePolicy(
        expressions={"START": "IsDesktop =!= True || KeyboardIdle > 900", "IS_OWNER": "False"},
        startd_attrs={"IsDesktop": "True"},
        macros={"CpuBusy": "(LoadAvg - CondorLoadAvg) >= 0.5", "CLAIM_WORKLIFE": "-1"},
    )
    policy = StartdPolicy.from_effective(effective)
    assert policy.claim_worklife is None
    assert policy.has("CpuBusy")
    from policy_helpers import Driver

    from kondor_core.policy import SlotState

    d = Driver(policy=policy, slot=SlotState(name="slot1@n"), facts={"KeyboardIdle": 5})
    d.at(0, Match("c1", job(), job_id="a.1"))
    assert d.kinds() == [ActionKind.REFUSE_CLAIM]  # IsDesktop from STARTD_ATTRS


def test_startd_slot_attrs_share_engine_attributes_and_facts() -> None:
    policy = policy_from(
        "STARTD_SLOT_ATTRS = State, Activity, LoadAvg\n"
        'START = slot1_Activity =!= "Busy" && slot1_LoadAvg < 1'
    )
    machine = MachineState.start(["slot1@n", "slot2@n"])
    facts = {"LoadAvg": 0.5, "CondorLoadAvg": 0.0, "KeyboardIdle": 9999}
    result = step_machine(
        policy,
        machine,
        facts,
        0,
        slot_events={"slot1@n": [Match("c1", job(), job_id="a.1"), ActivateClaim()]},
    )
    result = step_machine(
        policy,
        result.machine,
        facts,
        5,
        slot_events={"slot2@n": [Match("c2", job(), job_id="b.1")]},
    )
    assert [a.kind for a in result.actions] == [ActionKind.REFUSE_CLAIM]


def test_rank_of_a_job_for_the_negotiator_side() -> None:
    from kondor_core.policy import rank

    d = run(BASS)
    assert rank(d.policy, d.slot, d.facts, job("garrison"), 0) == 10
    assert rank(d.policy, d.slot, d.facts, job("jones"), 0) == 1
    assert rank(d.policy, d.slot, d.facts, job("elvis"), 0) == 0
