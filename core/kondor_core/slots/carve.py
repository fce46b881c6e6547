"""Carving dynamic slots out of partitionable slots, and claiming static slots.

Follows the reference's "Dynamic Provisioning", "Defaults for Partitionable Slot
Sizes" and "condor_negotiator-Side Resource Consumption Policies":

- the startd rounds the job's requests with MODIFY_REQUEST_EXPR_<attr> (by default
  `quantize(RequestCpus,{1})`, `quantize(RequestMemory,{128})`,
  `quantize(RequestDisk,{1024})`), evaluated by classad2 with MY = the job;
- with a consumption policy the slot instead takes CONSUMPTION_<resource>,
  evaluated with MY = the partitionable slot and TARGET = the job;
- RequestGPUs GPUs are chosen among the free ones, in the machine's order, and
  only those whose property ad satisfies RequireGPUs;
- Request<Name> asks for a custom resource;
- a slot that does not fit the job is never made: the Refusal names the resource
  and the numbers;
- dynamic slots are named slotN_M; like the startd, the lowest free M is reused.

Amounts after the expressions are rounded up to whole units (a dynamic slot must
fit its job). Swap is not partitioned: HTCondor carves cpus, memory, disk, GPUs
and custom resources; dynamic slots advertise their parent's VirtualMemory.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import classad2

from kondor_core.classads import ExpressionError, parse_expr
from kondor_core.config.effective import EffectivePolicy
from kondor_core.lazy import cached
from kondor_core.slots.layout import (
    GPUS,
    UNIT_WORDS,
    Layout,
    MachineTotals,
    SlotLayout,
    attribute_name,
)

#: condor_submit's defaults for requests a job ad leaves out ("Defaults for Partitionable
#: Slot Sizes": JOB_DEFAULT_REQUESTCPUS = 1, JOB_DEFAULT_REQUESTMEMORY = MemoryUsage or 1,
#: JOB_DEFAULT_REQUESTDISK = DiskUsage).
JOB_DEFAULTS = {
    "RequestCpus": "1",
    "RequestMemory": "ifThenElse(MemoryUsage =!= UNDEFINED, MemoryUsage, 1)",
    "RequestDisk": "ifThenElse(DiskUsage =!= UNDEFINED, DiskUsage, 0)",
}
_STANDARD_REQUESTS = {"cpus": "RequestCpus", "memory": "RequestMemory", "disk": "RequestDisk"}
#: Request* job attributes that do not ask for a machine resource.
_NOT_RESOURCES = {"requestvirtualmemory"}


@dataclass(frozen=True)
class Refusal:
    """Why a slot cannot take a job: which resource (None for a policy reason) and the numbers."""

    reason: str
    resource: str | None = None

    def __str__(self) -> str:
        return self.reason


@dataclass(frozen=True)
class Claim:
    """Who holds a static or dynamic slot: the request's name and the job's Owner."""

    request: str | None = None
    owner: str | None = None


@dataclass(frozen=True)
class CarveContext:
    """What every carve of one layout needs, prepared once: the machine and the policy."""

    machine: MachineTotals
    policy: EffectivePolicy

    @cached
    def requests(self) -> tuple[tuple[str, str, str | None], ...]:
        """(resource, request attribute, MODIFY_REQUEST_EXPR text or None) for each carved
        resource, GPUs last: worked out once rather than on every carve."""
        plan = []
        for resource in (*self.machine.resources(), GPUS):
            if resource == "swap":
                continue
            attribute = _STANDARD_REQUESTS.get(resource) or f"Request{attribute_name(resource)}"
            plan.append(
                (resource, attribute, _lookup_modify(self.policy.modify_request, attribute))
            )
        return tuple(plan)


@dataclass(frozen=True)
class DynamicSlot:
    """A dynamic slot carved from partitionable slot `parent_id` (named slot<parent>_<child>)."""

    parent_id: int
    child_id: int
    type_id: int
    #: cpus, memory (MiB), disk (KiB) and custom resources the slot took.
    resources: Mapping[str, int]
    gpus: tuple[str, ...] = ()
    claim: Claim = Claim()

    @property
    def name(self) -> str:
        return f"slot{self.parent_id}_{self.child_id}"


@dataclass(frozen=True)
class PartitionableSlot:
    """A partitionable slot's state: what is left, the free GPU ids, its dynamic slots."""

    layout: SlotLayout
    context: CarveContext = field(compare=False, repr=False)
    remaining: Mapping[str, int]
    free_gpus: tuple[str, ...]
    #: Dynamic slots in child-number order.
    children: tuple[DynamicSlot, ...] = ()

    @property
    def name(self) -> str:
        return f"slot{self.layout.slot_id}"

    @property
    def next_child(self) -> int:
        """The number the next dynamic slot gets: the lowest one not in use."""
        children = self.children
        if not children or children[-1].child_id == len(children):
            return len(children) + 1
        used = {child.child_id for child in children}
        return next(number for number in range(1, len(children) + 2) if number not in used)


