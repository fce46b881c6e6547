"""The slot layout: the static and partitionable slots a machine gets, and what each holds.

Follows the reference's "Dividing System Resources in Multi-core Machines" and
"Configuring GPUs": every slot type gives each resource a fraction, a percentage,
an absolute amount or `auto`; slots left on `auto` evenly divide what the explicit
shares leave, resource by resource; GPUs may carry a constraint choosing which
devices a slot gets. With no slot types the machine is one partitionable slot
with everything ("Dynamic Provisioning": the default since HTCondor 23.0).

Rounding (Kondor hands out whole units; HTCondor's startd keeps fractional cores):
- cpus, GPUs and custom resources are counted: a fraction of them is rounded down
  to a whole number; an absolute amount that is not whole is an error;
- memory (MiB), disk (KiB) and swap (MiB) are rounded down to whole units;
- as in the startd's slot builder, a non-zero fraction never gives a slot less
  than 1 core or 1 MiB, and every slot needs at least 1 core and 1 MiB: an
  explicit `cpus=0`, or more `auto` slots than cores left, is an error;
- `auto` slots each get the floor of (what is left) / (number of auto slots); GPUs
  are dealt out as the startd deals a machine resource (ResAttributes.cpp): each auto
  slot in turn gets ceil(left / auto slots left), the excess to the first slots, so
  4 GPUs among 6 static slots go one each to the first four;
- OFFLINE_MACHINE_RESOURCE_GPUS names GPUs that are in no slot (`MachineTotals.offline_gpus`;
  every slot ad shows them as OfflineGPUs);
- whatever rounding leaves over stays unassigned and is reported in
  `Layout.unassigned`, never silently given to a slot.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import classad2

from kondor_core.api.machine import GpuProperty, Machine
from kondor_core.classads import ExpressionError, is_error, is_undefined, parse_expr
from kondor_core.config.effective import DEFAULT_CONSUMPTION, EffectivePolicy, SlotTypeDef
from kondor_core.config.shares import STANDARD, Share, ShareSpec, canonical_resource
from kondor_core.errors import KondorError
from kondor_core.inputs import CLASSAD_INT_MAX

#: The carved resources, in the order ads and messages list them.
SIZED = ("memory", "disk", "swap")
GPUS = "gpus"
#: Every slot gets at least 1 core and 1 MiB, as the startd's slot builder insists.
_AT_LEAST_ONE = ("cpus", "memory")
#: How messages name a unit of each standard resource.
UNIT_WORDS = {"cpus": "cores", "memory": "MiB", "disk": "KiB", "swap": "MiB", GPUS: "GPUs"}
#: ClassAd attribute of each standard resource (swap is advertised as VirtualMemory, in KiB).
ATTRIBUTE = {"cpus": "Cpus", "memory": "Memory", "disk": "Disk", "swap": "VirtualMemory"}


#: Slots of one type a machine may have: far beyond any real machine's cores, and a bound on
#: the work and memory a layout takes (NUM_SLOTS_TYPE_1 = 2^62 must not hang the agent).
MAX_SLOTS = 10_000


class LayoutError(KondorError):
    """A slot layout the machine cannot have, naming the slot type, the resource and the numbers."""


@dataclass(frozen=True)
class MachineTotals:
    """What the machine has, as the slot ads' Detected* and Total* attributes describe it.

    `detected` is what the machine description says; `total` is what slots divide:
    after the policy's NUM_CPUS / MEMORY overrides and after its reserved resources.
    Keys are cpus, memory (MiB), disk (KiB), swap (MiB), gpus and the custom resource
    names as declared (`custom`).
    """

    name: str
    detected: Mapping[str, int]
    total: Mapping[str, int]
    custom: tuple[str, ...]
    gpu_ids: tuple[str, ...]
    gpu_properties: Mapping[str, Mapping[str, GpuProperty]]
    facts: Mapping[str, GpuProperty]
    #: GPUs OFFLINE_MACHINE_RESOURCE_GPUS takes out of every slot, in the machine's order.
    offline_gpus: tuple[str, ...] = ()
    #: Each GPU's property ad (its properties plus Id), built once for constraints and RequireGPUs.
    gpu_ads: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def resources(self) -> tuple[str, ...]:
        """Every fungible resource, standard then custom (GPUs are apart: they have ids)."""
        return (*STANDARD, *self.custom)


@dataclass(frozen=True)
class SlotLayout:
    """One static or partitionable slot as the layout made it (what it holds at the start)."""

    slot_id: int
    type_id: int
    partitionable: bool
    #: cpus, memory (MiB), disk (KiB), swap (MiB) and each custom resource.
    resources: Mapping[str, int]
    #: The GPU ids the slot holds, in the machine's order.
    gpus: tuple[str, ...] = ()
    consumption_policy: bool = False
    #: CONSUMPTION_<resource> expressions (resource -> text), defaults filled in, when the
    #: consumption policy is on.
    consumption: Mapping[str, str] = field(default_factory=dict)

    def name(self, machine: str) -> str:
        return f"slot{self.slot_id}@{machine}"


@dataclass(frozen=True)
class Layout:
    """The slots of a machine under a policy, and what no slot got."""

    machine: MachineTotals
    policy: EffectivePolicy = field(compare=False, repr=False)
    slots: tuple[SlotLayout, ...]
    unassigned: Mapping[str, int]
    unassigned_gpus: tuple[str, ...] = ()


def layout(machine: Machine, policy: EffectivePolicy) -> Layout:
    """Divide `machine` into slots as `policy`'s slot types say; raise LayoutError if impossible."""
    totals = machine_totals(machine, policy)
    types = policy.slot_types or (_default_type(),)
    counts = [_count(slot_type, totals) for slot_type in types]
    for slot_type in types:
        _check_names(slot_type, totals)
    amounts: dict[str, list[int]] = {}
    for resource in totals.resources():
        amounts[resource] = _divide(resource, types, counts, totals)
    gpu_counts = _divide(GPUS, types, counts, totals) if totals.gpu_ids else None
    # one entry per slot, in slot order
    slot_types = [
        slot_type for slot_type, count in zip(types, counts, strict=True) for _ in range(count)
    ]
    gpu_sets = _assign_gpus(slot_types, gpu_counts, totals) if gpu_counts else None
    slots = []
    for index, slot_type in enumerate(slot_types):
        resources = {resource: amounts[resource][index] for resource in totals.resources()}
        _check_slot(slot_type, index + 1, resources, totals.total)
        # The compiled type already holds SLOT_TYPE_<N>_CONSUMPTION_POLICY or the machine's
        # CONSUMPTION_POLICY; the default slot (no types) takes the machine's.
        consumption_on = slot_type.partitionable and (
            slot_type.consumption_policy or (not policy.slot_types and policy.consumption_policy)
        )
        slots.append(
            SlotLayout(
                slot_id=index + 1,
                type_id=slot_type.id,
                partitionable=slot_type.partitionable,
                resources=resources,
                gpus=gpu_sets[index] if gpu_sets else (),
                consumption_policy=consumption_on,
                consumption=_consumption(slot_type, totals) if consumption_on else {},
            )
        )
    unassigned = {
        resource: totals.total[resource] - sum(slot.resources[resource] for slot in slots)
        for resource in totals.resources()
    }
    used = {gpu for slot in slots for gpu in slot.gpus}
    free = tuple(gpu for gpu in totals.gpu_ids if gpu not in used)
    return Layout(totals, policy, tuple(slots), unassigned, free)


