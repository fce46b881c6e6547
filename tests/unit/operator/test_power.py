"""The operator's node marker (kondor_operator.power) with a fake Node API: it reads a node
once, writes only changes, and writes nothing unless it leads."""

from __future__ import annotations

from collections.abc import Mapping

from kondor_core.api.executionpoint import PowerStatus
from kondor_core.startd.power import SCALE_DOWN_DISABLED, SLEEP_STATE_ANNOTATION
from kondor_operator.power import NodeMarker, power_of


class FakeNodes:
    def __init__(self) -> None:
        self.annotations: dict[str, dict[str, str]] = {"n": {"owner": "ops"}}
        self.reads = 0
        self.patches: list[dict[str, str | None]] = []

    def read_node_annotations(self, name: str) -> dict[str, str] | None:
        self.reads += 1
        return dict(self.annotations[name]) if name in self.annotations else None

    def patch_node_annotations(self, name: str, patch: Mapping[str, str | None]) -> None:
        self.patches.append(dict(patch))
        for key, value in patch.items():
            if value is None:
                self.annotations[name].pop(key, None)
            else:
                self.annotations[name][key] = value


def test_the_mark_follows_the_agreement_and_the_node_is_read_once() -> None:
    nodes = FakeNodes()
    marker = NodeMarker(nodes)
    asleep = PowerStatus(sleep_state="RAM", since="t")
    awake = PowerStatus(sleep_state=None, since="t")
    assert marker.follow("n", asleep) == {
        SLEEP_STATE_ANNOTATION: "RAM",
        SCALE_DOWN_DISABLED: "false",
    }
    assert marker.follow("n", asleep) is None  # a heartbeat: nothing to write
    assert marker.follow("n", awake) == {SLEEP_STATE_ANNOTATION: None, SCALE_DOWN_DISABLED: "true"}
    assert nodes.reads == 1
    assert nodes.annotations["n"] == {"owner": "ops", SCALE_DOWN_DISABLED: "true"}


def test_nothing_is_read_or_written_without_power_management_or_leadership() -> None:
    nodes = FakeNodes()
    marker = NodeMarker(nodes)
    assert marker.follow("n", None) is None
    marker.set_leading(False)
    assert marker.follow("n", PowerStatus(sleep_state="RAM", since="t")) is None
    assert (nodes.reads, nodes.patches) == (0, [])
    assert marker.follow("gone", None) is None


def test_a_power_status_that_does_not_parse_is_ignored() -> None:
    assert power_of({"status": {"power": {"sleepState": "RAM"}}}) is None  # no since
    assert power_of({"status": {}}) is None
    parsed = power_of({"status": {"power": {"sleepState": "RAM", "since": "t"}}})
    assert parsed is not None and parsed.sleep_state == "RAM"
