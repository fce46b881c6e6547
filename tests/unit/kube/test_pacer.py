"""The client-side pacing of requests (client-go's QPS and burst); moved here from
tests/unit/operator/test_nodewatch.py with the Pacer."""

from __future__ import annotations

from kondor_kube.pacer import Pacer


def test_the_pacer_lets_a_burst_through_then_spaces_requests() -> None:
    now = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    pacer = Pacer(qps=100, burst=2, clock=lambda: now[0], sleep=sleep)
    waits = [pacer.wait() for _ in range(4)]
    assert waits[:2] == [0.0, 0.0]
    assert [round(w, 3) for w in waits[2:]] == [0.01, 0.01]
    assert Pacer(qps=0, burst=1, clock=lambda: 0.0, sleep=sleep).wait() == 0.0
