"""An agent's reading of the operator's status on a SlotPolicy (`policy_verdict`): a node
carves a generation only once the operator called that very generation valid."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from kondor_core.api import SlotPolicyStatus
from kondor_core.fleet import PolicyCounts, check_policy, policy_verdict, slot_policy_status

NOW = datetime(2027, 1, 15, 8, 0, tzinfo=UTC)


def _policy(
    generation: int, spec: dict[str, Any], checked_generation: int | None
) -> dict[str, Any]:
    """A SlotPolicy at `generation` whose status the operator wrote for `checked_generation`
    of the same spec (None: no status yet)."""
    body: dict[str, Any] = {"metadata": {"name": "batch", "generation": generation}, "spec": spec}
    if checked_generation is not None:
        status = slot_policy_status(
            generation=checked_generation,
            checked=check_policy(spec),
            counts=PolicyCounts(),
            old=SlotPolicyStatus(),
            now=NOW,
        )
        body["status"] = status.dump()
    return body


@pytest.mark.parametrize(
    ("case", "generation", "spec", "checked", "state"),
    [
        ("checked, valid", 3, {}, 3, "valid"),
        ("checked, invalid", 3, {"start": "X >"}, 3, "invalid"),
        ("no status yet", 1, {}, None, "pending"),
        ("the status is about an older generation", 4, {}, 3, "pending"),
        ("the status is about an older, invalid generation", 4, {"start": "X >"}, 3, "pending"),
    ],
)
def test_a_generation_counts_once_the_operator_has_checked_it(
    case: str, generation: int, spec: dict[str, Any], checked: int | None, state: str
) -> None:
    verdict = policy_verdict(_policy(generation, spec, checked))
    assert (verdict.generation, verdict.state) == (generation, state), case


def test_the_verdict_carries_the_hash_or_the_problems() -> None:
    valid = policy_verdict(_policy(2, {}, 2))
    assert valid.hash == check_policy({}).hash and valid.message == ""
    invalid = policy_verdict(_policy(2, {"start": "X >"}, 2))
    assert invalid.hash == ""
    assert invalid.message.startswith("spec.start: 'X >' is not a valid ClassAd expression")


@pytest.mark.parametrize(
    "policy",
    [
        {},
        {"metadata": {"generation": 2}, "status": {"observedGeneration": 2}},
        {"metadata": {"generation": 2}, "status": {"observedGeneration": 2, "conditions": [1]}},
        {"metadata": {"generation": 2}, "status": None},
    ],
)
def test_a_status_without_a_verdict_is_pending(policy: dict[str, Any]) -> None:
    assert policy_verdict(policy).state == "pending"
