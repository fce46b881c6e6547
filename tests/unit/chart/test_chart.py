"""The Helm chart as `helm lint --strict` and `helm template --include-crds` see it."""

from __future__ import annotations

import base64
import datetime
from pathlib import Path
from typing import Any

import kopf
import pytest
from chart_support import (
    CHART,
    NAMESPACE,
    containers,
    find,
    render,
    run_helm,
    substitute,
)
from cryptography import x509
from kopf._cogs.structs.references import Resource
from kopf._core.engines.admission import build_webhooks

from kondor_agent.main import build_parser
from kondor_operator.handlers import VALIDATE_ID
from kondor_operator.main import parse_options
from kondor_operator.webhook import (
    MUTATE_JOB_ID,
    VALIDATE_JOB_ID,
    hook_checks,
    register_job_admission,
)

# Fetching helm the first time downloads ~35 MB.
pytestmark = pytest.mark.timeout(300)

OPERATOR = "t-kondor-operator"
AGENT = "t-kondor-agent"
RBAC = "rbac.authorization.k8s.io/v1"


@pytest.fixture(scope="module")
def objects(helm: Path) -> list[dict[str, Any]]:
    return render(helm)


def test_lint_strict_passes(helm: Path) -> None:
    result = run_helm(helm, "lint", "--strict", str(CHART))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 chart(s) failed" in result.stdout


def test_renders_every_part(objects: list[dict[str, Any]]) -> None:
    kinds = {(o["kind"], o["metadata"]["name"]) for o in objects}
    for expected in [
        ("Deployment", OPERATOR),
        ("DaemonSet", AGENT),
        ("ServiceAccount", OPERATOR),
        ("ServiceAccount", AGENT),
        ("ClusterRole", OPERATOR),
        ("ClusterRoleBinding", OPERATOR),
        ("ClusterRole", AGENT),
        ("ClusterRoleBinding", AGENT),
        ("Role", OPERATOR),
        ("RoleBinding", OPERATOR),
        ("ValidatingWebhookConfiguration", "t-kondor.kondor.io"),
        ("MutatingWebhookConfiguration", "t-kondor.kondor.io"),
        ("Service", "t-kondor-webhook"),
        ("Secret", "t-kondor-webhook-tls"),
        ("PriorityClass", "kondor-harvest"),
    ]:
        assert expected in kinds
    crds = {o["metadata"]["name"] for o in objects if o["kind"] == "CustomResourceDefinition"}
    shipped = {
        p.name.removeprefix("kondor.io_").removesuffix(".yaml") for p in CHART.glob("crds/*")
    }
    assert crds == {f"{plural}.kondor.io" for plural in shipped}
    assert {"executionpoints.kondor.io", "slotpolicies.kondor.io"} <= crds


def test_namespaced_objects_land_in_the_release_namespace(objects: list[dict[str, Any]]) -> None:
    cluster_scoped = {
        "ClusterRole",
        "ClusterRoleBinding",
        "CustomResourceDefinition",
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "PriorityClass",
    }
    for o in objects:
        if o["kind"] in cluster_scoped:
            assert "namespace" not in o["metadata"], o["metadata"]
        elif o["metadata"]["name"] in (f"{OPERATOR}-events", f"{AGENT}-events"):
            # Events about Nodes and ExecutionPoints (cluster-scoped) live in default.
            assert o["metadata"]["namespace"] == "default", o["metadata"]
        else:
            assert o["metadata"]["namespace"] == NAMESPACE, o["metadata"]


def test_operator_pod_runs_as_non_root(objects: list[dict[str, Any]]) -> None:
    deployment = find(objects, "Deployment", OPERATOR)
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] > 0
    [container] = containers(deployment)
    context = container["securityContext"]
    assert context.get("runAsUser", pod["securityContext"]["runAsUser"]) != 0
    assert context["allowPrivilegeEscalation"] is False
    assert context["readOnlyRootFilesystem"] is True
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert not context.get("privileged")


