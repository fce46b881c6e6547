"""kondor-operator against the dev cluster: ExecutionPoints follow Nodes and SlotPolicies,
admission refuses invalid policies with the parser's message, status, Events, metrics, and
one active replica under a Lease.

One operator runs for the module (its own Lease and webhook configuration); every test
labels its own Nodes with a key of its own and removes what it made.
"""

from __future__ import annotations

import contextlib
import datetime
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kondor_core.fleet import check_policy
from kondor_devcluster.cluster import DevCluster, free_port
from kondor_devcluster.components import KWOK_NODE_ANNOTATION, KWOK_NODE_ANNOTATION_VALUE

from .waiting import eventually

pytestmark = pytest.mark.timeout(90)

GROUP, VERSION = "kondor.io", "v1alpha1"
EPS, POLICIES = "executionpoints", "slotpolicies"
EVENTS_NAMESPACE = "default"


@dataclass
class Operator:
    process: subprocess.Popen[bytes]
    log: Path
    metrics_port: int
    identity: str
    lease: str
    webhook_configuration: str | None

    def metrics(self) -> str:
        assert self.process.poll() is None, self.log.read_text()[-3000:]
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            return str(response.read().decode())

    def sample(self, name: str, **labels: str) -> float | None:
        """One sample's value from /metrics, None when absent."""
        wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        prefix = f"{name}{{{wanted}}} " if labels else f"{name} "
        for line in self.metrics().splitlines():
            if line.startswith(prefix):
                return float(line.split()[-1])
        return None


def start_operator(
    cluster: DevCluster, tmp: Path, *, lease: str, webhook: bool = True, extra: tuple[str, ...] = ()
) -> Operator:
    identity = f"replica-{uuid.uuid4().hex[:6]}"
    metrics_port = free_port()
    configuration = f"kondor-test-{lease}.kondor.io" if webhook else None
    args = [
        sys.executable,
        "-m",
        "kondor_operator.main",
        f"--kubeconfig={cluster.spec.kubeconfig}",
        "--context=admin",
        "--namespace=default",
        f"--metrics-port={metrics_port}",
        "--metrics-addr=127.0.0.1",
        f"--leader-election-lease={lease}",
        f"--leader-election-identity={identity}",
        "--leader-election-lease-duration=6",
        "--leader-election-renew-deadline=4",
        "--leader-election-retry-period=1",
        "--resync=3",
        "--verbose",
        *extra,
    ]
    if configuration:
        args += [f"--webhook-port={free_port()}", f"--webhook-configuration={configuration}"]
    else:
        args.append("--no-webhook")
    log = tmp / f"operator-{identity}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
    return Operator(process, log, metrics_port, identity, lease, configuration)


def stop_operator(operator: Operator, admin: client.ApiClient) -> None:
    operator.process.terminate()
    try:
        operator.process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        operator.process.kill()
        operator.process.wait()
    if operator.webhook_configuration:
        # Both kinds: the owner-setting mutating webhooks fail closed, so one left pointing at
        # this stopped operator would refuse every later job.
        webhooks = client.AdmissionregistrationV1Api(admin)
        for delete in (
            webhooks.delete_validating_webhook_configuration,
            webhooks.delete_mutating_webhook_configuration,
        ):
            try:
                delete(operator.webhook_configuration)
            except ApiException as error:
                if error.status != 404:
                    raise
    try:
        client.CoordinationV1Api(admin).delete_namespaced_lease(operator.lease, "default")
    except ApiException as error:
        if error.status != 404:
            raise
    sys.stderr.write(operator.log.read_text()[-3000:])


def wait_ready(operator: Operator, admin: client.ApiClient) -> None:
    def serving() -> bool:
        try:
            return operator.sample("kondor_operator_leader") == 1.0
        except OSError:
            return False

    # Its start (imports, the first lists) has taken over 30 s on a loaded machine (pytest -n).
    eventually(serving, timeout=60, what="operator leading")
    # Leading is not negotiating yet: kopf starts the negotiator after the Lease is held, which
    # can take seconds on a loaded machine. Its first cycle says it runs.
    eventually(
        lambda: (operator.sample("kondor_operator_negotiation_cycle_seconds_count") or 0) >= 1,
        timeout=60,
        what="first negotiation cycle",
    )
    configuration = operator.webhook_configuration
    if configuration:
        hooks = client.AdmissionregistrationV1Api(admin)

        def registered() -> bool:
            try:
                config = hooks.read_validating_webhook_configuration(configuration)
            except ApiException:
                return False
            return bool(config.webhooks and config.webhooks[0].client_config.ca_bundle)

        eventually(registered, timeout=30, what="validating webhook registered")


