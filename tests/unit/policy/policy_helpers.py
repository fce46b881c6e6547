"""Helpers for policy tests: HTCondor config text -> StartdPolicy, and a slot driven over time.

The config compiler (kondor_core.config) owns macro expansion for real policies; this
small reader exists so the tests can paste the manual's examples verbatim.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kondor_core.policy import (
    Action,
    ActionKind,
    Event,
    MachineContext,
    SlotState,
    StartdPolicy,
    Transition,
    defaults,
    step,
)

_MACRO = re.compile(r"\$\(([A-Za-z0-9_.]+)\)")
_POLICY_KNOBS = {
    "start",
    "is_owner",
    "rank",
    "suspend",
    "continue",
    "preempt",
    "kill",
    "want_suspend",
    "want_vacate",
    "maxjobretirementtime",
    "machinemaxvacatetime",
    "runbenchmarks",
    "start_backfill",
    "evict_backfill",
    "hibernate",
    "claim_worklife",
    "match_timeout",
    "killing_timeout",
    "polling_interval",
    "update_interval",
    "enable_backfill",
    "startd_slot_attrs",
    "alive_interval",
    "max_claim_alives_missed",
    *(f"{k.lower()}_vanilla" for k in defaults.VANILLA_VARIANTS),
}


def _lines(text: str) -> list[tuple[str, str]]:
    joined = re.sub(r"\\\s*\n", " ", text)
    out = []
    for raw in joined.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, _, value = line.partition("=")
        out.append((name.strip(), value.strip()))
    return out


def read_config(text: str, *, templates: Sequence[Mapping[str, str]] = ()) -> dict[str, str]:
    """Config lines on top of HTCondor's defaults and helper macros, in order; a line that
    refers to itself (`START = ($(START)) || ...`) sees the previous value, as in HTCondor."""
    table: dict[str, str] = {}

    def put(name: str, value: str) -> None:
        key = next((k for k in table if k.lower() == name.lower()), name)
        previous = table.get(key, "")

        def own(match: re.Match[str]) -> str:
            return previous if match.group(1).lower() == name.lower() else match.group(0)

        table.pop(key, None)
        table[name] = _MACRO.sub(own, value)

    for source in (defaults.HELPER_MACROS, defaults.DEFAULT_POLICY, *templates):
        for name, value in source.items():
            put(name, value)
    for name, value in _lines(text):
        put(name, value)
    return table


def expand(table: Mapping[str, str], text: str, depth: int = 0) -> str:
    if depth > 50:
        raise ValueError("macro recursion too deep")
    lowered = {k.lower(): v for k, v in table.items()}

    def one(match: re.Match[str]) -> str:
        name = match.group(1).lower()
        if name not in lowered:
            raise KeyError(f"undefined macro $({match.group(1)})")
        return expand(table, lowered[name], depth + 1)

    return _MACRO.sub(one, text)


def policy_from(
    text: str = "", *, templates: Sequence[Mapping[str, str]] = (), utc_offset: float = 0.0
) -> StartdPolicy:
    """A StartdPolicy from HTCondor configuration text (the manual's examples pasted as is)."""
    table = read_config(text, templates=templates)
    knobs = {k: expand(table, v) for k, v in table.items() if k.lower() in _POLICY_KNOBS}
    attr_names = re.split(r"[\s,]+", expand(table, table.get("STARTD_ATTRS", "")))
    startd_attrs = {}
    for name in filter(None, attr_names):
        value = next((v for k, v in table.items() if k.lower() == name.lower()), None)
        if value is not None:
            startd_attrs[name] = expand(table, value)
    macros = {k: expand(table, v) for k, v in table.items() if k.lower() not in _POLICY_KNOBS}
    return StartdPolicy.compile(
        knobs, startd_attrs=startd_attrs, macros=macros, utc_offset=utc_offset
    )


@dataclass
class Driver:
    """One slot stepped through time; facts persist between steps until changed."""

    policy: StartdPolicy
    slot: SlotState
    facts: dict[str, Any] = field(default_factory=dict)
    transitions: list[Transition] = field(default_factory=list)
    actions: list[Action] = field(default_factory=list)
    last_actions: list[Action] = field(default_factory=list)
    machine: MachineContext = field(default_factory=MachineContext)

    def at(self, now: float, *events: Event, job_ad: Any = None, **facts: Any) -> Driver:
        self.facts.update(facts)
        self.slot, self.last_actions = step(
            self.policy, self.slot, dict(self.facts), job_ad, now, events, machine=self.machine
        )
        self.transitions.extend(self.slot.transitions)
        self.actions.extend(self.last_actions)
        return self

    @property
    def where(self) -> str:
        return f"{self.slot.state}/{self.slot.activity}"

    def path(self) -> list[str]:
        return [f"{t.state}/{t.activity}" for t in self.slot.transitions]

    def numbers(self) -> list[int | None]:
        return [t.number for t in self.slot.transitions]

    def kinds(self) -> list[ActionKind]:
        return [a.kind for a in self.last_actions]


IDLE_DESK = {"LoadAvg": 0.0, "CondorLoadAvg": 0.0, "KeyboardIdle": 3600, "ConsoleIdle": 3600}


def driver(
    policy: StartdPolicy, *, name: str = "slot1@desk", now: float = 0.0, **facts: Any
) -> Driver:
    slot = SlotState(name=name, entered_state=now, entered_activity=now)
    return Driver(policy=policy, slot=slot, facts={**IDLE_DESK, **facts})


def job(owner: str = "alice", **attrs: Any) -> dict[str, Any]:
    """A vanilla job ad; its claim lease is long so tests need no keep-alives."""
    return {
        "Owner": owner,
        "JobUniverse": 5,
        "ImageSize": 100_000,
        "JobLeaseDuration": 10**7,
        **attrs,
    }
