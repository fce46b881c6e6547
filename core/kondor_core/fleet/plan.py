"""What to change so that every selected node has exactly one ExecutionPoint: a pure diff.

The operator gathers the nodes, the SlotPolicies and the ExecutionPoints it
sees, and `plan_execution_points` / `plan_policy_statuses` say what to create,
patch and delete, with the Event each change is announced by. Nothing here
reads a clock or a cluster: `now` and the facts are arguments.

Rules (DESIGN.md, "Node to ExecutionPoint"):

* a node that at least one valid policy selects has one ExecutionPoint named
  after it, owned by the Node (so the garbage collector removes it with the
  node), whose spec names the winning policy (its agent follows that policy's
  generations itself, each once the SlotPolicy's status calls it valid: an edit of a
  policy rewrites no ExecutionPoint);
* an ExecutionPoint the operator manages is deleted when no policy selects its
  node any more;
* an ExecutionPoint governed by a policy that is now invalid is left as it is
  (its node keeps the last valid policy) until the policy is fixed or deleted;
* ExecutionPoints the operator did not create are adopted when their node is
  selected and otherwise left alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kondor_core.api.conditions import condition_status
from kondor_core.api.executionpoint import ExecutionPointSpec, OperatorStatus, PolicyRef
from kondor_core.api.manifest import ExecutionPoint, ObjectMeta, OwnerReference
from kondor_core.api.meta import merge_patch, model_patch
from kondor_core.api.slotpolicy import SlotPolicyStatus
from kondor_core.fleet.policy import DEFAULT_UPDATE_INTERVAL, CheckedPolicy
from kondor_core.fleet.resolve import PolicyCandidate, Resolution, selected_nodes
from kondor_core.fleet.status import PolicyCounts, operator_status, slot_policy_status

#: The label on every ExecutionPoint the operator manages (Kubernetes' recommended label).
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "kondor-operator"


@dataclass(frozen=True)
class NodeFacts:
    """What the operator needs of a Node."""

    name: str
    uid: str
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ObservedExecutionPoint:
    """What the operator needs of an existing ExecutionPoint."""

    name: str
    node_name: str
    policy: PolicyRef | None = None
    managed: bool = True
    owner_uid: str | None = None
    deleting: bool = False
    last_heartbeat: str | None = None
    operator_status: OperatorStatus = field(default_factory=OperatorStatus)


@dataclass(frozen=True)
class ObservedPolicy:
    """What the operator needs of an existing SlotPolicy."""

    name: str
    uid: str
    generation: int
    #: As written: the spec is checked (check_policy) to report what is wrong with it.
    spec: Mapping[str, Any]
    status: SlotPolicyStatus = field(default_factory=SlotPolicyStatus)


@dataclass(frozen=True)
class Event:
    """A Kubernetes Event to post about the object an action changes."""

    type: str  # Normal or Warning
    reason: str
    message: str
    #: The SlotPolicy the change follows, if any: where a summary of many such Events is
    #: posted (`kondor_core.fleet.pacing.ration_events`).
    policy: str | None = None


@dataclass(frozen=True)
class CreateExecutionPoint:
    name: str
    manifest: dict[str, Any]
    event: Event


@dataclass(frozen=True)
class PatchExecutionPoint:
    """A merge patch of the ExecutionPoint's metadata and spec (what differs, nothing else)."""

    name: str
    patch: dict[str, Any]
    event: Event


@dataclass(frozen=True)
class DeleteExecutionPoint:
    name: str
    event: Event


@dataclass(frozen=True)
class PatchOperatorStatus:
    """A merge patch of the ExecutionPoint's status subresource: `status.operator` only."""

    name: str
    patch: dict[str, Any]
    event: Event | None = None


@dataclass(frozen=True)
class PatchPolicyStatus:
    """A merge patch of the SlotPolicy's status subresource."""

    name: str
    uid: str
    patch: dict[str, Any]
    event: Event | None = None


Action = CreateExecutionPoint | PatchExecutionPoint | DeleteExecutionPoint | PatchOperatorStatus


def resolved_policy(resolution: Resolution) -> PolicyRef:
    return PolicyRef(name=resolution.policy.name)


def owner_reference(node: NodeFacts) -> OwnerReference:
    """The Node as the ExecutionPoint's owner: the garbage collector deletes the EP with it."""
    return OwnerReference(api_version="v1", kind="Node", name=node.name, uid=node.uid)


def execution_point_manifest(node: NodeFacts, resolution: Resolution) -> dict[str, Any]:
    """The ExecutionPoint for `node`: cluster-scoped, named after the node, owned by it."""
    metadata = ObjectMeta(
        name=node.name,
        labels={MANAGED_BY_LABEL: MANAGED_BY},
        owner_references=[owner_reference(node)],
    )
    spec = ExecutionPointSpec(node_name=node.name, policy=resolved_policy(resolution))
    return ExecutionPoint(metadata=metadata, spec=spec).dump()


