"""condor_defrag's policy as a pure function of (settings, the pool's ExecutionPoints, the
last poll, now): which nodes to drain, which defrag drains to cancel, which finished ones to
clear ("Defragmenting Dynamic Slots" and "Defrag Daemon Configuration Options").

The rate follows condor_defrag's arithmetic: DEFRAG_DRAINING_MACHINES_PER_HOUR x
DEFRAG_INTERVAL / 3600 gives the whole machines drained per poll; the fraction left over is
spent once an hour (the whole part of it per hour) and once a day (the rest, rounded),
prorated when the poll falls partway into that hour or day. A poll drains nothing when
DEFRAG_MAX_CONCURRENT_DRAINING nodes already drain or DEFRAG_MAX_WHOLE_MACHINES nodes are
whole, and never more than the concurrency limit leaves room for.

Kondor's differences, said in docs: the expressions are evaluated in the partitionable slots'
ads (a node counts when one of them makes the expression true; a node without a partitionable
slot is never drained), the candidates are ordered by DEFRAG_RANK, then least recently
drained first and by name, rather than shuffled, and a drain is a request in the node's
ExecutionPoint (`spec.drain`, requestedBy `condor_defrag`, reason `Defrag`) with
-resume-on-completion, as condor_defrag sends it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from kondor_core.api import ExecutionPoint, PoolSpec, describe_errors
from kondor_core.api.defrag import DefragSpec
from kondor_core.classads import ExpressionError, is_undefined, parse_expr
from kondor_core.config import parse_snippet
from kondor_core.errors import KondorError
from kondor_core.negotiation.negotiator import slot_offer

#: Who a defrag drain is requested by (spec.drain.requestedBy), and its reason (DrainReason).
DEFRAG_REQUESTER = "condor_defrag"
DEFRAG_REASON = "Defrag"
HOUR = 3600
DAY = 24 * HOUR

#: HTCondor knob -> DefragSpec field, for the Pool's condorConfig.
KNOBS = {
    "DEFRAG_INTERVAL": "interval",
    "DEFRAG_DRAINING_MACHINES_PER_HOUR": "draining_machines_per_hour",
    "DEFRAG_MAX_CONCURRENT_DRAINING": "max_concurrent_draining",
    "DEFRAG_MAX_WHOLE_MACHINES": "max_whole_machines",
    "DEFRAG_REQUIREMENTS": "requirements",
    "DEFRAG_WHOLE_MACHINE_EXPR": "whole_machine_expr",
    "DEFRAG_RANK": "rank",
    "DEFRAG_DRAINING_SCHEDULE": "draining_schedule",
    "DEFRAG_CANCEL_REQUIREMENTS": "cancel_requirements",
    "DEFRAG_DRAINING_START_EXPR": "draining_start_expr",
}
_EXPRESSIONS = (
    "requirements",
    "whole_machine_expr",
    "rank",
    "cancel_requirements",
    "draining_start_expr",
)


class DefragConfigError(KondorError):
    """A DEFRAG_* knob of the Pool's condorConfig has a value that is not allowed."""


def defrag_settings(spec: PoolSpec) -> DefragSpec:
    """The Pool's defrag settings: `spec.defrag`, with the DEFRAG_* knobs of its condorConfig
    for the fields `spec.defrag` does not set. Raises DefragConfigError naming the knob."""
    base = spec.defrag
    if not spec.condor_config:
        return base
    snippet = parse_snippet(spec.condor_config)
    if snippet.errors:
        raise DefragConfigError("; ".join(str(error) for error in snippet.errors))
    values: dict[str, Any] = {}
    for knob, name in KNOBS.items():
        definition = snippet.table.get(knob)
        if name in base.model_fields_set or definition is None or definition.is_builtin:
            continue
        try:
            expansion = snippet.table.value(knob)
        except KondorError as error:
            raise DefragConfigError(f"condorConfig {knob}: {error}") from error
        if expansion is not None and expansion.value.strip():
            text = expansion.value.strip()
            values[name] = text if name in _EXPRESSIONS else text.lower()
    if not values:
        return base
    try:
        return DefragSpec.model_validate({**base.model_dump(), **values})
    except ValidationError as error:
        names = {name: knob for knob, name in KNOBS.items()}
        problems = [
            f"condorConfig {names.get(str(e['loc'][0]), e['loc'][0])} = "
            f"{values.get(str(e['loc'][0]))!r}: {e['msg']}"
            for e in error.errors()
        ] or describe_errors(error)
        raise DefragConfigError("; ".join(problems)) from error


