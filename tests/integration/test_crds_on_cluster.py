"""Kondor's generated CRDs on a real API server: accepted (so structural), examples apply,
unknown fields are refused, what the server returns validates with the models, and
`kubectl get executionpoints` shows the slot columns."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from kondor_core.api import SlotPolicy, validate

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]
POLICIES = sorted((ROOT / "examples" / "policies").glob("*.yaml"))


def _kubectl(
    binary: str, kubeconfig: Path, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [binary, f"--kubeconfig={kubeconfig}", "--context=admin", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_every_example_policy_applies_with_strict_validation_and_reads_back_valid(
    kondor_crds: list[str], kubectl_bin: str, kubeconfig: Path, admin: client.ApiClient
) -> None:
    api = client.CustomObjectsApi(admin)
    for path in POLICIES:
        result = _kubectl(kubectl_bin, kubeconfig, "apply", "--validate=strict", "-f", str(path))
        assert result.returncode == 0, f"{path.name}: {result.stderr}"
        name = yaml.safe_load(path.read_text())["metadata"]["name"]
        stored = api.get_cluster_custom_object("kondor.io", "v1alpha1", "slotpolicies", name)
        # What the API server kept (after pruning and defaulting) is what the model expects.
        assert (
            validate(SlotPolicy, stored, what=path.name).spec
            == validate(SlotPolicy, yaml.safe_load(path.read_text()), what=path.name).spec
        )
        _kubectl(kubectl_bin, kubeconfig, "delete", "-f", str(path))


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"slotTypez": []}, 'unknown field "spec.slotTypez"'),
        ({"priority": "high"}, "spec.priority"),
        ({"slotTypes": [{"count": 1}]}, "spec.slotTypes[0].id: Required value"),
    ],
)
def test_unknown_and_mistyped_fields_are_refused_naming_the_field(
    kondor_crds: list[str],
    kubectl_bin: str,
    kubeconfig: Path,
    spec: dict[str, object],
    expected: str,
) -> None:
    bad = {
        "apiVersion": "kondor.io/v1alpha1",
        "kind": "SlotPolicy",
        "metadata": {"name": "bad"},
        "spec": spec,
    }
    result = _kubectl(
        kubectl_bin, kubeconfig, "apply", "--validate=strict", "-f", "-", stdin=yaml.safe_dump(bad)
    )
    assert result.returncode != 0
    assert expected in result.stderr


def test_get_executionpoints_shows_slot_columns(
    kondor_crds: list[str], kubectl_bin: str, kubeconfig: Path, admin: client.ApiClient
) -> None:
    api = client.CustomObjectsApi(admin)
    body = {
        "apiVersion": "kondor.io/v1alpha1",
        "kind": "ExecutionPoint",
        "metadata": {"name": "columns-node"},
        "spec": {"nodeName": "columns-node"},
    }
    api.create_cluster_custom_object("kondor.io", "v1alpha1", "executionpoints", body)
    try:
        summary = {
            "slots": 3,
            "claimed": 1,
            "unclaimed": 2,
            "owner": 0,
            "cpus": 8,
            "memory": "16Gi",
            "gpus": 2,
            "state": "Claimed",
        }
        api.patch_cluster_custom_object_status(
            "kondor.io",
            "v1alpha1",
            "executionpoints",
            "columns-node",
            {"status": {"summary": summary}},
        )
        result = _kubectl(kubectl_bin, kubeconfig, "get", "executionpoints", "columns-node")
        assert result.returncode == 0, result.stderr
        header, row = result.stdout.splitlines()
        assert header.split()[:9] == [
            "NAME",
            "NODE",
            "SLOTS",
            "CLAIMED",
            "UNCLAIMED",
            "OWNER",
            "CPUS",
            "MEMORY",
            "GPUS",
        ]
        assert row.split()[:9] == [
            "columns-node",
            "columns-node",
            "3",
            "1",
            "2",
            "0",
            "8",
            "16Gi",
            "2",
        ]
    finally:
        api.delete_cluster_custom_object("kondor.io", "v1alpha1", "executionpoints", "columns-node")
