"""Power management (kondor_core.startd.power): HIBERNATE evaluated in every slot, the
reference's agreement rule (any NONE vetoes, the largest magnitude wins), the check interval
knob, and the Node annotations the operator writes."""

from __future__ import annotations

import re

import pytest

from kondor_core import startd
from kondor_core.api import ExecutionJobSpec, Machine, SlotPolicySpec
from kondor_core.api.executionpoint import PowerStatus
from kondor_core.config import compile_policy
from kondor_core.jobs import submit_ad
from kondor_core.policy import ActivateClaim, Event, Match
from kondor_core.startd.power import (
    ORIGINAL_ANNOTATION,
    SCALE_DOWN_DISABLED,
    SLEEP_STATE_ANNOTATION,
    PowerConfigError,
    agree,
    check_interval,
    evaluate,
    node_annotations,
    power_status,
)

#: The reference's example, with the slot's state standing for ShouldHibernate.
POLICY = """HIBERNATE_CHECK_INTERVAL = 20
HibernateState = "RAM"
ShouldHibernate = (State == "Unclaimed")
HIBERNATE = ifThenElse($(ShouldHibernate), $(HibernateState), "NONE")
"""


@pytest.mark.parametrize(
    ("slots", "state", "why"),
    [
        ({"slot1@n": "RAM", "slot2@n": "RAM"}, "RAM", ""),
        ({"slot1@n": "RAM", "slot2@n": "NONE"}, None, "slot2@n: HIBERNATE is 'NONE'"),
        ({"slot1@n": "RAM", "slot2@n": None}, None, "slot2@n: HIBERNATE is 'NONE'"),
        ({"slot1@n": "S1", "slot2@n": "DISK"}, "DISK", ""),  # the largest magnitude
        ({"slot1@n": "shutdown", "slot2@n": "S4"}, "SHUTDOWN", ""),
        ({"slot1@n": "RAM", "slot2@n": "NAP"}, None, "slot2@n: HIBERNATE is 'NAP', not a sleep"),
        ({}, None, "the node has no slots"),
    ],
)
def test_every_slot_must_agree_and_the_deepest_state_wins(
    slots: dict[str, str | None], state: str | None, why: str
) -> None:
    agreement = agree(slots)
    assert agreement.state == state
    assert agreement.why.startswith(why)


@pytest.mark.parametrize(
    ("macros", "seconds"),
    [
        ({}, 0.0),
        ({"HIBERNATE_CHECK_INTERVAL": ""}, 0.0),
        ({"HIBERNATE_CHECK_INTERVAL": "0"}, 0.0),
        ({"HIBERNATE_CHECK_INTERVAL": "20"}, 20.0),
        ({"hibernate_check_interval": "5"}, 5),
        ({"HIBERNATE_CHECK_INTERVAL": " 300 "}, 300.0),
        # A constant expression, as HTCondor's integer knobs take ($(MINUTE) expanded).
        ({"HIBERNATE_CHECK_INTERVAL": "5 * 60"}, 300.0),
    ],
)
def test_the_check_interval_is_off_unless_set(macros: dict[str, str], seconds: float) -> None:
    assert check_interval(macros) == seconds


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("soon", "is not a number of seconds, 0 or more"),
        ('"300"', "is not a number of seconds"),
        ("true", "is not a number of seconds"),
        ("5 *", "is not a number of seconds"),
        ("nan", "is not a number of seconds"),
        ("1e400", "is not a number of seconds"),
        ("-1", "is negative; it must be a number of seconds, 0 or more"),
        ("10 - 20", "is negative"),
    ],
)
def test_a_bad_check_interval_is_refused_naming_it(text: str, message: str) -> None:
    with pytest.raises(
        PowerConfigError, match=re.escape(f"HIBERNATE_CHECK_INTERVAL = {text!r}") + ".*" + message
    ):
        check_interval({"HIBERNATE_CHECK_INTERVAL": text})


def node(policy: str = POLICY) -> startd.Startd:
    machine = Machine.model_validate({"name": "n", "cpus": 2, "memory": "4Gi", "disk": "1Gi"})
    compiled = compile_policy(
        SlotPolicySpec.model_validate(
            {
                "condorConfig": policy
                + "SLOT_TYPE_1 = cpus=1\nNUM_SLOTS_TYPE_1 = 2\nSLOT_TYPE_1_PARTITIONABLE = FALSE\n"
            }
        )
    )
    return startd.tick(startd.start(machine, compiled, 0), {}, 0).startd


def test_idle_slots_agree_on_ram_and_a_claimed_one_vetoes() -> None:
    idle = node()
    assert check_interval(idle.policy.macros) == 20
    agreement = evaluate(idle, {}, 1)
    assert agreement.state == "RAM"
    assert agreement.slots == {"slot1@n": "RAM", "slot2@n": "RAM"}

    events: dict[str, list[Event]] = {
        "slot1@n": [Match("c1", submit_ad(ExecutionJobSpec(), "j"), job_id="j"), ActivateClaim()]
    }
    busy = startd.tick(idle, {}, 2, slot_events=events).startd
    vetoed = evaluate(busy, {}, 3)
    assert vetoed.state is None
    assert vetoed.slots["slot1@n"] == "NONE" and vetoed.why == "slot1@n: HIBERNATE is 'NONE'"


def test_without_hibernate_no_slot_asks_to_sleep() -> None:
    assert evaluate(node("HIBERNATE_CHECK_INTERVAL = 20\n"), {}, 1).state is None


