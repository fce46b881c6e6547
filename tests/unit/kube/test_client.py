"""kondor_kube.Client on the real `kubernetes` ApiClient with its transport replaced: what each
request sends (path, query, Accept, Content-Type, the field manager on every write), what it
makes of the answers (plain JSON, pages, a watch's lines, managedFields dropped), and the
errors mapped once, with the server's message."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest
from kubernetes import client
from urllib3.exceptions import MaxRetryError

from kondor_kube import managers, paths
from kondor_kube.client import (
    APPLY_PATCH,
    JSON_PATCH,
    MERGE_PATCH,
    PARTIAL_OBJECT_METADATA,
    Client,
)
from kondor_kube.errors import (
    ApiError,
    ConflictError,
    ForbiddenError,
    GoneError,
    NotFoundError,
    UnreachableError,
)
from kondor_kube.events import event_body
from kondor_kube.pacer import Pacer


@dataclass
class Answer:
    """What urllib3 hands back (the part the client reads)."""

    status: int
    body: Any
    reason: str = "OK"
    lines: list[Any] | None = None
    released: bool = False

    @property
    def data(self) -> bytes:
        return json.dumps(self.body).encode()

    def stream(self, *_: Any, **__: Any) -> Any:
        for line in self.lines or []:
            yield json.dumps(line).encode() + b"\n"

    def release_conn(self) -> None:
        self.released = True


@dataclass
class Sent:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any


@dataclass
class Transport:
    answers: list[Answer | Exception]
    sent: list[Sent] = field(default_factory=list)

    def call_api(self, method: str, url: str, headers: Any, body: Any, *_: Any, **__: Any) -> Any:
        parts = urlsplit(url)
        self.sent.append(
            Sent(method, parts.path, dict(parse_qsl(parts.query)), dict(headers or {}), body)
        )
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return self._response(answer)

    @staticmethod
    def _response(answer: Answer) -> Any:
        class Response:
            status = answer.status
            response = answer

        return Response()


def kube(
    *answers: Answer | Exception, manager: str = managers.RECONCILER
) -> tuple[Client, Transport]:
    api = client.ApiClient(client.Configuration(host="https://api.example:6443"))
    transport = Transport(list(answers))
    api.call_api = transport.call_api  # type: ignore[method-assign,assignment]
    return Client(api, field_manager=manager), transport


def status(code: int, reason: str, message: str) -> Answer:
    return Answer(code, {"kind": "Status", "code": code, "message": message}, reason=reason)


@pytest.mark.parametrize(
    ("code", "reason", "kind"),
    [
        (403, "Forbidden", ForbiddenError),
        (404, "Not Found", NotFoundError),
        (409, "Conflict", ConflictError),
        (410, "Gone", GoneError),
        (422, "Unprocessable Entity", ApiError),
        (500, "Internal Server Error", ApiError),
    ],
)
def test_errors_are_mapped_once_with_the_server_s_message(
    code: int, reason: str, kind: type[ApiError]
) -> None:
    subject, _ = kube(status(code, reason, 'pods "x" is forbidden: no'))
    with pytest.raises(kind) as raised:
        subject.get(paths.core("pods", "x", namespace="ns"))
    assert type(raised.value) is kind
    assert raised.value.status == code and raised.value.reason == reason
    assert raised.value.message == 'pods "x" is forbidden: no'
    assert str(raised.value) == f'{code} {reason}: pods "x" is forbidden: no'


def test_an_answer_without_a_status_body_keeps_status_and_reason() -> None:
    subject, _ = kube(Answer(502, "not json at all", reason="Bad Gateway"))
    with pytest.raises(ApiError, match=r"^502 Bad Gateway$"):
        subject.get("/api/v1/nodes/n")


def test_no_answer_at_all_is_unreachable_an_os_error() -> None:
    subject, _ = kube(MaxRetryError(None, "/api", "connection refused"))  # type: ignore[arg-type]
    with pytest.raises(OSError) as raised:
        subject.get("/api/v1/nodes/n")
    assert isinstance(raised.value, UnreachableError)


def test_read_is_none_for_a_missing_object_and_cached_asks_the_watch_cache() -> None:
    subject, transport = kube(
        status(404, "Not Found", "gone"), Answer(200, {"metadata": {"name": "p"}})
    )
    assert subject.read(paths.kondor("slotpolicies", "p")) is None
    assert subject.read(paths.kondor("slotpolicies", "p"), cached=True) == {
        "metadata": {"name": "p"}
    }
    assert transport.sent[0].query == {}
    assert transport.sent[1].query == {"resourceVersion": "0"}
    assert transport.sent[1].path == "/apis/kondor.io/v1alpha1/slotpolicies/p"


def test_every_write_names_the_field_manager_and_its_patch_type() -> None:
    subject, transport = kube(*[Answer(200, {}) for _ in range(5)], manager=managers.AGENT)
    ep = paths.kondor("executionpoints", "n1", subresource="status")
    subject.create(paths.core("pods", namespace="ns"), {"metadata": {"name": "p"}})
    subject.merge_patch(ep, {"status": {"a": 1}})
    subject.json_patch(ep, [{"op": "test", "path": "/status/a", "value": 1}])
    subject.apply(paths.group("coordination.k8s.io/v1", "leases", "l", namespace="ns"), {"a": 1})
    subject.delete(paths.core("pods", "p", namespace="ns"))
    create, merge, json_patch, apply, delete = transport.sent
    assert (create.method, create.path) == ("POST", "/api/v1/namespaces/ns/pods")
    assert (merge.method, merge.path) == (
        "PATCH",
        "/apis/kondor.io/v1alpha1/executionpoints/n1/status",
    )
    assert merge.headers["Content-Type"] == MERGE_PATCH
    assert json_patch.headers["Content-Type"] == JSON_PATCH
    assert json_patch.body == [{"op": "test", "path": "/status/a", "value": 1}]
    assert apply.headers["Content-Type"] == APPLY_PATCH and apply.query["force"] == "true"
    assert apply.path == "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l"
    for write in (create, merge, json_patch, apply):
        assert write.query["fieldManager"] == "kondor-agent"
    assert delete.method == "DELETE" and "fieldManager" not in delete.query


def test_a_listing_is_paged_and_its_managed_fields_dropped() -> None:
    managed = {"metadata": {"name": "a", "managedFields": [{"manager": "kondor-agent"}]}}
    subject, transport = kube(
        Answer(200, {"items": [managed], "metadata": {"continue": "next", "resourceVersion": "8"}}),
        Answer(200, {"items": [{"metadata": {"name": "b"}}], "metadata": {"resourceVersion": "9"}}),
    )
    items, version = subject.list(paths.core("nodes"), query=[("labelSelector", "kondor.io/pool")])
    assert items == [{"metadata": {"name": "a"}}, {"metadata": {"name": "b"}}]
    assert version == "9"
    assert transport.sent[0].query == {"labelSelector": "kondor.io/pool", "limit": "500"}
    assert transport.sent[1].query["continue"] == "next"


def test_a_watch_asks_for_bookmarks_from_a_version_and_parses_each_line_once() -> None:
    managed = {"metadata": {"name": "a", "resourceVersion": "10", "managedFields": [{}]}}
    bookmark = {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "11"}}}
    watched = Answer(200, None, lines=[{"type": "MODIFIED", "object": managed}, bookmark])
    subject, transport = kube(watched)
    events = list(subject.watch("/api/v1/nodes", "9", 300, accept=PARTIAL_OBJECT_METADATA))
    assert events == [
        {"type": "MODIFIED", "object": {"metadata": {"name": "a", "resourceVersion": "10"}}},
        bookmark,
    ]
    query = transport.sent[0].query
    assert query == {
        "watch": "true",
        "allowWatchBookmarks": "true",
        "resourceVersion": "9",
        "timeoutSeconds": "300",
    }
    assert transport.sent[0].headers["Accept"] == PARTIAL_OBJECT_METADATA
    assert watched.released, "the connection goes back to the pool"


def test_requests_are_paced_and_other_managers_share_the_pacing() -> None:
    waits: list[float] = []
    now = [0.0]
    pacer = Pacer(qps=10, burst=1, clock=lambda: now[0], sleep=waits.append)
    subject, _ = kube(Answer(200, {}), Answer(200, {}))
    paced = Client(subject.api_client, field_manager=managers.NEGOTIATOR, pacer=pacer)
    paced.get("/api/v1/nodes/a")
    paced.with_manager(managers.LEADER).get("/api/v1/nodes/b")
    assert waits == [pytest.approx(0.1)]


def test_an_event_names_its_object_and_is_cut_to_the_api_s_length() -> None:
    body = event_body(
        {"apiVersion": "kondor.io/v1alpha1", "kind": "ExecutionPoint", "name": "n1"},
        type_="Warning",
        reason="FetchFailed",
        message="x" * 2000,
        component="kondor-agent",
        instance="n1",
        host="n1",
    )
    assert body["metadata"] == {"generateName": "n1."}
    assert len(body["message"]) == 1024
    assert body["source"] == {"component": "kondor-agent", "host": "n1"}
    assert body["reportingInstance"] == "n1"
    assert body["firstTimestamp"] == body["lastTimestamp"]


def test_every_manager_is_a_distinct_kondor_name() -> None:
    assert len(set(managers.ALL)) == len(managers.ALL)
    assert all(name.startswith("kondor-") for name in managers.ALL)
