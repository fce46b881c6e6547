"""Owner, Unclaimed and Matched: IS_OWNER, local START with UNDEFINED, benchmarks, MATCH_TIMEOUT.

From "State and Activity Transitions" (Owner State, Unclaimed State, Matched State).
"""

from __future__ import annotations

import pytest
from policy_helpers import DESKTOP, driver, job, policy_from

from kondor_core.policy import (
    ActionKind,
    Activity,
    BenchmarksDone,
    ClaimRequest,
    Match,
    State,
    Vacate,
    advertised,
)


def test_a_fresh_startd_is_owner_and_default_is_owner_false_makes_it_unclaimed() -> None:
    d = driver(policy_from()).at(0)
    assert d.where == "Unclaimed/Idle"
    assert d.numbers() == [1]
    assert d.slot.transitions[0].reason == "IS_OWNER is FALSE"


@pytest.mark.parametrize(
    ("start", "keyboard_idle", "expected"),
    [
        # "if KeyboardIdle is 34 seconds, then the machine would remain in the Owner state.
        #  Owner is undefined, and anything && FALSE is FALSE."
        ('KeyboardIdle > 15 * $(MINUTE) && Owner == "coltrane"', 34, "Owner/Idle"),
        # "FALSE || UNDEFINED is UNDEFINED" -> IS_OWNER (START =?= FALSE) is FALSE -> Unclaimed
        ('KeyboardIdle > 15 * $(MINUTE) || Owner == "coltrane"', 34, "Unclaimed/Idle"),
        ('KeyboardIdle > 15 * $(MINUTE) && Owner == "coltrane"', 3600, "Unclaimed/Idle"),
        ("KeyboardIdle > 15 * $(MINUTE)", 34, "Owner/Idle"),
    ],
)
def test_desktop_is_owner_follows_start_evaluated_locally(
    start: str, keyboard_idle: int, expected: str
) -> None:
    policy = policy_from(f"START = {start}", use=DESKTOP)
    assert driver(policy, KeyboardIdle=keyboard_idle).at(0).where == expected


def test_coltrane_may_claim_the_unclaimed_machine_but_nobody_else_may() -> None:
    policy = policy_from(
        'START = KeyboardIdle > 15 * $(MINUTE) || Owner == "coltrane"', use=DESKTOP
    )
    d = driver(policy, KeyboardIdle=34).at(0)
    d.at(5, Match("c1", job("jones"), job_id="jones.1"))
    assert d.where == "Unclaimed/Idle"
    assert d.kinds() == [ActionKind.REFUSE_CLAIM]
    assert "START is UNDEFINED" not in d.last_actions[0].reason  # evaluated with the job
    assert "START is FALSE" in d.last_actions[0].reason
    d.at(10, Match("c2", job("coltrane"), job_id="coltrane.1"))
    assert d.where == "Claimed/Idle"
    assert d.numbers() == [5]


def test_unclaimed_returns_to_owner_when_start_locally_false_transition_2() -> None:
    policy = policy_from(use=DESKTOP)
    d = driver(policy).at(0)
    assert d.where == "Unclaimed/Idle"
    d.at(5, KeyboardIdle=3)
    assert d.where == "Owner/Idle"
    assert d.numbers() == [2]
    assert d.slot.transitions[0].reason == "IS_OWNER is TRUE"
    d.at(10, KeyboardIdle=1000)
    assert d.where == "Unclaimed/Idle"
    assert d.numbers() == [1]


def test_a_start_that_is_undefined_locally_still_leaves_owner() -> None:
    # IS_OWNER = (START =?= FALSE): UNDEFINED is not FALSE, so the slot is Unclaimed.
    policy = policy_from('START = Owner == "coltrane"', use=DESKTOP)
    assert driver(policy).at(0).where == "Unclaimed/Idle"
    # The same START as the SlotPolicy's structured field (it wins over the template's).
    structured = policy_from(use=DESKTOP, spec={"start": 'Owner == "coltrane"'})
    assert driver(structured).at(0).where == "Unclaimed/Idle"


