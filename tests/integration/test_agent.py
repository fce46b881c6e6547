"""The agent against the real control plane: a kwok node of its own, an ExecutionPoint and a
SlotPolicy created here (standing in for the operator, which also writes the SlotPolicy's
status once it has checked a generation), and `kondor-agent` as a real process on a machine
file. What a user sees is what is checked: the ExecutionPoint's status."""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from kubernetes import client

from kondor_core.api import SlotPolicyStatus, whole_slot_ad
from kondor_core.fleet import PolicyCounts, check_policy, slot_policy_status
from kondor_devcluster.cluster import DevCluster, free_port

from .waiting import eventually

GROUP, VERSION = "kondor.io", "v1alpha1"
MACHINE = {
    "cpus": 4,
    "memory": "8Gi",
    "disk": 104857600,
    "labels": {"kondor.io/pool": "agent-test"},
    "attributes": {"OpSys": "LINUX", "Arch": "X86_64"},
}
#: Two static slots and a partitionable one: names, types and resources all matter.
POLICY_SPEC: dict[str, Any] = {
    # Selects no node: an operator running meanwhile would not act on this policy.
    "nodeSelector": {"matchLabels": {"kondor.io/selected-by": "nobody"}},
    "slotTypes": [
        {"id": 1, "count": 2, "resources": "cpus=1, memory=1Gi"},
        {"id": 2, "partitionable": True, "resources": "auto"},
    ],
}
EDITED_SPEC: dict[str, Any] = {
    "nodeSelector": {"matchLabels": {"kondor.io/selected-by": "nobody"}},
    "slotTypes": [{"id": 1, "count": 4, "resources": "auto"}],
}
POLLING, UPDATE = 1.0, 4.0
_SHAPE = ("Name", "SlotType", "SlotTypeID", "Cpus", "Memory", "Disk", "GPUs")


# A deadline, not an expectation: an agent's start has taken over 15 s on a loaded machine.
def _wait(what: str, check: Callable[[], Any], timeout: float = 30.0) -> Any:
    return eventually(check, timeout, what)


@dataclass
class Node:
    """One simulated node with its ExecutionPoint, its SlotPolicy and (when started) its agent."""

    name: str
    policy: str
    machine_file: Path
    policy_file: Path
    kubeconfig: Path
    objects: client.CustomObjectsApi
    logs: Path
    metrics_port: int
    agent: subprocess.Popen[bytes] | None = None

    def start_agent(self) -> None:
        self.agent = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kondor_agent.main",
                "--node-name",
                self.name,
                "--machine",
                str(self.machine_file),
                "--kubeconfig",
                str(self.kubeconfig),
                "--context",
                "admin",
                "--polling-interval",
                str(POLLING),
                "--update-interval",
                str(UPDATE),
                "--metrics-port",
                str(self.metrics_port),
            ],
            stdout=self.logs.open("ab"),
            stderr=subprocess.STDOUT,
        )

    def kill_agent(self) -> None:
        if self.agent is not None and self.agent.poll() is None:
            self.agent.send_signal(signal.SIGKILL)
            self.agent.wait(10)
        self.agent = None

    def status(self) -> dict[str, Any]:
        ep = self.objects.get_cluster_custom_object(GROUP, VERSION, "executionpoints", self.name)
        return dict(ep.get("status") or {})

    def ads(self) -> list[dict[str, Any]]:
        status = self.status()
        machine = status.get("machine") or {}
        return [whole_slot_ad(machine, slot["ad"]) for slot in status.get("slots") or []]

    def simulated(self) -> list[dict[str, Any]]:
        """What `kondor simulate --output json` prints for this machine and policy."""
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "kondor_cli.main",
                "simulate",
                "--machine",
                str(self.machine_file),
                "--policy",
                str(self.policy_file),
                "--output",
                "json",
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        slots: list[dict[str, Any]] = json.loads(out)["slots"]
        return slots

    def set_policy(self, spec: dict[str, Any]) -> None:
        """Edit the SlotPolicy the ExecutionPoint names, and check it as the operator does:
        the agent follows it itself."""
        self.policy_file.write_text(yaml.safe_dump(_policy(self.policy, spec)))
        edited = self.objects.patch_cluster_custom_object(
            GROUP, VERSION, "slotpolicies", self.policy, {"spec": spec}
        )
        _check_as_the_operator(self.objects, edited)

    def writes(self) -> float:
        text = httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).text
        for line in text.splitlines():
            if line.startswith('kondor_agent_api_writes_total{result="ok"}'):
                return float(line.split()[-1])
        return 0.0


def _policy(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "SlotPolicy",
        "metadata": {"name": name},
        "spec": spec,
    }