@dataclass(frozen=True)
class StaticSlot:
    """A static slot's state: its fixed resources and who, if anyone, has claimed it."""

    layout: SlotLayout
    context: CarveContext = field(compare=False, repr=False)
    claim: Claim | None = None

    @property
    def name(self) -> str:
        return f"slot{self.layout.slot_id}"


Slot = PartitionableSlot | StaticSlot


def initial_slots(result: Layout) -> tuple[Slot, ...]:
    """The slots of a layout before any job: partitionable slots whole, static slots unclaimed."""
    context = CarveContext(result.machine, result.policy)
    slots: list[Slot] = []
    for slot in result.slots:
        if slot.partitionable:
            slots.append(PartitionableSlot(slot, context, dict(slot.resources), slot.gpus))
        else:
            slots.append(StaticSlot(slot, context))
    return tuple(slots)


def carve(
    pslot: PartitionableSlot,
    request_ad: Any,
    *,
    request: str | None = None,
    child_id: int | None = None,
) -> tuple[PartitionableSlot, DynamicSlot] | Refusal:
    """Carve a dynamic slot for `request_ad` out of `pslot`, or say why it does not fit.

    The dynamic slot takes number `child_id` (the startd's own numbering) or, without one,
    the lowest number not in use."""
    needs = requested(pslot, request_ad)
    if isinstance(needs, Refusal):
        return needs
    amounts, gpu_count = needs
    where = pslot.name
    remaining = dict(pslot.remaining)
    for resource, amount in amounts.items():
        left = remaining.get(resource)
        if left is None:
            if amount == 0:
                continue
            return Refusal(
                f"{where} has no {attribute_name(resource)} (the job asks for {amount})", resource
            )
        if amount > left:
            return Refusal(
                f"{where}: not enough {attribute_name(resource)}: the job needs {amount} "
                f"{UNIT_WORDS.get(resource, '')}".rstrip()
                + f", {left} left of {pslot.layout.resources[resource]}",
                resource,
            )
        remaining[resource] = left - amount
    gpus: tuple[str, ...] = ()
    if gpu_count:
        chosen = _choose_gpus(pslot, request_ad, gpu_count)
        if isinstance(chosen, Refusal):
            return chosen
        gpus = chosen
    child = DynamicSlot(
        parent_id=pslot.layout.slot_id,
        child_id=pslot.next_child if child_id is None else child_id,
        type_id=pslot.layout.type_id,
        resources={resource: amounts.get(resource, 0) for resource in pslot.remaining},
        gpus=gpus,
        claim=Claim(request, _owner(request_ad)),
    )
    children = _insert(pslot.children, child)
    free = pslot.free_gpus
    if gpus:
        taken = set(gpus)
        free = tuple(gpu for gpu in free if gpu not in taken)
    return PartitionableSlot(pslot.layout, pslot.context, remaining, free, children), child


def release(pslot: PartitionableSlot, dslot_name: str) -> PartitionableSlot:
    """Give a dynamic slot's resources and GPU ids back to its partitionable slot, exactly."""
    short = dslot_name.split("@", 1)[0]
    index = next((i for i, child in enumerate(pslot.children) if child.name == short), None)
    if index is None:
        names = ", ".join(child.name for child in pslot.children) or "none"
        raise KeyError(f"{pslot.name} has no dynamic slot {dslot_name!r} (it has: {names})")
    child = pslot.children[index]
    remaining = {
        resource: left + child.resources.get(resource, 0)
        for resource, left in pslot.remaining.items()
    }
    free_set = set(pslot.free_gpus) | set(child.gpus)
    free = tuple(gpu for gpu in pslot.layout.gpus if gpu in free_set)
    children = pslot.children[:index] + pslot.children[index + 1 :]
    return replace(pslot, remaining=remaining, free_gpus=free, children=children)