def _operator_args(objects: list[dict[str, Any]]) -> list[str]:
    [container] = containers(find(objects, "Deployment", OPERATOR))
    assert container["command"] == ["kondor-operator"]
    return substitute(container["args"], {"POD_NAMESPACE": NAMESPACE, "POD_NAME": "op-0"})


def test_operator_flags_parse_and_mean_what_the_chart_says(objects: list[dict[str, Any]]) -> None:
    options = parse_options(_operator_args(objects))
    assert options.namespace == NAMESPACE
    assert options.leader_election and options.lease == "kondor-operator"
    assert options.identity == "op-0"
    assert options.webhook is not None
    assert options.webhook.addr == "0.0.0.0"
    assert options.webhook.cert == Path("/etc/kondor/webhook/tls.crt")
    assert options.webhook_configuration == ""  # the chart ships the configuration
    assert options.webhook_failure_policy == "Ignore"
    assert options.metrics_port == 8080
    deployment = find(objects, "Deployment", OPERATOR)
    [container] = containers(deployment)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": 8080, "webhook": options.webhook.port}
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["webhook-tls"]["mountPath"] == str(options.webhook.cert.parent)
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["webhook-tls"]["secret"]["secretName"] == "t-kondor-webhook-tls"


def test_operator_checks_hook_paths_in_the_agents_hooks_directory(
    objects: list[dict[str, Any]], helm: Path
) -> None:
    """SlotPolicy admission resolves hook symlinks in the agents' hooks directory
    (KONDOR_HOOKS_DIR, `kondor_operator.webhook.hook_checks`): mounted read-only from the
    host path the agents mount, where the env var says."""
    deployment = find(objects, "Deployment", OPERATOR)
    [container] = containers(deployment)
    env = {e["name"]: e.get("value") for e in container["env"]}
    checks = hook_checks(env)
    assert checks["hooks_dir"] == "/etc/kondor/hooks"
    mount = next(m for m in container["volumeMounts"] if m["name"] == "hooks")
    assert mount == {"name": "hooks", "mountPath": checks["hooks_dir"], "readOnly": True}
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    agent = find(objects, "DaemonSet", AGENT)["spec"]["template"]["spec"]
    agent_volumes = {v["name"]: v for v in agent["volumes"]}
    assert volumes["hooks"]["hostPath"]["path"] == agent_volumes["hooks"]["hostPath"]["path"]
    # A host directory of the admin's choosing, for both; off: no mount, lexical checks only.
    moved = render(helm, "--set", "agent.hostPaths.hooksDir=/srv/hooks", crds=False)
    # ... at the same path in both, where the agent reads it (its default --hooks-dir, as
    # the agent's own test below shows), so symlinks resolve alike in the two containers.
    agent_container = next(c for c in agent["containers"] if c["name"] == "agent")
    agent_mount = next(m for m in agent_container["volumeMounts"] if m["name"] == "hooks")
    assert agent_mount["mountPath"] == checks["hooks_dir"]
    env_vars = {e["name"]: "node-1" for e in agent_container["env"]}
    parsed = build_parser().parse_args(substitute(agent_container["args"], env_vars))
    assert str(parsed.hooks_dir) == checks["hooks_dir"]
    pod = find(moved, "Deployment", OPERATOR)["spec"]["template"]["spec"]
    assert {v["name"]: v for v in pod["volumes"]}["hooks"]["hostPath"]["path"] == "/srv/hooks"
    off = render(helm, "--set", "operator.mountHooksDir=false", crds=False)
    deployment = find(off, "Deployment", OPERATOR)
    [container] = containers(deployment)
    assert hook_checks({e["name"]: e.get("value", "") for e in container["env"]}) == {}
    assert "hooks" not in {m["name"] for m in container["volumeMounts"]}
    assert "hooks" not in {v["name"] for v in deployment["spec"]["template"]["spec"]["volumes"]}


