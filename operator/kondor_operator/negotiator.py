"""The operator's schedd and negotiator loop: gather from the operator's job and
ExecutionPoint tables, call `kondor_core.schedd`, write what it decided.

ExecutionJobs (all namespaces) and ExecutionPoints come parsed from the operator's own
watches (`kondor_operator.jobwatch`, `kondor_operator.epwatch`; DESIGN.md, "Scale": no
change-detecting handlers, so no annotation writes on jobs): their tables for the cycles,
their changes to `jobs_changed` and `execution_point_changed`, which only mark what changed.
The Pool reaches it through a `@kopf.index`. One task does every write:

- after a job event (debounced), the job follows its commands and the agent's answer
  (`schedd.follow`), a new job getting its ClusterId from the Pool's counter
  (`status.lastClusterId`, reserved by a write guarded by the Pool's resourceVersion: a
  ClusterId is never given twice, across operator restarts and deleted jobs);
- every `negotiatorInterval` (Pool `default`), and soon after a job is submitted or a job
  or ExecutionPoint change frees a slot, one negotiation cycle (`schedd.plan_cycle`), after
  following the jobs time changes (MATCH_TIMEOUT, deferral windows), and every job once
  a minute.

Status is written with merge patches of the status subresource, guarded by the
resourceVersion the decision was made on, so a decision taken on a stale view (the job
table lags the operator's own writes by a watch event) is refused with 409 and retaken on
the next event instead of matching a job twice. What a write returned is used until the
index catches up with it. A job followed and matched in one pass (a new job's ClusterId and
its match) is written once. The agent finds its jobs by `status.executionPoint` and writes
only its answer, `status.execution`, which is never written here: the operator follows each
answer and writes the schedd's fields it makes (Running, Completed, ...), the one writer of
every other status field (docs/architecture.md, "Who writes what").

It runs inside kopf, which starts only once this replica holds the leader Lease
(kondor_operator.main), and writes nothing while `leading` says otherwise.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

import kopf
from pydantic import ValidationError

from kondor_core.api import (
    DEFAULT_POOL,
    GROUP,
    POOLS,
    VERSION,
    ExecutionJob,
    ExecutionPoint,
    PoolSpec,
    describe_errors,
)
from kondor_core.api.pool import CycleStats, PoolStatus
from kondor_core.jobs import job_id
from kondor_core.negotiation.poolconfig import PoolConfigError, pool_settings
from kondor_core.schedd.change import JobChange, status_patch
from kondor_core.schedd.cycle import plan_cycle
from kondor_core.schedd.follow import changes_with_time
from kondor_core.schedd.follow import follow as follow_job
from kondor_core.schedd.identity import (
    LAST_CLUSTER_ID,
    cluster_id_of,
    needs_cluster_id,
    reserve_cluster_ids,
    stored_cluster_id,
)
from kondor_operator.metrics import Metrics

logger = logging.getLogger(__name__)

#: Tries at reserving ClusterIds in one pass (each a read of the Pool and a guarded write).
CLUSTER_ID_TRIES = 5

#: Index ids (kopf passes each index to handlers as a keyword argument of this name).
POOLS_INDEX = "negotiator_pools"

#: kopf's index: key -> the values the indexed objects gave for it.
Index = Mapping[Any, Collection[Any]]


class QueueSource(Protocol):
    """The ExecutionJobs, parsed (kondor_operator.jobwatch's table, or a fake in tests)."""

    def jobs(self) -> Mapping[str, JobEntry]: ...


class ExecutionPointSource(Protocol):
    """The ExecutionPoints, parsed (kondor_operator.epwatch's table, or a fake in tests)."""

    def execution_points(self) -> list[ExecutionPoint]: ...


class JobWriter(Protocol):
    """The writes the negotiator makes (kondor_operator.kube.Kube, or a fake in tests)."""

    def patch_execution_job_status(
        self, namespace: str, name: str, patch: Mapping[str, Any], resource_version: str | None
    ) -> dict[str, Any] | None: ...
    def read_pool(self, name: str) -> dict[str, Any] | None: ...
    def patch_pool_status(self, name: str, patch: Mapping[str, Any]) -> bool:
        """Merge-patch the Pool's status (creating a missing Pool with an empty spec); False
        when refused: a `metadata.resourceVersion` in the patch that is no longer the Pool's
        (409)."""
        ...


# ---- index values --------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobEntry:
    """An ExecutionJob in the index, parsed, with the resourceVersion it was read at."""

    job: ExecutionJob
    resource_version: str | None

    @property
    def key(self) -> str:
        return job_id(self.job)


def _plain(body: Mapping[str, Any]) -> dict[str, Any]:
    # kopf's bodies are live views of the watch stream: read a copy.
    return {key: body.get(key) for key in ("apiVersion", "kind", "metadata", "spec", "status")}


def job_entry(body: Mapping[str, Any]) -> JobEntry | None:
    """The job as the negotiator reads it; None (with a warning) when it does not parse,
    which admission prevents for anything written since the webhook was installed."""
    data = {key: value for key, value in _plain(body).items() if value is not None}
    metadata = data.get("metadata") or {}
    try:
        job = ExecutionJob.model_validate(data)
    except ValidationError as error:
        logger.warning(
            "ExecutionJob %s/%s ignored: %s",
            metadata.get("namespace"),
            metadata.get("name"),
            "; ".join(describe_errors(error)),
        )
        return None
    version = metadata.get("resourceVersion")
    return JobEntry(job, str(version) if version else None)


def pool_entry(body: Mapping[str, Any]) -> PoolSpec:
    """The Pool's settings (its spec with its condorConfig applied); the defaults (with a
    warning) when the spec does not parse, the spec alone when the snippet does not."""
    name = (body.get("metadata") or {}).get("name")
    try:
        spec = PoolSpec.model_validate(dict(body.get("spec") or {}))
    except ValidationError as error:
        logger.warning("Pool %s: defaults used: %s", name, "; ".join(describe_errors(error)))
        return PoolSpec()
    try:
        return pool_settings(spec)
    except PoolConfigError as error:
        logger.warning("Pool %s: condorConfig ignored: %s", name, error)
        return spec


def pool_status(body: Mapping[str, Any] | None) -> PoolStatus | None:
    """The accountant kept in the Pool's status; None when there is none or it does not
    parse (with a warning: the accountant starts again)."""
    status = (body or {}).get("status")
    if not status:
        return None
    try:
        return PoolStatus.model_validate(dict(status))
    except ValidationError as error:
        logger.warning("Pool status not read, accountant reset: %s", describe_errors(error))
        return None


def offer_signature(point: ExecutionPoint) -> tuple[Any, ...]:
    """What of an ExecutionPoint a cycle's offers depend on, without the clock and the
    heartbeat time: an agent's periodic report that changes none of it starts no cycle."""
    status = point.status
    if status is None:
        return (None, ())
    return (
        status.operator.heartbeat,
        tuple(
            (slot.name, slot.state, slot.activity, slot.cpus, slot.memory, slot.gpus)
            for slot in status.slots
        ),
    )


def _single(index: Index | None) -> dict[Any, Any]:
    if index is None:
        return {}
    return {key: next(iter(values)) for key, values in index.items() if values}


# ---- the loop ------------------------------------------------------------------------------------


@dataclass
class Pass:
    """What one pass did: jobs followed and written, whether a cycle ran and matched."""

    followed: int = 0
    written: int = 0
    cycle: bool = False
    matched: int = 0
    idle: int = 0
    frees: bool = False
    problems: list[str] = field(default_factory=list)
    stats: CycleStats | None = None


class Negotiator:
    """The schedd (following jobs) and the negotiator (cycles) of the operator."""

    def __init__(
        self,
        writer: JobWriter,
        metrics: Metrics,
        *,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        debounce: float = 0.5,
        write_concurrency: int = 1,
        resync: float = 60.0,
    ) -> None:
        self.writer = writer
        #: Jobs written at once, each job's writes in order (a thousand matches written one
        #: after the other are a thousand round trips: issue 16).
        self._pool = ThreadPoolExecutor(
            max(1, write_concurrency), thread_name_prefix="kondor-negotiator-write"
        )
        self.metrics = metrics
        self.clock = clock
        self.monotonic = monotonic
        self.debounce = debounce
        self.resync = resync
        self._resynced: float | None = None
        #: The accountant (the Pool's status): read from the API server before the first
        #: cycle (kopf's index may not hold the Pool yet), then kept here and written back.
        self.accountant: PoolStatus | None = None
        self._accountant_read = False
        self.leading = True
        self._jobs: QueueSource | None = None
        self._execution_points: ExecutionPointSource | None = None
        self._pools: Index | None = None
        self._dirty: set[str] = set()
        self._pool_generation: int | None = None
        self._soon = True
        self._wake = asyncio.Event()
        self._last_cycle: float | None = None
        #: key -> (resourceVersion written against, the job as the write returned it).
        self._written: dict[str, tuple[str | None, JobEntry]] = {}
        self._offers_seen: dict[str, tuple[Any, ...]] = {}

    # -- inputs

    def attach(
        self, jobs: QueueSource, execution_points: ExecutionPointSource, pools: Index
    ) -> None:
        """Read from the job and ExecutionPoint tables and kopf's Pool index (a live mapping
        kopf keeps current)."""
        self._jobs, self._execution_points, self._pools = jobs, execution_points, pools
        self.cycle_soon()

    def set_leading(self, leading: bool) -> None:
        self.leading = leading

    def jobs_changed(self, changes: Mapping[str, str]) -> None:
        """A batch of the job watch's changes (key -> event type)."""
        for key, event_type in changes.items():
            self.job_changed(key, event_type)

    def job_changed(self, key: str, event_type: str | None) -> None:
        """A job's watch event: follow it soon; a new job also wants a cycle."""
        self._dirty.add(key)
        if event_type in (None, "ADDED"):
            self._soon = True
        self._wake.set()

    def execution_point_changed(self, name: str, point: ExecutionPoint | None) -> None:
        """An ExecutionPoint's watch event (`point` None: gone, or it does not parse): a
        cycle soon when what it offers changed."""
        signature = offer_signature(point) if point is not None else None
        if signature is None:
            self._offers_seen.pop(name, None)
            return
        if self._offers_seen.get(name) != signature:
            self._offers_seen[name] = signature
            self.cycle_soon()

    def cycle_soon(self) -> None:
        self._soon = True
        self._wake.set()

    def pool_changed(self, generation: int | None) -> None:
        """The Pool's spec changed (a new generation; its creation or deletion too): negotiate
        soon with the new settings. The negotiator's own status writes (the accountant) leave
        the generation alone, so they do not start another cycle."""
        if generation != self._pool_generation:
            self._pool_generation = generation
            self.cycle_soon()

    def settings(self) -> PoolSpec:
        """The Pool `default`'s spec, or the defaults when there is none."""
        pool = _single(self._pools).get(DEFAULT_POOL)
        return pool if isinstance(pool, PoolSpec) else PoolSpec()

    def jobs(self) -> dict[str, JobEntry]:
        """The jobs as the index has them, with what this operator's writes returned for
        those whose write the index has not seen yet."""
        jobs = dict(self._jobs.jobs()) if self._jobs is not None else {}
        for key, (before, written) in list(self._written.items()):
            current = jobs.get(key)
            if current is not None and current.resource_version == before:
                jobs[key] = written
            else:  # the index caught up (or the job is gone)
                del self._written[key]
        return jobs

    def execution_points(self) -> list[ExecutionPoint]:
        source = self._execution_points
        return source.execution_points() if source is not None else []

    # -- one pass

    def run_once(self, dirty: Collection[str], *, cycle: bool) -> Pass:
        """Follow the `dirty` jobs (and, in a cycle, those `_to_follow` adds), then run a
        cycle if asked."""
        done = Pass(cycle=cycle)
        now = self.clock()
        settings = self.settings()
        jobs = self.jobs()
        follows: dict[str, JobChange] = {}
        read = dict(jobs)  # as read: every write is a patch from these
        to_follow = [key for key in self._to_follow(jobs, dirty, cycle=cycle) if key in jobs]
        ids = self._cluster_ids(jobs, [key for key in to_follow if needs_cluster_id(jobs[key].job)])
        for key in to_follow:
            entry = jobs[key]
            done.followed += 1
            change = follow_job(entry.job, now, settings, cluster_id=ids.get(key))
            if change is None:
                continue
            done.frees |= _frees(entry, change)
            follows[key] = change
            # The cycle sees the job as followed; a job matched in it is written once.
            jobs[key] = JobEntry(
                entry.job.model_copy(update={"status": change.status}), entry.resource_version
            )
        if not cycle:
            self._write_changes(read, follows, done)
            return done
        started = time.perf_counter()
        if not self._accountant_read:
            self.accountant = pool_status(self.writer.read_pool(DEFAULT_POOL))
            self._accountant_read = True
        plan = plan_cycle(
            [entry.job for entry in jobs.values()],
            self.execution_points(),
            now,
            settings,
            accountant=self.accountant,
        )
        self.accountant = plan.accountant
        done.idle, done.problems = plan.idle, list(plan.problems)
        for problem in plan.problems:
            logger.warning("negotiation: slot not offered: %s", problem)
        matches = {c.key: c for c in plan.changes}
        for key, change in self._write_changes(read, {**follows, **matches}, done).items():
            if key in matches and change.execution_point is not None:
                done.matched += 1
                preempting = change.status.preemption
                logger.info(
                    "matched %s to %s on %s (claim %s%s)",
                    key,
                    change.status.slot,
                    change.execution_point,
                    change.status.claim_id,
                    f", preempting for {preempting}" if preempting else "",
                )
        duration = time.perf_counter() - started
        stats = plan.stats.model_copy(update={"duration_seconds": round(duration, 4)})
        done.stats = stats
        status = plan.accountant.model_copy(update={"last_cycle": stats})
        # The whole status each cycle: the users' list is replaced, not merged; all but the
        # ClusterId counter, which only `_cluster_ids` writes (guarded).
        accountant = status.dump()
        accountant.pop(LAST_CLUSTER_ID, None)
        if self.leading and not self.writer.patch_pool_status(DEFAULT_POOL, {"status": accountant}):
            logger.warning("Pool %s: the accountant could not be written", DEFAULT_POOL)
        self.metrics.negotiation_cycle.observe(duration)
        self.metrics.matches.inc(done.matched)
        self.metrics.idle_jobs.set(plan.idle)
        return done

    def _to_follow(
        self, jobs: Mapping[str, JobEntry], dirty: Collection[str], *, cycle: bool
    ) -> list[str]:
        """The jobs a pass follows: the changed ones; in a cycle also those time alone
        changes (`schedd.changes_with_time`), and every job once per `resync` seconds,
        as an informer resyncs. Following the 10,000 running and completed jobs of a
        large queue every cycle cost seconds (issue 16)."""
        if not cycle:
            return sorted(dirty)
        now = self.monotonic()
        if self._resynced is None or now - self._resynced >= self.resync:
            self._resynced = now
            return sorted(jobs)
        timed = {key for key, entry in jobs.items() if changes_with_time(entry.job)}
        return sorted(timed.union(dirty))

    def _cluster_ids(self, jobs: Mapping[str, JobEntry], new: list[str]) -> dict[str, int]:
        """ClusterIds for the `new` jobs (key -> ClusterId), reserved at once from the Pool's
        counter: read the Pool, write its `status.lastClusterId` moved past them, guarded by
        the resourceVersion read (another write meanwhile: 409, read and try again). The
        counter starts past every ClusterId a job has (jobs older than the counter). No
        Pool `default`: the write creates it, with an empty spec (the defaults the
        negotiator uses without one). None reserved (not leading, or the Pool kept
        changing): the jobs wait for a later pass without a ClusterId."""
        if not new or not self.leading:
            return {}
        seen = max((cluster_id_of(entry.job) for entry in jobs.values()), default=0)
        for _ in range(CLUSTER_ID_TRIES):
            pool = self.writer.read_pool(DEFAULT_POOL)
            first, last = reserve_cluster_ids(stored_cluster_id(pool), seen, len(new))
            patch: dict[str, Any] = {"status": {LAST_CLUSTER_ID: last}}
            version = ((pool or {}).get("metadata") or {}).get("resourceVersion")
            if version:
                patch["metadata"] = {"resourceVersion": version}
            if self.writer.patch_pool_status(DEFAULT_POOL, patch):
                return {key: first + offset for offset, key in enumerate(new)}
            logger.debug("Pool %s changed meanwhile: ClusterIds read again", DEFAULT_POOL)
        logger.warning("Pool %s: no ClusterIds reserved; new jobs wait", DEFAULT_POOL)
        return {}

    def _write_changes(
        self, read: Mapping[str, JobEntry], changes: Mapping[str, JobChange], done: Pass
    ) -> dict[str, JobChange]:
        """Write each job's change as one patch from the job as `read`; the changes written."""
        keys = list(changes)
        written = self._write_all([(read[key], changes[key]) for key in keys])
        done.written += sum(updated is not None for updated in written)
        return {key: changes[key] for key, updated in zip(keys, written, strict=True) if updated}

    def _write_all(self, writes: list[tuple[JobEntry, JobChange]]) -> list[JobEntry | None]:
        """`_write` each (job, change), different jobs at once on the pool; the results in
        order. A write that raised raises here once the others are done."""
        if len(writes) <= 1:
            return [self._write(entry, change) for entry, change in writes]
        return list(self._pool.map(lambda pair: self._write(*pair), writes))

    def _write(self, entry: JobEntry, change: JobChange) -> JobEntry | None:
        """Write the change (one patch of the status subresource); the job as it is
        afterwards, or None when the write was refused (the job changed meanwhile) or this
        replica does not lead."""
        if not self.leading:
            return None
        job = entry.job
        namespace, name = change.namespace, change.name
        current = entry
        patch = status_patch(job.status, change.status)
        if patch:
            try:
                updated = self.writer.patch_execution_job_status(
                    namespace, name, patch, entry.resource_version
                )
            except Exception:
                self.metrics.job_writes.labels("status", "error").inc()
                raise
            if updated is None:
                self.metrics.job_writes.labels("status", "conflict").inc()
                logger.debug("%s/%s changed meanwhile; next event decides", namespace, name)
                return None
            self.metrics.job_writes.labels("status", "ok").inc()
            current = self._returned(entry, updated)
            logger.debug("%s/%s: %s", namespace, name, change.why)
        return current

    def _returned(self, entry: JobEntry, body: Mapping[str, Any]) -> JobEntry:
        """The job as a write returned it, remembered until the index shows the write: until
        then the index still has the version the first unseen write was made against."""
        parsed = job_entry(body)
        if parsed is None:
            return entry
        seen = self._written.get(entry.key)
        before = seen[0] if seen is not None else entry.resource_version
        self._written[entry.key] = (before, parsed)
        return parsed

    async def run(self) -> None:
        """Follow jobs when touched, negotiate every interval and soon after a change that
        frees a slot; until cancelled."""
        backoff = 1.0
        while True:
            interval = self.settings().negotiator_interval
            due_at = (self._last_cycle or 0.0) + interval
            wait = max(0.0, due_at - self.monotonic()) if not self._soon else 0.0
            woken = True
            if wait > 0:
                try:
                    await asyncio.wait_for(self._wake.wait(), wait)
                except TimeoutError:
                    woken = False
            if woken:
                await asyncio.sleep(self.debounce)  # let a burst of events arrive
            self._wake.clear()
            cycle = self._soon or self.monotonic() >= due_at
            dirty, self._dirty, self._soon = self._dirty, set(), False
            try:
                done = await asyncio.to_thread(self.run_once, dirty, cycle=cycle)
            except Exception:
                logger.exception("negotiator pass failed; retrying in %gs", backoff)
                self._dirty |= dirty
                self._soon = self._soon or cycle
                await asyncio.sleep(backoff)
                continue
            if cycle:
                self._last_cycle = self.monotonic()
            if done.frees:
                self._soon = True


def _frees(entry: JobEntry, change: JobChange) -> bool:
    """Whether the change leaves a slot (or a job) for the next cycle: a claim given up,
    a job ended or held, a job new to the queue."""
    before = entry.job.status
    if before is None or before.cluster_id is None:
        return True
    had_claim = before.claim_id is not None and before.job_status not in ("Completed", "Removed")
    after = change.status
    return had_claim and (
        after.claim_id is None or after.job_status in ("Completed", "Removed", "Held")
    )


# ---- kopf registration ---------------------------------------------------------------------------


def register(
    registry: kopf.OperatorRegistry,
    negotiator: Negotiator,
    jobs: QueueSource,
    execution_points: ExecutionPointSource,
) -> None:
    """Register the negotiator's Pool index and handler and its task on `registry`; it reads
    `jobs` and `execution_points` (the operator's watches, which also tell it of their
    changes)."""
    tasks: list[asyncio.Task[None]] = []

    @kopf.index(GROUP, VERSION, POOLS, id=POOLS_INDEX, registry=registry)
    def index_pool(name: str, body: kopf.Body, **_: Any) -> dict[str, PoolSpec]:
        return {name: pool_entry(body)}

    @kopf.on.startup(id="start-negotiator", registry=registry)
    async def start_negotiator(**kwargs: Any) -> None:
        negotiator.attach(jobs, execution_points, kwargs[POOLS_INDEX])
        tasks.append(asyncio.create_task(negotiator.run(), name="kondor negotiator"))

    @kopf.on.cleanup(id="stop-negotiator", registry=registry)
    async def stop_negotiator(**_: Any) -> None:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    @kopf.on.event(GROUP, VERSION, POOLS, id="pool-changed", registry=registry)
    async def pool_changed(body: kopf.Body, type: str | None, **_: Any) -> None:
        generation = None if type == "DELETED" else body.get("metadata", {}).get("generation")
        negotiator.pool_changed(generation)
