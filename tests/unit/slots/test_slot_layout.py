"""Slot layouts: every example of the reference's "Dividing System Resources in Multi-core
Machines", "Dynamic Provisioning" and "Configuring GPUs", and every impossible layout."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from kondor_core.api.machine import Machine
from kondor_core.config.effective import EffectivePolicy, SlotTypeDef
from kondor_core.config.shares import parse_shares
from kondor_core.slots import LayoutError, layout


def machine(**fields: Any) -> Machine:
    values: dict[str, Any] = {"name": "node-a", "cpus": 4, "memory": 256}
    values.update(fields)
    return Machine.model_validate(values)


def slot_type(
    type_id: int,
    text: str,
    count: int | str = 1,
    *,
    partitionable: bool = False,
    consumption_policy: bool = False,
    consumption: Mapping[str, str] | None = None,
) -> SlotTypeDef:
    return SlotTypeDef(
        id=type_id,
        count=count,
        partitionable=partitionable,
        shares=parse_shares(text, field=f"SLOT_TYPE_{type_id}"),
        consumption_policy=consumption_policy,
        consumption=consumption or {},
    )


def policy(*types: SlotTypeDef, **fields: Any) -> EffectivePolicy:
    return EffectivePolicy(slot_types=types, **fields)


# --- "a machine with 4 cores and 256 Mbytes of RAM": types 1-3 and 4-6 are equivalent ----

FOUR_CORES = {"cpus": 4, "memory": 256, "disk": 1_000_000, "swap": 512}
MANUAL_TYPES = {
    1: "cpus=2, ram=128, swap=25%, disk=1/2",
    2: "cpus=1/2, memory=128, virt=25%, disk=50%",
    3: "c=1/2, m=50%, v=1/4, disk=1/2",
    4: "c=25%, m=64, v=1/4, d=25%",
    5: "25%",
    6: "1/4",
}
HALF = {"cpus": 2, "memory": 128, "swap": 128, "disk": 500_000}
QUARTER = {"cpus": 1, "memory": 64, "swap": 128, "disk": 250_000}


@pytest.mark.parametrize(
    ("type_id", "expected"),
    [(1, HALF), (2, HALF), (3, HALF), (4, QUARTER), (5, QUARTER), (6, QUARTER)],
)
def test_manual_slot_types_1_to_6(type_id: int, expected: dict[str, int]) -> None:
    result = layout(machine(**FOUR_CORES), policy(slot_type(type_id, MANUAL_TYPES[type_id])))
    (slot,) = result.slots
    assert dict(slot.resources) == expected
    assert slot.type_id == type_id
    assert not slot.partitionable
    # what the one slot does not take stays unassigned, never silently given away
    assert result.unassigned == {r: FOUR_CORES[r] - expected[r] for r in expected}


@pytest.mark.parametrize("memory_share", ["mem=64", "mem=1/2", "mem=50%", "mem=auto"])
def test_manual_128_mbyte_memory_shares_are_the_same(memory_share: str) -> None:
    # "in a machine with 128 Mbytes of RAM, all the following definitions result in the
    # same allocation amount" - for two slots of the type.
    result = layout(machine(cpus=2, memory=128), policy(slot_type(1, memory_share, 2)))
    assert [slot.resources["memory"] for slot in result.slots] == [64, 64]


def test_manual_disk_auto_and_everything_else_half() -> None:
    node = machine(cpus=4, memory=1024, disk=1000, swap=2048)
    one = layout(node, policy(slot_type(1, "cpus=1, ram=1/2, swap=50%")))
    two = layout(node, policy(slot_type(1, "cpus=1, disk=auto, 50%")))
    assert one.slots[0].resources == two.slots[0].resources
    assert dict(one.slots[0].resources) == {"cpus": 1, "memory": 512, "swap": 1024, "disk": 1000}


def test_manual_ten_percent_and_the_rest_evenly_divide_ninety() -> None:
    result = layout(
        machine(cpus=4, memory=1000),
        policy(slot_type(1, "mem=10%"), slot_type(2, "auto", 3)),
    )
    assert [slot.resources["memory"] for slot in result.slots] == [100, 300, 300, 300]
    assert [slot.resources["cpus"] for slot in result.slots] == [1, 1, 1, 1]
    assert [slot.type_id for slot in result.slots] == [1, 2, 2, 2]
    assert [slot.slot_id for slot in result.slots] == [1, 2, 3, 4]


def test_auto_divides_per_resource() -> None:
    # cpus explicit for type 1 but memory auto: each resource is divided on its own.
    result = layout(
        machine(cpus=8, memory=1000), policy(slot_type(1, "cpus=5"), slot_type(2, "mem=300", 3))
    )
    assert [s.resources["cpus"] for s in result.slots] == [5, 1, 1, 1]
    assert [s.resources["memory"] for s in result.slots] == [100, 300, 300, 300]


def test_a_fraction_never_gives_less_than_one_core() -> None:
    result = layout(machine(cpus=4), policy(slot_type(1, "cpus=10%"), slot_type(2, "auto")))
    assert [s.resources["cpus"] for s in result.slots] == [1, 3]


def test_rounding_floors_and_reports_leftovers() -> None:
    result = layout(machine(cpus=5, memory=1001, disk=10, swap=0), policy(slot_type(1, "auto", 3)))
    assert [s.resources["cpus"] for s in result.slots] == [1, 1, 1]
    assert [s.resources["memory"] for s in result.slots] == [333, 333, 333]
    assert [s.resources["disk"] for s in result.slots] == [3, 3, 3]
    assert result.unassigned == {"cpus": 2, "memory": 2, "disk": 1, "swap": 0}


def test_default_is_one_partitionable_slot_with_everything() -> None:
    node = machine(cpus=8, memory="16Gi", disk="100Gi", swap="1Gi", resources={"cogs": 3})
    result = layout(node, EffectivePolicy())
    (slot,) = result.slots
    assert slot.partitionable and slot.slot_id == 1 and slot.type_id == 1
    assert dict(slot.resources) == {
        "cpus": 8,
        "memory": 16384,
        "disk": 100 * 1024 * 1024,
        "swap": 1024,
        "cogs": 3,
    }
    assert all(amount == 0 for amount in result.unassigned.values())


def test_manual_one_partitionable_slot_with_100_percent() -> None:
    # NUM_SLOTS_TYPE_1 = 1, SLOT_TYPE_1 = 100%, SLOT_TYPE_1_PARTITIONABLE = TRUE
    node = machine(cpus=10, memory=10240, disk=10_000_000)
    explicit = layout(node, policy(slot_type(1, "100%", partitionable=True)))
    assert explicit.slots == layout(node, EffectivePolicy()).slots


def test_static_slots_feature_count_is_an_expression_over_the_machine() -> None:
    # use FEATURE : StaticSlots -> NUM_SLOTS_TYPE_1 = TotalCpus, one core each
    result = layout(machine(cpus=4, memory=1024), policy(slot_type(1, "cpus=1, auto", "TotalCpus")))
    assert [s.resources["cpus"] for s in result.slots] == [1, 1, 1, 1]
    assert [s.resources["memory"] for s in result.slots] == [256] * 4


def test_overrides_and_reserved_resources_come_first() -> None:
    result = layout(
        machine(cpus=8, memory=8192),
        policy(
            slot_type(1, "auto", 2),
            num_cpus=6,
            memory_mib=4096,
            reserved_cpus=2,
            reserved_memory_mib=1024,
        ),
    )
    assert [s.resources["cpus"] for s in result.slots] == [2, 2]
    assert [s.resources["memory"] for s in result.slots] == [1536, 1536]
    assert result.machine.detected["cpus"] == 8
    assert result.machine.total["cpus"] == 4


def test_manual_cogs_and_actuators() -> None:
    node = machine(cpus=8, memory=8192, disk=100_000)
    result = layout(
        node,
        policy(
            slot_type(1, "cogs=50%,actuator=6,50%", 1, partitionable=True),
            slot_type(2, "cogs=25%,actuator=1,25%", 2),
            machine_resources={"Cogs": 16, "actuator": 8},
        ),
    )
    assert [(s.partitionable, dict(s.resources)) for s in result.slots] == [
        (True, {"cpus": 4, "memory": 4096, "disk": 50_000, "swap": 0, "Cogs": 8, "actuator": 6}),
        (False, {"cpus": 2, "memory": 2048, "disk": 25_000, "swap": 0, "Cogs": 4, "actuator": 1}),
        (False, {"cpus": 2, "memory": 2048, "disk": 25_000, "swap": 0, "Cogs": 4, "actuator": 1}),
    ]
    assert result.machine.custom == ("Cogs", "actuator")


def test_policy_machine_resources_override_detected_ones() -> None:
    result = layout(
        machine(resources={"cogs": 4, "widgets": 2}),
        policy(machine_resources={"COGS": 10}),
    )
    assert result.slots[0].resources["COGS"] == 10
    assert result.slots[0].resources["widgets"] == 2


GPU_MACHINE = {
    "cpus": 40,
    "memory": 40960,
    "disk": 4_000_000,
    "gpus": [
        {"id": "GPU-6a96bd13", "properties": {"Capability": 7.5}},
        {"id": "GPU-aaaa0001", "properties": {"Capability": 8.0}},
        {"id": "GPU-aaaa0003", "properties": {"Capability": 7.0}},
        {"id": "GPU-aaaa0002", "properties": {"Capability": 8.0}},
        {"id": "GPU-aaaa0004", "properties": {"Capability": 7.0}},
    ],
}


def test_manual_gpu_constraints() -> None:
    result = layout(
        machine(**GPU_MACHINE),
        policy(
            slot_type(1, "GPUs = 2 : Capability >= 8.0\n90%", 1, partitionable=True),
            slot_type(2, 'GPUs = 1 : "GPU-6a96bd13"\nCPUs = 1\n        Memory = 10', 1),
            slot_type(3, "auto", 2),
        ),
    )
    slots = result.slots
    assert [s.gpus for s in slots] == [
        ("GPU-aaaa0001", "GPU-aaaa0002"),
        ("GPU-6a96bd13",),
        ("GPU-aaaa0003",),
        ("GPU-aaaa0004",),
    ]
    assert [s.partitionable for s in slots] == [True, False, False, False]
    assert [s.resources["cpus"] for s in slots] == [36, 1, 1, 1]
    assert [s.resources["memory"] for s in slots] == [36864, 10, 2043, 2043]
    # type 2 leaves disk on auto, so it shares the last 10% with the two type-3 slots
    assert [s.resources["disk"] for s in slots] == [3_600_000, 133_333, 133_333, 133_333]
    assert result.unassigned["cpus"] == 1
    assert result.unassigned_gpus == ()


def test_constrained_slots_choose_gpus_before_the_others() -> None:
    # slot1 takes any GPU, slot2 wants the 8.0 one: slot2 still gets it, slot1 another.
    node = machine(
        cpus=2,
        gpus=[
            {"id": "GPU-b", "properties": {"Capability": 8.0}},
            {"id": "GPU-a", "properties": {"Capability": 7.0}},
        ],
    )
    result = layout(
        node, policy(slot_type(1, "GPUs=1"), slot_type(2, "GPUs = 1 : Capability >= 8.0"))
    )
    assert [s.gpus for s in result.slots] == [("GPU-a",), ("GPU-b",)]


def test_gpus_declared_as_a_count_are_numbered() -> None:
    # MACHINE_RESOURCE_gpus = 4 on a machine description without a GPU list
    result = layout(
        machine(cpus=8),
        policy(slot_type(2, "cpus=8, gpus=4", partitionable=True), machine_resources={"gpus": 4}),
    )
    assert result.slots[0].gpus == ("CUDA0", "CUDA1", "CUDA2", "CUDA3")


def test_consumption_policy_fills_in_the_defaults() -> None:
    result = layout(
        machine(cpus=8, resources={"cogs": 2}),
        policy(
            slot_type(
                1,
                "cpus=8",
                partitionable=True,
                consumption_policy=True,
                consumption={"CPUS": "TARGET.RequestCpus"},
            )
        ),
    )
    (slot,) = result.slots
    assert slot.consumption_policy
    assert dict(slot.consumption) == {
        "cpus": "TARGET.RequestCpus",
        "memory": "quantize(target.RequestMemory,{128})",
        "disk": "quantize(target.RequestDisk,{1024})",
        "cogs": "ifThenElse(target.RequestCogs is undefined, 0, target.RequestCogs)",
    }


def test_consumption_policy_is_the_compiled_type_s_and_only_for_partitionable_slots() -> None:
    result = layout(
        machine(cpus=4),
        policy(
            slot_type(1, "50%", partitionable=True, consumption_policy=True),
            slot_type(2, "25%", consumption_policy=True),
            slot_type(3, "25%", partitionable=True),
            consumption_policy=True,  # already folded into each compiled type
        ),
    )
    assert [s.consumption_policy for s in result.slots] == [True, False, False]


def test_machine_wide_consumption_policy_applies_to_the_default_slot() -> None:
    result = layout(machine(), EffectivePolicy(consumption_policy=True))
    assert result.slots[0].consumption_policy


def test_machine_resource_names_enable_only_the_resources_listed() -> None:
    node = machine(resources={"cogs": 4, "widgets": 2}, gpus=GPU_MACHINE["gpus"][:1])
    result = layout(
        node, policy(machine_resource_names=("Cogs", "actuator"), machine_resources={"actuator": 1})
    )
    assert result.machine.custom == ("cogs", "actuator")
    assert result.slots[0].gpus == ()
    with_gpus = layout(node, policy(machine_resource_names=("GPUs",)))
    assert with_gpus.machine.custom == ()
    assert with_gpus.slots[0].gpus == ("GPU-6a96bd13",)


def test_gpus_declared_by_id() -> None:
    # MACHINE_RESOURCE_GPUs = GPU-aaaa0001, CUDA7: the described GPU keeps its properties
    node = machine(cpus=4, gpus=GPU_MACHINE["gpus"])
    result = layout(
        node,
        policy(
            machine_resource_ids={"GPUs": ("GPU-aaaa0001", "CUDA7")}, machine_resources={"GPUs": 2}
        ),
    )
    assert result.slots[0].gpus == ("GPU-aaaa0001", "CUDA7")
    assert result.machine.gpu_properties == {"GPU-aaaa0001": {"Capability": 8.0}, "CUDA7": {}}


def test_custom_resources_declared_by_id_are_counted() -> None:
    result = layout(machine(), policy(machine_resource_ids={"Cogs": ("c0", "c1", "c2")}))
    assert result.slots[0].resources["Cogs"] == 3


def test_slot_types_with_no_slots_give_nothing() -> None:
    result = layout(machine(), policy(slot_type(1, "cpus=4", 0), slot_type(2, "auto", 2)))
    assert [(s.slot_id, s.type_id, s.resources["cpus"]) for s in result.slots] == [
        (1, 2, 2),
        (2, 2, 2),
    ]


# --- impossible layouts: the message names the slot type, the resource and the numbers ----


@pytest.mark.parametrize(
    ("node", "types", "extra", "expected"),
    [
        pytest.param(
            {},
            [slot_type(1, "cpus=3"), slot_type(2, "cpus=2")],
            {},
            [
                "slot type 2",
                "cpus",
                "5 cores",
                "type 1: 1 x 3",
                "type 2: 1 x 2",
                "machine's 4 cores",
            ],
            id="over 100% of the cores",
        ),
        pytest.param(
            {"memory": 1000},
            [slot_type(1, "mem=60%"), slot_type(2, "mem=50%", 1)],
            {},
            ["slot type 2", "memory", "1100 MiB", "machine's 1000 MiB"],
            id="over 100% of the memory",
        ),
        pytest.param(
            {"disk": 100},
            [slot_type(1, "disk=1/2", 3)],
            {},
            ["slot type 1", "disk", "150 KiB", "3 x 50", "machine's 100 KiB"],
            id="over 100% of the disk with several slots of one type",
        ),
        pytest.param(
            {},
            [slot_type(1, "auto", 5)],
            {},
            ["slot type 1", "cpus", "more slots than cores", "5 slots", "4 cores"],
            id="more slots than cores",
        ),
        pytest.param(
            {},
            [slot_type(1, "cpus=3"), slot_type(2, "auto", 2)],
            {},
            ["slot type 2", "cpus", "more slots than cores", "2 slots", "1 cores left of 4"],
            id="more auto slots than the cores left",
        ),
        pytest.param(
            {},
            [slot_type(1, "cpus=0")],
            {},
            ["slot type 1", "cpus", "0 cores", "'0'", "of 4 cores", "at least 1 core"],
            id="static slot with no core",
        ),
        pytest.param(
            {},
            [slot_type(1, "cpus=10%", 5)],
            {},
            ["slot type 1", "cpus", "5 cores", "5 x 1", "machine's 4 cores"],
            id="fractions raised to 1 core each add up to more than the machine",
        ),
        pytest.param(
            {"memory": 100},
            [slot_type(1, "mem=50"), slot_type(2, "mem=50"), slot_type(3, "auto")],
            {},
            ["slot type 3", "memory", "0 MiB", "'auto'", "100 MiB", "at least 1 MiB"],
            id="a slot with no memory",
        ),
        pytest.param(
            {},
            [slot_type(1, "cpus=1.5")],
            {},
            ["slot type 1", "cpus", "1.5 cores", "whole"],
            id="half a core",
        ),
        pytest.param(
            {},
            [slot_type(1, "cogs=2")],
            {},
            ["slot type 1", "cogs", "'2'", "does not have", "none"],
            id="a resource the machine does not have",
        ),
        pytest.param(
            {},
            [slot_type(1, "GPUs=1")],
            {},
            ["slot type 1", "GPUs", "'1'", "has none"],
            id="GPUs on a machine without GPUs",
        ),
        pytest.param(
            {"resources": {"cogs": 4}},
            [slot_type(1, "cogs=2 : Capability > 1")],
            {},
            ["slot type 1", "cogs", "constraint", "only GPUs"],
            id="a constraint on a resource without properties",
        ),
        pytest.param(
            {"resources": {"cogs": 4}},
            [slot_type(1, "cogs=3"), slot_type(2, "cogs=50%")],
            {},
            ["slot type 2", "cogs", "5 cogs", "machine's 4 cogs"],
            id="over 100% of a custom resource",
        ),
        pytest.param(
            {"cpus": 8, **{k: v for k, v in GPU_MACHINE.items() if k == "gpus"}},
            [slot_type(1, "GPUs = 3 : Capability >= 8.0")],
            {},
            ["slot type 1", "GPUs", "needs 3 GPUs", "Capability >= 8.0", "only 2", "GPU-aaaa0001"],
            id="not enough GPUs matching a constraint",
        ),
        pytest.param(
            {"cpus": 8, **{k: v for k, v in GPU_MACHINE.items() if k == "gpus"}},
            [slot_type(1, 'GPUs = 1 : "GPU-ffffffff"')],
            {},
            ["slot type 1", "GPUs", "needs 1 GPUs", "GPU-ffffffff", "only 0"],
            id="a GPU id the machine does not have",
        ),
        pytest.param(
            {},
            [slot_type(1, "auto", "TotalCpuz")],
            {},
            ["slot type 1", "count", "TotalCpuz", "UNDEFINED"],
            id="a count expression naming nothing",
        ),
        pytest.param(
            {},
            [slot_type(1, "auto", "TotalCpus / 3.0")],
            {},
            ["slot type 1", "count", "TotalCpus / 3.0", "1.33", "whole"],
            id="a count that is not whole",
        ),
        pytest.param(
            {},
            [slot_type(1, "auto", -1)],
            {},
            ["slot type 1", "count", "-1", "negative"],
            id="a negative count",
        ),
        pytest.param(
            {},
            [slot_type(1, "auto")],
            {"reserved_cpus": 5},
            ["reserved cpus", "5 cores", "has 4 cores"],
            id="more cores reserved than there are",
        ),
        pytest.param(
            {},
            [slot_type(1, "auto")],
            {"reserved_cpus": 4},
            ["cpus", "no core is left", "4 reserved"],
            id="every core reserved",
        ),
        pytest.param(
            {},
            [slot_type(1, "auto")],
            {"reserved_memory_mib": 300},
            ["reserved memory", "300 MiB", "has 256 MiB"],
            id="more memory reserved than there is",
        ),
        pytest.param(
            {"gpus": GPU_MACHINE["gpus"][:2]},
            [slot_type(1, "auto")],
            {"machine_resources": {"GPUs": 3}},
            ["machine resource GPUs", "3 GPUs", "has 2"],
            id="more GPUs declared than the machine has",
        ),
        pytest.param(
            {},
            [slot_type(1, "auto")],
            {"machine_resources": {"cogs": 2.5}},
            ["machine resource cogs", "2.5", "whole"],
            id="a custom resource that is not a count",
        ),
        pytest.param(
            {},
            [
                slot_type(
                    1,
                    "auto",
                    partitionable=True,
                    consumption_policy=True,
                    consumption={"widgets": "TARGET.RequestWidgets"},
                )
            ],
            {},
            ["slot type 1", "CONSUMPTION_widgets", "does not carve"],
            id="a consumption expression for a resource the slot lacks",
        ),
    ],
)
def test_impossible_layouts_name_type_resource_and_numbers(
    node: dict[str, Any],
    types: list[SlotTypeDef],
    extra: dict[str, Any],
    expected: list[str],
) -> None:
    with pytest.raises(LayoutError) as caught:
        layout(machine(**node), policy(*types, **extra))
    message = str(caught.value)
    for part in expected:
        assert part in message, f"{part!r} not in {message!r}"


def test_an_unknown_resource_asked_for_on_auto_or_zero_is_fine() -> None:
    # one policy for GPU and non-GPU nodes alike
    result = layout(machine(), policy(slot_type(1, "GPUs=auto, cogs=0, 100%", partitionable=True)))
    assert result.slots[0].gpus == ()


def test_layout_error_is_a_value_error() -> None:
    assert issubclass(LayoutError, ValueError)
