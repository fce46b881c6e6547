"""The operator's ExecutionPoint watch against a fake API (kondor_operator.epwatch): one
parsed table, an event at a version already read dropped unparsed, 410 and errors listed
again, and each change fanned out to the reconciler, the negotiator and power management."""

from __future__ import annotations

import asyncio
import copy
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from kondor_core.api import ExecutionPoint, format_time
from kondor_core.api.executionpoint import PowerStatus
from kondor_kube.errors import ApiError, GoneError
from kondor_operator import epwatch, negotiator
from kondor_operator.epwatch import (
    ExecutionPointChanges,
    ExecutionPointTable,
    ExecutionPointWatch,
    on_loop,
    read_execution_point,
)
from kondor_operator.jobwatch import JobTable
from kondor_operator.main import fan_out
from kondor_operator.metrics import Metrics
from kondor_operator.power import NodeMarker, PowerChange, PowerFollower
from kondor_operator.reconciler import Reconciler, execution_point_view

from .test_negotiator import NOW, FakeKube, ep_body

ASLEEP = {"sleepState": "S3", "slots": {}, "since": "2027-01-01T00:00:00Z"}


def ep(name: str, version: int, *, heartbeat: float = NOW, **status: Any) -> dict[str, Any]:
    """An ExecutionPoint as the API server sends it: the agent's status, managedFields."""
    body = ep_body(name)
    body["metadata"]["resourceVersion"] = str(version)
    body["metadata"]["managedFields"] = [{"manager": "kondor-agent", "fieldsV1": {"f:status": {}}}]
    body["status"]["lastHeartbeat"] = format_time(heartbeat)
    body["status"].update(status)
    return body


def event(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    return {"type": kind, "object": obj}


class FakePoints:
    """Listings and watches in the order given; a watch item that is an exception is raised."""

    def __init__(self, listings: list[tuple[list[dict[str, Any]], str]], watches: list[list[Any]]):
        self.listings = listings
        self.watches = watches
        self.watched_from: list[str] = []
        self.stop_at: tuple[int, threading.Event] | None = None

    def list_execution_points(self) -> tuple[list[dict[str, Any]], str]:
        items, version = self.listings.pop(0)
        return copy.deepcopy(items), version

    def watch_execution_points(
        self, resource_version: str, timeout_seconds: int
    ) -> Iterator[dict[str, Any]]:
        self.watched_from.append(resource_version)
        if self.stop_at is not None and len(self.watched_from) >= self.stop_at[0]:
            self.stop_at[1].set()
        for item in self.watches.pop(0) if self.watches else []:
            if isinstance(item, BaseException):
                raise item
            yield copy.deepcopy(item)


def recorder() -> tuple[list[dict[str, tuple[str | None, str | None]]], Any]:
    """What each batch reported: name -> (version before, version after)."""
    seen: list[dict[str, tuple[str | None, str | None]]] = []

    def listen(changes: ExecutionPointChanges) -> None:
        seen.append(
            {
                name: (
                    change.before.resource_version if change.before else None,
                    change.after.resource_version if change.after else None,
                )
                for name, change in changes.items()
            }
        )

    return seen, listen


def test_a_listing_then_events_keep_one_parsed_table() -> None:
    source = FakePoints(
        [([ep("a", 1), ep("b", 2)], "10")],
        [
            [
                event("MODIFIED", ep("a", 11, heartbeat=NOW + 60)),  # a heartbeat
                event("MODIFIED", ep("a", 11, heartbeat=NOW + 60)),  # the same version again
                {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "15"}}},
                event("ADDED", ep("c", 16)),
                event("DELETED", ep("b", 17)),
                event("DELETED", ep("b", 17)),  # gone already
            ]
        ],
    )
    seen, listen = recorder()
    watch = ExecutionPointWatch(source, [listen])
    watch.step()
    assert watch.synced.is_set()
    assert seen == [
        {"a": (None, "1"), "b": (None, "2")},
        {"a": ("1", "11")},
        {"c": (None, "16")},
        {"b": ("2", None)},
    ]
    assert (watch.events, watch.changes, watch.version) == (6, 3, "17")
    assert source.watched_from == ["10"]
    assert sorted(p.metadata.name for p in watch.execution_points()) == ["a", "c"]
    a = watch.table.get("a")
    assert a is not None and a.point is not None
    assert a.point.status is not None and a.point.status.last_heartbeat == format_time(NOW + 60)
    assert "managedFields" not in (a.point.metadata.model_extra or {}), "stripped, not kept"
    # The reconciler's view is derived from the parsed model, not parsed again.
    assert a.entry == execution_point_view(a.point)
    assert a.entry.observed.operator_status is a.point.status.operator
    assert set(watch.entries()) == {"a", "c"} and set(watch.entries(["a", "x"])) == {"a"}


