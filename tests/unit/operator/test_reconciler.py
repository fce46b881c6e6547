"""The reconciler between its tables (kopf's indexes, the ExecutionPoint watch's table) and
the API: what it writes, announces and counts."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from kondor_core.fleet import Event
from kondor_operator.epwatch import ExecutionPointTable
from kondor_operator.kube import ObjectRef
from kondor_operator.metrics import Metrics
from kondor_operator.reconciler import Reconciler, node_entry, slot_policy_entry

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


class Writer:
    """Records writes; `existing` makes create answer 'already there'."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any]] = []
        self.events: list[tuple[ObjectRef, Event]] = []

    def create_execution_point(self, manifest: Mapping[str, Any]) -> str | None:
        self.calls.append(("create", manifest["metadata"]["name"], manifest))
        return "ep-uid"

    def patch_execution_point(self, name: str, patch: Mapping[str, Any]) -> bool:
        self.calls.append(("patch", name, patch))
        return True

    def patch_execution_point_status(self, name: str, patch: Mapping[str, Any]) -> bool:
        self.calls.append(("status", name, patch))
        return True

    def delete_execution_point(self, name: str) -> bool:
        self.calls.append(("delete", name, None))
        return True

    def patch_slot_policy_status(self, name: str, patch: Mapping[str, Any]) -> bool:
        self.calls.append(("policy-status", name, patch))
        return True

    def post_event(self, ref: ObjectRef, event: Event) -> None:
        self.events.append((ref, event))


def node(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": f"uid-{name}", "labels": labels}}


def policy(name: str, generation: int = 1, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "uid": f"uid-{name}", "generation": generation},
        "spec": spec,
    }


def index(entries: dict[str, Any]) -> dict[str, list[Any]]:
    """kopf's index shape: key -> the values objects gave for it."""
    return {key: [value] for key, value in entries.items()}


def table(eps: list[dict[str, Any]]) -> ExecutionPointTable:
    """The ExecutionPoint watch's table, filled as by a listing."""
    points = ExecutionPointTable()
    points.relist(eps)
    return points


def reconciler(
    nodes: list[dict[str, Any]], policies: list[dict[str, Any]], eps: list[dict[str, Any]]
) -> tuple[Reconciler, Writer, Metrics]:
    writer, metrics = Writer(), Metrics()
    subject = Reconciler(writer, metrics, clock=lambda: NOW)
    subject.attach(
        index({n["metadata"]["name"]: node_entry(n) for n in nodes}),
        table(eps),
        index({p["metadata"]["name"]: slot_policy_entry(p) for p in policies}),
    )
    return subject, writer, metrics


def test_a_pass_creates_execution_points_and_writes_policy_status() -> None:
    subject, writer, metrics = reconciler(
        [node("n1", pool="batch"), node("n2")],
        [policy("batch", nodeSelector={"matchLabels": {"pool": "batch"}})],
        [],
    )
    asyncio.run(subject.run_once())
    kinds = [(verb, name) for verb, name, _ in writer.calls]
    assert kinds == [("create", "n1"), ("policy-status", "batch")]
    manifest = writer.calls[0][2]
    assert manifest["metadata"]["ownerReferences"][0]["uid"] == "uid-n1"
    assert manifest["spec"]["policy"] == {"name": "batch"}
    status = writer.calls[1][2]["status"]
    assert (status["selectedNodes"], status["observedGeneration"]) == (1, 1)
    [(ref, event)] = writer.events
    assert (ref.kind, ref.name, ref.uid, event.reason) == (
        "ExecutionPoint",
        "n1",
        "ep-uid",
        "Created",
    )
    sample = metrics.registry.get_sample_value
    assert (
        sample("kondor_operator_changes_total", {"kind": "ExecutionPoint", "action": "create"}) == 1
    )
    assert sample("kondor_operator_reconciles_total", {"kind": "SlotPolicy", "result": "ok"}) == 1


