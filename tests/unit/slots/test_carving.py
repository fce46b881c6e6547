"""Carving dynamic slots and claiming static slots ("Dynamic Provisioning", "Defaults for
Partitionable Slot Sizes", custom resources, GPUs, consumption policies)."""

from __future__ import annotations

from typing import Any

import classad2
import pytest

from kondor_core.api.machine import Machine
from kondor_core.config.effective import EffectivePolicy, SlotTypeDef
from kondor_core.config.shares import parse_shares
from kondor_core.slots import (
    PartitionableSlot,
    Refusal,
    StaticSlot,
    carve,
    claim,
    initial_slots,
    layout,
    release,
    unclaim,
)
from kondor_core.slots.carve import DynamicSlot

BIG = 500_000_000  # "disk = BIG", in KiB


def machine(**fields: Any) -> Machine:
    values: dict[str, Any] = {"name": "node-a", "cpus": 10, "memory": 10240, "disk": BIG}
    values.update(fields)
    return Machine.model_validate(values)


def pslot(node: Machine | None = None, policy: EffectivePolicy | None = None) -> PartitionableSlot:
    slots = initial_slots(layout(node or machine(), policy or EffectivePolicy()))
    first = slots[0]
    assert isinstance(first, PartitionableSlot)
    return first


def job(**attributes: Any) -> Any:
    values: dict[str, Any] = {}
    for name, value in attributes.items():
        values[name] = classad2.ExprTree(value) if isinstance(value, Expr) else value
    return classad2.ClassAd(values)


class Expr(str):
    """A job attribute given as ClassAd expression text."""


def carved(
    slot: PartitionableSlot, ad: Any, name: str = "job"
) -> tuple[PartitionableSlot, DynamicSlot]:
    outcome = carve(slot, ad, request=name)
    assert not isinstance(outcome, Refusal), outcome
    return outcome


def test_manual_ten_cpu_partitionable_slot_carved_by_a_three_cpu_job() -> None:
    slot = pslot()
    assert dict(slot.remaining) == {"cpus": 10, "memory": 10240, "disk": BIG, "swap": 0}
    after, child = carved(slot, job(RequestCpus=3, RequestMemory=1024, RequestDisk=10240))
    assert child.name == "slot1_1"
    assert dict(child.resources) == {"cpus": 3, "memory": 1024, "disk": 10240, "swap": 0}
    assert dict(after.remaining) == {"cpus": 7, "memory": 9216, "disk": BIG - 10240, "swap": 0}
    # "As each new job is allocated to Slot1, it breaks into Slot1_1, Slot1_2, Slot1_3 etc."
    after, second = carved(after, job(RequestCpus=1, RequestMemory=128, RequestDisk=1024))
    after, third = carved(after, job(RequestCpus=1, RequestMemory=128, RequestDisk=1024))
    assert [second.name, third.name] == ["slot1_2", "slot1_3"]
    assert [c.name for c in after.children] == ["slot1_1", "slot1_2", "slot1_3"]
    # the original is untouched: carving is a pure function
    assert dict(slot.remaining)["cpus"] == 10 and slot.children == ()


@pytest.mark.parametrize(
    ("request_values", "expected"),
    [
        ({"RequestCpus": 1, "RequestMemory": 1000, "RequestDisk": 1}, (1, 1024, 1024)),
        ({"RequestCpus": 1, "RequestMemory": 1024, "RequestDisk": 1024}, (1, 1024, 1024)),
        ({"RequestCpus": 1, "RequestMemory": 1025, "RequestDisk": 1025}, (1, 1152, 2048)),
        # classad2's quantize never goes below the first step, even for 0
        ({"RequestCpus": 1.5, "RequestMemory": 0.5, "RequestDisk": 0}, (2, 128, 1024)),
        # what condor_submit would have filled in: 1 core, 1 MiB, DiskUsage (none here)
        ({}, (1, 128, 1024)),
        ({"MemoryUsage": 300, "DiskUsage": 5000}, (1, 384, 5120)),
    ],
)
def test_the_startd_rounds_requests_with_its_default_modify_request_expressions(
    request_values: dict[str, Any], expected: tuple[int, int, int]
) -> None:
    _, child = carved(pslot(), job(**request_values))
    assert (child.resources["cpus"], child.resources["memory"], child.resources["disk"]) == expected


