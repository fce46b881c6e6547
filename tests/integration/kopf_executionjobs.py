"""A small kopf operator for the integration tests (run by test_kopf_operator.py, not a test).

It handles ExecutionJobs in one namespace: a create handler that patches status, a delete
handler (so kopf puts a finalizer on every job) that leaves a ConfigMap behind, and a validating
webhook, served on 127.0.0.1 by kopf, that rejects jobs asking for it and names the requester.
"""

from __future__ import annotations

import os
from typing import Any

import kopf
from kubernetes import client, config

NAMESPACE = os.environ["KOPF_TEST_NAMESPACE"]
GROUP, VERSION, PLURAL = "kondor.io", "v1alpha1", "executionjobs"


@kopf.on.startup(id="configure")
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.admission.server = kopf.WebhookServer(
        addr="127.0.0.1",
        port=int(os.environ["KOPF_TEST_WEBHOOK_PORT"]),
        host="127.0.0.1",
        certfile=os.environ["KOPF_TEST_WEBHOOK_CERT"],
        pkeyfile=os.environ["KOPF_TEST_WEBHOOK_KEY"],
        cafile=os.environ["KOPF_TEST_WEBHOOK_CA"],
    )
    settings.admission.managed = f"kopf-test.{NAMESPACE}.kondor.io"
    settings.posting.level = 0
    config.load_kube_config()  # type: ignore[no-untyped-call]


@kopf.on.validate(GROUP, VERSION, PLURAL, id="requester", ignore_failures=True)
def validate(spec: kopf.Spec, namespace: str | None, userinfo: kopf.UserInfo, **_: Any) -> None:
    if namespace == NAMESPACE and spec.get("attributes", {}).get("Reject") == "true":
        raise kopf.AdmissionError(f"rejected for {userinfo.get('username')}", code=403)


@kopf.on.create(GROUP, VERSION, PLURAL, id="accept")
def accept(patch: kopf.Patch, spec: kopf.Spec, **_: Any) -> None:
    # status.execution is the agent's subtree of the real ExecutionJob schema.
    patch.status["execution"] = {
        "claimId": f"accepted-{spec.get('requestCpus', 1)}",
        "state": "Running",
    }


@kopf.on.delete(GROUP, VERSION, PLURAL, id="cleanup")
def cleanup(name: str, namespace: str | None, **_: Any) -> None:
    assert namespace is not None  # ExecutionJobs are namespaced
    client.CoreV1Api().create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name=f"deleted-{name}"))
    )
