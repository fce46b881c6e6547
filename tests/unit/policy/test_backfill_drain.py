"""Backfill (transitions 7, 26-32), draining (33-37, each mode) and dynamic slots.

From "Backfill State", "Configuring HTCondor for Running Backfill Jobs", "Drained
State" and condor_drain's -graceful/-quick/-fast schedules.
"""

from __future__ import annotations

from policy_helpers import Driver, driver, job, policy_from

from kondor_core.policy import (
    ActionKind,
    ActivateClaim,
    Activity,
    BackfillExited,
    BackfillStarted,
    CancelDrain,
    Drain,
    DrainMode,
    JobExited,
    JobGone,
    MachineState,
    Match,
    ReleaseClaim,
    SlotKind,
    StartdPolicy,
    State,
    Vacate,
    step_machine,
)

BACKFILL = """
ENABLE_BACKFILL = TRUE
START_BACKFILL = $(StateTimer) > (5 * $(MINUTE))
EVICT_BACKFILL = $(MachineBusy)
"""

FACTS = {"LoadAvg": 0.0, "CondorLoadAvg": 0.0, "KeyboardIdle": 9999, "ConsoleIdle": 9999}


def backfilling() -> Driver:
    d = driver(policy_from(BACKFILL)).at(0)
    d.at(300)
    assert d.where == "Unclaimed/Idle"
    d.at(305)
    assert d.path() == ["Backfill/Idle"]
    assert d.numbers() == [7]
    assert d.kinds() == [ActionKind.START_BACKFILL]
    d.at(310, BackfillStarted())
    assert d.where == "Backfill/Busy"
    assert d.numbers() == [26]
    return d


def test_backfill_is_off_unless_enabled() -> None:
    d = driver(policy_from("START_BACKFILL = True")).at(0).at(1000)
    assert d.where == "Unclaimed/Idle"


def test_backfill_starts_after_five_unclaimed_minutes_and_is_evicted_by_the_owner() -> None:
    d = backfilling()
    d.at(400, KeyboardIdle=3)  # MachineBusy -> EVICT_BACKFILL
    assert d.path() == ["Backfill/Killing"]
    assert d.numbers() == [28]
    assert d.kinds() == [ActionKind.KILL_BACKFILL]
    d.at(405, BackfillExited())
    assert d.path() == ["Backfill/Idle", "Owner/Idle", "Unclaimed/Idle"]
    assert d.numbers() == [29, 30, 1]


def test_backfill_client_exiting_on_its_own_is_restarted_transition_27() -> None:
    d = backfilling()
    d.at(400, BackfillExited())
    assert d.path() == ["Backfill/Idle"]
    assert d.numbers() == [27]
    assert d.kinds() == [ActionKind.START_BACKFILL]


def test_a_match_kills_the_backfill_client_then_claims_transition_31() -> None:
    d = backfilling()
    d.at(400, Match("c1", job(), job_id="a.1"))
    assert d.where == "Backfill/Killing"
    d.at(405, BackfillExited())
    assert d.path() == ["Backfill/Idle", "Claimed/Idle"]
    assert d.numbers() == [29, 31]


def test_a_match_before_the_claim_goes_to_matched_transition_32() -> None:
    d = backfilling()
    d.at(400, Match("c1", job(), job_id="a.1", claimed=False))
    d.at(405, BackfillExited())
    assert d.path() == ["Backfill/Idle", "Matched/Idle"]
    assert d.numbers() == [29, 32]


def test_vacate_stops_backfill_and_returns_to_owner() -> None:
    d = backfilling()
    d.at(400, Vacate())
    assert d.where == "Backfill/Killing"


def two_slots(
    policy_text: str = "MaxJobRetirementTime = 600\nMachineMaxVacateTime = 60",
) -> tuple[StartdPolicy, MachineState]:
    policy = policy_from(policy_text)
    machine = MachineState.start(["slot1@n", "slot2@n"])
    result = step_machine(policy, machine, FACTS, 0)
    result = step_machine(
        policy,
        result.machine,
        FACTS,
        10,
        slot_events={"slot1@n": [Match("c1", job(), job_id="a.1"), ActivateClaim()]},
    )
    return policy, result.machine


