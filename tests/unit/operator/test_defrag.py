"""The operator's defrag controller (kondor_operator.defrag) with a fake pool and writer: what
it writes to the ExecutionPoints, the Events it posts, and that it writes nothing unless it
leads."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kondor_core.api import ExecutionPoint, PoolSpec, format_time
from kondor_core.fleet import Event
from kondor_operator.defrag import Defrag
from kondor_operator.kube import ObjectRef

from ..negotiation.test_defrag import NOW, defrag_drain, node


class FakePool:
    def __init__(self, spec: dict[str, Any], points: list[ExecutionPoint]) -> None:
        self.spec = PoolSpec.model_validate(spec)
        self.points = points

    def settings(self) -> PoolSpec:
        return self.spec

    def execution_points(self) -> list[ExecutionPoint]:
        return self.points


class FakeWriter:
    def __init__(self) -> None:
        self.patches: list[tuple[str, dict[str, Any]]] = []
        self.events: list[tuple[str, str]] = []

    def patch_execution_point(self, name: str, patch: Mapping[str, Any]) -> bool:
        self.patches.append((name, dict(patch)))
        return True

    def post_event(self, ref: ObjectRef, event: Event) -> None:
        self.events.append((ref.name, event.reason))


def test_a_poll_writes_condor_defrag_s_drain_and_cancels_as_planned() -> None:
    pool = FakePool(
        {"defrag": {"interval": 60, "drainingMachinesPerHour": 60, "drainingSchedule": "fast"}},
        [node("a", used=1), node("b", drain=defrag_drain())],
    )
    writer = FakeWriter()
    defrag = Defrag(pool, writer, clock=lambda: NOW)
    defrag.last_poll = NOW - 60
    plan = defrag.poll()
    assert plan is not None and plan.drain == ("a",) and plan.cancel == ("b",)
    assert writer.patches == [
        ("b", {"spec": {"drain": None}}),
        (
            "a",
            {
                "spec": {
                    "drain": {
                        "mode": "fast",
                        "reason": "Defrag",
                        "resumeOnCompletion": True,
                        "requestedAt": format_time(NOW),
                        "requestedBy": "condor_defrag",
                    }
                }
            },
        ),
    ]
    assert writer.events == [("b", "DefragCancel"), ("a", "DefragDrain")]
    assert defrag.last_poll == NOW


def test_the_condor_config_knobs_apply_and_a_bad_one_falls_back_to_the_spec() -> None:
    config = "DEFRAG_DRAINING_MACHINES_PER_HOUR = 60\nDEFRAG_INTERVAL = 60\n"
    writer = FakeWriter()
    defrag = Defrag(FakePool({"condorConfig": config}, [node("a", used=1)]), writer)
    assert defrag.settings().draining_machines_per_hour == 60
    bad = Defrag(FakePool({"condorConfig": "DEFRAG_INTERVAL = soon\n"}, []), writer)
    assert bad.settings().interval == 600


def test_nothing_is_written_unless_this_replica_leads() -> None:
    pool = FakePool(
        {"defrag": {"interval": 60, "drainingMachinesPerHour": 60}}, [node("a", used=1)]
    )
    writer = FakeWriter()
    defrag = Defrag(pool, writer, clock=lambda: NOW)
    defrag.set_leading(False)
    assert defrag.poll() is None
    assert writer.patches == []