def claim(slot: StaticSlot, request_ad: Any, *, request: str | None = None) -> StaticSlot | Refusal:
    """Claim a static slot for a job if it is unclaimed and holds what the job requests.

    Static slots are not resized, so the job's own requests (before the startd's
    rounding) are compared with what the slot has, as condor_submit's requirements do.
    """
    if slot.claim is not None:
        return Refusal(f"{slot.name} is Claimed by {slot.claim.request or 'another job'}")
    needs = _raw_requests(slot.context.machine, request_ad)
    if isinstance(needs, Refusal):
        return needs
    amounts, gpu_count = needs
    for resource, amount in amounts.items():
        have = slot.layout.resources.get(resource)
        if have is None and amount:
            return Refusal(
                f"{slot.name} has no {attribute_name(resource)} (the job asks for {amount})",
                resource,
            )
        if have is not None and amount > have:
            return Refusal(
                f"{slot.name}: not enough {attribute_name(resource)}: the job needs {amount} "
                f"{UNIT_WORDS.get(resource, '')}".rstrip()
                + f", the slot has {have}",
                resource,
            )
    if gpu_count:
        chosen = _matching_gpus(slot.context.machine, slot.layout.gpus, request_ad, gpu_count)
        if isinstance(chosen, Refusal):
            return Refusal(f"{slot.name}: {chosen.reason}", GPUS)
    return replace(slot, claim=Claim(request, _owner(request_ad)))


def unclaim(slot: StaticSlot) -> StaticSlot:
    """The static slot back to Unclaimed."""
    return replace(slot, claim=None)


def requested(pslot: PartitionableSlot, request_ad: Any) -> tuple[dict[str, int], int] | Refusal:
    """What a dynamic slot for this job takes: resource -> amount, and the number of GPUs."""
    context = pslot.context
    machine = context.machine
    ad = _with_defaults(request_ad)
    if pslot.layout.consumption_policy:
        # The consumption policy alone says what a job consumes (it may read any attribute,
        # as the reference's CONSUMPTION_gpus = TARGET.RequestGpu does).
        scope = _consumption_scope(pslot)
        expressions = pslot.layout.consumption
        amounts: dict[str, int] = {}
        gpu_count = 0
        for resource, text in expressions.items():
            where = f"CONSUMPTION_{attribute_name(resource).upper()}"
            value = _amount(text, where, scope, ad)
            if isinstance(value, Refusal):
                return Refusal(f"{pslot.name}: {value.reason}", resource)
            if resource == GPUS:
                gpu_count = value
            else:
                amounts[resource] = value
        if not machine.gpu_ids:
            asked = _request_value("RequestGPUs", {}, ad, GPUS)
            if asked:
                return Refusal(
                    f"{pslot.name} has no GPUs (the job asks RequestGPUs = {asked})", GPUS
                )
        return amounts, gpu_count
    unknown = _unknown_requests(machine, ad)
    if unknown is not None:
        return Refusal(f"{pslot.name}: {unknown}", unknown.split(" ", 1)[0])
    amounts = {}
    gpus = 0
    for resource, attribute, modify in context.requests:
        if modify is not None:
            value = _amount(modify, f"MODIFY_REQUEST_EXPR_{attribute.upper()}", ad, None)
        else:
            value = _request_value(attribute, {}, ad, resource)
        if isinstance(value, Refusal):
            return Refusal(f"{pslot.name}: {value.reason}", resource)
        if resource == GPUS:
            gpus = value
        else:
            amounts[resource] = value
    return amounts, gpus


def _raw_requests(machine: MachineTotals, request_ad: Any) -> tuple[dict[str, int], int] | Refusal:
    ad = _with_defaults(request_ad)
    unknown = _unknown_requests(machine, ad)
    if unknown is not None:
        return Refusal(unknown, unknown.split(" ", 1)[0])
    amounts: dict[str, int] = {}
    for resource in machine.resources():
        if resource == "swap":
            continue
        attribute = _STANDARD_REQUESTS.get(resource) or f"Request{attribute_name(resource)}"
        value = _request_value(attribute, {}, ad, resource)
        if isinstance(value, Refusal):
            return value
        amounts[resource] = value
    gpus = _request_value("RequestGPUs", {}, ad, GPUS)
    if isinstance(gpus, Refusal):
        return gpus
    return amounts, gpus


def _with_defaults(request_ad: Any) -> Any:
    missing = [attribute for attribute in JOB_DEFAULTS if attribute not in request_ad]
    if not missing:
        return request_ad
    patched = copy.deepcopy(request_ad)
    for attribute in missing:
        patched[attribute] = parse_expr(JOB_DEFAULTS[attribute], field=attribute).eval(patched)
    return patched