def test_runbenchmarks_runs_at_start_then_every_four_hours() -> None:
    policy = policy_from("RunBenchmarks = (time() - LastBenchmark) >= (4 * $(HOUR))")
    d = driver(policy).at(0)
    assert d.path() == ["Unclaimed/Idle", "Unclaimed/Benchmarking"]
    assert d.numbers() == [1, 3]
    assert d.kinds() == [ActionKind.RUN_BENCHMARKS]
    d.at(30, BenchmarksDone())
    assert d.where == "Unclaimed/Idle"
    assert d.numbers() == [4]
    assert d.slot.last_benchmark == 30
    d.at(3 * 3600)
    assert d.where == "Unclaimed/Idle"
    d.at(30 + 4 * 3600, BenchmarksDone())  # nothing to finish: only records LastBenchmark
    d.at(30 + 8 * 3600 + 5)
    assert d.where == "Unclaimed/Benchmarking"


def test_runbenchmarks_false_never_benchmarks() -> None:
    d = driver(policy_from("RUNBENCHMARKS = False")).at(0).at(10 * 3600)
    assert d.where == "Unclaimed/Idle"
    assert not any(a.kind is ActionKind.RUN_BENCHMARKS for a in d.actions)


def test_matched_then_claimed_transitions_6_and_9() -> None:
    d = driver(policy_from()).at(0)
    d.at(5, Match("c1", job(), job_id="a.1", claimed=False))
    assert d.where == "Matched/Idle"
    assert d.numbers() == [6]
    # "the machine lies about its START expression ... says that Requirements are False"
    assert advertised(d.policy, d.slot, d.facts, 5)["Requirements"] is False
    d.at(10, ClaimRequest("c1"))
    assert d.where == "Claimed/Idle"
    assert d.numbers() == [9]
    assert advertised(d.policy, d.slot, d.facts, 10)["Requirements"] is True


def test_match_timeout_returns_to_owner_then_unclaimed() -> None:
    d = driver(policy_from()).at(0)
    d.at(5, Match("c1", job(), job_id="a.1", claimed=False))
    d.at(120)
    assert d.where == "Matched/Idle"
    d.at(125)
    assert d.path() == ["Owner/Idle", "Unclaimed/Idle"]
    assert d.numbers() == [8, 1]
    assert d.slot.transitions[0].reason == "MATCH_TIMEOUT"
    d.at(130, ClaimRequest("c1"))
    assert d.kinds() == [ActionKind.REFUSE_CLAIM]


def test_match_timeout_is_configurable() -> None:
    d = driver(policy_from("MATCH_TIMEOUT = 30")).at(0)
    d.at(0, Match("c1", job(), job_id="a.1", claimed=False)).at(30)
    assert d.where == "Unclaimed/Idle"


def test_matched_goes_to_owner_when_start_locally_false_transition_8() -> None:
    d = driver(policy_from(use=DESKTOP)).at(0)
    d.at(5, Match("c1", job(), job_id="a.1", claimed=False))
    d.at(10, KeyboardIdle=2)
    assert d.where == "Owner/Idle"
    assert d.numbers() == [8]
    assert d.slot.transitions[0].reason == "START is FALSE"


def test_vacate_in_matched_returns_to_owner() -> None:
    d = driver(policy_from()).at(0)
    d.at(5, Match("c1", job(), job_id="a.1", claimed=False))
    d.at(6, Vacate())
    assert d.path() == ["Owner/Idle", "Unclaimed/Idle"]


def test_requirements_advertise_true_when_start_is_locally_true_else_start() -> None:
    policy = policy_from('START = KeyboardIdle > 900 || Owner == "coltrane"', use=DESKTOP)
    d = driver(policy, KeyboardIdle=34).at(0)
    assert advertised(policy, d.slot, d.facts, 0)["Requirements"] == policy.knob("START")
    d.at(5, KeyboardIdle=1000)
    assert advertised(policy, d.slot, d.facts, 5)["Requirements"] is True


def test_owner_state_is_not_left_while_is_owner_true() -> None:
    d = driver(policy_from("IS_OWNER = True")).at(0).at(1000)
    assert d.where == "Owner/Idle"
    assert d.slot.state is State.OWNER and d.slot.activity is Activity.IDLE
