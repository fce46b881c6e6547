"""The policy's expressions and what slots advertise: START, SUSPEND, ... and their
structured fields ("condor_startd Policy Configuration"), STARTD_ATTRS, SLOT<N>_STARTD_ATTRS
and SLOT<N>_<attr> ("Custom and system slot attributes"), and MODIFY_REQUEST_EXPR_*
("Dynamic Provisioning")."""

from __future__ import annotations

import re

from kondor_core.api.slotpolicy import (
    POLICY_EXPRESSIONS,
)
from kondor_core.config import knobs
from kondor_core.config.effective import (
    DEFAULT_MODIFY_REQUEST,
)
from kondor_core.config.reader import KnobReader
from kondor_core.config.reader import bare as _bare
from kondor_core.config.reader import label as _label
from kondor_core.config.reader import replace_key as _replace
from kondor_core.config.reader import split_list as _split_list
from kondor_core.config.snippet import (
    Definition,
    builtin_value,
)

_ATTRIBUTE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SLOT_LIST = re.compile(r"SLOT(\d+)_STARTD_(?:ATTRS|EXPRS)", re.IGNORECASE)
_SLOT_ATTR = re.compile(r"SLOT(\d+)_(\w+)", re.IGNORECASE)
_MODIFY_REQUEST = re.compile(r"MODIFY_REQUEST_EXPR_(\w+)", re.IGNORECASE)
_REQUEST_ATTRS = {
    "REQUESTCPUS": "RequestCpus",
    "REQUESTMEMORY": "RequestMemory",
    "REQUESTDISK": "RequestDisk",
    "REQUESTGPUS": "RequestGPUs",
}


def expressions(r: KnobReader) -> dict[str, str]:
    """START, SUSPEND, PREEMPT, ...: the structured field over the knob, else the knob, else
    a default that refers to a macro the policy changed."""
    expressions: dict[str, str] = {}
    for field_name, knob in POLICY_EXPRESSIONS.items():
        found = r.knob(knob)
        structured = getattr(r.spec, field_name)
        if structured is not None:
            if found is not None:
                alias = type(r.spec).model_fields[field_name].alias or field_name
                r.warnings.append(f"spec.{alias} overrides {_label(found[1])}")
            expressions[knob] = structured
        elif found is not None and r.expression(found[0], _label(found[1])):
            expressions[knob] = found[0]
        elif found is None and (default := _moved_default(r, knob)) is not None:
            expressions[knob] = default
    return expressions


def _moved_default(r: KnobReader, knob: str) -> str | None:
    """A knob the policy leaves at its default, if that default refers to a macro the
    policy changed: MachineMaxVacateTime is $(MaxVacateTime), so setting MaxVacateTime
    changes it, as in HTCondor. None while the default means what it means alone."""
    definition = r.table.get(knob)
    if definition is None or not definition.is_builtin:
        return None
    value = r.expand(definition)
    if not value or value == builtin_value(knob):
        return None
    return value if r.expression(value, _label(definition)) else None


def attributes(r: KnobReader) -> tuple[dict[str, str], dict[int, dict[str, str]]]:
    """STARTD_ATTRS on every slot; SLOT<N>_STARTD_ATTRS and SLOT<N>_<attr> on slot N.

    As "Configuring STARTD_ATTRS on a per-slot basis": slot N advertises the
    STARTD_ATTRS list plus its SLOT<N>_STARTD_ATTRS, each valued by SLOT<N>_<attr>
    when defined, else by <attr>.
    """
    names = _attribute_list(r, "STARTD_ATTRS") + _attribute_list(r, "STARTD_EXPRS")
    names = list(dict.fromkeys(names))
    attrs: dict[str, str] = {}
    for name, lister in names:
        value = _attribute_value(r, name, lister)
        if value is not None:
            attrs[name] = value
    slot_attrs = _slot_attribute_lists(r)
    advertised = {name.upper() for name, _ in names}
    _slot_attribute_values(r, advertised, slot_attrs)
    for name, value in r.spec.attributes.items():
        attrs[name] = value
    for key, values in r.spec.slot_attributes.items():
        slot_attrs.setdefault(int(key), {}).update(values)
    return attrs, {slot: slot_attrs[slot] for slot in sorted(slot_attrs)}


def _attribute_list(r: KnobReader, knob: str) -> list[tuple[str, str]]:
    """The attribute names a list knob (STARTD_ATTRS, ...) names, with where."""
    found = r.knob(knob)
    if found is None:
        return []
    return _names_in(r, *found)


