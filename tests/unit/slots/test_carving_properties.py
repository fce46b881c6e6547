"""Invariants of carving, for any machine and any sequence of requests:
carving never over-allocates a resource or a GPU, never makes a slot smaller than
its job, and releasing the dynamic slots (in any order) restores the
partitionable slot exactly."""

from __future__ import annotations

from typing import Any

import classad2
from hypothesis import given, settings
from hypothesis import strategies as st

from kondor_core.api.machine import Machine
from kondor_core.config.effective import EffectivePolicy, SlotTypeDef
from kondor_core.config.shares import parse_shares
from kondor_core.slots import (
    PartitionableSlot,
    Refusal,
    carve,
    initial_slots,
    layout,
    release,
)

CAPABILITIES = (7.0, 7.5, 8.0, 9.0)


@st.composite
def machines(draw: st.DrawFn) -> Machine:
    gpus = draw(st.lists(st.sampled_from(CAPABILITIES), max_size=6))
    return Machine(
        name="node-p",
        cpus=draw(st.integers(1, 64)),
        memory=draw(st.integers(128, 256 * 1024)),
        disk=draw(st.integers(0, 10**9)),
        swap=draw(st.integers(0, 4096)),
        gpus=[
            {"id": f"GPU-{index:08x}", "properties": {"Capability": capability}}
            for index, capability in enumerate(gpus)
        ],
        resources=draw(st.dictionaries(st.sampled_from(["cogs", "licenses"]), st.integers(0, 16))),
    )


@st.composite
def policies(draw: st.DrawFn) -> EffectivePolicy:
    if not draw(st.booleans()):
        return EffectivePolicy()
    # a consumption policy that consumes what the job asks, unrounded
    return EffectivePolicy(
        slot_types=(
            SlotTypeDef(
                1,
                1,
                True,
                parse_shares("100%", field="t"),
                consumption_policy=True,
                consumption={"cpus": "TARGET.RequestCpus"},
            ),
        )
    )


@st.composite
def requests(draw: st.DrawFn) -> Any:
    values: dict[str, Any] = {
        "RequestCpus": draw(st.integers(0, 8)),
        "RequestMemory": draw(st.integers(0, 64 * 1024) | st.floats(0, 4096)),
        "RequestDisk": draw(st.integers(0, 10**8)),
    }
    if draw(st.booleans()):
        values["RequestGPUs"] = draw(st.integers(0, 3))
        if draw(st.booleans()):
            threshold = draw(st.sampled_from(CAPABILITIES))
            values["RequireGPUs"] = classad2.ExprTree(f"Capability >= {threshold}")
    for name in ("Cogs", "Licenses"):
        if draw(st.booleans()):
            values[f"Request{name}"] = draw(st.integers(0, 6))
    return classad2.ClassAd(values)


def the_pslot(node: Machine, policy: EffectivePolicy) -> PartitionableSlot:
    (slot,) = initial_slots(layout(node, policy))
    assert isinstance(slot, PartitionableSlot)
    return slot


def assert_nothing_over_allocated(slot: PartitionableSlot) -> None:
    for resource, total in slot.layout.resources.items():
        left = slot.remaining[resource]
        assert left >= 0, (resource, left)
        assert left + sum(child.resources[resource] for child in slot.children) == total
    gpu_sets = [set(child.gpus) for child in slot.children] + [set(slot.free_gpus)]
    assert sum(len(gpus) for gpus in gpu_sets) == len(slot.layout.gpus)
    assert set().union(*gpu_sets) == set(slot.layout.gpus)
    names = [child.name for child in slot.children]
    assert len(set(names)) == len(names)


def assert_fits(slot: PartitionableSlot, request: Any) -> None:
    """The dynamic slot holds at least what the job asked for (unless a consumption policy
    says otherwise), and only GPUs the job's RequireGPUs accepts."""
    child = slot.children[[c.claim.request for c in slot.children].index("last")]
    require = request.get("RequireGPUs")
    if require is not None:
        gpus = slot.context.machine.gpu_ads
        assert all(require.eval(gpus[gpu]) is True for gpu in child.gpus)
    if slot.layout.consumption_policy:
        assert child.resources["cpus"] == request["RequestCpus"]
        assert len(child.gpus) == request.get("RequestGPUs", 0)
        return
    assert child.resources["cpus"] >= request["RequestCpus"]
    assert child.resources["memory"] >= request["RequestMemory"]
    assert child.resources["disk"] >= request["RequestDisk"]
    assert len(child.gpus) >= request.get("RequestGPUs", 0)
    for name in ("cogs", "licenses"):
        if name in child.resources:
            assert child.resources[name] >= request.get(f"Request{name.title()}", 0)


@settings(max_examples=150, deadline=None)
@given(
    node=machines(),
    policy=policies(),
    jobs=st.lists(requests(), max_size=25),
    data=st.data(),
)
def test_carving_never_over_allocates_and_release_restores_exactly(
    node: Machine, policy: EffectivePolicy, jobs: list[Any], data: st.DataObject
) -> None:
    original = the_pslot(node, policy)
    slot = original
    for index, job in enumerate(jobs):
        outcome = carve(slot, job, request="last")
        if isinstance(outcome, Refusal):
            assert outcome.reason
            continue
        slot, child = outcome
        assert_nothing_over_allocated(slot)
        assert_fits(slot, job)
        # later carves must not find this one as "last"
        slot = _renamed(slot, child.name, f"job-{index}")
        # and, now and then, release a random dynamic slot along the way
        if slot.children and data.draw(st.booleans()):
            victim = data.draw(st.sampled_from([c.name for c in slot.children]))
            slot = release(slot, victim)
            assert_nothing_over_allocated(slot)
    order = data.draw(st.permutations([child.name for child in slot.children]))
    for name in order:
        slot = release(slot, f"{name}@{node.name}")
        assert_nothing_over_allocated(slot)
    assert slot == original
    assert slot.remaining == original.layout.resources
    assert slot.free_gpus == original.layout.gpus


def _renamed(slot: PartitionableSlot, name: str, request: str) -> PartitionableSlot:
    from dataclasses import replace

    children = tuple(
        replace(child, claim=replace(child.claim, request=request)) if child.name == name else child
        for child in slot.children
    )
    return replace(slot, children=children)