# ---- the rate --------------------------------------------------------------------------------


@dataclass(frozen=True)
class DrainRate:
    """DEFRAG_DRAINING_MACHINES_PER_HOUR split as condor_defrag splits it: whole machines per
    poll, and the remainder's whole machines once an hour and once a day."""

    per_poll: int
    per_hour: int
    per_day: int


def drain_rate(machines_per_hour: float, interval: int) -> DrainRate:
    """condor_defrag's split of the rate for polls every `interval` seconds."""
    if interval <= 0 or machines_per_hour <= 0:
        return DrainRate(0, 0, 0)
    rate = machines_per_hour / HOUR * interval
    per_poll = max(0, math.floor(rate + 0.00001))
    error_per_hour = (rate - per_poll) / interval * HOUR
    per_hour = math.floor(error_per_hour + 0.00001)
    if interval > HOUR:
        per_hour = 0
    error_per_day = (error_per_hour - per_hour) * 24.0
    per_day = math.floor(error_per_day + 0.5)
    if per_day < 0 or interval > DAY:
        per_day = 0
    return DrainRate(per_poll, per_hour, per_day)


def prorate(n: int, time_remaining: float, period: int, granularity: int) -> int:
    """condor_defrag's prorate: `n` per `period`, reduced to the part of the period left
    (plus one polling interval that may have been missed), never beyond `n`."""
    fraction = time_remaining / period + granularity / period
    answer = math.floor(n * fraction + 0.5)
    if (n > 0 and answer > n) or (n < 0 and answer < n):
        return n
    if answer * n < 0:
        return 0
    return answer


def machines_to_drain(rate: DrainRate, previous: float | None, now: float, interval: int) -> int:
    """How many nodes this poll may start draining: the per-poll share, plus the hourly and
    daily remainders when this poll is the first of its hour or day (prorated)."""
    count = rate.per_poll
    before = math.floor(previous if previous is not None else 0.0)
    at = math.floor(now)
    current_hour, current_day = at // HOUR * HOUR, at // DAY * DAY
    if before // HOUR * HOUR != current_hour:
        count += prorate(rate.per_hour, at - current_hour, HOUR, interval)
    if before // DAY * DAY != current_day:
        count += prorate(rate.per_day, at - current_day, DAY, interval)
    return count


# ---- one poll --------------------------------------------------------------------------------


@dataclass(frozen=True)
class DefragPlan:
    """What one poll decided, and why (condor_defrag's log line)."""

    drain: tuple[str, ...] = ()
    cancel: tuple[str, ...] = ()
    #: Defrag drains that ran to the end (Resumed): their request is cleared.
    finished: tuple[str, ...] = ()
    draining: int = 0
    whole: int = 0
    wanted: int = 0
    why: str = ""
    problems: tuple[str, ...] = field(default_factory=tuple)


def is_draining(ep: ExecutionPoint) -> bool:
    """The node drains (HTCondor's Draining): a request in its spec that its agent has not
    carried out to the end (Resumed)."""
    request = ep.spec.drain
    if request is None:
        return False
    done = ep.status.drain if ep.status is not None else None
    return not (
        done is not None and done.requested_at == request.requested_at and done.state == "Resumed"
    )


def by_defrag(ep: ExecutionPoint) -> bool:
    request = ep.spec.drain
    return request is not None and request.requested_by == DEFRAG_REQUESTER


