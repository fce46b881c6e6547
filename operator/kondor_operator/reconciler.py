"""The fleet reconciler: gather from the operator's tables, call `kondor_core.fleet`, apply.

SlotPolicies reach the operator through `@kopf.index` (DESIGN.md, "Scale"), Nodes and
ExecutionPoints through watches of the operator's own (`kondor_operator.nodewatch`:
metadata only; `kondor_operator.epwatch`: one parsed table shared with the negotiator and
power management). The ExecutionPoint table is filled from its first listing before kopf
starts, and the handlers attach the reconciler only once the Node watch has listed every
Node, so the first pass sees the whole cluster. Watch events only `touch` the names they
concern; one task drains them, a burst of events becoming one pass. A pass plans only what
was touched (an agent's heartbeat costs a plan of its own ExecutionPoint, not of the fleet);
a full pass every `resync` seconds re-judges heartbeats, which go stale with time and no
event, and refreshes the fleet gauges.

A pass's writes go out on a bounded pool of `concurrency` threads, the writes of one
ExecutionPoint in order on one of them; its Events after, one per change while the
Event allowance lasts and summarised past it (`kondor_core.fleet.ration_events`), so a
re-carve of the whole fleet does not double its writes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel, ValidationError

from kondor_core.api import (
    ExecutionPoint,
    ExecutionPointSpec,
    ExecutionPointStatus,
    ObjectMeta,
    OperatorStatus,
    SlotPolicyStatus,
    describe_errors,
)
from kondor_core.fleet import (
    DEFAULT_UPDATE_INTERVAL,
    EVENT_BURST,
    EVENT_RATE,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    Action,
    Announcement,
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
    TokenBucket,
    check_policy,
    heartbeat_state,
    heartbeat_word,
    plan_execution_points,
    plan_policy_statuses,
    policy_counts,
    ration_events,
    resolve,
)
from kondor_kube.errors import KubeError
from kondor_operator.kube import ObjectRef, execution_point_ref, slot_policy_ref
from kondor_operator.metrics import Metrics

logger = logging.getLogger(__name__)

#: kopf's index: key -> the values the indexed objects gave for it.
Index = Mapping[str, Collection[Any]]
M = TypeVar("M", bound=BaseModel)


class ExecutionPointEntries(Protocol):
    """The ExecutionPoints as their watch has them (kondor_operator.epwatch, or a fake)."""

    def entries(self, names: Collection[str] | None = None) -> dict[str, ExecutionPointEntry]:
        """name -> the reconciler's view: all, or those of `names` that exist."""
        ...


class Writer(Protocol):
    """The writes the reconciler makes (kondor_operator.kube.Kube, or a fake in tests)."""

    def create_execution_point(self, manifest: Mapping[str, Any]) -> str | None: ...
    def patch_execution_point(self, name: str, patch: Mapping[str, Any]) -> bool: ...
    def patch_execution_point_status(self, name: str, patch: Mapping[str, Any]) -> bool: ...
    def delete_execution_point(self, name: str) -> bool: ...
    def patch_slot_policy_status(self, name: str, patch: Mapping[str, Any]) -> bool: ...
    def post_event(self, ref: ObjectRef, event: Event) -> None: ...


# ---- what each watched object contributes ---------------------------------------------------
#
# Bodies are read through the kondor_core.api models (which copy them: kopf's bodies are live
# views of the watch stream). Metadata comes from the API server and is trusted to parse. An
# ExecutionPoint is parsed once, whole, by its watch (`execution_point_view` reads the parsed
# model); one whose status does not parse (an older version's, a hand edit) is read in parts
# (`execution_point_entry`), what does not parse as empty, with a warning, and the operator's
# next write replaces its own part of it.


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
    """The reconciler's view of an ExecutionPoint body, read in parts: what parses of it."""
    metadata = _metadata(body)
    name = metadata.name
    spec = _read(
        ExecutionPointSpec,
        body.get("spec"),
        f"ExecutionPoint {name}: spec",
        ExecutionPointSpec(node_name=""),
    )
    return _entry(metadata, spec, _execution_point_status(name, body.get("status")))


