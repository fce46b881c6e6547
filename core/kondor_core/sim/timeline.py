"""Replaying a machine's policy over simulated time: the core of `kondor simulate --timeline`.

A pure function: steps (facts that change, events for slots or the machine) are
applied at the first polling tick at or after their time, every slot is
evaluated each POLLING_INTERVAL, and a simulated agent answers the engine's
actions the way a cooperative node would (a soft-killed job exits at the next
tick unless it ignores soft kills, a hard-killed job always does, the backfill
client starts and stops, benchmarks take a while, the schedd releases a claim
whose job exited). Matching submitted jobs to slots is the negotiator's part and
stays with the caller, which sends `Match` events.

`KeyboardIdle` and `ConsoleIdle` are idle *durations*: once set they grow with
simulated time until set again. Time attributes (time(), ClockMin, ClockDay,
the timers) follow simulated time.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kondor_core.policy.evaluation import StartdPolicy
from kondor_core.policy.machine import MachineState, step_machine
from kondor_core.policy.model import (
    Action,
    ActionKind,
    BackfillExited,
    BackfillStarted,
    BenchmarksDone,
    EngineError,
    Event,
    Fact,
    JobExited,
    JobGone,
    LeaseRenewed,
    ReleaseClaim,
    Transition,
)

#: Facts that are durations since an event and grow with time once set.
GROWING_FACTS = ("KeyboardIdle", "ConsoleIdle")


@dataclass(frozen=True)
class TimelineStep:
    """Something that happens at time `at`: facts change, events arrive."""

    at: float
    facts: Mapping[str, Fact] = field(default_factory=dict)
    slot_facts: Mapping[str, Mapping[str, Fact]] = field(default_factory=dict)
    #: Machine-wide events: Drain, CancelDrain, Shutdown, Vacate (every slot).
    events: Sequence[Event] = ()
    #: Events for one slot: Match, ActivateClaim, JobExited, Vacate, ...
    slot_events: Mapping[str, Sequence[Event]] = field(default_factory=dict)


@dataclass(frozen=True)
class SimulatedAgent:
    """How the simulated node answers the engine's actions (at the next polling tick)."""

    #: Jobs that ignore their soft-kill signal (so Killing can be shown).
    ignores_soft_kill: frozenset[str] = frozenset()
    #: Seconds the benchmarks take.
    benchmark_seconds: float = 0.0
    #: The schedd releases a claim as soon as its job exits (it has no more work for it).
    release_claim_after_exit: bool = True
    #: The backfill client starts when asked and exits when killed.
    backfill: bool = True
    #: The schedd sends keep-alives every this many seconds (None: never, so leases expire).
    alive_interval: float | None = 300.0


@dataclass(frozen=True)
class Timeline:
    transitions: list[Transition]
    #: (time, action) in the order the engine decided them.
    actions: list[tuple[float, Action]]
    machine: MachineState

    def as_dict(self) -> dict[str, Any]:
        """The `kondor simulate --timeline --output json` shape."""
        return {
            "transitions": [t.as_dict() for t in self.transitions],
            "actions": [{"time": time, **a.as_dict()} for time, a in self.actions],
        }


#: Ticks one timeline may take: a bound on the time a replay takes (a day at 1 s polling).
MAX_TICKS = 100_000


def run_timeline(
    policy: StartdPolicy,
    machine: MachineState,
    steps: Iterable[TimelineStep],
    *,
    until: float,
    start: float = 0.0,
    polling_interval: float | None = None,
    agent: SimulatedAgent | None = None,
) -> Timeline:
    """Replay `steps` on `machine` from `start` to `until` (inclusive), one tick per polling
    interval (POLLING_INTERVAL of the policy unless given)."""
    agent = agent or SimulatedAgent()
    interval = polling_interval if polling_interval is not None else policy.polling_interval
    ordered = list(steps)
    _check_timeline(ordered, start, until, interval)
    known = _KnownFacts()
    transitions: list[Transition] = []
    actions: list[tuple[float, Action]] = []
    due: list[tuple[float, str, Event]] = []  # agent answers: (time, slot, event)
    index = 0
    last_alive = start
    ticks = math.floor((until - start) / interval)
    for tick in range(ticks + 1):
        now: float = start + tick * interval
        if float(now).is_integer():
            now = int(now)  # whole seconds read better in the timeline
        machine_events: list[Event] = []
        events: dict[str, list[Event]] = {}
        while index < len(ordered) and ordered[index].at <= now:
            item = ordered[index]
            index += 1
            known.apply(item)
            machine_events.extend(item.events)
            _add_slot_events(events, item, agent)
        present = {s.name for s in machine.slots}
        if agent.alive_interval is not None and now - last_alive >= agent.alive_interval:
            last_alive = now
            _renew_leases(events, machine)
        for name in events:
            if name not in present:
                _raise_unknown(name, present)
        due = _deliver_due(due, events, now, present)
        result = step_machine(
            policy,
            machine,
            grown_facts(known.facts, known.set_at, now),
            now,
            machine_events,
            slot_facts=known.slot_facts_at(now, present),
            slot_events=events,
        )
        machine = result.machine
        transitions.extend(result.transitions)
        for action in result.actions:
            actions.append((now, action))
            answer = agent_answer(action, agent, now, interval)
            if answer is not None:
                due.append(answer)
    return Timeline(transitions=transitions, actions=actions, machine=machine)