@pytest.fixture(scope="module")
def operator(
    dev_cluster: DevCluster,
    kondor_crds: list[str],
    admin: client.ApiClient,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Operator]:
    running = start_operator(
        dev_cluster, tmp_path_factory.mktemp("operator"), lease=f"op-{uuid.uuid4().hex[:6]}"
    )
    try:
        wait_ready(running, admin)
        yield running
    finally:
        stop_operator(running, admin)


class Fleet:
    """Nodes and SlotPolicies a test makes, removed at the end; a label key of its own."""

    def __init__(self, admin: client.ApiClient) -> None:
        self.core = client.CoreV1Api(admin)
        self.objects = client.CustomObjectsApi(admin)
        self.suffix = uuid.uuid4().hex[:6]
        self.key = f"test.kondor.io/{self.suffix}"
        self.nodes: list[str] = []
        self.policies: list[str] = []

    def node(self, name: str, value: str = "yes", **labels: str) -> dict[str, Any]:
        """A kwok-managed Node labelled `<the test's key>=<value>`."""
        full = f"{name}-{self.suffix}"
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": full,
                "labels": {self.key: value, **labels},
                "annotations": {KWOK_NODE_ANNOTATION: KWOK_NODE_ANNOTATION_VALUE},
            },
        }
        created = self.core.create_node(cast(client.V1Node, client.V1Node.from_dict(body)))
        self.nodes.append(full)
        assert created.metadata is not None
        return {"name": full, "uid": created.metadata.uid}

    def policy(self, name: str, spec: dict[str, Any]) -> str:
        full = f"{name}-{self.suffix}"
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "SlotPolicy",
            "metadata": {"name": full},
            "spec": spec,
        }
        self.objects.create_cluster_custom_object(GROUP, VERSION, POLICIES, body)
        self.policies.append(full)
        return full

    def selecting(self, value: str = "yes", **spec: Any) -> dict[str, Any]:
        return {"nodeSelector": {"matchLabels": {self.key: value}}, **spec}

    def ep(self, node: str) -> dict[str, Any] | None:
        try:
            found = self.objects.get_cluster_custom_object(GROUP, VERSION, EPS, node)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return cast(dict[str, Any], found)

    def must_ep(self, node: str) -> dict[str, Any]:
        found = self.ep(node)
        assert found is not None, f"no ExecutionPoint {node}"
        return found

    def get_policy(self, name: str) -> dict[str, Any]:
        found = self.objects.get_cluster_custom_object(GROUP, VERSION, POLICIES, name)
        return cast(dict[str, Any], found)

    def delete_node(self, name: str) -> None:
        self.core.delete_node(name)

    def delete_policy(self, name: str) -> None:
        self.objects.delete_cluster_custom_object(GROUP, VERSION, POLICIES, name)

    def cleanup(self) -> None:
        for name in self.policies:
            with contextlib.suppress(ApiException):
                self.delete_policy(name)
        for name in self.nodes:
            with contextlib.suppress(ApiException):
                self.delete_node(name)
        for name in self.nodes:
            with contextlib.suppress(ApiException):
                self.objects.delete_cluster_custom_object(GROUP, VERSION, EPS, name)


@pytest.fixture
def fleet(admin: client.ApiClient) -> Iterator[Fleet]:
    made = Fleet(admin)
    try:
        yield made
    finally:
        made.cleanup()


def _condition(conditions: list[dict[str, Any]], type_: str) -> dict[str, Any]:
    return next(c for c in conditions if c["type"] == type_)


