"""When and what the agent writes to its ExecutionPoint's status: pure decisions.

The condor_startd sends its ads to the collector every UPDATE_INTERVAL and at once when a
slot changes state ("condor_startd Configuration File Macros", UPDATE_INTERVAL). The agent
does the same with the API server, so that an idle node costs it almost nothing:

- a *change* (slots, states, resources, the machine's facts, conditions, the policy) is
  written within `debounce` seconds of being seen, changes seen meanwhile going in the same
  write;
- otherwise one heartbeat write per update interval refreshes `lastHeartbeat` and the
  *volatile* attributes (live facts such as LoadAvg, which change on every tick and are
  not state changes).

Writes are JSON merge patches (RFC 7386) of the status subresource holding only what
differs from the last write; `status.operator` belongs to the operator and is never in them.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from kondor_core.api import apply_merge_patch, merge_patch

__all__ = ["AGENT_FIELDS", "Coalescer", "apply_merge_patch", "merge_patch", "significant"]

#: The status fields the agent writes; `operator` is the operator's subtree.
AGENT_FIELDS = ("summary", "slots", "conditions", "lastHeartbeat", "policy", "machine")
#: Status fields that are not part of a change: the heartbeat is its own reason to write.
_UNCHANGING = ("lastHeartbeat",)


def significant(document: Mapping[str, Any], volatile: Collection[str]) -> dict[str, Any]:
    """`document` without what changes all the time: the heartbeat and, in the machine ad and
    every slot ad, the `volatile` attributes (the live facts)."""
    out = {key: value for key, value in document.items() if key not in _UNCHANGING}
    if not volatile:
        return out
    if isinstance(out.get("machine"), Mapping):
        out["machine"] = {k: v for k, v in out["machine"].items() if k not in volatile}
    slots = out.get("slots")
    if isinstance(slots, list):
        out["slots"] = [
            {**slot, "ad": {k: v for k, v in slot.get("ad", {}).items() if k not in volatile}}
            if isinstance(slot, Mapping)
            else slot
            for slot in slots
        ]
    return out


@dataclass
class Coalescer:
    """Decides when to write the status. Feed it every computed status with `observe`, ask
    `due`, and tell it `written` or `failed`; it never reads a clock."""

    update_interval: float = 300.0
    debounce: float = 0.5
    #: After a failed write, wait this long before the next try.
    retry: float = 5.0
    volatile: frozenset[str] = frozenset()
    #: The status as last written (or as read from the API server at start).
    published: dict[str, Any] | None = None
    last_write: float | None = None
    #: When a not yet written change was first seen.
    changed_since: float | None = None
    _latest: dict[str, Any] = field(default_factory=dict)
    _retry_at: float | None = None

    def start_from(self, status: Mapping[str, Any] | None) -> None:
        """A restarted agent: what the API server holds is what was last written. The first
        write still comes at once (the heartbeat of a restart is news)."""
        if status is not None:
            self.published = {k: v for k, v in status.items() if k in AGENT_FIELDS}

    def observe(self, document: Mapping[str, Any], now: float) -> None:
        """The status the agent would publish at `now`."""
        self._latest = dict(document)
        if self.changed_since is None and self._differs():
            self.changed_since = now

    def _differs(self) -> bool:
        if self.published is None:
            return True
        volatile = self.volatile
        return significant(self._latest, volatile) != significant(self.published, volatile)

    def due(self, now: float) -> bool:
        """Whether to write now."""
        next_at = self.next_due()
        return next_at is not None and now >= next_at

    def next_due(self) -> float | None:
        """When the next write is due: the change's debounce deadline, the heartbeat, a retry."""
        if not self._latest:
            return None
        candidates: list[float] = []
        if self.last_write is None:
            candidates.append(self.changed_since if self.changed_since is not None else 0.0)
        else:
            candidates.append(self.last_write + self.update_interval)
        if self.changed_since is not None:
            candidates.append(self.changed_since + self.debounce)
        due = min(candidates)
        if self._retry_at is not None:
            due = max(due, self._retry_at)
        return due

    def patch(self, heartbeat: str) -> dict[str, Any]:
        """The merge patch of the status for this write, stamped with `heartbeat`."""
        document = {**self._latest, "lastHeartbeat": heartbeat}
        return {"status": merge_patch(self.published or {}, document)}

    def written(self, patch: Mapping[str, Any], now: float) -> None:
        """The write of `patch` (from `patch()`) succeeded at `now`."""
        self.published = apply_merge_patch(self.published or {}, patch.get("status", {}))
        self.last_write = now
        self.changed_since = None
        self._retry_at = None
        if self._differs():  # observed again between patch() and now
            self.changed_since = now

    def failed(self, now: float) -> None:
        """The write failed at `now`: try again after `retry`, the change still pending."""
        self._retry_at = now + self.retry
        if self.changed_since is None and self.last_write is None:
            self.changed_since = now