def _default_type() -> SlotTypeDef:
    """HTCondor's default: one partitionable slot with 100% of everything."""
    everything = Share("fraction", Fraction(1), None, "100%")
    return SlotTypeDef(id=1, count=1, partitionable=True, shares=ShareSpec({}, everything, "100%"))


def machine_totals(machine: Machine, policy: EffectivePolicy) -> MachineTotals:
    """Detected and usable totals: NUM_CPUS / MEMORY overrides, reserved resources subtracted."""
    detected, total = _standard_totals(machine, policy)
    declared, gpu_ids = _declared_resources(machine, policy)
    _unique_gpu_ids(gpu_ids)
    offline = _offline_gpus(policy)
    offline_gpus = tuple(gpu for gpu in gpu_ids if gpu in offline)
    gpu_ids = tuple(gpu for gpu in gpu_ids if gpu not in offline)
    properties = {gpu.id: dict(gpu.properties) for gpu in machine.gpus}
    gpu_properties: dict[str, Mapping[str, GpuProperty]] = {
        gpu: properties.get(gpu, {}) for gpu in gpu_ids
    }
    custom: list[str] = []
    for name, quantity in declared.values():
        if canonical_resource(name) is not None:
            raise LayoutError(
                f"machine resource {name}: {name!r} names a standard resource "
                f"({canonical_resource(name)}); custom resources need another name"
            )
        detected[name] = total[name] = _whole(quantity, f"machine resource {name}")
        custom.append(name)
    detected[GPUS] = total[GPUS] = len(gpu_ids)
    gpu_ads = {gpu: classad2.ClassAd({"Id": gpu, **gpu_properties[gpu]}) for gpu in gpu_ids}
    return MachineTotals(
        name=machine.name,
        detected=detected,
        total=total,
        custom=tuple(custom),
        gpu_ids=gpu_ids,
        gpu_properties=gpu_properties,
        facts=dict(machine.attributes),
        offline_gpus=offline_gpus,
        gpu_ads=gpu_ads,
    )