def _check_timeline(
    ordered: Sequence[TimelineStep], start: float, until: float, interval: float
) -> None:
    """Refuse a bad polling interval, too many ticks, and steps out of order or of range."""
    if not interval > 0 or not math.isfinite(interval):
        raise EngineError(f"pollingInterval must be a positive number, not {interval}")
    if not math.isfinite(until - start) or (until - start) / interval > MAX_TICKS:
        raise EngineError(
            f"a timeline from {start} to {until} every {interval} s is more than {MAX_TICKS} "
            "ticks; shorten it or poll less often"
        )
    for previous, current in itertools.pairwise(ordered):
        if current.at < previous.at:
            raise EngineError(
                f"timeline steps go back in time: a step at {current.at} follows one at "
                f"{previous.at}; list steps in time order"
            )
    for item in ordered:
        if item.at < start or item.at > until:
            raise EngineError(f"a step at {item.at} is outside the timeline [{start}, {until}]")


@dataclass
class _KnownFacts:
    """The facts the steps have set so far, machine-wide and per slot, and when each was set
    (idle durations grow from then)."""

    facts: dict[str, Fact] = field(default_factory=dict)
    set_at: dict[str, float] = field(default_factory=dict)
    slot_facts: dict[str, dict[str, Fact]] = field(default_factory=dict)
    slot_set_at: dict[str, dict[str, float]] = field(default_factory=dict)

    def apply(self, item: TimelineStep) -> None:
        """The facts a step sets."""
        for key, value in item.facts.items():
            self.facts[key] = value
            self.set_at[key] = item.at
        for name, values in item.slot_facts.items():
            for key, value in values.items():
                self.slot_facts.setdefault(name, {})[key] = value
                self.slot_set_at.setdefault(name, {})[key] = item.at

    def slot_facts_at(self, now: float, present: set[str]) -> dict[str, Mapping[str, Fact]]:
        """Each present slot's own facts at `now`."""
        return {
            name: grown_facts(values, self.slot_set_at[name], now)
            for name, values in self.slot_facts.items()
            if name in present
        }


def _add_slot_events(
    events: dict[str, list[Event]], item: TimelineStep, agent: SimulatedAgent
) -> None:
    """A step's events for single slots; the schedd releases a claim whose job exited."""
    for name, slot_evs in item.slot_events.items():
        for event in slot_evs:
            events.setdefault(name, []).append(event)
            if agent.release_claim_after_exit and isinstance(event, JobExited):
                events[name].append(ReleaseClaim())


def _renew_leases(events: dict[str, list[Event]], machine: MachineState) -> None:
    """The schedd's keep-alive: every claimed slot's lease renewed, before its other events."""
    for slot in machine.slots:
        if slot.claim is not None:
            events.setdefault(slot.name, []).insert(0, LeaseRenewed())


def _deliver_due(
    due: list[tuple[float, str, Event]],
    events: dict[str, list[Event]],
    now: float,
    present: set[str],
) -> list[tuple[float, str, Event]]:
    """The agent's answers due by `now` go to their slots; those not yet due are returned."""
    still_due = []
    for when, name, event in due:
        if when > now:
            still_due.append((when, name, event))
        elif name in present:  # a released dynamic slot needs no answer
            events.setdefault(name, []).append(event)
    return still_due


def _raise_unknown(name: str, present: set[str]) -> None:
    raise EngineError(
        f"a timeline step names slot {name!r}, which the machine does not have at that time "
        f"(slots: {', '.join(sorted(present)) or 'none'})"
    )


def grown_facts(
    values: Mapping[str, Fact], set_at: Mapping[str, float], now: float
) -> dict[str, Fact]:
    out = dict(values)
    for key in GROWING_FACTS:
        value = out.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and key in set_at:
            grown = value + (now - set_at[key])
            out[key] = int(grown) if float(grown).is_integer() else grown
    return out


def agent_answer(
    action: Action, agent: SimulatedAgent, now: float, interval: float
) -> tuple[float, str, Event] | None:
    kind = action.kind
    slot = action.slot
    if kind is ActionKind.SOFT_KILL:
        if action.job_id in agent.ignores_soft_kill:
            return None
        return now + interval, slot, JobGone()
    if kind is ActionKind.HARD_KILL and not action.escalate:
        return now + interval, slot, JobGone()
    if kind is ActionKind.START_BACKFILL and agent.backfill:
        return now + interval, slot, BackfillStarted()
    if kind is ActionKind.KILL_BACKFILL and agent.backfill:
        return now + interval, slot, BackfillExited()
    if kind is ActionKind.RUN_BENCHMARKS:
        return now + max(agent.benchmark_seconds, interval), slot, BenchmarksDone()
    return None
