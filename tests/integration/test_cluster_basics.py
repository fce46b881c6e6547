"""The dev cluster behaves as a real cluster: kubectl, Python client, RBAC, controllers, kwok."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from kubernetes.utils import parse_quantity

from kondor_devcluster import versions
from kondor_devcluster.cluster import DevCluster

from .waiting import eventually

pytestmark = pytest.mark.timeout(180)

MACHINES = Path(__file__).resolve().parents[2] / "examples" / "machines"
SESSION_NODE = "kwok-small-0"  # examples/machines/kwok-small.yaml, the session cluster's node
ClientFactory = Callable[[str], client.ApiClient]


def kubectl(binary: str, kubeconfig: Path, *args: str, context: str = "admin") -> str:
    result = subprocess.run(
        [binary, f"--kubeconfig={kubeconfig}", f"--context={context}", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if result.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed: {result.stderr}")
    return result.stdout


def kubectl_refused(binary: str, kubeconfig: Path, *args: str, context: str) -> str:
    result = subprocess.run(
        [binary, f"--kubeconfig={kubeconfig}", f"--context={context}", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0, f"kubectl {' '.join(args)} as {context} was allowed"
    return result.stderr


def test_kubectl_talks_to_the_api_server_as_admin(kubectl_bin: str, kubeconfig: Path) -> None:
    version = json.loads(kubectl(kubectl_bin, kubeconfig, "version", "-o", "json"))
    assert version["serverVersion"]["gitVersion"] == versions.KUBERNETES

    who = json.loads(kubectl(kubectl_bin, kubeconfig, "auth", "whoami", "-o", "json"))
    assert who["status"]["userInfo"]["username"] == "admin"
    assert "system:masters" in who["status"]["userInfo"]["groups"]


def test_simulated_node_is_ready_with_the_machine_files_capacity(admin: client.ApiClient) -> None:
    node = client.CoreV1Api(admin).read_node(SESSION_NODE)

    ready = [c for c in node.status.conditions if c.type == "Ready"]
    assert ready and ready[0].status == "True"
    assert parse_quantity(node.status.capacity["cpu"]) == 4
    assert parse_quantity(node.status.capacity["memory"]) == 8 * 2**30
    assert parse_quantity(node.status.allocatable["ephemeral-storage"]) == 100 * 2**30
    assert node.metadata.labels["kondor.io/pool"] == "cpu"


def test_a_machine_file_becomes_a_ready_node_within_10s(
    dev_cluster: DevCluster, admin: client.ApiClient
) -> None:
    core = client.CoreV1Api(admin)
    started = time.monotonic()
    names = dev_cluster.add_machines([MACHINES / "kwok-gpu.yaml"], timeout=10)
    elapsed = time.monotonic() - started
    try:
        assert names == ["kwok-gpu-0"]
        assert elapsed < 10
        node = core.read_node("kwok-gpu-0")
        assert node.status.capacity["nvidia.com/gpu"] == "2"
        assert node.status.capacity["kondor.io/scratch_ssd"] == "2"
        assert parse_quantity(node.status.allocatable["memory"]) == 64 * 2**30
        assert node.metadata.labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB"
        lease = client.CoordinationV1Api(admin).read_namespaced_lease(
            "kwok-gpu-0", "kube-node-lease"
        )
        assert lease.spec.renew_time is not None, "kwok heartbeats through the node's lease"
    finally:
        core.delete_node("kwok-gpu-0")


def _pod(name: str, annotations: dict[str, str], node: str | None = None) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, annotations=annotations),
        spec=client.V1PodSpec(
            node_name=node,
            restart_policy="Never",
            containers=[client.V1Container(name="main", image="busybox")],
        ),
    )


def test_pods_run_and_finish_as_their_annotations_say(
    admin: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(admin)
    # Scheduled by kube-scheduler onto the only node, the simulated one.
    core.create_namespaced_pod(
        namespace, _pod("ok", {"kondor.io/sim-duration": "3s", "kondor.io/sim-exit-code": "0"})
    )
    # Bound directly, as the Kondor agent binds its pods.
    core.create_namespaced_pod(
        namespace,
        _pod("bad", {"kondor.io/sim-duration": "1s", "kondor.io/sim-exit-code": "3"}, SESSION_NODE),
    )
    core.create_namespaced_pod(namespace, _pod("forever", {}, SESSION_NODE))

    running = eventually(
        lambda: (
            core.read_namespaced_pod("ok", namespace).status.phase == "Running"
            and core.read_namespaced_pod("ok", namespace)
        ),
        what="pod ok Running",
    )
    assert running.spec.node_name == SESSION_NODE
    assert running.status.pod_ip

    ok = eventually(
        lambda: (p := core.read_namespaced_pod("ok", namespace)).status.phase == "Succeeded" and p,
        what="pod ok Succeeded",
    )
    assert ok.status.container_statuses[0].state.terminated.exit_code == 0
    bad = eventually(
        lambda: (p := core.read_namespaced_pod("bad", namespace)).status.phase == "Failed" and p,
        what="pod bad Failed",
    )
    assert bad.status.container_statuses[0].state.terminated.exit_code == 3
    assert core.read_namespaced_pod("forever", namespace).status.phase == "Running"

    # Deleting a pod on a simulated node completes (kwok plays the kubelet's part).
    core.delete_namespaced_pod("forever", namespace)

    def gone() -> bool:
        try:
            core.read_namespaced_pod("forever", namespace)
        except ApiException as error:
            return error.status == 404
        return False

    eventually(gone, what="pod forever deleted")


def test_garbage_collector_deletes_dependents(admin: client.ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(admin)
    owner = core.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="owner"))
    )
    reference = client.V1OwnerReference(
        api_version="v1", kind="ConfigMap", name="owner", uid=owner.metadata.uid
    )
    core.create_namespaced_config_map(
        namespace,
        client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name="dependent", owner_references=[reference])
        ),
    )
    core.delete_namespaced_config_map("owner", namespace)

    def dependent_gone() -> bool:
        names = [cm.metadata.name for cm in core.list_namespaced_config_map(namespace).items]
        return "dependent" not in names

    eventually(dependent_gone, what="dependent ConfigMap collected")


def test_namespace_deletion_completes(admin: client.ApiClient) -> None:
    core = client.CoreV1Api(admin)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="short-lived")))
    core.create_namespaced_config_map(
        "short-lived", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="content"))
    )
    core.delete_namespace("short-lived")

    def gone() -> bool:
        return "short-lived" not in [ns.metadata.name for ns in core.list_namespace().items]

    eventually(gone, timeout=60, what="namespace short-lived finalized")


def _job(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "kondor.io/v1alpha1",
        "kind": "ExecutionJob",
        "metadata": {"name": name},
        "spec": {"requestCpus": 1},
    }


def test_alice_works_with_jobs_and_nothing_else(
    api_client_for: ClientFactory,
    namespace: str,
    kondor_crds: list[str],
    kubectl_bin: str,
    kubeconfig: Path,
) -> None:
    alice = client.CustomObjectsApi(api_client_for("alice"))
    created = alice.create_namespaced_custom_object(
        "kondor.io", "v1alpha1", namespace, "executionjobs", _job("alices-job")
    )
    assert created["metadata"]["name"] == "alices-job"
    alice.list_cluster_custom_object("kondor.io", "v1alpha1", "executionpoints")

    with pytest.raises(ApiException) as refused:
        alice.create_cluster_custom_object(
            "kondor.io",
            "v1alpha1",
            "slotpolicies",
            {"apiVersion": "kondor.io/v1alpha1", "kind": "SlotPolicy", "metadata": {"name": "x"}},
        )
    assert refused.value.status == 403
    with pytest.raises(ApiException) as refused:
        client.CoreV1Api(api_client_for("alice")).list_namespaced_secret(namespace)
    assert refused.value.status == 403

    out = kubectl(
        kubectl_bin,
        kubeconfig,
        "get",
        "executionjobs",
        "-n",
        namespace,
        "-o",
        "name",
        context="alice",
    )
    assert out.strip() == "executionjob.kondor.io/alices-job"
    who = json.loads(
        kubectl(kubectl_bin, kubeconfig, "auth", "whoami", "-o", "json", context="bob")
    )
    assert who["status"]["userInfo"]["username"] == "bob"
    assert "kondor:users" in who["status"]["userInfo"]["groups"]
    error = kubectl_refused(
        kubectl_bin, kubeconfig, "get", "secrets", "-n", namespace, context="alice"
    )
    assert "forbidden" in error
    error = kubectl_refused(kubectl_bin, kubeconfig, "get", "pods", "-A", context="bob")
    assert "forbidden" in error
    allowed = kubectl(
        kubectl_bin,
        kubeconfig,
        "auth",
        "can-i",
        "create",
        "executionjobs.kondor.io",
        "-n",
        namespace,
        context="alice",
    )
    assert allowed.strip() == "yes"