def test_an_invalid_policy_is_reported_on_the_policy_and_creates_nothing() -> None:
    subject, writer, metrics = reconciler([node("n1")], [policy("bad", start="Idle >")], [])
    asyncio.run(subject.run_once())
    [(verb, name, patch)] = writer.calls
    assert (verb, name) == ("policy-status", "bad")
    valid = patch["status"]["conditions"][0]
    assert valid["status"] == "False" and "spec.start: 'Idle >'" in valid["message"]
    [(ref, event)] = writer.events
    assert (ref.kind, event.type, event.reason) == ("SlotPolicy", "Warning", "InvalidPolicy")
    assert (
        metrics.registry.get_sample_value("kondor_operator_slot_policies", {"valid": "false"}) == 1
    )


def test_slots_are_counted_by_state_and_activity_and_agent_fields_untouched() -> None:
    ep = {
        "metadata": {
            "name": "n1",
            "uid": "ep-1",
            "labels": {"app.kubernetes.io/managed-by": "kondor-operator"},
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "uid-n1"}
            ],
        },
        "spec": {
            "nodeName": "n1",
            "policy": {"name": "all"},
        },
        "status": {
            "lastHeartbeat": "2026-01-02T03:04:00Z",
            "slots": [
                {"name": "slot1_1@n1", "type": "Dynamic", "state": "Claimed", "activity": "Busy"},
                {"name": "slot1_2@n1", "type": "Dynamic", "state": "Claimed", "activity": "Busy"},
                {"name": "slot1@n1", "type": "Partitionable", "state": "Owner", "activity": "Idle"},
            ],
        },
    }
    subject, writer, metrics = reconciler([node("n1")], [policy("all")], [ep])
    asyncio.run(subject.run_once())
    [(verb, name, patch), _] = writer.calls
    assert (verb, name) == ("status", "n1")
    assert set(patch["status"]) == {"operator"}
    assert patch["status"]["operator"]["heartbeat"] == "Fresh"
    sample = metrics.registry.get_sample_value
    assert sample("kondor_operator_slots", {"state": "Claimed", "activity": "Busy"}) == 2
    assert sample("kondor_operator_slots", {"state": "Owner", "activity": "Idle"}) == 1
    assert sample("kondor_operator_execution_points", {"heartbeat": "Fresh"}) == 1


def test_touching_one_node_plans_only_that_node() -> None:
    subject, writer, _ = reconciler([node("n1"), node("n2")], [policy("all")], [])
    asyncio.run(subject.run_once())
    writer.calls.clear()
    subject.touch("n2")
    asyncio.run(subject.run_once())
    assert [name for verb, name, _ in writer.calls if verb == "create"] == ["n2"]


def test_a_policy_is_checked_once_per_spec() -> None:
    subject, _, _ = reconciler([], [policy("p", start="true")], [])
    world = subject.snapshot()
    first = subject.check(world.policies["p"])
    assert subject.check(world.policies["p"]) is first


