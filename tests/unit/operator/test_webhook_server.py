"""The operator's webhook server, over real HTTPS: Kondor's own webhooks (ExecutionJob and
CodClaim admission) are answered by the server itself, the others (SlotPolicy validation)
by kopf's admission machinery, and a body that is not an AdmissionReview is a 400."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path
from typing import Any

import httpx
import kopf

from kondor_operator.webhook import (
    MUTATE_JOB_ID,
    BoundedWebhookServer,
    Reviewer,
    register_cod_admission,
    register_job_admission,
    self_signed,
)

JOB = {
    "apiVersion": "kondor.io/v1alpha1",
    "kind": "ExecutionJob",
    "metadata": {"name": "hello", "namespace": "default"},
    "spec": {"process": {"executable": "/bin/true"}},
}


def _review(webhook_uid: str, obj: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": webhook_uid,
            "operation": "CREATE",
            "userInfo": {"username": "alice", "groups": ["kondor:users"]},
            "object": obj,
        },
    }


async def _exchange(tmp_path: Path, posts: list[tuple[str, Any]]) -> tuple[list[Any], list[str]]:
    """Serve, POST each (webhook id, body), and return the answers and the ids kopf served."""
    reviewers: dict[str, Reviewer] = {}
    registry = kopf.OperatorRegistry()
    register_job_admission(registry, reviewers)
    register_cod_admission(registry, reviewers)
    cert, key = self_signed("127.0.0.1", tmp_path)
    server = BoundedWebhookServer(
        reviewers, addr="127.0.0.1", host="127.0.0.1", certfile=cert, pkeyfile=key
    )
    served_by_kopf: list[str] = []

    async def kopf_fn(request: Any, *, webhook: str | None = None, **_: Any) -> Any:
        served_by_kopf.append(webhook or "")
        return {"response": {"uid": request["request"]["uid"], "allowed": True}}

    answers: list[Any] = []
    serving = server(kopf_fn)  # type: ignore[arg-type]
    config = await anext(serving)
    try:
        async with httpx.AsyncClient(verify=ssl.create_default_context(cafile=cert)) as http:
            for webhook_id, body in posts:
                content = body if isinstance(body, bytes) else None
                sent = await http.post(
                    f"{config['url']}/{webhook_id}",
                    content=content,
                    json=None if content is not None else body,
                )
                answers.append((sent.status_code, sent.json() if sent.is_success else None))
    finally:
        await serving.aclose()
    return answers, served_by_kopf


def test_kondors_webhooks_are_answered_by_the_server_and_the_rest_by_kopf(
    tmp_path: Path,
) -> None:
    bad = dict(JOB, spec={"process": {"executable": "/bin/true"}, "requestCpus": "lots"})
    answers, by_kopf = asyncio.run(
        _exchange(
            tmp_path,
            [
                (MUTATE_JOB_ID, _review("a", JOB)),
                (MUTATE_JOB_ID, _review("b", bad)),
                ("validate-slotpolicy", _review("c", {"spec": {}})),
                (MUTATE_JOB_ID, b"not json"),
                (MUTATE_JOB_ID, b"[1, 2]"),
                (MUTATE_JOB_ID, {"request": {"uid": "d"}}),
            ],
        )
    )

    (code, owner_set), (_, refused), (_, slot_policy), *bad_requests = answers
    assert code == 200
    assert owner_set["response"]["allowed"] is True
    assert owner_set["response"]["patchType"] == "JSONPatch"
    assert refused["response"]["allowed"] is False
    assert refused["response"]["status"]["code"] == 422
    assert "spec.requestCpus" in refused["response"]["status"]["message"]
    assert slot_policy["response"] == {"uid": "c", "allowed": True}
    assert by_kopf == ["validate-slotpolicy"]  # the job webhook never reached kopf
    assert [status for status, _ in bad_requests] == [400, 400, 400]