def test_modify_request_expressions_are_the_policy_s() -> None:
    policy = EffectivePolicy(
        modify_request={
            "RequestCpus": "quantize(RequestCpus,{2})",
            "RequestMemory": "RequestMemory * 2",
            "RequestDisk": "quantize(RequestDisk,{1024})",
        }
    )
    _, child = carved(pslot(policy=policy), job(RequestCpus=1, RequestMemory=100, RequestDisk=10))
    assert (child.resources["cpus"], child.resources["memory"]) == (2, 200)


def test_request_expressions_are_evaluated_against_the_job() -> None:
    _, child = carved(pslot(), job(RequestCpus=Expr("NumThreads * 2"), NumThreads=2))
    assert child.resources["cpus"] == 4


@pytest.mark.parametrize(
    ("request_values", "expected"),
    [
        (
            {"RequestCpus": 11},
            ["slot1", "not enough Cpus", "needs 11 cores", "10 left of 10"],
        ),
        (
            {"RequestMemory": 10241},
            ["slot1", "not enough Memory", "needs 10368 MiB", "10240 left"],
        ),
        (
            {"RequestDisk": BIG + 1},
            ["slot1", "not enough Disk", f"needs {-(-(BIG + 1) // 1024) * 1024} KiB"],
        ),
        (
            {"RequestCpus": "four"},
            ["slot1", "MODIFY_REQUEST_EXPR_REQUESTCPUS", "ERROR"],
        ),
        (
            {"RequestGPUs": -1},
            ["slot1", "RequestGPUs is -1", "negative"],
        ),
        (
            {"RequestWidgets": 2},
            ["slot1", "Widgets is not a resource", "RequestWidgets = 2"],
        ),
        (
            {"RequestGPUs": 1},
            ["slot1", "not enough GPUs", "needs 1", "0 free of 0"],
        ),
    ],
)
def test_a_slot_that_does_not_fit_is_never_made(
    request_values: dict[str, Any], expected: list[str]
) -> None:
    slot = pslot()
    outcome = carve(slot, job(**request_values))
    assert isinstance(outcome, Refusal)
    for part in expected:
        assert part in outcome.reason, f"{part!r} not in {outcome.reason!r}"


def test_refusal_names_the_resource() -> None:
    outcome = carve(pslot(), job(RequestCpus=11))
    assert isinstance(outcome, Refusal)
    assert outcome.resource == "cpus"
    assert str(outcome) == outcome.reason


def test_manual_cogs_and_actuators_are_carved() -> None:
    policy = EffectivePolicy(
        slot_types=(
            SlotTypeDef(1, 1, True, parse_shares("cogs=50%,actuator=6,50%", field="t1")),
            SlotTypeDef(2, 2, False, parse_shares("cogs=25%,actuator=1,25%", field="t2")),
        ),
        machine_resources={"Cogs": 16, "actuator": 8},
    )
    slot = pslot(machine(cpus=8, memory=8192, disk=100_000), policy)
    # request_cogs = 2, request_actuator = 1
    after, child = carved(slot, job(RequestCogs=2, RequestActuator=1))
    assert (child.resources["Cogs"], child.resources["actuator"]) == (2, 1)
    assert (after.remaining["Cogs"], after.remaining["actuator"]) == (6, 5)
    refused = carve(after, job(RequestActuator=6))
    assert isinstance(refused, Refusal)
    assert "not enough Actuator" in refused.reason and "5 left of 6" in refused.reason


GPUS = [
    {"id": "GPU-00000001", "properties": {"Capability": 7.0, "GlobalMemoryMb": 16000}},
    {"id": "GPU-00000002", "properties": {"Capability": 8.0, "GlobalMemoryMb": 40536}},
    {"id": "GPU-00000003", "properties": {"Capability": 8.0, "GlobalMemoryMb": 81920}},
]


def test_gpus_are_chosen_by_their_property_ads() -> None:
    slot = pslot(machine(gpus=GPUS))
    slot, first = carved(slot, job(RequestGPUs=1, RequireGPUs=Expr("GlobalMemoryMb > 50000")))
    assert first.gpus == ("GPU-00000003",)
    slot, second = carved(slot, job(RequestGPUs=1, RequireGPUs=Expr("Capability >= 8.0")))
    assert second.gpus == ("GPU-00000002",)
    slot, third = carved(slot, job(RequestGPUs=1))
    assert third.gpus == ("GPU-00000001",)
    assert slot.free_gpus == ()
    refused = carve(slot, job(RequestGPUs=1))
    assert isinstance(refused, Refusal) and "0 free of 3" in refused.reason