def test_policy_selects_nodes_and_execution_points_follow(operator: Operator, fleet: Fleet) -> None:
    chosen = fleet.node("chosen")
    other = fleet.node("other", "spare")
    spec = fleet.selecting(start="KeyboardIdle > 15 * 60")
    name = fleet.policy("batch", spec)

    ep = eventually(lambda: fleet.ep(chosen["name"]), what="ExecutionPoint for the chosen node")
    assert fleet.ep(other["name"]) is None, "the policy does not select the other node"
    assert ep["spec"]["nodeName"] == chosen["name"]
    # Named, not pinned: the node's agent follows the policy's generations itself.
    assert ep["spec"]["policy"] == {"name": name}
    [owner] = ep["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Node", chosen["name"], chosen["uid"])

    status = eventually(
        lambda: (
            (fleet.get_policy(name).get("status") or {}).get("observedGeneration") == 1
            and fleet.get_policy(name)["status"]
        ),
        what="SlotPolicy status",
    )
    assert status["selectedNodes"] == 1 and status["governedNodes"] == 1
    assert status["hash"] == check_policy(spec).hash
    assert _condition(status["conditions"], "Valid")["status"] == "True"
    assert _condition(status["conditions"], "Ready")["observedGeneration"] == 1

    # Re-target the policy: the old node's ExecutionPoint goes, the new one's comes.
    fleet.objects.patch_cluster_custom_object(
        GROUP,
        VERSION,
        POLICIES,
        name,
        {"spec": {"nodeSelector": {"matchLabels": {fleet.key: "spare"}}}},
    )
    moved = eventually(lambda: fleet.ep(other["name"]), what="ExecutionPoint follows selector")
    assert moved["spec"]["policy"] == {"name": name}
    eventually(lambda: fleet.ep(chosen["name"]) is None, what="unselected node's EP removed")
    eventually(
        lambda: fleet.get_policy(name)["status"].get("observedGeneration") == 2,
        what="observedGeneration 2",
    )


def test_deleting_a_node_or_the_policy_removes_execution_points(
    operator: Operator, fleet: Fleet
) -> None:
    first, second = fleet.node("a"), fleet.node("b")
    name = fleet.policy("all", fleet.selecting())
    for node in (first["name"], second["name"]):
        eventually(lambda node=node: fleet.ep(node), what=f"EP {node}")  # type: ignore[misc]

    fleet.delete_node(first["name"])
    eventually(lambda: fleet.ep(first["name"]) is None, what="EP of a deleted node removed")
    assert fleet.ep(second["name"]) is not None

    fleet.delete_policy(name)
    eventually(lambda: fleet.ep(second["name"]) is None, what="EPs removed with their policy")


def test_priority_decides_and_a_tie_is_reported(
    operator: Operator, fleet: Fleet, admin: client.ApiClient
) -> None:
    node = fleet.node("contested")["name"]
    fleet.policy("low", fleet.selecting(priority=1))
    high = fleet.policy("high", fleet.selecting(priority=5))
    eventually(
        lambda: (fleet.ep(node) or {}).get("spec", {}).get("policy", {}).get("name") == high,
        what="the higher priority wins",
    )

    rival = fleet.policy("zz-rival", fleet.selecting(priority=5))
    operator_status = eventually(
        lambda: (
            (ep := fleet.ep(node))
            and (ep.get("status") or {}).get("operator", {}).get("tieWith") == [rival]
            and ep["status"]["operator"]
        ),
        what="the tie in status.operator",
    )
    tie = _condition(operator_status["conditions"], "PolicyTie")
    assert tie["status"] == "True" and high in tie["message"] and rival in tie["message"]
    assert fleet.must_ep(node)["spec"]["policy"]["name"] == high, "the tie goes to the first name"

    events = client.CoreV1Api(admin)

    def tie_event() -> bool:
        found = events.list_namespaced_event(
            EVENTS_NAMESPACE, field_selector=f"involvedObject.name={node}"
        ).items
        return any(e.reason == "PolicyTie" and e.type == "Warning" for e in found)

    eventually(tie_event, what="a PolicyTie Event")


