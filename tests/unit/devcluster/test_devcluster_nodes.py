"""Simulated nodes from machine files, and kwok's pod stages (kondor_devcluster.nodes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kondor_core.api.machine import Machine
from kondor_devcluster import nodes

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "machines"


@pytest.mark.parametrize(
    ("machine", "capacity"),
    [
        (
            {"name": "n1", "cpus": 4, "memory": "8Gi", "disk": 1048576},
            {"cpu": "4", "memory": "8192Mi", "pods": "110", "ephemeral-storage": "1048576Ki"},
        ),
        (
            {"name": "n2", "cpus": 2, "memory": 2048},
            {"cpu": "2", "memory": "2048Mi", "pods": "110"},
        ),
        (
            {
                "name": "g1",
                "cpus": 8,
                "memory": "16Gi",
                "gpus": [{"id": "GPU-0"}, {"id": "GPU-1"}],
                "resources": {"Cogs": 16, "half": 0.5},
            },
            {
                "cpu": "8",
                "memory": "16384Mi",
                "pods": "110",
                "nvidia.com/gpu": "2",
                "kondor.io/cogs": "16",
                "kondor.io/half": "0.5",
            },
        ),
    ],
)
def test_capacity_follows_the_machine_file(
    machine: dict[str, Any], capacity: dict[str, str]
) -> None:
    node = nodes.node_manifest(Machine.model_validate(machine))

    assert node["status"]["capacity"] == capacity
    assert node["status"]["allocatable"] == capacity


def test_node_is_managed_by_kwok_and_labelled_from_the_file() -> None:
    machine = Machine.model_validate(
        {"name": "n1", "cpus": 1, "memory": 512, "labels": {"pool": "a"}}
    )
    node = nodes.node_manifest(machine)

    assert node["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
    assert node["metadata"]["labels"]["pool"] == "a"
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == "n1"


def test_a_machine_name_that_cannot_name_a_node_is_refused() -> None:
    machine = Machine.model_validate({"name": "Node_A", "cpus": 1, "memory": 512})
    with pytest.raises(ValueError, match="'Node_A' cannot name a Node"):
        nodes.node_manifest(machine)


def test_example_simulated_machines_become_nodes() -> None:
    files = sorted(EXAMPLES.glob("kwok-*.yaml"))
    assert files
    for path in files:
        node = nodes.node_manifest(nodes.load_machine(path))
        assert node["metadata"]["name"]


def test_a_broken_machine_file_names_itself(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\ncpus: 0\nmemory: 1\n")
    with pytest.raises(ValueError, match=r"bad\.yaml: not a machine description"):
        nodes.load_machine(path)


def test_pod_stages_use_the_documented_annotations() -> None:
    stages = list(yaml.safe_load_all(nodes.kwok_config_yaml()))
    by_name = {stage["metadata"]["name"]: stage for stage in stages}

    assert set(by_name) == {
        "kondor-node-ready",
        "kondor-node-heartbeat",
        "kondor-pod-running",
        "kondor-pod-finished",
        "kondor-pod-delete",
    }
    finished = by_name["kondor-pod-finished"]["spec"]
    assert finished["delay"]["durationFrom"]["expressionFrom"] == (
        '.metadata.annotations["kondor.io/sim-duration"]'
    )
    assert nodes.SIM_EXIT_CODE_ANNOTATION in finished["next"]["statusTemplate"]
    assert by_name["kondor-pod-delete"]["spec"]["next"] == {"delete": True}


def test_a_simulated_node_reports_its_status_as_often_as_a_kubelet() -> None:
    """The kubelet writes an unchanged Node status every 5 minutes (nodeStatusReportFrequency)
    and renews its Lease every 10 s; kwok's own lease-less heartbeat would write every 20-45 s.
    kwok draws each delay between the bounds: 1 to 9 minutes, 5 on average."""
    stages = {
        s["metadata"]["name"]: s["spec"] for s in yaml.safe_load_all(nodes.kwok_config_yaml())
    }
    heartbeat = stages["kondor-node-heartbeat"]
    assert heartbeat["resourceRef"] == {"apiGroup": "v1", "kind": "Node"}
    assert heartbeat["delay"] == {
        "durationMilliseconds": 60_000,
        "jitterDurationMilliseconds": 540_000,
    }
    assert "lastHeartbeatTime" in heartbeat["next"]["statusTemplate"]
    ready = stages["kondor-node-ready"]["next"]["statusTemplate"]
    assert "phase: Running" in ready and "capacity" not in ready  # the machine file's stays
