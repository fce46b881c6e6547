"""The GPUs a job is given: HTCondor's starter environment for each id form, device
hiding (STARTER_HIDE_GPU_DEVICES), and GPU usage from NVML's per-process answers.

The expectations are the manual's ("Configuration Macros": ENVIRONMENT_FOR_Assigned<name>,
ENVIRONMENT_VALUE_FOR_UnAssigned<name>; "Environment of a job": CUDA_VISIBLE_DEVICES,
NVIDIA_VISIBLE_DEVICES; "Managing a job": GPUsUsage, GPUsMemoryUsage) and, where the manual
is silent, HTCondor 25's starter (starter.cpp SetEnvironmentForAssignedRes, PublishToEnv;
nvidia_utils.cpp nvidia_env_var_to_exclude_list). Usage figures come from the H100's
recorded answers under load (shared/reference/nvml/h100-usage-under-load.json).
"""

from __future__ import annotations

from typing import Any

import classad2
import pytest

from kondor_core.api import ExecutionJob, SlotPolicySpec
from kondor_core.api.machine import Machine
from kondor_core.config import compile_policy
from kondor_core.config.effective import EffectivePolicy
from kondor_core.jobs.gpus import (
    DeviceReading,
    GpuDeviceNode,
    GpuPoll,
    GpuProcess,
    GpuSettings,
    GpuUsage,
    ProcessSample,
    SlotGpus,
    add_job_poll,
    add_slot_poll,
    devices_to_hide,
    gpu_environment,
    hidden_devices,
    job_usage_attributes,
    nvidia_visible_devices,
    parse_environment_for,
    parse_nvidia_information,
    slot_gpus,
    slot_usage_attributes,
    visible_mismatch,
)
from kondor_core.jobs.pod import DEVICE_PLUGIN, VISIBLE_DEVICES, gpu_pod_devices, job_pod
from kondor_core.slots import PartitionableSlot, carve, initial_slots, layout, slot_ads

H100 = "GPU-f2bd270c-c66e-0c7c-504e-e9af63626b3c"  # the real card's NVML UUID
OTHERS = (
    "GPU-0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0",
    "GPU-1c2d3e4f-5061-7283-94a5-b6c7d8e9f0a1",
    "GPU-2d3e4f50-6172-8394-a5b6-c7d8e9f0a1b2",
)
MIG = "MIG-7c0e5a12-9f3b-5d8e-a1c4-2b6f9e0d3a75"
DEFAULTS = GpuSettings()
LEGACY = GpuSettings(auto_set_nvidia_visible_devices=False)


def test_defaults_are_htcondors_use_feature_gpus() -> None:
    """param_info.in / `use feature : GPUs`: the knobs' defaults, and the two entries."""
    assert (
        DEFAULTS.environment_for == "GPU_DEVICE_ORDINAL=/(CUDA|OCL)//  CUDA_VISIBLE_DEVICES=/CUDA//"
    )
    assert DEFAULTS.unassigned_value == "10000"
    assert DEFAULTS.hide_devices is True
    rules, problems = parse_environment_for(DEFAULTS.environment_for)
    assert [(r.name, r.pattern, r.replacement) for r in rules] == [
        ("GPU_DEVICE_ORDINAL", "(CUDA|OCL)", ""),
        ("CUDA_VISIBLE_DEVICES", "CUDA", ""),
    ]
    assert problems == ()