def test_invalid_policy_is_refused_by_kubectl_apply_with_the_parser_message(
    operator: Operator, fleet: Fleet, kubectl_bin: str, kubeconfig: Path
) -> None:
    manifest = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "SlotPolicy",
        "metadata": {"name": f"broken-{fleet.suffix}"},
        "spec": {"start": "KeyboardIdle >", "nodeSelector": {"matchLabels": {fleet.key: "x"}}},
    }
    result = subprocess.run(
        [kubectl_bin, f"--kubeconfig={kubeconfig}", "--context=admin", "apply", "-f", "-"],
        input=yaml.safe_dump(manifest),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode != 0, result.stdout
    assert "denied the request" in result.stderr
    assert "spec.start: 'KeyboardIdle >' is not a valid ClassAd expression" in result.stderr
    assert "classad2:" in result.stderr
    with pytest.raises(ApiException) as missing:
        fleet.get_policy(f"broken-{fleet.suffix}")
    assert missing.value.status == 404

    # A snippet's bad line is named by its line.
    manifest["spec"] = {"condorConfig": "START = TRUE\nSUSPEND = (LoadAvg >\n"}
    result = subprocess.run(
        [kubectl_bin, f"--kubeconfig={kubeconfig}", "--context=admin", "apply", "-f", "-"],
        input=yaml.safe_dump(manifest),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode != 0
    assert "spec.condorConfig line 2 (SUSPEND)" in result.stderr


def test_an_invalid_policy_that_got_in_is_reported_in_its_status(
    operator: Operator, fleet: Fleet, admin: client.ApiClient
) -> None:
    node = fleet.node("kept")["name"]
    name = fleet.policy("turns-bad", fleet.selecting())
    eventually(lambda: fleet.ep(node), what="EP")
    hooks = client.AdmissionregistrationV1Api(admin)
    assert operator.webhook_configuration is not None
    saved = hooks.read_validating_webhook_configuration(operator.webhook_configuration)
    assert saved.webhooks is not None
    url = saved.webhooks[0].client_config.url
    assert url is not None and url.startswith("https://127.0.0.1:")
    # The webhook unreachable (failurePolicy Ignore): the API server admits what it would refuse.
    unreachable = f"https://127.0.0.1:{free_port()}/" + url.split("/", 3)[3]
    patch = {"webhooks": [{"name": saved.webhooks[0].name, "clientConfig": {"url": unreachable}}]}
    hooks.patch_validating_webhook_configuration(operator.webhook_configuration, patch)
    try:
        fleet.objects.patch_cluster_custom_object(
            GROUP, VERSION, POLICIES, name, {"spec": {"start": "KeyboardIdle >"}}
        )
    finally:
        restore = {"webhooks": [{"name": saved.webhooks[0].name, "clientConfig": {"url": url}}]}
        hooks.patch_validating_webhook_configuration(operator.webhook_configuration, restore)

    status = eventually(
        lambda: (
            (fleet.get_policy(name).get("status") or {}).get("observedGeneration") == 2
            and fleet.get_policy(name)["status"]
        ),
        what="status of generation 2",
    )
    valid = _condition(status["conditions"], "Valid")
    assert (valid["status"], valid["reason"], valid["observedGeneration"]) == (
        "False",
        "Invalid",
        2,
    )
    assert "spec.start: 'KeyboardIdle >' is not a valid ClassAd expression" in valid["message"]
    assert "classad2:" in valid["message"]
    assert _condition(status["conditions"], "Ready")["status"] == "False"
    # Its node keeps its ExecutionPoint (the agent keeps the slots it carved) rather than
    # losing it to an invalid policy.
    time.sleep(1)
    assert fleet.must_ep(node)["spec"]["policy"] == {"name": name}


def test_heartbeat_freshness_slots_and_metrics(operator: Operator, fleet: Fleet) -> None:
    node = fleet.node("reporting")["name"]
    # UPDATE_INTERVAL 5: a heartbeat older than 15 s is stale.
    fleet.policy("fast", fleet.selecting(condorConfig="UPDATE_INTERVAL = 5\n"))
    eventually(lambda: fleet.ep(node), what="EP")
    unknown = eventually(
        lambda: ((fleet.ep(node) or {}).get("status") or {}).get("operator", {}).get("heartbeat"),
        what="status.operator.heartbeat",
    )
    assert unknown == "Unknown", "no agent has reported"

    now = datetime.datetime.now(datetime.UTC)
    slots = [
        {
            "name": f"slot1@{node}",
            "type": "Partitionable",
            "state": "Unclaimed",
            "activity": "Idle",
        },
        {"name": f"slot1_1@{node}", "type": "Dynamic", "state": "Claimed", "activity": "Busy"},
        {"name": f"slot1_2@{node}", "type": "Dynamic", "state": "Claimed", "activity": "Busy"},
    ]
    # What the agent writes: its own part of the status, beside the operator's subtree.
    fleet.objects.patch_cluster_custom_object_status(
        GROUP,
        VERSION,
        EPS,
        node,
        {"status": {"lastHeartbeat": now.strftime("%Y-%m-%dT%H:%M:%SZ"), "slots": slots}},
    )
    eventually(
        lambda: fleet.must_ep(node)["status"]["operator"]["heartbeat"] == "Fresh", what="fresh"
    )
    assert operator.sample("kondor_operator_slots", state="Claimed", activity="Busy") == 2.0
    eventually(
        lambda: operator.sample("kondor_operator_slots", state="Unclaimed", activity="Idle") == 1.0,
        what="slot gauge",
    )
    assert fleet.must_ep(node)["status"]["slots"] == slots, "the operator leaves the agent's fields"

    old = now - datetime.timedelta(minutes=5)
    fleet.objects.patch_cluster_custom_object_status(
        GROUP, VERSION, EPS, node, {"status": {"lastHeartbeat": old.strftime("%Y-%m-%dT%H:%M:%SZ")}}
    )
    status = eventually(
        lambda: (
            fleet.must_ep(node)["status"]["operator"]["heartbeat"] == "Stale"
            and fleet.must_ep(node)["status"]["operator"]
        ),
        what="stale",
    )
    assert _condition(status["conditions"], "HeartbeatFresh")["status"] == "False"

    text = operator.metrics()
    assert 'kondor_operator_reconciles_total{kind="ExecutionPoint",result="ok"}' in text
    assert 'kondor_operator_changes_total{action="create",kind="ExecutionPoint"}' in text
    assert (operator.sample("kondor_operator_execution_points", heartbeat="Stale") or 0) >= 1
    assert operator.sample("kondor_operator_leader") == 1.0


def test_a_second_replica_waits_and_takes_over_when_the_leader_steps_down(
    dev_cluster: DevCluster, kondor_crds: list[str], admin: client.ApiClient, tmp_path: Path
) -> None:
    lease = f"ha-{uuid.uuid4().hex[:6]}"
    first = start_operator(dev_cluster, tmp_path, lease=lease, webhook=False)
    second: Operator | None = None
    leases = client.CoordinationV1Api(admin)
    try:
        wait_ready(first, admin)
        second = start_operator(dev_cluster, tmp_path, lease=lease, webhook=False)
        eventually(
            lambda: second is not None and _safe_sample(second) == 0.0,
            timeout=20,
            what="second replica up and passive",
        )
        time.sleep(3)  # several retry periods: it must still be waiting
        assert second.sample("kondor_operator_leader") == 0.0
        assert _holder(leases, lease) == (first.identity)
        assert "waiting to lead" in second.log.read_text()
        assert "kopf" not in second.log.read_text().split("waiting to lead")[-1].lower()

        # The leader steps down on SIGTERM and releases the Lease: the other takes over
        # within a retry period or two, not a whole lease duration.
        first.process.terminate()
        assert first.process.wait(timeout=20) == 0
        eventually(
            lambda: second.sample("kondor_operator_leader") == 1.0,
            timeout=10,
            what="second replica leading",
        )
        holder = _holder(leases, lease)
        assert holder == second.identity
    finally:
        for running in (first, second):
            if running is not None:
                stop_operator(running, admin)


def _holder(leases: client.CoordinationV1Api, name: str) -> str | None:
    spec = leases.read_namespaced_lease(name, "default").spec
    return spec.holder_identity if spec is not None else None


def _safe_sample(operator: Operator) -> float | None:
    try:
        return operator.sample("kondor_operator_leader")
    except OSError:
        return None


def test_operator_cli_help_lists_the_flags() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "kondor_operator.main", "--help"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    for flag in (
        "--kubeconfig",
        "--context",
        "--webhook-port",
        "--metrics-port",
        "--no-leader-election",
    ):
        assert flag in result.stdout
