"""The operator's ExecutionJob webhooks: what kopf declares, and what the handlers answer.

The decisions are `admit_job`'s (test_admission.py); here, that the handlers are declared
for the right operations and resources, read the user from kopf's `userinfo`, write the
owner through kopf's patch, and refuse with the message and code the API server passes on.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import kopf
import pytest
from kopf._cogs.structs.references import Resource
from kopf._core.engines.admission import build_webhooks

from kondor_core.api import EXECUTION_JOBS, GROUP, VERSION
from kondor_operator import webhook
from kondor_operator.webhook import (
    MUTATE_JOB_ID,
    VALIDATE_JOB_ID,
    operator_user,
    register_job_admission,
    self_signed,
    token_subject,
)

PROCESS = {"executable": "/bin/true"}
ALICE = kopf.UserInfo(username="alice", uid="", groups=["kondor:users"])
BOB = kopf.UserInfo(username="bob", uid="", groups=["kondor:users"])
SERVICE = kopf.WebhookClientConfig(
    service=kopf.WebhookClientConfigService(namespace="kondor-system", name="kondor-webhook")
)
OPERATOR_SA = "system:serviceaccount:kondor-system:kondor-operator"


def _token(claims: dict[str, Any]) -> str:
    def part(data: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")

    return f"{part({'alg': 'RS256'})}.{part(claims)}.c2lnbmF0dXJl"


def _handlers(fails_closed: bool = False, token: str | None = None) -> dict[str, Any]:
    registry = kopf.OperatorRegistry()
    connection = kopf.ConnectionInfo(server="https://x", token=token) if token else None
    register_job_admission(registry, connection=connection, fails_closed=fails_closed)
    return {handler.id: handler for handler in registry._webhooks.get_all_handlers()}


def _job(**spec: Any) -> kopf.Body:
    return kopf.Body({"metadata": {"name": "hello", "namespace": "default"}, "spec": spec})


@pytest.mark.parametrize("fails_closed", [False, True])
def test_declared_for_executionjobs_with_their_operations(fails_closed: bool) -> None:
    handlers = _handlers(fails_closed)
    # What kopf writes into the webhook configurations it manages (the chart copies it).
    jobs = Resource(GROUP, VERSION, EXECUTION_JOBS, kind="ExecutionJob", namespaced=True)
    webhooks = build_webhooks(
        handlers.values(), resources=[jobs], name_suffix="k.kondor.io", client_config=SERVICE
    )

    assert {handler.id: str(handler.reason) for handler in handlers.values()} == {
        MUTATE_JOB_ID: "mutating",
        VALIDATE_JOB_ID: "validating",
    }
    rules = {hook["name"]: hook["rules"] for hook in webhooks}
    assert rules == {
        f"{MUTATE_JOB_ID}.k.kondor.io": [
            {
                "apiGroups": ["kondor.io"],
                "apiVersions": ["v1alpha1"],
                "resources": ["executionjobs"],  # not executionjobs/status: status writes pass
                "operations": ["CREATE"],
                "scope": "*",
            }
        ],
        f"{VALIDATE_JOB_ID}.k.kondor.io": [
            {
                "apiGroups": ["kondor.io"],
                "apiVersions": ["v1alpha1"],
                "resources": ["executionjobs"],
                # CREATE is the mutating webhook's (one call per submission); DELETE: the
                # owner only.
                "operations": ["UPDATE", "DELETE"],
                "scope": "*",
            }
        ],
    }
    policy = "Fail" if fails_closed else "Ignore"
    assert {hook["failurePolicy"] for hook in webhooks} == {policy}
    assert {hook["clientConfig"]["service"]["path"] for hook in webhooks} == {
        f"/{MUTATE_JOB_ID}",
        f"/{VALIDATE_JOB_ID}",
    }


def _review(
    operation: str, user: kopf.UserInfo, new: Any = None, old: Any = None
) -> dict[str, Any]:
    """The AdmissionReview the API server sends (admission.k8s.io/v1)."""
    request = {"uid": "u-1", "operation": operation, "userInfo": dict(user)}
    if new is not None:
        request["object"] = new
    if old is not None:
        request["oldObject"] = old
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def _answer(id: str, review: dict[str, Any], token: str | None = None) -> dict[str, Any]:
    """The `response` the operator's server gives for `review` on the webhook `id`."""
    reviewers: dict[str, webhook.Reviewer] = {}
    connection = kopf.ConnectionInfo(server="https://x", token=token) if token else None
    register_job_admission(kopf.OperatorRegistry(), reviewers, connection=connection)
    answer = reviewers[id].answer(review)
    assert (answer["apiVersion"], answer["kind"]) == ("admission.k8s.io/v1", "AdmissionReview")
    assert answer["response"]["uid"] == "u-1"
    return dict(answer["response"])


