"""Pod jobs on GPU slots through the agent's PodLauncher: the Pod it creates names the
slot's GPUs by UUID in NVIDIA_VISIBLE_DEVICES and asks the device plugin for none, unless
the SlotPolicy says KONDOR_GPU_POD_DEVICES = device-plugin."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import classad2

from kondor_agent.runtimes.pod import PodLauncher
from kondor_core.api import ExecutionJob
from kondor_core.api.machine import Machine
from kondor_core.config.effective import EffectivePolicy
from kondor_core.slots import PartitionableSlot, SlotAd, carve, initial_slots, layout, slot_ads

H100 = "GPU-f2bd270c-c66e-0c7c-504e-e9af63626b3c"
OTHERS = (
    "GPU-0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0",
    "GPU-1c2d3e4f-5061-7283-94a5-b6c7d8e9f0a1",
    "GPU-2d3e4f50-6172-8394-a5b6-c7d8e9f0a1b2",
)
JOB = ExecutionJob.model_validate(
    {
        "metadata": {"name": "train", "namespace": "default", "uid": "u-1"},
        "spec": {
            "owner": "alice",
            "pod": {"template": {"spec": {"containers": [{"name": "main", "image": "cuda"}]}}},
        },
        "status": {"claimId": "c#1"},
    }
)


class FakeCreates:
    def __init__(self) -> None:
        self.created: list[dict[str, Any]] = []

    def create(self, namespace: str, body: dict[str, Any]) -> None:
        self.created.append(body)


def gpu_slot(request_gpus: int) -> SlotAd:
    machine = Machine.model_validate(
        {
            "name": "n0",
            "cpus": 8,
            "memory": "32Gi",
            "disk": "100Gi",
            "gpus": [
                {"id": "GPU-" + u[4:12], "properties": {"DeviceUuid": u}} for u in (H100, *OTHERS)
            ],
        }
    )
    result = layout(machine, EffectivePolicy())
    (pslot,) = initial_slots(result)
    assert isinstance(pslot, PartitionableSlot)
    request = {"RequestCpus": 1, "RequestMemory": 64, "RequestDisk": 1024}
    if request_gpus:
        request["RequestGPUs"] = request_gpus
    after, _ = carve(pslot, classad2.ClassAd(request))  # type: ignore[misc]
    return next(ad for ad in slot_ads(result, [after]) if "_" in ad.name)


def launch(tmp_path: Path, macros: dict[str, str], slot: SlotAd) -> dict[str, Any]:
    api = SimpleNamespace(api_client=None)
    pods = PodLauncher(api, "n0", cgroup_root=tmp_path)  # type: ignore[arg-type]
    pods.configure(macros)
    core = FakeCreates()
    pods.core = core  # type: ignore[assignment]
    pods.launch(JOB, "default/train", slot, 'Owner = "alice"\n')
    [pod] = core.created
    return pod


def container(pod: dict[str, Any]) -> tuple[dict[str, str], dict[str, Any]]:
    main = pod["spec"]["containers"][0]
    return {e["name"]: e["value"] for e in main["env"]}, main["resources"]


def test_the_pod_names_its_slots_gpu_and_asks_the_device_plugin_for_none(tmp_path: Path) -> None:
    env, resources = container(launch(tmp_path, {}, gpu_slot(1)))
    assert env["NVIDIA_VISIBLE_DEVICES"] == H100
    assert env["CUDA_VISIBLE_DEVICES"] == H100
    assert env["_CONDOR_AssignedGPUs"] == "GPU-f2bd270c"
    assert "nvidia.com/gpu" not in resources["limits"]


def test_device_plugin_mode_and_the_policys_gpu_knobs(tmp_path: Path) -> None:
    macros = {"KONDOR_GPU_POD_DEVICES": "device-plugin", "AUTO_SET_NVIDIA_VISIBLE_DEVICES": "false"}
    env, resources = container(launch(tmp_path, macros, gpu_slot(2)))
    assert resources["limits"]["nvidia.com/gpu"] == "2"
    assert env["CUDA_VISIBLE_DEVICES"] == "GPU-f2bd270c,GPU-0b1c2d3e"  # AssignedGPUs exactly
    assert env["NVIDIA_VISIBLE_DEVICES"] == f"{H100},{OTHERS[0]}"


def test_a_bad_pod_devices_knob_is_logged_and_the_default_kept(tmp_path: Path) -> None:
    env, resources = container(launch(tmp_path, {"KONDOR_GPU_POD_DEVICES": "dra"}, gpu_slot(0)))
    assert env["NVIDIA_VISIBLE_DEVICES"] == "none" and env["CUDA_VISIBLE_DEVICES"] == "10000"
    assert "nvidia.com/gpu" not in resources["limits"]