@pytest.mark.parametrize(
    ("slot", "settings", "expected"),
    [
        # -short-uuid ids (Kondor's detection, condor_gpu_discovery's default): no CUDA or
        # OCL prefix to strip; NVIDIA_VISIBLE_DEVICES and CUDA_VISIBLE_DEVICES the full UUID
        (
            SlotGpus(True, "GPU-f2bd270c", (H100,)),
            DEFAULTS,
            {
                "_CONDOR_AssignedGPUs": "GPU-f2bd270c",
                "GPU_DEVICE_ORDINAL": "GPU-f2bd270c",
                "CUDA_VISIBLE_DEVICES": H100,
                "NVIDIA_VISIBLE_DEVICES": H100,
            },
        ),
        (
            SlotGpus(True, "GPU-f2bd270c", (H100,)),
            LEGACY,
            {
                "_CONDOR_AssignedGPUs": "GPU-f2bd270c",
                "GPU_DEVICE_ORDINAL": "GPU-f2bd270c",
                "CUDA_VISIBLE_DEVICES": "GPU-f2bd270c",  # CUDA takes the short id too
            },
        ),
        # two GPUs: the ids joined with "," (the starter's env_id_separator)
        (
            SlotGpus(True, "GPU-f2bd270c,GPU-0b1c2d3e", (H100, OTHERS[0])),
            LEGACY,
            {
                "_CONDOR_AssignedGPUs": "GPU-f2bd270c,GPU-0b1c2d3e",
                "GPU_DEVICE_ORDINAL": "GPU-f2bd270c,GPU-0b1c2d3e",
                "CUDA_VISIBLE_DEVICES": "GPU-f2bd270c,GPU-0b1c2d3e",
            },
        ),
        # MIG ids are never shortened and pass unchanged; NVIDIA_VISIBLE_DEVICES keeps MIG-
        (
            SlotGpus(True, MIG, (MIG,)),
            DEFAULTS,
            {
                "_CONDOR_AssignedGPUs": MIG,
                "GPU_DEVICE_ORDINAL": MIG,
                "CUDA_VISIBLE_DEVICES": MIG,
                "NVIDIA_VISIBLE_DEVICES": MIG,
            },
        ),
        # -by-index ids: /(CUDA|OCL)// and /CUDA// strip the prefix, CUDA0, CUDA1 -> 0,1
        (
            SlotGpus(True, "CUDA0, CUDA1", None),
            DEFAULTS,
            {
                "_CONDOR_AssignedGPUs": "CUDA0, CUDA1",
                "GPU_DEVICE_ORDINAL": "0,1",
                "CUDA_VISIBLE_DEVICES": "0,1",
                "NVIDIA_VISIBLE_DEVICES": "none",  # no DeviceUuid: the starter's join fails
            },
        ),
        (
            SlotGpus(True, "OCL1", None),
            LEGACY,
            {
                "_CONDOR_AssignedGPUs": "OCL1",
                "GPU_DEVICE_ORDINAL": "1",
                "CUDA_VISIBLE_DEVICES": "OCL1",
            },
        ),
        # no GPU assigned on a machine with GPUs: ENVIRONMENT_VALUE_FOR_UnAssignedGPUs
        (
            SlotGpus(True),
            DEFAULTS,
            {
                "_CONDOR_AssignedGPUs": "10000",
                "GPU_DEVICE_ORDINAL": "10000",
                "CUDA_VISIBLE_DEVICES": "10000",
                "NVIDIA_VISIBLE_DEVICES": "none",
            },
        ),
        # the manual's examples
        (
            SlotGpus(True, "CUDA1, CUDA2", None),
            GpuSettings(
                environment_for="VISIBLE_GPUS=/^/gpuid:/", auto_set_nvidia_visible_devices=False
            ),
            # the manual prints "gpuid:CUDA1, gpuid:CUDA2"; the starter joins with ","
            {"_CONDOR_AssignedGPUs": "CUDA1, CUDA2", "VISIBLE_GPUS": "gpuid:CUDA1,gpuid:CUDA2"},
        ),
        (
            SlotGpus(True),
            GpuSettings(
                environment_for="VISIBLE_GPUS",
                unassigned_value="none",
                auto_set_nvidia_visible_devices=False,
            ),
            {"_CONDOR_AssignedGPUs": "none", "VISIBLE_GPUS": "none"},
        ),
        # the wiki's bare names: CUDA_VISIBLE_DEVICES and GPU_DEVICE_ORDINAL keep digits and commas
        (
            SlotGpus(True, "CUDA0, CUDA3", None),
            GpuSettings(
                environment_for="CUDA_VISIBLE_DEVICES, GPU_DEVICE_ORDINAL",
                auto_set_nvidia_visible_devices=False,
            ),
            {
                "_CONDOR_AssignedGPUs": "CUDA0, CUDA3",
                "CUDA_VISIBLE_DEVICES": "0,3",
                "GPU_DEVICE_ORDINAL": "0,3",
            },
        ),
        # $1 in the replacement is the first group; a non-matching id passes unchanged
        (
            SlotGpus(True, "CUDA2, GPU-f2bd270c", None),
            GpuSettings(
                environment_for="DEV=/CUDA([0-9]+)/dev$1/", auto_set_nvidia_visible_devices=False
            ),
            {"_CONDOR_AssignedGPUs": "CUDA2, GPU-f2bd270c", "DEV": "dev2,GPU-f2bd270c"},
        ),
        # no ENVIRONMENT_FOR and nothing assigned: nothing but NVIDIA_VISIBLE_DEVICES
        (SlotGpus(True), GpuSettings(environment_for=""), {"NVIDIA_VISIBLE_DEVICES": "none"}),
        # a machine without GPUs: no GPU variable at all
        (SlotGpus(False), DEFAULTS, {}),
    ],
)
def test_job_environment(slot: SlotGpus, settings: GpuSettings, expected: dict[str, str]) -> None:
    assert gpu_environment(slot, settings) == expected