def _names_in(r: KnobReader, value: str, definition: Definition) -> list[tuple[str, str]]:
    """The attribute names in a list; a problem for each that is not a name."""
    names = []
    for name in _split_list(value):
        if _ATTRIBUTE.fullmatch(name):
            names.append((name, _label(definition)))
        else:
            r.problems.append(
                f"{_label(definition)}: {name!r} is not an attribute name; list names "
                "separated by commas or spaces"
            )
    return names


def _attribute_value(r: KnobReader, name: str, lister: str, slot: int | None = None) -> str | None:
    """The value of an attribute a list names: SLOT<N>_<attr> on slot N, else <attr>."""
    found = r.knob(f"SLOT{slot}_{name}") if slot is not None else None
    found = found or r.knob(name, builtin=True)
    if found is None:
        if any(key.lower() == name.lower() for key in r.spec.attributes):
            return None
        r.problems.append(
            f"{lister}: lists {name}, but nothing defines it; add `{name} = <expression>` to "
            "condorConfig or spec.attributes"
        )
        return None
    value, definition = found
    return value if r.expression(value, _label(definition)) else None


def _slot_attribute_lists(r: KnobReader) -> dict[int, dict[str, str]]:
    """SLOT<N>_STARTD_ATTRS: the attributes slot N advertises besides STARTD_ATTRS."""
    slot_attrs: dict[int, dict[str, str]] = {}
    for match, definition in r.matching(_SLOT_LIST):
        slot = int(match.group(1))
        found = r.knob(definition.name)
        if slot < 1:
            r.problems.append(f"{_label(definition)}: slots are numbered from 1")
            continue
        for name, lister in _names_in(r, *found) if found else []:
            value = _attribute_value(r, name, lister, slot)
            if value is not None:
                slot_attrs.setdefault(slot, {})[name] = value
    return slot_attrs


def _slot_attribute_values(
    r: KnobReader, advertised: set[str], slot_attrs: dict[int, dict[str, str]]
) -> None:
    """SLOT<N>_<attr> for an attribute slot N advertises: its value on slot N."""
    for match, definition in r.matching(_SLOT_ATTR):
        slot, attr = int(match.group(1)), match.group(2)
        if _SLOT_LIST.fullmatch(_bare(definition.name)) or knobs.is_startd_knob(
            _bare(definition.name)
        ):
            continue
        listed = advertised | {name.upper() for name in slot_attrs.get(slot, {})}
        if attr.upper() not in listed:
            r.consumed.add(definition.name.upper())
            r.warnings.append(_unlisted_slot_attribute(r, definition, slot, attr))
            continue
        found = r.knob(definition.name)
        if found is not None and r.expression(found[0], _label(definition)):
            _replace(slot_attrs.setdefault(slot, {}), attr, found[0])


def _unlisted_slot_attribute(r: KnobReader, definition: Definition, slot: int, attr: str) -> str:
    """The warning for SLOT<N>_<attr> where slot N does not advertise <attr>."""
    reason = knobs.PER_SLOT_UNIMPLEMENTED.get(attr.upper())
    if reason is not None:
        return (
            f"{_label(definition)}: SLOT<N>_{attr.upper()} is an HTCondor knob Kondor does "
            f"not implement ({reason}); it has no effect"
        )
    return (
        f"{_label(definition)}: {attr} is not in STARTD_ATTRS or SLOT{slot}_STARTD_ATTRS, so "
        f"slot {slot} does not advertise it; it has no effect"
    )


def modify_request(r: KnobReader) -> dict[str, str]:
    """MODIFY_REQUEST_EXPR_<attr>: HTCondor's defaults, then the snippet, then the spec."""
    result = dict(DEFAULT_MODIFY_REQUEST)
    from_snippet: dict[str, str] = {}
    for match, definition in r.matching(_MODIFY_REQUEST):
        found = r.knob(definition.name)
        if found is not None and r.expression(found[0], _label(definition)):
            attr = _REQUEST_ATTRS.get(match.group(1).upper(), match.group(1))
            _replace(result, attr, found[0])
            from_snippet[attr.upper()] = _label(definition)
    for attr, value in r.spec.modify_request.items():
        canonical = _REQUEST_ATTRS.get(attr.upper(), attr)
        if canonical.upper() in from_snippet:
            r.warnings.append(
                f"spec.modifyRequest.{attr} overrides {from_snippet[canonical.upper()]}"
            )
        _replace(result, canonical, value)
    return result
