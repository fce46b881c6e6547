"""The ExecutionPoint watch: one list+watch outside kopf, one parsed table, fanned out.

Every agent writes its ExecutionPoint's status once per update interval (about 16 writes a
second at 1,000 nodes with UPDATE_INTERVAL 60). Handled by kopf, each of those heartbeats
went through two `@kopf.index`es (the reconciler's and the negotiator's, each parsing the
body again) and three `@kopf.on.event` handlers (the reconciler's touch, the negotiator's
offers, power's node marker), on kopf's copies of the body: about half of the idle
operator's CPU at 1,000 nodes (docs/performance.md). Here one thread lists and watches
ExecutionPoints (`kondor_kube.reflector`), drops an event whose resourceVersion it has
already read before parsing anything, parses the rest once (`read_execution_point`: the
`kondor_core.api.ExecutionPoint` model, without `metadata.managedFields`, as client-go's
informers strip them), keeps ONE table name -> `WatchedExecutionPoint`, and reports what
changed to its listeners, in one batch per event (the whole listing in one batch), from its
own thread:

* the reconciler is touched for a name whose view (`ExecutionPointEntry`) changed;
* the negotiator hears the parsed ExecutionPoint (`Negotiator.execution_point_changed`)
  and reads the table for its cycles (`execution_points`), as defrag and cordon do through
  it;
* power's marker follows the node's power (`kondor_operator.power.PowerFollower`).

The first two are asyncio objects: `on_loop` hands their batch to the event loop. Readers
on other threads take copies (`entries`, `execution_points`) under the table's lock.

The watch writes nothing, so it may run whatever the leadership; the operator starts it
once it holds the Lease, before kopf, and waits for its first listing so that no handler
sees a partial fleet.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import ValidationError

from kondor_core.api import ExecutionPoint, describe_errors
from kondor_core.api.executionpoint import PowerStatus
from kondor_kube.reflector import Reflector
from kondor_operator.power import PowerChange, power_of
from kondor_operator.reconciler import (
    ExecutionPointEntry,
    execution_point_entry,
    execution_point_view,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class WatchedExecutionPoint:
    """One ExecutionPoint as the operator holds it: parsed once, at `resource_version`.

    `point` is the whole object, or None when it does not parse as a whole (then it is not
    offered to jobs, and `entry` and `power` are what parses of it, with a warning)."""

    resource_version: str
    point: ExecutionPoint | None
    #: The reconciler's view (derived from `point`, sharing its parts).
    entry: ExecutionPointEntry
    power: PowerStatus | None

    @property
    def name(self) -> str:
        return self.entry.observed.name

    @property
    def node_name(self) -> str:
        return self.entry.observed.node_name


@dataclass(frozen=True, slots=True)
class ExecutionPointChange:
    """What one name was before and is now (None: not there)."""

    before: WatchedExecutionPoint | None
    after: WatchedExecutionPoint | None

    @property
    def point(self) -> ExecutionPoint | None:
        """The ExecutionPoint now; None when it is gone or does not parse."""
        return self.after.point if self.after is not None else None

    def power_change(self) -> PowerChange:
        """What power management is told: the node's power now (none when gone), and
        whether it is the power the node had before."""
        after, before = self.after, self.before
        either = after if after is not None else before
        node = either.node_name if either is not None else ""
        if after is None:
            return PowerChange(node, None, gone=True)
        unchanged = before is not None and before.power == after.power and before.node_name == node
        return PowerChange(node, after.power, unchanged=unchanged)

    @property
    def entry_changed(self) -> bool:
        """Whether the reconciler's view changed (an agent's heartbeat changes it)."""
        before = self.before.entry if self.before is not None else None
        after = self.after.entry if self.after is not None else None
        return before != after


#: What the watch reports: name -> its change, one batch per event (a listing in one).
ExecutionPointChanges = Mapping[str, ExecutionPointChange]
Listener = Callable[[ExecutionPointChanges], None]


def read_execution_point(obj: Mapping[str, Any]) -> WatchedExecutionPoint:
    """Parse an ExecutionPoint as the API server sent it, once, without its managedFields."""
    metadata = dict(obj.get("metadata") or {})
    metadata.pop("managedFields", None)
    data = {key: obj[key] for key in ("apiVersion", "kind", "spec", "status") if obj.get(key)}
    data["metadata"] = metadata
    version = str(metadata.get("resourceVersion") or "")
    try:
        point = ExecutionPoint.model_validate(data)
    except ValidationError as error:
        logger.warning(
            "ExecutionPoint %s not offered: %s",
            metadata.get("name"),
            "; ".join(describe_errors(error)),
        )
        return WatchedExecutionPoint(version, None, execution_point_entry(data), power_of(data))
    power = point.status.power if point.status is not None else None
    return WatchedExecutionPoint(version, point, execution_point_view(point), power)


class ExecutionPointTable:
    """name -> WatchedExecutionPoint, written by one thread, read by any (copies)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._points: dict[str, WatchedExecutionPoint] = {}

    def __len__(self) -> int:
        return len(self._points)

    def get(self, name: str) -> WatchedExecutionPoint | None:
        return self._points.get(name)

    def entries(self, names: Collection[str] | None = None) -> dict[str, ExecutionPointEntry]:
        """The reconciler's views: all, or those of `names` that exist."""
        with self._lock:
            if names is None:
                return {name: watched.entry for name, watched in self._points.items()}
            found = (self._points.get(name) for name in names)
            return {watched.name: watched.entry for watched in found if watched is not None}

    def execution_points(self) -> list[ExecutionPoint]:
        """Every ExecutionPoint that parses (the negotiator's offers, defrag's and cordon's
        view)."""
        with self._lock:
            watched = list(self._points.values())
        return [w.point for w in watched if w.point is not None]

    def relist(self, listed: Sequence[Mapping[str, Any]]) -> dict[str, ExecutionPointChange]:
        """Replace the table by a full listing, parsing only what is at a new version: what
        changed."""
        fresh: dict[str, WatchedExecutionPoint] = {}
        changes: dict[str, ExecutionPointChange] = {}
        for obj in listed:
            metadata = obj.get("metadata") or {}
            name = str(metadata.get("name") or "")
            before = self._points.get(name)
            if before is not None and before.resource_version == str(
                metadata.get("resourceVersion") or ""
            ):
                fresh[name] = before
                continue
            fresh[name] = after = read_execution_point(obj)
            changes[name] = ExecutionPointChange(before, after)
        for name, before in self._points.items():
            if name not in fresh:
                changes[name] = ExecutionPointChange(before, None)
        with self._lock:
            self._points = fresh
        return changes

    def apply(self, kind: str, obj: Mapping[str, Any]) -> ExecutionPointChange | None:
        """One watch event (ADDED, MODIFIED, DELETED): its change, None when there is none
        (an event at the version already read is dropped unparsed)."""
        metadata = obj.get("metadata") or {}
        name = str(metadata.get("name") or "")
        before = self._points.get(name)
        if kind == "DELETED":
            if before is None:
                return None
            with self._lock:
                del self._points[name]
            return ExecutionPointChange(before, None)
        if before is not None and before.resource_version == str(
            metadata.get("resourceVersion") or ""
        ):
            return None
        after = read_execution_point(obj)
        with self._lock:
            self._points[name] = after
        return ExecutionPointChange(before, after)


