"""The chart's admission policies (templates/admission-policies.yaml) and the identities the
dev cluster takes from the chart: one source, so the dev cluster's rendering of the policies and
of the agent's and operator's RBAC is what `helm template` renders; the owner-setting webhooks
fail closed and are skipped, by the same condition the operator writes, for what the owner
policy refuses."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_support import CHART, NAMESPACE, RELEASE, find, render, run_helm

from kondor_core.jobs import Delegates
from kondor_devcluster import chart
from kondor_operator.webhook import MUTATE_COD_ID, MUTATE_JOB_ID, owner_match_conditions

OPERATOR_USER = f"system:serviceaccount:{NAMESPACE}:{RELEASE}-kondor-operator"
AGENT_USER = f"system:serviceaccount:{NAMESPACE}:{RELEASE}-kondor-agent"


@pytest.fixture(scope="module")
def objects(helm: Path) -> list[dict[str, Any]]:
    return render(helm, crds=False)


def _policy(objects: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return find(objects, "ValidatingAdmissionPolicy", f"{RELEASE}-kondor-{name}.kondor.io")


def test_each_policy_is_bound_to_deny(objects: list[dict[str, Any]]) -> None:
    for name in ("owner", "agent-node"):
        policy = _policy(objects, name)
        assert policy["spec"]["failurePolicy"] == "Fail"
        binding = find(
            objects, "ValidatingAdmissionPolicyBinding", f"{RELEASE}-kondor-{name}.kondor.io"
        )
        assert binding["spec"] == {
            "policyName": policy["metadata"]["name"],
            "validationActions": ["Deny"],
        }


def test_the_owner_policy_covers_jobs_and_claims_and_spares_the_delegates(
    objects: list[dict[str, Any]],
) -> None:
    spec = _policy(objects, "owner")["spec"]
    [rule] = spec["matchConstraints"]["resourceRules"]
    assert rule["resources"] == ["executionjobs", "codclaims"]
    assert rule["operations"] == ["CREATE", "UPDATE"]  # not the status subresource
    [condition] = spec["matchConditions"]
    # Exactly those the webhooks let act for others: kondor_core.jobs.Delegates and the
    # operator's ServiceAccount.
    delegates = Delegates().with_users(OPERATOR_USER)
    for name in (*delegates.users, *delegates.groups):
        assert f"'{name}'" in condition["expression"], name
    [validation] = spec["validations"]
    assert "request.userInfo.username" in validation["expression"]
    assert "'spec.owner: '" in validation["messageExpression"]


def test_the_agent_policy_is_for_the_agent_and_reads_its_node_claim(
    objects: list[dict[str, Any]],
) -> None:
    spec = _policy(objects, "agent-node")["spec"]
    [condition] = spec["matchConditions"]
    assert condition["expression"].split("==")[1].strip() == f"'{AGENT_USER}'"
    resources = {
        resource
        for rule in spec["matchConstraints"]["resourceRules"]
        for resource in rule["resources"]
    }
    assert {"executionpoints", "executionpoints/status", "pods", "codclaims/status"} <= resources
    assert "authentication.kubernetes.io/node-name" in spec["variables"][0]["expression"]
    # Every write the agent's ClusterRole allows is matched by the policy.
    role = find(objects, "ClusterRole", f"{RELEASE}-kondor-agent")
    writes = {"create", "update", "patch", "delete"}
    for rule in role["rules"]:
        if writes & set(rule["verbs"]):
            for resource in rule["resources"]:
                assert resource in resources, f"the agent writes {resource} unchecked"


def test_the_owner_webhooks_fail_closed_and_skip_what_the_policy_refuses(
    objects: list[dict[str, Any]],
) -> None:
    webhooks = {
        hook["name"].removesuffix(".kondor.io"): hook
        for hook in find(objects, "MutatingWebhookConfiguration")["webhooks"]
    }
    for webhook_id in (MUTATE_JOB_ID, MUTATE_COD_ID):
        hook = webhooks[webhook_id]
        assert hook["failurePolicy"] == "Fail"
        # The operator writes the same condition where it manages the configurations.
        assert hook["matchConditions"] == owner_match_conditions(OPERATOR_USER)


def test_policies_off_removes_them_and_the_webhooks_conditions(helm: Path) -> None:
    objects = render(helm, "--set", "admissionPolicies.enabled=false", crds=False)
    kinds = {o["kind"] for o in objects}
    assert not kinds & {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    for hook in find(objects, "MutatingWebhookConfiguration")["webhooks"]:
        # Without the policy a job naming another owner must reach the webhook, which sets it.
        assert "matchConditions" not in hook
        assert hook["failurePolicy"] == "Fail"


def _without_labels(manifest: dict[str, Any]) -> dict[str, Any]:
    metadata = {k: v for k, v in manifest["metadata"].items() if k != "labels"}
    return {**manifest, "metadata": metadata}


@pytest.mark.parametrize(
    ("template", "read"),
    [
        ("admission-policies.yaml", chart.admission_policies),
        ("rbac-agent.yaml", chart.agent_rbac),
        ("rbac-operator.yaml", chart.operator_rbac),
    ],
)
def test_the_dev_cluster_applies_what_helm_renders(
    helm: Path, template: str, read: Callable[[chart.Release], list[dict[str, Any]]]
) -> None:
    """The dev cluster's release (`kondor` in `kondor-system`), read by
    kondor_devcluster.chart, is what helm renders for it (Kondor's labels aside)."""
    release = chart.Release()
    done = run_helm(
        helm,
        "template",
        release.fullname,
        str(CHART),
        "--namespace",
        release.namespace,
        "--show-only",
        f"templates/{template}",
    )
    assert done.returncode == 0, done.stderr

    def key(manifest: dict[str, Any]) -> tuple[str, str]:  # helm sorts by kind
        return manifest["kind"], manifest["metadata"]["name"]

    helms = sorted((_without_labels(o) for o in yaml.safe_load_all(done.stdout) if o), key=key)
    ours = sorted((_without_labels(o) for o in read(release)), key=key)
    assert helms
    assert ours == helms


def test_the_renderer_refuses_what_it_does_not_know(tmp_path: Path) -> None:
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "x.yaml").write_text(
        "kind: ConfigMap\nmetadata:\n  name: {{ .Values.something }}\n"
    )
    with pytest.raises(chart.ChartError, match=r"x.yaml:3: unknown template expression"):
        chart.render_template("x.yaml", chart.Release(), tmp_path)