def test_require_gpus_may_read_the_job() -> None:
    slot = pslot(machine(gpus=GPUS))
    _, child = carved(
        slot,
        job(RequestGPUs=1, MinMemory=30000, RequireGPUs=Expr("GlobalMemoryMb >= TARGET.MinMemory")),
    )
    assert child.gpus == ("GPU-00000002",)


def test_no_gpus_matching_require_gpus_is_refused() -> None:
    outcome = carve(
        pslot(machine(gpus=GPUS)), job(RequestGPUs=2, RequireGPUs=Expr("Capability >= 9.0"))
    )
    assert isinstance(outcome, Refusal)
    assert outcome.resource == "gpus"
    assert "RequireGPUs" in outcome.reason and "needs 2" in outcome.reason
    assert "0 match" in outcome.reason and "3 free of 3" in outcome.reason


def test_release_returns_resources_and_gpu_ids_exactly() -> None:
    original = pslot(machine(gpus=GPUS))
    slot, a = carved(original, job(RequestCpus=2, RequestGPUs=2))
    slot, b = carved(slot, job(RequestCpus=3, RequestGPUs=1))
    assert (a.gpus, b.gpus) == (("GPU-00000001", "GPU-00000002"), ("GPU-00000003",))
    slot = release(slot, "slot1_1@node-a")
    assert slot.free_gpus == ("GPU-00000001", "GPU-00000002")
    assert slot.remaining["cpus"] == 7
    slot = release(slot, b.name)
    assert slot == original


def test_the_lowest_free_dynamic_slot_number_is_reused() -> None:
    slot = pslot()
    for _ in range(3):
        slot, _child = carved(slot, job())
    slot = release(slot, "slot1_2")
    slot, child = carved(slot, job())
    assert child.name == "slot1_2"
    assert [c.name for c in slot.children] == ["slot1_1", "slot1_2", "slot1_3"]
    slot, child = carved(slot, job())
    assert child.name == "slot1_4"


def test_releasing_an_unknown_dynamic_slot_names_the_ones_there_are() -> None:
    slot, _ = carved(pslot(), job())
    with pytest.raises(KeyError, match=r"slot1 has no dynamic slot 'slot1_9'.*slot1_1"):
        release(slot, "slot1_9")


def test_the_claim_records_the_request_and_owner() -> None:
    _, child = carved(pslot(), job(Owner="alice"), name="sim-1")
    assert (child.claim.request, child.claim.owner) == ("sim-1", "alice")


def consumption_policy(**type_fields: Any) -> EffectivePolicy:
    return EffectivePolicy(
        slot_types=(
            SlotTypeDef(
                type_fields.pop("id", 1),
                1,
                True,
                parse_shares(type_fields.pop("shares", "cpus=8"), field="t"),
                consumption_policy=True,
                consumption=type_fields.pop("consumption", {}),
            ),
        ),
        modify_request={
            "RequestCpus": "quantize(RequestCpus,{4})",
            "RequestMemory": "quantize(RequestMemory,{128})",
            "RequestDisk": "quantize(RequestDisk,{1024})",
        },
        **type_fields,
    )


def test_manual_consumption_policy_consumes_the_requested_cores() -> None:
    # SLOT_TYPE_1_CONSUMPTION_CPUS = TARGET.RequestCpus: 3 cores, not the 4 that
    # MODIFY_REQUEST_EXPR would round to; memory and disk use the default CONSUMPTION_*.
    node = machine(cpus=8)
    slot = pslot(node, consumption_policy(consumption={"cpus": "TARGET.RequestCpus"}))
    after, child = carved(slot, job(RequestCpus=3, RequestMemory=1000, RequestDisk=1))
    assert (child.resources["cpus"], child.resources["memory"], child.resources["disk"]) == (
        3,
        1024,
        1024,
    )
    assert after.remaining["cpus"] == 5
    # without the consumption policy the startd's rounding applies
    plain = EffectivePolicy(modify_request={"RequestCpus": "quantize(RequestCpus,{4})"})
    _, rounded = carved(pslot(node, plain), job(RequestCpus=3))
    assert rounded.resources["cpus"] == 4