def _offline_gpus(policy: EffectivePolicy) -> set[str]:
    """OFFLINE_MACHINE_RESOURCE_GPUS: a comma and/or space separated list of GPU ids."""
    for name, value in policy.macros.items():
        if name.upper() == "OFFLINE_MACHINE_RESOURCE_GPUS":
            return {gpu for gpu in value.replace(",", " ").split() if gpu}
    return set()


def _standard_totals(
    machine: Machine, policy: EffectivePolicy
) -> tuple[dict[str, int], dict[str, int]]:
    """(detected, usable) cpus, memory, disk and swap: NUM_CPUS / MEMORY overrides, then the
    reserved cpus and memory subtracted; at least one core must be left."""
    detected = {
        "cpus": machine.cpus,
        "memory": machine.memory_mib,
        "disk": machine.disk_kib,
        "swap": machine.swap_mib,
    }
    total = dict(detected)
    for resource, override in (("cpus", policy.num_cpus), ("memory", policy.memory_mib)):
        if override is not None:
            total[resource] = _machine_override(resource, override, detected)
    for resource, reserved in (
        ("cpus", policy.reserved_cpus),
        ("memory", policy.reserved_memory_mib),
    ):
        if reserved > total[resource]:
            raise LayoutError(
                f"reserved {resource}: {reserved} {UNIT_WORDS[resource]} reserved, but the machine "
                f"has {total[resource]} {UNIT_WORDS[resource]}"
            )
        total[resource] -= reserved
    if total["cpus"] < 1:
        raise LayoutError(
            f"cpus: no core is left for slots ({total['cpus'] + policy.reserved_cpus} cores, "
            f"{policy.reserved_cpus} reserved)"
        )
    return detected, total


