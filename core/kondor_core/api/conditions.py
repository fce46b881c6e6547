"""Kubernetes status conditions (metav1.Condition): built from a tri-state, updated by type.

`lastTransitionTime` moves only when a condition's status changes, so writing the same
facts twice writes the same object (and a reconcile that changes nothing writes nothing).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from kondor_core.api.base import Condition
from kondor_core.api.meta import format_time

TRUE, FALSE, UNKNOWN = "True", "False", "Unknown"


def condition(
    type_: str,
    status: bool | None,
    reason: str,
    message: str,
    generation: int | None = None,
) -> Condition:
    """A condition without its transition time (`set_condition` / `merge_conditions` set it):
    True, False, or Unknown for None."""
    value = UNKNOWN if status is None else (TRUE if status else FALSE)
    return Condition(
        type=type_, status=value, reason=reason, message=message, observed_generation=generation
    )


def _stamped(previous: Condition | None, new: Condition, now: datetime | float) -> Condition:
    kept = previous.last_transition_time if previous is not None else None
    unchanged = previous is not None and previous.status == new.status
    stamp = kept if unchanged and kept else format_time(now)
    return new.model_copy(update={"last_transition_time": stamp})


def set_condition(
    previous: Sequence[Condition], new: Condition, now: datetime | float
) -> list[Condition]:
    """`previous` with `new` in place of the condition of its type (appended when there was
    none), its lastTransitionTime kept unless the status changed."""
    old = next((c for c in previous if c.type == new.type), None)
    return [*(c for c in previous if c.type != new.type), _stamped(old, new, now)]


def merge_conditions(
    old: Iterable[Condition], new: Iterable[Condition], now: datetime | float
) -> list[Condition]:
    """`new`, in its order, each with its lastTransitionTime kept from `old` where its
    status held; conditions of `old` that `new` lacks are dropped."""
    before = {c.type: c for c in old}
    return [_stamped(before.get(c.type), c, now) for c in new]


def condition_status(conditions: Iterable[Condition], type_: str) -> str | None:
    """The status ("True", "False", "Unknown") of condition `type_`, None if absent."""
    return next((c.status for c in conditions if c.type == type_), None)
