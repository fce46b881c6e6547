"""Power management (kondor_core.startd.power): HIBERNATE evaluated in every slot, the
reference's agreement rule (any NONE vetoes, the largest magnitude wins), the check interval
knob, and the Node annotations the operator writes."""

from __future__ import annotations

import pytest

from kondor_core import startd
from kondor_core.api import ExecutionJobSpec, Machine, SlotPolicySpec
from kondor_core.api.executionpoint import PowerStatus
from kondor_core.config import compile_policy
from kondor_core.jobs import job_ad
from kondor_core.policy import ActivateClaim, Event, Match
from kondor_core.startd.power import (
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
    [({}, 0.0), ({"HIBERNATE_CHECK_INTERVAL": "20"}, 20.0), ({"hibernate_check_interval": "5"}, 5)],
)
def test_the_check_interval_is_off_unless_set(macros: dict[str, str], seconds: float) -> None:
    assert check_interval(macros) == seconds


@pytest.mark.parametrize(("text", "message"), [("soon", "not a number"), ("-1", "0 or more")])
def test_a_bad_check_interval_is_refused_naming_it(text: str, message: str) -> None:
    with pytest.raises(PowerConfigError, match=f"HIBERNATE_CHECK_INTERVAL = '{text}'.*{message}"):
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
        "slot1@n": [Match("c1", job_ad(ExecutionJobSpec(), "j"), job_id="j"), ActivateClaim()]
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
    assert node_annotations(power, annotations) == patch
