"""One active replica: leader election on a coordination.k8s.io/v1 Lease.

It works as client-go's leader election does. A candidate takes the Lease when
nobody holds it, when it holds it already, or when the holder has not renewed
it for `leaseDurationSeconds` *as observed on the candidate's own clock* (the
time the candidate last saw the record change), so clock skew between replicas
does not matter. The leader renews every `retry_period`; when it cannot renew
for `renew_deadline` it stops handling at once and the process exits, so that
two replicas never act together. A leader that is asked to stop (SIGTERM)
stops kopf first and then releases the Lease (empty holder), so the next
replica takes over within one retry period instead of a lease duration.

Every write carries the resourceVersion it read: two candidates racing for an
expired Lease cannot both win (the second gets 409 Conflict).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from kondor_core.api import format_micro_time
from kondor_kube import paths
from kondor_kube.client import Client
from kondor_kube.errors import ConflictError, KubeError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LeaseTimings:
    """client-go's defaults: a 15 s lease, renewed every 2 s, given up after 10 s of failures."""

    duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def problems(self) -> list[str]:
        problems = []
        if not self.duration > self.renew_deadline:
            problems.append(
                f"--leader-election-lease-duration ({self.duration:g}s) must be longer than "
                f"--leader-election-renew-deadline ({self.renew_deadline:g}s)"
            )
        if not self.renew_deadline > self.retry_period > 0:
            problems.append(
                f"--leader-election-renew-deadline ({self.renew_deadline:g}s) must be longer "
                f"than --leader-election-retry-period ({self.retry_period:g}s), which is > 0"
            )
        return problems


@dataclass(frozen=True)
class LeaseRecord:
    """The Lease's spec as election reads it."""

    holder: str | None
    duration: float
    transitions: int
    renew_time: str | None
    resource_version: str | None

    @classmethod
    def from_object(cls, lease: Mapping[str, Any]) -> LeaseRecord:
        spec = lease.get("spec") or {}
        metadata = lease.get("metadata") or {}
        return cls(
            holder=spec.get("holderIdentity") or None,
            duration=float(spec.get("leaseDurationSeconds") or 0),
            transitions=int(spec.get("leaseTransitions") or 0),
            renew_time=str(spec["renewTime"]) if spec.get("renewTime") else None,
            resource_version=metadata.get("resourceVersion"),
        )


def may_take(record: LeaseRecord, identity: str, observed_at: float, now: float) -> bool:
    """Whether `identity` may write itself into the Lease: nobody holds it, it holds it, or
    the holder has let it lapse (unchanged for its duration since we saw it change)."""
    if record.holder is None or record.holder == identity:
        return True
    return now - observed_at > record.duration


def take_patch(
    record: LeaseRecord, identity: str, duration: float, now: datetime
) -> dict[str, Any]:
    """The merge patch that makes `identity` the holder (or renews it), guarded by the
    resourceVersion that was read."""
    spec: dict[str, Any] = {
        "holderIdentity": identity,
        "leaseDurationSeconds": round(duration),
        "renewTime": format_micro_time(now),
    }
    if record.holder != identity:
        spec["acquireTime"] = format_micro_time(now)
        spec["leaseTransitions"] = record.transitions + (1 if record.holder else 0)
    return {"metadata": {"resourceVersion": record.resource_version}, "spec": spec}


def release_patch(record: LeaseRecord, now: datetime) -> dict[str, Any]:
    """Step down: no holder, so the next candidate need not wait for the lease to lapse."""
    return {
        "metadata": {"resourceVersion": record.resource_version},
        "spec": {
            "holderIdentity": None,
            "leaseDurationSeconds": 1,
            "renewTime": format_micro_time(now),
        },
    }


LEASES = "coordination.k8s.io/v1"


