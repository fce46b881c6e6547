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

ExecutionPoints reach it through watch events (`@kopf.on.event`, no annotation written on
them); each Node is read once (again after a failed write or a change of leadership), then only
written when what it should carry changes. It needs
nodes get/patch, and writes nothing unless this replica leads.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any, Protocol

import kopf
from pydantic import ValidationError

from kondor_core.api import EXECUTION_POINTS, GROUP, VERSION
from kondor_core.api.executionpoint import PowerStatus
from kondor_core.startd.power import ORIGINAL_ANNOTATION, node_annotations

logger = logging.getLogger(__name__)


class NodeApi(Protocol):
    """Node metadata reads and writes (kubernetes.client.CoreV1Api, or a fake)."""

    def read_node_annotations(self, name: str) -> dict[str, str] | None: ...
    def patch_node_annotations(self, name: str, patch: Mapping[str, str | None]) -> None: ...


class KubeNodes:
    """NodeApi through the kubernetes client."""

    def __init__(self, api_client: Any) -> None:
        from kubernetes import client  # noqa: PLC0415

        self.core = client.CoreV1Api(api_client)

    def read_node_annotations(self, name: str) -> dict[str, str] | None:
        from kubernetes.client.exceptions import ApiException  # noqa: PLC0415

        try:
            node = self.core.read_node(name)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        metadata = node.metadata
        return dict((metadata.annotations if metadata is not None else None) or {})

    def patch_node_annotations(self, name: str, patch: Mapping[str, str | None]) -> None:
        from kubernetes.client.exceptions import ApiException  # noqa: PLC0415

        try:
            self.core.patch_node(name, {"metadata": {"annotations": dict(patch)}})
        except ApiException as error:
            if error.status != 404:  # a node gone (its ExecutionPoint goes with it): nothing
                raise


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


def follow_event(marker: NodeMarker, body: Mapping[str, Any], type: str | None) -> None:
    """One watch event of an ExecutionPoint: its node follows its power. A deleted one (no
    SlotPolicy selects its node any more) has no power management: the node gets back what
    it carried before Kondor marked it, and is forgotten."""
    node = (body.get("spec") or {}).get("nodeName")
    if not node:
        return
    power = None if type == "DELETED" else power_of(body)
    try:
        marker.follow(str(node), power)
    except Exception as error:  # the next event (the agent's heartbeat) tries again
        marker.forget(str(node))
        logger.warning("node %s: scale-down annotations not written: %s", node, error)
    if type == "DELETED":
        marker.forget(str(node))


def register(registry: kopf.OperatorRegistry, marker: NodeMarker) -> None:
    @kopf.on.event(GROUP, VERSION, EXECUTION_POINTS, id="power-mark", registry=registry)
    async def execution_point_power(body: kopf.Body, type: str | None, **_: Any) -> None:
        await asyncio.to_thread(follow_event, marker, body, type)