def _unknown_requests(machine: MachineTotals, ad: Any) -> str | None:
    """A Request<Name> > 0 for a resource the machine does not have, described, or None."""
    known = {"cpus", "memory", "disk", "gpus", *(name.lower() for name in machine.custom)}
    for key in ad.keys():  # noqa: SIM118 - classad2 ads iterate like this
        lowered = key.lower()
        if not lowered.startswith("request") or lowered in _NOT_RESOURCES:
            continue
        name = lowered[len("request") :]
        if not name or name in known:
            continue
        value = ad.get(key)
        if (
            isinstance(value, int | float)
            and not isinstance(value, bool | classad2.Value)
            and value > 0
        ):
            resource = key[len("Request") :]
            return f"{resource} is not a resource of this machine (the job asks {key} = {value})"
    return None


def _request_value(
    attribute: str, modify: Mapping[str, str], ad: Any, resource: str
) -> int | Refusal:
    text = _lookup_modify(modify, attribute)
    if text is not None:
        return _amount(text, f"MODIFY_REQUEST_EXPR_{attribute.upper()}", ad, None)
    value = ad.get(attribute)
    if value is None:
        return 0
    if isinstance(value, classad2.ExprTree):
        value = value.eval(ad)
    return _whole_units(value, attribute)


def _lookup_modify(modify: Mapping[str, str], attribute: str) -> str | None:
    text = modify.get(attribute)
    if text is not None:
        return text
    lowered = attribute.lower()
    for name, candidate in modify.items():
        if name.lower() == lowered:
            return candidate
    return None


def _amount(text: str, where: str, scope: Any, target: Any) -> int | Refusal:
    try:
        tree = parse_expr(text, field=where)
    except ExpressionError as err:
        return Refusal(str(err))
    value = tree.eval(scope) if target is None else tree.eval(scope, target)
    return _whole_units(value, f"{where} = {text}")


def _whole_units(value: Any, what: str) -> int | Refusal:
    if isinstance(value, classad2.Value):
        if value is classad2.Value.Undefined:
            return 0
        return Refusal(f"{what} is ERROR for this job")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return Refusal(f"{what} is {value!r}, not a number")
    if value < 0:
        return Refusal(f"{what} is {value}, a negative amount")
    return math.ceil(value)


def _consumption_scope(pslot: PartitionableSlot) -> Any:
    values: dict[str, Any] = {
        attribute_name(resource): amount for resource, amount in pslot.remaining.items()
    }
    values["GPUs"] = len(pslot.free_gpus)
    return classad2.ClassAd(values)


def _choose_gpus(
    pslot: PartitionableSlot, request_ad: Any, count: int
) -> tuple[str, ...] | Refusal:
    chosen = _matching_gpus(pslot.context.machine, pslot.free_gpus, request_ad, count)
    if isinstance(chosen, Refusal):
        return Refusal(
            f"{pslot.name}: {chosen.reason} ({len(pslot.free_gpus)} free of "
            f"{len(pslot.layout.gpus)})",
            GPUS,
        )
    return chosen


def _matching_gpus(
    machine: MachineTotals, candidates: tuple[str, ...], request_ad: Any, count: int
) -> tuple[str, ...] | Refusal:
    require = request_ad.get("RequireGPUs")
    if require is None:
        if count > len(candidates):
            return Refusal(f"not enough GPUs: the job needs {count}", GPUS)
        return candidates[:count]
    matching = []
    for gpu in candidates:
        gpu_ad = machine.gpu_ads[gpu]
        value = (
            require.eval(gpu_ad, request_ad) if isinstance(require, classad2.ExprTree) else require
        )
        if value is True:
            matching.append(gpu)
            if len(matching) == count:
                return tuple(matching)
    return Refusal(
        f"not enough GPUs matching RequireGPUs = {require}: the job needs {count}, "
        f"{len(matching)} match",
        GPUS,
    )


def _owner(request_ad: Any) -> str | None:
    owner = request_ad.get("Owner")
    return owner if isinstance(owner, str) else None


def _insert(children: tuple[DynamicSlot, ...], child: DynamicSlot) -> tuple[DynamicSlot, ...]:
    if not children or children[-1].child_id < child.child_id:
        return (*children, child)
    index = next(i for i, existing in enumerate(children) if existing.child_id > child.child_id)
    return (*children[:index], child, *children[index:])
