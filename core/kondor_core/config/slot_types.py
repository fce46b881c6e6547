"""Slot types: SLOT_TYPE_<N> and its companions, NUM_SLOTS_TYPE_<N>, NUM_SLOTS and
spec.slotTypes ("Dividing System Resources in Multi-core Machines", "Dynamic Provisioning"),
each with its consumption policy."""

from __future__ import annotations

import re
from collections.abc import Mapping

from kondor_core.api.slotpolicy import (
    SlotTypeSpec,
)
from kondor_core.classads import (
    ClassAd,
    is_error,
    is_undefined,
    parse_expr,
)
from kondor_core.config.effective import (
    DEFAULT_CONSUMPTION,
    SlotTypeDef,
)
from kondor_core.config.reader import KnobReader
from kondor_core.config.reader import constant as _constant
from kondor_core.config.reader import label as _label
from kondor_core.config.reader import resource_key as _resource_key
from kondor_core.config.reader import whole as _whole
from kondor_core.config.shares import ShareError, ShareSpec, parse_shares
from kondor_core.config.shares import shares_from_map as _shares_from_map
from kondor_core.config.snippet import (
    Definition,
)

_TYPE_COUNT = re.compile(r"NUM_SLOTS_TYPE_(\d+)", re.IGNORECASE)
_TYPE_KNOB = re.compile(
    r"SLOT_TYPE_(\d+)(?:_(PARTITIONABLE|CONSUMPTION_POLICY|CONSUMPTION_(\w+)))?", re.IGNORECASE
)


def slot_types(
    r: KnobReader, machine_policy: bool, machine_consumption: Mapping[str, str]
) -> tuple[SlotTypeDef, ...]:
    """The slot types: the snippet's SLOT_TYPE_<N>, overridden by spec.slotTypes of the same
    id, then NUM_SLOTS where no type has a count."""
    from_snippet, labels = _snippet_slot_types(r, machine_policy, machine_consumption)
    types = dict(from_snippet)
    for index, slot_type in enumerate(r.spec.slot_types):
        if slot_type.id in labels:
            r.warnings.append(
                f"spec.slotTypes[{index}] overrides slot type {slot_type.id} of "
                f"condorConfig ({', '.join(labels[slot_type.id])})"
            )
        compiled = _spec_slot_type(r, index, slot_type, machine_policy, machine_consumption)
        if compiled is not None:
            types[slot_type.id] = compiled
    return _num_slots(r, types)


def _snippet_slot_types(
    r: KnobReader, machine_policy: bool, machine_consumption: Mapping[str, str]
) -> tuple[dict[int, SlotTypeDef], dict[int, list[str]]]:
    """The snippet's slot types by id, and the knobs that set each (for override
    warnings)."""
    knobs_by_type: dict[int, dict[str, tuple[str, Definition] | None]] = {}
    extra: dict[int, dict[str, tuple[str, Definition]]] = {}
    labels: dict[int, list[str]] = {}
    for match, definition in r.matching(_TYPE_COUNT) + r.matching(_TYPE_KNOB):
        type_id = int(match.group(1))
        labels.setdefault(type_id, []).append(_label(definition))
        found = r.knob(definition.name)
        if type_id == 0:
            r.problems.append(
                f"{_label(definition)}: slot type 0 cannot be configured; it is HTCondor's "
                "evenly divided type (set NUM_SLOTS instead), types start at 1"
            )
            continue
        kind = _type_knob_kind(match)
        if kind.startswith("consumption:"):
            if found is not None:
                extra.setdefault(type_id, {})[kind.split(":", 1)[1]] = found
            continue
        knobs_by_type.setdefault(type_id, {})[kind] = found
    for type_id in extra:
        knobs_by_type.setdefault(type_id, {})
    types = {}
    for type_id, type_knobs in sorted(knobs_by_type.items()):
        compiled = _snippet_slot_type(
            r,
            type_id,
            type_knobs,
            extra.get(type_id, {}),
            machine_policy=machine_policy,
            machine_consumption=machine_consumption,
        )
        if compiled is not None:
            types[type_id] = compiled
    return types, labels


def _snippet_slot_type(
    r: KnobReader,
    type_id: int,
    found: Mapping[str, tuple[str, Definition] | None],
    consumption_knobs: Mapping[str, tuple[str, Definition]],
    *,
    machine_policy: bool,
    machine_consumption: Mapping[str, str],
) -> SlotTypeDef | None:
    """One SLOT_TYPE_<N> of the snippet, with its count, flags and consumption; None when
    its shares or count are wrong (the problem is reported)."""
    shares = _snippet_shares(r, found.get("shares"))
    count = _snippet_count(r, type_id, found)
    partitionable = r.flag(found.get("partitionable"), default=False)
    policy = r.flag(found.get("policy"), default=machine_policy)
    explicit = dict(machine_consumption)
    for resource, (value, definition) in consumption_knobs.items():
        if r.expression(value, _label(definition)):
            explicit[_resource_key(resource)] = value
    consumption = _consumption(
        r, policy, partitionable, explicit, f"condorConfig slot type {type_id}"
    )
    if shares is None or count is None:
        return None
    return SlotTypeDef(type_id, count, partitionable, shares, policy, consumption)


def _snippet_shares(r: KnobReader, found: tuple[str, Definition] | None) -> ShareSpec | None:
    """SLOT_TYPE_<N>: the type's shares of the machine (all of it when unset)."""
    if found is None:
        return ShareSpec()
    value, definition = found
    try:
        return parse_shares(value, field=_label(definition))
    except ShareError as err:
        r.problems.append(str(err))
        return None