def _declared_resources(
    machine: Machine, policy: EffectivePolicy
) -> tuple[dict[str, tuple[str, float]], tuple[str, ...]]:
    """The custom resources (lower-case name -> (name, quantity)) and the GPU ids: detected
    ones, overridden or extended by MACHINE_RESOURCE_<name>, limited by
    MACHINE_RESOURCE_NAMES."""
    declared: dict[str, tuple[str, float]] = {}
    for name, quantity in machine.resources.items():
        declared[name.lower()] = (name, quantity)
    for name, quantity in policy.machine_resources.items():
        declared[name.lower()] = (name, quantity)
    ids = {name.lower(): tuple(values) for name, values in policy.machine_resource_ids.items()}
    for name, values in policy.machine_resource_ids.items():
        declared.setdefault(name.lower(), (name, len(values)))
    gpu_ids = tuple(gpu.id for gpu in machine.gpus)
    if policy.machine_resource_names is not None:
        # MACHINE_RESOURCE_NAMES enables only the resources it lists, detected ones included.
        enabled = {name.lower() for name in policy.machine_resource_names}
        declared = {key: value for key, value in declared.items() if key in enabled}
        if GPUS not in enabled:
            gpu_ids = ()
    if GPUS in ids:
        # MACHINE_RESOURCE_GPUs = <ids>: those devices, with the properties the machine
        # description gives them (none for ids it does not list).
        gpu_ids = ids[GPUS]
        declared.pop(GPUS, None)
    elif GPUS in declared:
        name, quantity = declared.pop(GPUS)
        count = _whole(quantity, f"machine resource {name}")
        if gpu_ids and count > len(gpu_ids):
            raise LayoutError(
                f"machine resource {name}: {count} GPUs declared, but the machine has "
                f"{len(gpu_ids)} ({', '.join(gpu_ids)})"
            )
        # Like condor_gpu_discovery -by-index, devices declared without ids are numbered.
        gpu_ids = gpu_ids[:count] if gpu_ids else tuple(f"CUDA{i}" for i in range(count))
    return declared, gpu_ids


def attribute_name(resource: str) -> str:
    """The ClassAd attribute of a resource: Cpus, Memory, Disk, VirtualMemory, GPUs, Cogs."""
    if resource in ATTRIBUTE:
        return ATTRIBUTE[resource]
    if resource == GPUS:
        return "GPUs"
    return resource[:1].upper() + resource[1:]


def machine_ad(totals: MachineTotals) -> Any:
    """The machine-wide attributes an expression such as NUM_SLOTS_TYPE_<N> may use."""
    values: dict[str, Any] = dict(totals.facts)
    for resource in (*totals.resources(), GPUS):
        attribute = attribute_name(resource)
        values[f"Total{attribute}"] = totals.total[resource]
        values[f"Detected{attribute}"] = totals.detected[resource]
    return classad2.ClassAd(values)


def policy_problems(policy: EffectivePolicy) -> list[str]:
    """What `layout` would refuse on any machine, found without one: device ids listed twice,
    declared amounts no ClassAd holds, a literal slot count beyond MAX_SLOTS. Admission
    refuses these at once rather than leaving every node's agent to report them."""
    problems: list[str] = []
    for name, ids in policy.machine_resource_ids.items():
        if name.lower() == GPUS:
            try:
                _unique_gpu_ids(tuple(ids))
            except LayoutError as err:
                problems.append(str(err))
    for name, quantity in policy.machine_resources.items():
        try:
            _whole(quantity, f"machine resource {name}")
        except LayoutError as err:
            problems.append(str(err))
    for slot_type in policy.slot_types:
        if isinstance(slot_type.count, int) and slot_type.count > MAX_SLOTS:
            problems.append(
                f"slot type {slot_type.id}: count (NUM_SLOTS_TYPE_{slot_type.id}): "
                f"{slot_type.count!r} gives {slot_type.count} slots; a machine has at most "
                f"{MAX_SLOTS}"
            )
    return problems


def _unique_gpu_ids(gpu_ids: tuple[str, ...]) -> None:
    """GPU ids name devices: one listed twice (MACHINE_RESOURCE_GPUs = g0, g0) would be
    handed to two slots at once, so it is refused as the machine file refuses it."""
    seen: set[str] = set()
    for gpu in gpu_ids:
        if gpu in seen:
            raise LayoutError(
                f"machine resource GPUs: the id {gpu!r} appears twice; GPU ids are unique"
            )
        seen.add(gpu)


