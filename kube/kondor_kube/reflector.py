"""List and watch one kind of object, as client-go's reflector does: the one list-watch loop.

List, then watch from the listing's resourceVersion with bookmarks (a BOOKMARK only moves
the version); a watch the server ends is resumed from the last version seen; an expired
version (410, or an ERROR event) lists again at once, and any other refusal of the API
server lists again after a back-off that doubles up to `max_backoff`; a broken connection
resumes from the last version after the same back-off (a resume too old answers 410 and
lists again). Objects come without managedFields, each watch line parsed once
(`Client.watch`).

`Reflector` is the loop; a subclass says how to list (`relist`), how to watch (`watch`) and
what an event does to its table (`apply`), as the operator's Node, ExecutionPoint and job
watches do. `ListWatch` is a Reflector over one path of a `Client` that hands the listing
and each event to callbacks, as the agent's watches use it.
"""

from __future__ import annotations

import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from kondor_kube.client import JSON, Client, Query
from kondor_kube.errors import ApiError, GoneError, UnreachableError

logger = logging.getLogger(__name__)


class WatchExpiredError(Exception):
    """The watch's resourceVersion is too old (or the server sent an ERROR): list again."""


class Reflector(ABC):
    """Keeps a table current from a list and a watch; `run` until told to stop."""

    #: What is watched, for logs and the thread's name ("Node", "ExecutionPoint").
    kind = "object"
    #: Told each batch of changes (`report`), from the watch's thread.
    listeners: Sequence[Callable[[Any], None]] = ()

    def __init__(
        self,
        *,
        timeout_seconds: int = 300,
        max_backoff: float = 30.0,
        initial_backoff: float = 0.5,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.timeout_seconds = timeout_seconds
        self.max_backoff = max_backoff
        self.initial_backoff = initial_backoff
        self.sleep = sleep
        #: Set once the first listing has been reported: the table holds every object.
        self.synced = threading.Event()
        #: The last resourceVersion seen; "" when the next step is a listing.
        self.version = ""
        #: Events read and events that changed the table (for tests and logs).
        self.events = 0
        self.changes = 0
        self._stop = threading.Event()

    @abstractmethod
    def relist(self) -> None:
        """List every object, replace the table, report what changed, set `version` to
        the listing's and `synced`."""

    @abstractmethod
    def watch(self, resource_version: str, timeout_seconds: int) -> Iterator[dict[str, Any]]:
        """The watch's events from `resource_version`: {"type": ..., "object": {...}}."""

    @abstractmethod
    def apply(self, kind: str, obj: Mapping[str, Any]) -> bool:
        """One ADDED, MODIFIED or DELETED event: whether it changed the table (and was
        reported)."""

    def lost(self) -> None:
        """The table is to be listed again (its version expired, or the server refused the
        watch): a hook for tables that send reads elsewhere meanwhile."""
        return

    def report(self, changes: Mapping[str, Any]) -> None:
        """Tell each of `listeners` a batch of changes; one listener's
        failure stops neither the watch nor the others."""
        for listener in self.listeners:
            try:
                listener(changes)
            except Exception:
                logger.exception("%s listener %r failed", self.kind, listener)

    def listed(self, changes: Mapping[str, Any], version: str) -> None:
        """A listing is in the table: report what it changed (the first listing always, so
        that listeners know the table is filled), then watch from `version`."""
        if changes or not self.synced.is_set():
            self.report(changes)
        self.synced.set()
        self.version = version

    def follow(self) -> None:
        """Follow one watch from `self.version` until the server ends it (or `run`'s stop
        is set). Raises `WatchExpiredError` when the version must be listed again."""
        for event in self.watch(self.version, self.timeout_seconds):
            if self._stop.is_set():
                return
            self.events += 1
            kind = event.get("type")
            obj = event.get("object") or {}
            metadata = obj.get("metadata") or {}
            if kind == "ERROR":
                raise WatchExpiredError(
                    f"{obj.get('code')} {obj.get('reason')}: {obj.get('message')}"
                )
            self.version = str(metadata.get("resourceVersion") or self.version)
            if kind not in ("ADDED", "MODIFIED", "DELETED"):
                continue  # BOOKMARK: only the version moves
            if self.apply(str(kind), obj):
                self.changes += 1

    def step(self) -> None:
        """List if needed, then follow one watch; what went wrong decides the next step."""
        if not self.version:
            self.relist()
        self.follow()

    def _relist_next(self) -> None:
        self.version = ""
        self.lost()

    def run(self, stop: threading.Event) -> None:
        """List and watch until `stop` is set (checked whenever a watch ends, and at each
        event)."""
        self._stop = stop
        backoff = self.initial_backoff
        while not stop.is_set():
            try:
                self.step()
                backoff = self.initial_backoff
            except WatchExpiredError as why:
                logger.info("%s watch: %s; listing again", self.kind, why)
                self._relist_next()
            except GoneError:
                self._relist_next()
            except ApiError as error:
                self._relist_next()
                logger.warning("%s watch: %s; again in %gs", self.kind, error, backoff)
                self.sleep(backoff)
                backoff = min(backoff * 2, self.max_backoff)
            except (UnreachableError, OSError, ValueError) as error:
                # The connection broke, or a line was not JSON: resume from the last version
                # seen (a resume too old answers 410 and lists again).
                logger.info("%s watch interrupted: %s; again in %gs", self.kind, error, backoff)
                self.sleep(backoff)
                backoff = min(backoff * 2, self.max_backoff)

    def start(self, stop: threading.Event) -> threading.Thread:
        name = f"{self.kind.lower()}-watch"
        thread = threading.Thread(target=self.run, args=(stop,), name=name, daemon=True)
        thread.start()
        return thread


class ListWatch(Reflector):
    """The objects at one path of the API (a collection, with a label or field selector in
    `query`), listed and watched, each listing and event handed to callbacks from the
    watch's thread: `on_listed(items)` after every listing, `on_event(type, obj)` for each
    ADDED, MODIFIED or DELETED, `on_lost()` when the table is to be listed again."""

    def __init__(
        self,
        client: Client,
        path: str,
        *,
        on_listed: Callable[[list[dict[str, Any]]], None],
        on_event: Callable[[str, Mapping[str, Any]], None],
        on_lost: Callable[[], None] = lambda: None,
        query: Query = (),
        accept: str = JSON,
        kind: str = "object",
        timeout_seconds: int = 300,
        max_backoff: float = 30.0,
        initial_backoff: float = 1.0,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        super().__init__(
            timeout_seconds=timeout_seconds,
            max_backoff=max_backoff,
            initial_backoff=initial_backoff,
            sleep=sleep if sleep is not None else self._pause,
        )
        self.client = client
        self.path = path
        self.query = tuple(query)
        self.accept = accept
        self.kind = kind
        self.on_listed = on_listed
        self.on_event = on_event
        self.on_lost = on_lost

    def _pause(self, seconds: float) -> None:
        """A back-off that ends early when the reflector is stopped."""
        self._stop.wait(seconds)

    def relist(self) -> None:
        items, version = self.client.list(self.path, accept=self.accept, query=self.query)
        self.on_listed(items)
        self.synced.set()
        self.version = version

    def watch(self, resource_version: str, timeout_seconds: int) -> Iterator[dict[str, Any]]:
        return self.client.watch(
            self.path, resource_version, timeout_seconds, accept=self.accept, query=self.query
        )

    def apply(self, kind: str, obj: Mapping[str, Any]) -> bool:
        self.on_event(kind, obj)
        return True

    def lost(self) -> None:
        self.on_lost()