def plan_defrag(
    settings: DefragSpec,
    execution_points: Sequence[ExecutionPoint],
    previous: float | None,
    now: float,
    drained_before: Mapping[str, float] | None = None,
) -> DefragPlan:
    """One condor_defrag poll over the nodes whose agent reports (heartbeat Fresh).

    Candidates of equal DEFRAG_RANK are taken least recently drained first (`drained_before`:
    node -> when this controller last drained it), then by name, where condor_defrag
    shuffles them: the same spread over the pool, and the same answer every time."""
    poll = _Poll.of(settings, execution_points, now)
    rate = drain_rate(settings.draining_machines_per_hour, settings.interval)
    why = _switched_off(settings)
    if why is not None:
        return poll.plan(why)
    wanted = machines_to_drain(rate, previous, now, settings.interval)
    if wanted <= 0:
        return poll.plan("Doing nothing, because draining rate has already been achieved.")
    # A drain cancelled or cleared in this poll no longer counts as draining.
    draining = sum(
        1 for ep in poll.nodes if is_draining(ep) and ep.metadata.name not in poll.cancel
    )
    whole = poll.whole()
    why = _at_a_limit(settings, draining, len(whole))
    if why is not None:
        return poll.plan(why, draining, len(whole), wanted)
    limit = settings.max_concurrent_draining
    if limit >= 0:
        wanted = min(wanted, limit - draining)
    chosen = poll.choose(whole, wanted, drained_before or {})
    why = f"Drained {len(chosen)} machines (wanted to drain {wanted} machines)."
    return poll.plan(why, draining, len(whole), wanted, drain=chosen)


def _switched_off(settings: DefragSpec) -> str | None:
    """Why condor_defrag drains nothing whatever the pool is (a rate or a limit of 0)."""
    if settings.interval <= 0 or math.ceil(settings.draining_machines_per_hour) <= 0:
        return (
            f"Doing nothing, because DEFRAG_DRAINING_MACHINES_PER_HOUR="
            f"{settings.draining_machines_per_hour:g}"
        )
    if settings.max_concurrent_draining == 0:
        return "Doing nothing, because DEFRAG_MAX_CONCURRENT_DRAINING=0"
    if settings.max_whole_machines == 0:
        return "Doing nothing, because DEFRAG_MAX_WHOLE_MACHINES=0"
    return None


def _at_a_limit(settings: DefragSpec, draining: int, whole: int) -> str | None:
    """Why this poll drains nothing: enough machines draining, or enough whole ones."""
    limit = settings.max_concurrent_draining
    if limit >= 0 and draining >= limit:
        return (
            f"Doing nothing, because DEFRAG_MAX_CONCURRENT_DRAINING={limit} and there are "
            f"{draining} draining machines."
        )
    if settings.max_whole_machines >= 0 and whole >= settings.max_whole_machines:
        return (
            f"Doing nothing, because DEFRAG_MAX_WHOLE_MACHINES={settings.max_whole_machines} "
            f"and there are {whole} whole machines."
        )
    return None