def execution_point_view(point: ExecutionPoint) -> ExecutionPointEntry:
    """The reconciler's view of a parsed ExecutionPoint (no parsing again)."""
    return _entry(point.metadata, point.spec, point.status or ExecutionPointStatus())


def _entry(
    metadata: ObjectMeta, spec: ExecutionPointSpec, status: ExecutionPointStatus
) -> ExecutionPointEntry:
    owners = [
        ref for ref in metadata.owner_references if ref.kind == "Node" and ref.api_version == "v1"
    ]
    observed = ObservedExecutionPoint(
        name=metadata.name,
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


def _single(index: Index, names: Iterable[str] | None = None) -> dict[str, Any]:
    """One value per key of kopf's index shape; only `names` when given."""
    if names is None:
        return {key: next(iter(values)) for key, values in index.items() if values}
    found = {}
    for name in names:
        values = index.get(name)
        if values:
            found[name] = next(iter(values))
    return found


# ---- the reconciler ---------------------------------------------------------------------------


@dataclass
class Snapshot:
    """The world as the tables had it at the start of a pass (a touched pass: the nodes
    and ExecutionPoints it touched; the policies always)."""

    nodes: dict[str, NodeFacts]
    execution_points: dict[str, ExecutionPointEntry]
    policies: dict[str, ObservedPolicy]


@dataclass
class Plan:
    actions: list[Action]
    policy_patches: list[PatchPolicyStatus]
    uids: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class _Written:
    """An Event to post about a write that was made."""

    subject: str
    ref: ObjectRef
    event: Event


class Reconciler:
    """Keeps one ExecutionPoint per selected node and every SlotPolicy's status current."""

    def __init__(
        self,
        writer: Writer,
        metrics: Metrics,
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        monotonic: Callable[[], float] = time.monotonic,
        # At 1,000 nodes heartbeats arrive ~16 a second: a pass per 0.5 s plans a batch of
        # them at once (0.2 s made ~4 passes a second, 8% of the operator's idle CPU).
        debounce: float = 0.5,
        resync: float = 60.0,
        concurrency: int = 16,
        event_burst: float = EVENT_BURST,
        event_rate: float = EVENT_RATE,
    ) -> None:
        self.writer = writer
        self.metrics = metrics
        self.clock = clock
        self.monotonic = monotonic
        self.debounce = debounce
        self.resync = resync
        self.concurrency = max(1, concurrency)
        self.event_burst = event_burst
        self.event_rate = event_rate
        self._indexes: tuple[Index, ExecutionPointEntries, Index] | None = None
        self._dirty: set[str] = set()
        self._all = True
        self._nodes_changed = False
        self._wake = asyncio.Event()
        self._checked: dict[str, tuple[str, CheckedPolicy]] = {}
        self._events = TokenBucket.full(event_burst, monotonic())
        self._pool: ThreadPoolExecutor | None = None
        #: The fleet gauges, kept by difference: each ExecutionPoint's heartbeat word and
        #: slot states as last counted, and the totals.
        self._counted: dict[str, tuple[str, tuple[tuple[str, str], ...]]] = {}
        self._heartbeats: Counter[str] = Counter()
        self._slots: Counter[tuple[str, str]] = Counter()

    def attach(
        self, nodes: Index, execution_points: ExecutionPointEntries, slot_policies: Index
    ) -> None:
        """Read from these tables (live views their watches keep current)."""
        self._indexes = (nodes, execution_points, slot_policies)
        self.touch_all()

    def touch(self, name: str) -> None:
        """An ExecutionPoint of this name changed: reconcile it soon."""
        self._dirty.add(name)
        self._wake.set()

    def touch_node(self, name: str) -> None:
        """A node of this name came, went or changed labels: reconcile its ExecutionPoint
        soon, and the SlotPolicies' counts."""
        self._nodes_changed = True
        self.touch(name)

    def touch_all(self) -> None:
        """A SlotPolicy changed (or time passed): reconcile everything soon."""
        self._all = True
        self._wake.set()

    def snapshot(self, only: Collection[str] | None = None) -> Snapshot:
        if self._indexes is None:
            return Snapshot({}, {}, {})
        nodes, eps, policies = self._indexes
        return Snapshot(_single(nodes, only), eps.entries(only), _single(policies))

    def check(self, policy: ObservedPolicy) -> CheckedPolicy:
        """check_policy, remembered per spec (a pass re-checks nothing that did not change)."""
        key = json.dumps(policy.spec, sort_keys=True)
        cached = self._checked.get(policy.uid)
        if cached is None or cached[0] != key:
            cached = (key, check_policy(policy.spec))
            self._checked[policy.uid] = cached
        return cached[1]

    def plan(
        self,
        world: Snapshot,
        only: Collection[str] | None,
        now: datetime,
        *,
        every_node: Mapping[str, NodeFacts] | None = None,
    ) -> Plan:
        """Everything a pass decides, from a snapshot: pure but for the check cache.

        A full pass (`only` None) plans every ExecutionPoint and SlotPolicy status; a
        touched pass plans the touched names, and the SlotPolicy statuses only when
        `every_node` (all the nodes, for their counts) is given. Either updates the fleet's
        gauges for what it saw.
        """
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
        policy_patches: list[PatchPolicyStatus] = []
        if only is None or every_node is not None:
            if only is not None and every_node is not None:
                labels = {name: node.labels for name, node in every_node.items()}
                resolutions = resolve(labels, candidates)
            counts = policy_counts(labels, candidates, resolutions)
            policy_patches = plan_policy_statuses(world.policies, checked, counts, now=now)
        self._observe(world, only, checked, now)
        return Plan(actions, policy_patches)

    def _observe(
        self,
        world: Snapshot,
        only: Collection[str] | None,
        checked: Mapping[str, CheckedPolicy],
        now: datetime,
    ) -> None:
        """Update the fleet gauges by what changed among the ExecutionPoints seen."""
        intervals = {name: result.update_interval for name, result in checked.items()}
        seen = set(self._counted) if only is None else set(only)
        for name in seen - set(world.execution_points):
            self._count(name, None)
        for name, entry in world.execution_points.items():
            policy = entry.observed.policy
            interval = intervals.get(policy.name if policy else "", DEFAULT_UPDATE_INTERVAL)
            fresh = heartbeat_state(entry.observed.last_heartbeat, now, interval)[0]
            self._count(name, (heartbeat_word(fresh), entry.slots))
        self.metrics.set_fleet(
            self._heartbeats,
            self._slots,
            {name: result.valid for name, result in checked.items()},
        )

    def _count(self, name: str, counted: tuple[str, tuple[tuple[str, str], ...]] | None) -> None:
        before = self._counted.get(name)
        if before == counted:
            return
        if before is not None:
            self._heartbeats[before[0]] -= 1
            self._slots.subtract(before[1])
        if counted is None:
            del self._counted[name]
            return
        self._counted[name] = counted
        self._heartbeats[counted[0]] += 1
        self._slots.update(counted[1])

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="kondor-write")
        return self._pool

    def close(self) -> None:
        """Stop the writer threads (after the run task is cancelled)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def apply(self, world: Snapshot, plan: Plan) -> list[str]:
        """Make the writes (from a worker thread): each ExecutionPoint's in order, up to
        `concurrency` ExecutionPoints at a time; then the SlotPolicy statuses; then the
        Events. The names whose writes failed."""
        by_name: dict[str, list[Action]] = {}
        for action in plan.actions:
            by_name.setdefault(action.name, []).append(action)

        def write(name: str, actions: list[Action]) -> tuple[list[_Written], bool]:
            entry = world.execution_points.get(name)
            uid = entry.uid if entry is not None else None
            written: list[_Written] = []
            for action in actions:
                try:
                    written += self._apply_one(action, uid)
                except KubeError as error:
                    logger.error("ExecutionPoint %s: %s failed: %s", name, _verb(action), error)
                    return written, False
            return written, True

        pool = self._executor()
        outcomes = list(pool.map(lambda item: write(*item), by_name.items()))
        failed = [name for name, (_, ok) in zip(by_name, outcomes, strict=True) if not ok]
        written = [w for done, _ in outcomes for w in done]
        ep_ok = not failed
        self.metrics.reconciles.labels("ExecutionPoint", "ok" if ep_ok else "error").inc()
        policy_ok = True
        for patch in plan.policy_patches:
            try:
                if self.writer.patch_slot_policy_status(patch.name, patch.patch):
                    self.metrics.changes.labels("SlotPolicy", "status").inc()
                    if patch.event is not None:  # few: a policy turned invalid or valid
                        self.metrics.events.labels("posted").inc()
                        ref = slot_policy_ref(patch.name, patch.uid)
                        self.writer.post_event(ref, patch.event)
            except KubeError as error:
                policy_ok = False
                logger.error("SlotPolicy %s: status patch failed: %s", patch.name, error)
        self.metrics.reconciles.labels("SlotPolicy", "ok" if policy_ok else "error").inc()
        self._announce(world, written)
        return failed

    def _announce(self, world: Snapshot, written: list[_Written]) -> None:
        """Post the Events of a pass: one per change while the allowance lasts, the rest
        summarised on the SlotPolicy they follow (else on the first ExecutionPoint)."""
        if not written:
            return
        refs: dict[str, ObjectRef] = {}
        for w in written:
            refs.setdefault(w.subject, w.ref)
        announcements = [Announcement(w.subject, w.event) for w in written]
        posted, summaries, self._events = ration_events(
            announcements,
            self._events,
            self.monotonic(),
            burst=self.event_burst,
            rate=self.event_rate,
        )
        posts = [(refs[a.subject], a.event) for a in posted]
        for summary in summaries:
            policy = world.policies.get(summary.policy or "")
            ref = (
                slot_policy_ref(policy.name, policy.uid)
                if policy is not None
                else refs[summary.subjects[0]]
            )
            posts.append((ref, summary.event))
            self.metrics.events.labels("summarised").inc(summary.count)
        self.metrics.events.labels("posted").inc(len(posted))
        list(self._executor().map(lambda post: self.writer.post_event(*post), posts))

    def _apply_one(self, action: Action, uid: str | None) -> list[_Written]:
        """Make one write; the Event to post about it, if it was made."""
        kind = "ExecutionPoint"
        name = action.name
        if isinstance(action, CreateExecutionPoint):
            created = self.writer.create_execution_point(action.manifest)
            if created is not None:
                self.metrics.changes.labels(kind, "create").inc()
                logger.info("created ExecutionPoint %s", name)
                return [_Written(name, execution_point_ref(name, created), action.event)]
        elif isinstance(action, PatchExecutionPoint):
            if self.writer.patch_execution_point(name, action.patch):
                self.metrics.changes.labels(kind, "update").inc()
                logger.info("updated ExecutionPoint %s: %s", name, action.event.message)
                return [_Written(name, execution_point_ref(name, uid), action.event)]
        elif isinstance(action, DeleteExecutionPoint):
            if self.writer.delete_execution_point(name):
                self.metrics.changes.labels(kind, "delete").inc()
                logger.info("deleted ExecutionPoint %s: %s", name, action.event.message)
                return [_Written(name, execution_point_ref(name, uid), action.event)]
        elif isinstance(action, PatchOperatorStatus) and self.writer.patch_execution_point_status(
            name, action.patch
        ):
            self.metrics.changes.labels(kind, "status").inc()
            if action.event is not None:
                return [_Written(name, execution_point_ref(name, uid), action.event)]
        return []

    async def run_once(self) -> None:
        """One pass over what was touched since the last one."""
        only = None if self._all else set(self._dirty)
        every_node = None
        if only is not None and self._nodes_changed and self._indexes is not None:
            every_node = _single(self._indexes[0])
        self._all, self._dirty, self._nodes_changed = False, set(), False
        world = self.snapshot(only)
        plan = self.plan(world, only, self.clock(), every_node=every_node)
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
