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


def test_mutation_sets_the_owner_from_userinfo() -> None:
    mutate = _handlers()[MUTATE_JOB_ID].fn
    body = _job(owner="bob", process=PROCESS)
    patch = kopf.Patch(body=body)

    mutate(body=body, userinfo=ALICE, patch=patch)

    assert patch == {"spec": {"owner": "alice"}}
    assert patch.as_json_patch() == [{"op": "replace", "path": "/spec/owner", "value": "alice"}]


def test_a_new_job_is_refused_by_the_mutation_with_the_field_and_value() -> None:
    mutate = _handlers()[MUTATE_JOB_ID].fn
    job = _job(owner="alice", process=PROCESS, requirements="Memory >")
    patch = kopf.Patch(body=job)

    with pytest.raises(kopf.AdmissionError) as refused:
        mutate(body=job, userinfo=ALICE, patch=patch)

    assert refused.value.code == 422
    assert "spec.requirements: 'Memory >' is not a valid ClassAd expression" in str(refused.value)
    assert patch == {}
    valid = _job(owner="alice", process=PROCESS)
    mutate(body=valid, userinfo=ALICE, patch=kopf.Patch(body=valid))


def test_an_update_is_refused_with_the_field_and_value() -> None:
    validate = _handlers()[VALIDATE_JOB_ID].fn
    old = _job(owner="alice", process=PROCESS)
    new = _job(owner="alice", process=PROCESS, requestCpus=4)
    with pytest.raises(kopf.AdmissionError) as refused:
        validate(userinfo=ALICE, operation="UPDATE", new=new, old=old)
    assert refused.value.code in (403, 422)
    assert "spec.requestCpus may not change after submission" in str(refused.value)


def test_only_the_owner_deletes_and_the_operator_acts_for_others() -> None:
    validate = _handlers(token=_token({"sub": OPERATOR_SA}))[VALIDATE_JOB_ID].fn
    job = _job(owner="alice", process=PROCESS)

    with pytest.raises(kopf.AdmissionError) as refused:
        validate(userinfo=BOB, operation="DELETE", new=None, old=job)
    assert refused.value.code == 403
    assert str(refused.value) == (
        "bob may not delete alice's job default/hello: only its owner or a cluster admin may"
    )
    validate(userinfo=ALICE, operation="DELETE", new=None, old=job)
    operator = kopf.UserInfo(username=OPERATOR_SA, uid="", groups=["system:serviceaccounts"])
    labelled = _job(owner="alice", process=PROCESS)
    labelled["metadata"]["labels"] = {"a": "b"}
    validate(userinfo=operator, operation="UPDATE", new=labelled, old=job)


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
