"""Status the operator writes: SlotPolicy status and an ExecutionPoint's `status.operator`.

Conditions follow metav1.Condition: `lastTransitionTime` moves only when the
status changes, so writing the same facts twice writes the same object (and a
reconcile that changes nothing writes nothing).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from kondor_core.fleet.policy import CheckedPolicy
from kondor_core.fleet.resolve import Resolution

#: How many update intervals may pass without a heartbeat before the agent counts as stale.
STALE_AFTER_INTERVALS = 3


def timestamp(now: datetime) -> str:
    """RFC 3339 in UTC with a `Z`, to the second, as Kubernetes writes times."""
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_timestamp(text: str) -> datetime | None:
    """A Kubernetes time (`2026-01-02T03:04:05Z`, fractions allowed); None if it is not one."""
    try:
        parsed = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def condition(
    type_: str, status: bool | None, reason: str, message: str, generation: int | None = None
) -> dict[str, Any]:
    """A condition without its transition time (merge_conditions sets it)."""
    value = "Unknown" if status is None else ("True" if status else "False")
    built: dict[str, Any] = {"type": type_, "status": value, "reason": reason, "message": message}
    if generation is not None:
        built["observedGeneration"] = generation
    return built


def merge_conditions(
    old: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]], now: datetime
) -> list[dict[str, Any]]:
    """`new` with each condition's lastTransitionTime kept from `old` where its status held."""
    before = {str(c.get("type")): c for c in old if isinstance(c, Mapping)}
    merged = []
    for cond in new:
        previous = before.get(str(cond["type"]))
        kept = previous.get("lastTransitionTime") if previous is not None else None
        unchanged = previous is not None and previous.get("status") == cond["status"]
        merged.append(
            {**cond, "lastTransitionTime": kept if unchanged and kept else timestamp(now)}
        )
    return merged


def condition_status(conditions: Sequence[Mapping[str, Any]], type_: str) -> str | None:
    """The status ("True", "False", "Unknown") of condition `type_`, None if absent."""
    for cond in conditions:
        if isinstance(cond, Mapping) and cond.get("type") == type_:
            return str(cond.get("status"))
    return None


# ---- SlotPolicy status ------------------------------------------------------------------------


@dataclass(frozen=True)
class PolicyCounts:
    """How a policy fared against the nodes: selected by its nodeSelector, governed after
    priorities, and the policies it tied with on some node."""

    selected: int = 0
    governed: int = 0
    tie_with: tuple[str, ...] = ()


def slot_policy_status(
    *,
    generation: int,
    checked: CheckedPolicy,
    counts: PolicyCounts,
    old: Mapping[str, Any],
    now: datetime,
) -> dict[str, Any]:
    """The whole status of a SlotPolicy (the operator is its only writer)."""
    if checked.valid:
        valid = condition("Valid", True, "Compiled", "the policy compiles", generation)
        message = f"selects {counts.selected} node(s), governs {counts.governed}"
        if counts.tie_with:
            message += f"; equal priority with {', '.join(counts.tie_with)} on some nodes"
        ready = condition("Ready", True, "Resolved", message, generation)
    else:
        valid = condition("Valid", False, "Invalid", "; ".join(checked.problems), generation)
        ready = condition(
            "Ready",
            False,
            "Invalid",
            "not applied: ExecutionPoints it governed keep their last valid policy",
            generation,
        )
    old_conditions = old.get("conditions") or []
    return {
        "observedGeneration": generation,
        "selectedNodes": counts.selected,
        "governedNodes": counts.governed,
        "hash": checked.hash or None,
        "warnings": list(checked.warnings),
        "conditions": merge_conditions(old_conditions, [valid, ready], now),
    }


# ---- ExecutionPoint status.operator -----------------------------------------------------------


def heartbeat_state(
    last_heartbeat: str | None, now: datetime, update_interval: float
) -> tuple[bool | None, str, str]:
    """(fresh, reason, message) of an agent's heartbeat: fresh while it is younger than
    STALE_AFTER_INTERVALS update intervals; None when the agent never reported."""
    if not last_heartbeat:
        return None, "NoHeartbeat", "the node's agent has not reported yet"
    when = parse_timestamp(last_heartbeat)
    if when is None:
        return None, "BadHeartbeat", f"status.lastHeartbeat {last_heartbeat!r} is not a time"
    limit = timedelta(seconds=STALE_AFTER_INTERVALS * update_interval)
    age = now - when
    if age > limit:
        return (
            False,
            "Stale",
            f"last heartbeat {last_heartbeat}, older than {limit.total_seconds():g}s "
            f"({STALE_AFTER_INTERVALS} update intervals)",
        )
    # No timestamp in this message: it would change status.operator at every heartbeat and
    # double the writes an idle node costs (DESIGN.md, "Scale").
    return True, "Fresh", f"the agent reported within {limit.total_seconds():g}s"


def operator_status(
    *,
    resolution: Resolution | None,
    last_heartbeat: str | None,
    update_interval: float,
    old: Mapping[str, Any],
    now: datetime,
) -> dict[str, Any]:
    """The `status.operator` subtree of an ExecutionPoint: the policy resolution (with any
    tie) and whether the agent's heartbeat is fresh."""
    fresh, reason, message = heartbeat_state(last_heartbeat, now, update_interval)
    conditions = [condition("HeartbeatFresh", fresh, reason, message)]
    built: dict[str, Any] = {
        "heartbeat": {True: "Fresh", False: "Stale", None: "Unknown"}[fresh],
    }
    if resolution is not None:
        winner = resolution.policy
        built["policy"] = winner.name
        built["priority"] = winner.spec.priority
        built["tieWith"] = list(resolution.tie_with)
        if resolution.tied:
            others = ", ".join(resolution.tie_with)
            text = (
                f"SlotPolicies {winner.name}, {others} select this node with priority "
                f"{winner.spec.priority}; {winner.name} applies (first by name)"
            )
            conditions.append(condition("PolicyTie", True, "EqualPriority", text))
        else:
            text = f"SlotPolicy {winner.name} applies (priority {winner.spec.priority})"
            conditions.append(condition("PolicyTie", False, "HighestPriority", text))
    built["conditions"] = merge_conditions(old.get("conditions") or [], conditions, now)
    return built
