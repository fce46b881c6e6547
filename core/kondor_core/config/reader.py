"""Reading knobs for the SlotPolicy compiler: the macro table and spec being compiled, the
problems and warnings found so far, and which definitions became fields or were referred
to. Each section of the compiler (`machine_knobs`, `slot_types`, `policy_knobs`,
`cron_knobs`, `macros`) is functions of a `KnobReader`."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from kondor_core.api.slotpolicy import (
    SlotPolicySpec,
)
from kondor_core.classads import (
    ExpressionError,
    evaluate,
    parse_expr,
)
from kondor_core.config.shares import canonical_resource
from kondor_core.config.snippet import (
    Definition,
    MacroError,
    MacroTable,
)

_LIST_SEPARATOR = re.compile(r"[,\s]+")
_CONFIG_FUNCTION = re.compile(r"\$[A-Za-z_]+\(")
_TRUE = {"true", "yes", "t", "y", "1"}
_FALSE = {"false", "no", "f", "n", "0"}


@dataclass
class KnobReader:
    """Reads knobs from the macro table; collects every problem and warning on the way."""

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

    def expand(self, definition: Definition, *, record: bool = True) -> str | None:
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

    def knob(self, name: str, *, builtin: bool = False) -> tuple[str, Definition] | None:
        """The expanded value of knob `name` set by the snippet or spec.macros (or a built-in
        macro, with `builtin`), if non-empty."""
        definition = self.table.get(name)
        if definition is None or (definition.is_builtin and not builtin):
            return None
        self.consumed.add(definition.name.upper())
        value = self.expand(definition)
        if not value:
            return None
        return value, definition

    def matching(self, pattern: re.Pattern[str]) -> list[tuple[re.Match[str], Definition]]:
        """User definitions (the ones in effect) whose name matches `pattern`."""
        found = []
        for definition in self.table.user_definitions():
            name = bare(definition.name)
            match = pattern.fullmatch(name)
            if match is not None and self.table.get(name) is definition:
                found.append((match, definition))
        return found

    def expression(self, value: str, label: str) -> bool:
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

    def boolean(self, value: str, label: str) -> bool | None:
        """A boolean knob (True/False, yes/no, 1/0, or a constant expression); None if not."""
        lowered = value.strip().lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
        result = constant(value)
        if isinstance(result, bool):
            return result
        self.problems.append(f"{label}: {value!r} is not a boolean; use True or False")
        return None

    def integer(self, value: str, label: str, *, what: str, minimum: int = 0) -> int | None:
        """A whole-number knob >= minimum; None (and a problem naming `what`) if not."""
        result = whole(constant(value))
        if result is not None and result >= minimum:
            return result
        self.problems.append(f"{label}: {value!r} is not {what}; use a whole number >= {minimum}")
        return None

    def flag(self, found: tuple[str, Definition] | None, *, default: bool) -> bool:
        """A boolean knob as found by `knob`, `default` when unset or wrong."""
        if found is None:
            return default
        value = self.boolean(found[0], label(found[1]))
        return default if value is None else value


def label(definition: Definition) -> str:
    """Where a definition is, as problems and warnings name it."""
    return definition.origin.label(definition.name)


def bare(name: str) -> str:
    """`NAME` for `STARTD.NAME` (the startd's own override)."""
    prefix, dot, bare = name.rpartition(".")
    return bare if dot and prefix.upper() == "STARTD" else name


def split_list(value: str) -> list[str]:
    """The items of a list knob, separated by commas or spaces."""
    return [item for item in _LIST_SEPARATOR.split(value.strip()) if item]


def whole(value: Any) -> int | None:
    """`value` if it is a ClassAd integer (not a boolean, not UNDEFINED or ERROR)."""
    return value if type(value) is int else None


def constant(value: str) -> Any:
    """`value` evaluated as a ClassAd expression with no ad (Undefined where it needs one)."""
    try:
        return evaluate(value, field="constant")
    except ExpressionError:
        return None


def replace_key(mapping: dict[str, str], key: str, value: str) -> None:
    """Set `key` in `mapping`, replacing a key that differs only in case (ClassAd names)."""
    for existing in list(mapping):
        if existing.lower() == key.lower():
            del mapping[existing]
    mapping[key] = value


def resource_key(name: str) -> str:
    """A consumption key: cpus, memory, disk, swap, or a custom resource as written."""
    return canonical_resource(name) or name
