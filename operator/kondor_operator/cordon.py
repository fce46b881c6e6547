"""Cordoned Nodes drain (a SlotPolicy's `drainOnCordon`): `kubectl cordon` (or `kubectl drain`)
of a node governed by such a policy writes a graceful drain to its ExecutionPoint's
`spec.drain` (requestedBy `kondor-cordon`), which the node's agent carries out as
condor_drain -graceful; uncordoning the node cancels it. An admin's own drain is left alone
(`kondor_core.startd.drain.cordon_drains` decides).

Every few seconds it lists the cordoned Nodes only (field selector spec.unschedulable=true:
usually none, so it costs the API server next to nothing) and reads the ExecutionPoints
through the negotiator (the operator's ExecutionPoint watch, `kondor_operator.epwatch`); a
SlotPolicy is read only for a cordoned node not yet drained. It writes nothing unless this
replica leads.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import kopf

from kondor_core.api import SLOT_POLICIES, ExecutionPoint, format_time
from kondor_core.fleet import Event
from kondor_core.startd.drain import cordon_drains
from kondor_kube import managers, paths
from kondor_kube.client import PARTIAL_OBJECT_METADATA_LIST, Client
from kondor_kube.config import ApiClient
from kondor_operator.defrag import DrainWriter
from kondor_operator.kube import execution_point_ref

logger = logging.getLogger(__name__)

#: Seconds between looks at the cordoned Nodes.
INTERVAL = 5.0


class CordonApi(Protocol):
    def cordoned_nodes(self) -> set[str]: ...
    def drains_on_cordon(self, policy: str) -> bool: ...


class Points(Protocol):
    def execution_points(self) -> list[ExecutionPoint]: ...


class KubeCordon:
    """CordonApi through the kubernetes client."""

    def __init__(self, api_client: ApiClient) -> None:
        self.client = Client(api_client, field_manager=managers.RECONCILER)

    def cordoned_nodes(self) -> set[str]:
        """The cordoned Nodes' names (read as metadata only: nothing else is needed)."""
        items, _ = self.client.list(
            paths.core("nodes"),
            accept=PARTIAL_OBJECT_METADATA_LIST,
            query=[("fieldSelector", "spec.unschedulable=true")],
        )
        return {str((item.get("metadata") or {}).get("name")) for item in items}

    def drains_on_cordon(self, policy: str) -> bool:
        found = self.client.read(paths.kondor(SLOT_POLICIES, policy))
        spec = found.get("spec") if found is not None else None
        return bool((spec or {}).get("drainOnCordon"))


class CordonDrains:
    """`poll()` applies `cordon_drains` once; `run()` polls every INTERVAL until cancelled."""

    def __init__(
        self,
        points: Points,
        api: CordonApi,
        writer: DrainWriter,
        *,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.points = points
        self.api = api
        self.writer = writer
        self.clock = clock
        self.sleep = sleep
        self.leading = True

    def set_leading(self, leading: bool) -> None:
        self.leading = leading

    def poll(self) -> None:
        if not self.leading:
            return
        points = self.points.execution_points()
        if not points:
            return
        cordoned = self.api.cordoned_nodes()
        asked: dict[str, bool] = {}

        def drains(policy: str) -> bool:
            if policy not in asked:
                asked[policy] = self.api.drains_on_cordon(policy)
            return asked[policy]

        plan = cordon_drains(cordoned, points, drains, format_time(self.clock()))
        uids = {ep.metadata.name: ep.metadata.uid for ep in points}
        for name, request in plan.drain.items():
            if self.writer.patch_execution_point(name, {"spec": {"drain": request}}):
                logger.info("node %s is cordoned: draining it gracefully", name)
                self.writer.post_event(
                    execution_point_ref(name, uids.get(name)),
                    Event("Normal", "CordonDrain", "the Node is cordoned: draining gracefully"),
                )
        for name in plan.cancel:
            if self.writer.patch_execution_point(name, {"spec": {"drain": None}}):
                logger.info("node %s is uncordoned: its drain is cancelled", name)
                self.writer.post_event(
                    execution_point_ref(name, uids.get(name)),
                    Event("Normal", "CordonDrainCancelled", "the Node is uncordoned"),
                )

    async def run(self) -> None:
        while True:
            try:
                await asyncio.to_thread(self.poll)
            except Exception:
                logger.exception("cordon drains: poll failed")
            await self.sleep(INTERVAL)


def register(registry: kopf.OperatorRegistry, cordon: CordonDrains) -> None:
    tasks: list[asyncio.Task[None]] = []

    @kopf.on.startup(id="start-cordon-drains", registry=registry)
    async def start(**_: Any) -> None:
        tasks.append(asyncio.create_task(cordon.run(), name="kondor cordon drains"))

    @kopf.on.cleanup(id="stop-cordon-drains", registry=registry)
    async def stop(**_: Any) -> None:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
