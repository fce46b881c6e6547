"""Status the operator writes: SlotPolicy status and an ExecutionPoint's `status.operator`;
and the agents' reading of a SlotPolicy's status (`policy_verdict`).

Both are built as the API models (`SlotPolicyStatus`, `OperatorStatus`), so what the
operator writes is what the CRD's schema declares. Conditions follow metav1.Condition
(`kondor_core.api.conditions`): `lastTransitionTime` moves only when the status changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from kondor_core.api.conditions import condition, merge_conditions
from kondor_core.api.executionpoint import OperatorStatus
from kondor_core.api.meta import parse_time
from kondor_core.api.slotpolicy import SlotPolicyStatus
from kondor_core.fleet.policy import CheckedPolicy
from kondor_core.fleet.resolve import Resolution

#: How many update intervals may pass without a heartbeat before the agent counts as stale.
STALE_AFTER_INTERVALS = 3

Heartbeat = Literal["Fresh", "Stale", "Unknown"]


def heartbeat_word(fresh: bool | None) -> Heartbeat:
    """`status.operator.heartbeat`: Fresh, Stale, or Unknown (no report, or not a time)."""
    if fresh is None:
        return "Unknown"
    return "Fresh" if fresh else "Stale"


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
    old: SlotPolicyStatus,
    now: datetime,
) -> SlotPolicyStatus:
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
    return SlotPolicyStatus(
        observed_generation=generation,
        selected_nodes=counts.selected,
        governed_nodes=counts.governed,
        hash=checked.hash or None,
        warnings=list(checked.warnings),
        conditions=merge_conditions(old.conditions, [valid, ready], now),
    )


@dataclass(frozen=True)
class PolicyVerdict:
    """The operator's word on a SlotPolicy's current generation, as its status says it:
    `valid` (with the compiled hash), `invalid` (with the problems) or `pending` (the status
    is about an older generation, or there is none yet)."""

    generation: int
    state: Literal["valid", "invalid", "pending"]
    message: str = ""
    hash: str = ""


def policy_verdict(policy: Mapping[str, Any]) -> PolicyVerdict:
    """What `slot_policy_status` said about `policy` (a SlotPolicy as the API server holds
    it) at its current generation. An agent carves a generation only once it is `valid`, so
    that a node runs only what the operator checked, as when the operator pinned each
    ExecutionPoint to a checked generation; an `invalid` one leaves the node's slots as they
    were."""
    generation = int((policy.get("metadata") or {}).get("generation") or 0)
    status = policy.get("status") or {}
    conditions = status.get("conditions") or []
    valid = next(
        (c for c in conditions if isinstance(c, Mapping) and c.get("type") == "Valid"), None
    )
    if (
        status.get("observedGeneration") != generation
        or valid is None
        or valid.get("observedGeneration", generation) != generation
    ):
        return PolicyVerdict(generation, "pending")
    if valid.get("status") == "True":
        return PolicyVerdict(generation, "valid", hash=str(status.get("hash") or ""))
    return PolicyVerdict(generation, "invalid", str(valid.get("message") or ""))


# ---- ExecutionPoint status.operator -----------------------------------------------------------


def heartbeat_state(
    last_heartbeat: str | None, now: datetime, update_interval: float
) -> tuple[bool | None, str, str]:
    """(fresh, reason, message) of an agent's heartbeat: fresh while it is younger than
    STALE_AFTER_INTERVALS update intervals; None when the agent never reported."""
    if not last_heartbeat:
        return None, "NoHeartbeat", "the node's agent has not reported yet"
    when = parse_time(last_heartbeat)
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
    old: OperatorStatus,
    now: datetime,
) -> OperatorStatus:
    """The `status.operator` subtree of an ExecutionPoint: the policy resolution (with any
    tie) and whether the agent's heartbeat is fresh."""
    fresh, reason, message = heartbeat_state(last_heartbeat, now, update_interval)
    conditions = [condition("HeartbeatFresh", fresh, reason, message)]
    if resolution is None:
        return OperatorStatus(
            heartbeat=heartbeat_word(fresh),
            conditions=merge_conditions(old.conditions, conditions, now),
        )
    winner = resolution.policy
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
    return OperatorStatus(
        heartbeat=heartbeat_word(fresh),
        policy=winner.name,
        priority=winner.spec.priority,
        tie_with=list(resolution.tie_with),
        conditions=merge_conditions(old.conditions, conditions, now),
    )