class SlowWriter(Writer):
    """Takes its time over each ExecutionPoint write and counts how many run at once."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()
        self.running = 0
        self.peak = 0

    def _slow(self) -> None:
        with self.lock:
            self.running += 1
            self.peak = max(self.peak, self.running)
        time.sleep(0.01)
        with self.lock:
            self.running -= 1

    def create_execution_point(self, manifest: Mapping[str, Any]) -> str | None:
        self._slow()
        return super().create_execution_point(manifest)

    def patch_execution_point(self, name: str, patch: Mapping[str, Any]) -> bool:
        self._slow()
        return super().patch_execution_point(name, patch)


def fleet(count: int) -> list[dict[str, Any]]:
    return [node(f"n{i:03d}", pool="batch") for i in range(count)]


BATCH: dict[str, Any] = {"nodeSelector": {"matchLabels": {"pool": "batch"}}}


def test_writes_go_out_on_a_bounded_pool_and_a_bulk_change_is_summarised() -> None:
    writer, metrics = SlowWriter(), Metrics()
    subject = Reconciler(writer, metrics, clock=lambda: NOW, concurrency=8, monotonic=lambda: 0.0)
    subject.attach(
        index({n["metadata"]["name"]: node_entry(n) for n in fleet(100)}),
        table([]),
        index({"batch": slot_policy_entry(policy("batch", **BATCH))}),
    )
    asyncio.run(subject.run_once())
    subject.close()
    creates = [name for verb, name, _ in writer.calls if verb == "create"]
    assert sorted(creates) == [f"n{i:03d}" for i in range(100)]
    assert 1 < writer.peak <= 8
    # 25 Created Events one by one, the other 75 in one Event on the SlotPolicy.
    on_eps = [ref.name for ref, event in writer.events if ref.kind == "ExecutionPoint"]
    [(ref, summary)] = [(r, e) for r, e in writer.events if r.kind == "SlotPolicy"]
    assert len(on_eps) == 25
    assert (ref.name, ref.uid, summary.reason) == ("batch", "uid-batch", "Created")
    assert summary.message.startswith("75 ExecutionPoints (")
    sample = metrics.registry.get_sample_value
    assert sample("kondor_operator_events_total", {"delivery": "posted"}) == 25
    assert sample("kondor_operator_events_total", {"delivery": "summarised"}) == 75


def test_one_execution_points_writes_stay_in_order() -> None:
    ep = {
        "metadata": {"name": "n000", "uid": "ep-1", "ownerReferences": []},
        "spec": {"nodeName": "n000"},
    }
    writer = SlowWriter()
    subject = Reconciler(writer, Metrics(), clock=lambda: NOW, concurrency=4)
    subject.attach(
        index({"n000": node_entry(node("n000", pool="batch"))}),
        table([ep]),
        index({"batch": slot_policy_entry(policy("batch", **BATCH))}),
    )
    asyncio.run(subject.run_once())
    subject.close()
    verbs = [verb for verb, name, _ in writer.calls if name == "n000"]
    assert verbs == ["patch", "status"], "adopted first, then its status.operator"


def test_an_execution_point_event_plans_that_one_only_and_leaves_policy_status_alone() -> None:
    nodes = fleet(3)
    subject, writer, _ = reconciler(nodes, [policy("batch", **BATCH)], [])
    asyncio.run(subject.run_once())
    writer.calls.clear()
    subject.touch("n001")  # an agent's heartbeat
    world = subject.snapshot({"n001"})
    assert set(world.nodes) == {"n001"} and set(world.policies) == {"batch"}
    plan = subject.plan(world, {"n001"}, NOW)
    assert [a.name for a in plan.actions] == ["n001"] and plan.policy_patches == []
    # A node that changes its labels changes the policy's counts: its status is planned.
    subject._indexes[0]["n001"] = [node_entry(node("n001", pool="other"))]  # type: ignore[index]
    subject.touch_node("n001")
    asyncio.run(subject.run_once())
    verbs = [(verb, name) for verb, name, _ in writer.calls]
    assert ("policy-status", "batch") in verbs
    status = next(patch for verb, _, patch in writer.calls if verb == "policy-status")
    assert status["status"]["selectedNodes"] == 2


def test_the_fleet_gauges_follow_touched_passes_by_difference() -> None:
    def ep(name: str, *states: str, version: str = "1") -> dict[str, Any]:
        slots = [
            {"name": f"slot{i}@{name}", "type": "Static", "state": s, "activity": "Idle"}
            for i, s in enumerate(states)
        ]
        return {
            "metadata": {"name": name, "uid": f"ep-{name}", "resourceVersion": version},
            "spec": {"nodeName": name},
            "status": {"lastHeartbeat": "2026-01-02T03:04:00Z", "slots": slots},
        }

    subject, _, metrics = reconciler([], [], [ep("a", "Owner"), ep("b", "Owner", "Owner")])
    asyncio.run(subject.run_once())
    sample = metrics.registry.get_sample_value
    assert sample("kondor_operator_slots", {"state": "Owner", "activity": "Idle"}) == 3
    points = subject._indexes[1]  # type: ignore[index]
    assert isinstance(points, ExecutionPointTable)
    assert points.apply("MODIFIED", ep("b", "Unclaimed", "Owner", version="2")) is not None
    assert points.apply("DELETED", ep("a")) is not None
    subject.touch("a")
    subject.touch("b")
    asyncio.run(subject.run_once())
    assert sample("kondor_operator_slots", {"state": "Owner", "activity": "Idle"}) == 1
    assert sample("kondor_operator_slots", {"state": "Unclaimed", "activity": "Idle"}) == 1
    assert sample("kondor_operator_execution_points", {"heartbeat": "Fresh"}) == 1