def where(machine: MachineState) -> list[str]:
    return [f"{s.state}/{s.activity}" for s in machine.slots]


def test_graceful_drain_retires_jobs_then_every_slot_is_drained() -> None:
    policy, machine = two_slots()
    result = step_machine(policy, machine, FACTS, 100, [Drain(DrainMode.GRACEFUL)])
    assert where(result.machine) == ["Claimed/Retiring", "Drained/Retiring"]
    assert [t.number for t in result.transitions] == [13, 37]
    # The job keeps its retirement (600 s from its start at 10, minus the vacate time).
    result = step_machine(policy, result.machine, FACTS, 545)
    assert where(result.machine) == ["Claimed/Retiring", "Drained/Retiring"]
    result = step_machine(policy, result.machine, FACTS, 550)
    assert where(result.machine) == ["Preempting/Vacating", "Drained/Retiring"]
    result = step_machine(policy, result.machine, FACTS, 555, slot_events={"slot1@n": [JobGone()]})
    assert where(result.machine) == ["Drained/Idle", "Drained/Idle"]
    assert [t.number for t in result.transitions] == [22, 36, 33, 33]
    result = step_machine(policy, result.machine, FACTS, 1000)
    assert where(result.machine) == ["Drained/Idle", "Drained/Idle"]
    result = step_machine(policy, result.machine, FACTS, 1005, [CancelDrain()])
    assert where(result.machine) == ["Unclaimed/Idle", "Unclaimed/Idle"]
    assert [t.number for t in result.transitions] == [34, 1, 34, 1]


def test_graceful_drain_coordinates_retirement_to_the_longest() -> None:
    policy = policy_from("MaxJobRetirementTime = 600\nMachineMaxVacateTime = 0")
    machine = MachineState.start(["slot1@n", "slot2@n"])
    result = step_machine(policy, machine, FACTS, 0)
    result = step_machine(
        policy,
        result.machine,
        FACTS,
        10,
        slot_events={
            "slot1@n": [Match("c1", job(), job_id="a.1"), ActivateClaim()],
            "slot2@n": [
                Match("c2", job(MaxJobRetirementTime=100), job_id="b.1"),
                ActivateClaim(),
            ],
        },
    )
    result = step_machine(policy, result.machine, FACTS, 20, [Drain(DrainMode.GRACEFUL)])
    result = step_machine(policy, result.machine, FACTS, 200)
    # b.1 asked for only 100 s, but draining gives every job the longest retirement.
    assert where(result.machine) == ["Claimed/Retiring", "Claimed/Retiring"]
    result = step_machine(policy, result.machine, FACTS, 610)
    assert where(result.machine) == ["Preempting/Vacating", "Preempting/Vacating"]


def test_cancelling_a_graceful_drain_unretires_the_job_transition_19() -> None:
    policy, machine = two_slots()
    result = step_machine(policy, machine, FACTS, 100, [Drain(DrainMode.GRACEFUL)])
    result = step_machine(policy, result.machine, FACTS, 200, [CancelDrain()])
    assert where(result.machine) == ["Claimed/Busy", "Unclaimed/Idle"]
    assert [t.number for t in result.transitions] == [19, 35, 1]


def test_quick_drain_vacates_at_once_and_fast_drain_kills() -> None:
    policy, machine = two_slots()
    quick = step_machine(policy, machine, FACTS, 100, [Drain(DrainMode.QUICK)])
    assert where(quick.machine) == ["Preempting/Vacating", "Drained/Retiring"]
    assert [a.kind for a in quick.actions] == [ActionKind.SOFT_KILL]
    # MachineMaxVacateTime (60 s) still applies.
    later = step_machine(policy, quick.machine, FACTS, 160)
    assert where(later.machine) == ["Preempting/Killing", "Drained/Retiring"]

    fast = step_machine(policy, machine, FACTS, 100, [Drain(DrainMode.FAST)])
    assert where(fast.machine) == ["Preempting/Killing", "Drained/Retiring"]
    assert [a.kind for a in fast.actions] == [ActionKind.HARD_KILL]


