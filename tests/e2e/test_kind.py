"""Kondor from image to ExecutionPoints on kind: the chart installs, the webhook refuses a bad
SlotPolicy, the demo policies turn the labelled workers into ExecutionPoints with slots."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kind_support import NAMESPACE, ROOT, Kind, eventually

pytestmark = pytest.mark.timeout(1800)

POLICIES = ROOT / "examples" / "demo" / "policies"


def _execution_points(kind: Kind) -> dict[str, dict[str, Any]]:
    listing = json.loads(kind.kubectl("get", "executionpoints", "-o", "json"))
    return {ep["metadata"]["name"]: ep for ep in listing["items"]}


def _nodes_by_pool(kind: Kind) -> dict[str, str]:
    """pool label (or '' for none) -> node name."""
    nodes = json.loads(kind.kubectl("get", "nodes", "-o", "json"))["items"]
    return {n["metadata"]["labels"].get("kondor.io/pool", ""): n["metadata"]["name"] for n in nodes}


def test_the_chart_installs_and_says_what_to_do_next(kind_cluster: Kind, release: str) -> None:
    assert "kubectl get executionpoints" in release
    pods = json.loads(kind_cluster.kubectl("-n", NAMESPACE, "get", "pods", "-o", "json"))["items"]
    components = {p["metadata"]["labels"].get("app.kubernetes.io/component") for p in pods}
    assert components == {"operator", "agent"}
    uid = kind_cluster.kubectl(
        "-n", NAMESPACE, "exec", "deploy/kondor-operator", "--", "python", "-c",
        "import os; print(os.getuid())",
    )  # fmt: skip
    assert uid.strip() != "0"


def test_the_webhook_refuses_an_invalid_policy(kind_cluster: Kind, release: str) -> None:
    bad = json.dumps(
        {
            "apiVersion": "kondor.io/v1alpha1",
            "kind": "SlotPolicy",
            "metadata": {"name": "e2e-bad"},
            "spec": {"start": "Cpus >"},
        }
    )

    def refused() -> str | None:
        out = kind_cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=bad, check=False)
        return out if "denied the request" in out else None

    # The generated certificate, the Service and the path all have to be right for this.
    message = eventually(refused, 120, "the webhook refusing an invalid START")
    assert "start" in message.lower()


def test_demo_policies_make_execution_points(kind_cluster: Kind, release: str) -> None:
    kind_cluster.kubectl("apply", "-f", str(POLICIES))
    nodes = _nodes_by_pool(kind_cluster)
    assert {"cpu", "gpu"} <= nodes.keys(), f"kind-config.yaml labels: {nodes}"

    eventually(
        lambda: set(nodes.values()) <= _execution_points(kind_cluster).keys(),
        180,
        "an ExecutionPoint for every node",
    )
    points = _execution_points(kind_cluster)
    pinned = {name: (ep["spec"].get("policy") or {}).get("name") for name, ep in points.items()}
    assert pinned[nodes["cpu"]] == "batch"
    assert pinned[nodes["gpu"]] == "gpu"
    assert pinned[nodes[""]] == "everyone"  # the control plane: only `everyone` selects it

    # The agent on the cpu worker detects the node and publishes the `batch` layout.
    kind_cluster.kubectl(
        "wait", f"executionpoint/{nodes['cpu']}", "--for=condition=Ready", "--timeout=300s"
    )
    slots = _execution_points(kind_cluster)[nodes["cpu"]]["status"]["slots"]
    types = sorted({slot["type"] for slot in slots})
    assert types == ["Partitionable", "Static"]
    assert sum(1 for slot in slots if slot["type"] == "Static") == 2
    assert all(slot["cpus"] > 0 and slot["memory"] > 0 for slot in slots)
