"""Helpers for policy tests: HTCondor config text -> StartdPolicy, and a slot driven over time.

Policies are built exactly as a SlotPolicy is: the text is the spec's `condorConfig`,
compiled by `kondor_core.config.compile_policy` (HTCondor's templates and the manual's
helper macros included), then handed to the engine. The manual's examples paste as is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kondor_core.api.slotpolicy import SlotPolicySpec
from kondor_core.config import compile_policy
from kondor_core.policy import (
    Action,
    ActionKind,
    Event,
    MachineContext,
    SlotState,
    StartdPolicy,
    Transition,
    step,
)

#: `use POLICY : Desktop`, for `policy_from(..., use=DESKTOP)`.
DESKTOP = ("POLICY : Desktop",)


def policy_from(
    text: str = "",
    *,
    use: Sequence[str] = (),
    spec: Mapping[str, Any] | None = None,
    utc_offset: float = 0.0,
) -> StartdPolicy:
    """A StartdPolicy from HTCondor configuration text (after `use` templates) and structured
    SlotPolicy fields (`spec`, camelCase as in a manifest), compiled by `compile_policy`."""
    config = "\n".join([*(f"use {template}" for template in use), text])
    document = {**(spec or {}), "condorConfig": config}
    effective = compile_policy(SlotPolicySpec.model_validate(document))
    return StartdPolicy.from_effective(effective, utc_offset=utc_offset)


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