def test_drain_with_resume_on_completion_finalizes_to_owner() -> None:
    policy, machine = two_slots()
    result = step_machine(
        policy, machine, FACTS, 100, [Drain(DrainMode.FAST, resume_on_completion=True)]
    )
    result = step_machine(policy, result.machine, FACTS, 105, slot_events={"slot1@n": [JobGone()]})
    assert where(result.machine) == ["Unclaimed/Idle", "Unclaimed/Idle"]
    assert result.machine.draining is None
    numbers = [t.number for t in result.transitions]
    assert numbers[-4:] == [34, 1, 34, 1]


def test_draining_refuses_new_matches() -> None:
    policy, machine = two_slots()
    result = step_machine(policy, machine, FACTS, 100, [Drain(DrainMode.GRACEFUL)])
    result = step_machine(
        policy,
        result.machine,
        FACTS,
        105,
        slot_events={"slot2@n": [Match("c9", job(), job_id="z.1")]},
    )
    assert [a.kind for a in result.actions] == [ActionKind.REFUSE_CLAIM]


def test_a_match_on_a_partitionable_slot_carves_a_dynamic_slot_released_after_the_job() -> None:
    policy = policy_from()
    machine = MachineState.start(["slot1@n"], partitionable=["slot1@n"])
    result = step_machine(policy, machine, FACTS, 0)
    result = step_machine(
        policy,
        result.machine,
        FACTS,
        10,
        slot_events={"slot1@n": [Match("c1", job(), job_id="a.1")]},
    )
    names = [s.name for s in result.machine.slots]
    assert names == ["slot1@n", "slot1_1@n"]
    dslot = result.machine.slot("slot1_1@n")
    assert dslot.kind is SlotKind.DYNAMIC and dslot.parent == "slot1@n"
    assert (dslot.state, dslot.activity) == (State.CLAIMED, Activity.IDLE)
    assert [a.kind for a in result.actions] == [ActionKind.CARVE_DYNAMIC_SLOT]
    assert result.actions[0].dynamic_slot == "slot1_1@n"
    result = step_machine(
        policy, result.machine, FACTS, 20, slot_events={"slot1_1@n": [ActivateClaim()]}
    )
    result = step_machine(
        policy,
        result.machine,
        FACTS,
        30,
        slot_events={"slot1_1@n": [JobExited(0), ReleaseClaim()]},
    )
    assert [s.name for s in result.machine.slots] == ["slot1@n"]
    kinds = [a.kind for a in result.actions]
    assert kinds == [ActionKind.RELEASE_CLAIM, ActionKind.RELEASE_DYNAMIC_SLOT]
    # The next match gets a new name.
    result = step_machine(
        policy,
        result.machine,
        FACTS,
        40,
        slot_events={"slot1@n": [Match("c2", job(), job_id="a.2")]},
    )
    assert [s.name for s in result.machine.slots] == ["slot1@n", "slot1_2@n"]


def test_a_partitionable_slot_refuses_jobs_its_start_rejects() -> None:
    policy = policy_from('START = Owner == "alice"')
    machine = MachineState.start(["slot1@n"], partitionable=["slot1@n"])
    result = step_machine(
        policy,
        machine,
        FACTS,
        0,
        slot_events={"slot1@n": [Match("c1", job("bob"), job_id="b.1")]},
    )
    assert [s.name for s in result.machine.slots] == ["slot1@n"]
    assert [a.kind for a in result.actions] == [ActionKind.REFUSE_CLAIM]


def test_facts_changed_in_place_between_cycles_are_seen() -> None:
    desktop = policy_from("IS_OWNER = KeyboardIdle < 60")
    facts = dict(FACTS)
    machine = MachineState.start(["slot1@n"])
    result = step_machine(desktop, machine, facts, 0)
    assert where(result.machine) == ["Unclaimed/Idle"]
    facts["KeyboardIdle"] = 1  # the same dict object, changed
    result = step_machine(desktop, result.machine, facts, 5)
    assert where(result.machine) == ["Owner/Idle"]
