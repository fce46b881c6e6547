"""List and watch one kind of object outside kopf, as client-go's reflector does.

List, then watch from the listing's resourceVersion with bookmarks; a watch the server ends
is resumed from the last version seen; an expired version (410, or an ERROR event) lists
again at once, and any other failure of the API server lists again after a back-off that
doubles up to `max_backoff`; a broken connection resumes from the last version after the
same back-off (a resume too old answers 410 and lists again).

A subclass says how to list (`relist`), how to watch (`watch`) and what an event does to
its table (`apply`); the loop, the versions and the back-off are here, once, for the Node
watch (`kondor_operator.nodewatch`) and the ExecutionPoint watch (`kondor_operator.epwatch`).
"""

from __future__ import annotations

import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

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
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.timeout_seconds = timeout_seconds
        self.max_backoff = max_backoff
        self.sleep = sleep
        #: Set once the first listing has been reported: the table holds every object.
        self.synced = threading.Event()
        #: The last resourceVersion seen; "" when the next step is a listing.
        self.version = ""
        #: Events read and events that changed the table (for tests and logs).
        self.events = 0
        self.changes = 0

    @abstractmethod
    def relist(self) -> None:
        """List every object, replace the table, report what changed, set `version` to
        the listing's and `synced`."""

    @abstractmethod
    def watch(self, resource_version: str, timeout_seconds: int) -> Iterator[dict[str, Any]]:
        """The watch's events from `resource_version`: {"type": ..., "object": {...}}."""

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

    @abstractmethod
    def apply(self, kind: str, obj: Mapping[str, Any]) -> bool:
        """One ADDED, MODIFIED or DELETED event: whether it changed the table (and was
        reported)."""

    def follow(self) -> None:
        """Follow one watch from `self.version` until the server ends it. Raises
        `WatchExpiredError` when the version must be listed again."""
        for event in self.watch(self.version, self.timeout_seconds):
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

    def run(self, stop: threading.Event) -> None:
        """List and watch until `stop` is set (checked whenever a watch ends)."""
        backoff = 0.5
        while not stop.is_set():
            try:
                self.step()
                backoff = 0.5
            except WatchExpiredError as why:
                logger.info("%s watch: %s; listing again", self.kind, why)
                self.version = ""
            except ApiException as error:
                self.version = ""
                if error.status == 410:
                    continue
                logger.warning("%s watch: %s; again in %gs", self.kind, error, backoff)
                self.sleep(backoff)
                backoff = min(backoff * 2, self.max_backoff)
            except (HTTPError, OSError, ValueError) as error:
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