def _check_as_the_operator(objects: client.CustomObjectsApi, policy: dict[str, Any]) -> None:
    """Write the SlotPolicy's status as the operator does once it has checked the generation:
    an agent carves only a checked one."""
    status = slot_policy_status(
        generation=policy["metadata"]["generation"],
        checked=check_policy(policy["spec"]),
        counts=PolicyCounts(),
        old=SlotPolicyStatus(),
        now=datetime.datetime.now(datetime.UTC),
    )
    objects.patch_cluster_custom_object_status(
        GROUP, VERSION, "slotpolicies", policy["metadata"]["name"], {"status": status.dump()}
    )


def _shape(ads: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [tuple(ad.get(key) for key in _SHAPE) for ad in ads]


@pytest.fixture
def node(
    dev_cluster: DevCluster,
    admin: client.ApiClient,
    kondor_crds: list[str],
    kubeconfig: Path,
    tmp_path: Path,
) -> Iterator[Node]:
    name = f"agent-it-{uuid.uuid4().hex[:6]}"
    machine_file = tmp_path / f"{name}.yaml"
    machine_file.write_text(yaml.safe_dump({"name": name, **MACHINE}))
    dev_cluster.add_machines([machine_file])
    objects = client.CustomObjectsApi(admin)
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(yaml.safe_dump(_policy(name, POLICY_SPEC)))
    created = objects.create_cluster_custom_object(
        GROUP, VERSION, "slotpolicies", _policy(name, POLICY_SPEC)
    )
    _check_as_the_operator(objects, created)
    ep = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ExecutionPoint",
        "metadata": {"name": name},
        "spec": {"nodeName": name, "policy": {"name": name}},
    }
    objects.create_cluster_custom_object(GROUP, VERSION, "executionpoints", ep)
    state = Node(
        name,
        name,
        machine_file,
        policy_file,
        kubeconfig,
        objects,
        tmp_path / "agent.log",
        free_port(),
    )
    try:
        yield state
    finally:
        state.kill_agent()
        if os.environ.get("KONDOR_SHOW_AGENT_LOG"):
            sys.stderr.write(state.logs.read_text(errors="replace"))
        with contextlib.suppress(client.ApiException):
            objects.delete_cluster_custom_object(GROUP, VERSION, "executionpoints", name)
        with contextlib.suppress(client.ApiException):
            objects.delete_cluster_custom_object(GROUP, VERSION, "slotpolicies", name)
        with contextlib.suppress(client.ApiException):
            client.CoreV1Api(admin).delete_node(name)


def _published(node: Node) -> list[tuple[Any, ...]]:
    wanted = _shape(node.simulated())
    return _wait("status with the simulated slots", lambda: _shape(node.ads()) == wanted and wanted)


def test_agent_publishes_the_slots_simulate_prints(node: Node) -> None:
    node.start_agent()
    started = time.monotonic()
    _published(node)
    assert time.monotonic() - started < 15
    status = node.status()
    assert [slot["name"] for slot in status["slots"]] == [ad["Name"] for ad in node.simulated()]
    assert {slot["state"] for slot in status["slots"]} == {"Unclaimed"}
    assert status["summary"]["slots"] == 3
    assert status["policy"]["name"] == node.policy
    assert any(c["type"] == "Ready" and c["status"] == "True" for c in status["conditions"])


def test_policy_edit_recarves_within_15s(node: Node) -> None:
    node.start_agent()
    _published(node)
    node.set_policy(EDITED_SPEC)
    shape = _published(node)
    assert [row[1] for row in shape] == ["Static"] * 4


def test_a_fact_changed_in_the_machine_file_shows_up(node: Node) -> None:
    node.start_agent()
    _published(node)
    data = yaml.safe_load(node.machine_file.read_text())
    data["attributes"]["KondorRackId"] = 42
    node.machine_file.write_text(yaml.safe_dump(data))
    _wait(
        "the new fact in every slot ad",
        lambda: all(ad.get("KondorRackId") == 42 for ad in node.ads()),
    )


def test_restarted_agent_publishes_the_same_slots(node: Node) -> None:
    node.start_agent()
    _published(node)
    before = node.status()
    node.kill_agent()
    time.sleep(1.1)  # so that the restart's heartbeat is a later second
    node.start_agent()
    _wait(
        "a heartbeat from the restarted agent",
        lambda: node.status().get("lastHeartbeat", "") > before["lastHeartbeat"],
    )
    after = node.status()
    names = [slot["name"] for slot in after["slots"]]
    assert names == [slot["name"] for slot in before["slots"]]
    assert len(set(names)) == len(names)
    assert [s["enteredCurrentState"] for s in after["slots"]] == [
        s["enteredCurrentState"] for s in before["slots"]
    ]


def test_steady_state_writes_at_most_once_per_update_interval(node: Node) -> None:
    node.start_agent()
    _published(node)
    _wait("the agent's metrics", lambda: node.writes() >= 1)
    first = node.writes()
    window = 3 * UPDATE + 0.5
    time.sleep(window)
    writes = node.writes() - first
    # One heartbeat per update interval; nothing else changes.
    assert 1 <= writes <= window // UPDATE + 1
