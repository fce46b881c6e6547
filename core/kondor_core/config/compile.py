"""Compile a SlotPolicy (structured fields plus its condorConfig snippet) to one EffectivePolicy.

The knobs follow the reference: "Dividing System Resources in Multi-core
Machines" (SLOT_TYPE_<N>, NUM_SLOTS_TYPE_<N>, NUM_SLOTS, MACHINE_RESOURCE_*),
"Dynamic Provisioning" (SLOT_TYPE_<N>_PARTITIONABLE, MODIFY_REQUEST_EXPR_*),
"condor_negotiator-Side Resource Consumption Policies" (CONSUMPTION_*),
"Custom and system slot attributes" (STARTD_ATTRS, SLOT<N>_STARTD_ATTRS,
SLOT<N>_<attr>) and "condor_startd Policy Configuration" (START, SUSPEND, ...).

Structured fields win over the snippet (spec.start over START, spec.slotTypes
over SLOT_TYPE_<N> of the same id, spec.macros over snippet macros,
spec.modifyRequest over MODIFY_REQUEST_EXPR_*); each override is reported.
Every problem is collected before PolicyError is raised, so a user fixes them
all in one pass.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kondor_core.api.slotpolicy import (
    POD_MODES,
    POD_SECURITY_LEVELS,
    POLICY_EXPRESSIONS,
    CronJobSpec,
    SlotPolicySpec,
    SlotTypeSpec,
)
from kondor_core.classads import (
    ClassAd,
    ExpressionError,
    evaluate,
    is_error,
    is_undefined,
    parse_expr,
)
from kondor_core.config import knobs
from kondor_core.config.accounts import USER_ACCOUNTS_KNOB, AccountError, merge_user_accounts
from kondor_core.config.effective import (
    DEFAULT_CONSUMPTION,
    DEFAULT_MODIFY_REQUEST,
    EffectivePolicy,
    SlotTypeDef,
)
from kondor_core.config.shares import ShareError, ShareSpec, canonical_resource, parse_shares
from kondor_core.config.shares import shares_from_map as _shares_from_map
from kondor_core.config.snippet import (
    Definition,
    MacroError,
    MacroTable,
    builtin_value,
    parse_snippet,
)
from kondor_core.config.templates import MACHINE_REFERENCES
from kondor_core.cron import jobs as cron
from kondor_core.errors import KondorError

_ATTRIBUTE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LIST_SEPARATOR = re.compile(r"[,\s]+")
_CONFIG_FUNCTION = re.compile(r"\$[A-Za-z_]+\(")
_TYPE_COUNT = re.compile(r"NUM_SLOTS_TYPE_(\d+)", re.IGNORECASE)
_TYPE_KNOB = re.compile(
    r"SLOT_TYPE_(\d+)(?:_(PARTITIONABLE|CONSUMPTION_POLICY|CONSUMPTION_(\w+)))?", re.IGNORECASE
)
_MACHINE_CONSUMPTION = re.compile(r"CONSUMPTION_(\w+)", re.IGNORECASE)
_MACHINE_RESOURCE = re.compile(r"MACHINE_RESOURCE_(\w+)", re.IGNORECASE)
_SLOT_LIST = re.compile(r"SLOT(\d+)_STARTD_(?:ATTRS|EXPRS)", re.IGNORECASE)
_SLOT_ATTR = re.compile(r"SLOT(\d+)_(\w+)", re.IGNORECASE)
_MODIFY_REQUEST = re.compile(r"MODIFY_REQUEST_EXPR_(\w+)", re.IGNORECASE)
_REQUEST_ATTRS = {
    "REQUESTCPUS": "RequestCpus",
    "REQUESTMEMORY": "RequestMemory",
    "REQUESTDISK": "RequestDisk",
    "REQUESTGPUS": "RequestGPUs",
}
_TRUE = {"true", "yes", "t", "y", "1"}
_FALSE = {"false", "no", "f", "n", "0"}


class PolicyError(KondorError):
    """A SlotPolicy that cannot be compiled; `problems` lists every one found."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        listed = "\n".join(f"  - {problem}" for problem in self.problems)
        count = len(self.problems)
        super().__init__(f"the SlotPolicy has {count} problem{'s' * (count != 1)}:\n{listed}")


def compile_policy(spec: SlotPolicySpec) -> EffectivePolicy:
    """The effective policy of `spec`; raises PolicyError listing every problem.

    Unknown knobs, knobs HTCondor has that Kondor does not implement, and
    structured fields overriding the snippet are in `EffectivePolicy.warnings`.
    """
    snippet = parse_snippet(spec.condor_config)
    try:
        table = snippet.table.with_macros(spec.macros, source="spec.macros")
    except MacroError as err:
        raise PolicyError(
            [*(str(error) for error in snippet.errors), f"spec.macros.{err}"]
        ) from None
    compiler = _Compiler(spec, table)
    compiler.problems.extend(str(error) for error in snippet.errors)
    compiler.warnings.extend(snippet.notes)
    policy = compiler.run(snippet.templates)
    if compiler.problems:
        raise PolicyError(sorted(compiler.problems, key=_line_order))
    return policy


def _line_order(problem: str) -> int:
    """Problems in snippet order; those about structured fields after them."""
    match = re.match(r"condorConfig line (\d+)", problem)
    return int(match.group(1)) if match else 1 << 30


def _label(definition: Definition) -> str:
    return definition.origin.label(definition.name)


