"""The operator's view of the Nodes: name, uid and labels, from their metadata alone.

Kubelets (and kwok) rewrite each Node's status every few seconds; none of that
decides anything here. The operator therefore watches Node *metadata* only
(PartialObjectMetadata) and keeps this table, which says which events change what
the planner sees: a new node, new labels or uid, a deletion. The rest are dropped
before they cost a reconcile pass. Pure: the watch that feeds it is at the edge.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kondor_core.fleet.plan import NodeFacts


def node_facts(metadata: Mapping[str, Any]) -> NodeFacts | None:
    """A Node's facts from its metadata (of a Node or a PartialObjectMetadata); None when
    it has no name."""
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        return None
    labels = metadata.get("labels") or {}
    return NodeFacts(
        name=name,
        uid=str(metadata.get("uid") or ""),
        labels={str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {},
    )


class NodeTable:
    """Node name -> NodeFacts, and which updates change it."""

    def __init__(self) -> None:
        self.facts: dict[str, NodeFacts] = {}

    def relist(self, listed: Iterable[NodeFacts]) -> dict[str, NodeFacts | None]:
        """Replace the table by a full listing: what changed (None: gone)."""
        fresh = {facts.name: facts for facts in listed}
        changed: dict[str, NodeFacts | None] = {
            name: None for name in self.facts if name not in fresh
        }
        changed.update(
            {name: facts for name, facts in fresh.items() if self.facts.get(name) != facts}
        )
        self.facts = fresh
        return changed

    def apply(self, event_type: str, facts: NodeFacts) -> bool:
        """One watch event (ADDED, MODIFIED, DELETED): whether it changed the table."""
        if event_type == "DELETED":
            return self.facts.pop(facts.name, None) is not None
        if self.facts.get(facts.name) == facts:
            return False
        self.facts[facts.name] = facts
        return True