def test_unterminated_regex_is_reported_and_ends_the_list() -> None:
    rules, problems = parse_environment_for("A=/x/y B C")
    assert [r.name for r in rules] == []
    assert problems and "'A'" in problems[0] and "end marker" in problems[0]
    rules, problems = parse_environment_for("A B=|CUDA|| C")
    assert [(r.name, r.pattern) for r in rules] == [("A", None), ("B", "CUDA"), ("C", None)]


def test_settings_from_a_policys_macros() -> None:
    settings = GpuSettings.from_macros(
        {
            "environment_for_assignedgpus": "CUDA_VISIBLE_DEVICES",
            "ENVIRONMENT_VALUE_FOR_UnAssignedGPUs": "none",
            "STARTER_HIDE_GPU_DEVICES": "false",
            "AUTO_SET_NVIDIA_VISIBLE_DEVICES": "False",
        }
    )
    assert settings == GpuSettings("CUDA_VISIBLE_DEVICES", "none", False, False)
    assert GpuSettings.from_macros({}) == DEFAULTS


def four_gpu_machine() -> Machine:
    ids = ["GPU-" + uuid[4:12] for uuid in (H100, *OTHERS)]
    return Machine.model_validate(
        {
            "name": "gpu-node",
            "cpus": 8,
            "memory": "32Gi",
            "disk": "100Gi",
            "gpus": [
                {
                    "id": gpu,
                    "properties": {"DeviceUuid": uuid, "DeviceName": "NVIDIA H100 80GB HBM3"},
                }
                for gpu, uuid in zip(ids, (H100, *OTHERS), strict=True)
            ],
        }
    )


def dynamic_ad(request_gpus: int) -> Any:
    """The ad of the dynamic slot a job asking `request_gpus` gets on a fresh 4-GPU node."""
    result = layout(four_gpu_machine(), EffectivePolicy())
    (pslot,) = initial_slots(result)
    assert isinstance(pslot, PartitionableSlot)
    request: dict[str, int] = {"RequestCpus": 1, "RequestMemory": 512, "RequestDisk": 1024}
    if request_gpus:
        request["RequestGPUs"] = request_gpus
    after, _ = carve(pslot, classad2.ClassAd(request))  # type: ignore[misc]
    return next(ad for ad in slot_ads(result, [after]) if "_" in ad.name)


def test_slot_ads_of_a_carved_slot_give_the_assigned_gpus_uuid() -> None:
    """A 1-GPU dynamic slot of a 4-GPU node: its ad (as the slot ads publish it, and as a
    ClassAd) names one GPU, whose property ad carries the full UUID."""
    machine = four_gpu_machine()
    result = layout(machine, EffectivePolicy())
    (pslot,) = initial_slots(result)
    assert isinstance(pslot, PartitionableSlot)
    job = classad2.ClassAd(
        {"RequestCpus": 1, "RequestMemory": 512, "RequestDisk": 1024, "RequestGPUs": 1}
    )
    outcome = carve(pslot, job)
    pslot_after, _ = outcome  # type: ignore[misc]
    ads = {ad.name: ad for ad in slot_ads(result, [pslot_after])}
    dynamic = next(ad for name, ad in ads.items() if "_" in name)
    for form in (dynamic.attributes, dynamic.to_classad()):
        gpus = slot_gpus(form)
        assert gpus == SlotGpus(True, "GPU-f2bd270c", (H100,))
    assert (
        gpu_environment(slot_gpus(dynamic.attributes), LEGACY)["CUDA_VISIBLE_DEVICES"]
        == "GPU-f2bd270c"
    )
    partitionable = next(ad for name, ad in ads.items() if "_" not in name)
    # the partitionable slot's ad has GPUs (3 free) but no AssignedGPUs of a job
    assert slot_gpus(partitionable.attributes).has_gpus