def test_mutation_sets_the_owner_from_userinfo() -> None:
    response = _answer(MUTATE_JOB_ID, _review("CREATE", ALICE, _job(owner="bob", process=PROCESS)))

    assert response["allowed"] is True
    assert response["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(response["patch"])) == [
        {"op": "replace", "path": "/spec/owner", "value": "alice"}
    ]
    # The owner already right: no patch at all (the API server re-encodes nothing).
    same = _answer(MUTATE_JOB_ID, _review("CREATE", ALICE, _job(owner="alice", process=PROCESS)))
    assert same == {"uid": "u-1", "allowed": True}


def test_a_new_job_is_refused_by_the_mutation_with_the_field_and_value() -> None:
    job = _job(owner="alice", process=PROCESS, requirements="Memory >")

    response = _answer(MUTATE_JOB_ID, _review("CREATE", ALICE, job))

    assert response["allowed"] is False
    assert "patch" not in response
    assert response["status"]["code"] == 422
    assert (
        "spec.requirements: 'Memory >' is not a valid ClassAd expression"
        in (response["status"]["message"])
    )


def test_an_update_is_refused_with_the_field_and_value() -> None:
    old = _job(owner="alice", process=PROCESS)
    new = _job(owner="alice", process=PROCESS, requestCpus=4)

    response = _answer(VALIDATE_JOB_ID, _review("UPDATE", ALICE, new, old))

    assert response["allowed"] is False
    assert response["status"]["code"] in (403, 422)
    assert "spec.requestCpus may not change after submission" in response["status"]["message"]


def test_only_the_owner_deletes_and_the_operator_acts_for_others() -> None:
    job = _job(owner="alice", process=PROCESS)
    operator_token = _token({"sub": OPERATOR_SA})

    refused = _answer(VALIDATE_JOB_ID, _review("DELETE", BOB, old=job), operator_token)
    assert refused["allowed"] is False
    assert refused["status"] == {
        "code": 403,
        "message": "bob may not delete alice's job default/hello: only its owner or a "
        "cluster admin may",
    }
    assert _answer(VALIDATE_JOB_ID, _review("DELETE", ALICE, old=job))["allowed"] is True
    operator = kopf.UserInfo(username=OPERATOR_SA, uid="", groups=["system:serviceaccounts"])
    labelled = _job(owner="alice", process=PROCESS)
    labelled["metadata"]["labels"] = {"a": "b"}
    review = _review("UPDATE", operator, labelled, job)
    assert _answer(VALIDATE_JOB_ID, review, operator_token)["allowed"] is True
    assert _answer(VALIDATE_JOB_ID, _review("UPDATE", BOB, labelled, job))["allowed"] is False


@pytest.mark.parametrize(
    ("operation", "user", "new", "old"),
    [
        ("CREATE", ALICE, _job(owner="bob", process=PROCESS), None),
        ("CREATE", ALICE, _job(process=PROCESS, requestCpus="lots"), None),
        ("UPDATE", BOB, _job(owner="alice", process=PROCESS, hold=True), _job(owner="alice")),
        ("DELETE", ALICE, None, _job(owner="alice", process=PROCESS)),
    ],
)
def test_kopfs_handlers_decide_as_the_server_answers(
    operation: str, user: kopf.UserInfo, new: Any, old: Any
) -> None:
    """The webhooks stay declared to kopf with handlers that decide the same, for a kopf
    server or tunnel that calls them."""
    id = MUTATE_JOB_ID if operation == "CREATE" else VALIDATE_JOB_ID
    response = _answer(id, _review(operation, user, new, old))
    body = kopf.Body(new if new is not None else old)
    patch = kopf.Patch(body=body)
    new_body = kopf.Body(new) if new is not None else None
    old_body = kopf.Body(old) if old is not None else None

    handler = _handlers()[id].fn
    try:
        handler(userinfo=user, patch=patch, operation=operation, new=new_body, old=old_body)
    except kopf.AdmissionError as refused:
        assert response["allowed"] is False
        assert response["status"] == {"code": refused.code, "message": str(refused)}
    else:
        assert response["allowed"] is True
        expected = json.loads(base64.b64decode(response["patch"])) if "patch" in response else []
        assert patch.as_json_patch() == expected


@pytest.mark.parametrize(
    ("body", "merge", "expected"),
    [
        (
            {"spec": {"owner": "bob"}},
            {"spec": {"owner": "alice"}},
            [{"op": "replace", "path": "/spec/owner", "value": "alice"}],
        ),
        (
            {"spec": {}},
            {"spec": {"owner": "alice"}},
            [{"op": "add", "path": "/spec/owner", "value": "alice"}],
        ),
        (
            {},
            {"spec": {"owner": "alice"}},
            [{"op": "add", "path": "/spec", "value": {"owner": "alice"}}],
        ),
        # A label key holds "/" (and may hold "~"): RFC 6901 escapes them.
        (
            {"metadata": {"labels": {"a": "b"}}},
            {"metadata": {"labels": {"kondor.io/execution-point": "n1", "x~y": "z"}}},
            [
                {"op": "add", "path": "/metadata/labels/kondor.io~1execution-point", "value": "n1"},
                {"op": "add", "path": "/metadata/labels/x~0y", "value": "z"},
            ],
        ),
        (
            {"metadata": {"labels": None}},
            {"metadata": {"labels": {"a": "b"}}},
            [{"op": "replace", "path": "/metadata/labels", "value": {"a": "b"}}],
        ),
        (
            {"spec": {"owner": "bob"}},
            {"spec": {"owner": None, "gone": None}},
            [{"op": "remove", "path": "/spec/owner"}],
        ),
        ({"spec": {"owner": "bob"}}, {}, []),
    ],
)
def test_a_merge_patch_becomes_the_json_patch_the_api_server_applies(
    body: dict[str, Any], merge: dict[str, Any], expected: list[Any]
) -> None:
    assert webhook.json_patch(body, merge) == expected


