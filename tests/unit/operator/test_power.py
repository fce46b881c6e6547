"""The operator's node marker (kondor_operator.power) with a fake Node API: it reads a node
once, writes only changes, and writes nothing unless it leads."""

from __future__ import annotations

import time
from collections.abc import Mapping

import pytest

from kondor_core.api.executionpoint import PowerStatus
from kondor_core.startd.power import (
    ORIGINAL_ANNOTATION,
    SCALE_DOWN_DISABLED,
    SLEEP_STATE_ANNOTATION,
)
from kondor_operator.power import (
    NodeMarker,
    PowerChange,
    PowerFollower,
    follow_power,
    power_of,
)


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
        ORIGINAL_ANNOTATION: "null",  # the node had no scale-down-disabled before
    }
    assert marker.follow("n", asleep) is None  # a heartbeat: nothing to write
    assert marker.follow("n", awake) == {SLEEP_STATE_ANNOTATION: None, SCALE_DOWN_DISABLED: "true"}
    assert nodes.reads == 1
    assert nodes.annotations["n"] == {
        "owner": "ops",
        SCALE_DOWN_DISABLED: "true",
        ORIGINAL_ANNOTATION: "null",
    }


def test_nothing_is_written_without_power_management_or_leadership() -> None:
    nodes = FakeNodes()
    marker = NodeMarker(nodes)
    assert marker.follow("n", None) is None
    assert marker.follow("n", None) is None  # a heartbeat: the node was read once
    assert (nodes.reads, nodes.patches) == (1, [])
    marker.set_leading(False)
    assert marker.follow("n", PowerStatus(sleep_state="RAM", since="t")) is None
    assert (nodes.reads, nodes.patches) == (1, [])
    assert marker.follow("gone", None) is None


ASLEEP = PowerStatus(sleep_state="S3", since="t")
AWAKE = PowerStatus(sleep_state=None, since="t")


@pytest.mark.parametrize(
    "before", [{}, {SCALE_DOWN_DISABLED: "true"}, {SCALE_DOWN_DISABLED: "false"}]
)
def test_turning_power_management_off_gives_the_node_back_as_it_was(
    before: dict[str, str],
) -> None:
    """The check interval back to 0 (status.power gone), or the ExecutionPoint deleted (the
    handler follows with no power): the node carries again what it carried before."""
    nodes = FakeNodes()
    nodes.annotations["n"].update(before)
    original = dict(nodes.annotations["n"])
    marker = NodeMarker(nodes)
    marker.follow("n", AWAKE)
    assert nodes.annotations["n"][SCALE_DOWN_DISABLED] == "true"
    marker.follow("n", ASLEEP)
    assert nodes.annotations["n"][SLEEP_STATE_ANNOTATION] == "S3"
    assert nodes.annotations["n"][SCALE_DOWN_DISABLED] == "false"
    assert marker.follow("n", None) is not None
    assert nodes.annotations["n"] == original
    assert marker.follow("n", None) is None  # nothing more to give back
    assert nodes.reads == 1


def test_a_restarted_operator_gives_back_a_node_an_earlier_one_marked() -> None:
    nodes = FakeNodes()
    nodes.annotations["n"][SCALE_DOWN_DISABLED] = "true"
    NodeMarker(nodes).follow("n", ASLEEP)
    assert ORIGINAL_ANNOTATION in nodes.annotations["n"]
    restarted = NodeMarker(nodes)  # knows nothing: reads the node, finds Kondor's record
    restarted.follow("n", None)
    assert nodes.annotations["n"] == {"owner": "ops", SCALE_DOWN_DISABLED: "true"}


def test_the_record_takes_the_value_an_admin_set_after_the_first_read() -> None:
    nodes = FakeNodes()
    marker = NodeMarker(nodes)
    marker.follow("n", None)  # power management off: read, nothing written
    nodes.annotations["n"][SCALE_DOWN_DISABLED] = "true"  # kubectl annotate, meanwhile
    marker.follow("n", ASLEEP)
    assert nodes.annotations["n"][ORIGINAL_ANNOTATION] == '"true"'
    assert nodes.reads == 2  # read again only to take the annotation over
    marker.follow("n", AWAKE)
    marker.follow("n", None)
    assert nodes.reads == 2
    assert nodes.annotations["n"] == {"owner": "ops", SCALE_DOWN_DISABLED: "true"}


def test_a_new_leader_reads_the_node_again() -> None:
    nodes = FakeNodes()
    marker = NodeMarker(nodes)
    marker.follow("n", ASLEEP)
    marker.set_leading(False)
    nodes.annotations["n"] = {"owner": "ops"}  # another replica gave the node back meanwhile
    marker.set_leading(True)
    marker.follow("n", ASLEEP)
    assert nodes.reads == 2
    assert nodes.annotations["n"][SLEEP_STATE_ANNOTATION] == "S3"