def test_a_slot_without_a_gpu_on_a_gpu_machine_gets_the_unassigned_value() -> None:
    result = layout(four_gpu_machine(), EffectivePolicy())
    (pslot,) = initial_slots(result)
    assert isinstance(pslot, PartitionableSlot)
    job = classad2.ClassAd({"RequestCpus": 1, "RequestMemory": 512, "RequestDisk": 1024})
    pslot_after, _ = carve(pslot, job)  # type: ignore[misc]
    ads = slot_ads(result, [pslot_after])
    dynamic = next(ad for ad in ads if "_" in ad.name)
    gpus = slot_gpus(dynamic.attributes)
    assert gpus == SlotGpus(True)
    assert gpu_environment(gpus, DEFAULTS)["CUDA_VISIBLE_DEVICES"] == "10000"


# -- pods -------------------------------------------------------------------------------


def pod_for(slot: Any, **options: Any) -> dict[str, Any]:
    made = ExecutionJob.model_validate(
        {
            "metadata": {"name": "train", "namespace": "ml", "uid": "u-1"},
            "spec": {
                "pod": {"template": {"spec": {"containers": [{"name": "main", "image": "cuda"}]}}}
            },
        }
    )
    return job_pod(made, "u-1#1", "gpu-node", slot, job_ad_text="", machine_ad_text="", **options)


def env_of(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}


