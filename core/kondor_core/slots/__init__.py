"""The slot model: layouts with shares, carving and slot ads.

The reference's "Slots: where jobs run", "Dividing System Resources in Multi-core
Machines", "Dynamic Provisioning", "Configuring GPUs" and "condor_negotiator-Side
Resource Consumption Policies" sections are the specification; every expression
is evaluated by classad2.
"""

from kondor_core.slots.ads import AdRenderer, SlotAd, gpu_ad_name, slot_ads
from kondor_core.slots.carve import (
    Claim,
    DynamicSlot,
    PartitionableSlot,
    Refusal,
    Slot,
    StaticSlot,
    carve,
    claim,
    initial_slots,
    release,
    unclaim,
)
from kondor_core.slots.layout import (
    Layout,
    LayoutError,
    MachineTotals,
    SlotLayout,
    layout,
    policy_problems,
)

__all__ = [
    "AdRenderer",
    "Claim",
    "DynamicSlot",
    "Layout",
    "LayoutError",
    "MachineTotals",
    "PartitionableSlot",
    "Refusal",
    "Slot",
    "SlotAd",
    "SlotLayout",
    "StaticSlot",
    "carve",
    "claim",
    "gpu_ad_name",
    "initial_slots",
    "layout",
    "policy_problems",
    "release",
    "slot_ads",
    "unclaim",
]