def _bare(name: str) -> str:
    """`NAME` for `STARTD.NAME` (the startd's own override)."""
    prefix, dot, bare = name.rpartition(".")
    return bare if dot and prefix.upper() == "STARTD" else name


def _split_list(value: str) -> list[str]:
    return [item for item in _LIST_SEPARATOR.split(value.strip()) if item]


def _whole(value: Any) -> int | None:
    """`value` if it is a ClassAd integer (not a boolean, not UNDEFINED or ERROR)."""
    return value if type(value) is int else None


def _constant(value: str) -> Any:
    """`value` evaluated as a ClassAd expression with no ad (Undefined where it needs one)."""
    try:
        return evaluate(value, field="constant")
    except ExpressionError:
        return None


@dataclass
class _Compiler:
    """Reads knobs from the macro table into the fields of an EffectivePolicy."""

    spec: SlotPolicySpec
    table: MacroTable
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    #: Upper-case keys of definitions turned into fields (not repeated in `macros`).
    consumed: set[str] = field(default_factory=set)
    #: Upper-case names of macros that knobs Kondor reads refer to.
    used: set[str] = field(default_factory=set)
    #: MacroError keys already reported: one problem per mistake, however many knobs reach it.
    reported: set[str] = field(default_factory=set)

    def run(self, templates: tuple[str, ...]) -> EffectivePolicy:
        consumption_policy = self._machine_consumption_policy()
        machine_consumption = self._machine_consumption()
        resources, resource_ids, names, inventory = self._machine_resources()
        slot_types = self._slot_types(consumption_policy, machine_consumption)
        reserved_cpus, reserved_memory = self._reserved()
        num_cpus = self._machine_number("NUM_CPUS", minimum=1)
        memory_mib = self._machine_number("MEMORY", minimum=1)
        expressions = self._expressions()
        startd_attrs, slot_attrs = self._attributes()
        modify_request = self._modify_request()
        cron_jobs, cron_settings = self._cron()
        macros = self._macros()
        return EffectivePolicy(
            slot_types=slot_types,
            num_cpus=num_cpus,
            memory_mib=memory_mib,
            reserved_cpus=reserved_cpus,
            reserved_memory_mib=reserved_memory,
            machine_resources=resources,
            machine_resource_ids=resource_ids,
            machine_resource_names=names,
            inventory_resources=inventory,
            startd_attrs=startd_attrs,
            slot_attrs=slot_attrs,
            expressions=expressions,
            macros=macros,
            modify_request=modify_request,
            consumption_policy=consumption_policy,
            cron_jobs=cron_jobs,
            cron=cron_settings,
            templates=templates,
            warnings=tuple(dict.fromkeys(self.warnings)),
        )

    # -- reading knobs -------------------------------------------------------------------

    def _expand(self, definition: Definition, *, record: bool = True) -> str | None:
        """`definition`'s expanded value; None (and a problem) if a $(...) cannot be expanded."""
        try:
            expansion = self.table.expand(definition.value, owner=definition)
        except MacroError as err:
            if err.key not in self.reported:
                self.reported.add(err.key)
                self.problems.append(str(err))
            return None
        if record:
            self.used.update(expansion.used)
        return expansion.value.strip()

    def _knob(self, name: str, *, builtin: bool = False) -> tuple[str, Definition] | None:
        """The expanded value of knob `name` set by the snippet or spec.macros (or a built-in
        macro, with `builtin`), if non-empty."""
        definition = self.table.get(name)
        if definition is None or (definition.is_builtin and not builtin):
            return None
        self.consumed.add(definition.name.upper())
        value = self._expand(definition)
        if not value:
            return None
        return value, definition

    def _matching(self, pattern: re.Pattern[str]) -> list[tuple[re.Match[str], Definition]]:
        """User definitions (the ones in effect) whose name matches `pattern`."""
        found = []
        for definition in self.table.user_definitions():
            name = _bare(definition.name)
            match = pattern.fullmatch(name)
            if match is not None and self.table.get(name) is definition:
                found.append((match, definition))
        return found

    def _expression(self, value: str, label: str) -> bool:
        """Check `value` with classad2; a problem quoting the parser if it is not an expression."""
        function = _CONFIG_FUNCTION.search(value)
        if function is not None:
            self.problems.append(
                f"{label}: {value!r} uses {function.group(0)}...), which is not a "
                "configuration function HTCondor documents; write the value instead"
            )
            return False
        try:
            parse_expr(value, field=label)
        except ExpressionError as err:
            self.problems.append(str(err))
            return False
        return True

    def _boolean(self, value: str, label: str) -> bool | None:
        lowered = value.strip().lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
        result = _constant(value)
        if isinstance(result, bool):
            return result
        self.problems.append(f"{label}: {value!r} is not a boolean; use True or False")
        return None

    def _integer(self, value: str, label: str, *, what: str, minimum: int = 0) -> int | None:
        result = _whole(_constant(value))
        if result is not None and result >= minimum:
            return result
        self.problems.append(f"{label}: {value!r} is not {what}; use a whole number >= {minimum}")
        return None

    # -- the machine ---------------------------------------------------------------------

    def _machine_number(self, name: str, *, minimum: int) -> int | str | None:
        """NUM_CPUS or MEMORY (MiB): an override of what the node has, if the snippet sets one:
        a whole number, or an expression over the machine (`$(DETECTED_CORES)*2`, the
        reference's suspendable-pair example) that the layout evaluates on each node."""
        found = self._knob(name)
        if found is None or found[0] in MACHINE_REFERENCES:
            return None
        value, definition = found
        what = "a number of CPUs" if name == "NUM_CPUS" else "an amount of memory in MiB"
        label = _label(definition)
        if value.strip().isdigit() or not is_undefined(_constant(value)):
            return self._integer(value, label, what=what, minimum=minimum)
        if not self._expression(value, label):
            return None
        references = ClassAd().externalRefs(parse_expr(value, field=label))
        others = [r for r in references if r and not r.lower().startswith("detected")]
        if not others:
            return value
        self.problems.append(
            f"{label}: {value!r} refers to {', '.join(sorted(others))}; {name} is "
            f"{what} or an expression over the machine's Detected* attributes such as "
            "$(DETECTED_CPUS) * 2"
        )
        return None

    def _reserved(self) -> tuple[int, int]:
        reserved = self.spec.reserved
        memory = reserved.memory_mib
        found = self._knob("RESERVED_MEMORY")
        if found is not None:
            value, definition = found
            if "memory" in reserved.model_fields_set:
                self.warnings.append(f"spec.reserved.memory overrides {_label(definition)}")
            else:
                what = "an amount of memory in MiB"
                memory = self._integer(value, _label(definition), what=what) or 0
        return reserved.cpus, memory

    def _machine_resources(
        self,
    ) -> tuple[
        dict[str, float], dict[str, tuple[str, ...]], tuple[str, ...] | None, tuple[str, ...]
    ]:
        names_found = self._knob("MACHINE_RESOURCE_NAMES")
        names = None
        if names_found is not None:
            unique: dict[str, str] = {}
            for name in _split_list(names_found[0]):
                unique.setdefault(name.lower(), name)
            names = tuple(unique.values())
        quantities: dict[str, float] = {}
        ids: dict[str, tuple[str, ...]] = {}
        inventory: list[str] = []
        for match, definition in self._matching(_MACHINE_RESOURCE):
            resource = match.group(1)
            if resource.upper() == "NAMES":
                continue
            self.consumed.add(definition.name.upper())
            inventory_name = re.fullmatch(r"INVENTORY_(\w+)", resource, re.IGNORECASE)
            resource = inventory_name.group(1) if inventory_name else resource
            if not self._enabled(resource, names, definition):
                continue
            if inventory_name:
                inventory.append(resource)
                self._expand(definition)
                continue
            self._resource_quantity(resource, definition, quantities, ids)
        for resource, quantity in self.spec.machine_resources.items():
            self._override(resource, quantities, f"spec.machineResources.{resource}")
            quantities[resource] = float(quantity)
            if names is not None and resource.lower() not in {n.lower() for n in names}:
                names = (*names, resource)
        return quantities, ids, names, tuple(inventory)

    def _enabled(
        self, resource: str, names: tuple[str, ...] | None, definition: Definition
    ) -> bool:
        if names is None or resource.lower() in {name.lower() for name in names}:
            return True
        self.warnings.append(
            f"{_label(definition)}: {resource} is not in MACHINE_RESOURCE_NAMES "
            f"({' '.join(names)}), so it is not enabled"
        )
        return False

    def _resource_quantity(
        self,
        resource: str,
        definition: Definition,
        quantities: dict[str, float],
        ids: dict[str, tuple[str, ...]],
    ) -> None:
        """MACHINE_RESOURCE_<name>: a quantity (`16`) or a list of device ids (`c0, c1`)."""
        value = self._expand(definition)
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
            self.problems.append(
                f"{_label(definition)}: {value!r} is not a quantity of {resource}; use a number "
                ">= 0 or a list of device ids"
            )
            return
        quantities[resource] = quantity

    def _override(self, resource: str, existing: Mapping[str, object], by: str) -> None:
        for name in existing:
            if name.lower() == resource.lower():
                self.warnings.append(f"{by} overrides MACHINE_RESOURCE_{name} from condorConfig")

    # -- consumption policies ------------------------------------------------------------

    def _machine_consumption_policy(self) -> bool:
        found = self._knob("CONSUMPTION_POLICY")
        snippet = self._boolean(found[0], _label(found[1])) if found else None
        if self.spec.consumption_policy is not None:
            if found is not None:
                self.warnings.append(f"spec.consumptionPolicy overrides {_label(found[1])}")
            return self.spec.consumption_policy
        return bool(snippet)

    def _machine_consumption(self) -> dict[str, str]:
        """CONSUMPTION_<resource>: the machine-wide consumption expressions."""
        consumption: dict[str, str] = {}
        for match, definition in self._matching(_MACHINE_CONSUMPTION):
            if match.group(1).upper() == "POLICY":
                continue
            found = self._knob(definition.name)
            if found is not None and self._expression(found[0], _label(definition)):
                consumption[_resource_key(match.group(1))] = found[0]
        return consumption

    def _consumption(
        self, policy: bool, partitionable: bool, explicit: Mapping[str, str], where: str
    ) -> dict[str, str]:
        """A type's consumption expressions: the reference's defaults, then those given."""
        if not policy:
            if explicit:
                self.warnings.append(
                    f"{where}: consumption expressions have no effect without a consumption "
                    "policy (CONSUMPTION_POLICY or SLOT_TYPE_<N>_CONSUMPTION_POLICY = True)"
                )
            return {}
        if not partitionable:
            self.warnings.append(
                f"{where}: a consumption policy applies to partitionable slot types only; "
                "this type is static"
            )
        return {**DEFAULT_CONSUMPTION, **explicit}

    # -- slot types ----------------------------------------------------------------------

    def _slot_types(
        self, machine_policy: bool, machine_consumption: Mapping[str, str]
    ) -> tuple[SlotTypeDef, ...]:
        from_snippet, labels = self._snippet_slot_types(machine_policy, machine_consumption)
        types = dict(from_snippet)
        for index, slot_type in enumerate(self.spec.slot_types):
            if slot_type.id in labels:
                self.warnings.append(
                    f"spec.slotTypes[{index}] overrides slot type {slot_type.id} of "
                    f"condorConfig ({', '.join(labels[slot_type.id])})"
                )
            compiled = self._spec_slot_type(index, slot_type, machine_policy, machine_consumption)
            if compiled is not None:
                types[slot_type.id] = compiled
        return self._num_slots(types)

    def _snippet_slot_types(
        self, machine_policy: bool, machine_consumption: Mapping[str, str]
    ) -> tuple[dict[int, SlotTypeDef], dict[int, list[str]]]:
        knobs_by_type: dict[int, dict[str, tuple[str, Definition] | None]] = {}
        extra: dict[int, dict[str, tuple[str, Definition]]] = {}
        labels: dict[int, list[str]] = {}
        for match, definition in self._matching(_TYPE_COUNT) + self._matching(_TYPE_KNOB):
            type_id = int(match.group(1))
            labels.setdefault(type_id, []).append(_label(definition))
            found = self._knob(definition.name)
            if type_id == 0:
                self.problems.append(
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
            compiled = self._snippet_slot_type(
                type_id, type_knobs, extra.get(type_id, {}), machine_policy, machine_consumption
            )
            if compiled is not None:
                types[type_id] = compiled
        return types, labels

    def _snippet_slot_type(
        self,
        type_id: int,
        found: Mapping[str, tuple[str, Definition] | None],
        consumption_knobs: Mapping[str, tuple[str, Definition]],
        machine_policy: bool,
        machine_consumption: Mapping[str, str],
    ) -> SlotTypeDef | None:
        shares = self._snippet_shares(found.get("shares"))
        count = self._snippet_count(type_id, found)
        partitionable = self._snippet_flag(found.get("partitionable"), default=False)
        policy = self._snippet_flag(found.get("policy"), default=machine_policy)
        explicit = dict(machine_consumption)
        for resource, (value, definition) in consumption_knobs.items():
            if self._expression(value, _label(definition)):
                explicit[_resource_key(resource)] = value
        consumption = self._consumption(
            policy, partitionable, explicit, f"condorConfig slot type {type_id}"
        )
        if shares is None or count is None:
            return None
        return SlotTypeDef(type_id, count, partitionable, shares, policy, consumption)

    def _snippet_shares(self, found: tuple[str, Definition] | None) -> ShareSpec | None:
        if found is None:
            return ShareSpec()
        value, definition = found
        try:
            return parse_shares(value, field=_label(definition))
        except ShareError as err:
            self.problems.append(str(err))
            return None

    def _snippet_count(
        self, type_id: int, found: Mapping[str, tuple[str, Definition] | None]
    ) -> int | str | None:
        counted, shares = found.get("count"), found.get("shares")
        if counted is not None:
            return self._count(*counted)
        if shares is not None:
            self.warnings.append(
                f"{_label(shares[1])}: NUM_SLOTS_TYPE_{type_id} is not set, so no slots of type "
                f"{type_id} are created"
            )
        return 0

    def _count(self, value: str, definition: Definition) -> int | str | None:
        """NUM_SLOTS_TYPE_<N> / NUM_SLOTS: a whole number, or an expression over the machine."""
        label = _label(definition)
        if value.strip().isdigit():
            return int(value)
        if not self._expression(value, label):
            return None
        result = _constant(value)
        if is_undefined(result):
            return self._machine_expression(value, label)
        whole = _whole(result)
        if whole is not None and whole >= 0:
            return whole
        reason = "it is an error" if is_error(result) else f"it is {result!r}"
        self.problems.append(
            f"{label}: {value!r} is not a number of slots ({reason}); use a whole number >= 0 or "
            "an expression over the machine such as $(DETECTED_CPUS) - 1"
        )
        return None

    def _machine_expression(self, value: str, label: str) -> str | None:
        """A count that depends on the node may refer to its Detected*/Total* attributes only."""
        references = ClassAd().externalRefs(parse_expr(value, field=label))
        others = [r for r in references if not r.lower().startswith(("detected", "total"))]
        if not others:
            return value
        self.problems.append(
            f"{label}: {value!r} refers to {', '.join(sorted(others))}; a slot count is a whole "
            "number or an expression over the machine's Detected*/Total* attributes such as "
            "$(DETECTED_CPUS) - 1"
        )
        return None

    def _snippet_flag(self, found: tuple[str, Definition] | None, *, default: bool) -> bool:
        if found is None:
            return default
        value = self._boolean(found[0], _label(found[1]))
        return default if value is None else value

    def _spec_slot_type(
        self,
        index: int,
        slot_type: SlotTypeSpec,
        machine_policy: bool,
        machine_consumption: Mapping[str, str],
    ) -> SlotTypeDef | None:
        where = f"spec.slotTypes[{index}]"
        try:
            if isinstance(slot_type.resources, str):
                shares = parse_shares(slot_type.resources, field=f"{where}.resources")
            else:
                shares = _shares_from_map(slot_type.resources, field=f"{where}.resources")
        except ShareError as err:
            self.problems.append(str(err))
            return None
        policy = slot_type.consumption_policy
        policy = machine_policy if policy is None else policy
        explicit = dict(machine_consumption)
        explicit.update({_resource_key(k): v for k, v in slot_type.consumption.items()})
        consumption = self._consumption(policy, slot_type.partitionable, explicit, where)
        return SlotTypeDef(
            slot_type.id, slot_type.count, slot_type.partitionable, shares, policy, consumption
        )

    def _num_slots(self, types: dict[int, SlotTypeDef]) -> tuple[SlotTypeDef, ...]:
        """NUM_SLOTS: evenly divided static slots (type 0) when no slot type has a count."""
        found = self._knob("NUM_SLOTS")
        counted = any(t.count != 0 for t in types.values())
        if found is not None and counted:
            self.warnings.append(
                f"{_label(found[1])}: NUM_SLOTS is ignored because slot types set "
                "NUM_SLOTS_TYPE_<N>"
            )
        if found is not None and not counted:
            count = self._count(*found)
            if count is not None:
                return (SlotTypeDef(0, count, False, ShareSpec()),)
            return ()
        if types and not counted:
            self.warnings.append(
                "no slot type has a count (NUM_SLOTS_TYPE_<N>) and NUM_SLOTS is not set, so "
                f"the slot types ({', '.join(str(t) for t in sorted(types))}) create no slots and "
                "the node gets the default: one partitionable slot with everything"
            )
            return ()
        return tuple(types[type_id] for type_id in sorted(types))

    # -- policy expressions --------------------------------------------------------------

    def _expressions(self) -> dict[str, str]:
        expressions: dict[str, str] = {}
        for field_name, knob in POLICY_EXPRESSIONS.items():
            found = self._knob(knob)
            structured = getattr(self.spec, field_name)
            if structured is not None:
                if found is not None:
                    alias = type(self.spec).model_fields[field_name].alias or field_name
                    self.warnings.append(f"spec.{alias} overrides {_label(found[1])}")
                expressions[knob] = structured
            elif found is not None and self._expression(found[0], _label(found[1])):
                expressions[knob] = found[0]
            elif found is None and (default := self._moved_default(knob)) is not None:
                expressions[knob] = default
        return expressions

    def _moved_default(self, knob: str) -> str | None:
        """A knob the policy leaves at its default, if that default refers to a macro the
        policy changed: MachineMaxVacateTime is $(MaxVacateTime), so setting MaxVacateTime
        changes it, as in HTCondor. None while the default means what it means alone."""
        definition = self.table.get(knob)
        if definition is None or not definition.is_builtin:
            return None
        value = self._expand(definition)
        if not value or value == builtin_value(knob):
            return None
        return value if self._expression(value, _label(definition)) else None

    # -- STARTD_ATTRS --------------------------------------------------------------------

    def _attributes(self) -> tuple[dict[str, str], dict[int, dict[str, str]]]:
        """STARTD_ATTRS on every slot; SLOT<N>_STARTD_ATTRS and SLOT<N>_<attr> on slot N.

        As "Configuring STARTD_ATTRS on a per-slot basis": slot N advertises the
        STARTD_ATTRS list plus its SLOT<N>_STARTD_ATTRS, each valued by SLOT<N>_<attr>
        when defined, else by <attr>.
        """
        names = self._attribute_list("STARTD_ATTRS") + self._attribute_list("STARTD_EXPRS")
        names = list(dict.fromkeys(names))
        attrs: dict[str, str] = {}
        for name, lister in names:
            value = self._attribute_value(name, lister)
            if value is not None:
                attrs[name] = value
        slot_attrs = self._slot_attribute_lists()
        advertised = {name.upper() for name, _ in names}
        self._slot_attribute_values(advertised, slot_attrs)
        for name, value in self.spec.attributes.items():
            attrs[name] = value
        for key, values in self.spec.slot_attributes.items():
            slot_attrs.setdefault(int(key), {}).update(values)
        return attrs, {slot: slot_attrs[slot] for slot in sorted(slot_attrs)}

    def _attribute_list(self, knob: str) -> list[tuple[str, str]]:
        found = self._knob(knob)
        if found is None:
            return []
        return self._names_in(*found)

    def _names_in(self, value: str, definition: Definition) -> list[tuple[str, str]]:
        names = []
        for name in _split_list(value):
            if _ATTRIBUTE.fullmatch(name):
                names.append((name, _label(definition)))
            else:
                self.problems.append(
                    f"{_label(definition)}: {name!r} is not an attribute name; list names "
                    "separated by commas or spaces"
                )
        return names

    def _attribute_value(self, name: str, lister: str, slot: int | None = None) -> str | None:
        found = self._knob(f"SLOT{slot}_{name}") if slot is not None else None
        found = found or self._knob(name, builtin=True)
        if found is None:
            if any(key.lower() == name.lower() for key in self.spec.attributes):
                return None
            self.problems.append(
                f"{lister}: lists {name}, but nothing defines it; add `{name} = <expression>` to "
                "condorConfig or spec.attributes"
            )
            return None
        value, definition = found
        return value if self._expression(value, _label(definition)) else None

    def _slot_attribute_lists(self) -> dict[int, dict[str, str]]:
        slot_attrs: dict[int, dict[str, str]] = {}
        for match, definition in self._matching(_SLOT_LIST):
            slot = int(match.group(1))
            found = self._knob(definition.name)
            if slot < 1:
                self.problems.append(f"{_label(definition)}: slots are numbered from 1")
                continue
            for name, lister in self._names_in(*found) if found else []:
                value = self._attribute_value(name, lister, slot)
                if value is not None:
                    slot_attrs.setdefault(slot, {})[name] = value
        return slot_attrs

    def _slot_attribute_values(
        self, advertised: set[str], slot_attrs: dict[int, dict[str, str]]
    ) -> None:
        """SLOT<N>_<attr> for an attribute slot N advertises: its value on slot N."""
        for match, definition in self._matching(_SLOT_ATTR):
            slot, attr = int(match.group(1)), match.group(2)
            if _SLOT_LIST.fullmatch(_bare(definition.name)) or knobs.is_startd_knob(
                _bare(definition.name)
            ):
                continue
            listed = advertised | {name.upper() for name in slot_attrs.get(slot, {})}
            if attr.upper() not in listed:
                self.consumed.add(definition.name.upper())
                self.warnings.append(self._unlisted_slot_attribute(definition, slot, attr))
                continue
            found = self._knob(definition.name)
            if found is not None and self._expression(found[0], _label(definition)):
                _replace(slot_attrs.setdefault(slot, {}), attr, found[0])

    def _unlisted_slot_attribute(self, definition: Definition, slot: int, attr: str) -> str:
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

    # -- request rounding ----------------------------------------------------------------

    def _modify_request(self) -> dict[str, str]:
        """MODIFY_REQUEST_EXPR_<attr>: HTCondor's defaults, then the snippet, then the spec."""
        result = dict(DEFAULT_MODIFY_REQUEST)
        from_snippet: dict[str, str] = {}
        for match, definition in self._matching(_MODIFY_REQUEST):
            found = self._knob(definition.name)
            if found is not None and self._expression(found[0], _label(definition)):
                attr = _REQUEST_ATTRS.get(match.group(1).upper(), match.group(1))
                _replace(result, attr, found[0])
                from_snippet[attr.upper()] = _label(definition)
        for attr, value in self.spec.modify_request.items():
            canonical = _REQUEST_ATTRS.get(attr.upper(), attr)
            if canonical.upper() in from_snippet:
                self.warnings.append(
                    f"spec.modifyRequest.{attr} overrides {from_snippet[canonical.upper()]}"
                )
            _replace(result, canonical, value)
        return result

    # -- startd cron ---------------------------------------------------------------------

    def _cron(self) -> tuple[tuple[cron.CronJob, ...], cron.CronSettings]:
        """STARTD_CRON_JOBLIST and its jobs' knobs, then spec.cron (which wins by name).

        As "Daemon Hook Configuration Options"; STARTD_CRON_NAME (which HTCondor no
        longer supports) renames the knobs' prefix (`CRON_JOBLIST` for `CRON`).
        """
        base = "STARTD_CRON"
        renamed = self._knob("STARTD_CRON_NAME")
        if renamed is not None:
            base = renamed[0].strip().upper()
            self.warnings.append(
                f"{_label(renamed[1])}: HTCondor no longer supports STARTD_CRON_NAME; Kondor "
                f"reads the {base}_* knobs as it once did, but prefer STARTD_CRON_*"
            )
        settings = self._cron_settings(base)
        jobs: dict[str, cron.CronJob] = {}
        listed = self._knob(f"{base}_JOBLIST")
        for name in _split_list(listed[0]) if listed else []:
            label = _label(listed[1]) if listed else ""
            if name.lower() in jobs:
                self.warnings.append(f"{label}: {name} is listed twice; it runs once")
                continue
            job = self._snippet_cron_job(base, name, label)
            if job is not None:
                jobs[name.lower()] = job
        for index, spec_job in enumerate(self.spec.cron):
            job = self._spec_cron_job(index, spec_job)
            if job is None:
                continue
            if job.name.lower() in jobs:
                self.warnings.append(
                    f"spec.cron[{index}] overrides the startd cron job {job.name} of condorConfig"
                )
            jobs[job.name.lower()] = job
        self._unused_cron_knobs(base)
        return tuple(jobs.values()), settings

    def _cron_settings(self, base: str) -> cron.CronSettings:
        max_load = cron.DEFAULT_MAX_JOB_LOAD
        found = self._knob(f"{base}_MAX_JOB_LOAD")
        if found is not None:
            max_load = self._load(found[0], _label(found[1]), default=max_load)
        log_non_zero = self._snippet_flag(self._knob(f"{base}_LOG_NON_ZERO_EXIT"), default=False)
        autopublish = cron.AutoPublish.NEVER
        found = self._knob(f"{base}_AUTOPUBLISH")
        if found is not None:
            chosen = next(
                (a for a in cron.AutoPublish if a.value.lower() == found[0].strip().lower()), None
            )
            if chosen is None:
                self.problems.append(
                    f"{_label(found[1])}: {found[0]!r} is not Never, Always or If_Changed"
                )
            else:
                autopublish = chosen
        return cron.CronSettings(max_load, log_non_zero, autopublish)

    def _load(self, value: str, label: str, *, default: float) -> float:
        result = _constant(value)
        if isinstance(result, int | float) and not isinstance(result, bool) and result >= 0:
            return float(result)
        self.problems.append(f"{label}: {value!r} is not a load; use a number >= 0 such as 0.01")
        return default

    def _snippet_cron_job(self, base: str, name: str, listed_by: str) -> cron.CronJob | None:
        def knob(item: str) -> tuple[str, Definition] | None:
            return self._knob(f"{base}_{name}_{item}")

        try:
            cron.check_job_name(name, field=listed_by)
        except cron.CronError as err:
            self.problems.append(str(err))
            return None
        metrics = knob("METRICS")
        if metrics is not None:
            self._resource_monitor(base, name, metrics[1])
            return None
        executable = knob("EXECUTABLE")
        if executable is None:
            self.problems.append(
                f"{listed_by}: the startd cron job {name} has no {base}_{name.upper()}_EXECUTABLE"
            )
            return None
        problems = len(self.problems)
        fields: dict[str, object] = {
            "name": name,
            "executable": executable[0],
            "source": _label(executable[1]),
        }
        mode_found = knob("MODE")
        mode = cron.CronMode.PERIODIC
        if mode_found is not None:
            mode = self._cron_value(cron.parse_mode, mode_found) or mode
        fields["mode"] = mode
        period = knob("PERIOD")
        if mode is cron.CronMode.ONE_SHOT:
            if period is not None:
                self.warnings.append(f"{_label(period[1])}: a OneShot job has no period; ignored")
        elif period is None:
            self.problems.append(
                f"{_label(executable[1])}: the {mode} job {name} needs "
                f"{base}_{name.upper()}_PERIOD (15s, 10m, 2h)"
            )
        elif mode is cron.CronMode.WAIT_FOR_EXIT and re.fullmatch(
            r"\s*0+\s*[smhSMH]?\s*", period[0]
        ):
            # FEATURE : ContinuousCronHook's PERIOD = 0: restart as soon as it exits (the
            # schedule keeps the manual's one-second minimum).
            fields["period"] = 0
        else:
            fields["period"] = self._cron_value(cron.parse_period, period) or 0
        readers = {
            "ARGS": ("args", cron.parse_args),
            "PREFIX": ("prefix", cron.check_prefix),
            "SLOTS": ("slots", cron.parse_slots),
            "ENV": ("env", cron.parse_env),
        }
        for item, (attribute, reader) in readers.items():
            found = knob(item)
            if found is not None:
                fields[attribute] = self._cron_value(reader, found)
        for item, attribute in (
            ("KILL", "kill"),
            ("RECONFIG_RERUN", "reconfig_rerun"),
            ("RECONFIG", "reconfig"),
        ):
            fields[attribute] = self._snippet_flag(knob(item), default=False)
        found = knob("JOB_LOAD")
        if found is not None:
            fields["job_load"] = self._load(found[0], _label(found[1]), default=0.01)
        found = knob("CWD")
        if found is not None:
            fields["cwd"] = found[0]
        found = knob("CONDITION")
        if found is not None and self._expression(found[0], _label(found[1])):
            fields["condition"] = found[0]
        if len(self.problems) > problems:
            return None
        return cron.CronJob(**fields)  # type: ignore[arg-type]

    def _resource_monitor(self, base: str, name: str, metrics: Definition) -> None:
        """A job with METRICS is a custom machine resource monitor, which Kondor does not
        implement: the whole job is left out (`use FEATURE : GPUs` defines one)."""
        knob_prefix = f"{base}_{name}_".upper()
        for definition in self.table.user_definitions():
            if _bare(definition.name).upper().startswith(knob_prefix):
                self.consumed.add(definition.name.upper())
        origin = metrics.origin
        where = (
            f"condorConfig line {origin.line} ({origin.text.strip()})"
            if origin.template is not None
            else _label(metrics)
        )
        self.warnings.append(
            f"{where}: the startd cron job {name} is a custom machine resource monitor "
            f"({base}_{name}_METRICS), which Kondor does not implement; it does not run"
        )

    def _cron_value(self, reader: Any, found: tuple[str, Definition]) -> Any:
        try:
            return reader(found[0], field=_label(found[1]))
        except cron.CronError as err:
            self.problems.append(str(err))
            return None

    def _spec_cron_job(self, index: int, spec: CronJobSpec) -> cron.CronJob | None:
        where = f"spec.cron[{index}]"
        mode = cron.CronMode(spec.mode)
        period = 0
        try:
            if mode is cron.CronMode.ONE_SHOT:
                if spec.period is not None:
                    self.warnings.append(f"{where}.period: a OneShot job has no period; ignored")
            elif spec.period is None:
                raise cron.CronError(f"{where}.period: a {mode} job needs a period (15s, 10m)")
            else:
                period = cron.parse_period(str(spec.period), field=f"{where}.period")
            cron.check_env_names(spec.env, field=f"{where}.env")
        except cron.CronError as err:
            self.problems.append(str(err))
            return None
        return cron.CronJob(
            name=spec.name,
            executable=spec.executable,
            args=tuple(spec.args),
            mode=mode,
            period=period,
            prefix=spec.prefix,
            slots=tuple(sorted(set(spec.slots))),
            kill=spec.kill,
            reconfig_rerun=spec.reconfig_rerun,
            reconfig=spec.reconfig,
            job_load=spec.job_load,
            env=dict(spec.env),
            cwd=spec.cwd,
            condition=spec.condition,
            source=f"{where}.executable",
        )

    def _unused_cron_knobs(self, base: str) -> None:
        """STARTD_CRON_* the compiler did not read: said why, never silently dropped."""
        for definition in self.table.user_definitions():
            name = _bare(definition.name)
            upper = name.upper()
            if not upper.startswith(f"{base}_") or upper in self.consumed:
                continue
            if self.table.get(name) is not definition:
                continue
            self.consumed.add(definition.name.upper())
            if upper == f"{base}_CONFIG_VAL":
                reason = "there is no condor_config_val on a Kondor node; it has no effect"
            elif upper.endswith("_METRICS"):
                reason = "custom machine resource monitors are not implemented; it has no effect"
            else:
                reason = f"it is not a knob of a job in {base}_JOBLIST; it has no effect"
            self.warnings.append(f"{_label(definition)}: {name}: {reason}")

    # -- everything else -----------------------------------------------------------------

    def _macros(self) -> dict[str, str]:
        """Every macro not turned into a field, expanded; unknown knobs reported."""
        self._startd_knobs()
        macros: dict[str, str] = {}
        unimplemented_by_use: dict[tuple[int, str], dict[str, list[str]]] = {}
        for definition in self.table.user_definitions():
            name = _bare(definition.name)
            if definition.name.upper() in self.consumed or self.table.get(name) is not definition:
                continue
            value = self._helper_value(definition)
            if value is None:
                continue
            macros[knobs.canonical_name(name)] = value
            reason = knobs.unimplemented_reason(name)
            used = name.upper() in self.used and name.upper() not in knobs.UNIMPLEMENTED
            if knobs.is_startd_knob(name) or used:
                continue
            origin = definition.origin
            if origin.template is not None:
                if reason is not None:
                    by_reason = unimplemented_by_use.setdefault((origin.line, origin.text), {})
                    by_reason.setdefault(reason, []).append(name)
            elif reason is not None:
                self.warnings.append(
                    f"{_label(definition)}: {name} is an HTCondor knob Kondor does not implement "
                    f"({reason}); it has no effect"
                )
            else:
                self.warnings.append(
                    f"{_label(definition)}: {name} is not a knob Kondor knows, and nothing Kondor "
                    f"reads refers to it as $({name}); it has no effect"
                )
        for (line, text), by_reason in unimplemented_by_use.items():
            listed = "; ".join(
                f"{', '.join(names)} ({reason})" for reason, names in by_reason.items()
            )
            self.warnings.append(
                f"condorConfig line {line} ({text.strip()}) sets knobs Kondor does not implement, "
                f"which have no effect: {listed}"
            )
        if self.spec.user_accounts:  # the structured field wins, user by user, over the knob
            try:
                macros[USER_ACCOUNTS_KNOB] = merge_user_accounts(
                    macros.get(USER_ACCOUNTS_KNOB, ""),
                    {user: (ids.uid, ids.gid) for user, ids in self.spec.user_accounts.items()},
                )
            except AccountError as err:
                self.problems.append(str(err))
        if self.spec.pod_mode is not None:  # the structured field wins over the snippet's knob
            macros["KONDOR_POD_MODE"] = self.spec.pod_mode
        mode = macros.get("KONDOR_POD_MODE")
        if mode is not None and mode.strip().lower() not in POD_MODES:
            self.problems.append(
                f"KONDOR_POD_MODE = {mode}: expected one of {', '.join(POD_MODES)}"
            )
        if self.spec.pod_security is not None:  # likewise the Pod Security level
            macros["KONDOR_POD_SECURITY"] = self.spec.pod_security
        level = macros.get("KONDOR_POD_SECURITY")
        if level is not None and level.strip().lower() not in POD_SECURITY_LEVELS:
            self.problems.append(
                f"KONDOR_POD_SECURITY = {level}: expected one of "
                f"{', '.join(POD_SECURITY_LEVELS)} (the Pod Security Standards levels)"
            )
        return macros

    def _helper_value(self, definition: Definition) -> str | None:
        """A macro's value for `macros`. A template's helper that nothing uses and that cannot
        be expanded is left out with a warning: HTCondor never expands it either."""
        if definition.origin.template is None:
            return self._expand(definition, record=False)
        try:
            return self.table.expand(definition.value, owner=definition).value.strip()
        except MacroError as err:
            self.warnings.append(f"{err}; {definition.name} is left out of the macros")
            return None

    def _startd_knobs(self) -> None:
        """Startd knobs kept for the policy engine: their references count as used."""
        for definition in self.table.user_definitions():
            name = _bare(definition.name)
            if name.upper() not in knobs.STARTD_KNOBS or self.table.get(name) is not definition:
                continue
            value = self._expand(definition)
            if value and name.upper() in knobs.STARTD_EXPRESSION_KNOBS:
                self._expression(value, _label(definition))


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


def _resource_key(name: str) -> str:
    """A consumption key: cpus, memory, disk, swap, or a custom resource as written."""
    return canonical_resource(name) or name


def _replace(mapping: dict[str, str], key: str, value: str) -> None:
    """Set `key` in `mapping`, replacing a key that differs only in case (ClassAd names)."""
    for existing in list(mapping):
        if existing.lower() == key.lower():
            del mapping[existing]
    mapping[key] = value
