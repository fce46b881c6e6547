"""When the agent writes and what: merge patches and the coalescing of writes."""

from __future__ import annotations

from typing import Any

import pytest

from kondor_agent.report import Coalescer, apply_merge_patch, merge_patch


@pytest.mark.parametrize(
    ("old", "new", "patch"),
    [
        ({}, {"a": 1}, {"a": 1}),
        ({"a": 1}, {"a": 1}, {}),
        ({"a": 1, "b": 2}, {"a": 1}, {"b": None}),
        ({"m": {"x": 1, "y": 2}}, {"m": {"x": 1, "y": 3}}, {"m": {"y": 3}}),
        ({"m": {"x": 1, "y": 2}}, {"m": {"x": 1}}, {"m": {"y": None}}),
        # Lists are replaced whole, as in every merge patch.
        ({"l": [1, 2]}, {"l": [1]}, {"l": [1]}),
        ({"b": 1}, {"b": True}, {"b": True}),
    ],
)
def test_merge_patch_holds_only_the_difference(
    old: dict[str, Any], new: dict[str, Any], patch: dict[str, Any]
) -> None:
    assert merge_patch(old, new) == patch
    assert apply_merge_patch(old, merge_patch(old, new)) == new


def _status(state: str, load: float = 0.0) -> dict[str, Any]:
    return {
        "slots": [{"name": "slot1@n", "state": state, "ad": {"State": state, "LoadAvg": load}}],
        "machine": {"LoadAvg": load, "Cpus": 4},
    }


def _write(coalescer: Coalescer, now: float) -> dict[str, Any]:
    patch = coalescer.patch(f"t{now}")
    coalescer.written(patch, now)
    return patch


def test_first_status_is_written_at_once() -> None:
    c = Coalescer(update_interval=300, debounce=0.5)
    c.observe(_status("Unclaimed"), 100.0)
    assert c.due(100.0)


def test_volatile_facts_wait_for_the_heartbeat() -> None:
    c = Coalescer(update_interval=300, debounce=0.5, volatile=frozenset({"LoadAvg"}))
    c.observe(_status("Unclaimed"), 0.0)
    _write(c, 0.0)
    for now in range(5, 300, 5):
        c.observe(_status("Unclaimed", load=now / 100), float(now))
        assert not c.due(float(now))
    c.observe(_status("Unclaimed", load=3.0), 300.0)
    assert c.due(300.0)
    patch = _write(c, 300.0)
    assert patch["status"]["machine"] == {"LoadAvg": 3.0}
    assert patch["status"]["lastHeartbeat"] == "t300.0"


def test_state_change_is_debounced_and_coalesced() -> None:
    c = Coalescer(update_interval=300, debounce=0.5)
    c.observe(_status("Unclaimed"), 0.0)
    _write(c, 0.0)
    c.observe(_status("Owner"), 10.0)
    assert not c.due(10.2)
    assert c.next_due() == 10.5
    c.observe(_status("Unclaimed"), 10.3)  # back again before the write: one write, no flap
    c.observe(_status("Claimed"), 10.4)
    assert c.due(10.5)
    patch = _write(c, 10.5)
    assert patch["status"]["slots"][0]["state"] == "Claimed"
    assert c.next_due() == 310.5


def test_failed_write_is_retried_later() -> None:
    c = Coalescer(update_interval=300, debounce=0.5, retry=5)
    c.observe(_status("Unclaimed"), 0.0)
    c.failed(0.0)
    assert not c.due(4.9)
    assert c.due(5.0)


def test_restart_does_not_rewrite_what_is_already_there() -> None:
    c = Coalescer(update_interval=300)
    c.start_from({**_status("Unclaimed"), "lastHeartbeat": "old", "operator": {"x": 1}})
    c.observe(_status("Unclaimed"), 50.0)
    assert c.due(50.0)  # the restart's heartbeat
    patch = _write(c, 50.0)
    assert patch == {"status": {"lastHeartbeat": "t50.0"}}
