"""Power management ("Power Management" in the reference), on Kubernetes.

HTCondor's startd evaluates HIBERNATE in every slot each HIBERNATE_CHECK_INTERVAL seconds
(0, the default, turns power management off); when every slot asks for a low power state
(none says "NONE") the machine enters the deepest state asked for. A Kondor node is not put
to sleep: the agent publishes the state the slots agree on in the ExecutionPoint's
`status.power`, and the operator marks the Node for the cluster autoscaler's scale-down
(`node_annotations`). When a slot stops agreeing (a job claimed it), the next check takes
the mark away again.

Sleep states are named as HTCondor names them (S1..S5) or by their aliases (RAM, MEM and
SUSPEND are S3; DISK and HIBERNATE are S4; SHUTDOWN and OFF are S5); a name HTCondor does not
know vetoes like NONE and is reported.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kondor_core.api.executionpoint import PowerStatus
from kondor_core.api.meta import format_time
from kondor_core.classads import ExpressionError
from kondor_core.classads import evaluate as evaluate_expr
from kondor_core.policy import MachineContext, hibernate
from kondor_core.policy.evaluation import FilteredFacts, number
from kondor_core.startd.node import Startd

#: The knob that turns power management on (seconds between checks; 0: off).
CHECK_INTERVAL_KNOB = "HIBERNATE_CHECK_INTERVAL"
#: Sleep state name -> its depth (HTCondor's HibernatorBase states and their aliases).
SLEEP_LEVELS: Mapping[str, int] = {
    "NONE": 0,
    "S0": 0,
    "S1": 1,
    "STANDBY": 1,
    "SLEEP": 1,
    "S2": 2,
    "S3": 3,
    "RAM": 3,
    "MEM": 3,
    "SUSPEND": 3,
    "S4": 4,
    "DISK": 4,
    "HIBERNATE": 4,
    "S5": 5,
    "SHUTDOWN": 5,
    "OFF": 5,
}

#: The cluster autoscaler's annotation that keeps a node from being scaled down.
SCALE_DOWN_DISABLED = "cluster-autoscaler.kubernetes.io/scale-down-disabled"
#: Kondor's annotation naming the sleep state the node's slots agree on.
SLEEP_STATE_ANNOTATION = "kondor.io/sleep-state"
#: Kondor's record of the scale-down-disabled annotation the node carried before power
#: management took it over (JSON: the value, or null), put back when it is turned off.
ORIGINAL_ANNOTATION = "kondor.io/scale-down-disabled-original"


class PowerConfigError(ValueError):
    """HIBERNATE_CHECK_INTERVAL is not a number of seconds."""


def check_interval(macros: Mapping[str, str]) -> float:
    """HIBERNATE_CHECK_INTERVAL from the policy's knobs (0 when unset: power management off).

    Like HTCondor's integer knobs, the value may be a constant expression (`5 * 60`, or
    `$(MINUTE) * 5` once the snippet's macros are expanded); it must come to a finite number
    of seconds, 0 or more. Admission refuses what this refuses (`fleet.policy.check_policy`).
    """
    text = next(
        (str(value) for key, value in macros.items() if key.upper() == CHECK_INTERVAL_KNOB),
        "",
    ).strip()
    if not text:
        return 0.0
    allowed = "a number of seconds, 0 or more (0 turns power management off)"
    try:
        seconds: float | None = float(text)
    except ValueError:
        try:
            value = evaluate_expr(text, field=CHECK_INTERVAL_KNOB)
            seconds = None if isinstance(value, bool) else number(value)
        except ExpressionError:
            seconds = None
    if seconds is None or not math.isfinite(seconds):
        raise PowerConfigError(f"{CHECK_INTERVAL_KNOB} = {text!r} is not {allowed}")
    if seconds < 0:
        raise PowerConfigError(
            f"{CHECK_INTERVAL_KNOB} = {text!r} is negative; it must be {allowed}"
        )
    return seconds


@dataclass(frozen=True)
class Agreement:
    """What the slots asked for and what the machine does about it."""

    #: The deepest state when every slot asks for one; None when some slot vetoes.
    state: str | None
    #: Each slot's HIBERNATE ("NONE" when it has none or it is not a string).
    slots: Mapping[str, str]
    #: Why there is no state (the vetoing slot), or "" when there is one.
    why: str = ""


def agree(slots: Mapping[str, str | None]) -> Agreement:
    """The machine's sleep state from its slots' HIBERNATE values: any "NONE" (or a value that
    is no known state) vetoes; otherwise the largest magnitude wins."""
    asked = {name: (value or "NONE") for name, value in slots.items()}
    if not asked:
        return Agreement(None, asked, "the node has no slots")
    deepest: tuple[int, str] | None = None
    for name, value in asked.items():
        level = SLEEP_LEVELS.get(value.upper())
        if level is None:
            return Agreement(
                None,
                asked,
                f"{name}: HIBERNATE is {value!r}, not a sleep state "
                f"({', '.join(sorted(SLEEP_LEVELS))})",
            )
        if level == 0:
            return Agreement(None, asked, f"{name}: HIBERNATE is {value!r}")
        if deepest is None or level > deepest[0]:
            deepest = (level, value.upper())
    assert deepest is not None
    return Agreement(deepest[1], asked)


def evaluate(startd: Startd, live: Mapping[str, Any], now: float) -> Agreement:
    """Evaluate HIBERNATE in every slot of `startd` (as the startd's check does) and agree.
    Dynamic slots count as slots, as in HTCondor."""
    values: dict[str, str | None] = {}
    context = MachineContext(draining=startd.state.draining)
    for slot in startd.state.slots:
        own = startd.facts.get(slot.name) or (
            startd.facts.get(slot.parent) if slot.parent is not None else None
        )
        facts = FilteredFacts(startd.engine, {**live, **(own or {})})
        values[slot.name] = hibernate(startd.engine, slot, facts, now, machine=context)
    return agree(values)


def power_status(agreement: Agreement, previous: PowerStatus | None, now: float) -> PowerStatus:
    """`status.power` for this check; `since` moves only when the agreed state changes."""
    same = previous is not None and previous.sleep_state == agreement.state
    return PowerStatus(
        sleep_state=agreement.state,
        slots=dict(agreement.slots),
        reason=agreement.why,
        since=previous.since if same and previous is not None else format_time(now),
    )


def node_annotations(
    power: PowerStatus | None, annotations: Mapping[str, str]
) -> dict[str, str | None] | None:
    """The merge patch of the Node's annotations for its ExecutionPoint's `status.power`, or
    None when there is nothing to change.

    With power management on, Kondor owns the cluster autoscaler's scale-down-disabled
    annotation on the node: "true" while any slot vetoes (the autoscaler cannot see Kondor's
    process jobs, so it must not take the node away from under them), "false" with
    kondor.io/sleep-state naming the state once every slot agrees. The first time it takes
    the annotation it records what the node carried before (`ORIGINAL_ANNOTATION`, JSON: the
    value, or null when there was none). Without power management (no `status.power`: the
    check interval back to 0, or no SlotPolicy selecting the node any more) Kondor's own
    annotations are taken away and scale-down-disabled is put back as recorded."""
    if power is None:
        wanted: dict[str, str | None] = {SLEEP_STATE_ANNOTATION: None}
        if ORIGINAL_ANNOTATION in annotations:
            wanted[ORIGINAL_ANNOTATION] = None
            readable, original = _original(annotations[ORIGINAL_ANNOTATION])
            if readable:
                wanted[SCALE_DOWN_DISABLED] = original
    else:
        if power.sleep_state is None:
            wanted = {SLEEP_STATE_ANNOTATION: None, SCALE_DOWN_DISABLED: "true"}
        else:
            wanted = {SLEEP_STATE_ANNOTATION: power.sleep_state, SCALE_DOWN_DISABLED: "false"}
        if ORIGINAL_ANNOTATION not in annotations:
            wanted[ORIGINAL_ANNOTATION] = json.dumps(annotations.get(SCALE_DOWN_DISABLED))
    patch = {key: value for key, value in wanted.items() if annotations.get(key) != value}
    return patch or None


def _original(recorded: str) -> tuple[bool, str | None]:
    """The recorded scale-down-disabled value (None: there was none), with False when the
    record does not read as Kondor writes it (then scale-down-disabled is left as it is)."""
    try:
        value = json.loads(recorded)
    except ValueError:
        return False, None
    if value is None or isinstance(value, str):
        return True, value
    return False, None
