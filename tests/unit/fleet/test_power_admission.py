"""A SlotPolicy's power management knobs at admission (kondor_core.fleet.check_policy, what the
SlotPolicy webhook answers `kubectl apply` with): HIBERNATE_CHECK_INTERVAL must come to a number
of seconds, 0 or more, and HIBERNATE must parse; each refusal names the knob, the value and
what is allowed."""

from __future__ import annotations

from typing import Any

import pytest

from kondor_core.fleet import admission_message, check_policy

HIBERNATE = 'HIBERNATE = ifThenElse(State == "Unclaimed", "RAM", "NONE")\n'


@pytest.mark.parametrize(
    "spec",
    [
        {"condorConfig": "HIBERNATE_CHECK_INTERVAL = 20\n" + HIBERNATE},
        {"condorConfig": "HIBERNATE_CHECK_INTERVAL = 0\n"},
        {"condorConfig": "hibernate_check_interval = 300\n" + HIBERNATE},
        {"condorConfig": "HIBERNATE_CHECK_INTERVAL = 5 * $(MINUTE)\n" + HIBERNATE},
        {"condorConfig": "EVERY = 30\nHIBERNATE_CHECK_INTERVAL = $(EVERY)\n" + HIBERNATE},
        {"condorConfig": "HIBERNATE_CHECK_INTERVAL = 20\n", "hibernate": '"S4"'},
        {"hibernate": 'ifThenElse(State == "Unclaimed", "RAM", "NONE")'},
    ],
)
def test_a_power_policy_is_admitted(spec: dict[str, Any]) -> None:
    checked = check_policy(spec)
    assert checked.valid, checked.problems


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("soon", "is not"),
        ('"300"', "is not"),
        ("TRUE", "is not"),
        ("20 *", "is not"),
        ("nan", "is not"),
        ("1e400", "is not"),
        ("-20", "is negative; it must be"),
        ("$(MINUTE) - 120", "is negative; it must be"),
    ],
)
def test_a_bad_check_interval_is_refused_naming_the_knob_value_and_what_is_allowed(
    value: str, why: str
) -> None:
    checked = check_policy({"condorConfig": f"HIBERNATE_CHECK_INTERVAL = {value}\n" + HIBERNATE})
    assert not checked.valid
    (problem,) = checked.problems
    assert problem.startswith("spec.condorConfig: HIBERNATE_CHECK_INTERVAL = "), problem
    assert why in problem
    assert problem.endswith("a number of seconds, 0 or more (0 turns power management off)")
    shown = value.replace("$(MINUTE)", "60")  # the value as the snippet's macros expand it
    assert repr(shown) in problem
    assert problem in admission_message("p", checked)


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"condorConfig": 'HIBERNATE = ifThenElse(State == "Unclaimed", "RAM"\n'}, "condorConfig"),
        ({"condorConfig": "HIBERNATE_CHECK_INTERVAL = 20\nHIBERNATE = ((\n"}, "condorConfig"),
        ({"hibernate": '"RAM" +'}, "hibernate"),
    ],
)
def test_a_hibernate_that_does_not_parse_is_refused_naming_it(
    spec: dict[str, Any], field: str
) -> None:
    checked = check_policy(spec)
    assert not checked.valid
    (problem,) = checked.problems
    assert problem.startswith(f"spec.{field}")
    assert "HIBERNATE" in problem or field == "hibernate"
    assert "is not a valid ClassAd expression (classad2:" in problem