def _whole(quantity: float, what: str) -> int:
    if not math.isfinite(quantity) or abs(quantity) > CLASSAD_INT_MAX:
        raise LayoutError(
            f"{what}: {quantity} is not an amount a ClassAd holds; use a whole number from 0 "
            f"to {CLASSAD_INT_MAX}"
        )
    if quantity != int(quantity):
        raise LayoutError(f"{what}: {quantity} is not a whole number; it is counted, not sized")
    return int(quantity)


def _machine_override(resource: str, override: int | str, detected: Mapping[str, int]) -> int:
    """NUM_CPUS / MEMORY: a number, or an expression over the Detected* attributes
    (`DetectedCpus * 2`) evaluated against what the node has."""
    if isinstance(override, int):
        return override
    knob = "NUM_CPUS" if resource == "cpus" else "MEMORY"
    try:
        tree = parse_expr(override, field=knob)
    except ExpressionError as err:
        raise LayoutError(str(err)) from None
    ad = classad2.ClassAd({"DetectedCpus": detected["cpus"], "DetectedMemory": detected["memory"]})
    value = tree.eval(ad)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise LayoutError(f"{knob}: {override!r} gives {value!r} on this machine, not a number")
    if value < 1 or value > CLASSAD_INT_MAX:
        raise LayoutError(f"{knob}: {override!r} gives {value}; use a whole number from 1")
    return int(value)


def _count(slot_type: SlotTypeDef, totals: MachineTotals) -> int:
    """NUM_SLOTS_TYPE_<N>: a number, or an expression over the machine evaluated by classad2."""
    where = f"slot type {slot_type.id}: count"
    if isinstance(slot_type.count, int):
        value: Any = slot_type.count
    else:
        try:
            tree = parse_expr(slot_type.count, field=where)
        except ExpressionError as err:
            raise LayoutError(str(err)) from None
        value = tree.eval(machine_ad(totals))
        if is_undefined(value) or is_error(value):
            raise LayoutError(
                f"{where}: {slot_type.count!r} is {'UNDEFINED' if is_undefined(value) else 'ERROR'}"
                " on this machine; it may use TotalCpus, DetectedCpus, TotalMemory, TotalGPUs... "
                "and the machine's attributes"
            )
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
        raise LayoutError(f"{where}: {slot_type.count!r} gives {value!r}, not a whole number")
    if value < 0:
        raise LayoutError(f"{where}: {slot_type.count!r} gives {value}, a negative number of slots")
    if value > MAX_SLOTS:
        raise LayoutError(
            f"{where} (NUM_SLOTS_TYPE_{slot_type.id}): {slot_type.count!r} gives {value} slots; "
            f"a machine has at most {MAX_SLOTS}"
        )
    return int(value)


def _check_names(slot_type: SlotTypeDef, totals: MachineTotals) -> None:
    """Every resource a slot type names must be one the machine has (unless it asks for none)."""
    known = {name.lower() for name in totals.custom}
    for name, share in slot_type.shares.shares.items():
        if name in STANDARD:
            continue
        lowered = name.lower()
        if lowered == GPUS:
            if not totals.gpu_ids and _asks_for_some(share):
                raise LayoutError(
                    f"slot type {slot_type.id}: {name}: the share {share.text!r} asks for GPUs, "
                    "but the machine has none"
                )
            continue
        if lowered not in known:
            if _asks_for_some(share):
                have = ", ".join(totals.custom) or "none"
                raise LayoutError(
                    f"slot type {slot_type.id}: {name}: the share {share.text!r} asks for a "
                    f"resource the machine does not have (its custom resources: {have})"
                )
            continue
        if share.constraint is not None:
            raise LayoutError(
                f"slot type {slot_type.id}: {name}: {share.text!r} has a constraint, but {name} "
                "has no per-device properties; only GPUs take a constraint"
            )


