"""The effective policy: what a SlotPolicy (structured fields plus condorConfig) compiles to.

Everything downstream (layout, carving, slot ads, the policy engine) reads this
one object, never the raw spec, so the snippet and the structured fields can
never disagree about what a node does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kondor_core.config.shares import ShareSpec
from kondor_core.cron.jobs import CronJob, CronSettings

#: The startd's request rounding defaults (MODIFY_REQUEST_EXPR_*), from the reference.
DEFAULT_MODIFY_REQUEST: Mapping[str, str] = {
    "RequestCpus": "quantize(RequestCpus,{1})",
    "RequestMemory": "quantize(RequestMemory,{128})",
    "RequestDisk": "quantize(RequestDisk,{1024})",
}

#: CONSUMPTION_<resource> defaults when a consumption policy is on, from the reference.
DEFAULT_CONSUMPTION: Mapping[str, str] = {
    "cpus": "quantize(target.RequestCpus,{1})",
    "memory": "quantize(target.RequestMemory,{128})",
    "disk": "quantize(target.RequestDisk,{1024})",
}


@dataclass(frozen=True)
class SlotTypeDef:
    """One slot type after compilation (SLOT_TYPE_<N> and its companions)."""

    #: N in SLOT_TYPE_<N>; 0 is HTCondor's evenly divided type that NUM_SLOTS creates.
    id: int
    #: NUM_SLOTS_TYPE_<N>: a number, or a ClassAd expression over the machine's Detected*/Total*
    #: attributes when it depends on the node (`use FEATURE : StaticSlots` gives `TotalCpus`);
    #: the layout evaluates it against the machine.
    count: int | str
    partitionable: bool
    shares: ShareSpec
    #: SLOT_TYPE_<N>_CONSUMPTION_POLICY, or CONSUMPTION_POLICY when the type does not set it.
    consumption_policy: bool = False
    #: resource name (cpus, memory, disk, or a custom one) -> ClassAd expression over TARGET
    consumption: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class EffectivePolicy:
    """The compiled startd configuration of a node."""

    #: Slot types in id order. Empty means HTCondor's default: one partitionable slot with
    #: everything (the layout code applies it).
    slot_types: tuple[SlotTypeDef, ...] = ()
    #: NUM_CPUS / MEMORY overrides of what was detected (MEMORY in MiB), if set.
    #: NUM_CPUS / MEMORY overrides: a number, or an expression over the machine's Detected*
    #: attributes (`DetectedCpus * 2`) that the layout evaluates on each node.
    num_cpus: int | str | None = None
    memory_mib: int | str | None = None
    reserved_cpus: int = 0
    reserved_memory_mib: int = 0
    #: MACHINE_RESOURCE_<name>: custom resource quantities declared by the policy.
    machine_resources: Mapping[str, float] = field(default_factory=dict)
    #: MACHINE_RESOURCE_<name> given as a list of ids (`MACHINE_RESOURCE_Cogs = c0, c1`):
    #: the ids of each such resource (its quantity in `machine_resources` is their count).
    machine_resource_ids: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: MACHINE_RESOURCE_NAMES: when set, only these custom resources are enabled (detected
    #: ones included); None enables every resource.
    machine_resource_names: tuple[str, ...] | None = None
    #: MACHINE_RESOURCE_INVENTORY_<name> (`use FEATURE : GPUs` sets it for GPUs): resources
    #: whose devices the node agent discovers rather than the policy declaring a quantity.
    inventory_resources: tuple[str, ...] = ()
    #: STARTD_ATTRS: attribute -> ClassAd expression text, on every slot.
    startd_attrs: Mapping[str, str] = field(default_factory=dict)
    #: SLOT<N>_STARTD_ATTRS and SLOT<N>_<attr>: slot number -> attribute -> expression.
    slot_attrs: Mapping[int, Mapping[str, str]] = field(default_factory=dict)
    #: Policy expressions by HTCondor knob name (START, IS_OWNER, RANK, SUSPEND, ...),
    #: with $(NAME) macros already expanded.
    expressions: Mapping[str, str] = field(default_factory=dict)
    #: Every other configuration macro, expanded (helper macros of policies live here).
    macros: Mapping[str, str] = field(default_factory=dict)
    #: MODIFY_REQUEST_EXPR_<attr>: request attribute -> rounding expression.
    modify_request: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_MODIFY_REQUEST))
    #: CONSUMPTION_POLICY, the machine-wide default for partitionable slot types.
    consumption_policy: bool = False
    #: Startd cron jobs (STARTD_CRON_JOBLIST and spec.cron), in job-list order.
    cron_jobs: tuple[CronJob, ...] = ()
    #: The machine-wide STARTD_CRON_* knobs.
    cron: CronSettings = field(default_factory=CronSettings)
    #: Configuration templates applied (`use FEATURE : GPUs` -> "FEATURE:GPUs").
    templates: tuple[str, ...] = ()
    #: Knobs the snippet set that Kondor does not implement: reported, never silently ignored.
    warnings: tuple[str, ...] = ()
