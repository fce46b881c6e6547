"""Client-side pacing of requests, as client-go's QPS and burst."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from kondor_core.fleet import TokenBucket


class Pacer:
    """Client-side rate limit of a process's requests: `burst` at once, then `qps` a
    second (client-go's rest config QPS and Burst); `qps` <= 0 means none. Thread-safe:
    the operator's writer threads and its negotiator share one."""

    def __init__(
        self,
        qps: float,
        burst: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.qps = qps
        self.burst = max(1, burst)
        self.clock = clock
        self.sleep = sleep
        self._lock = threading.Lock()
        self._bucket = TokenBucket.full(self.burst, clock())

    def wait(self) -> float:
        """Block until the next request may go; the seconds waited."""
        with self._lock:
            self._bucket, delay = self._bucket.take(self.clock(), self.qps, self.burst)
        if delay > 0:
            self.sleep(delay)
        return delay
