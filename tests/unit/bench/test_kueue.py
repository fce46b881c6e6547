"""Kueue for bench-scale (`kondor_devcluster.kueue`): the pinned module, its configuration, its
webhooks pointed at the local process with only the kinds the benchmark uses, and its queues."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from kondor_devcluster import kueue, versions

pytestmark = pytest.mark.timeout(5)

MODULE = Path(__file__).resolve().parents[3] / "devcluster/controlplane/kueue"


def test_the_go_module_pins_the_version_the_cache_is_keyed_by() -> None:
    assert f"sigs.k8s.io/kueue {versions.KUEUE}" in (MODULE / "go.mod").read_text()
    assert 'import _ "sigs.k8s.io/kueue/cmd/kueue"' in (MODULE / "tools.go").read_text()
    assert kueue.kueue_dir(Path("/c")) == Path(f"/c/kueue/{versions.KUEUE}")


def test_kueue_is_not_among_the_control_plane_binaries_make_check_builds() -> None:
    assert "kueue" not in versions.BINARIES


def test_the_configuration_uses_its_own_certificates_and_only_batch_jobs(tmp_path: Path) -> None:
    config = kueue.configuration(9443, tmp_path, 8080, 8081)
    assert config["internalCertManagement"] == {"enable": False}
    assert config["webhook"] == {"port": 9443, "host": "127.0.0.1", "certDir": str(tmp_path)}
    assert config["integrations"] == {"frameworks": ["batch/job"]}
    assert config["leaderElection"] == {"leaderElect": False}
    assert config["clientConnection"] == {"qps": 50, "burst": 100}  # Kueue's defaults


def _hook(path: str) -> dict[str, object]:
    return {
        "name": path.strip("/") + ".kb.io",
        "clientConfig": {"service": {"name": "webhook-service", "path": path}},
        "rules": [],
    }


def test_webhooks_point_at_the_process_and_keep_only_jobs_and_kueues_kinds() -> None:
    manifests: list[dict[str, Any]] = [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "mutating-webhook-configuration"},
            "webhooks": [
                _hook("/mutate--v1-pod"),
                _hook("/mutate-batch-v1-job"),
                _hook("/mutate-kueue-x-k8s-io-v1beta1-workload"),
                _hook("/mutate-apps-v1-deployment"),
            ],
        },
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "webhook-service"}},
    ]
    [configured] = kueue.webhook_configurations(manifests, "https://127.0.0.1:9443/", b"PEM")
    assert configured["metadata"]["name"] == "kueue-mutating-webhook-configuration"
    urls = [hook["clientConfig"]["url"] for hook in configured["webhooks"]]
    assert urls == [
        "https://127.0.0.1:9443/mutate-batch-v1-job",
        "https://127.0.0.1:9443/mutate-kueue-x-k8s-io-v1beta1-workload",
    ]
    for hook in configured["webhooks"]:
        assert base64.b64decode(hook["clientConfig"]["caBundle"]) == b"PEM"
        assert "service" not in hook["clientConfig"]


def test_one_cluster_queue_of_the_nodes_capacity_and_a_local_queue_per_user() -> None:
    queue = kueue.cluster_queue("scale", "kwok", {"memory": "16000Gi", "cpu": "8000"})
    [group] = queue["spec"]["resourceGroups"]
    assert group["coveredResources"] == ["cpu", "memory"]
    assert group["flavors"] == [
        {
            "name": "kwok",
            "resources": [
                {"name": "cpu", "nominalQuota": "8000"},
                {"name": "memory", "nominalQuota": "16000Gi"},
            ],
        }
    ]
    assert queue["spec"]["namespaceSelector"] == {}
    local = kueue.local_queue("ns", "user-01", "scale")
    assert local["metadata"] == {"name": "user-01", "namespace": "ns"}
    assert local["spec"] == {"clusterQueue": "scale"}