def test_a_pod_on_a_1_gpu_slot_is_given_its_gpu_by_uuid_not_by_the_device_plugin() -> None:
    slot = dynamic_ad(1).attributes
    pod = pod_for(slot)
    resources = pod["spec"]["containers"][0]["resources"]
    assert (
        "nvidia.com/gpu" not in resources["limits"]
        and "nvidia.com/gpu" not in resources["requests"]
    )
    env = env_of(pod)
    assert env["NVIDIA_VISIBLE_DEVICES"] == H100 == env["CUDA_VISIBLE_DEVICES"]
    assert env["_CONDOR_AssignedGPUs"] == "GPU-f2bd270c" == env["GPU_DEVICE_ORDINAL"]
    # device-plugin mode: the plugin is asked for one GPU (and the agent checks its choice)
    plugin = pod_for(slot, gpu_devices=DEVICE_PLUGIN)
    assert plugin["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert env_of(plugin)["NVIDIA_VISIBLE_DEVICES"] == H100


def test_a_pod_on_a_0_gpu_slot_of_a_gpu_node_sees_no_gpu() -> None:
    env = env_of(pod_for(dynamic_ad(0).attributes))
    assert env["NVIDIA_VISIBLE_DEVICES"] == "none"
    assert env["CUDA_VISIBLE_DEVICES"] == "10000"


def test_gpu_pod_devices_knob() -> None:
    assert gpu_pod_devices({}) == VISIBLE_DEVICES
    assert gpu_pod_devices({"kondor_gpu_pod_devices": "Device-Plugin"}) == DEVICE_PLUGIN
    with pytest.raises(ValueError, match="KONDOR_GPU_POD_DEVICES = 'dra'"):
        gpu_pod_devices({"KONDOR_GPU_POD_DEVICES": "dra"})


def test_pod_visible_devices_and_mismatch() -> None:
    slot = SlotGpus(True, "GPU-f2bd270c", (H100,))
    assert nvidia_visible_devices(slot) == H100
    assert nvidia_visible_devices(SlotGpus(True)) == "none"
    assert visible_mismatch(slot, H100) is None
    assert visible_mismatch(SlotGpus(True), "none") is None
    wrong = visible_mismatch(slot, OTHERS[0])
    assert wrong is not None and OTHERS[0] in wrong and H100 in wrong
    assert visible_mismatch(slot, "all") is not None
    assert visible_mismatch(slot, None) is not None


# -- device isolation -------------------------------------------------------------------

NODES = tuple(GpuDeviceNode(uuid, 195, minor) for minor, uuid in enumerate((H100, *OTHERS)))


@pytest.mark.parametrize(
    ("visible", "hidden_minors"),
    [
        (H100, (1, 2, 3)),  # the slot's GPU stays, the other three are hidden
        (f"{OTHERS[0]},{OTHERS[2]}", (0, 2)),
        ("", (0, 1, 2, 3)),  # a job without GPUs opens none of them
        ("all", ()),
        ("GPU-00000000-0000-0000-0000-000000000000", ()),  # unknown: the starter skips hiding
    ],
)
def test_hidden_devices(visible: str, hidden_minors: tuple[int, ...]) -> None:
    assert tuple(node.minor for node in hidden_devices(visible, NODES)) == hidden_minors


def test_hiding_follows_the_knob() -> None:
    slot = SlotGpus(True, "GPU-f2bd270c", (H100,))
    assert [n.path for n in devices_to_hide(slot, DEFAULTS, NODES)] == [
        "/dev/nvidia1",
        "/dev/nvidia2",
        "/dev/nvidia3",
    ]
    assert devices_to_hide(slot, GpuSettings(hide_devices=False), NODES) == ()


def test_nvidia_information_file() -> None:
    text = (
        "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 42\n"
        f"GPU UUID: \t {H100}\nVideo BIOS: \t 96.00.99.00.01\n"
        "Bus Type: \t PCIe\nDMA Size: \t 52 bits\nDevice Minor: \t 0\n"
    )
    assert parse_nvidia_information(text) == (H100, 0)
    assert parse_nvidia_information("Model: x\n") is None


# -- usage ------------------------------------------------------------------------------

#: The H100 under load: pid 438 holds 7453278208 bytes, its sample says smUtil 42; the
#: device says 100 % busy and 7965835264 bytes used.
BUSY = GpuPoll(
    seconds=10.0,
    processes=(GpuProcess(H100, 438, 7453278208),),
    samples=(ProcessSample(H100, 438, 42),),
    devices=(DeviceReading(H100, 100, 7965835264),),
)
IDLE = GpuPoll(seconds=10.0, devices=(DeviceReading(H100, 0, 503316480),))


def test_job_usage_from_the_recorded_h100_answers() -> None:
    usage = add_job_poll(GpuUsage(), BUSY, pids=[438])
    assert job_usage_attributes(usage) == {"GPUsUsage": 0.42, "GPUsMemoryUsage": 7108}
    # an idle poll halves the lifetime average; the memory peak stays
    usage = add_job_poll(usage, IDLE, pids=[438])
    assert job_usage_attributes(usage) == {"GPUsUsage": 0.21, "GPUsMemoryUsage": 7108}
    # another job's processes are not charged to this one
    other = add_job_poll(GpuUsage(), BUSY, pids=[439])
    assert job_usage_attributes(other) == {"GPUsUsage": 0.0, "GPUsMemoryUsage": 0}
    assert job_usage_attributes(GpuUsage()) == {}


def test_slot_usage_is_the_devices_own() -> None:
    usage = add_slot_poll(add_slot_poll(GpuUsage(), BUSY, [H100]), IDLE, [H100])
    assert slot_usage_attributes(usage) == {
        "DeviceGPUsAverageUsage": 0.5,
        "DeviceGPUsMemoryPeakUsage": 7597,  # ceil(7965835264 / MiB)
    }
    assert slot_usage_attributes(add_slot_poll(GpuUsage(), BUSY, [OTHERS[0]])) == {
        "DeviceGPUsAverageUsage": 0.0,
        "DeviceGPUsMemoryPeakUsage": 0,
    }


def test_the_gpu_knobs_reach_the_agent_without_a_warning() -> None:
    """`use feature : GPUs` and the GPU knobs compile into the macros the agent reads, and
    none is reported as having no effect."""
    spec = SlotPolicySpec.model_validate(
        {
            "condorConfig": "use feature : GPUs\n"
            "ENVIRONMENT_VALUE_FOR_UnAssignedGPUs = none\n"
            "STARTER_HIDE_GPU_DEVICES = false\n"
            "AUTO_SET_NVIDIA_VISIBLE_DEVICES = false\n"
            "KONDOR_GPU_POD_DEVICES = device-plugin\n"
        }
    )
    compiled = compile_policy(spec)
    # the feature's startd cron GPU monitor does not run; the warning says what does instead
    reported = [w for w in compiled.warnings if "GPU" in w.upper() and "GPUs_MONITOR" not in w]
    assert reported == [], compiled.warnings
    (monitor,) = [w for w in compiled.warnings if "GPUs_MONITOR" in w]
    assert "the Kondor agent measures GPU usage itself through NVML" in monitor
    settings = GpuSettings.from_macros(compiled.macros)
    assert settings == GpuSettings(DEFAULTS.environment_for, "none", False, False)
    assert gpu_pod_devices(compiled.macros) == DEVICE_PLUGIN
