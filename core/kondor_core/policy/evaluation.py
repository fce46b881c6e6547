"""Evaluating startd policy expressions with classad2, in the context the reference prescribes.

"condor_startd Policy Configuration": some expressions are evaluated *locally*
(against the slot ad alone: IS_OWNER, START in Owner/Unclaimed/Matched,
RUNBENCHMARKS, START_BACKFILL, EVICT_BACKFILL, HIBERNATE) and the others against
the claim's job ad as TARGET (START at claim time and while Claimed, RANK,
SUSPEND, CONTINUE, PREEMPT, KILL, WANT_SUSPEND, WANT_VACATE, MaxJobRetirementTime,
MachineMaxVacateTime). Locally, job attributes are UNDEFINED, so
`KeyboardIdle > 900 || Owner == "coltrane"` is UNDEFINED, not FALSE.

HTCondor resolves an unqualified name in the slot ad first and then in the job ad.
classad2's `ExprTree.eval(my, target)` resolves only `TARGET.` explicitly, so the
job's attributes are copied into the evaluation ad underneath the slot's own
(never over them) while a job is being considered; `TARGET.x` still reaches the
job ad itself.

`time()` in a policy follows the simulated clock: it is rewritten to the slot
attribute `MyCurrentTime` when an expression is compiled (classad2's own `time()`
reads the host clock, and the core never reads a clock).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import classad2

from kondor_core.classads import parse_expr
from kondor_core.config import EffectivePolicy, builtin_value
from kondor_core.policy import defaults
from kondor_core.policy.model import EngineError

_STRING_LITERAL = re.compile(r'("(?:[^"\\]|\\.)*")')
_TIME_CALL = re.compile(r"\btime\s*\(\s*\)", re.IGNORECASE)
_ATTR_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")

#: Policy knobs by their canonical spelling (HTCondor knob names are case-insensitive).
_CANONICAL = {
    name.lower(): name
    for name in (
        "START",
        "IS_OWNER",
        "RANK",
        "SUSPEND",
        "CONTINUE",
        "PREEMPT",
        "KILL",
        "WANT_SUSPEND",
        "WANT_VACATE",
        "MaxJobRetirementTime",
        "MachineMaxVacateTime",
        "RUNBENCHMARKS",
        "START_BACKFILL",
        "EVICT_BACKFILL",
        "HIBERNATE",
        "CLAIM_WORKLIFE",
        "CpuBusy",
        *(f"{knob}_VANILLA" for knob in sorted(defaults.VANILLA_VARIANTS)),
    )
}
#: Settings that are numbers, booleans or lists rather than slot-ad expressions.
_SETTINGS = {
    *(k.lower() for k in defaults.NUMERIC_KNOBS),
    "enable_backfill",
    "startd_slot_attrs",
    "startd_attrs",
    "backfill_system",
}
#: Default expression text for policy knobs: HTCondor's defaults (`defaults.DEFAULT_POLICY`).
_DEFAULT_EXPRESSIONS: Mapping[str, str] = {
    name: text
    for name, text in defaults.DEFAULT_POLICY.items()
    if name.lower() not in _SETTINGS and name != "CLAIM_WORKLIFE"
}


def rewrite_time(text: str, *, attribute: str = "MyCurrentTime") -> str:
    """Replace `time()` (outside string literals) by `MyCurrentTime`, the slot's simulated now
    (`TARGET.MyCurrentTime` for a job expression evaluated with the job as MY)."""
    if "time" not in text.lower():
        return text
    parts = _STRING_LITERAL.split(text)
    for i in range(0, len(parts), 2):
        parts[i] = _TIME_CALL.sub(attribute, parts[i])
    return "".join(parts)


def truth(value: object) -> bool | None:
    """A ClassAd value as HTCondor's EvalBool reads it: True/False, or None for UNDEFINED/ERROR."""
    if isinstance(value, classad2.Value):
        return None
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return value != 0
    return None


def number(value: object) -> float | None:
    """A ClassAd value as a number (booleans count as 1/0), or None."""
    if isinstance(value, classad2.Value):
        return None
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, int | float):
        return float(value)
    return None


def describe(value: object) -> str:
    if isinstance(value, classad2.Value):
        return "UNDEFINED" if value is classad2.Value.Undefined else "ERROR"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    return repr(value)


def _lookup(table: Mapping[str, str], name: str) -> str | None:
    if name in table:
        return table[name]
    lowered = name.lower()
    for key, value in table.items():
        if key.lower() == lowered:
            return value
    return None


def _constant(text: str, *, field: str) -> object:
    return parse_expr(rewrite_time(text), field=field).eval()


