"""The Helm chart installed with a real helm into the dev cluster: the API server accepts every
object, the controllers make the operator's and the agents' pods from them, and the API server's
own authorizer gives each ServiceAccount what the chart means it to have, and no more.

Pods on the dev cluster's kwok nodes are simulated, so the image need not exist."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kondor_devcluster.cluster import DevCluster

from .conftest import ROOT
from .waiting import eventually

pytestmark = pytest.mark.timeout(300)

RELEASE = "kondor-it"
CHART = ROOT / "helm" / "kondor"


def _helm_binary() -> Path:
    spec = importlib.util.spec_from_file_location("fetch_helm", ROOT / "tools" / "fetch_helm.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    try:
        return Path(module.ensure_helm())
    except module.FetchError as error:
        pytest.skip(f"no helm binary: {error} (set KONDOR_HELM to a helm 3 binary)")


class Installed:
    def __init__(self, kubeconfig: Path, kubectl_bin: str, helm_bin: Path, namespace: str) -> None:
        self.kubeconfig = kubeconfig
        self.kubectl_bin = kubectl_bin
        self.helm_bin = helm_bin
        self.namespace = namespace
        self.notes = ""

    def _run(self, args: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)

    def helm(self, *args: str) -> str:
        result = self._run(
            [str(self.helm_bin), f"--kubeconfig={self.kubeconfig}", "--kube-context=admin", *args]
        )
        assert result.returncode == 0, f"helm {' '.join(args)}: {result.stderr}"
        return result.stdout

    def kubectl(self, *args: str, check: bool = True) -> str:
        result = self._run(
            [self.kubectl_bin, f"--kubeconfig={self.kubeconfig}", "--context=admin", *args]
        )
        assert not check or result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
        return result.stdout

    def get(self, *args: str) -> list[dict[str, Any]]:
        items = json.loads(self.kubectl("get", *args, "-o", "json"))["items"]
        assert isinstance(items, list)
        return items

    def can_i(self, account: str, verb: str, resource: str, namespace: str | None) -> bool:
        where = ["--namespace", namespace] if namespace else ["--all-namespaces"]
        # `kubectl auth can-i VERB RESOURCE/NAME`: a subresource needs its own flag.
        resource, _, subresource = resource.partition("/")
        if subresource:
            where.append(f"--subresource={subresource}")
        answer = self.kubectl(
            "auth",
            "can-i",
            verb,
            resource,
            *where,
            f"--as=system:serviceaccount:{self.namespace}:{RELEASE}-{account}",
            check=False,
        )
        return answer.strip() == "yes"


@pytest.fixture(scope="module")
def installed(
    dev_cluster: DevCluster, kubectl_bin: str, kondor_crds: list[str]
) -> Iterator[Installed]:
    """The chart in a namespace of its own; uninstalled after, so that its webhook (which has
    no real server behind it here) stays out of the other tests' way."""
    chart = Installed(dev_cluster.spec.kubeconfig, kubectl_bin, _helm_binary(), "kondor-chart")
    chart.notes = chart.helm(
        "install", RELEASE, str(CHART), "--namespace", chart.namespace, "--create-namespace"
    )
    try:
        yield chart
    finally:
        chart.helm("uninstall", RELEASE, "--namespace", chart.namespace, "--wait")
        chart.kubectl("delete", "namespace", chart.namespace, "--wait=false", check=False)


def test_install_prints_what_to_run_next(installed: Installed) -> None:
    assert "kubectl get executionpoints" in installed.notes
    assert "kind: SlotPolicy" in installed.notes


def test_every_object_is_accepted(installed: Installed) -> None:
    ns = ["--namespace", installed.namespace]
    names = {
        kind: {str(o["metadata"]["name"]) for o in installed.get(kind, *ns)}
        for kind in ("deployments", "daemonsets", "serviceaccounts", "services", "secrets")
    }
    assert f"{RELEASE}-operator" in names["deployments"]
    assert f"{RELEASE}-agent" in names["daemonsets"]
    assert {f"{RELEASE}-operator", f"{RELEASE}-agent"} <= names["serviceaccounts"]
    assert f"{RELEASE}-webhook" in names["services"]
    assert f"{RELEASE}-webhook-tls" in names["secrets"]
    webhooks = installed.get("validatingwebhookconfigurations")
    assert f"{RELEASE}.kondor.io" in {o["metadata"]["name"] for o in webhooks}
    crds = {o["metadata"]["name"] for o in installed.get("crds")}
    assert {"executionpoints.kondor.io", "slotpolicies.kondor.io"} <= crds


def test_controllers_make_the_pods(installed: Installed) -> None:
    """The pod templates pass the API server's validation (security contexts, host paths)."""

    def components() -> set[str]:
        pods = installed.get("pods", "--namespace", installed.namespace)
        return {p["metadata"]["labels"].get("app.kubernetes.io/component") for p in pods}

    eventually(lambda: components() >= {"operator", "agent"}, 60, "operator and agent pods")


@pytest.mark.parametrize(
    ("question", "granted"),
    [
        (("operator", "watch", "nodes", None), True),
        (("operator", "create", "executionpoints.kondor.io", None), True),
        (("operator", "patch", "executionpoints.kondor.io/status", None), True),
        (("operator", "patch", "slotpolicies.kondor.io/status", None), True),
        (("operator", "patch", "slotpolicies.kondor.io", None), False),
        (("operator", "patch", "leases.coordination.k8s.io", "kondor-chart"), True),
        (("operator", "patch", "leases.coordination.k8s.io", "kube-system"), False),
        (("operator", "create", "events", "default"), True),
        (("operator", "get", "secrets", "kondor-chart"), False),
        (("agent", "get", "nodes", None), True),
        (("agent", "list", "nodes", None), False),
        (("agent", "watch", "executionpoints.kondor.io", None), True),
        (("agent", "patch", "executionpoints.kondor.io/status", None), True),
        (("agent", "patch", "executionpoints.kondor.io", None), False),
        (("agent", "delete", "executionpoints.kondor.io", None), False),
        (("agent", "get", "slotpolicies.kondor.io", None), True),
        (("agent", "watch", "slotpolicies.kondor.io", None), True),
        (("agent", "patch", "slotpolicies.kondor.io", None), False),
        (("agent", "create", "pods", "kondor-chart"), True),
        (("agent", "create", "pods", "default"), True),  # a pod job lives in its job's namespace
        (("agent", "get", "secrets", "kondor-chart"), False),
    ],
)
def test_the_api_server_grants_what_the_chart_means(
    installed: Installed, question: tuple[str, str, str, str | None], granted: bool
) -> None:
    """(account, verb, resource[/subresource], namespace or None for all) as `can-i` asks."""
    assert installed.can_i(*question) is granted
