"""The machine's knobs: NUM_CPUS, MEMORY, RESERVED_MEMORY, MACHINE_RESOURCE_* ("Dividing
System Resources in Multi-core Machines") and the machine-wide consumption policy
(CONSUMPTION_POLICY, CONSUMPTION_<resource>: "condor_negotiator-Side Resource Consumption
Policies")."""

from __future__ import annotations

import re
from collections.abc import Mapping

from kondor_core.classads import (
    ClassAd,
    is_undefined,
    parse_expr,
)
from kondor_core.config.reader import KnobReader
from kondor_core.config.reader import constant as _constant
from kondor_core.config.reader import label as _label
from kondor_core.config.reader import resource_key as _resource_key
from kondor_core.config.reader import split_list as _split_list
from kondor_core.config.snippet import (
    Definition,
)
from kondor_core.config.templates import MACHINE_REFERENCES

_MACHINE_CONSUMPTION = re.compile(r"CONSUMPTION_(\w+)", re.IGNORECASE)
_MACHINE_RESOURCE = re.compile(r"MACHINE_RESOURCE_(\w+)", re.IGNORECASE)


def machine_number(r: KnobReader, name: str, *, minimum: int) -> int | str | None:
    """NUM_CPUS or MEMORY (MiB): an override of what the node has, if the snippet sets one:
    a whole number, or an expression over the machine (`$(DETECTED_CORES)*2`, the
    reference's suspendable-pair example) that the layout evaluates on each node."""
    found = r.knob(name)
    if found is None or found[0] in MACHINE_REFERENCES:
        return None
    value, definition = found
    what = "a number of CPUs" if name == "NUM_CPUS" else "an amount of memory in MiB"
    label = _label(definition)
    if value.strip().isdigit() or not is_undefined(_constant(value)):
        return r.integer(value, label, what=what, minimum=minimum)
    if not r.expression(value, label):
        return None
    references = ClassAd().externalRefs(parse_expr(value, field=label))
    others = [r for r in references if r and not r.lower().startswith("detected")]
    if not others:
        return value
    r.problems.append(
        f"{label}: {value!r} refers to {', '.join(sorted(others))}; {name} is "
        f"{what} or an expression over the machine's Detected* attributes such as "
        "$(DETECTED_CPUS) * 2"
    )
    return None


def reserved(r: KnobReader) -> tuple[int, int]:
    """RESERVED_MEMORY (spec.reserved wins) and the reserved CPUs: what slots never get."""
    reserved = r.spec.reserved
    memory = reserved.memory_mib
    found = r.knob("RESERVED_MEMORY")
    if found is not None:
        value, definition = found
        if "memory" in reserved.model_fields_set:
            r.warnings.append(f"spec.reserved.memory overrides {_label(definition)}")
        else:
            what = "an amount of memory in MiB"
            memory = r.integer(value, _label(definition), what=what) or 0
    return reserved.cpus, memory


def machine_resources(
    r: KnobReader,
) -> tuple[dict[str, float], dict[str, tuple[str, ...]], tuple[str, ...] | None, tuple[str, ...]]:
    """MACHINE_RESOURCE_<name> and spec.machineResources: (quantities, device ids, the enabled
    MACHINE_RESOURCE_NAMES, the inventory resources)."""
    names_found = r.knob("MACHINE_RESOURCE_NAMES")
    names = None
    if names_found is not None:
        unique: dict[str, str] = {}
        for name in _split_list(names_found[0]):
            unique.setdefault(name.lower(), name)
        names = tuple(unique.values())
    quantities: dict[str, float] = {}
    ids: dict[str, tuple[str, ...]] = {}
    inventory: list[str] = []
    for match, definition in r.matching(_MACHINE_RESOURCE):
        resource = match.group(1)
        if resource.upper() == "NAMES":
            continue
        r.consumed.add(definition.name.upper())
        inventory_name = re.fullmatch(r"INVENTORY_(\w+)", resource, re.IGNORECASE)
        resource = inventory_name.group(1) if inventory_name else resource
        if not _enabled(r, resource, names, definition):
            continue
        if inventory_name:
            inventory.append(resource)
            r.expand(definition)
            continue
        _resource_quantity(r, resource, definition, quantities, ids)
    for resource, quantity in r.spec.machine_resources.items():
        _override(r, resource, quantities, f"spec.machineResources.{resource}")
        quantities[resource] = float(quantity)
        if names is not None and resource.lower() not in {n.lower() for n in names}:
            names = (*names, resource)
    return quantities, ids, names, tuple(inventory)


def _enabled(
    r: KnobReader, resource: str, names: tuple[str, ...] | None, definition: Definition
) -> bool:
    """Whether MACHINE_RESOURCE_NAMES (when set) enables the resource; a warning if not."""
    if names is None or resource.lower() in {name.lower() for name in names}:
        return True
    r.warnings.append(
        f"{_label(definition)}: {resource} is not in MACHINE_RESOURCE_NAMES "
        f"({' '.join(names)}), so it is not enabled"
    )
    return False


def _resource_quantity(
    r: KnobReader,
    resource: str,
    definition: Definition,
    quantities: dict[str, float],
    ids: dict[str, tuple[str, ...]],
) -> None:
    """MACHINE_RESOURCE_<name>: a quantity (`16`) or a list of device ids (`c0, c1`)."""
    value = r.expand(definition)
    if not value:
        return
    try:
        quantity = float(value)
    except ValueError:
        items = _split_list(value)
        if all(re.fullmatch(r"[\w.:-]+", item) for item in items):
            quantities[resource], ids[resource] = float(len(items)), tuple(items)
            return
        quantity = -1.0
    if quantity < 0:
        r.problems.append(
            f"{_label(definition)}: {value!r} is not a quantity of {resource}; use a number "
            ">= 0 or a list of device ids"
        )
        return
    quantities[resource] = quantity


def _override(r: KnobReader, resource: str, existing: Mapping[str, object], by: str) -> None:
    """A warning where a structured field overrides a MACHINE_RESOURCE_<name>."""
    for name in existing:
        if name.lower() == resource.lower():
            r.warnings.append(f"{by} overrides MACHINE_RESOURCE_{name} from condorConfig")


def machine_consumption_policy(r: KnobReader) -> bool:
    """CONSUMPTION_POLICY, or spec.consumptionPolicy over it: the machine-wide default."""
    found = r.knob("CONSUMPTION_POLICY")
    snippet = r.boolean(found[0], _label(found[1])) if found else None
    if r.spec.consumption_policy is not None:
        if found is not None:
            r.warnings.append(f"spec.consumptionPolicy overrides {_label(found[1])}")
        return r.spec.consumption_policy
    return bool(snippet)


def machine_consumption(r: KnobReader) -> dict[str, str]:
    """CONSUMPTION_<resource>: the machine-wide consumption expressions."""
    consumption: dict[str, str] = {}
    for match, definition in r.matching(_MACHINE_CONSUMPTION):
        if match.group(1).upper() == "POLICY":
            continue
        found = r.knob(definition.name)
        if found is not None and r.expression(found[0], _label(definition)):
            consumption[_resource_key(match.group(1))] = found[0]
    return consumption
