"""Slot ads: HTCondor's attribute names and units, GPU property ads, STARTD_ATTRS and
per-slot attributes, and the same ad as JSON and as a classad2 ClassAd."""

from __future__ import annotations

import json
from typing import Any

import classad2

from kondor_core.api.machine import Machine
from kondor_core.config.effective import EffectivePolicy, SlotTypeDef
from kondor_core.config.shares import parse_shares
from kondor_core.slots import (
    PartitionableSlot,
    Refusal,
    SlotAd,
    carve,
    claim,
    gpu_ad_name,
    initial_slots,
    layout,
    slot_ads,
)
from kondor_core.slots.carve import StaticSlot

GPUS = [
    {"id": "GPU-6a96bd13", "properties": {"Capability": 8.0, "DeviceName": "NVIDIA A100"}},
    {"id": "GPU-c4a646d7", "properties": {"Capability": 7.5, "DeviceName": "Tesla T4"}},
]


def machine(**fields: Any) -> Machine:
    values: dict[str, Any] = {
        "name": "node-a",
        "cpus": 8,
        "memory": "16Gi",
        "disk": "100Gi",
        "swap": "2Gi",
        "gpus": GPUS,
        "resources": {"cogs": 16},
        "attributes": {"OpSys": "LINUX", "Arch": "X86_64", "KeyboardIdle": 3600},
    }
    values.update(fields)
    return Machine.model_validate(values)


def by_name(ads: list[SlotAd]) -> dict[str, dict[str, Any]]:
    return {ad.name: ad.attributes for ad in ads}


def carved_ads(policy: EffectivePolicy | None = None) -> dict[str, dict[str, Any]]:
    result = layout(machine(), policy or EffectivePolicy())
    (slot,) = initial_slots(result)
    assert isinstance(slot, PartitionableSlot)
    request = classad2.ClassAd(
        {
            "RequestCpus": 2,
            "RequestMemory": 1024,
            "RequestDisk": 1024,
            "RequestGPUs": 1,
            "RequestCogs": 3,
            "RequireGPUs": classad2.ExprTree("Capability >= 8.0"),
            "Owner": "alice",
        }
    )
    outcome = carve(slot, request, request="job-1")
    assert not isinstance(outcome, Refusal)
    return by_name(slot_ads(result, [outcome[0]]))


def test_partitionable_slot_ad() -> None:
    ad = carved_ads()["slot1@node-a"]
    expected = {
        "Name": "slot1@node-a",
        "Machine": "node-a",
        "MyType": "Machine",
        "SlotID": 1,
        "SlotTypeID": 1,
        "SlotType": "Partitionable",
        "PartitionableSlot": True,
        "DynamicSlot": False,
        "State": "Unclaimed",
        "Activity": "Idle",
        # what is left
        "Cpus": 6,
        "Memory": 16384 - 1024,
        "Disk": 100 * 1024 * 1024 - 1024,
        "VirtualMemory": 2 * 1024 * 1024,  # KiB
        "Cogs": 13,
        "GPUs": 1,
        # the slot
        "TotalSlotCpus": 8,
        "TotalSlotMemory": 16384,
        "TotalSlotDisk": 100 * 1024 * 1024,
        "TotalSlotCogs": 16,
        "TotalSlotGPUs": 2,
        # the machine
        "TotalCpus": 8,
        "DetectedCpus": 8,
        "TotalMemory": 16384,
        "DetectedMemory": 16384,
        "TotalDisk": 100 * 1024 * 1024,
        "TotalVirtualMemory": 2 * 1024 * 1024,
        "TotalCogs": 16,
        "DetectedCogs": 16,
        "TotalGPUs": 2,
        "DetectedGPUs": "GPU-6a96bd13, GPU-c4a646d7",
        # the free GPU, nested as condor_gpu_discovery -nested publishes it
        "AssignedGPUs": "GPU-c4a646d7",
        "AvailableGPUs": "{ GPUs_GPU_c4a646d7 }",
        "GPUs_GPU_c4a646d7": {"Id": "GPU-c4a646d7", "Capability": 7.5, "DeviceName": "Tesla T4"},
        # children
        "NumDynamicSlots": 1,
        "ChildName": ["slot1_1@node-a"],
        "ChildCpus": [2],
        "ChildMemory": [1024],
        "ChildDisk": [1024],
        "ChildGPUs": [1],
        "ChildState": ["Claimed"],
        "ChildActivity": ["Busy"],
        # policy and facts
        "Start": True,
        "Rank": 0.0,
        "Requirements": "START && WithinResourceLimits",
        "OpSys": "LINUX",
        "KeyboardIdle": 3600,
        "TotalSlots": 2,
    }
    assert {key: ad.get(key) for key in expected} == expected
    assert "GPUs_GPU_6a96bd13" not in ad


