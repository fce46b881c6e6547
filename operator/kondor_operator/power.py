"""Power management on Kubernetes: the Node of an ExecutionPoint whose slots all agree on a
low power state (`status.power.sleepState`, HIBERNATE as the agent evaluates it) is marked
for the cluster autoscaler's scale-down, and unmarked when they stop agreeing
(`kondor_core.startd.power.node_annotations`).

The autoscaler has no annotation that asks for a node's removal: it removes nodes it finds
unneeded unless `cluster-autoscaler.kubernetes.io/scale-down-disabled` is "true". Kondor's
process jobs are no pods the autoscaler can see, so with power management on (the policy
sets HIBERNATE_CHECK_INTERVAL) Kondor keeps that annotation "true" on the node, and sets it
"false" (with `kondor.io/sleep-state` naming the state) only while every slot agrees to sleep.
Turned off (the interval back to 0, or the ExecutionPoint deleted because no SlotPolicy
selects the node), Kondor's annotations go and scale-down-disabled is put back as it was
before Kondor first took it (recorded on the node, `kondor.io/scale-down-disabled-original`).

ExecutionPoints reach it from the operator's ExecutionPoint watch (`kondor_operator.epwatch`),
already parsed, through a `PowerFollower`: a thread of its own, so that a node's read or write
never holds up the watch, which hands it only the changes that may need one (a new power
state, a node not known here). Each Node is read once (again after a failed write or a change
of leadership), then only written when what it should carry changes. It needs nodes
get/patch, and writes nothing unless this replica leads.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import ValidationError

from kondor_core.api.executionpoint import PowerStatus
from kondor_core.startd.power import ORIGINAL_ANNOTATION, node_annotations

logger = logging.getLogger(__name__)


class NodeApi(Protocol):
    """Node metadata reads and writes (kondor_operator.kube.Kube: metadata only, or a fake)."""

    def read_node_annotations(self, name: str) -> dict[str, str] | None: ...
    def patch_node_annotations(self, name: str, patch: Mapping[str, str | None]) -> None: ...


def power_of(body: Mapping[str, Any]) -> PowerStatus | None:
    raw = (body.get("status") or {}).get("power")
    if not raw:
        return None
    try:
        return PowerStatus.model_validate(dict(raw))
    except ValidationError as error:
        logger.warning("ExecutionPoint status.power ignored: %s", error)
        return None


class NodeMarker:
    """Keeps each node's scale-down annotations in line with its ExecutionPoint's power."""

    def __init__(self, nodes: NodeApi) -> None:
        self.nodes = nodes
        self.leading = True
        #: node -> its annotations as last read or written here.
        self._known: dict[str, dict[str, str]] = {}

    def set_leading(self, leading: bool) -> None:
        if leading != self.leading:
            self._known.clear()  # another replica may have written nodes meanwhile
        self.leading = leading

    def forget(self, node: str) -> None:
        self._known.pop(node, None)

    def _read(self, node: str) -> dict[str, str] | None:
        read = self.nodes.read_node_annotations(node)
        if read is None:
            self._known.pop(node, None)
            return None
        self._known[node] = read
        return read

    def follow(self, node: str, power: PowerStatus | None) -> dict[str, str | None] | None:
        """Write what the node should carry for `power`; the patch written, if any."""
        if not self.leading:
            return None
        known = self._known.get(node)
        fresh = known is None
        if known is None:
            # Read once even without power management: a node marked before this operator
            # started (or before the policy turned it off) gets its annotations back.
            known = self._read(node)
            if known is None:
                return None
        patch = node_annotations(power, known)
        if patch is not None and patch.get(ORIGINAL_ANNOTATION) and not fresh:
            # Taking scale-down-disabled over records the node's own value: read it as it is
            # now (an admin may have set it since the node was read), not as remembered.
            known = self._read(node)
            if known is None:
                return None
            patch = node_annotations(power, known)
        if patch is None:
            return None
        self.nodes.patch_node_annotations(node, patch)
        for key, value in patch.items():
            if value is None:
                known.pop(key, None)
            else:
                known[key] = value
        logger.info("node %s: scale-down annotations %s", node, patch)
        return patch

    def knows(self, node: str) -> bool:
        """Whether the node's annotations are known here (read, and not forgotten since)."""
        return node in self._known


def follow_power(marker: NodeMarker, node: str, power: PowerStatus | None, gone: bool) -> None:
    """One ExecutionPoint's power, now: its node follows it. A deleted one (`gone`: no
    SlotPolicy selects its node any more) has no power management: the node gets back what
    it carried before Kondor marked it, and is forgotten."""
    if not node:
        return
    try:
        marker.follow(node, None if gone else power)
    except Exception as error:  # the next event (the agent's heartbeat) tries again
        marker.forget(node)
        logger.warning("node %s: scale-down annotations not written: %s", node, error)
    if gone:
        marker.forget(node)


@dataclass(frozen=True)
class PowerChange:
    """An ExecutionPoint's node and power as a watch event left them."""

    node: str
    power: PowerStatus | None
    #: The ExecutionPoint is gone (deleted).
    gone: bool = False
    #: The power is the one this node had before the event: nothing to do unless the marker
    #: does not know the node (never read, forgotten after a failure or a new leadership).
    unchanged: bool = False


class PowerFollower:
    """Hands ExecutionPoint power changes to a `NodeMarker` on a thread of its own.

    `offer` (from the watch's thread) keeps the latest change per node and wakes the thread,
    which follows them in turn: a burst of events for one node is one look, and the node
    reads and writes never hold up the watch."""

    def __init__(self, marker: NodeMarker) -> None:
        self.marker = marker
        self._pending: dict[str, PowerChange] = {}
        self._wake = threading.Condition()
        self._closed = False

    def offer(self, changes: list[PowerChange]) -> None:
        wanted = [c for c in changes if c.node and not (c.unchanged and self.marker.knows(c.node))]
        if not wanted:
            return
        with self._wake:
            for change in wanted:
                self._pending[change.node] = change
            self._wake.notify()

    def drain(self) -> int:
        """Follow every pending change (from the follower's thread, or a test); how many."""
        with self._wake:
            pending, self._pending = self._pending, {}
        for change in pending.values():
            follow_power(self.marker, change.node, change.power, change.gone)
        return len(pending)

    def run(self) -> None:
        while True:
            with self._wake:
                while not self._pending and not self._closed:
                    self._wake.wait()
                if self._closed:
                    return
            self.drain()

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.run, name="power-follower", daemon=True)
        thread.start()
        return thread

    def close(self) -> None:
        with self._wake:
            self._closed = True
            self._wake.notify()
