"""SlotPolicy status, the ExecutionPoint's status.operator, and SlotPolicy checking."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from kondor_core.api import SlotPolicySpec, SlotPolicyStatus, condition, merge_conditions
from kondor_core.fleet import (
    ObservedPolicy,
    PolicyCandidate,
    PolicyCounts,
    Resolution,
    admission_message,
    check_policy,
    heartbeat_state,
    plan_policy_statuses,
    policy_counts,
    resolve,
)

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
LATER = NOW + timedelta(minutes=5)


@pytest.mark.parametrize(
    ("spec", "fragments"),
    [
        ({"start": "KeyboardIdle >"}, ["spec.start: 'KeyboardIdle >'", "classad2:"]),
        (
            {"condorConfig": "START = true\nSUSPEND = (\n"},
            ["spec.condorConfig line 2 (SUSPEND): '('", "classad2:"],
        ),
        ({"priority": "high"}, ["spec.priority:", "'high'"]),
        ({"startt": "true"}, ["spec.startt: Extra inputs are not permitted"]),
        (
            {"nodeSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}},
            ["spec.nodeSelector.matchExpressions[0].values"],
        ),
        ({"condorConfig": "UPDATE_INTERVAL = soon"}, ["UPDATE_INTERVAL: 'soon'"]),
    ],
)
def test_invalid_policies_name_the_field_and_quote_the_parser(
    spec: dict[str, Any], fragments: list[str]
) -> None:
    checked = check_policy(spec)
    assert not checked.valid
    message = admission_message("bad", checked)
    assert message.startswith("SlotPolicy 'bad' has 1 problem: ")
    for fragment in fragments:
        assert fragment in message


def test_valid_policy_has_a_stable_hash_and_its_update_interval() -> None:
    checked = check_policy({"start": "KeyboardIdle > 15 * 60", "priority": 4})
    assert checked.valid and len(checked.hash) == 64
    assert checked.hash == check_policy({"start": "KeyboardIdle > 15 * 60"}).hash, (
        "priority and nodeSelector choose nodes; they are not part of what a node does"
    )
    assert checked.update_interval == 300
    assert check_policy({"condorConfig": "UPDATE_INTERVAL = 30"}).update_interval == 30


def test_condition_transition_time_moves_only_when_the_status_changes() -> None:
    first = merge_conditions([], [condition("Valid", True, "Compiled", "ok", 1)], NOW)
    assert first[0].last_transition_time == "2026-01-02T03:04:05Z"
    same = merge_conditions(first, [condition("Valid", True, "Compiled", "still ok", 2)], LATER)
    assert same[0].last_transition_time == "2026-01-02T03:04:05Z"
    assert same[0].observed_generation == 2 and same[0].message == "still ok"
    flipped = merge_conditions(first, [condition("Valid", False, "Invalid", "bad", 3)], LATER)
    assert flipped[0].last_transition_time == "2026-01-02T03:09:05Z"


@pytest.mark.parametrize(
    ("heartbeat", "interval", "expected"),
    [
        (None, 60, (None, "NoHeartbeat")),
        ("yesterday", 60, (None, "BadHeartbeat")),
        ("2026-01-02T03:04:00Z", 60, (True, "Fresh")),
        ("2026-01-02T03:01:05Z", 60, (True, "Fresh")),  # exactly 3 intervals
        ("2026-01-02T03:01:04Z", 60, (False, "Stale")),
        ("2026-01-02T03:01:04.5+00:00", 300, (True, "Fresh")),
    ],
)
def test_heartbeat_is_stale_after_three_update_intervals(
    heartbeat: str | None, interval: float, expected: tuple[bool | None, str]
) -> None:
    assert heartbeat_state(heartbeat, NOW, interval)[:2] == expected


def _observed(name: str, status: dict[str, Any] | None = None) -> ObservedPolicy:
    """The policy as the API server holds it: `status` as written (read through the model)."""
    return ObservedPolicy(name, f"uid-{name}", 4, {}, SlotPolicyStatus.model_validate(status or {}))


def test_policy_status_counts_nodes_and_reports_ties() -> None:
    spec = SlotPolicySpec.model_validate({"nodeSelector": {"matchLabels": {"pool": "batch"}}})
    nodes = {"a": {"pool": "batch"}, "b": {"pool": "batch"}, "c": {}}
    candidates = [PolicyCandidate("p", 4, spec, "h"), PolicyCandidate("q", 1, spec, "h2")]
    counts = policy_counts(nodes, candidates, resolve(nodes, candidates))
    assert counts["p"] == PolicyCounts(selected=2, governed=2, tie_with=("q",))
    assert counts["q"] == PolicyCounts(selected=2, governed=0, tie_with=("p",))

    checked = {"p": check_policy(spec.dump())}
    [patch] = plan_policy_statuses({"p": _observed("p")}, checked, counts, now=NOW)
    status = patch.patch["status"]
    assert status["observedGeneration"] == 4
    assert status["selectedNodes"] == 2 and status["governedNodes"] == 2
    assert status["hash"] == checked["p"].hash
    valid, ready = status["conditions"]
    assert (valid["type"], valid["status"], valid["observedGeneration"]) == ("Valid", "True", 4)
    assert ready["type"] == "Ready" and "equal priority with q" in ready["message"]
    assert patch.event is None

    # Written once: the same facts later change nothing.
    assert plan_policy_statuses({"p": _observed("p", status)}, checked, counts, now=LATER) == []


def test_a_policy_that_turns_invalid_says_why_once() -> None:
    bad = {"p": check_policy({"start": "KeyboardIdle >"})}
    [patch] = plan_policy_statuses({"p": _observed("p")}, bad, {}, now=NOW)
    status = patch.patch["status"]
    valid = status["conditions"][0]
    assert (valid["status"], valid["reason"]) == ("False", "Invalid")
    assert "spec.start" in valid["message"] and "classad2" in valid["message"]
    assert status["hash"] is None and status["selectedNodes"] == 0
    assert patch.event is not None and patch.event.reason == "InvalidPolicy"
    written = {k: v for k, v in status.items() if v is not None}
    assert plan_policy_statuses({"p": _observed("p", written)}, bad, {}, now=LATER) == []


def test_resolution_tie_property() -> None:
    spec = SlotPolicySpec()
    assert Resolution(PolicyCandidate("a", 1, spec, "h"), ("b",)).tied
    assert not Resolution(PolicyCandidate("a", 1, spec, "h")).tied
