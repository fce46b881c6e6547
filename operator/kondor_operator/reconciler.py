"""The fleet reconciler: gather from kopf's indexes, call `kondor_core.fleet`, apply the plan.

Nodes, ExecutionPoints and SlotPolicies reach the operator through `@kopf.index`
(DESIGN.md, "Scale"): kopf keeps them in memory from its watches and starts no
handler until every index is filled from its first listing, so the first pass
sees the whole cluster. Event handlers only `touch` the names an event concerns;
one task drains them, a burst of events becoming one pass, so writes are serial
and never race each other. A pass every `resync` seconds re-judges heartbeats,
which go stale with time and no event.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

from kubernetes.client.exceptions import ApiException
from pydantic import BaseModel, ValidationError

from kondor_core.api import (
    ExecutionPointSpec,
    ExecutionPointStatus,
    ObjectMeta,
    OperatorStatus,
    SlotPolicyStatus,
    describe_errors,
)
from kondor_core.fleet import (
    DEFAULT_UPDATE_INTERVAL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    Action,
    CheckedPolicy,
    CreateExecutionPoint,
    DeleteExecutionPoint,
    Event,
    NodeFacts,
    ObservedExecutionPoint,
    ObservedPolicy,
    PatchExecutionPoint,
    PatchOperatorStatus,
    PatchPolicyStatus,
    PolicyCandidate,
    check_policy,
    heartbeat_state,
    heartbeat_word,
    plan_execution_points,
    plan_policy_statuses,
    policy_counts,
    resolve,
)
from kondor_operator.kube import ObjectRef, execution_point_ref, slot_policy_ref
from kondor_operator.metrics import Metrics

logger = logging.getLogger(__name__)

#: kopf's index: key -> the values the indexed objects gave for it.
Index = Mapping[str, Collection[Any]]
M = TypeVar("M", bound=BaseModel)


class Writer(Protocol):
    """The writes the reconciler makes (kondor_operator.kube.Kube, or a fake in tests)."""

    def create_execution_point(self, manifest: Mapping[str, Any]) -> str | None: ...
    def patch_execution_point(self, name: str, patch: Mapping[str, Any]) -> bool: ...
    def patch_execution_point_status(self, name: str, patch: Mapping[str, Any]) -> bool: ...
    def delete_execution_point(self, name: str) -> bool: ...
    def patch_slot_policy_status(self, name: str, patch: Mapping[str, Any]) -> bool: ...
    def post_event(self, ref: ObjectRef, event: Event) -> None: ...


# ---- index values: what each watched object contributes -----------------------------------
#
# Bodies are read through the kondor_core.api models (which copy them: kopf's bodies are live
# views of the watch stream). Metadata comes from the API server and is trusted to parse. A
# status that does not parse (an older version's, a hand edit) is read as empty, with a
# warning, and the operator's next write replaces its own part of it.


def _metadata(body: Mapping[str, Any]) -> ObjectMeta:
    return ObjectMeta.model_validate(dict(body.get("metadata") or {}))


def _read(model: type[M], data: Any, what: str, default: M) -> M:
    """`data` as `model`; `default`, with a warning naming the fields, when it is not one."""
    try:
        return model.model_validate(data if data is not None else {})
    except ValidationError as error:
        logger.warning("%s ignored: %s", what, "; ".join(describe_errors(error)))
        return default


@dataclass(frozen=True)
class ExecutionPointEntry:
    """An ExecutionPoint in the index: the planner's view, its uid, and its slots' states."""

    uid: str
    observed: ObservedExecutionPoint
    slots: tuple[tuple[str, str], ...] = ()


def node_entry(body: Mapping[str, Any]) -> NodeFacts:
    metadata = _metadata(body)
    return NodeFacts(name=metadata.name, uid=metadata.uid or "", labels=dict(metadata.labels))


class NodeChanges:
    """Which Node watch events matter: a new node, new labels or uid, or a deletion.

    Kubelets (and kwok) write node status every few seconds; reconciling on each of those
    would spend the operator's CPU on nothing (seen in bench/bench_fleet.py).
    """

    def __init__(self) -> None:
        self._seen: dict[str, NodeFacts] = {}

    def matter(self, name: str, body: Mapping[str, Any], event_type: str | None) -> bool:
        if event_type == "DELETED":
            self._seen.pop(name, None)
            return True
        facts = node_entry(body)
        if self._seen.get(name) == facts:
            return False
        self._seen[name] = facts
        return True


def _execution_point_status(name: str, raw: Any) -> ExecutionPointStatus:
    """The status as the agent and the operator wrote it; what parses of it when a part
    does not (the agent's heartbeat and the operator's own subtree are read apart)."""
    try:
        return ExecutionPointStatus.model_validate(raw if raw is not None else {})
    except ValidationError as error:
        logger.warning(
            "ExecutionPoint %s: status partly ignored: %s",
            name,
            "; ".join(describe_errors(error, prefix="status")),
        )
    raw = raw if isinstance(raw, Mapping) else {}
    heartbeat = raw.get("lastHeartbeat")
    return ExecutionPointStatus(
        last_heartbeat=heartbeat if isinstance(heartbeat, str) else None,
        operator=_read(
            OperatorStatus,
            raw.get("operator"),
            f"ExecutionPoint {name}: status.operator",
            OperatorStatus(),
        ),
    )


def execution_point_entry(body: Mapping[str, Any]) -> ExecutionPointEntry:
    metadata = _metadata(body)
    name = metadata.name
    spec = _read(
        ExecutionPointSpec,
        body.get("spec"),
        f"ExecutionPoint {name}: spec",
        ExecutionPointSpec(node_name=""),
    )
    status = _execution_point_status(name, body.get("status"))
    owners = [
        ref for ref in metadata.owner_references if ref.kind == "Node" and ref.api_version == "v1"
    ]
    observed = ObservedExecutionPoint(
        name=name,
        node_name=spec.node_name,
        policy=spec.policy if spec.policy is not None and spec.policy.name else None,
        managed=metadata.labels.get(MANAGED_BY_LABEL) == MANAGED_BY,
        owner_uid=owners[0].uid if owners else None,
        deleting=bool(metadata.deletion_timestamp),
        last_heartbeat=status.last_heartbeat,
        operator_status=status.operator,
    )
    slots = tuple((slot.state, slot.activity) for slot in status.slots)
    return ExecutionPointEntry(metadata.uid or "", observed, slots)


def slot_policy_entry(body: Mapping[str, Any]) -> ObservedPolicy:
    metadata = _metadata(body)
    return ObservedPolicy(
        name=metadata.name,
        uid=metadata.uid or "",
        generation=metadata.generation or 0,
        # The spec as written (a plain copy): check_policy reports what is wrong with it.
        spec=json.loads(json.dumps(body.get("spec") or {})),
        status=_read(
            SlotPolicyStatus,
            body.get("status"),
            f"SlotPolicy {metadata.name}: status",
            SlotPolicyStatus(),
        ),
    )


def _single(index: Index) -> dict[str, Any]:
    return {key: next(iter(values)) for key, values in index.items() if values}


# ---- the reconciler ---------------------------------------------------------------------------


@dataclass
class Snapshot:
    """The world as the indexes had it at the start of a pass."""

    nodes: dict[str, NodeFacts]
    execution_points: dict[str, ExecutionPointEntry]
    policies: dict[str, ObservedPolicy]


@dataclass
class Plan:
    actions: list[Action]
    policy_patches: list[PatchPolicyStatus]
    uids: dict[str, str] = field(default_factory=dict)


class Reconciler:
    """Keeps one ExecutionPoint per selected node and every SlotPolicy's status current."""

    def __init__(
        self,
        writer: Writer,
        metrics: Metrics,
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        debounce: float = 0.2,
        resync: float = 60.0,
    ) -> None:
        self.writer = writer
        self.metrics = metrics
        self.clock = clock
        self.debounce = debounce
        self.resync = resync
        self._indexes: tuple[Index, Index, Index] | None = None
        self._dirty: set[str] = set()
        self._all = True
        self._wake = asyncio.Event()
        self._checked: dict[str, tuple[str, CheckedPolicy]] = {}

    def attach(self, nodes: Index, execution_points: Index, slot_policies: Index) -> None:
        """Read from kopf's indexes (live mappings kopf keeps current)."""
        self._indexes = (nodes, execution_points, slot_policies)
        self.touch_all()

    def touch(self, name: str) -> None:
        """A node or ExecutionPoint of this name changed: reconcile it soon."""
        self._dirty.add(name)
        self._wake.set()

    def touch_all(self) -> None:
        """A SlotPolicy changed (or time passed): reconcile everything soon."""
        self._all = True
        self._wake.set()

    def snapshot(self) -> Snapshot:
        if self._indexes is None:
            return Snapshot({}, {}, {})
        nodes, eps, policies = self._indexes
        return Snapshot(_single(nodes), _single(eps), _single(policies))

    def check(self, policy: ObservedPolicy) -> CheckedPolicy:
        """check_policy, remembered per spec (a pass re-checks nothing that did not change)."""
        key = json.dumps(policy.spec, sort_keys=True)
        cached = self._checked.get(policy.uid)
        if cached is None or cached[0] != key:
            cached = (key, check_policy(policy.spec))
            self._checked[policy.uid] = cached
        return cached[1]

    def plan(self, world: Snapshot, only: Collection[str] | None, now: datetime) -> Plan:
        """Everything a pass decides, from a snapshot: pure but for the check cache."""
        checked = {name: self.check(p) for name, p in world.policies.items()}
        live = {p.uid for p in world.policies.values()}
        self._checked = {uid: v for uid, v in self._checked.items() if uid in live}
        candidates = [
            PolicyCandidate(name, world.policies[name].generation, result.spec, result.hash)
            for name, result in checked.items()
            if result.valid and result.spec is not None
        ]
        labels = {name: node.labels for name, node in world.nodes.items()}
        resolutions = resolve(labels, candidates)
        actions = plan_execution_points(
            world.nodes,
            resolutions,
            {name: entry.observed for name, entry in world.execution_points.items()},
            held=[name for name, result in checked.items() if not result.valid],
            only=only,
            now=now,
            update_intervals={name: result.update_interval for name, result in checked.items()},
        )
        counts = policy_counts(labels, candidates, resolutions)
        policy_patches = plan_policy_statuses(world.policies, checked, counts, now=now)
        self._observe(world, checked, now)
        return Plan(actions, policy_patches)

    def _observe(
        self, world: Snapshot, checked: Mapping[str, CheckedPolicy], now: datetime
    ) -> None:
        intervals = {name: result.update_interval for name, result in checked.items()}
        heartbeats = []
        slots: list[tuple[str, str]] = []
        for entry in world.execution_points.values():
            policy = entry.observed.policy
            interval = intervals.get(policy.name if policy else "", DEFAULT_UPDATE_INTERVAL)
            fresh = heartbeat_state(entry.observed.last_heartbeat, now, interval)[0]
            heartbeats.append(heartbeat_word(fresh))
            slots.extend(entry.slots)
        self.metrics.observe_fleet(
            heartbeats, slots, {name: result.valid for name, result in checked.items()}
        )

    def apply(self, world: Snapshot, plan: Plan) -> list[str]:
        """Make the writes (in a worker thread); the names whose writes failed."""
        failed: list[str] = []
        ep_ok = True
        for action in plan.actions:
            entry = world.execution_points.get(action.name)
            uid = entry.uid if entry is not None else None
            try:
                self._apply_one(action, uid)
            except ApiException as error:
                ep_ok = False
                failed.append(action.name)
                logger.error("ExecutionPoint %s: %s failed: %s", action.name, _verb(action), error)
        self.metrics.reconciles.labels("ExecutionPoint", "ok" if ep_ok else "error").inc()
        policy_ok = True
        for patch in plan.policy_patches:
            try:
                if self.writer.patch_slot_policy_status(patch.name, patch.patch):
                    self.metrics.changes.labels("SlotPolicy", "status").inc()
                    if patch.event is not None:
                        self.writer.post_event(slot_policy_ref(patch.name, patch.uid), patch.event)
            except ApiException as error:
                policy_ok = False
                logger.error("SlotPolicy %s: status patch failed: %s", patch.name, error)
        self.metrics.reconciles.labels("SlotPolicy", "ok" if policy_ok else "error").inc()
        return failed

    def _apply_one(self, action: Action, uid: str | None) -> None:
        kind = "ExecutionPoint"
        if isinstance(action, CreateExecutionPoint):
            created = self.writer.create_execution_point(action.manifest)
            if created is not None:
                self.metrics.changes.labels(kind, "create").inc()
                self.writer.post_event(execution_point_ref(action.name, created), action.event)
                logger.info("created ExecutionPoint %s", action.name)
        elif isinstance(action, PatchExecutionPoint):
            if self.writer.patch_execution_point(action.name, action.patch):
                self.metrics.changes.labels(kind, "update").inc()
                self.writer.post_event(execution_point_ref(action.name, uid), action.event)
                logger.info("updated ExecutionPoint %s: %s", action.name, action.event.message)
        elif isinstance(action, DeleteExecutionPoint):
            if self.writer.delete_execution_point(action.name):
                self.metrics.changes.labels(kind, "delete").inc()
                self.writer.post_event(execution_point_ref(action.name, uid), action.event)
                logger.info("deleted ExecutionPoint %s: %s", action.name, action.event.message)
        elif isinstance(action, PatchOperatorStatus) and self.writer.patch_execution_point_status(
            action.name, action.patch
        ):
            self.metrics.changes.labels(kind, "status").inc()
            if action.event is not None:
                self.writer.post_event(execution_point_ref(action.name, uid), action.event)

    async def run_once(self) -> None:
        """One pass over what was touched since the last one."""
        only = None if self._all else set(self._dirty)
        self._all, self._dirty = False, set()
        world = self.snapshot()
        plan = self.plan(world, only, self.clock())
        if not plan.actions and not plan.policy_patches:
            return
        failed = await asyncio.to_thread(self.apply, world, plan)
        for name in failed:
            self._dirty.add(name)

    async def run(self) -> None:
        """Reconcile whenever touched, and every `resync` seconds; until cancelled."""
        backoff = 1.0
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), self.resync)
            except TimeoutError:
                self._all = True
            await asyncio.sleep(self.debounce)  # let a burst of events arrive
            self._wake.clear()
            try:
                await self.run_once()
            except Exception:
                logger.exception("reconcile pass failed; retrying in %gs", backoff)
                self.metrics.reconciles.labels("ExecutionPoint", "error").inc()
                self._all = True
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 30.0)
                self._wake.set()
                continue
            backoff = 1.0
            if self._dirty:
                await asyncio.sleep(backoff)  # failed writes: try them again shortly
                self._wake.set()


def _verb(action: Action) -> str:
    return type(action).__name__