def test_the_status_keeps_its_since_until_the_state_changes() -> None:
    first = power_status(agree({"s": "RAM"}), None, 10)
    assert first.since == "1970-01-01T00:00:10Z"
    assert power_status(agree({"s": "RAM"}), first, 20).since == first.since
    assert power_status(agree({"s": "NONE"}), first, 30).since == "1970-01-01T00:00:30Z"


@pytest.mark.parametrize(
    ("power", "annotations", "patch"),
    [
        (
            PowerStatus(sleep_state="RAM", since="t"),
            {},
            {SLEEP_STATE_ANNOTATION: "RAM", SCALE_DOWN_DISABLED: "false"},
        ),
        (
            PowerStatus(sleep_state="RAM", since="t"),
            {SLEEP_STATE_ANNOTATION: "RAM", SCALE_DOWN_DISABLED: "false"},
            None,
        ),
        (
            PowerStatus(sleep_state=None, since="t"),
            {SLEEP_STATE_ANNOTATION: "RAM", SCALE_DOWN_DISABLED: "false"},
            {SLEEP_STATE_ANNOTATION: None, SCALE_DOWN_DISABLED: "true"},
        ),
        (None, {SLEEP_STATE_ANNOTATION: "RAM"}, {SLEEP_STATE_ANNOTATION: None}),
        (None, {"other": "x"}, None),
    ],
)
def test_the_node_is_marked_for_scale_down_only_while_every_slot_agrees(
    power: PowerStatus | None, annotations: dict[str, str], patch: dict[str, str | None] | None
) -> None:
    recorded = {ORIGINAL_ANNOTATION: "null"}
    if power is not None:  # the record is already there: only the mark changes
        annotations = {**annotations, **recorded}
    assert node_annotations(power, annotations) == patch


ASLEEP = PowerStatus(sleep_state="S3", since="t")
AWAKE = PowerStatus(sleep_state=None, since="t")


@pytest.mark.parametrize(
    ("before", "power", "patch"),
    [
        # The first mark records what the node carried: nothing, or the admin's value.
        ({}, AWAKE, {SCALE_DOWN_DISABLED: "true", ORIGINAL_ANNOTATION: "null"}),
        (
            {SCALE_DOWN_DISABLED: "true"},
            ASLEEP,
            {
                SLEEP_STATE_ANNOTATION: "S3",
                SCALE_DOWN_DISABLED: "false",
                ORIGINAL_ANNOTATION: '"true"',
            },
        ),
        (
            {SCALE_DOWN_DISABLED: "false"},
            AWAKE,
            {SCALE_DOWN_DISABLED: "true", ORIGINAL_ANNOTATION: '"false"'},
        ),
    ],
)
def test_the_first_mark_records_the_annotation_it_takes_over(
    before: dict[str, str], power: PowerStatus, patch: dict[str, str | None]
) -> None:
    assert node_annotations(power, before) == patch


@pytest.mark.parametrize(
    ("marked", "patch"),
    [
        # There was no scale-down-disabled: it goes, with both of Kondor's annotations.
        (
            {
                SLEEP_STATE_ANNOTATION: "S3",
                SCALE_DOWN_DISABLED: "false",
                ORIGINAL_ANNOTATION: "null",
            },
            {SLEEP_STATE_ANNOTATION: None, SCALE_DOWN_DISABLED: None, ORIGINAL_ANNOTATION: None},
        ),
        # The admin's "true" comes back, whatever Kondor last wrote.
        (
            {
                SLEEP_STATE_ANNOTATION: "S3",
                SCALE_DOWN_DISABLED: "false",
                ORIGINAL_ANNOTATION: '"true"',
            },
            {SLEEP_STATE_ANNOTATION: None, SCALE_DOWN_DISABLED: "true", ORIGINAL_ANNOTATION: None},
        ),
        (
            {SCALE_DOWN_DISABLED: "true", ORIGINAL_ANNOTATION: '"true"'},
            {ORIGINAL_ANNOTATION: None},
        ),
        (
            {SCALE_DOWN_DISABLED: "true", ORIGINAL_ANNOTATION: '"false"'},
            {SCALE_DOWN_DISABLED: "false", ORIGINAL_ANNOTATION: None},
        ),
        # A record Kondor did not write this way: scale-down-disabled is left as it is.
        (
            {SCALE_DOWN_DISABLED: "true", ORIGINAL_ANNOTATION: "not json"},
            {ORIGINAL_ANNOTATION: None},
        ),
        ({SCALE_DOWN_DISABLED: "true", ORIGINAL_ANNOTATION: "3"}, {ORIGINAL_ANNOTATION: None}),
        # Never marked by Kondor: nothing of the admin's is touched.
        ({SCALE_DOWN_DISABLED: "true"}, None),
    ],
)
def test_turning_power_management_off_restores_what_the_node_carried(
    marked: dict[str, str], patch: dict[str, str | None] | None
) -> None:
    assert node_annotations(None, marked) == patch


def test_the_record_survives_the_mark_changing() -> None:
    """Marked, unmarked and marked again, the record keeps the admin's value, not Kondor's."""
    annotations = {SCALE_DOWN_DISABLED: "true"}
    for power in (ASLEEP, AWAKE, ASLEEP, None):
        for key, value in (node_annotations(power, annotations) or {}).items():
            if value is None:
                annotations.pop(key, None)
            else:
                annotations[key] = value
        if power is not None:
            assert annotations[ORIGINAL_ANNOTATION] == '"true"'
    assert annotations == {SCALE_DOWN_DISABLED: "true"}
