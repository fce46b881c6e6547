"""The fleet: which nodes are execution points, under which SlotPolicy, and what to change.

Pure functions for the operator (DESIGN.md, "Node to ExecutionPoint"): label
selectors with Kubernetes semantics, priority resolution with ties reported,
SlotPolicy checking for admission and status, ExecutionPoint manifests, and the
diff from what is to what should be. No I/O and no clock: time is an argument. What it
reads and writes are the `kondor_core.api` models; conditions and times come from there.
"""

from kondor_core.fleet.nodes import NodeTable, node_facts
from kondor_core.fleet.pacing import (
    EVENT_BURST,
    EVENT_RATE,
    Announcement,
    EventSummary,
    TokenBucket,
    ration_events,
)
from kondor_core.fleet.plan import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
    Action,
    CreateExecutionPoint,
    DeleteExecutionPoint,
    Event,
    NodeFacts,
    ObservedExecutionPoint,
    ObservedPolicy,
    PatchExecutionPoint,
    PatchOperatorStatus,
    PatchPolicyStatus,
    execution_point_manifest,
    owner_reference,
    plan_execution_points,
    plan_policy_statuses,
    policy_counts,
    resolved_policy,
)
from kondor_core.fleet.policy import (
    DEFAULT_UPDATE_INTERVAL,
    CheckedPolicy,
    admission_message,
    check_policy,
)
from kondor_core.fleet.resolve import PolicyCandidate, Resolution, resolve, selected_nodes
from kondor_core.fleet.selector import requirement_holds, selector_problems, selects
from kondor_core.fleet.status import (
    STALE_AFTER_INTERVALS,
    PolicyCounts,
    PolicyVerdict,
    heartbeat_state,
    heartbeat_word,
    operator_status,
    policy_verdict,
    slot_policy_status,
)

__all__ = [
    "DEFAULT_UPDATE_INTERVAL",
    "EVENT_BURST",
    "EVENT_RATE",
    "MANAGED_BY",
    "MANAGED_BY_LABEL",
    "STALE_AFTER_INTERVALS",
    "Action",
    "Announcement",
    "CheckedPolicy",
    "CreateExecutionPoint",
    "DeleteExecutionPoint",
    "Event",
    "EventSummary",
    "NodeFacts",
    "NodeTable",
    "ObservedExecutionPoint",
    "ObservedPolicy",
    "PatchExecutionPoint",
    "PatchOperatorStatus",
    "PatchPolicyStatus",
    "PolicyCandidate",
    "PolicyCounts",
    "PolicyVerdict",
    "Resolution",
    "TokenBucket",
    "admission_message",
    "check_policy",
    "execution_point_manifest",
    "heartbeat_state",
    "heartbeat_word",
    "node_facts",
    "operator_status",
    "owner_reference",
    "plan_execution_points",
    "plan_policy_statuses",
    "policy_counts",
    "policy_verdict",
    "ration_events",
    "requirement_holds",
    "resolve",
    "resolved_policy",
    "selected_nodes",
    "selector_problems",
    "selects",
    "slot_policy_status",
]