def test_a_power_status_that_does_not_parse_is_ignored() -> None:
    assert power_of({"status": {"power": {"sleepState": "RAM"}}}) is None  # no since
    assert power_of({"status": {}}) is None
    parsed = power_of({"status": {"power": {"sleepState": "RAM", "since": "t"}}})
    assert parsed is not None and parsed.sleep_state == "RAM"


def _power(state: str | None = "S3") -> PowerStatus:
    return PowerStatus(sleep_state=state, since="t")


def test_a_deleted_execution_point_gives_its_node_back() -> None:
    """No SlotPolicy selects the node any more: the operator deletes its ExecutionPoint, and
    the watch's DELETED event unmarks the node."""
    nodes = FakeNodes()
    nodes.annotations["n"][SCALE_DOWN_DISABLED] = "false"
    marker = NodeMarker(nodes)
    follow_power(marker, "n", _power(), gone=False)
    follow_power(marker, "n", _power(), gone=False)
    assert nodes.annotations["n"][SLEEP_STATE_ANNOTATION] == "S3"
    follow_power(marker, "n", _power(), gone=True)
    assert nodes.annotations["n"] == {"owner": "ops", SCALE_DOWN_DISABLED: "false"}
    assert not marker.knows("n")
    follow_power(marker, "n", None, gone=False)  # forgotten: read again
    assert nodes.reads == 2


def test_an_interval_back_to_zero_gives_the_node_back() -> None:
    nodes = FakeNodes()
    marker = NodeMarker(nodes)
    follow_power(marker, "n", _power(None), gone=False)
    assert nodes.annotations["n"][SCALE_DOWN_DISABLED] == "true"
    follow_power(marker, "n", None, gone=False)  # the agent dropped status.power
    assert nodes.annotations["n"] == {"owner": "ops"}


class Failing(FakeNodes):
    fail = True

    def patch_node_annotations(self, name: str, patch: Mapping[str, str | None]) -> None:
        if self.fail:
            self.fail = False
            raise RuntimeError("the API server is away")
        super().patch_node_annotations(name, patch)


def test_a_failed_write_is_tried_again_on_the_next_event() -> None:
    nodes = Failing()
    marker = NodeMarker(nodes)
    follow_power(marker, "n", _power(), gone=False)
    assert SLEEP_STATE_ANNOTATION not in nodes.annotations["n"]
    follow_power(marker, "n", _power(), gone=False)
    assert nodes.annotations["n"][SLEEP_STATE_ANNOTATION] == "S3"
    assert nodes.reads == 2


def test_the_follower_looks_once_per_node_and_skips_heartbeats_of_a_known_node() -> None:
    """The watch offers every change; a heartbeat with the power the node already had is
    dropped once the node is known, a burst for one node is one look, the latest power."""
    nodes = FakeNodes()
    nodes.annotations["m"] = {}
    follower = PowerFollower(NodeMarker(nodes))
    follower.offer([PowerChange("n", _power("RAM")), PowerChange("n", _power("S3"))])
    follower.offer([PowerChange("m", None, unchanged=True)])  # unknown node: looked at
    assert follower.drain() == 2
    assert nodes.annotations["n"][SLEEP_STATE_ANNOTATION] == "S3"
    assert nodes.reads == 2 and len(nodes.patches) == 1
    follower.offer([PowerChange("n", _power("S3"), unchanged=True), PowerChange("", None)])
    assert follower.drain() == 0, "a heartbeat of a known node, and no node name"
    follower.offer([PowerChange("n", None, gone=True)])
    assert follower.drain() == 1
    assert SLEEP_STATE_ANNOTATION not in nodes.annotations["n"]
    follower.offer([PowerChange("n", None, unchanged=True)])  # forgotten once gone: read again
    assert follower.drain() == 1 and nodes.reads == 3


def test_after_a_failed_write_the_next_heartbeat_is_looked_at_again() -> None:
    nodes = Failing()
    follower = PowerFollower(NodeMarker(nodes))
    follower.offer([PowerChange("n", _power())])
    follower.drain()
    assert SLEEP_STATE_ANNOTATION not in nodes.annotations["n"]
    follower.offer([PowerChange("n", _power(), unchanged=True)])  # the node was forgotten
    assert follower.drain() == 1
    assert nodes.annotations["n"][SLEEP_STATE_ANNOTATION] == "S3"


def test_the_follower_thread_follows_offers_and_stops_when_closed() -> None:
    nodes = FakeNodes()
    follower = PowerFollower(NodeMarker(nodes))
    thread = follower.start()
    follower.offer([PowerChange("n", _power())])
    deadline = time.monotonic() + 5
    while SLEEP_STATE_ANNOTATION not in nodes.annotations["n"] and time.monotonic() < deadline:
        time.sleep(0.01)
    assert nodes.annotations["n"][SLEEP_STATE_ANNOTATION] == "S3"
    follower.close()
    thread.join(5)
    assert not thread.is_alive()
