"""Slot ads: each slot as HTCondor's startd advertises it, with HTCondor's attribute names.

Attributes follow the manual's "Machine ClassAd Attributes" and the reference's
custom-resource section (`<name>`, `Total<name>`, `Detected<name>`,
`TotalSlot<name>`). GPUs are published in the nested form that
`condor_gpu_discovery -nested` and the startd use: one property ad per GPU named
`GPUs_<id>` (characters a ClassAd name cannot hold, such as `-`, become `_`),
holding `Id` and every property the machine description gives it;
`AvailableGPUs` lists those ads (a partitionable slot's free GPUs, or the GPUs of
a static or dynamic slot); `AssignedGPUs` is the comma-separated id list;
`DetectedGPUs` the machine's ids, comma and space separated.

An ad is built as a plain JSON-able dict (numbers as numbers, strings as strings,
expressions as their ClassAd source text, the names of which are kept in
`SlotAd.expressions`); a `classad2.ClassAd` is built from it only on demand, from
cached parsed expressions, because building ClassAds costs far more than dicts.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import classad2

from kondor_core.classads import parse_expr
from kondor_core.slots.carve import (
    Claim,
    DynamicSlot,
    PartitionableSlot,
    Slot,
    StaticSlot,
)
from kondor_core.slots.layout import GPUS, Layout, SlotLayout, attribute_name

#: What the startd advertises when the policy sets no START / RANK.
DEFAULT_START = "true"
DEFAULT_RANK = "0.0"
_NOT_NAME = re.compile(r"[^A-Za-z0-9_]")


@dataclass(frozen=True)
class SlotAd:
    """One slot ad: JSON-able attributes, and which of them hold expression source text."""

    name: str
    attributes: dict[str, Any]
    expressions: frozenset[str]

    def to_json(self) -> dict[str, Any]:
        return self.attributes

    def to_classad(self) -> Any:
        """The ad as a classad2.ClassAd (expressions parsed, GPU property ads nested)."""
        values: dict[str, Any] = {}
        expressions = self.expressions
        for key, value in self.attributes.items():
            if key in expressions:
                values[key] = parse_expr(value, field=key)
            elif isinstance(value, dict):
                values[key] = classad2.ClassAd(value)
            else:
                values[key] = value
        return classad2.ClassAd(values)


def gpu_ad_name(gpu: str) -> str:
    """The attribute holding a GPU's property ad: GPUs_GPU_6a96bd13 for GPU-6a96bd13."""
    return "GPUs_" + _NOT_NAME.sub("_", gpu)


@lru_cache(maxsize=4096)
def literal_or_expression(text: str) -> tuple[bool, Any]:
    """(True, value) if `text` is a literal (its Python value), else (False, the source text)."""
    tree = parse_expr(text, field="attribute")
    value = classad2.ClassAd({"v": tree})["v"]
    if isinstance(value, classad2.ExprTree):
        return False, text.strip()
    if isinstance(value, bool | int | float | str):
        return True, value
    return False, text.strip()


def slot_ads(result: Layout, slots: Iterable[Slot]) -> list[SlotAd]:
    """Every slot's ad in condor_status order: each slot by number, a partitionable slot
    followed by its dynamic slots in child-number order."""
    return AdRenderer(result).render(slots)


