"""The defrag controller: condor_defrag in the operator.

Every DEFRAG_INTERVAL (the Pool's `spec.defrag.interval`, or DEFRAG_INTERVAL in its
condorConfig) it reads the ExecutionPoints (the operator's watch, `kondor_operator.epwatch`)
and the Pool (kopf's index) through the negotiator, asks
`kondor_core.negotiation.defrag.plan_defrag` what to do, and writes it:

- a drain is written to the node's `spec.drain` (as `kubectl kondor drain` does), by
  `condor_defrag` with reason `Defrag`, the DEFRAG_DRAINING_SCHEDULE and
  -resume-on-completion; the node's agent carries it out;
- a defrag drain for which DEFRAG_CANCEL_REQUIREMENTS holds is cancelled (its request
  removed), and one that ran to the end (Resumed) is cleared;
- each is told in an Event on the ExecutionPoint (DefragDrain, DefragCancel).

It writes nothing while this replica does not lead. The time of the last poll is kept in
memory: a restarted operator spends the hourly and daily remainders of the rate again
(HTCondor keeps it in DEFRAG_STATE_FILE).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

import kopf

from kondor_core.api import ExecutionPoint, PoolSpec, format_time
from kondor_core.api.defrag import DefragSpec
from kondor_core.fleet import Event
from kondor_core.negotiation.defrag import (
    DefragConfigError,
    DefragPlan,
    defrag_settings,
    drain_request,
    plan_defrag,
)
from kondor_operator.kube import ObjectRef, execution_point_ref

logger = logging.getLogger(__name__)

#: Seconds between looks at the Pool's settings while waiting for the next poll.
RECHECK = 5.0


class PoolView(Protocol):
    """What the controller reads (the negotiator: the Pool's settings, the ExecutionPoints)."""

    def settings(self) -> PoolSpec: ...
    def execution_points(self) -> list[ExecutionPoint]: ...


class DrainWriter(Protocol):
    """The writes it makes (kondor_operator.kube.Kube, or a fake in tests)."""

    def patch_execution_point(self, name: str, patch: Mapping[str, Any]) -> bool: ...
    def post_event(self, ref: ObjectRef, event: Event) -> None: ...


class Defrag:
    """condor_defrag: `poll()` once per DEFRAG_INTERVAL; `run()` loops until cancelled."""

    def __init__(
        self,
        pool: PoolView,
        writer: DrainWriter,
        *,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.pool = pool
        self.writer = writer
        self.clock = clock
        self.sleep = sleep
        self.leading = True
        self.last_poll: float | None = None
        #: node -> when this controller last drained it (least recently drained go first).
        self.drained_at: dict[str, float] = {}
        self._last_why = ""

    def set_leading(self, leading: bool) -> None:
        self.leading = leading

    def settings(self) -> DefragSpec:
        pool = self.pool.settings()
        try:
            return defrag_settings(pool)
        except DefragConfigError as error:
            logger.warning("Pool condorConfig: DEFRAG_* knobs ignored: %s", error)
            return pool.defrag

    def poll(self) -> DefragPlan | None:
        """One evaluation of the defragmentation policy; None when not leading."""
        if not self.leading:
            return None
        now = self.clock()
        previous, self.last_poll = self.last_poll, now
        settings = self.settings()
        points = self.pool.execution_points()
        plan = plan_defrag(settings, points, previous, now, self.drained_at)
        for problem in plan.problems:
            logger.warning("defrag: %s", problem)
        uids = {ep.metadata.name: ep.metadata.uid for ep in points}
        for name in plan.finished:
            self.writer.patch_execution_point(name, {"spec": {"drain": None}})
        for name in plan.cancel:
            if self.writer.patch_execution_point(name, {"spec": {"drain": None}}):
                logger.info("defrag: cancelled draining of %s (DEFRAG_CANCEL_REQUIREMENTS)", name)
                self._event(name, uids, "DefragCancel", "DEFRAG_CANCEL_REQUIREMENTS is true")
        request = drain_request(settings, format_time(now))
        for name in plan.drain:
            if self.writer.patch_execution_point(name, {"spec": {"drain": request}}):
                self.drained_at[name] = now
                logger.info(
                    "defrag: initiating %s draining of %s", settings.draining_schedule, name
                )
                self._event(
                    name,
                    uids,
                    "DefragDrain",
                    f"condor_defrag: {settings.draining_schedule} drain, resume on completion",
                )
        if plan.why != self._last_why or plan.drain:
            logger.info("defrag: %d draining, %d whole; %s", plan.draining, plan.whole, plan.why)
            self._last_why = plan.why
        return plan

    def _event(self, name: str, uids: Mapping[str, str | None], reason: str, message: str) -> None:
        self.writer.post_event(
            execution_point_ref(name, uids.get(name)), Event("Normal", reason, message)
        )

    async def run(self) -> None:
        """Poll once DEFRAG_INTERVAL has passed since the last poll, looking at the Pool every
        few seconds so that a new interval (or defragmentation turned on) applies soon."""
        while True:
            interval = self.settings().interval
            due = self.last_poll is None or self.clock() - self.last_poll >= interval
            if interval > 0 and due:
                try:
                    await asyncio.to_thread(self.poll)
                except Exception:
                    logger.exception("defrag poll failed")
            await self.sleep(min(interval, RECHECK) if interval > 0 else RECHECK)


def register(registry: kopf.OperatorRegistry, defrag: Defrag) -> None:
    """Start the controller with the operator, stop it at cleanup."""
    tasks: list[asyncio.Task[None]] = []

    @kopf.on.startup(id="start-defrag", registry=registry)
    async def start_defrag(**_: Any) -> None:
        tasks.append(asyncio.create_task(defrag.run(), name="kondor defrag"))

    @kopf.on.cleanup(id="stop-defrag", registry=registry)
    async def stop_defrag(**_: Any) -> None:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