class LeaseApi(Protocol):
    """The Lease reads and writes leader election makes (`KubeLeases`, or a fake)."""

    def read_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Lease as plain JSON, or None when there is none."""

    def create_lease(self, namespace: str, body: Mapping[str, Any]) -> None:
        """Create the Lease; ConflictError when it exists."""

    def patch_lease(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        """Merge-patch the Lease; ConflictError when its resourceVersion guard fails."""


class KubeLeases:
    """LeaseApi through `kondor_kube` (as the `kondor-leader` field manager)."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def read_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.client.read(paths.group(LEASES, "leases", name, namespace=namespace))

    def create_lease(self, namespace: str, body: Mapping[str, Any]) -> None:
        self.client.create(paths.group(LEASES, "leases", namespace=namespace), body)

    def patch_lease(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        self.client.merge_patch(paths.group(LEASES, "leases", name, namespace=namespace), patch)


class LeaderElector:
    """Acquire, hold and release one Lease for this replica."""

    def __init__(
        self,
        api: LeaseApi,
        *,
        namespace: str,
        name: str,
        identity: str,
        timings: LeaseTimings = LeaseTimings(),
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
        on_change: Callable[[bool], None] = lambda leading: None,
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.timings = timings
        self.clock = clock
        self.wall = wall
        self.on_change = on_change
        self._seen: tuple[str | None, str | None] | None = None
        self._seen_at = 0.0

    def _read(self) -> LeaseRecord | None:
        lease = self.api.read_lease(self.namespace, self.name)
        return LeaseRecord.from_object(lease) if lease is not None else None

    def _observe(self, record: LeaseRecord) -> None:
        # Any write (a renewal included) changes the resourceVersion.
        key = (record.holder, record.resource_version)
        if key != self._seen:
            self._seen, self._seen_at = key, self.clock()

    def try_acquire_or_renew(self) -> bool:
        """One attempt; True when this replica holds the Lease afterwards."""
        record = self._read()
        if record is None:
            body = {
                "apiVersion": LEASES,
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": {"leaseTransitions": 0},
            }
            with contextlib.suppress(ConflictError):
                self.api.create_lease(self.namespace, body)
            record = self._read()
            if record is None:
                return False
        self._observe(record)
        if not may_take(record, self.identity, self._seen_at, self.clock()):
            return False
        patch = take_patch(record, self.identity, self.timings.duration, self.wall())
        try:
            self.api.patch_lease(self.namespace, self.name, patch)
        except ConflictError:  # another candidate wrote first
            return False
        return True

    def release(self) -> None:
        """Give the Lease up if this replica holds it."""
        try:
            record = self._read()
            if record is None or record.holder != self.identity:
                return
            self.api.patch_lease(self.namespace, self.name, release_patch(record, self.wall()))
            logger.info("released Lease %s/%s", self.namespace, self.name)
        except (KubeError, OSError) as error:
            logger.warning("could not release Lease %s/%s: %s", self.namespace, self.name, error)
        finally:
            self.on_change(False)

    async def _attempt(self) -> bool:
        try:
            return await asyncio.to_thread(self.try_acquire_or_renew)
        except (KubeError, OSError) as error:
            logger.warning("Lease %s/%s: %s", self.namespace, self.name, error)
            return False

    async def acquire(self, stop: asyncio.Event) -> bool:
        """Wait until this replica holds the Lease (True) or `stop` is set (False)."""
        logger.info("waiting to lead: Lease %s/%s as %s", self.namespace, self.name, self.identity)
        while not stop.is_set():
            if await self._attempt():
                logger.info("leading: Lease %s/%s", self.namespace, self.name)
                self.on_change(True)
                return True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.timings.retry_period)
        return False

    async def hold(self) -> None:
        """Renew every retry period; return when the Lease could not be renewed for the renew
        deadline (leadership is lost)."""
        renewed = self.clock()
        while True:
            await asyncio.sleep(self.timings.retry_period)
            if await self._attempt():
                renewed = self.clock()
                continue
            holder = self._seen[0] if self._seen else None
            if holder not in (None, self.identity):
                logger.error("lost Lease %s/%s to %s", self.namespace, self.name, holder)
                self.on_change(False)
                return
            if self.clock() - renewed > self.timings.renew_deadline:
                logger.error(
                    "lost Lease %s/%s: not renewed for %gs",
                    self.namespace,
                    self.name,
                    self.timings.renew_deadline,
                )
                self.on_change(False)
                return
