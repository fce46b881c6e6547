"""Every operator replica serves the webhooks, not only the leader: the server the operator
starts before it waits for the Lease (`webhook.serve`) answers every Kondor webhook itself,
SlotPolicy validation included, without kopf running; kopf is handed a `Standby` server, so it
starts none and manages no configuration; the configurations the operator writes make the
owner-setting webhooks fail closed, with the owner policy's matchConditions."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path
from typing import Any, cast

import httpx
import kopf

from kondor_operator import handlers
from kondor_operator.main import kopf_settings, parse_options
from kondor_operator.webhook import (
    MUTATE_COD_ID,
    MUTATE_JOB_ID,
    OWNER_WEBHOOKS,
    VALIDATE_COD_ID,
    VALIDATE_JOB_ID,
    BoundedWebhookServer,
    Reviewer,
    Standby,
    owner_match_conditions,
    self_signed,
    serve,
    webhook_configurations,
)

JOB = {
    "apiVersion": "kondor.io/v1alpha1",
    "kind": "ExecutionJob",
    "metadata": {"name": "hello", "namespace": "default"},
    "spec": {"process": {"executable": "/bin/true"}},
}
BAD_POLICY = {
    "apiVersion": "kondor.io/v1alpha1",
    "kind": "SlotPolicy",
    "metadata": {"name": "bad"},
    "spec": {"nodeSelector": {}, "condorConfig": "START = (((\n"},
}


def _review(uid: str, obj: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "operation": "CREATE",
            "userInfo": {"username": "alice", "groups": ["kondor:users"]},
            "object": obj,
        },
    }


def _registered() -> tuple[kopf.OperatorRegistry, dict[str, Reviewer]]:
    """The operator's registrations, as `run` makes them before waiting for the Lease (the
    reconciler and watches are only used by handlers kopf runs once leading)."""
    registry = kopf.OperatorRegistry()
    reviewers: dict[str, Reviewer] = {}
    handlers.register(
        registry,
        cast(Any, None),
        cast(Any, None),
        cast(Any, None),
        webhook=True,
        reviewers=reviewers,
    )
    return registry, reviewers


def test_every_webhook_is_answered_by_the_server_without_kopf(tmp_path: Path) -> None:
    _, reviewers = _registered()
    assert set(reviewers) == {
        handlers.VALIDATE_ID,
        MUTATE_JOB_ID,
        VALIDATE_JOB_ID,
        MUTATE_COD_ID,
        VALIDATE_COD_ID,
    }
    cert, key = self_signed("127.0.0.1", tmp_path)
    server = BoundedWebhookServer(
        reviewers, addr="127.0.0.1", host="127.0.0.1", certfile=cert, pkeyfile=key
    )
    announced: list[kopf.WebhookClientConfig] = []

    async def exchange() -> list[dict[str, Any]]:
        serving = asyncio.create_task(serve(server, announced.append))
        try:
            while not announced:
                await asyncio.sleep(0.01)
            url = announced[0]["url"]
            answers = []
            async with httpx.AsyncClient(verify=ssl.create_default_context(cafile=cert)) as http:
                for webhook, body in (
                    (handlers.VALIDATE_ID, _review("p", BAD_POLICY)),
                    (MUTATE_JOB_ID, _review("j", JOB)),
                ):
                    sent = await http.post(f"{url}/{webhook}", json=body)
                    assert sent.status_code == 200, sent.text
                    answers.append(sent.json()["response"])
            return answers
        finally:
            serving.cancel()
            await asyncio.gather(serving, return_exceptions=True)

    policy, job = asyncio.run(exchange())
    assert policy["allowed"] is False
    assert policy["status"]["code"] == 422
    assert "condorConfig" in policy["status"]["message"]
    assert job["allowed"] is True and job["patchType"] == "JSONPatch"
    assert announced[0]["caBundle"], "the configuration trusts the server's certificate"


def test_kopf_neither_serves_nor_manages_the_webhooks() -> None:
    settings = kopf_settings(parse_options(["--webhook-configuration=x.kondor.io"]))
    assert isinstance(settings.admission.server, Standby)
    assert settings.admission.managed is None
    assert kopf_settings(parse_options(["--no-webhook"])).admission.server is None


def test_the_configurations_make_owner_setting_fail_closed_beside_the_owner_policy() -> None:
    registry, _ = _registered()
    client_config = kopf.WebhookClientConfig(url="https://127.0.0.1:9443", caBundle="Q0E=")
    operator = "system:serviceaccount:kondor-system:kondor-operator"
    made = webhook_configurations(
        "x.kondor.io", registry, client_config, operator=operator, owner_policy=True
    )
    hooks = {
        hook["name"]: hook for configuration in made.values() for hook in configuration["webhooks"]
    }
    assert set(hooks) == {
        f"{handler}.x.kondor.io"
        for handler in (
            handlers.VALIDATE_ID,
            MUTATE_JOB_ID,
            VALIDATE_JOB_ID,
            MUTATE_COD_ID,
            VALIDATE_COD_ID,
        )
    }
    mutating = {hook["name"] for hook in made["MutatingWebhookConfiguration"]["webhooks"]}
    assert mutating == {f"{handler}.x.kondor.io" for handler in OWNER_WEBHOOKS}
    for name, hook in hooks.items():
        owner_setting = name.removesuffix(".x.kondor.io") in OWNER_WEBHOOKS
        # The others follow --webhook-failure-policy (Ignore by default).
        assert hook["failurePolicy"] == ("Fail" if owner_setting else "Ignore"), name
        assert ("matchConditions" in hook) == owner_setting, name
        assert hook["clientConfig"]["url"].endswith("/" + name.removesuffix(".x.kondor.io"))
    [condition] = hooks[f"{MUTATE_JOB_ID}.x.kondor.io"]["matchConditions"]
    assert f"'{operator}'" in condition["expression"]
    # Without the policy installed, the webhook is called for every object: it sets the owner.
    bare = webhook_configurations("x.kondor.io", registry, client_config, operator=operator)
    for hook in bare["MutatingWebhookConfiguration"]["webhooks"]:
        assert hook["failurePolicy"] == "Fail"
        assert "matchConditions" not in hook


def test_the_match_conditions_name_every_delegate() -> None:
    [condition] = owner_match_conditions("system:serviceaccount:ns:op")
    expression = condition["expression"]
    for name in (
        "'system:kube-controller-manager'",
        "'system:serviceaccount:ns:op'",
        "'system:masters'",
        "'system:serviceaccounts:kube-system'",
    ):
        assert name in expression
    [without] = owner_match_conditions(None)
    assert "system:serviceaccount:" not in without["expression"]
