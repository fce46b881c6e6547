"""The chart's CodClaim parts: its webhooks are those kopf registers for the operator's
handlers, users may work with CodClaims, and the agent may watch them and write their
status."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kopf
import pytest
from chart_support import NAMESPACE, find, render
from kopf._cogs.structs.references import Resource
from kopf._core.engines.admission import build_webhooks

from kondor_operator.webhook import MUTATE_COD_ID, VALIDATE_COD_ID, register_cod_admission

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def objects(helm: Path) -> list[dict[str, Any]]:
    return render(helm)


def test_cod_webhooks_are_those_kopf_would_register(objects: list[dict[str, Any]]) -> None:
    registry = kopf.OperatorRegistry()
    register_cod_admission(registry)
    claims = Resource("kondor.io", "v1alpha1", "codclaims", kind="CodClaim", namespaced=True)
    service = kopf.WebhookClientConfigService(
        namespace=NAMESPACE, name="t-kondor-webhook", port=443, path=""
    )
    kopfs = {
        hook["name"].removesuffix(".kondor.io"): hook
        for hook in build_webhooks(
            registry._webhooks.get_all_handlers(),
            resources=[claims],
            name_suffix="kondor.io",
            client_config=kopf.WebhookClientConfig(service=service),
        )
    }
    chart = {
        webhook["name"].removesuffix(".kondor.io"): webhook
        for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
        for webhook in find(objects, kind)["webhooks"]
    }
    assert set(kopfs) == {MUTATE_COD_ID, VALIDATE_COD_ID}
    for handler_id, expected in kopfs.items():
        webhook = chart[handler_id]
        assert webhook["clientConfig"]["service"] == expected["clientConfig"]["service"]
        [rule] = webhook["rules"]
        [kopf_rule] = expected["rules"]
        assert {k: v for k, v in rule.items() if k != "scope"} == {
            k: v for k, v in kopf_rule.items() if k != "scope"
        }


def _rules(objects: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    roles = [o for o in objects if o["kind"] == "ClusterRole" and o["metadata"]["name"] == name]
    assert roles, name
    rules: list[dict[str, Any]] = roles[0]["rules"]
    return rules


def _verbs(rules: list[dict[str, Any]], resource: str) -> set[str]:
    return {
        verb
        for rule in rules
        if "kondor.io" in rule.get("apiGroups", []) and resource in rule.get("resources", [])
        for verb in rule["verbs"]
    }


def test_users_and_the_agent_may_do_what_cod_needs(objects: list[dict[str, Any]]) -> None:
    assert {"create", "patch", "delete"} <= _verbs(_rules(objects, "t-kondor-edit"), "codclaims")
    assert {"get", "list", "watch"} <= _verbs(_rules(objects, "t-kondor-view"), "codclaims")
    agent = _rules(objects, "t-kondor-agent")
    assert _verbs(agent, "codclaims") == {"get", "list", "watch"}
    assert _verbs(agent, "codclaims/status") == {"patch"}
