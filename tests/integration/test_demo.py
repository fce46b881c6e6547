"""The whole path on a dev cluster of its own, with the demo's nodes, the operator and one
agent per node: `kubectl apply` SlotPolicies and every selected node's ExecutionPoint shows
the slots `kondor simulate` gives that machine under the winning policy; unselected nodes
have none; editing a policy re-carves; deleting a Node removes its ExecutionPoint."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from kondor_core.api import ExecutionPointStatus, Machine, SlotPolicy, validate
from kondor_core.config import compile_policy
from kondor_core.sim import simulate
from kondor_devcluster.cluster import ClusterSpec, DevCluster, free_port

from .conftest import ROOT, skip_reason
from .waiting import eventually

pytestmark = pytest.mark.timeout(240)

DEMO = ROOT / "examples" / "demo"
GROUP, VERSION = "kondor.io", "v1alpha1"
SHAPE = ("Name", "SlotType", "Cpus", "Memory", "Disk", "GPUs", "AssignedGPUs")


class Demo:
    def __init__(self, spec: ClusterSpec, kubectl: str) -> None:
        self.spec = spec
        self.kubectl_bin = kubectl
        api = config.new_client_from_config(config_file=str(spec.kubeconfig), context="admin")
        self.objects = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)

    def kubectl(self, *args: str) -> str:
        result = subprocess.run(
            [self.kubectl_bin, f"--kubeconfig={self.spec.kubeconfig}", *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
        return result.stdout

    def published(self) -> dict[str, list[tuple[Any, ...]]]:
        eps = self.objects.list_cluster_custom_object(GROUP, VERSION, "executionpoints")["items"]
        return {
            ep["metadata"]["name"]: [
                tuple(slot.ad.get(key) for key in SHAPE)
                for slot in ExecutionPointStatus.model_validate(ep.get("status") or {}).slots
            ]
            for ep in eps
        }


def simulated(machine: Path, policy: dict[str, Any]) -> list[tuple[Any, ...]]:
    node = validate(Machine, yaml.safe_load(machine.read_text()), what=str(machine))
    spec = validate(SlotPolicy, policy, what="policy").spec
    ads = simulate(node, compile_policy(spec), []).slots
    return [tuple(ad.get(key) for key in SHAPE) for ad in ads]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    tmp = tmp_path_factory.mktemp("demo")
    loner = tmp / "loner.yaml"  # a node no demo policy but `everyone` selects
    loner.write_text(yaml.safe_dump({"name": "loner", "cpus": 2, "memory": "4Gi", "disk": 1048576}))
    spec = ClusterSpec(
        port=free_port(),
        kubeconfig=tmp / "kubeconfig",
        state_dir=tmp / "state",
        nodes=(*sorted((DEMO / "machines").glob("*.yaml")), loner),
        operator=True,
        agents=True,
    )
    cluster = DevCluster(spec, log=sys.stderr)
    cluster.start()
    try:
        yield Demo(spec, "kubectl")
    finally:
        cluster.stop()


def _policy(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((DEMO / "policies" / f"{name}.yaml").read_text())
    return loaded


def test_applied_policies_give_each_selected_node_the_simulated_slots(demo: Demo) -> None:
    demo.kubectl(
        "apply",
        "-f",
        str(DEMO / "policies" / "batch.yaml"),
        "-f",
        str(DEMO / "policies" / "gpu.yaml"),
    )
    started = time.monotonic()
    machines = DEMO / "machines"
    wanted = {
        "cpu-0": simulated(machines / "cpu-0.yaml", _policy("batch")),
        "cpu-1": simulated(machines / "cpu-1.yaml", _policy("batch")),
        "gpu-0": simulated(machines / "gpu-0.yaml", _policy("gpu")),
    }
    eventually(
        lambda: demo.published() == wanted, 15.0, "the simulated slots on every selected node"
    )
    assert time.monotonic() - started < 15
    assert "loner" not in demo.published()  # unselected: no ExecutionPoint

    # `everyone` selects every node; on the others higher priorities still win.
    demo.kubectl("apply", "-f", str(DEMO / "policies" / "everyone.yaml"))
    loner = simulated(Path(demo.spec.state_dir).parent / "loner.yaml", _policy("everyone"))
    eventually(
        lambda: demo.published() == {**wanted, "loner": loner}, 15.0, "loner's ExecutionPoint"
    )


def test_editing_a_policy_recarves_within_15s(demo: Demo) -> None:
    edited = _policy("batch")
    edited["spec"]["slotTypes"][0]["resources"] = "25%"
    demo.kubectl(
        "patch",
        "slotpolicy",
        "batch",
        "--type=merge",
        "-p",
        yaml.safe_dump({"spec": {"slotTypes": edited["spec"]["slotTypes"]}}),
    )
    wanted = simulated(DEMO / "machines" / "cpu-0.yaml", edited)
    started = time.monotonic()
    eventually(lambda: demo.published().get("cpu-0") == wanted, 15.0, "cpu-0 re-carved")
    assert time.monotonic() - started < 15


def test_kubectl_get_and_kondor_status_show_the_slots(demo: Demo) -> None:
    table = demo.kubectl("get", "executionpoints")
    assert table.split("\n")[0].split()[:4] == ["NAME", "NODE", "SLOTS", "CLAIMED"]
    assert "cpu-1" in table and "Owner" in table  # cpu-1's owner is busy: IS_OWNER
    status = subprocess.run(
        [
            sys.executable,
            "-m",
            "kondor_cli.main",
            "status",
            "--kubeconfig",
            str(demo.spec.kubeconfig),
            "-af",
            "Name",
            "State",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "slot1@gpu-0 Unclaimed" in status.stdout
    assert "slot2@cpu-1 Owner" in status.stdout


def test_deleting_a_node_removes_its_execution_point(demo: Demo) -> None:
    demo.core.delete_node("cpu-0")
    eventually(lambda: "cpu-0" not in demo.published(), 15.0, "cpu-0's ExecutionPoint gone")
