"""The slot model: layouts with shares, carving, slot ads and the `kondor simulate` placement.

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
from kondor_core.slots.layout import Layout, LayoutError, MachineTotals, SlotLayout, layout
from kondor_core.slots.simulate import Placement, Simulation, job_ad, simulate

__all__ = [
    "AdRenderer",
    "Claim",
    "DynamicSlot",
    "Layout",
    "LayoutError",
    "MachineTotals",
    "PartitionableSlot",
    "Placement",
    "Refusal",
    "Simulation",
    "Slot",
    "SlotAd",
    "SlotLayout",
    "StaticSlot",
    "carve",
    "claim",
    "gpu_ad_name",
    "initial_slots",
    "job_ad",
    "layout",
    "release",
    "simulate",
    "slot_ads",
    "unclaim",
]
