"""The token bucket (client-go's QPS and burst) and the Event ration of a bulk change."""

from __future__ import annotations

import pytest

from kondor_core.fleet import Announcement, Event, TokenBucket, ration_events


def test_a_full_bucket_lets_the_burst_through_then_paces_at_the_rate() -> None:
    bucket = TokenBucket.full(3, now=0.0)
    waits = []
    for _ in range(5):
        bucket, wait = bucket.take(0.0, rate=10.0, burst=3)
        waits.append(wait)
    # Three at once; the fourth and fifth reserve their tokens and wait in turn.
    assert waits == pytest.approx([0.0, 0.0, 0.0, 0.1, 0.2])


def test_the_bucket_refills_with_time_but_never_above_the_burst() -> None:
    bucket = TokenBucket(0.0, at=0.0).refill(100.0, rate=10.0, burst=5)
    assert bucket.tokens == 5.0
    bucket, wait = TokenBucket(0.0, at=0.0).take(0.05, rate=10.0, burst=5)
    assert wait == pytest.approx(0.05)


def test_no_rate_means_no_limit() -> None:
    bucket = TokenBucket(0.0, at=0.0)
    assert bucket.take(0.0, rate=0.0, burst=1) == (bucket, 0.0)


def changed(
    count: int, reason: str = "PolicyChanged", policy: str | None = "p"
) -> list[Announcement]:
    return [
        Announcement(f"n{i:04d}", Event("Normal", reason, f"change {i}", policy=policy))
        for i in range(count)
    ]


def test_a_bulk_change_posts_the_allowance_and_one_summary_per_reason_and_policy() -> None:
    announcements = changed(1000) + changed(3, reason="Created", policy="q")
    posted, summaries, bucket = ration_events(
        announcements, TokenBucket.full(25, 0.0), 0.0, burst=25, rate=1.0
    )
    assert [a.subject for a in posted] == [f"n{i:04d}" for i in range(25)]
    assert [(s.policy, s.event.reason, s.count) for s in summaries] == [
        ("p", "PolicyChanged", 975),
        ("q", "Created", 3),
    ]
    first = summaries[0].event
    assert first.message.startswith("975 ExecutionPoints (n0025, n0026, n0027, n0028, n0029 and")
    assert first.message.endswith("970 more): change 25")
    assert bucket.tokens == 0.0
    # Ten seconds later ten Events go one by one again.
    posted, summaries, _ = ration_events(changed(12), bucket, 10.0, burst=25, rate=1.0)
    assert (len(posted), [s.count for s in summaries]) == (10, [2])


def test_one_event_over_the_allowance_is_posted_as_it_is() -> None:
    posted, summaries, _ = ration_events(changed(1), TokenBucket(0.0, 0.0), 0.0)
    assert (len(posted), summaries) == (1, [])


def test_a_node_at_a_time_is_always_announced_one_by_one() -> None:
    bucket = TokenBucket.full(25, 0.0)
    for second in range(100):
        posted, summaries, bucket = ration_events(changed(1), bucket, float(second))
        assert (len(posted), summaries) == (1, [])
