"""The Node watch: metadata only, outside kopf, so that Node status heartbeats cost nothing.

Kubelets (and kwok) rewrite every Node's status every few seconds. Handled by kopf
(one handler call per event, on the whole Node body) those heartbeats were most of the
operator's CPU at 1,000 nodes (bench/bench_fleet.py: 0.27 cores). The operator needs a
Node's name, uid and labels only, so it lists and watches Nodes as the API server's
PartialObjectMetadata (as client-go's metadata informers do), in one thread, and
`kondor_core.fleet.NodeTable` drops every event that changes none of them before it
reaches the event loop. What changes is handed to `on_change`, from this thread.

List, then watch from the listing's resourceVersion with bookmarks; a watch the server
ends is resumed from the last version seen; an expired version (410) or any error
lists again (after a back-off when the API server failed), as an informer's reflector
does.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from kondor_core.fleet import NodeFacts, NodeTable, node_facts

logger = logging.getLogger(__name__)

#: What the watch reports: node name -> its facts now, None when it is gone.
NodeChanges = Mapping[str, NodeFacts | None]


class NodeSource(Protocol):
    """Node metadata from the API server (kondor_operator.kube.Kube, or a fake in tests)."""

    def list_node_metadata(self) -> tuple[list[dict[str, Any]], str]: ...
    def watch_node_metadata(
        self, resource_version: str, timeout_seconds: int
    ) -> Iterator[dict[str, Any]]: ...


class WatchExpiredError(Exception):
    """The watch's resourceVersion is too old (or the server sent an ERROR): list again."""


class NodeWatch:
    """Keeps a `NodeTable` current from `source` and reports its changes to `on_change`."""

    def __init__(
        self,
        source: NodeSource,
        on_change: Callable[[NodeChanges], None],
        *,
        timeout_seconds: int = 300,
        max_backoff: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.source = source
        self.on_change = on_change
        self.timeout_seconds = timeout_seconds
        self.max_backoff = max_backoff
        self.sleep = sleep
        self.table = NodeTable()
        #: Set once the first listing has been reported: the table holds every Node.
        self.synced = threading.Event()
        #: The last resourceVersion seen; "" when the next step is a listing.
        self.version = ""
        #: Events read and events that changed the table (for tests and logs).
        self.events = 0
        self.changes = 0

    def relist(self) -> None:
        """List every Node and report what changed since the table was last filled."""
        items, version = self.source.list_node_metadata()
        listed = [facts for facts in map(node_facts, items) if facts is not None]
        changed = self.table.relist(listed)
        if changed or not self.synced.is_set():
            self.on_change(changed)
        self.synced.set()
        self.version = version

    def follow(self) -> None:
        """Follow one watch from `self.version` until the server ends it. Raises
        `WatchExpiredError` when the version must be listed again."""
        for event in self.source.watch_node_metadata(self.version, self.timeout_seconds):
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
            facts = node_facts(metadata)
            if facts is not None and self.table.apply(str(kind), facts):
                self.changes += 1
                self.on_change({facts.name: None if kind == "DELETED" else facts})

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
                logger.info("Node watch: %s; listing again", why)
                self.version = ""
            except ApiException as error:
                self.version = ""
                if error.status == 410:
                    continue
                logger.warning("Node watch: %s; again in %gs", error, backoff)
                self.sleep(backoff)
                backoff = min(backoff * 2, self.max_backoff)
            except (HTTPError, OSError, ValueError) as error:
                # The connection broke, or a line was not JSON: resume from the last version
                # seen (a resume too old answers 410 and lists again).
                logger.info("Node watch interrupted: %s; again in %gs", error, backoff)
                self.sleep(backoff)
                backoff = min(backoff * 2, self.max_backoff)

    def start(self, stop: threading.Event) -> threading.Thread:
        thread = threading.Thread(target=self.run, args=(stop,), name="node-watch", daemon=True)
        thread.start()
        return thread