class ExecutionPointSource(Protocol):
    """ExecutionPoints from the API server (kondor_operator.kube.Kube, or a fake in tests)."""

    def list_execution_points(self) -> tuple[list[dict[str, Any]], str]: ...
    def watch_execution_points(
        self, resource_version: str, timeout_seconds: int
    ) -> Iterator[dict[str, Any]]: ...


class ExecutionPointWatch(Reflector):
    """Keeps an `ExecutionPointTable` current from `source` and reports its changes to each
    of `listeners`, from the watch's thread."""

    kind = "ExecutionPoint"

    def __init__(
        self,
        source: ExecutionPointSource,
        listeners: Sequence[Listener] = (),
        *,
        timeout_seconds: int = 300,
        max_backoff: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        super().__init__(timeout_seconds=timeout_seconds, max_backoff=max_backoff, sleep=sleep)
        self.source = source
        self.listeners = tuple(listeners)
        self.table = ExecutionPointTable()

    # The table's reads, so that the watch is what readers are handed.
    def entries(self, names: Collection[str] | None = None) -> dict[str, ExecutionPointEntry]:
        return self.table.entries(names)

    def execution_points(self) -> list[ExecutionPoint]:
        return self.table.execution_points()

    def relist(self) -> None:
        """List every ExecutionPoint and report what changed since the table was filled."""
        items, version = self.source.list_execution_points()
        changes = self.table.relist(items)
        del items  # the bodies: only the parsed models stay
        self.listed(changes, version)

    def watch(self, resource_version: str, timeout_seconds: int) -> Iterator[dict[str, Any]]:
        return self.source.watch_execution_points(resource_version, timeout_seconds)

    def apply(self, kind: str, obj: Mapping[str, Any]) -> bool:
        change = self.table.apply(kind, obj)
        if change is None:
            return False
        name = str((obj.get("metadata") or {}).get("name") or "")
        self.report({name: change})
        return True


def on_loop(loop: asyncio.AbstractEventLoop, listener: Listener) -> Listener:
    """`listener` called on `loop` (for asyncio objects), the batch handed over as it is."""

    def hand_over(changes: ExecutionPointChanges) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: the operator stops
            loop.call_soon_threadsafe(listener, changes)

    return hand_over