@dataclass
class _Poll:
    """One poll's nodes (those reporting), their partitionable slot ads, the drains it
    cancels or clears, and the problems met evaluating the DEFRAG_* expressions."""

    settings: DefragSpec
    nodes: list[ExecutionPoint]
    pslots: dict[str, list[Any]]
    problems: list[str] = field(default_factory=list)
    cancel: tuple[str, ...] = ()
    finished: tuple[str, ...] = ()

    @classmethod
    def of(
        cls, settings: DefragSpec, execution_points: Sequence[ExecutionPoint], now: float
    ) -> _Poll:
        nodes = [
            ep
            for ep in sorted(execution_points, key=lambda ep: ep.metadata.name)
            if ep.status is not None
            and ep.status.operator.heartbeat == "Fresh"
            and not ep.metadata.deletion_timestamp
        ]
        poll = cls(settings, nodes, {ep.metadata.name: _partitionable_ads(ep, now) for ep in nodes})
        cancel_expr = settings.cancel_requirements or settings.whole_machine_expr
        poll.finished = tuple(
            ep.metadata.name for ep in nodes if by_defrag(ep) and not is_draining(ep)
        )
        poll.cancel = tuple(
            ep.metadata.name
            for ep in nodes
            if by_defrag(ep)
            and is_draining(ep)
            and poll.holds(cancel_expr, ep.metadata.name, "DEFRAG_CANCEL_REQUIREMENTS")
        )
        return poll

    def holds(self, expression: str, name: str, field: str) -> bool:
        """Whether the expression is TRUE for one of the node's partitionable slots."""
        return any(_is_true(expression, ad, field, self.problems) for ad in self.pslots[name])

    def whole(self) -> set[str]:
        """The nodes DEFRAG_WHOLE_MACHINE_EXPR counts as whole."""
        expression = self.settings.whole_machine_expr
        return {
            ep.metadata.name
            for ep in self.nodes
            if self.holds(expression, ep.metadata.name, "DEFRAG_WHOLE_MACHINE_EXPR")
        }

    def choose(self, whole: set[str], wanted: int, last: Mapping[str, float]) -> tuple[str, ...]:
        """The `wanted` best candidates: not draining, not whole, meeting DEFRAG_REQUIREMENTS;
        by DEFRAG_RANK, then least recently drained, then by name."""
        requirements = self.settings.requirements
        candidates = [
            ep
            for ep in self.nodes
            if self.pslots[ep.metadata.name]
            and not is_draining(ep)
            and ep.metadata.name not in whole
            and (
                requirements is None
                or self.holds(requirements, ep.metadata.name, "DEFRAG_REQUIREMENTS")
            )
        ]
        ranked = sorted(
            candidates,
            key=lambda ep: (
                -_rank(self.settings.rank, self.pslots[ep.metadata.name], self.problems),
                last.get(ep.metadata.name, -math.inf),
            ),
        )
        return tuple(ep.metadata.name for ep in ranked[:wanted])

    def plan(
        self,
        why: str,
        draining: int = 0,
        whole: int = 0,
        wanted: int = 0,
        drain: tuple[str, ...] = (),
    ) -> DefragPlan:
        """The poll's plan: its drains, cancels and cleared drains, and why."""
        return DefragPlan(
            drain=drain,
            cancel=self.cancel,
            finished=self.finished,
            draining=draining,
            whole=whole,
            wanted=wanted,
            why=why,
            problems=tuple(self.problems),
        )


def drain_request(settings: DefragSpec, now_text: str) -> dict[str, Any]:
    """spec.drain as condor_defrag asks it (kondor_core.api.DrainRequest's form), with
    DEFRAG_DRAINING_START_EXPR as -start for a graceful drain."""
    request: dict[str, Any] = {
        "mode": settings.draining_schedule,
        "reason": DEFRAG_REASON,
        "resumeOnCompletion": True,
        "requestedAt": now_text,
        "requestedBy": DEFRAG_REQUESTER,
    }
    if settings.draining_start_expr is not None and settings.draining_schedule == "graceful":
        request["start"] = settings.draining_start_expr
    return request


def _partitionable_ads(ep: ExecutionPoint, now: float) -> list[Any]:
    assert ep.status is not None
    return [
        slot_offer(slot.ad, frozenset(slot.expressions) & set(slot.ad), now)
        for slot in ep.status.slots
        if slot.type == "Partitionable" and slot.ad
    ]


def _is_true(expression: str, ad: Any, field: str, problems: list[str]) -> bool:
    try:
        return parse_expr(expression, field=field).eval(ad) is True
    except ExpressionError as error:
        problems.append(str(error))
        return False


def _rank(expression: str | None, ads: Sequence[Any], problems: list[str]) -> float:
    """A node's DEFRAG_RANK: its best partitionable slot's; undefined or not a number is 0."""
    if not expression:
        return 0.0
    best = None
    for ad in ads:
        try:
            value = parse_expr(expression, field="DEFRAG_RANK").eval(ad)
        except ExpressionError as error:
            problems.append(str(error))
            return 0.0
        number = (
            float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0
        )
        if is_undefined(value):
            number = 0.0
        best = number if best is None else max(best, number)
    return best or 0.0
