"""Bad input is rejected early, naming the knob, the value and what is allowed."""

from __future__ import annotations

import pytest
from policy_helpers import driver, job, policy_from

from kondor_core.classads import ExpressionError
from kondor_core.policy import (
    ActivateClaim,
    Drain,
    EngineError,
    MachineState,
    Match,
    SlotState,
    StartdPolicy,
    step,
    step_machine,
)
from kondor_core.sim import TimelineStep, run_timeline


@pytest.mark.parametrize(
    ("knob", "text"),
    [
        ("START", "KeyboardIdle > && 3"),
        ("SUSPEND", "(KeyboardIdle < 60"),
        ("RANK", 'Owner == "coltrane'),
        ("MaxJobRetirementTime", "3600 *"),
    ],
)
def test_unparsable_expression_names_the_knob_and_quotes_classad2(knob: str, text: str) -> None:
    with pytest.raises(ExpressionError) as caught:
        StartdPolicy.compile({knob: text})
    message = str(caught.value)
    assert message.startswith(f"{knob}: {text!r}")
    assert "classad2: " in message
    assert caught.value.field == knob


def test_unparsable_startd_attribute_names_it() -> None:
    with pytest.raises(ExpressionError, match=r"^IsDesktop: "):
        StartdPolicy.compile({}, startd_attrs={"IsDesktop": "True &&"})


@pytest.mark.parametrize(
    ("knob", "text", "expected"),
    [
        ("MATCH_TIMEOUT", '"soon"', "must evaluate to a number"),
        ("KILLING_TIMEOUT", "Undefined", "not UNDEFINED"),
        ("ENABLE_BACKFILL", '"yes"', "must evaluate to TRUE or FALSE"),
        ("CLAIM_WORKLIFE", '"forever"', "-1 or empty for no limit"),
    ],
)
def test_settings_must_have_the_right_type(knob: str, text: str, expected: str) -> None:
    with pytest.raises(EngineError, match=knob) as caught:
        StartdPolicy.compile({knob: text})
    assert expected in str(caught.value)


def test_time_going_backwards_is_rejected() -> None:
    d = driver(policy_from()).at(100)
    with pytest.raises(EngineError, match=r"time went backwards: now=99 is before .* 100"):
        d.at(99)
    policy = policy_from()
    machine = step_machine(policy, MachineState.start(["slot1@n"]), {}, 50).machine
    with pytest.raises(EngineError, match="time went backwards"):
        step_machine(policy, machine, {}, 49)
    with pytest.raises(EngineError, match="steps go back in time"):
        run_timeline(
            policy,
            MachineState.start(["slot1@n"]),
            [TimelineStep(at=20), TimelineStep(at=10)],
            until=60,
        )


def test_events_for_unknown_slots_are_rejected() -> None:
    policy = policy_from()
    machine = MachineState.start(["slot1@n"])
    with pytest.raises(EngineError, match=r"'slot9@n'.*slots: slot1@n"):
        step_machine(policy, machine, {}, 0, slot_events={"slot9@n": [ActivateClaim()]})
    with pytest.raises(EngineError, match="slot9@n"):
        run_timeline(
            policy,
            machine,
            [TimelineStep(at=5, slot_events={"slot9@n": [ActivateClaim()]})],
            until=10,
        )


def test_slot_events_must_not_be_machine_wide() -> None:
    policy = policy_from()
    with pytest.raises(EngineError, match="addressed to one slot"):
        step_machine(policy, MachineState.start(["slot1@n"]), {}, 0, [ActivateClaim()])
    with pytest.raises(EngineError, match="draining is machine-wide"):
        step(policy, SlotState(name="slot1@n"), {}, None, 0, [Drain()])


def test_a_job_ad_must_be_an_ad() -> None:
    d = driver(policy_from()).at(0)
    with pytest.raises(EngineError, match="job ad must be a ClassAd or a mapping"):
        d.at(5, Match("c1", ["Owner", "alice"], job_id="a.1"))


def test_flip_flopping_policy_changes_once_per_cycle() -> None:
    # SUSPEND and CONTINUE both TRUE: the startd flips every polling cycle, never loops.
    d = driver(policy_from("WANT_SUSPEND = True\nSUSPEND = True\nCONTINUE = True")).at(0)
    d.at(5, Match("c1", job(), job_id="a.1"), ActivateClaim())
    assert d.path() == ["Claimed/Idle", "Claimed/Busy", "Claimed/Suspended"]
    d.at(10)
    assert d.path() == ["Claimed/Busy"]
    d.at(15)
    assert d.path() == ["Claimed/Suspended"]