def test_an_event_at_a_version_already_read_is_not_parsed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parsed: list[str] = []
    real = epwatch.read_execution_point

    def counting(obj: Any) -> Any:
        parsed.append(obj["metadata"]["resourceVersion"])
        return real(obj)

    monkeypatch.setattr(epwatch, "read_execution_point", counting)
    table = ExecutionPointTable()
    table.relist([ep("a", 1), ep("b", 2)])
    assert table.apply("MODIFIED", ep("a", 1)) is None
    assert table.relist([ep("a", 1), ep("b", 3)]).keys() == {"b"}
    assert parsed == ["1", "2", "3"]


def test_an_expired_watch_lists_again_and_reports_what_it_missed() -> None:
    gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}
    source = FakePoints(
        [
            ([ep("a", 1), ep("b", 2)], "10"),
            ([ep("a", 1), ep("c", 30)], "31"),  # b deleted and c created meanwhile
            ([ep("a", 40), ep("c", 30)], "41"),
        ],
        # An ERROR event, then a 410 answer: both list again, without a back-off.
        [[gone], [GoneError(410)]],
    )
    seen, listen = recorder()
    stop = threading.Event()
    source.stop_at = (3, stop)
    sleeps: list[float] = []
    watch = ExecutionPointWatch(source, [listen], sleep=sleeps.append)
    watch.run(stop)
    assert source.watched_from == ["10", "31", "41"]
    assert seen == [
        {"a": (None, "1"), "b": (None, "2")},
        {"c": (None, "30"), "b": ("2", None)},
        {"a": ("1", "40")},
    ]
    assert sleeps == []


def test_the_api_server_failing_backs_off_and_a_broken_connection_resumes() -> None:
    source = FakePoints(
        [([ep("a", 1)], "10"), ([ep("a", 1)], "20")],
        [
            [ApiError(500)],
            [event("MODIFIED", ep("a", 21)), ConnectionResetError("reset")],
        ],
    )
    stop = threading.Event()
    source.stop_at = (3, stop)
    sleeps: list[float] = []
    seen, listen = recorder()
    ExecutionPointWatch(source, [listen], sleep=sleeps.append).run(stop)
    # 500: back off, list again; a reset: back off (longer), resume from the last version.
    assert source.watched_from == ["10", "20", "21"]
    assert sleeps == [0.5, 1.0]
    assert seen[-1] == {"a": ("1", "21")}


def test_an_execution_point_that_does_not_parse_is_not_offered_but_reconciled() -> None:
    body = ep("a", 1, power=ASLEEP)
    body["status"]["slots"][0]["cpus"] = "many"  # a slot the model refuses
    watched = read_execution_point(body)
    assert watched.point is None
    assert watched.entry.observed.node_name == "a"
    assert watched.entry.observed.last_heartbeat == format_time(NOW)
    assert watched.power == PowerStatus.model_validate(ASLEEP)
    table = ExecutionPointTable()
    table.relist([body])
    assert table.execution_points() == [] and set(table.entries()) == {"a"}


def test_a_listener_that_fails_stops_neither_the_watch_nor_the_others() -> None:
    def broken(_: ExecutionPointChanges) -> None:
        raise RuntimeError("boom")

    seen, listen = recorder()
    source = FakePoints([([ep("a", 1)], "10")], [[event("MODIFIED", ep("a", 11))]])
    watch = ExecutionPointWatch(source, [broken, listen])
    watch.step()
    assert seen == [{"a": (None, "1")}, {"a": ("1", "11")}]


# ---- the fan-out -------------------------------------------------------------------------------


class FakeNodes:
    def __init__(self) -> None:
        self.annotations: dict[str, dict[str, str]] = {"a": {}, "b": {}}
        self.reads = 0
        self.patches: list[tuple[str, dict[str, str | None]]] = []

    def read_node_annotations(self, name: str) -> dict[str, str] | None:
        self.reads += 1
        return dict(self.annotations[name]) if name in self.annotations else None

    def patch_node_annotations(self, name: str, patch: Any) -> None:
        self.patches.append((name, dict(patch)))


