"""The one list-watch loop (kondor_kube.reflector) on a scripted API: a listing, then watches
from the last version seen; bookmarks move the version only; 410 and ERROR events list again
at once; other refusals back off (doubling, capped) and list again; a broken connection backs
off and resumes from the last version; `stop` ends it. (The operator's Node, ExecutionPoint
and job watches are Reflectors too: tests/unit/operator/test_{nodewatch,epwatch}.py.)"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from kondor_kube.errors import ApiError, ForbiddenError, GoneError, UnreachableError
from kondor_kube.reflector import ListWatch

Script = list[Any]
Items = list[dict[str, Any]]


def obj(name: str, version: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": version}}


class FakeApi:
    """A Client's list and watch, answering from scripts; when the watches run out, `stop`
    is set (the loop ends at its next check)."""

    def __init__(self, lists: Script, watches: Script, stop: threading.Event) -> None:
        self.lists = lists
        self.watches = watches
        self.stop = stop
        self.calls: list[tuple[str, str]] = []

    def list(self, path: str, **_: Any) -> tuple[Items, str]:
        self.calls.append(("list", ""))
        answer = self.lists.pop(0)
        if isinstance(answer, Exception):
            raise answer
        items, version = answer
        return list(items), str(version)

    def watch(self, path: str, version: str, timeout: int, **_: Any) -> Iterator[dict[str, Any]]:
        self.calls.append(("watch", version))
        if not self.watches:
            self.stop.set()
            return iter(())
        answer = self.watches.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return self._events(answer)

    @staticmethod
    def _events(script: Script) -> Iterator[dict[str, Any]]:
        for event in script:
            if isinstance(event, Exception):
                raise event  # the stream breaks mid-way
            yield event


class Recorder:
    def __init__(self) -> None:
        self.listed: list[list[str]] = []
        self.events: list[tuple[str, str]] = []
        self.lost = 0
        self.slept: list[float] = []

    def on_listed(self, items: list[dict[str, Any]]) -> None:
        self.listed.append([item["metadata"]["name"] for item in items])

    def on_event(self, kind: str, found: Mapping[str, Any]) -> None:
        self.events.append((kind, found["metadata"]["name"]))

    def on_lost(self) -> None:
        self.lost += 1


def run(lists: Script, watches: Script, **options: Any) -> tuple[FakeApi, Recorder, ListWatch]:
    stop = threading.Event()
    api = FakeApi(lists, watches, stop)
    seen = Recorder()
    reflector = ListWatch(
        api,  # type: ignore[arg-type]
        "/apis/kondor.io/v1alpha1/executionpoints",
        on_listed=seen.on_listed,
        on_event=seen.on_event,
        on_lost=seen.on_lost,
        sleep=seen.slept.append,
        **options,
    )
    reflector.run(stop)
    return api, seen, reflector


def test_list_then_watch_from_its_version_and_resume_where_the_last_watch_ended() -> None:
    api, seen, reflector = run(
        [([obj("a", "3")], "5")],
        [
            [
                {"type": "ADDED", "object": obj("b", "6")},
                {"type": "MODIFIED", "object": obj("a", "7")},
            ],
            [{"type": "DELETED", "object": obj("b", "8")}],
        ],
    )
    assert seen.listed == [["a"]] and reflector.synced.is_set()
    assert seen.events == [("ADDED", "b"), ("MODIFIED", "a"), ("DELETED", "b")]
    assert api.calls == [("list", ""), ("watch", "5"), ("watch", "7"), ("watch", "8")]
    assert seen.lost == 0 and seen.slept == []


def test_a_bookmark_moves_the_version_and_nothing_else() -> None:
    bookmark = {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "40"}}}
    api, seen, reflector = run([([], "5")], [[bookmark]])
    assert seen.events == [] and reflector.events == 1 and reflector.changes == 0
    assert api.calls[-1] == ("watch", "40"), "resumed from the bookmark, not listed again"


@pytest.mark.parametrize(
    "expired",
    [
        GoneError(410, "Gone", "too old resource version"),  # the watch request refused
        [{"type": "ERROR", "object": {"code": 410, "reason": "Expired", "message": "old"}}],
    ],
)
def test_an_expired_version_lists_again_at_once(expired: Any) -> None:
    api, seen, _ = run([([obj("a", "3")], "5"), ([obj("a", "9")], "9")], [expired])
    assert api.calls == [("list", ""), ("watch", "5"), ("list", ""), ("watch", "9")]
    assert seen.listed == [["a"], ["a"]]
    assert seen.lost == 1 and seen.slept == [], "no back-off for a 410"


def test_a_refusal_backs_off_doubling_up_to_the_cap_and_lists_again() -> None:
    refusals = [ApiError(500, "Internal Server Error"), ForbiddenError(403, "Forbidden")]
    api, seen, _ = run(
        [([], "1"), ApiError(503, "Service Unavailable"), ([], "2"), ([], "3")],
        refusals,
        max_backoff=1.5,
    )
    assert seen.slept == [1.0, 1.5, 1.5], "1 s, doubled, capped at max_backoff"
    assert [call for call in api.calls if call[0] == "list"] == [("list", "")] * 4
    assert api.calls[-1] == ("watch", "3")
    assert seen.lost == 3


def test_a_broken_connection_backs_off_and_resumes_from_the_last_version() -> None:
    broken = [{"type": "MODIFIED", "object": obj("a", "6")}, UnreachableError("reset")]
    api, seen, _ = run([([obj("a", "3")], "5")], [broken, UnreachableError("refused")])
    assert api.calls == [("list", ""), ("watch", "5"), ("watch", "6"), ("watch", "6")]
    assert seen.slept == [1.0, 2.0] and seen.lost == 0, "resumed, not listed again"
    assert seen.events == [("MODIFIED", "a")]


def test_a_success_resets_the_back_off() -> None:
    _, seen, _ = run(
        [([], "1")],
        [UnreachableError("a"), [], UnreachableError("b")],
    )
    assert seen.slept == [1.0, 1.0]


def test_stop_ends_the_loop_between_events() -> None:
    stop = threading.Event()
    events = [{"type": "ADDED", "object": obj(name, str(i))} for i, name in enumerate("abc")]
    seen = Recorder()

    def on_event(kind: str, found: Mapping[str, Any]) -> None:
        seen.on_event(kind, found)
        stop.set()  # told to stop while a watch is open

    api = FakeApi([([], "0")], [events], stop)
    ListWatch(
        api,  # type: ignore[arg-type]
        "/x",
        on_listed=seen.on_listed,
        on_event=on_event,
        sleep=seen.slept.append,
    ).run(stop)
    assert seen.events == [("ADDED", "a")]
