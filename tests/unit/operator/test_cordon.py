"""The operator's cordon drains (kondor_operator.cordon) with fakes: what it writes for
cordoned and uncordoned nodes, that it reads a policy once per poll, and nothing unless it
leads."""

from __future__ import annotations

from typing import Any

from kondor_core.api import ExecutionPoint
from kondor_operator.cordon import CordonDrains

from .test_defrag import FakeWriter


class FakePoints:
    def __init__(self, points: list[ExecutionPoint]) -> None:
        self.points = points

    def execution_points(self) -> list[ExecutionPoint]:
        return self.points


class FakeCordon:
    def __init__(self, cordoned: set[str]) -> None:
        self.cordoned = cordoned
        self.policy_reads = 0

    def cordoned_nodes(self) -> set[str]:
        return set(self.cordoned)

    def drains_on_cordon(self, policy: str) -> bool:
        self.policy_reads += 1
        return policy == "drains"


def ep(name: str, drain: dict[str, Any] | None = None) -> ExecutionPoint:
    spec: dict[str, Any] = {"nodeName": name, "policy": {"name": "drains"}}
    if drain is not None:
        spec["drain"] = drain
    return ExecutionPoint.model_validate({"metadata": {"name": name, "uid": name}, "spec": spec})


def test_cordon_drains_and_uncordon_cancels() -> None:
    writer = FakeWriter()
    api = FakeCordon({"a", "b"})
    points = [ep("a"), ep("b")]
    cordons = CordonDrains(FakePoints(points), api, writer, clock=lambda: 0.0)
    cordons.poll()
    assert [name for name, _ in writer.patches] == ["a", "b"]
    assert writer.patches[0][1]["spec"]["drain"]["requestedBy"] == "kondor-cordon"
    assert api.policy_reads == 1  # one read per policy and poll
    assert writer.events == [("a", "CordonDrain"), ("b", "CordonDrain")]

    drained = writer.patches[0][1]["spec"]["drain"]
    api.cordoned = set()
    cordons.points = FakePoints([ep("a", drained)])
    cordons.poll()
    assert writer.patches[-1] == ("a", {"spec": {"drain": None}})
    assert writer.events[-1] == ("a", "CordonDrainCancelled")


def test_nothing_is_written_unless_leading() -> None:
    writer = FakeWriter()
    cordons = CordonDrains(FakePoints([ep("a")]), FakeCordon({"a"}), writer)
    cordons.set_leading(False)
    cordons.poll()
    assert writer.patches == []
