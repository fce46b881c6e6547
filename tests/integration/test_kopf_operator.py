"""A kopf operator against the dev cluster: handlers, finalizers, status patches, a webhook."""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from kondor_devcluster import pki
from kondor_devcluster.cluster import DevCluster, free_port

from .waiting import eventually

pytestmark = pytest.mark.timeout(180)

OPERATOR = Path(__file__).with_name("kopf_executionjobs.py")
GROUP, VERSION, PLURAL = "kondor.io", "v1alpha1", "executionjobs"


@pytest.fixture
def operator(
    dev_cluster: DevCluster,
    namespace: str,
    kondor_crds: list[str],
    admin: client.ApiClient,
    tmp_path: Path,
) -> Iterator[subprocess.Popen[bytes]]:
    """kopf running the test operator in a subprocess, its webhook registered and reachable."""
    # The webhook's serving certificate, from the dev cluster's CA (which the API server trusts
    # through the caBundle kopf writes into the webhook configuration).
    ca = dev_cluster.layout.pki.ca()
    now = datetime.datetime.now(datetime.UTC)
    serving = pki.issue(ca, "kopf-webhook", now, ip_addresses=["127.0.0.1"], server=True)
    (tmp_path / "tls.crt").write_bytes(serving.cert_pem)
    (tmp_path / "tls.key").write_bytes(serving.key_pem)
    (tmp_path / "ca.crt").write_bytes(ca.cert_pem)
    env = {
        **os.environ,
        "KUBECONFIG": str(dev_cluster.spec.kubeconfig),
        "KOPF_TEST_NAMESPACE": namespace,
        "KOPF_TEST_WEBHOOK_PORT": str(free_port()),
        "KOPF_TEST_WEBHOOK_CERT": str(tmp_path / "tls.crt"),
        "KOPF_TEST_WEBHOOK_KEY": str(tmp_path / "tls.key"),
        "KOPF_TEST_WEBHOOK_CA": str(tmp_path / "ca.crt"),
    }
    log = (tmp_path / "kopf.log").open("wb")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kopf",
            "run",
            "--standalone",
            f"--namespace={namespace}",
            "--verbose",
            str(OPERATOR),
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    webhooks = client.AdmissionregistrationV1Api(admin)
    name = f"kopf-test.{namespace}.kondor.io"

    def registered() -> bool:
        assert process.poll() is None, (tmp_path / "kopf.log").read_text()
        try:
            config = webhooks.read_validating_webhook_configuration(name)
        except ApiException:
            return False
        return bool(config.webhooks and config.webhooks[0].client_config.ca_bundle)

    try:
        eventually(registered, what="kopf's validating webhook registered")
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
        for delete in (
            webhooks.delete_validating_webhook_configuration,
            webhooks.delete_mutating_webhook_configuration,
        ):
            try:
                delete(name)
            except ApiException as error:
                if error.status != 404:
                    raise
        sys.stderr.write((tmp_path / "kopf.log").read_text()[-3000:])


def _job(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ExecutionJob",
        "metadata": {"name": name},
        "spec": {"requestCpus": 2, **spec},
    }


def test_kopf_handles_jobs_with_finalizer_and_status(
    operator: subprocess.Popen[bytes], admin: client.ApiClient, namespace: str
) -> None:
    api = client.CustomObjectsApi(admin)
    api.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, _job("job-1"))

    job = eventually(
        lambda: (
            (j := api.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "job-1"))
            .get("status", {})
            .get("execution", {})
            .get("state")
            == "Running"
            and j
        ),
        what="status.execution.state Running",
    )
    assert job["status"]["execution"]["claimId"] == "accepted-2"
    assert job["metadata"].get("finalizers"), "kopf adds a finalizer for its delete handler"

    api.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "job-1")

    def gone() -> bool:
        try:
            api.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "job-1")
        except ApiException as error:
            return error.status == 404
        return False

    eventually(gone, what="job-1 deleted after its finalizer ran")
    client.CoreV1Api(admin).read_namespaced_config_map("deleted-job-1", namespace)


def test_webhook_sees_the_requesting_user(
    operator: subprocess.Popen[bytes],
    api_client_for: Callable[[str], client.ApiClient],
    namespace: str,
) -> None:
    alice = client.CustomObjectsApi(api_client_for("alice"))
    admin = client.CustomObjectsApi(api_client_for("admin"))

    with pytest.raises(ApiException) as rejected:
        alice.create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, _job("rejected", attributes={"Reject": "true"})
        )
    assert "rejected for alice" in rejected.value.body
    with pytest.raises(ApiException) as rejected:
        admin.create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, _job("rejected", attributes={"Reject": "true"})
        )
    assert "rejected for admin" in rejected.value.body

    accepted = alice.create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, _job("fine")
    )
    assert accepted["metadata"]["name"] == "fine"