class RecordingFollower(PowerFollower):
    def __init__(self) -> None:
        super().__init__(NodeMarker(FakeNodes()))
        self.offered: list[PowerChange] = []

    def offer(self, changes: list[PowerChange]) -> None:
        self.offered += changes
        super().offer(changes)


def test_changes_reach_the_reconciler_the_negotiator_and_power() -> None:
    """On the event loop: the reconciler is touched for a changed view, the negotiator hears
    the parsed ExecutionPoint and cycles when its offers change; power, on its own thread,
    hears every change and looks at those that may need a write."""

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        reconciler = Reconciler(FakeKube(), Metrics())  # type: ignore[arg-type]
        schedd = negotiator.Negotiator(FakeKube(), Metrics())
        follower = RecordingFollower()
        claimed = copy.deepcopy(ep("a", 13))
        claimed["status"]["slots"][0]["cpus"] = 2
        source = FakePoints(
            [([ep("a", 1), ep("b", 2)], "10")],
            [
                [
                    event("MODIFIED", ep("a", 11, heartbeat=NOW + 60)),
                    event("MODIFIED", ep("b", 12, power=ASLEEP)),
                    event("MODIFIED", claimed),
                    event("DELETED", ep("b", 14)),
                ]
            ],
        )
        watch = ExecutionPointWatch(source, fan_out(loop, reconciler, schedd, follower))
        schedd.attach(JobTable(), watch, {})
        watch.relist()
        await asyncio.sleep(0)
        assert reconciler._dirty == {"a", "b"}
        assert [p.metadata.name for p in schedd.execution_points()] == ["a", "b"]
        schedd._soon = False
        reconciler._dirty.clear()

        iterator = iter(source.watches.pop(0))
        source.watches.append([next(iterator)])  # a's heartbeat: offers unchanged
        watch.follow()
        await asyncio.sleep(0)
        assert reconciler._dirty == {"a"} and not schedd._soon
        source.watches.append([next(iterator)])  # b's power changes: not the reconciler's
        watch.follow()
        await asyncio.sleep(0)
        assert reconciler._dirty == {"a"} and not schedd._soon
        source.watches.append([next(iterator)])  # a's slot claimed 2 cores: a cycle soon
        watch.follow()
        await asyncio.sleep(0)
        assert schedd._soon
        source.watches.append([next(iterator)])  # b deleted
        watch.follow()
        await asyncio.sleep(0)
        assert [p.metadata.name for p in schedd.execution_points()] == ["a"]
        assert "b" not in schedd._offers_seen

        asleep = PowerStatus.model_validate(ASLEEP)
        assert [(c.node, c.power, c.gone, c.unchanged) for c in follower.offered] == [
            ("a", None, False, False),  # listed
            ("b", None, False, False),
            ("a", None, False, True),  # heartbeat
            ("b", asleep, False, False),
            ("a", None, False, True),
            ("b", None, True, False),  # deleted
        ]
        assert follower.drain() == 2  # the latest for a and for b: one look each
        nodes = follower.marker.nodes
        assert isinstance(nodes, FakeNodes) and nodes.reads == 2
        assert follower.marker.knows("a") and not follower.marker.knows("b"), "b is gone"
        follower.offer([PowerChange("a", None, unchanged=True)])
        assert follower.drain() == 0, "a heartbeat of a known node needs no look"

    asyncio.run(scenario())


def test_on_loop_hands_a_batch_to_the_loop_and_ignores_a_closed_one() -> None:
    got: list[tuple[ExecutionPointChanges, bool]] = []

    async def scenario() -> None:
        loop = asyncio.get_running_loop()

        def on_the_loop(changes: ExecutionPointChanges) -> None:
            got.append((changes, asyncio.get_running_loop() is loop))

        hand = on_loop(loop, on_the_loop)
        thread = threading.Thread(target=hand, args=({},))
        thread.start()
        thread.join()
        await asyncio.sleep(0.01)

    asyncio.run(scenario())
    assert got == [({}, True)]
    closed = asyncio.new_event_loop()
    closed.close()
    on_loop(closed, lambda _: None)({})  # no error: the operator is stopping


def test_offer_signature_reads_the_parsed_model() -> None:
    point = ExecutionPoint.model_validate(ep("a", 1))
    later = ExecutionPoint.model_validate(ep("a", 2, heartbeat=NOW + 60))
    assert negotiator.offer_signature(point) == negotiator.offer_signature(later)