def test_dynamic_slot_ad() -> None:
    ad = carved_ads()["slot1_1@node-a"]
    expected = {
        "Name": "slot1_1@node-a",
        "SlotID": 1,
        "SlotType": "Dynamic",
        "PartitionableSlot": False,
        "DynamicSlot": True,
        "State": "Claimed",
        "Activity": "Busy",
        "RemoteOwner": "alice",
        "RemoteUser": "alice",
        "Cpus": 2,
        "TotalSlotCpus": 2,
        "Memory": 1024,
        "Disk": 1024,
        "Cogs": 3,
        "TotalSlotCogs": 3,
        "TotalCogs": 16,
        "GPUs": 1,
        "AssignedGPUs": "GPU-6a96bd13",
        "AvailableGPUs": "{ GPUs_GPU_6a96bd13 }",
        "GPUs_GPU_6a96bd13": {
            "Id": "GPU-6a96bd13",
            "Capability": 8.0,
            "DeviceName": "NVIDIA A100",
        },
        "Requirements": "START",
    }
    assert {key: ad.get(key) for key in expected} == expected
    assert "WithinResourceLimits" not in ad and "ChildCpus" not in ad


def test_ads_are_json() -> None:
    ads = carved_ads()
    assert json.loads(json.dumps(list(ads.values()))) == list(ads.values())


def test_gpu_property_ads_are_named_after_the_id() -> None:
    assert gpu_ad_name("GPU-6a96bd13") == "GPUs_GPU_6a96bd13"
    assert gpu_ad_name("MIG-1.2:3") == "GPUs_MIG_1_2_3"


def test_the_classad_form_evaluates_like_the_startd_s() -> None:
    result = layout(machine(), EffectivePolicy())
    (slot,) = initial_slots(result)
    ad = slot_ads(result, [slot])[0].to_classad()
    assert ad.eval("VirtualMemory") == 2 * 1024 * 1024
    # the nested GPU ads are reachable through AvailableGPUs, as RequireGPUs needs them
    ids = [classad2.ExprTree(f"AvailableGPUs[{i}].Id").eval(ad) for i in (0, 1)]
    assert ids == ["GPU-6a96bd13", "GPU-c4a646d7"]
    assert classad2.ExprTree("AvailableGPUs[0].Capability >= 8.0").eval(ad) is True
    assert classad2.ExprTree("GPUs_GPU_6a96bd13.DeviceName").eval(ad) == "NVIDIA A100"

    def fits(**request: Any) -> bool:
        job = classad2.ClassAd(request)
        return classad2.ExprTree("MY.Requirements").eval(ad, job) is True

    assert fits(RequestCpus=8, RequestMemory=16384, RequestDisk=1024)
    assert not fits(RequestCpus=9, RequestMemory=1, RequestDisk=1)
    assert fits(RequestCpus=1, RequestMemory=1, RequestDisk=1, RequestCogs=16)
    assert not fits(RequestCpus=1, RequestMemory=1, RequestDisk=1, RequestCogs=17)
    assert fits(RequestCpus=1, RequestMemory=1, RequestDisk=1, RequestGPUs=2)
    assert not fits(RequestCpus=1, RequestMemory=1, RequestDisk=1, RequestGPUs=3)