def _setting_number(knobs: Mapping[str, str], name: str, default: float) -> float:
    text = _lookup(knobs, name)
    if text is None or not text.strip():
        return default
    raw = _constant(text, field=name)
    value = number(raw)
    if value is None:
        raise EngineError(f"{name}: {text!r} must evaluate to a number, not {describe(raw)}")
    return value


def _setting_bool(knobs: Mapping[str, str], name: str, default: bool) -> bool:
    text = _lookup(knobs, name)
    if text is None or not text.strip():
        return default
    raw = _constant(text, field=name)
    value = truth(raw)
    if value is None:
        raise EngineError(f"{name}: {text!r} must evaluate to TRUE or FALSE, not {describe(raw)}")
    return value


def _scalar(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


@dataclass
class _AdCache:
    """One persistent evaluation ad per slot; only attributes that changed are written."""

    ad: Any
    current: dict[str, Any] = field(default_factory=dict)
    #: What the last full sync was built from (compared by identity), the fact names then,
    #: and the facts that the engine's own attributes hide (a fact named State, say).
    base: tuple[Any, ...] | None = None
    fact_keys: frozenset[str] = frozenset()
    hidden: frozenset[str] = frozenset()

    def sync_cycle(
        self,
        base: tuple[Any, ...],
        facts: Mapping[str, Any],
        clock: int | float,
        build: Callable[[], tuple[Mapping[str, Any], dict[str, Any]]],
    ) -> Any:
        """Sync for one polling cycle. When the slot, its claims and the fact names are what
        the last full sync was built from (`base`, by identity), only the facts' values and
        the clock (MyCurrentTime) can differ: write those. Otherwise sync all of `build()`,
        which returns (the engine's attributes, everything)."""
        last = self.base
        if (
            last is not None
            and len(last) == len(base)
            and all(a is b for a, b in zip(last, base, strict=True))
            and facts.keys() == self.fact_keys
        ):
            ad = self.ad
            current = self.current
            hidden = self.hidden
            for key, value in facts.items():
                old = current.get(key, _MISSING)
                if old is value or (type(old) is type(value) and old == value) or key in hidden:
                    continue
                ad[key] = value
                current[key] = value
            if current.get(_CLOCK) != clock:
                ad[_CLOCK] = clock
                current[_CLOCK] = clock
            return ad
        engine, desired = build()
        self.base = base
        self.fact_keys = frozenset(facts)
        self.hidden = frozenset(key for key in facts if key in engine)
        return self.sync(desired)

    def sync(self, desired: dict[str, Any]) -> Any:
        ad = self.ad
        current = self.current
        get = current.get
        for key, value in desired.items():
            old = get(key, _MISSING)
            if old is value or (type(old) is type(value) and old == value):
                continue
            ad[key] = value
            current[key] = value
        if len(current) != len(desired):
            for key in [k for k in current if k not in desired]:
                del ad[key]
                del current[key]
        return ad


_MISSING = object()
_CLOCK = "MyCurrentTime"


class FilteredFacts(dict[str, Any]):
    """Facts already stripped of the policy's own names (built once per machine cycle)."""

    def __init__(self, policy: StartdPolicy, facts: Mapping[str, Any]) -> None:
        static = policy.static_names()
        super().__init__((k, v) for k, v in facts.items() if k.lower() not in static)
        self.policy = policy


class StartdPolicy:
    """A compiled startd policy: every knob parsed once by classad2, defaults filled in.

    Build it once per policy (`compile` or `from_effective`) and reuse it for every slot
    and every cycle: it keeps one evaluation ClassAd per slot name so a polling cycle only
    writes the attributes that changed. It is not thread-safe.
    """

    def __init__(
        self,
        expressions: Mapping[str, str],
        *,
        startd_attrs: Mapping[str, str],
        match_timeout: float,
        killing_timeout: float,
        polling_interval: float,
        update_interval: float,
        claim_worklife: float | None,
        enable_backfill: bool,
        startd_slot_attrs: tuple[str, ...],
        default_lease: float,
        utc_offset: float,
    ) -> None:
        self.expressions = dict(expressions)
        self.startd_attrs = dict(startd_attrs)
        self.match_timeout = match_timeout
        self.killing_timeout = killing_timeout
        self.polling_interval = polling_interval
        self.update_interval = update_interval
        self.claim_worklife = claim_worklife
        self.enable_backfill = enable_backfill
        self.startd_slot_attrs = startd_slot_attrs
        self.default_lease = default_lease
        self.utc_offset = utc_offset
        self._trees: dict[str, Any] = {}
        self._static: dict[str, Any] = {}
        for name, text in self.startd_attrs.items():
            tree = parse_expr(rewrite_time(text), field=name)
            self._static[name] = tree
        for name, text in self.expressions.items():
            tree = parse_expr(rewrite_time(text), field=name)
            self._trees[name] = tree
            self._static[name] = tree
        self._lowered = {name.lower(): name for name in self._trees}
        self._static_names = frozenset(name.lower() for name in self._static)
        self._ads: dict[tuple[str, bool], _AdCache] = {}
        self._job_trees: dict[str, Any] = {}
        self._exprs: dict[str, Any] = {}
        offset = _scalar(utc_offset)
        # ClockMin and ClockDay follow MyCurrentTime (1970-01-01 was a Thursday, day 4).
        self.clock_min_expr = self.expr(f"(int(MyCurrentTime) + {offset}) % 86400 / 60")
        self.clock_day_expr = self.expr(f"((int(MyCurrentTime) + {offset}) / 86400 + 4) % 7")

    # ------------------------------------------------------------------ construction

    @classmethod
    def compile(
        cls,
        knobs: Mapping[str, str],
        *,
        startd_attrs: Mapping[str, str] | None = None,
        macros: Mapping[str, str] | None = None,
        utc_offset: float = 0.0,
    ) -> StartdPolicy:
        """Compile policy knobs (macros already expanded) into an engine.

        `knobs` holds the policy expressions by HTCondor knob name (START, IS_OWNER, ...)
        and the startd settings (MATCH_TIMEOUT, KILLING_TIMEOUT, CLAIM_WORKLIFE,
        POLLING_INTERVAL, UPDATE_INTERVAL, ENABLE_BACKFILL, STARTD_SLOT_ATTRS, ALIVE_INTERVAL,
        MAX_CLAIM_ALIVES_MISSED); `macros` is searched for settings and for `CpuBusy` when
        `knobs` lacks them. Knobs left out take HTCondor's defaults (`defaults.DEFAULT_POLICY`).
        An expression classad2 cannot parse raises `ExpressionError` naming the knob and
        quoting classad2's message.
        """
        macros = macros or {}
        settings = {**macros, **knobs}
        expressions: dict[str, str] = {}
        for name, text in knobs.items():
            if name.lower() in _SETTINGS or not text.strip():
                continue
            if not _ATTR_NAME.match(name):
                raise EngineError(f"{name!r} is not a knob name a slot ad can hold (in {text!r})")
            expressions[_CANONICAL.get(name.lower(), name)] = text
        if "CpuBusy" not in expressions:
            cpu_busy = _lookup(macros, "CpuBusy")
            if cpu_busy and cpu_busy.strip():
                expressions["CpuBusy"] = cpu_busy
        for name, text in _DEFAULT_EXPRESSIONS.items():
            expressions.setdefault(name, text)

        worklife_text = _lookup(settings, "CLAIM_WORKLIFE")
        if worklife_text is None:
            worklife: float | None = 1200.0
        elif not worklife_text.strip():
            worklife = None
        else:
            raw = _constant(worklife_text, field="CLAIM_WORKLIFE")
            value = number(raw)
            if value is None:
                raise EngineError(
                    f"CLAIM_WORKLIFE: {worklife_text!r} must evaluate to a number of seconds "
                    f"(-1 or empty for no limit), not {describe(raw)}"
                )
            worklife = None if value < 0 else value
        expressions.pop("CLAIM_WORKLIFE", None)

        slot_attrs_text = _lookup(settings, "STARTD_SLOT_ATTRS") or ""
        slot_attrs = tuple(a for a in re.split(r"[\s,]+", slot_attrs_text) if a)
        for attr in slot_attrs:
            if not _ATTR_NAME.match(attr):
                raise EngineError(
                    f"STARTD_SLOT_ATTRS: {attr!r} in {slot_attrs_text!r} is not an attribute name"
                )
        alive = _setting_number(
            settings, "ALIVE_INTERVAL", defaults.NUMERIC_KNOBS["ALIVE_INTERVAL"]
        )
        missed = _setting_number(
            settings, "MAX_CLAIM_ALIVES_MISSED", defaults.NUMERIC_KNOBS["MAX_CLAIM_ALIVES_MISSED"]
        )
        return cls(
            expressions,
            startd_attrs=dict(startd_attrs or {}),
            match_timeout=_setting_number(settings, "MATCH_TIMEOUT", 120.0),
            killing_timeout=_setting_number(settings, "KILLING_TIMEOUT", 30.0),
            polling_interval=_setting_number(settings, "POLLING_INTERVAL", 5.0),
            update_interval=_setting_number(settings, "UPDATE_INTERVAL", 300.0),
            claim_worklife=worklife,
            enable_backfill=_setting_bool(settings, "ENABLE_BACKFILL", False),
            startd_slot_attrs=slot_attrs,
            default_lease=alive * missed,
            utc_offset=utc_offset,
        )

    @classmethod
    def from_effective(cls, policy: EffectivePolicy, *, utc_offset: float = 0.0) -> StartdPolicy:
        """The engine for a compiled SlotPolicy (its expressions, STARTD_ATTRS and macros).

        Policy knobs the compiler keeps among the macros (the `_VANILLA` variants of
        "Claimed State") are expressions here. `CpuBusy`, whose value the engine latches into
        CpuBusyTime ("Startd ClassAd Attributes"), is the manual's `CPUBusy` helper macro
        unless the policy defines its own.
        """
        macros = dict(policy.macros)
        if _lookup(macros, "CpuBusy") is None:
            macros["CpuBusy"] = builtin_value("CPUBusy") or ""
        knobs = {
            _CANONICAL[name.lower()]: text
            for name, text in macros.items()
            if name.lower() in _CANONICAL and name.lower() != "cpubusy"
        }
        knobs.update(policy.expressions)
        return cls.compile(
            knobs,
            startd_attrs=policy.startd_attrs,
            macros=macros,
            utc_offset=utc_offset,
        )

    # ------------------------------------------------------------------ lookups

    def knob(self, name: str) -> str | None:
        """The expression text of a knob, if the policy defines it."""
        key = self._lowered.get(name.lower())
        return None if key is None else self.expressions[key]

    def has(self, name: str) -> bool:
        return name.lower() in self._lowered

    def tree(self, name: str) -> Any:
        key = self._lowered.get(name.lower())
        return None if key is None else self._trees[key]

    def expr(self, text: str) -> Any:
        """An engine-written expression, parsed once (the same object every time)."""
        tree = self._exprs.get(text)
        if tree is None:
            tree = parse_expr(text, field="engine attribute")
            self._exprs[text] = tree
        return tree

    def job_tree(self, value: Any, *, field: str, job_is_my: bool = False) -> Any:
        """A job ad's expression with `time()` following simulated time (cached by text).

        `job_is_my`: the expression is evaluated with the job as MY and the slot as TARGET
        (the job's MaxJobRetirementTime, JobMaxVacateTime), so the clock is TARGET's."""
        text = str(value)
        key = f"{int(job_is_my)}{text}"
        tree = self._job_trees.get(key)
        if tree is None:
            attribute = "TARGET.MyCurrentTime" if job_is_my else "MyCurrentTime"
            tree = parse_expr(rewrite_time(text, attribute=attribute), field=field)
            self._job_trees[key] = tree
        return tree

    # ------------------------------------------------------------------ evaluation ads

    def evaluation_ad(
        self,
        slot_name: str,
        *,
        with_job: bool,
        base: tuple[Any, ...],
        facts: Mapping[str, Any],
        clock: int | float,
        build: Callable[[], tuple[Mapping[str, Any], dict[str, Any]]],
    ) -> Any:
        """The slot's evaluation ad holding the policy expressions, STARTD_ATTRS, the facts and
        the engine's attributes, written as little as possible (`_AdCache.sync_cycle`)."""
        key = (slot_name, with_job)
        cache = self._ads.get(key)
        if cache is None:
            cache = _AdCache(classad2.ClassAd(dict(self._static)))
            self._ads[key] = cache
        return cache.sync_cycle(base, facts, clock, build)

    def static_names(self) -> frozenset[str]:
        """Lower-cased names of the policy expressions and STARTD_ATTRS in every slot ad."""
        return self._static_names

    def without_static(self, facts: Mapping[str, Any]) -> Mapping[str, Any]:
        """`facts` minus names the policy defines (a policy expression wins over a fact)."""
        if isinstance(facts, FilteredFacts) and facts.policy is self:
            return facts
        static = self._static_names
        return {k: v for k, v in facts.items() if k.lower() not in static}

    def clock(self, now: float) -> tuple[int, int]:
        """ClockMin and ClockDay at `now` (epoch seconds, shifted by the machine's UTC offset)."""
        local = now + self.utc_offset
        day_seconds = local % 86400
        days = math.floor(local / 86400)
        return int(day_seconds // 60), int((days + 4) % 7)  # 1970-01-01 was a Thursday
