"""HTCondor's GPU-slot cases, through the core's layout and slot ads as
`kondor simulate` uses them:

- src/condor_tests/cmd_gpu_discovery.run: 6 cores, 4 GPUs, `use FEATURE : StaticSlots`
  ("GPUs were distributed evenly"): 4 slots have GPUs == 1. The startd deals a resource's
  `auto` share out as ResAttributes.cpp does ("distribute integral values evenly among
  slots, with excess going to first slots"): each auto slot in turn gets
  ceil(left / auto slots left), so the first slots get one when there are fewer GPUs than
  slots, and the excess when there are more.
- OFFLINE_MACHINE_RESOURCE_GPUS ("Configuration Macros": "resources that are currently
  offline, and therefore should not be allocated to a slot"): the GPU is in no slot, and every
  slot ad shows OfflineGPUs.
- A GPU constraint in SLOT_TYPE ("Configuring GPUs": `GPUs = 1 : Capability >= 8.0`) against
  the properties detection reports for real cards.
"""

from __future__ import annotations

from typing import Any

import classad2
import pytest

from kondor_core.api import SlotPolicySpec
from kondor_core.api.machine import Machine
from kondor_core.config import compile_policy
from kondor_core.slots import PartitionableSlot, carve, initial_slots, layout, slot_ads

#: condor_gpu_discovery -simulate:0,4's ids.
SIMULATED = ("GPU-a0223334", "GPU-b1223334", "GPU-c2223334", "GPU-d3223334")
#: What detection reports of the recorded cards (kondor_agent.detect's README and fixtures).
H100 = {"DeviceName": "NVIDIA H100 80GB HBM3", "Capability": 9.0, "GlobalMemoryMb": 81559}
A100 = {"DeviceName": "NVIDIA A100-SXM4-40GB", "Capability": 8.0, "GlobalMemoryMb": 40960}


def machine(cpus: int, gpus: dict[str, dict[str, Any]]) -> Machine:
    return Machine.model_validate(
        {
            "name": "n",
            "cpus": cpus,
            "memory": f"{cpus}Gi",
            "disk": "10Gi",
            "gpus": [{"id": gpu, "properties": props} for gpu, props in gpus.items()],
        }
    )


def ads(made: Machine, config: str) -> dict[str, dict[str, Any]]:
    policy = compile_policy(SlotPolicySpec.model_validate({"condorConfig": config}))
    result = layout(made, policy)
    return {ad.name: ad.attributes for ad in slot_ads(result, initial_slots(result))}


def test_cmd_gpu_discovery_four_gpus_dealt_to_six_static_slots() -> None:
    found = ads(machine(6, {gpu: {} for gpu in SIMULATED}), "use FEATURE : StaticSlots")
    assert [ad["GPUs"] for ad in found.values()] == [1, 1, 1, 1, 0, 0]
    assert [ad.get("AssignedGPUs") for ad in found.values()][:4] == list(SIMULATED)


@pytest.mark.parametrize(
    ("gpus", "slots", "expected"),
    [
        (5, 3, [2, 2, 1]),  # the excess goes to the first slots
        (2, 4, [1, 1, 0, 0]),
        (4, 4, [1, 1, 1, 1]),
        (1, 2, [1, 0]),
    ],
)
def test_auto_gpus_with_excess_to_the_first_slots(
    gpus: int, slots: int, expected: list[int]
) -> None:
    ids = {f"GPU-{index:08x}": {} for index in range(gpus)}
    found = ads(machine(slots, ids), f"NUM_SLOTS = {slots}")
    assert [ad["GPUs"] for ad in found.values()] == expected
    held = [
        gpu for ad in found.values() for gpu in (ad.get("AssignedGPUs") or "").split(",") if gpu
    ]
    assert sorted(held) == sorted(ids)  # every GPU in exactly one slot


def test_an_explicit_gpu_share_is_taken_before_auto_ones() -> None:
    config = (
        "SLOT_TYPE_1 = cpus=1, gpus=2\nNUM_SLOTS_TYPE_1 = 1\n"
        "SLOT_TYPE_2 = cpus=1\nNUM_SLOTS_TYPE_2 = 3\n"
    )
    found = ads(machine(4, {f"GPU-{i:08x}": {} for i in range(4)}), config)
    assert [ad["GPUs"] for ad in found.values()] == [2, 1, 1, 0]


def test_an_offline_gpu_is_in_no_slot_and_every_slot_shows_it() -> None:
    made = machine(4, {gpu: {} for gpu in SIMULATED})
    found = ads(made, "OFFLINE_MACHINE_RESOURCE_GPUS = GPU-b1223334")
    (pslot,) = found.values()
    assert pslot["GPUs"] == 3
    assert "GPU-b1223334" not in pslot["AssignedGPUs"]
    assert pslot["OfflineGPUs"] == "GPU-b1223334"
    static = ads(made, "OFFLINE_MACHINE_RESOURCE_GPUS = GPU-a0223334, GPU-c2223334\nNUM_SLOTS = 4")
    assert [ad["GPUs"] for ad in static.values()] == [1, 1, 0, 0]
    assert [ad["AssignedGPUs"] for ad in static.values() if ad["GPUs"]] == [
        "GPU-b1223334",
        "GPU-d3223334",
    ]
    assert {ad["OfflineGPUs"] for ad in static.values()} == {"GPU-a0223334,GPU-c2223334"}


def test_a_job_is_never_given_an_offline_gpu() -> None:
    made = machine(4, {gpu: {} for gpu in SIMULATED})
    policy = compile_policy(
        SlotPolicySpec.model_validate(
            {"condorConfig": "OFFLINE_MACHINE_RESOURCE_GPUS = GPU-a0223334"}
        )
    )
    assert not [w for w in policy.warnings if "OFFLINE" in w], policy.warnings
    (pslot,) = initial_slots(layout(made, policy))
    assert isinstance(pslot, PartitionableSlot)
    job = classad2.ClassAd(
        {"RequestCpus": 1, "RequestMemory": 64, "RequestDisk": 64, "RequestGPUs": 3}
    )
    _, child = carve(pslot, job)  # type: ignore[misc]
    assert child.gpus == ("GPU-b1223334", "GPU-c2223334", "GPU-d3223334")


def test_a_gpu_constraint_in_slot_type_against_real_properties() -> None:
    made = machine(4, {"GPU-6a96bd13": A100, "GPU-f2bd270c": H100, "GPU-c4a646d7": A100})
    config = (
        'SLOT_TYPE_1 = cpus=1, gpus=1 : DeviceName == "NVIDIA H100 80GB HBM3"\n'
        "NUM_SLOTS_TYPE_1 = 1\n"
        "SLOT_TYPE_2 = cpus=1, gpus=2 : Capability >= 8.0 && GlobalMemoryMb < 50000\n"
        "NUM_SLOTS_TYPE_2 = 1\n"
    )
    found = list(ads(made, config).values())
    assert found[0]["AssignedGPUs"] == "GPU-f2bd270c"
    assert found[1]["AssignedGPUs"] == "GPU-6a96bd13,GPU-c4a646d7"