def _snippet_count(
    r: KnobReader, type_id: int, found: Mapping[str, tuple[str, Definition] | None]
) -> int | str | None:
    """NUM_SLOTS_TYPE_<N>: how many slots of the type (0 when unset, with a warning)."""
    counted, shares = found.get("count"), found.get("shares")
    if counted is not None:
        return _count(r, *counted)
    if shares is not None:
        r.warnings.append(
            f"{_label(shares[1])}: NUM_SLOTS_TYPE_{type_id} is not set, so no slots of type "
            f"{type_id} are created"
        )
    return 0


def _count(r: KnobReader, value: str, definition: Definition) -> int | str | None:
    """NUM_SLOTS_TYPE_<N> / NUM_SLOTS: a whole number, or an expression over the machine."""
    label = _label(definition)
    if value.strip().isdigit():
        return int(value)
    if not r.expression(value, label):
        return None
    result = _constant(value)
    if is_undefined(result):
        return _machine_expression(r, value, label)
    whole = _whole(result)
    if whole is not None and whole >= 0:
        return whole
    reason = "it is an error" if is_error(result) else f"it is {result!r}"
    r.problems.append(
        f"{label}: {value!r} is not a number of slots ({reason}); use a whole number >= 0 or "
        "an expression over the machine such as $(DETECTED_CPUS) - 1"
    )
    return None


def _machine_expression(r: KnobReader, value: str, label: str) -> str | None:
    """A count that depends on the node may refer to its Detected*/Total* attributes only."""
    references = ClassAd().externalRefs(parse_expr(value, field=label))
    others = [r for r in references if not r.lower().startswith(("detected", "total"))]
    if not others:
        return value
    r.problems.append(
        f"{label}: {value!r} refers to {', '.join(sorted(others))}; a slot count is a whole "
        "number or an expression over the machine's Detected*/Total* attributes such as "
        "$(DETECTED_CPUS) - 1"
    )
    return None


def _spec_slot_type(
    r: KnobReader,
    index: int,
    slot_type: SlotTypeSpec,
    machine_policy: bool,
    machine_consumption: Mapping[str, str],
) -> SlotTypeDef | None:
    """One of spec.slotTypes, with its consumption policy."""
    where = f"spec.slotTypes[{index}]"
    try:
        if isinstance(slot_type.resources, str):
            shares = parse_shares(slot_type.resources, field=f"{where}.resources")
        else:
            shares = _shares_from_map(slot_type.resources, field=f"{where}.resources")
    except ShareError as err:
        r.problems.append(str(err))
        return None
    policy = slot_type.consumption_policy
    policy = machine_policy if policy is None else policy
    explicit = dict(machine_consumption)
    explicit.update({_resource_key(k): v for k, v in slot_type.consumption.items()})
    consumption = _consumption(r, policy, slot_type.partitionable, explicit, where)
    return SlotTypeDef(
        slot_type.id, slot_type.count, slot_type.partitionable, shares, policy, consumption
    )


def _num_slots(r: KnobReader, types: dict[int, SlotTypeDef]) -> tuple[SlotTypeDef, ...]:
    """NUM_SLOTS: evenly divided static slots (type 0) when no slot type has a count."""
    found = r.knob("NUM_SLOTS")
    counted = any(t.count != 0 for t in types.values())
    if found is not None and counted:
        r.warnings.append(
            f"{_label(found[1])}: NUM_SLOTS is ignored because slot types set NUM_SLOTS_TYPE_<N>"
        )
    if found is not None and not counted:
        count = _count(r, *found)
        if count is not None:
            return (SlotTypeDef(0, count, False, ShareSpec()),)
        return ()
    if types and not counted:
        r.warnings.append(
            "no slot type has a count (NUM_SLOTS_TYPE_<N>) and NUM_SLOTS is not set, so "
            f"the slot types ({', '.join(str(t) for t in sorted(types))}) create no slots and "
            "the node gets the default: one partitionable slot with everything"
        )
        return ()
    return tuple(types[type_id] for type_id in sorted(types))


def _consumption(
    r: KnobReader, policy: bool, partitionable: bool, explicit: Mapping[str, str], where: str
) -> dict[str, str]:
    """A type's consumption expressions: the reference's defaults, then those given."""
    if not policy:
        if explicit:
            r.warnings.append(
                f"{where}: consumption expressions have no effect without a consumption "
                "policy (CONSUMPTION_POLICY or SLOT_TYPE_<N>_CONSUMPTION_POLICY = True)"
            )
        return {}
    if not partitionable:
        r.warnings.append(
            f"{where}: a consumption policy applies to partitionable slot types only; "
            "this type is static"
        )
    return {**DEFAULT_CONSUMPTION, **explicit}


def _type_knob_kind(match: re.Match[str]) -> str:
    """Which SLOT_TYPE_<N> companion a name is: shares, count, partitionable, policy, or
    `consumption:<resource>`."""
    if match.re is _TYPE_COUNT:
        return "count"
    suffix = match.group(2)
    if suffix is None:
        return "shares"
    if suffix.upper() == "PARTITIONABLE":
        return "partitionable"
    if suffix.upper() == "CONSUMPTION_POLICY":
        return "policy"
    return f"consumption:{match.group(3)}"