class AdRenderer:
    """Builds the ads of one layout's slots; what every ad shares is computed once, so a
    caller that renders again and again (the simulation, the agent) keeps one renderer."""

    def __init__(self, result: Layout) -> None:
        self.layout = result
        machine = result.machine
        policy = result.policy
        self.machine_name = machine.name
        self.resources = tuple(r for r in machine.resources())
        self.has_gpus = bool(machine.gpu_ids)
        # Facts first: what the startd computes (Machine, Total*...) wins over a fact of that name.
        base: dict[str, Any] = dict(machine.facts)
        base.update(MyType="Machine", TargetType="Job", Machine=machine.name)
        expressions: set[str] = set()
        for resource in (*self.resources, GPUS):
            if resource == GPUS and not self.has_gpus:
                continue
            attribute = attribute_name(resource)
            scale = 1024 if resource == "swap" else 1
            base[f"Total{attribute}"] = machine.total[resource] * scale
            base[f"Detected{attribute}"] = machine.detected[resource] * scale
        if self.has_gpus:
            base["DetectedGPUs"] = ", ".join(machine.gpu_ids)
        if machine.offline_gpus:  # OFFLINE_MACHINE_RESOURCE_GPUS: on every slot's ad
            base["OfflineGPUs"] = ",".join(machine.offline_gpus)
        for name, text in policy.startd_attrs.items():
            _put(base, expressions, name, text)
        _put(base, expressions, "Start", policy.expressions.get("START", DEFAULT_START))
        _put(base, expressions, "Rank", policy.expressions.get("RANK", DEFAULT_RANK))
        self.base = base
        self.base_expressions = frozenset(expressions)
        self.per_slot: dict[int, tuple[dict[str, Any], frozenset[str]]] = {}
        for slot in result.slots:
            values: dict[str, Any] = {}
            slot_expressions: set[str] = set()
            for name, text in policy.slot_attrs.get(slot.slot_id, {}).items():
                _put(values, slot_expressions, name, text)
            # A slot's own literal hides an expression of the same name from STARTD_ATTRS.
            inherited = self.base_expressions - set(values)
            if slot.partitionable:
                limits = self._within_resource_limits()
                values["WithinResourceLimits"] = limits
                values["Requirements"] = "START && WithinResourceLimits"
                slot_expressions |= {"WithinResourceLimits", "Requirements"}
                for resource, text in slot.consumption.items():
                    values[f"Consumption{attribute_name(resource)}"] = text
                    slot_expressions.add(f"Consumption{attribute_name(resource)}")
            else:
                values["Requirements"] = "START"
                slot_expressions.add("Requirements")
            self.per_slot[slot.slot_id] = (values, inherited | slot_expressions)
        self.gpu_ads = {gpu: {"Id": gpu, **machine.gpu_properties[gpu]} for gpu in machine.gpu_ids}
        self.gpu_names = {gpu: gpu_ad_name(gpu) for gpu in machine.gpu_ids}

    def render(self, slots: Iterable[Slot], total_slots: int | None = None) -> list[SlotAd]:
        """The ads of `slots` (and their dynamic slots); TotalSlots counts `slots` unless given."""
        slot_list = list(slots)
        if total_slots is None:
            total_slots = len(slot_list) + sum(
                len(slot.children) for slot in slot_list if isinstance(slot, PartitionableSlot)
            )
        ads: list[SlotAd] = []
        for slot in slot_list:
            if isinstance(slot, PartitionableSlot):
                ads.append(self.partitionable(slot, total_slots))
                ads.extend(self.dynamic(slot, child, total_slots) for child in slot.children)
            else:
                ads.append(self.static(slot, total_slots))
        return ads

    def _within_resource_limits(self) -> str:
        """The resource half of a partitionable slot's Requirements, over the job's raw requests."""
        clauses = [
            "MY.Cpus >= (TARGET.RequestCpus ?: 1)",
            "MY.Memory >= (TARGET.RequestMemory ?: 0)",
            "MY.Disk >= (TARGET.RequestDisk ?: 0)",
        ]
        for name in self.layout.machine.custom:
            attribute = attribute_name(name)
            clauses.append(f"MY.{attribute} >= (TARGET.Request{attribute} ?: 0)")
        if self.has_gpus:
            # RequireGPUs is checked against each free GPU's property ad when carving; in
            # HTCondor it is condor_submit's clause in the job's own Requirements.
            clauses.append("MY.GPUs >= (TARGET.RequestGPUs ?: 0)")
        return " && ".join(f"({clause})" for clause in clauses)

    def _start(
        self, slot: SlotLayout, name: str, total_slots: int
    ) -> tuple[dict[str, Any], frozenset[str]]:
        _, expressions = self.per_slot[slot.slot_id]
        full_name = f"{name}@{self.machine_name}"
        attributes: dict[str, Any] = {"Name": full_name}
        attributes.update(self.base)
        attributes["Name"] = full_name
        attributes["TotalSlots"] = total_slots
        attributes["SlotID"] = slot.slot_id
        attributes["SlotTypeID"] = slot.type_id
        return attributes, expressions

    def _resources(
        self,
        attributes: dict[str, Any],
        amounts: Mapping[str, int],
        slot_totals: Mapping[str, int],
        gpus: tuple[str, ...],
        slot_gpu_total: int,
    ) -> None:
        for resource in self.resources:
            attribute = attribute_name(resource)
            scale = 1024 if resource == "swap" else 1
            attributes[attribute] = amounts[resource] * scale
            attributes[f"TotalSlot{attribute}"] = slot_totals[resource] * scale
        if self.has_gpus:
            attributes["GPUs"] = len(gpus)
            attributes["TotalSlotGPUs"] = slot_gpu_total
            if gpus:
                attributes["AssignedGPUs"] = ",".join(gpus)
                names = self.gpu_names
                attributes["AvailableGPUs"] = "{ " + ", ".join(names[gpu] for gpu in gpus) + " }"
                for gpu in gpus:
                    attributes[names[gpu]] = self.gpu_ads[gpu]

    def partitionable(self, slot: PartitionableSlot, total_slots: int) -> SlotAd:
        layout = slot.layout
        attributes, expressions = self._start(layout, slot.name, total_slots)
        attributes.update(SlotType="Partitionable", PartitionableSlot=True, DynamicSlot=False)
        self._resources(
            attributes, slot.remaining, layout.resources, slot.free_gpus, len(layout.gpus)
        )
        attributes.update(State="Unclaimed", Activity="Idle")
        children = slot.children
        attributes["NumDynamicSlots"] = len(children)
        attributes["ChildName"] = [f"{c.name}@{self.machine_name}" for c in children]
        attributes["ChildCpus"] = [c.resources["cpus"] for c in children]
        attributes["ChildMemory"] = [c.resources["memory"] for c in children]
        attributes["ChildDisk"] = [c.resources["disk"] for c in children]
        if self.has_gpus:
            attributes["ChildGPUs"] = [len(c.gpus) for c in children]
        attributes["ChildState"] = ["Claimed"] * len(children)
        attributes["ChildActivity"] = ["Busy"] * len(children)
        attributes.update(self.per_slot[layout.slot_id][0])
        if slot.free_gpus:
            expressions = expressions | {"AvailableGPUs"}
        return SlotAd(attributes["Name"], attributes, expressions)

    def dynamic(self, parent: PartitionableSlot, child: DynamicSlot, total_slots: int) -> SlotAd:
        layout = parent.layout
        attributes, expressions = self._start(layout, child.name, total_slots)
        attributes.update(SlotType="Dynamic", PartitionableSlot=False, DynamicSlot=True)
        amounts = dict(child.resources)
        amounts["swap"] = parent.remaining["swap"]
        self._resources(attributes, amounts, amounts, child.gpus, len(child.gpus))
        _claimed(attributes, child.claim)
        values = self.per_slot[layout.slot_id][0]
        for key, value in values.items():
            if key not in ("WithinResourceLimits",) and not key.startswith("Consumption"):
                attributes[key] = value
        attributes["Requirements"] = "START"
        if child.gpus:
            expressions = expressions | {"AvailableGPUs"}
        return SlotAd(attributes["Name"], attributes, expressions)

    def static(self, slot: StaticSlot, total_slots: int) -> SlotAd:
        layout = slot.layout
        attributes, expressions = self._start(layout, slot.name, total_slots)
        attributes.update(SlotType="Static", PartitionableSlot=False, DynamicSlot=False)
        self._resources(
            attributes, layout.resources, layout.resources, layout.gpus, len(layout.gpus)
        )
        if slot.claim is None:
            attributes.update(State="Unclaimed", Activity="Idle")
        else:
            _claimed(attributes, slot.claim)
        attributes.update(self.per_slot[layout.slot_id][0])
        if layout.gpus:
            expressions = expressions | {"AvailableGPUs"}
        return SlotAd(attributes["Name"], attributes, expressions)


def _claimed(attributes: dict[str, Any], claim: Claim) -> None:
    attributes.update(State="Claimed", Activity="Busy")
    if claim.owner is not None:
        attributes["RemoteOwner"] = claim.owner
        attributes["RemoteUser"] = claim.owner


def _put(values: dict[str, Any], expressions: set[str], name: str, text: str) -> None:
    is_literal, value = literal_or_expression(text)
    values[name] = value
    if is_literal:
        expressions.discard(name)
    else:
        expressions.add(name)