def test_favorite_color_startd_attrs_and_per_slot_attributes() -> None:
    # favorite_color = "blue"; favorite_season = "summer"; SLOT2_favorite_color = "green";
    # SLOT3_favorite_season = "spring"; STARTD_ATTRS = favorite_color, favorite_season;
    # SLOT4_STARTD_ATTRS = favorite_movie; SLOT4_favorite_movie = "Star Wars"
    policy = EffectivePolicy(
        slot_types=(SlotTypeDef(1, 4, False, parse_shares("auto", field="t")),),
        startd_attrs={"favorite_color": '"blue"', "favorite_season": '"summer"'},
        slot_attrs={
            2: {"favorite_color": '"green"'},
            3: {"favorite_season": '"spring"'},
            4: {"favorite_movie": '"Star Wars"'},
        },
    )
    result = layout(machine(), policy)
    ads = by_name(slot_ads(result, initial_slots(result)))
    seen = {
        name: (ad["favorite_color"], ad["favorite_season"], ad.get("favorite_movie"))
        for name, ad in ads.items()
    }
    assert seen == {
        "slot1@node-a": ("blue", "summer", None),
        "slot2@node-a": ("green", "summer", None),
        "slot3@node-a": ("blue", "spring", None),
        "slot4@node-a": ("blue", "summer", "Star Wars"),
    }


def test_attributes_are_values_when_literal_and_source_text_when_expressions() -> None:
    policy = EffectivePolicy(
        startd_attrs={"HasFoo": "true", "Weight": "2.5", "Load": "LoadAvg * 2", "Site": '"a"'},
        slot_attrs={1: {"Load": "0"}},
        expressions={"START": "KeyboardIdle > 15 * 60", "RANK": 'TARGET.Owner == "alice"'},
    )
    result = layout(machine(), policy)
    ad = slot_ads(result, initial_slots(result))[0]
    assert {key: ad.attributes[key] for key in ("HasFoo", "Weight", "Site", "Load")} == {
        "HasFoo": True,
        "Weight": 2.5,
        "Site": "a",
        "Load": 0,  # the slot's own literal replaces the machine-wide expression
    }
    assert ad.attributes["Start"] == "KeyboardIdle > 15 * 60"
    assert ad.attributes["Rank"] == 'TARGET.Owner == "alice"'
    assert "Start" in ad.expressions and "Load" not in ad.expressions
    classad = ad.to_classad()
    assert classad.eval("Start") is True  # KeyboardIdle is 3600
    assert classad.eval("Load") == 0


def test_consumption_expressions_are_advertised_on_the_partitionable_slot() -> None:
    policy = EffectivePolicy(
        slot_types=(
            SlotTypeDef(
                1,
                1,
                True,
                parse_shares("100%", field="t"),
                consumption_policy=True,
                consumption={"cpus": "TARGET.RequestCpus"},
            ),
        ),
    )
    result = layout(machine(), policy)
    ad = slot_ads(result, initial_slots(result))[0]
    assert ad.attributes["ConsumptionCpus"] == "TARGET.RequestCpus"
    assert ad.attributes["ConsumptionMemory"] == "quantize(target.RequestMemory,{128})"
    assert "ConsumptionCogs" in ad.expressions


def test_static_slot_ads_and_claims() -> None:
    policy = EffectivePolicy(
        slot_types=(SlotTypeDef(1, 2, False, parse_shares("auto", field="t")),),
    )
    result = layout(machine(), policy)
    first, second = initial_slots(result)
    assert isinstance(first, StaticSlot)
    claimed = claim(first, classad2.ClassAd({"RequestCpus": 1, "Owner": "bob"}), request="j")
    assert isinstance(claimed, StaticSlot)
    ads = by_name(slot_ads(result, [claimed, second]))
    one, two = ads["slot1@node-a"], ads["slot2@node-a"]
    assert (one["SlotType"], one["State"], one["Activity"], one["RemoteOwner"]) == (
        "Static",
        "Claimed",
        "Busy",
        "bob",
    )
    assert (two["State"], two["Activity"]) == ("Unclaimed", "Idle")
    assert (one["Cpus"], one["TotalSlotCpus"], one["Memory"], one["GPUs"]) == (4, 4, 8192, 1)
    assert (one["AssignedGPUs"], two["AssignedGPUs"]) == ("GPU-6a96bd13", "GPU-c4a646d7")
    assert one["Requirements"] == "START"
    assert (one["PartitionableSlot"], one["DynamicSlot"]) == (False, False)


def test_a_machine_without_gpus_advertises_no_gpu_attributes() -> None:
    result = layout(machine(gpus=[]), EffectivePolicy())
    ad = slot_ads(result, initial_slots(result))[0].attributes
    assert not [key for key in ad if "GPU" in key]
    assert "GPUs" not in ad["WithinResourceLimits"]