def _asks_for_some(share: Share) -> bool:
    return share.kind != "auto" and share.amount > 0


def _share(slot_type: SlotTypeDef, resource: str) -> Share:
    return slot_type.shares.share_for(resource)


def _divide(
    resource: str,
    types: tuple[SlotTypeDef, ...],
    counts: list[int],
    totals: MachineTotals,
) -> list[int]:
    """One amount per slot (in slot order) of `resource`: explicit shares first, auto ones after."""
    total = totals.total[resource]
    unit = UNIT_WORDS.get(resource, resource)
    counted = resource not in SIZED
    explicit: list[int | None] = []
    asked = 0
    parts: list[str] = []
    for slot_type, count in zip(types, counts, strict=True):
        share = _share(slot_type, resource)
        if share.kind == "auto":
            explicit.extend([None] * count)
            continue
        if share.kind == "fraction":
            amount = math.floor(share.amount * total)
            if resource in _AT_LEAST_ONE and amount < 1 and share.amount > 0:
                # The startd never gives a slot less than 1 core or 1 MiB for a fraction
                # (slot_builder's lower bound); the over-100% check below still applies.
                amount = 1
        else:
            if counted and share.amount != int(share.amount):
                raise LayoutError(
                    f"slot type {slot_type.id}: {resource}: {share.text!r} is "
                    f"{float(share.amount):g} {unit}; {resource} are counted in whole {unit}"
                )
            amount = math.floor(share.amount)
        explicit.extend([amount] * count)
        asked += amount * count
        parts.append(f"type {slot_type.id}: {count} x {amount}")
        if asked > total:
            raise LayoutError(
                f"slot type {slot_type.id}: {resource}: the slot types ask for {asked} {unit} "
                f"in all ({'; '.join(parts)}), more than the machine's {total} {unit}"
                + _reserved_note(resource, totals)
            )
    autos = explicit.count(None)
    if resource == GPUS:
        return _deal(explicit, total - asked)
    each = (total - asked) // autos if autos else 0
    if resource == "cpus" and autos and each < 1:
        first = next(
            t for t, c in zip(types, counts, strict=True) if c and _share(t, "cpus").kind == "auto"
        )
        raise LayoutError(
            f"slot type {first.id}: cpus: more slots than cores: {autos} slots share on auto "
            f"the {total - asked} cores left of {total}"
            + (f" ({'; '.join(parts)} explicit)" if parts else "")
            + "; every slot needs at least 1 core"
        )
    return [each if amount is None else amount for amount in explicit]


