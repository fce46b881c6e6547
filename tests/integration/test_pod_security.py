"""Pod jobs under the Pod Security Standards on the dev cluster (issue 29).

The node's SlotPolicy allows pod templates up to `baseline`. A template asking for more than
any SlotPolicy of the cluster allows is refused at `kubectl apply`, naming the field; once
some SlotPolicy allows it (on no node of this cluster), it is admitted and the node's agent
holds it (HoldReasonCode 21) naming the field. In a namespace whose own Pod Security
admission enforces `restricted` (the API server's plugin, Kubernetes' oracle for the
standard), the pod Kondor makes of a plain template is admitted and runs, and one that the
node allows but the namespace does not is refused by the API server: the job is held with
its message (code 6).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kondor_core.jobs.podsecurity import harden, least_level

from .conftest import MACHINES, skip_reason
from .test_jobs_end_to_end import Cluster, eventually, job_cluster, slot_policy

pytestmark = pytest.mark.timeout(300)

NODE = "kwok-small-0"
RESTRICTED_NAMESPACE = "secure"


def pod_job(
    name: str, security: dict[str, Any] | None = None, namespace: str = "default"
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "busybox"}
    if security:
        container["securityContext"] = security
    template = {
        "metadata": {
            "annotations": {"kondor.io/sim-duration": "1s", "kondor.io/sim-exit-code": "0"}
        },
        "spec": {"containers": [container]},
    }
    return {
        "apiVersion": "kondor.io/v1alpha1",
        "kind": "ExecutionJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"requestCpus": 1, "requestMemory": "128Mi", "pod": {"template": template}},
    }


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    tmp: Path = tmp_path_factory.mktemp("podsecurity")
    policy = slot_policy("nodes", {"kondor.io/pool": "cpu"})
    policy["spec"]["podSecurity"] = "baseline"
    with job_cluster(tmp, [MACHINES / "kwok-small.yaml"], [policy]) as made:
        yield made


def job_in(cluster: Cluster, name: str, namespace: str) -> dict[str, Any]:
    return cluster.get("executionjobs", name, namespace)


def test_a_privileged_template_no_slot_policy_allows_is_refused_at_apply(cluster: Cluster) -> None:
    with pytest.raises(AssertionError) as refused:
        cluster.apply(pod_job("privileged", {"privileged": True}), user="alice")
    message = str(refused.value)
    assert "denied the request" in message
    assert (
        "spec.pod.template.spec.containers[0].securityContext.privileged: true is not allowed "
        "by Pod Security 'baseline'"
    ) in message
    assert "it needs a SlotPolicy with podSecurity: privileged" in message
    # Nothing was stored.
    listed = json.loads(cluster.kubectl("get", "executionjobs", "-n", "default", "-o", "json"))
    assert [j["metadata"]["name"] for j in listed["items"]] == []


def test_what_only_another_nodes_policy_allows_is_admitted_and_held_by_this_node(
    cluster: Cluster,
) -> None:
    elsewhere = slot_policy("elsewhere", {"kondor.io/pool": "none"})
    elsewhere["spec"]["podSecurity"] = "privileged"
    cluster.apply(elsewhere)

    def admitted() -> bool:  # the webhook reads the SlotPolicies again within 5 s
        cluster.apply(pod_job("privileged", {"privileged": True}), user="alice")
        return True

    eventually(admitted, 30, "the privileged pod job admitted")
    held = eventually(
        lambda: (job := cluster.job("privileged"))["status"].get("jobStatus") == "Held" and job,
        60,
        "Held by the node",
    )
    assert held["status"]["holdReasonCode"] == 21
    reason = held["status"]["holdReason"]
    assert reason.startswith(
        f"The job's pod asks for more than the SlotPolicy of {NODE} allows (podSecurity: "
        "baseline): spec.pod.template.spec.containers[0].securityContext.privileged: true"
    )
    pods = cluster.kubectl("get", "pods", "-n", "default", "-l", "kondor.io/job=privileged",
                           "-o", "json")  # fmt: skip
    assert json.loads(pods)["items"] == []  # no Pod was ever made
    cluster.kubectl("delete", "executionjob", "privileged", "-n", "default")
    cluster.kubectl("delete", "slotpolicy", "elsewhere")


def test_the_api_servers_own_restricted_admission_takes_kondors_pod(cluster: Cluster) -> None:
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": RESTRICTED_NAMESPACE,
                "labels": {
                    "pod-security.kubernetes.io/enforce": "restricted",
                    "pod-security.kubernetes.io/enforce-version": "latest",
                },
            },
        }
    )
    time.sleep(1)
    cluster.apply(pod_job("plain", namespace=RESTRICTED_NAMESPACE))
    done = eventually(
        lambda: (
            (j := job_in(cluster, "plain", RESTRICTED_NAMESPACE))["status"].get("jobStatus")
            == "Completed"
            and j
        ),
        60,
        "the plain pod job Completed in the restricted namespace",
    )
    assert done["status"]["exitCode"] == 0
    pods = cluster.kubectl("get", "pods", "-n", RESTRICTED_NAMESPACE, "-l",
                           "kondor.io/job=plain", "-o", "json")  # fmt: skip
    [pod] = json.loads(pods)["items"]
    context = pod["spec"]["securityContext"]
    assert context["runAsNonRoot"] is True and context["runAsUser"] > 0
    assert context["seccompProfile"] == {"type": "RuntimeDefault"}
    container = pod["spec"]["containers"][0]["securityContext"]
    assert container == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def test_a_pod_the_namespace_refuses_holds_the_job_with_the_api_servers_message(
    cluster: Cluster,
) -> None:
    # uid 0: baseline (the node's level) allows it; the namespace enforces restricted.
    cluster.apply(pod_job("rooted", {"runAsUser": 0}, namespace=RESTRICTED_NAMESPACE))
    held = eventually(
        lambda: (
            (j := job_in(cluster, "rooted", RESTRICTED_NAMESPACE))["status"].get("jobStatus")
            == "Held"
            and j
        ),
        60,
        "Held after the API server refused its pod",
    )
    assert held["status"]["holdReasonCode"] == 6
    reason = held["status"]["holdReason"]
    assert reason.startswith("Cannot create the job's pod: ")
    assert 'violates PodSecurity "restricted:latest"' in reason
    assert "runAsUser=0" in reason


def _container(**security: Any) -> dict[str, Any]:
    return {"containers": [{"name": "main", "image": "busybox", "securityContext": security}]}


#: One template per control of the standard, as `kondor_core.jobs.podsecurity` judges them,
#: against the judge Kubernetes ships: the API server's PodSecurity admission.
ORACLE: dict[str, dict[str, Any]] = {
    "plain": _container(),
    "hostNetwork": {**_container(), "hostNetwork": True},
    "hostPID": {**_container(), "hostPID": True},
    "hostIPC": {**_container(), "hostIPC": True},
    "privileged": _container(privileged=True),
    "add NET_BIND_SERVICE": _container(capabilities={"add": ["NET_BIND_SERVICE"]}),
    "add CHOWN": _container(capabilities={"add": ["CHOWN"]}),
    "add SYS_ADMIN": _container(capabilities={"add": ["SYS_ADMIN"]}),
    "drop NET_RAW only": _container(capabilities={"drop": ["NET_RAW"]}),
    "hostPath": {**_container(), "volumes": [{"name": "h", "hostPath": {"path": "/tmp"}}]},
    "nfs": {**_container(), "volumes": [{"name": "n", "nfs": {"server": "s", "path": "/"}}]},
    "emptyDir": {**_container(), "volumes": [{"name": "e", "emptyDir": {}}]},
    "hostPort": {
        "containers": [
            {"name": "main", "image": "busybox", "ports": [{"containerPort": 80, "hostPort": 8080}]}
        ]
    },
    "seccomp Unconfined": {**_container(), "securityContext": {"seccompProfile": {"type": "Unconfined"}}},  # noqa: E501
    "seccomp Localhost": _container(seccompProfile={"type": "Localhost", "localhostProfile": "p.json"}),  # noqa: E501
    "appArmor Unconfined": _container(appArmorProfile={"type": "Unconfined"}),
    "seLinux spc_t": _container(seLinuxOptions={"type": "spc_t"}),
    "seLinux container_t": _container(seLinuxOptions={"type": "container_t"}),
    "seLinux user": _container(seLinuxOptions={"user": "system_u"}),
    "unsafe sysctl": {**_container(), "securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "65536"}]}},  # noqa: E501
    "safe sysctl": {**_container(), "securityContext": {"sysctls": [{"name": "net.ipv4.tcp_syncookies", "value": "1"}]}},  # noqa: E501
    "allowPrivilegeEscalation": _container(allowPrivilegeEscalation=True),
    "runAsNonRoot false": {**_container(), "securityContext": {"runAsNonRoot": False}},
    "runAsUser 0": _container(runAsUser=0),
    "runAsUser 1000": _container(runAsUser=1000),
}  # fmt: skip


def test_each_control_is_judged_as_the_api_servers_pod_security_admission_judges_it(
    cluster: Cluster,
) -> None:
    for level in ("restricted", "baseline"):
        cluster.apply(
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {
                    "name": f"oracle-{level}",
                    "labels": {
                        "pod-security.kubernetes.io/enforce": level,
                        "pod-security.kubernetes.io/enforce-version": "latest",
                    },
                },
            }
        )
    time.sleep(1)

    def admitted(pod: dict[str, Any], level: str) -> bool:
        try:
            cluster.kubectl(
                "create", "--dry-run=server", "-n", f"oracle-{level}", "-f", "-", "-o", "name",
                stdin=json.dumps(pod),
            )  # fmt: skip
        except AssertionError as refused:
            assert "violates PodSecurity" in str(refused), refused  # not some other error
            return False
        return True

    judged = {}
    for case, spec in ORACLE.items():
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "oracle"},
               "spec": harden(spec)}  # fmt: skip
        api_server = next(
            (level for level in ("restricted", "baseline") if admitted(pod, level)), "privileged"
        )
        judged[case] = (least_level({"spec": spec}), api_server)
    assert {case: pair for case, pair in judged.items() if pair[0] != pair[1]} == {}
    # Every level is reached: the table is not judged all alike.
    assert {kondor for kondor, _ in judged.values()} == {"restricted", "baseline", "privileged"}
