"""The ExecutionPoint's status as the agent publishes it: its Ready condition, the coalesced
writes (`kondor_agent.report.Coalescer`) through the API, and `status.power`.

The agent's loop decides what the status is each tick; this is where it is kept between
ticks, said in Ready, and written when the coalescer says a write is due.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Mapping
from enum import Enum
from typing import Any

from pydantic import ValidationError

from kondor_agent.kube import ExecutionPointAPI, NotFoundError, WriteError
from kondor_agent.metrics import AgentMetrics
from kondor_agent.report import Coalescer
from kondor_core.api import describe_errors
from kondor_core.api.base import Condition
from kondor_core.api.conditions import set_condition
from kondor_core.api.executionpoint import ExecutionPointStatus, PowerStatus
from kondor_core.api.meta import format_time
from kondor_core.startd import Startd
from kondor_core.startd.power import PowerConfigError, check_interval, power_status
from kondor_core.startd.power import evaluate as evaluate_hibernate

log = logging.getLogger("kondor_agent")

READY = "Ready"


class Written(Enum):
    """How a write went."""

    OK = "ok"
    FAILED = "error"
    GONE = "not-found"


class StatusReport:
    """The status this agent last observed and wrote, and the Ready condition it carries."""

    def __init__(self, *, debounce: float, volatile: frozenset[str]) -> None:
        self.coalescer = Coalescer(debounce=debounce, volatile=volatile)
        self.conditions: list[Condition] = []
        #: Whether Ready was set to anything but True since `begin_tick`.
        self.degraded = False
        #: Called with the whole status after each successful write.
        self.on_written: Callable[[Mapping[str, Any]], None] | None = None

    def begin_tick(self) -> None:
        self.degraded = False

    def condition(self, now: float, status: str, reason: str, message: str) -> None:
        """Set the Ready condition; log it when it changes (not on every tick): a wait for
        the operator's check is news, anything else not Ready an error."""
        self.degraded = self.degraded or status != "True"
        old = next((c for c in self.conditions if c.type == READY), None)
        if old is None or (old.status, old.reason, old.message) != (status, reason, message):
            news = status == "True" or reason == "PolicyPending"
            log.log(logging.INFO if news else logging.ERROR, "%s: %s", reason, message)
        self.conditions = set_condition(
            self.conditions,
            Condition(type=READY, status=status, reason=reason, message=message),
            now,
        )

    def restart_from(self, raw: Any) -> ExecutionPointStatus | None:
        """Take back what a previous agent published (`raw`, the ExecutionPoint's status):
        the coalescer starts from it, Ready from its conditions; the status, None if there
        is none that parses."""
        if not isinstance(raw, Mapping):
            return None
        raw = copy.deepcopy(raw)  # kept: not the watch's own object
        self.coalescer.start_from(raw)
        try:
            published = ExecutionPointStatus.model_validate(dict(raw))
        except ValidationError as err:
            log.warning("ignoring the published status: %s", "; ".join(describe_errors(err)))
            return None
        self.conditions = list(published.conditions)
        if published.slots:
            log.info("restarting from %d published slots", len(published.slots))
        return published

    def observe(self, now: float, status: ExecutionPointStatus, update_interval: float) -> None:
        """The status as it is now, written when the coalescer says (the operator's subtree
        is never written here)."""
        document = status.dump()
        document.pop("operator", None)
        self.coalescer.update_interval = update_interval
        self.coalescer.observe(document, now)

    def write(
        self, api: ExecutionPointAPI, name: str, metrics: AgentMetrics, now: float
    ) -> Written:
        """Write what changed (or the heartbeat) to the ExecutionPoint `name`."""
        patch = self.coalescer.patch(format_time(now))
        try:
            api.patch_status(name, patch)
        except NotFoundError:
            metrics.api_writes.labels(Written.GONE.value).inc()
            log.warning("executionpoint %s is gone; waiting for it again", name)
            self.coalescer.failed(now)
            self.coalescer.published = None
            return Written.GONE
        except (WriteError, OSError, Exception) as err:
            metrics.api_writes.labels(Written.FAILED.value).inc()
            log.warning("writing the status of executionpoint %s failed: %s", name, err)
            self.coalescer.failed(now)
            return Written.FAILED
        metrics.api_writes.labels(Written.OK.value).inc()
        self.coalescer.written(patch, now)
        if self.on_written is not None and self.coalescer.published is not None:
            self.on_written(self.coalescer.published)
        return Written.OK


class PowerWatch:
    """Power management (`status.power`): the slots' last HIBERNATE agreement and when it
    was checked."""

    def __init__(self) -> None:
        self.status: PowerStatus | None = None
        self._checked: float | None = None

    def check(self, node: Startd, live: Mapping[str, Any], now: float) -> str | None:
        """HIBERNATE in every slot, each HIBERNATE_CHECK_INTERVAL seconds (power management
        is off, and `status.power` absent, when the policy does not set it); what is wrong
        with the policy's power knobs, if anything."""
        trouble: str | None = None
        try:
            interval = check_interval(node.policy.macros)
        except PowerConfigError as err:
            trouble = str(err)
            interval = 0.0
        if interval <= 0:
            self.status = self._checked = None
            return trouble
        if self._checked is not None and now - self._checked < interval:
            return trouble
        self._checked = now
        agreement = evaluate_hibernate(node, live, now)
        if self.status is None or agreement.state != self.status.sleep_state:
            log.info("power: sleep state %s (%s)", agreement.state, agreement.why or "all agree")
        self.status = power_status(agreement, self.status, now)
        return trouble
