"""How fast the operator may write: a token bucket for API requests and a ration for Events.

Both are pure: the state is a value, time is an argument, and the edge (the operator's
`Kube` and reconciler) holds the lock, reads the clock and sleeps.

* `TokenBucket` is client-go's client-side rate limiter (`QPS` and `Burst` of a rest
  config): `burst` requests at once, then `rate` a second.
* `ration_events` keeps a bulk change from doubling its writes: Events are posted one
  per change while the Event bucket has tokens (a node relabelled, a policy fixed), and
  past that the rest of a pass is summarised, one Event per (type, reason, SlotPolicy),
  posted on the SlotPolicy the changes follow (client-go's EventCorrelator aggregates
  similar Events for the same reason).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kondor_core.fleet.plan import Event

#: Events a pass may post one by one when none were posted for a while, and how fast that
#: allowance comes back (a second each): a re-carve of 1,000 nodes posts 25 and a summary.
EVENT_BURST = 25
EVENT_RATE = 1.0
#: Names a summary lists before "and N more".
SUMMARY_NAMES = 5


@dataclass(frozen=True)
class TokenBucket:
    """`tokens` available at time `at` (seconds on any monotonic clock)."""

    tokens: float
    at: float

    @classmethod
    def full(cls, burst: float, now: float) -> TokenBucket:
        return cls(float(burst), now)

    def refill(self, now: float, rate: float, burst: float) -> TokenBucket:
        """The bucket at `now`: refilled at `rate` a second, never above `burst`."""
        if now <= self.at:
            return self
        return TokenBucket(min(float(burst), self.tokens + (now - self.at) * rate), now)

    def take(self, now: float, rate: float, burst: float) -> tuple[TokenBucket, float]:
        """Take one token: (the bucket after, seconds to wait before acting).

        A caller that must wait has its token reserved (the bucket goes negative), so
        concurrent callers queue in order instead of all waking together. `rate` <= 0
        means no limit.
        """
        if rate <= 0:
            return self, 0.0
        bucket = self.refill(now, rate, burst)
        tokens = bucket.tokens - 1.0
        wait = 0.0 if tokens >= 0 else -tokens / rate
        return TokenBucket(tokens, bucket.at), wait


@dataclass(frozen=True)
class Announcement:
    """An Event about the ExecutionPoint `subject`, after its change was written."""

    subject: str
    event: Event


@dataclass(frozen=True)
class EventSummary:
    """One Event standing for `count` similar ones: posted on the SlotPolicy `policy`
    when the changes follow one, else on the ExecutionPoint `subjects[0]`."""

    policy: str | None
    subjects: tuple[str, ...]
    event: Event

    @property
    def count(self) -> int:
        return len(self.subjects)


def _summary(policy: str | None, group: Sequence[Announcement]) -> EventSummary:
    first = group[0].event
    names = [a.subject for a in group]
    shown = ", ".join(names[:SUMMARY_NAMES])
    if len(names) > SUMMARY_NAMES:
        shown += f" and {len(names) - SUMMARY_NAMES} more"
    message = f"{len(names)} ExecutionPoints ({shown}): {first.message}"
    return EventSummary(
        policy, tuple(names), Event(first.type, first.reason, message, policy=policy)
    )


def ration_events(
    announcements: Sequence[Announcement],
    bucket: TokenBucket,
    now: float,
    *,
    burst: float = EVENT_BURST,
    rate: float = EVENT_RATE,
) -> tuple[list[Announcement], list[EventSummary], TokenBucket]:
    """(Events to post one by one, summaries of the rest, the bucket after).

    One by one while the bucket has whole tokens, in the order given; the rest grouped by
    (type, reason, policy), a summary each, in the order their first member came. A pass
    with a single left-over Event posts it as it is: a summary of one says less.
    """
    bucket = bucket.refill(now, rate, burst)
    allowed = max(0, min(len(announcements), int(bucket.tokens)))
    posted = list(announcements[:allowed])
    bucket = TokenBucket(bucket.tokens - allowed, bucket.at)
    rest = announcements[allowed:]
    if len(rest) == 1:
        return [*posted, rest[0]], [], TokenBucket(bucket.tokens - 1, bucket.at)
    groups: dict[tuple[str, str, str | None], list[Announcement]] = {}
    for announcement in rest:
        event = announcement.event
        groups.setdefault((event.type, event.reason, event.policy), []).append(announcement)
    summaries = [_summary(key[2], group) for key, group in groups.items()]
    return posted, summaries, bucket
