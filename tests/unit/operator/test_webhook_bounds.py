"""The webhook server refuses with a message an admission request nested too deep for Python's
JSON parser (issue 18): the API server accepts 10,000 levels, `json` stops near 1,000, and kopf
would answer 500 (an outage to the user, an admission under failurePolicy Ignore)."""

from __future__ import annotations

import json

from kondor_operator.webhook import refuse_unparsable

UID = "5f0c6a51-1bd4-4a69-9d53-4fb5b1c9a7e2"


def _review(depth: int) -> str:
    head = json.dumps(
        {
            "kind": "AdmissionReview",
            "apiVersion": "admission.k8s.io/v1",
            "request": {
                "uid": UID,
                "kind": {"group": "kondor.io", "version": "v1alpha1", "kind": "ExecutionJob"},
                "resource": {"group": "kondor.io", "version": "v1alpha1", "resource": "x"},
                "name": "deep",
                "namespace": "ns",
                "operation": "CREATE",
                "userInfo": {"username": "alice"},
                "object": "OBJECT",
            },
        },
        separators=(",", ":"),
    )
    return head.replace('"OBJECT"', '{"spec":' + '{"a":' * depth + "1" + "}" * (depth + 1))


def test_a_request_too_deep_to_parse_is_refused_naming_the_object() -> None:
    text = _review(5000)
    try:
        json.loads(text)
        raise AssertionError("json parsed 5000 levels: the test needs a deeper object")
    except RecursionError:
        pass
    assert refuse_unparsable(text) == {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {
            "uid": UID,
            "allowed": False,
            "status": {
                "code": 422,
                "message": "ExecutionJob ns/deep: nested more than 64 levels deep",
            },
        },
    }


def test_without_a_uid_there_is_no_review_to_answer() -> None:
    assert refuse_unparsable('{"request": {"object": ' + "[" * 10) is None