def test_leader_election_and_webhook_can_be_turned_off(helm: Path) -> None:
    objects = render(
        helm, "--set", "operator.leaderElection.enabled=false", "--set", "webhook.enabled=false"
    )
    options = parse_options(_operator_args(objects))
    assert not options.leader_election
    assert options.webhook is None
    assert not [o for o in objects if o["kind"].endswith("WebhookConfiguration")]


def _webhooks(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every webhook of the chart's configurations by handler id (kopf's `<id>.<suffix>`)."""
    return {
        webhook["name"].removesuffix(".kondor.io"): webhook
        for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
        for webhook in find(objects, kind)["webhooks"]
    }


def test_webhook_configuration_points_at_the_operator(objects: list[dict[str, Any]]) -> None:
    webhook = _webhooks(objects)[VALIDATE_ID]
    assert webhook["clientConfig"]["service"] == {
        "name": "t-kondor-webhook",
        "namespace": NAMESPACE,
        "port": 443,
        "path": f"/{VALIDATE_ID}",  # kopf serves each handler at /<handler id>
    }
    [rule] = webhook["rules"]
    assert rule["resources"] == ["slotpolicies"]
    assert rule["apiGroups"] == ["kondor.io"]
    assert sorted(rule["operations"]) == ["CREATE", "UPDATE"]
    assert webhook["failurePolicy"] == "Ignore"
    assert webhook["sideEffects"] == "None"
    service = find(objects, "Service", "t-kondor-webhook")
    assert service["spec"]["ports"][0]["targetPort"] == "webhook"
    pod_labels = find(objects, "Deployment", OPERATOR)["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()


def test_job_webhooks_are_those_kopf_would_register(objects: list[dict[str, Any]]) -> None:
    """The chart's ExecutionJob webhooks against the configuration kopf builds for the
    operator's handlers: same paths, rules and operations (DELETE included: only a job's
    owner or a cluster admin may delete it)."""
    registry = kopf.OperatorRegistry()
    register_job_admission(registry)
    jobs = Resource("kondor.io", "v1alpha1", "executionjobs", kind="ExecutionJob", namespaced=True)
    service = kopf.WebhookClientConfigService(
        namespace=NAMESPACE, name="t-kondor-webhook", port=443, path=""
    )
    kopfs = {
        hook["name"].removesuffix(".kondor.io"): hook
        for hook in build_webhooks(
            registry._webhooks.get_all_handlers(),
            resources=[jobs],
            name_suffix="kondor.io",
            client_config=kopf.WebhookClientConfig(service=service),
        )
    }
    chart = _webhooks(objects)
    assert set(kopfs) == {MUTATE_JOB_ID, VALIDATE_JOB_ID}
    for handler_id, expected in kopfs.items():
        webhook = chart[handler_id]
        assert webhook["clientConfig"]["service"] == expected["clientConfig"]["service"]
        [rule] = webhook["rules"]
        [kopf_rule] = expected["rules"]
        assert rule["scope"] == "Namespaced"
        assert {k: v for k, v in rule.items() if k != "scope"} == {
            k: v for k, v in kopf_rule.items() if k != "scope"
        }
        # The owner-setting webhook fails closed; the others follow the values (Ignore).
        expected_policy = "Fail" if handler_id == MUTATE_JOB_ID else "Ignore"
        assert webhook["failurePolicy"] == expected_policy
        assert webhook["sideEffects"] == "None"
    mutating = find(objects, "MutatingWebhookConfiguration")["webhooks"]
    assert [hook["name"] for hook in mutating] == [
        f"{MUTATE_JOB_ID}.kondor.io",
        "mutate-codclaim.kondor.io",  # tests/unit/chart/test_cod_chart.py checks it
    ]


def test_webhook_failure_policy_applies_to_every_webhook(helm: Path) -> None:
    objects = render(helm, "--set", "webhook.failurePolicy=Fail", crds=False)
    assert {hook["failurePolicy"] for hook in _webhooks(objects).values()} == {"Fail"}
    options = parse_options(_operator_args(objects))
    assert options.webhook_failure_policy == "Fail"


def test_generated_certificate_is_signed_by_the_ca_bundle(objects: list[dict[str, Any]]) -> None:
    webhooks = _webhooks(objects).values()
    [bundle] = {webhook["clientConfig"]["caBundle"] for webhook in webhooks}
    ca = x509.load_pem_x509_certificate(base64.b64decode(bundle))
    secret = find(objects, "Secret", "t-kondor-webhook-tls")
    assert secret["type"] == "kubernetes.io/tls"
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    assert base64.b64decode(secret["data"]["tls.key"]).startswith(b"-----BEGIN")
    cert.verify_directly_issued_by(ca)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert f"t-kondor-webhook.{NAMESPACE}.svc" in names.get_values_for_type(x509.DNSName)
    assert cert.not_valid_after_utc > datetime.datetime.now(datetime.UTC) + datetime.timedelta(
        days=365
    )


def test_cert_manager_issues_and_injects_the_certificate(helm: Path) -> None:
    objects = render(helm, "--set", "webhook.certManager.enabled=true")
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        configuration = find(objects, kind)
        assert configuration["metadata"]["annotations"] == {
            "cert-manager.io/inject-ca-from": f"{NAMESPACE}/t-kondor-webhook"
        }
        for webhook in configuration["webhooks"]:
            assert "caBundle" not in webhook["clientConfig"]
    certificate = find(objects, "Certificate", "t-kondor-webhook")
    assert certificate["spec"]["secretName"] == "t-kondor-webhook-tls"
    assert certificate["spec"]["issuerRef"]["name"] == find(objects, "Issuer")["metadata"]["name"]
    assert not [o for o in objects if o["kind"] == "Secret"]


def test_an_own_secret_needs_its_ca_bundle(helm: Path) -> None:
    result = run_helm(helm, "template", "t", str(CHART), "--set", "webhook.tls.secretName=mine")
    assert result.returncode != 0
    assert "webhook.tls.caBundle is required" in result.stderr
    bundle = base64.b64encode(b"-----BEGIN CERTIFICATE-----").decode()
    objects = render(
        helm, "--set", "webhook.tls.secretName=mine", "--set", f"webhook.tls.caBundle={bundle}"
    )
    for webhook in _webhooks(objects).values():
        assert webhook["clientConfig"]["caBundle"] == bundle
    assert not [o for o in objects if o["kind"] == "Secret"]
    volumes = find(objects, "Deployment")["spec"]["template"]["spec"]["volumes"]
    assert {"name": "webhook-tls", "secret": {"secretName": "mine"}} in volumes


# --- the agent -------------------------------------------------------------------------------


def test_agent_reads_the_host_read_only(objects: list[dict[str, Any]]) -> None:
    daemonset = find(objects, "DaemonSet", AGENT)
    pod = daemonset["spec"]["template"]["spec"]
    host = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    agent = next(c for c in containers(daemonset) if c["name"] == "agent")
    mounts = {m["mountPath"]: m for m in agent["volumeMounts"]}
    for path in ("/proc", "/sys", "/sys/fs/cgroup", "/etc", "/dev"):
        mount = mounts[f"/host{path}"]
        assert host[mount["name"]] == path
        assert mount["readOnly"] is True
    assert host[mounts["/etc/kondor/hooks"]["name"]] == "/etc/kondor/hooks"
    assert mounts["/etc/kondor/hooks"]["readOnly"] is True
    writable = {path for path, m in mounts.items() if m["name"] in host and not m.get("readOnly")}
    assert writable == {"/var/lib/kondor/state", "/var/lib/kondor/execute"}
    assert not pod.get("hostPID") and not pod.get("hostNetwork")


def test_agent_runs_unprivileged(objects: list[dict[str, Any]]) -> None:
    daemonset = find(objects, "DaemonSet", AGENT)
    for container in containers(daemonset):
        context = container["securityContext"]
        assert not context.get("privileged")
        assert context["allowPrivilegeEscalation"] is False
        assert context["readOnlyRootFilesystem"] is True
        assert context["capabilities"]["drop"] == ["ALL"]
        if container["name"] == "agent":
            assert context["runAsNonRoot"] is True and context["runAsUser"] > 0
            assert "add" not in context["capabilities"]
        else:  # the init container that hands the host directories to the agent's user
            assert context["capabilities"]["add"] == ["CHOWN"]
            assert container["command"][:2] == ["chown", "65532:65532"]


def test_agent_flags_parse_and_name_the_node(objects: list[dict[str, Any]]) -> None:
    daemonset = find(objects, "DaemonSet", AGENT)
    agent = next(c for c in containers(daemonset) if c["name"] == "agent")
    assert agent["command"] == ["kondor-agent"]
    env = {e["name"]: e for e in agent["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    args = build_parser().parse_args(substitute(agent["args"], {"NODE_NAME": "node-1"}))
    assert args.node_name == "node-1"
    assert args.host_root == Path("/host")
    assert args.state_dir == Path("/var/lib/kondor/state")
    assert args.execute_dir == Path("/var/lib/kondor/execute")
    assert args.metrics_port == 9102
    hooks = next(m for m in agent["volumeMounts"] if m["name"] == "hooks")["mountPath"]
    # The chart mounts the hooks where the agent looks for them by default.
    assert getattr(args, "hooks_dir", Path("/etc/kondor/hooks")) == Path(hooks)


def test_agent_scheduling_comes_from_values(helm: Path) -> None:
    objects = render(
        helm,
        "--set",
        "agent.nodeSelector.kondor\\.io/pool=gpu",
        "--set",
        "agent.tolerations[0].key=nvidia.com/gpu",
        "--set",
        "agent.tolerations[0].operator=Exists",
        "--set",
        "agent.tolerations[0].effect=NoSchedule",
    )
    pod = find(objects, "DaemonSet")["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux", "kondor.io/pool": "gpu"}
    assert pod["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]


def test_utmp_is_mounted_only_when_asked(helm: Path) -> None:
    objects = render(helm, "--set", "agent.hostPaths.utmp=/var/run/utmp", crds=False)
    pod = find(objects, "DaemonSet")["spec"]["template"]["spec"]
    assert {"name": "host-utmp", "hostPath": {"path": "/var/run/utmp", "type": "File"}} in pod[
        "volumes"
    ]


# --- RBAC ------------------------------------------------------------------------------------


def _rules(objects: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{o['kind']}/{o['metadata']['name']}", rule)
        for o in objects
        if o["kind"] in ("Role", "ClusterRole")
        for rule in o.get("rules", [])
    ]


def test_no_rule_grants_wildcards(helm: Path) -> None:
    objects = render(helm, "--set", "serviceMonitor.enabled=true")
    rules = _rules(objects)
    assert rules
    for where, rule in rules:
        for field in ("verbs", "resources", "apiGroups", "resourceNames"):
            assert "*" not in rule.get(field, []), f"{where}: {field} has '*': {rule}"
        assert "nonResourceURLs" not in rule, where


def _allowed(objects: list[dict[str, Any]], account: str) -> set[tuple[str, str, str, str]]:
    """(namespace or '*', group, resource, verb) that the account's roles grant."""
    roles = {
        (o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o
        for o in objects
        if o["kind"] in ("Role", "ClusterRole")
    }
    allowed = set()
    for binding in objects:
        if binding["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if not any(s["name"] == account for s in binding["subjects"]):
            continue
        namespace = binding["metadata"].get("namespace")
        ref = binding["roleRef"]
        role = roles[(ref["kind"], namespace if ref["kind"] == "Role" else None, ref["name"])]
        for rule in role["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        allowed.add((namespace or "*", group, resource, verb))
    return allowed


@pytest.mark.parametrize(
    ("permission", "granted"),
    [
        (("*", "", "nodes", "watch"), True),
        (("*", "kondor.io", "executionpoints", "create"), True),
        (("*", "kondor.io", "executionpoints", "delete"), True),
        (("*", "kondor.io", "executionpoints/status", "patch"), True),
        (("*", "kondor.io", "slotpolicies/status", "patch"), True),
        (("*", "kondor.io", "slotpolicies", "patch"), False),  # the admin's spec
        (("*", "kondor.io", "executionjobs", "watch"), True),
        (("*", "kondor.io", "executionjobs", "patch"), False),  # status only: no label
        (("*", "kondor.io", "executionjobs/status", "patch"), True),
        (("*", "kondor.io", "executionjobs", "create"), False),  # the user's
        (("*", "kondor.io", "executionjobs", "update"), False),
        (("*", "kondor.io", "executionjobs", "delete"), False),
        (("*", "apiextensions.k8s.io", "customresourcedefinitions", "list"), True),
        ((NAMESPACE, "coordination.k8s.io", "leases", "patch"), True),
        (("*", "coordination.k8s.io", "leases", "patch"), False),
        (("default", "", "events", "create"), True),
        (("*", "", "secrets", "get"), False),
        (("*", "", "pods", "create"), False),
        (("*", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "patch"), False),
    ],
)
def test_operator_permissions(
    objects: list[dict[str, Any]], permission: tuple[str, str, str, str], granted: bool
) -> None:
    assert (permission in _allowed(objects, OPERATOR)) is granted


@pytest.mark.parametrize(
    ("permission", "granted"),
    [
        (("*", "", "nodes", "get"), True),
        (("*", "", "nodes", "list"), False),
        (("*", "kondor.io", "executionpoints", "watch"), True),
        (("*", "kondor.io", "executionpoints/status", "patch"), True),
        (("*", "kondor.io", "executionpoints", "patch"), False),  # the spec is the operator's
        (("*", "kondor.io", "executionpoints", "delete"), False),
        (("*", "kondor.io", "slotpolicies", "get"), True),
        (("*", "kondor.io", "slotpolicies", "watch"), True),  # it follows its policy's edits
        (("*", "kondor.io", "slotpolicies", "patch"), False),
        # A pod job's Pod is owned by its ExecutionJob, so it lives in the job's namespace.
        (("*", "", "pods", "create"), True),
        (("*", "", "pods", "delete"), True),
        (("*", "", "pods", "patch"), False),
        # Its ads travel in the Pod's annotations: no ConfigMap to write.
        (("*", "", "configmaps", "create"), False),
        (("*", "", "configmaps", "delete"), False),
        (("*", "", "configmaps", "get"), False),
        (("*", "kondor.io", "executionjobs", "watch"), True),
        (("*", "kondor.io", "executionjobs/status", "patch"), True),
        # Fetched work (FETCH_WORK) is an ExecutionJob the agent creates, and removes
        # (spec.remove) when EVICT_CLAIM ends its claim.
        (("*", "kondor.io", "executionjobs", "create"), True),
        (("*", "kondor.io", "executionjobs", "patch"), True),
        (("*", "kondor.io", "executionjobs", "delete"), False),
        (("*", "kondor.io", "executionjobs", "update"), False),
        # Its Warning Events about its ExecutionPoint (hook failures) go to `default` only.
        (("default", "", "events", "create"), True),
        (("*", "", "events", "create"), False),
        ((NAMESPACE, "", "events", "create"), False),
        (("*", "", "secrets", "get"), False),
        ((NAMESPACE, "", "secrets", "get"), False),
    ],
)
def test_agent_permissions(
    objects: list[dict[str, Any]], permission: tuple[str, str, str, str], granted: bool
) -> None:
    assert (permission in _allowed(objects, AGENT)) is granted


def _aggregated(objects: list[dict[str, Any]], role: str) -> set[tuple[str, str]]:
    """(resource, verb) of kondor.io that the chart adds to a built-in role (view, edit)."""
    label = f"rbac.authorization.k8s.io/aggregate-to-{role}"
    return {
        (resource, verb)
        for o in objects
        if o["kind"] == "ClusterRole" and o["metadata"].get("labels", {}).get(label) == "true"
        for rule in o["rules"]
        if "kondor.io" in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_users_submit_jobs_through_the_built_in_roles(objects: list[dict[str, Any]]) -> None:
    edit, view = _aggregated(objects, "edit"), _aggregated(objects, "view")
    for verb in ("create", "get", "list", "watch", "update", "patch", "delete"):
        assert ("executionjobs", verb) in edit
    assert {verb for resource, verb in view if resource == "executionjobs"} == {
        "get",
        "list",
        "watch",
    }
    for resource in ("executionpoints", "slotpolicies"):  # condor_status, never changed
        assert {verb for r, verb in edit if r == resource} == {"get", "list", "watch"}
    # Status is the operator's and the agent's: no built-in role writes it.
    assert not {r for r, _verb in edit | view if r.endswith("/status")}


def test_aggregation_can_be_turned_off(helm: Path) -> None:
    objects = render(helm, "--set", "rbac.aggregateToDefaultRoles=false", crds=False)
    assert not _aggregated(objects, "edit")
    assert not _aggregated(objects, "view")


# --- optional parts and values ---------------------------------------------------------------


def test_service_monitor_is_optional(objects: list[dict[str, Any]], helm: Path) -> None:
    assert not [o for o in objects if o["kind"] == "ServiceMonitor"]
    with_monitor = render(helm, "--set", "serviceMonitor.enabled=true", crds=False)
    monitor = find(with_monitor, "ServiceMonitor")
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    selected = [
        o["metadata"]["name"]
        for o in with_monitor
        if o["kind"] == "Service"
        and monitor["spec"]["selector"]["matchLabels"].items() <= o["metadata"]["labels"].items()
    ]
    assert sorted(selected) == [f"{AGENT}-metrics", f"{OPERATOR}-metrics"]


@pytest.mark.parametrize(
    ("setting", "complaint"),
    [
        ("operator.replicas=two", "operator.replicas: Invalid type. Expected: integer"),
        ("webhook.failurePolicy=Sometimes", "webhook.failurePolicy"),
        ("agent.hostPaths.stateDir=relative/dir", "agent.hostPaths.stateDir"),
        ("operator.replicaz=2", "Additional property replicaz is not allowed"),
    ],
)
def test_schema_rejects_bad_values(helm: Path, setting: str, complaint: str) -> None:
    for command in (["template", "t"], ["lint", "--strict"]):
        result = run_helm(helm, *command, str(CHART), "--set-string", setting)
        assert result.returncode != 0, f"helm {command[0]} accepted {setting}"
        assert complaint in result.stdout + result.stderr


def test_notes_say_what_to_run_next() -> None:
    notes = (CHART / "templates" / "NOTES.txt").read_text()
    assert "kubectl get executionpoints" in notes
    assert "kind: SlotPolicy" in notes


def test_execution_makes_the_agent_privileged_with_the_hosts_pids_and_cgroups(
    helm: Path,
) -> None:
    objects = render(
        helm,
        "--set",
        "agent.execution.enabled=true",
        "--set",
        "agent.execution.cgroupRoot=/kondor-jobs",
        crds=False,
    )
    daemonset = next(o for o in objects if o["kind"] == "DaemonSet")
    assert daemonset["spec"]["template"]["spec"]["hostPID"] is True
    agent = next(c for c in containers(daemonset) if c["name"] == "agent")
    assert agent["securityContext"] == {"privileged": True, "runAsUser": 0, "runAsNonRoot": False}
    mounts = {m["mountPath"]: m for m in agent["volumeMounts"]}
    assert mounts["/sys/fs/cgroup"]["name"] == "host-cgroup"
    assert not mounts["/sys/fs/cgroup"].get("readOnly")
    args = build_parser().parse_args(substitute(agent["args"], {"NODE_NAME": "node-1"}))
    assert args.cgroup_root == "/kondor-jobs"
