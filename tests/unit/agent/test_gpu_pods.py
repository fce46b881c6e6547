"""Pod jobs on GPU slots through the agent's PodLauncher: the Pod it creates names the
slot's GPUs by UUID in NVIDIA_VISIBLE_DEVICES and asks the device plugin for none, unless
the SlotPolicy says KONDOR_GPU_POD_DEVICES = device-plugin."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import classad2

from kondor_agent.gpu_pods import UNREAD, PodGpuCheck, visible_devices
from kondor_agent.runtimes.pod import PodLauncher
from kondor_core.api import ExecutionJob
from kondor_core.api.machine import Machine
from kondor_core.config.effective import EffectivePolicy
from kondor_core.jobs.gpus import slot_gpus
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


# -- what the container got: read from its processes' environment, never silent ----------


def fake_proc(tmp_path: Path, environ: dict[int, dict[str, str]]) -> Path:
    proc = tmp_path / "proc"
    for pid, env in environ.items():
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "environ").write_bytes(
            b"\0".join(f"{k}={v}".encode() for k, v in env.items()) + b"\0"
        )
    return proc


def test_the_containers_visible_devices_are_read_from_its_processes(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, {41: {"PATH": "/bin", "NVIDIA_VISIBLE_DEVICES": H100}, 42: {}})
    assert visible_devices([40, 41], proc) == H100  # 40 is gone: the next one is read
    assert visible_devices([42], proc) is None  # a process without the variable
    assert visible_devices([40], proc) is UNREAD


def test_a_device_plugin_choice_other_than_the_slots_is_an_event_and_an_error(
    tmp_path: Path,
) -> None:
    posted: list[tuple[str, str]] = []
    proc = fake_proc(
        tmp_path, {7: {"NVIDIA_VISIBLE_DEVICES": OTHERS[2]}, 8: {"NVIDIA_VISIBLE_DEVICES": H100}}
    )
    check = PodGpuCheck(lambda reason, message: posted.append((reason, message)), proc)
    slot = slot_gpus(gpu_slot(1).attributes)
    check.expect(("default", "wrong"), slot)
    check.expect(("default", "right"), slot)
    check.check_pending(("default", "wrong"), lambda: [99])  # not running yet: checked later
    assert check.pending(("default", "wrong")) and posted == []
    message = check.check(("default", "wrong"), [7])
    assert message is not None and OTHERS[2] in message and H100 in message
    assert posted == [("GPUMismatch", message)]
    check.check_pending(("default", "wrong"), lambda: [7])  # once only
    assert len(posted) == 1 and not check.pending(("default", "wrong"))
    assert check.check(("default", "right"), [8]) is None and len(posted) == 1


def test_launching_a_gpu_pod_arms_the_check(tmp_path: Path) -> None:
    api = SimpleNamespace(api_client=None)
    pods = PodLauncher(api, "n0", cgroup_root=tmp_path)  # type: ignore[arg-type]
    pods.core = FakeCreates()  # type: ignore[assignment]
    handle = pods.launch(JOB, "default/train", gpu_slot(1), 'Owner = "alice"\n')
    assert pods.gpu_check.pending((handle.namespace, handle.name))
    assert pods.poll(handle) is None  # no Pod seen yet: nothing to read, still armed
    assert pods.gpu_check.pending((handle.namespace, handle.name))
