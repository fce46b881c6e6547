"""The dev cluster's identities: each agent's kubeconfig holds a token of the chart's agent
ServiceAccount bound to its Node, and the chart's objects are applied at their API paths."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kondor_devcluster import chart, kondor, kubeconfig
from kondor_devcluster.cluster import DevClusterError, object_path
from kondor_devcluster.components import Layout


def test_an_agent_token_is_bound_to_its_node() -> None:
    request = kondor.agent_token_request("cpu-0", "uid-0")
    assert request["kind"] == "TokenRequest"
    assert request["spec"]["boundObjectRef"] == {
        "kind": "Node",
        "apiVersion": "v1",
        "name": "cpu-0",
        "uid": "uid-0",
    }
    assert request["spec"]["expirationSeconds"] >= 24 * 3600


def test_each_agent_has_a_kubeconfig_of_its_own(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    paths = {kondor.agent_kubeconfig(layout, node) for node in ("cpu-0", "cpu-1")}
    assert len(paths) == 2
    assert kondor.kondor_kubeconfig(layout) not in paths
    user = kondor.RELEASE.user(kondor.RELEASE.agent)
    assert user == "system:serviceaccount:kondor-system:kondor-agent"
    config = kubeconfig.token_kubeconfig("https://127.0.0.1:1", b"CA", user, "t0k3n")
    path = tmp_path / "agent.kubeconfig"
    kubeconfig.write_kubeconfig(path, config)
    read = yaml.safe_load(path.read_text())
    assert read["users"] == [{"name": user, "user": {"token": "t0k3n"}}]
    assert path.stat().st_mode & 0o077 == 0, "a token is a secret"


def test_chart_objects_are_applied_at_their_paths() -> None:
    objects = chart.agent_rbac(chart.Release()) + chart.admission_policies(chart.Release())
    paths = {object_path(manifest) for manifest in objects}
    assert "/apis/rbac.authorization.k8s.io/v1/clusterroles/kondor-agent" in paths
    assert (
        "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles/kondor-agent-events" in paths
    )
    assert (
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/kondor-owner.kondor.io"
        in paths
    )
    account = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": "a", "namespace": "n"},
    }
    assert object_path(account) == "/api/v1/namespaces/n/serviceaccounts/a"
    with pytest.raises(DevClusterError, match="does not apply Secret"):
        object_path({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}})