def test_manual_consumption_policy_for_gpus() -> None:
    # MACHINE_RESOURCE_gpus = 4; SLOT_TYPE_2 = cpus=8, gpus=4;
    # SLOT_TYPE_2_CONSUMPTION_gpus = TARGET.RequestGpu (the attribute the example reads)
    policy = consumption_policy(
        id=2,
        shares="cpus=8, gpus=4",
        consumption={"gpus": "TARGET.RequestGpu"},
        machine_resources={"gpus": 4},
    )
    slot = pslot(machine(cpus=8), policy)
    assert slot.layout.type_id == 2
    slot, child = carved(slot, job(RequestCpus=1, RequestGpu=2))
    assert child.gpus == ("CUDA0", "CUDA1")
    assert slot.free_gpus == ("CUDA2", "CUDA3")
    refused = carve(slot, job(RequestGpu=3))
    assert isinstance(refused, Refusal) and "not enough GPUs" in refused.reason


def test_consumption_expressions_see_the_partitionable_slot_as_my() -> None:
    policy = consumption_policy(consumption={"cpus": "MY.Cpus / 2"})
    slot = pslot(machine(cpus=8), policy)
    slot, first = carved(slot, job())
    slot, second = carved(slot, job())
    assert (first.resources["cpus"], second.resources["cpus"]) == (4, 2)


def test_a_consumption_expression_in_error_refuses() -> None:
    policy = consumption_policy(consumption={"cpus": 'TARGET.RequestCpus + "x"'})
    outcome = carve(pslot(machine(cpus=8), policy), job(RequestCpus=1))
    assert isinstance(outcome, Refusal)
    assert "CONSUMPTION_CPUS" in outcome.reason and "ERROR" in outcome.reason


def static_slots() -> tuple[StaticSlot, ...]:
    policy = EffectivePolicy(
        slot_types=(SlotTypeDef(1, 2, False, parse_shares("auto", field="t")),)
    )
    slots = initial_slots(layout(machine(cpus=4, memory=4096, disk=10_000, gpus=GPUS[:2]), policy))
    assert all(isinstance(s, StaticSlot) for s in slots)
    return tuple(s for s in slots if isinstance(s, StaticSlot))


def test_static_slots_are_claimed_and_released_without_carving() -> None:
    first, _ = static_slots()
    assert dict(first.layout.resources) == {"cpus": 2, "memory": 2048, "disk": 5000, "swap": 0}
    claimed = claim(first, job(RequestCpus=2, RequestMemory=2048, Owner="bob"), request="j")
    assert isinstance(claimed, StaticSlot)
    assert claimed.claim is not None and claimed.claim.owner == "bob"
    assert claimed.layout == first.layout
    again = claim(claimed, job())
    assert isinstance(again, Refusal) and "slot1 is Claimed by j" in again.reason
    assert unclaim(claimed) == first


@pytest.mark.parametrize(
    ("request_values", "expected"),
    [
        ({"RequestCpus": 3}, ["slot1", "not enough Cpus", "needs 3", "has 2"]),
        ({"RequestMemory": 2049}, ["slot1", "not enough Memory", "needs 2049", "has 2048"]),
        ({"RequestGPUs": 2}, ["slot1", "not enough GPUs", "needs 2"]),
        (
            {"RequestGPUs": 1, "RequireGPUs": Expr("Capability >= 8.0")},
            ["slot1", "RequireGPUs", "0 match"],
        ),
        ({"RequestWidgets": 1}, ["Widgets is not a resource"]),
    ],
)
def test_a_static_slot_too_small_for_the_job_is_not_claimed(
    request_values: dict[str, Any], expected: list[str]
) -> None:
    first, _ = static_slots()
    outcome = claim(first, job(**request_values))
    assert isinstance(outcome, Refusal)
    for part in expected:
        assert part in outcome.reason, f"{part!r} not in {outcome.reason!r}"


def test_static_slots_compare_the_job_s_own_requests_not_rounded_ones() -> None:
    first, second = static_slots()
    # 2000 MiB would round up to 2048 for a dynamic slot; a static slot of 2048 takes it as is
    assert isinstance(claim(first, job(RequestMemory=2000)), StaticSlot)
    assert isinstance(
        claim(second, job(RequestGPUs=1, RequireGPUs=Expr("Capability >= 8.0"))), StaticSlot
    )