def _deal(explicit: list[int | None], left: int) -> list[int]:
    """The startd's auto share of a machine resource (ResAttributes.cpp, "distribute
    integral values evenly among slots, with excess going to first slots"): each auto slot,
    in slot order, gets ceil(left / auto slots left)."""
    autos = explicit.count(None)
    out = []
    for amount in explicit:
        dealt = amount
        if dealt is None:
            dealt = -(-left // autos) if left >= 1 else 0
            left -= dealt
            autos -= 1
        out.append(dealt)
    return out


def _reserved_note(resource: str, totals: MachineTotals) -> str:
    if resource in ("cpus", "memory") and totals.total[resource] != totals.detected[resource]:
        return f" (after overrides and reserved {resource}; detected {totals.detected[resource]})"
    return ""


def _check_slot(
    slot_type: SlotTypeDef, slot_id: int, resources: Mapping[str, int], totals: Mapping[str, int]
) -> None:
    for resource in _AT_LEAST_ONE:
        if resources[resource] < 1:
            share = _share(slot_type, resource)
            unit = UNIT_WORDS[resource]
            raise LayoutError(
                f"slot type {slot_type.id}: {resource}: slot{slot_id} would get 0 {unit} (the "
                f"share {share.text!r} of {totals[resource]} {unit}); every slot needs at "
                f"least 1 {unit[:-1] if unit == 'cores' else unit}"
            )


def _assign_gpus(
    slot_types: list[SlotTypeDef], gpu_counts: list[int], totals: MachineTotals
) -> list[tuple[str, ...]]:
    """Which GPU ids each slot gets: slots with a constraint choose first, in slot order."""
    free = list(totals.gpu_ids)
    chosen: list[list[str]] = [[] for _ in slot_types]
    constrained = [
        index for index, slot_type in enumerate(slot_types) if _share(slot_type, GPUS).constraint
    ]
    others = [index for index in range(len(slot_types)) if index not in set(constrained)]
    for index in constrained:
        slot_type = slot_types[index]
        constraint = _share(slot_type, GPUS).constraint
        assert constraint is not None
        matching = [gpu for gpu in free if gpu_matches(constraint, gpu, totals)]
        wanted = gpu_counts[index]
        if len(matching) < wanted:
            raise LayoutError(
                f"slot type {slot_type.id}: GPUs: slot{index + 1} needs {wanted} GPUs matching "
                f"{constraint!r}, but only {len(matching)} of the free GPUs match "
                f"({', '.join(matching) or 'none'}; free: {', '.join(free) or 'none'})"
            )
        chosen[index] = matching[:wanted]
        for gpu in chosen[index]:
            free.remove(gpu)
    for index in others:
        wanted = gpu_counts[index]
        if len(free) < wanted:  # pragma: no cover - _divide keeps the sum within the total
            raise LayoutError(f"slot type {slot_types[index].id}: GPUs: not enough GPUs left")
        chosen[index], free = free[:wanted], free[wanted:]
    order = {gpu: position for position, gpu in enumerate(totals.gpu_ids)}
    return [tuple(sorted(gpus, key=order.__getitem__)) for gpus in chosen]


def gpu_matches(constraint: str, gpu: str, totals: MachineTotals, target: Any = None) -> bool:
    """Does `gpu` satisfy `constraint`? A string literal names a GPU id; else classad2 evaluates
    the expression against the GPU's property ad ("Configuring GPUs")."""
    tree = parse_expr(constraint, field="GPU constraint")
    literal = _string_literal(constraint)
    if literal is not None:
        return literal == gpu
    value = (
        tree.eval(totals.gpu_ads[gpu], target)
        if target is not None
        else tree.eval(totals.gpu_ads[gpu])
    )
    return value is True


def _string_literal(text: str) -> str | None:
    stripped = text.strip()
    if not stripped.startswith('"'):
        return None
    value = parse_expr(stripped, field="GPU constraint").eval()
    if isinstance(value, str) and str(classad2.quote(value)) == stripped:
        return value
    return None


def _consumption(slot_type: SlotTypeDef, totals: MachineTotals) -> dict[str, str]:
    """CONSUMPTION_<resource> for each carved resource: the slot type's, else the defaults."""
    given: dict[str, str] = {}
    for name, text in slot_type.consumption.items():
        canonical = canonical_resource(name)
        given[canonical or name.lower()] = text
    result: dict[str, str] = {}
    carved = (*totals.resources(), *((GPUS,) if totals.gpu_ids else ()))
    for resource in carved:
        if resource == "swap":
            continue
        key = resource if resource in STANDARD else resource.lower()
        if key in given:
            result[resource] = given[key]
        elif resource in DEFAULT_CONSUMPTION:
            result[resource] = DEFAULT_CONSUMPTION[resource]
        else:
            request = f"target.Request{attribute_name(resource)}"
            result[resource] = f"ifThenElse({request} is undefined, 0, {request})"
    unknown = sorted(set(given) - {r if r in STANDARD else r.lower() for r in carved})
    if unknown:
        names = [attribute_name(r) for r in carved if r != "swap"]
        raise LayoutError(
            f"slot type {slot_type.id}: consumption: CONSUMPTION_{unknown[0]} names a resource "
            f"the slot does not carve (it carves {', '.join(names)})"
        )
    return result
