"""The Node watch: metadata only, outside kopf, so that Node status heartbeats cost nothing.

Kubelets (and kwok) rewrite every Node's status every few seconds. Handled by kopf
(one handler call per event, on the whole Node body) those heartbeats were most of the
operator's CPU at 1,000 nodes (bench/bench_fleet.py: 0.27 cores). The operator needs a
Node's name, uid and labels only, so it lists and watches Nodes as the API server's
PartialObjectMetadata (as client-go's metadata informers do), in one thread, and
`kondor_core.fleet.NodeTable` drops every event that changes none of them before it
reaches the event loop. What changes is handed to `on_change`, from this thread.

Listing, watching, resuming and listing again are `kondor_kube.reflector`'s.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

from kondor_core.fleet import NodeFacts, NodeTable, node_facts
from kondor_kube.reflector import Reflector

#: What the watch reports: node name -> its facts now, None when it is gone.
NodeChanges = Mapping[str, NodeFacts | None]


class NodeSource(Protocol):
    """Node metadata from the API server (kondor_operator.kube.Kube, or a fake in tests)."""

    def list_node_metadata(self) -> tuple[list[dict[str, Any]], str]: ...
    def watch_node_metadata(
        self, resource_version: str, timeout_seconds: int
    ) -> Iterator[dict[str, Any]]: ...


class NodeWatch(Reflector):
    """Keeps a `NodeTable` current from `source` and reports its changes to `on_change`."""

    kind = "Node"

    def __init__(
        self,
        source: NodeSource,
        on_change: Callable[[NodeChanges], None],
        *,
        timeout_seconds: int = 300,
        max_backoff: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        super().__init__(timeout_seconds=timeout_seconds, max_backoff=max_backoff, sleep=sleep)
        self.source = source
        self.on_change = on_change
        self.table = NodeTable()

    def relist(self) -> None:
        """List every Node and report what changed since the table was last filled."""
        items, version = self.source.list_node_metadata()
        listed = [facts for facts in map(node_facts, items) if facts is not None]
        changed = self.table.relist(listed)
        if changed or not self.synced.is_set():
            self.on_change(changed)
        self.synced.set()
        self.version = version

    def watch(self, resource_version: str, timeout_seconds: int) -> Iterator[dict[str, Any]]:
        return self.source.watch_node_metadata(resource_version, timeout_seconds)

    def apply(self, kind: str, obj: Mapping[str, Any]) -> bool:
        facts = node_facts(obj.get("metadata") or {})
        if facts is None or not self.table.apply(kind, facts):
            return False
        self.on_change({facts.name: None if kind == "DELETED" else facts})
        return True
