"""The agent's part of an ExecutionPoint's status, from the startd's published ads."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from kondor_core.api import Unit, format_quantity
from kondor_core.api.base import Condition
from kondor_core.api.executionpoint import ExecutionPointStatus, SlotStatus, SlotSummary
from kondor_core.slots import SlotAd
from kondor_core.startd.node import (
    CLOCK_ATTRIBUTES,
    Fact,
    Startd,
    machine_ad,
    published_ads,
)


def slot_status(ad: SlotAd) -> SlotStatus:
    """The `status.slots[]` entry of one published slot ad."""
    attributes = ad.attributes
    return SlotStatus(
        name=str(attributes.get("Name", "")),
        type=str(attributes.get("SlotType", "")),
        state=str(attributes.get("State", "")),
        activity=str(attributes.get("Activity", "")),
        cpus=_number(attributes.get("Cpus")),
        memory=int(_number(attributes.get("Memory"))),
        disk=int(_number(attributes.get("Disk"))),
        gpus=int(_number(attributes.get("GPUs"))),
        entered_current_state=_epoch(attributes.get("EnteredCurrentState")),
        entered_current_activity=_epoch(attributes.get("EnteredCurrentActivity")),
        job=attributes.get("JobId") if isinstance(attributes.get("JobId"), str) else None,
        ad=dict(attributes),
        expressions=sorted(ad.expressions),
    )


def summary(slots: Sequence[SlotStatus]) -> SlotSummary:
    """The counts of `kubectl get executionpoints`: slots by state, and the node's resources
    (partitionable and static slots; a dynamic slot's share is already its parent's total)."""
    top = [slot for slot in slots if slot.type != "Dynamic"]
    cpus = sum(_total(slot, "Cpus") for slot in top)
    memory = int(sum(_total(slot, "Memory") for slot in top))
    gpus = int(sum(_total(slot, "GPUs") for slot in top))
    states = sorted({slot.state for slot in slots})
    return SlotSummary(
        slots=len(slots),
        claimed=sum(1 for slot in slots if slot.state == "Claimed"),
        unclaimed=sum(1 for slot in slots if slot.state == "Unclaimed"),
        owner=sum(1 for slot in slots if slot.state == "Owner"),
        cpus=int(cpus) if float(cpus).is_integer() else cpus,
        memory=format_quantity(memory, Unit.MIB) if memory else "0",
        gpus=gpus,
        state=states[0] if len(states) == 1 else ("Mixed" if states else "NoSlots"),
    )


def status(
    startd: Startd,
    live: Mapping[str, Fact],
    now: float,
    *,
    conditions: Sequence[Condition] = (),
    usage: Mapping[str, Mapping[str, Fact]] | None = None,
) -> ExecutionPointStatus:
    """The agent's part of the ExecutionPoint status at `now` (lastHeartbeat is set at write);
    `usage` is each busy slot's job usage (`published_ads`)."""
    ads = published_ads(startd, live, now, usage)
    slots = [slot_status(ad) for ad in ads]
    machine = machine_ad(startd, live)
    if ads:  # the clock and the slot count, the same in every slot ad: stored once there
        first = ads[0].attributes
        for key in (*CLOCK_ATTRIBUTES, "TotalSlots"):
            if key in first and all(ad.attributes.get(key) == first[key] for ad in ads):
                machine[key] = first[key]
    return ExecutionPointStatus(
        summary=summary(slots),
        slots=slots,
        conditions=list(conditions),
        policy=startd.applied,
        machine=machine,
    )


def _total(slot: SlotStatus, attribute: str) -> float:
    """TotalSlot<attr> (what the slot was given), else its current amount."""
    return _number(slot.ad.get(f"TotalSlot{attribute}", slot.ad.get(attribute)))


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    return value


def _epoch(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        return None
    return int(value)