def test_a_review_without_a_request_or_user_is_a_bad_request() -> None:
    reviewers: dict[str, webhook.Reviewer] = {}
    register_job_admission(kopf.OperatorRegistry(), reviewers)
    for review in ({}, [1], {"request": "x"}, {"request": {"operation": "CREATE"}}):
        with pytest.raises(webhook.ReviewError, match="no request or no userInfo"):
            reviewers[MUTATE_JOB_ID].answer(review)


@pytest.mark.parametrize(
    ("token", "subject"),
    [
        (_token({"sub": OPERATOR_SA, "iss": "kubernetes"}), OPERATOR_SA),
        (_token({"iss": "kubernetes"}), None),
        (_token({"sub": ""}), None),
        ("not-a-jwt", None),
        ("a.!!!.c", None),
        ("a.bm90IGpzb24.c", None),  # "not json"
    ],
)
def test_the_operators_user_from_its_token(token: str, subject: str | None) -> None:
    assert token_subject(token) == subject


def test_the_operators_user_from_its_certificate(tmp_path: Path) -> None:
    cert, _key = self_signed("kondor-operator", tmp_path)
    connection = kopf.ConnectionInfo(server="https://x", certificate_path=str(cert))
    assert operator_user(connection) == "kondor-operator"
    assert operator_user(None) is None
    assert operator_user(kopf.ConnectionInfo(server="https://x")) is None
    missing = kopf.ConnectionInfo(server="https://x", certificate_path=str(tmp_path / "none"))
    assert webhook.operator_user(missing) is None


# --- Pod Security: what the cluster's SlotPolicies allow a new pod job ----------------------

PRIVILEGED_POD = {
    "template": {
        "spec": {
            "containers": [
                {"name": "main", "image": "busybox", "securityContext": {"privileged": True}}
            ]
        }
    }
}


def _policy(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p"}, "spec": spec}


def test_a_pod_job_may_ask_for_what_some_slot_policy_allows() -> None:
    now = [0.0]
    listed: list[list[dict[str, Any]]] = [[_policy(podSecurity="baseline")]]
    calls: list[int] = []

    def policies() -> list[dict[str, Any]]:
        calls.append(1)
        return listed[-1]

    ceiling = webhook.PodSecurityCeiling(policies, ttl=5.0, clock=lambda: now[0])
    reviewers: dict[str, webhook.Reviewer] = {}
    register_job_admission(kopf.OperatorRegistry(), reviewers, pod_security=ceiling)
    review = _review("CREATE", ALICE, _job(pod=PRIVILEGED_POD))
    refused = reviewers[MUTATE_JOB_ID].answer(review)["response"]
    assert refused["allowed"] is False and refused["status"]["code"] == 422
    message = refused["status"]["message"]
    assert (
        "spec.pod.template.spec.containers[0].securityContext.privileged: true is not allowed "
        "by Pod Security 'baseline'"
    ) in message
    # An admin allows it on some nodes: admitted once the ceiling is read again.
    listed.append(
        [_policy(podSecurity="baseline"), _policy(condorConfig="KONDOR_POD_SECURITY = privileged")]
    )
    assert reviewers[MUTATE_JOB_ID].answer(review)["response"]["allowed"] is False  # cached
    now[0] = 6.0
    assert reviewers[MUTATE_JOB_ID].answer(review)["response"]["allowed"] is True
    # Process jobs never list the SlotPolicies.
    before = len(calls)
    now[0] = 60.0
    process = reviewers[MUTATE_JOB_ID].answer(_review("CREATE", ALICE, _job(process=PROCESS)))
    assert process["response"]["allowed"] is True and len(calls) == before


def test_a_failed_listing_keeps_the_last_level_and_restricted_before_any() -> None:
    now = [0.0]
    answers: list[Any] = [RuntimeError("connection refused")]

    def policies() -> list[dict[str, Any]]:
        answer = answers[-1]
        if isinstance(answer, Exception):
            raise answer
        return list(answer)

    ceiling = webhook.PodSecurityCeiling(policies, ttl=1.0, clock=lambda: now[0])
    assert ceiling() == "restricted"
    answers.append([_policy(podSecurity="privileged")])
    assert ceiling() == "privileged"
    answers.append(RuntimeError("gone"))
    now[0] = 5.0
    assert ceiling() == "privileged"
    answers.append([])
    assert ceiling() == "restricted"  # no SlotPolicy at all: restricted