def _plan_one(
    name: str,
    node: NodeFacts | None,
    resolution: Resolution | None,
    ep: ObservedExecutionPoint | None,
    *,
    held: frozenset[str],
    now: datetime,
    update_intervals: Mapping[str, float],
) -> list[Action]:
    if ep is None:
        if node is None or resolution is None:
            return []
        manifest = execution_point_manifest(node, resolution)
        text = f"ExecutionPoint for node {name} with SlotPolicy {resolution.policy.name}"
        event = Event("Normal", "Created", text, policy=resolution.policy.name)
        return [CreateExecutionPoint(name, manifest, event)]
    if ep.deleting:
        return []
    frozen = ep.policy is not None and ep.policy.name in held
    if resolution is None or node is None:
        if not ep.managed or (frozen and node is not None):
            return []
        why = "its node is gone" if node is None else "no SlotPolicy selects its node"
        return [DeleteExecutionPoint(name, Event("Normal", "Deleted", f"{name}: {why}"))]
    actions: list[Action] = []
    desired = resolved_policy(resolution)
    patch: dict[str, Any] = {}
    if not ep.managed or ep.owner_uid != node.uid:
        # Labels are merged key by key; ownerReferences, a list, is replaced whole.
        metadata = ObjectMeta(
            name=name,
            labels={MANAGED_BY_LABEL: MANAGED_BY},
            owner_references=[owner_reference(node)],
        )
        fields = {"owner_references"} if ep.managed else {"owner_references", "labels"}
        patch["metadata"] = metadata.model_dump(by_alias=True, include=fields, mode="json")
    current = ExecutionPointSpec(node_name=ep.node_name, policy=ep.policy)
    wanted = ExecutionPointSpec(node_name=name, policy=ep.policy if frozen else desired)
    spec = merge_patch(current.dump(), wanted.dump())
    if spec:
        patch["spec"] = spec
    if patch:
        if not ep.managed:
            text = f"{name} now follows SlotPolicy {desired.name}"
            event = Event("Normal", "Adopted", text, policy=desired.name)
        elif "policy" in spec:
            before = ep.policy.name if ep.policy else "none"
            text = f"SlotPolicy {before} -> {desired.name}"
            event = Event("Normal", "PolicyChanged", text, policy=desired.name)
        else:
            event = Event("Normal", "Updated", f"{name}: owner or node name corrected")
        actions.append(PatchExecutionPoint(name, patch, event))
    status = operator_status(
        resolution=resolution,
        last_heartbeat=ep.last_heartbeat,
        update_interval=update_intervals.get(resolution.policy.name, DEFAULT_UPDATE_INTERVAL),
        old=ep.operator_status,
        now=now,
    )
    if status.dump() != ep.operator_status.dump():
        was_tied = condition_status(ep.operator_status.conditions, "PolicyTie")
        tie_event = None
        if resolution.tied and was_tied != "True":
            message = next(c.message for c in status.conditions if c.type == "PolicyTie")
            tie_event = Event("Warning", "PolicyTie", message)
        # The operator's subtree only: the agent's fields beside it are left alone.
        patch_status = {"status": {"operator": model_patch(status)}}
        actions.append(PatchOperatorStatus(name, patch_status, tie_event))
    return actions


def plan_execution_points(
    nodes: Mapping[str, NodeFacts],
    resolutions: Mapping[str, Resolution],
    existing: Mapping[str, ObservedExecutionPoint],
    *,
    held: Iterable[str] = (),
    only: Iterable[str] | None = None,
    now: datetime,
    update_intervals: Mapping[str, float] | None = None,
) -> list[Action]:
    """The actions that make the ExecutionPoints match the resolutions.

    `held` names invalid policies (their ExecutionPoints are left alone); `only`
    limits the plan to these node / ExecutionPoint names (the ones an event touched);
    `update_intervals` gives each policy's UPDATE_INTERVAL, which heartbeats are judged by.
    """
    names = set(nodes) | set(existing) if only is None else set(only)
    frozen_held = frozenset(held)
    actions: list[Action] = []
    for name in sorted(names):
        node = nodes.get(name)
        actions += _plan_one(
            name,
            node,
            resolutions.get(name) if node is not None else None,
            existing.get(name),
            held=frozen_held,
            now=now,
            update_intervals=update_intervals or {},
        )
    return actions


def policy_counts(
    nodes: Mapping[str, Mapping[str, str]],
    candidates: Iterable[PolicyCandidate],
    resolutions: Mapping[str, Resolution],
) -> dict[str, PolicyCounts]:
    """Per valid policy: nodes selected, nodes governed, and the policies it tied with."""
    governed: dict[str, int] = {}
    ties: dict[str, set[str]] = {}
    for resolution in resolutions.values():
        winner = resolution.policy.name
        governed[winner] = governed.get(winner, 0) + 1
        for other in resolution.tie_with:
            ties.setdefault(winner, set()).add(other)
            ties.setdefault(other, set()).add(winner)
    return {
        p.name: PolicyCounts(
            selected=len(selected_nodes(nodes, p)),
            governed=governed.get(p.name, 0),
            tie_with=tuple(sorted(ties.get(p.name, ()))),
        )
        for p in candidates
    }


def plan_policy_statuses(
    policies: Mapping[str, ObservedPolicy],
    checked: Mapping[str, CheckedPolicy],
    counts: Mapping[str, PolicyCounts],
    *,
    now: datetime,
) -> list[PatchPolicyStatus]:
    """Status patches for the SlotPolicies whose status is not what it should be, with an
    Event when a policy turns invalid or valid again."""
    patches = []
    for name in sorted(policies):
        observed = policies[name]
        result = checked[name]
        status = slot_policy_status(
            generation=observed.generation,
            checked=result,
            counts=counts.get(name, PolicyCounts()),
            old=observed.status,
            now=now,
        )
        if status.dump() == observed.status.dump():
            continue
        was_valid = condition_status(observed.status.conditions, "Valid")
        event = None
        if not result.valid and was_valid != "False":
            event = Event("Warning", "InvalidPolicy", "; ".join(result.problems))
        elif result.valid and was_valid == "False":
            event = Event("Normal", "PolicyValid", f"generation {observed.generation} compiles")
        # The operator is the status' only writer: every field, a cleared one as null.
        patches.append(
            PatchPolicyStatus(name, observed.uid, {"status": model_patch(status)}, event)
        )
    return patches
