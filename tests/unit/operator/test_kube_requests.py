"""The requests `Kube` makes for the operator's own watches and for power management, on the
real `kubernetes` ApiClient with its transport replaced: paths, Accept (metadata only where
that is all that is needed), the merge patch, paging and a missing Node."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes import client

from kondor_kube.client import PARTIAL_OBJECT_METADATA
from kondor_kube.errors import ApiError
from kondor_operator.kube import Kube


@dataclass
class Answer:
    """What urllib3 hands back (the part kondor_kube.Client reads)."""

    status: int
    body: Any
    reason: str = "OK"
    headers: dict[str, str] = field(default_factory=dict)
    released: bool = False

    @property
    def data(self) -> bytes:
        return json.dumps(self.body).encode()

    def stream(self, *_: Any, **__: Any) -> Any:
        yield self.data + b"\n"  # a watch: one JSON document a line

    def release_conn(self) -> None:
        self.released = True


@dataclass
class Sent:
    method: str
    url: str
    headers: dict[str, str]
    body: Any


class Transport:
    def __init__(self, answers: list[Answer]) -> None:
        self.answers = answers
        self.sent: list[Sent] = []

    def call_api(self, method: str, url: str, headers: Any, body: Any, *_: Any, **__: Any) -> Any:
        self.sent.append(Sent(method, url, dict(headers or {}), body))
        answer = self.answers.pop(0)

        class Response:
            status = answer.status
            response = answer

        return Response()


def kube(answers: list[Answer]) -> tuple[Kube, Transport]:
    api = client.ApiClient(client.Configuration(host="https://api.example:6443"))
    transport = Transport(answers)
    api.call_api = transport.call_api  # type: ignore[method-assign,assignment]
    return Kube(api), transport


def test_a_node_s_annotations_are_read_as_metadata_only_and_a_missing_node_is_none() -> None:
    subject, transport = kube(
        [
            Answer(200, {"metadata": {"name": "n", "annotations": {"a": "1"}}}),
            Answer(404, {"kind": "Status", "code": 404}, reason="Not Found"),
        ]
    )
    assert subject.read_node_annotations("n") == {"a": "1"}
    assert subject.read_node_annotations("gone") is None
    first = transport.sent[0]
    assert (first.method, first.url) == ("GET", "https://api.example:6443/api/v1/nodes/n")
    assert first.headers["Accept"] == PARTIAL_OBJECT_METADATA


def test_annotations_are_merge_patched_and_a_node_gone_is_no_error() -> None:
    subject, transport = kube(
        [
            Answer(200, {"metadata": {"name": "n"}}),
            Answer(404, {"kind": "Status", "code": 404}, reason="Not Found"),
            Answer(500, {"kind": "Status", "code": 500}, reason="Internal Server Error"),
        ]
    )
    subject.patch_node_annotations("n", {"kondor.io/sleep-state": "S3", "old": None})
    sent = transport.sent[0]
    # Every write names its field manager (kondor_kube.managers): the reconciler's here.
    assert (sent.method, sent.url) == (
        "PATCH",
        "https://api.example:6443/api/v1/nodes/n?fieldManager=kondor-reconciler",
    )
    assert sent.headers["Content-Type"] == "application/merge-patch+json"
    assert sent.headers["Accept"] == PARTIAL_OBJECT_METADATA
    assert sent.body == {"metadata": {"annotations": {"kondor.io/sleep-state": "S3", "old": None}}}
    subject.patch_node_annotations("gone", {"a": None})
    with pytest.raises(ApiError) as failed:
        subject.patch_node_annotations("n", {"a": None})
    assert failed.value.status == 500


def test_execution_points_are_listed_in_pages_and_watched_from_the_listing() -> None:
    item = {"metadata": {"name": "a", "resourceVersion": "5"}}
    managed = {"metadata": {**item["metadata"], "managedFields": [{"manager": "kondor-agent"}]}}
    watched = Answer(200, None)
    subject, transport = kube(
        [
            Answer(
                200, {"items": [managed], "metadata": {"continue": "next", "resourceVersion": "9"}}
            ),
            Answer(200, {"items": [item], "metadata": {"resourceVersion": "9"}}),
            watched,
        ]
    )
    items, version = subject.list_execution_points()
    assert (items, version) == ([item, item], "9"), "managedFields left out"
    assert transport.sent[1].url.endswith(
        "/apis/kondor.io/v1alpha1/executionpoints?limit=500&continue=next"
    )
    watched.body = {"type": "MODIFIED", "object": item}
    events = list(subject.watch_execution_points("9", 300))
    assert events == [{"type": "MODIFIED", "object": item}]
    url = transport.sent[2].url
    assert "watch=true" in url and "allowWatchBookmarks=true" in url
    assert "resourceVersion=9" in url and "timeoutSeconds=300" in url
    assert watched.released
