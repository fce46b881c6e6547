"""The metadata-only Node watch against a fake API: heartbeats cost nothing, labels count."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from kondor_core.fleet import NodeFacts
from kondor_kube.errors import ApiError, GoneError
from kondor_operator.nodewatch import NodeChanges, NodeWatch


def meta(name: str, version: int, uid: str = "u", **labels: str) -> dict[str, Any]:
    return {"name": name, "uid": f"{uid}-{name}", "labels": labels, "resourceVersion": str(version)}


def event(kind: str, metadata: dict[str, Any]) -> dict[str, Any]:
    return {"type": kind, "object": {"kind": "PartialObjectMetadata", "metadata": metadata}}


class FakeNodes:
    """Listings and watches in the order given; a watch item that is an exception is raised."""

    def __init__(self, listings: list[tuple[list[dict[str, Any]], str]], watches: list[list[Any]]):
        self.listings = listings
        self.watches = watches
        self.watched_from: list[str] = []
        #: (n, stop): set `stop` when the n-th watch begins.
        self.stop_at: tuple[int, threading.Event] | None = None

    def list_node_metadata(self) -> tuple[list[dict[str, Any]], str]:
        return self.listings.pop(0)

    def watch_node_metadata(
        self, resource_version: str, timeout_seconds: int
    ) -> Iterator[dict[str, Any]]:
        self.watched_from.append(resource_version)
        if self.stop_at is not None and len(self.watched_from) >= self.stop_at[0]:
            self.stop_at[1].set()
        for item in self.watches.pop(0) if self.watches else []:
            if isinstance(item, BaseException):
                raise item
            yield item


def recorder() -> tuple[list[NodeChanges], Any]:
    seen: list[NodeChanges] = []
    return seen, seen.append


def test_heartbeats_change_nothing_and_labels_uid_and_deletions_do() -> None:
    source = FakeNodes(
        [([meta("a", 1, pool="x"), meta("b", 2)], "10")],
        [
            [
                event("MODIFIED", meta("a", 11, pool="x")),  # kwok's status heartbeat
                event("MODIFIED", meta("b", 12)),
                {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "15"}}},
                event("MODIFIED", meta("a", 16, pool="y")),  # relabelled
                event("ADDED", meta("c", 17)),
                event("DELETED", meta("b", 18)),
            ]
        ],
    )
    seen, on_change = recorder()
    watch = NodeWatch(source, on_change)
    watch.step()
    assert watch.synced.is_set()
    assert seen == [
        {"a": NodeFacts("a", "u-a", {"pool": "x"}), "b": NodeFacts("b", "u-b", {})},
        {"a": NodeFacts("a", "u-a", {"pool": "y"})},
        {"c": NodeFacts("c", "u-c", {})},
        {"b": None},
    ]
    assert (watch.events, watch.changes, watch.version) == (6, 3, "18")
    assert source.watched_from == ["10"]


def test_an_empty_cluster_is_synced_with_nothing_to_report() -> None:
    seen, on_change = recorder()
    watch = NodeWatch(FakeNodes([([], "1")], []), on_change)
    watch.relist()
    assert watch.synced.is_set() and seen == [{}]


def test_an_expired_watch_lists_again_and_reports_what_it_missed() -> None:
    gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}
    source = FakeNodes(
        [
            ([meta("a", 1), meta("b", 2)], "10"),
            ([meta("a", 1, pool="z"), meta("c", 30)], "31"),
            ([meta("a", 1, pool="z"), meta("c", 30)], "40"),
        ],
        # An ERROR event, then a 410 answer: both list again, without a back-off.
        [[gone], [GoneError(410)]],
    )
    seen, on_change = recorder()
    stop = threading.Event()
    source.stop_at = (3, stop)
    sleeps: list[float] = []
    NodeWatch(source, on_change, sleep=sleeps.append).run(stop)
    assert source.watched_from == ["10", "31", "40"]
    assert seen == [
        {"a": NodeFacts("a", "u-a", {}), "b": NodeFacts("b", "u-b", {})},
        {"a": NodeFacts("a", "u-a", {"pool": "z"}), "b": None, "c": NodeFacts("c", "u-c", {})},
    ]
    assert sleeps == []


def test_the_api_server_failing_backs_off_and_lists_again() -> None:
    source = FakeNodes(
        [([meta("a", 1)], "10"), ([meta("a", 1)], "20")],
        [[ApiError(500)], [ApiError(503)]],
    )
    stop = threading.Event()
    source.stop_at = (3, stop)
    sleeps: list[float] = []
    source.listings.append(([meta("a", 1)], "30"))
    NodeWatch(source, lambda _: None, sleep=sleeps.append).run(stop)
    assert source.watched_from == ["10", "20", "30"]
    assert sleeps == [0.5, 1.0]


def test_the_loop_resumes_from_the_last_version_after_a_broken_connection() -> None:
    source = FakeNodes(
        [([meta("a", 1)], "10")],
        [[event("MODIFIED", meta("a", 11, pool="p")), ConnectionResetError("reset")]],
    )
    seen, on_change = recorder()
    stop = threading.Event()
    source.stop_at = (2, stop)
    sleeps: list[float] = []
    NodeWatch(source, on_change, sleep=sleeps.append).run(stop)
    assert source.watched_from == ["10", "11"], "resumed, not listed again"
    assert sleeps == [0.5]
    assert seen[-1] == {"a": NodeFacts("a", "u-a", {"pool": "p"})}
