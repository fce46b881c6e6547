"""Waiting for the cluster to reach a state, for every integration test."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def eventually(
    check: Callable[[], Any], timeout: float = 30.0, what: str = "condition", interval: float = 0.2
) -> Any:
    """Call `check` until it returns something truthy (returned), or fail after `timeout` s."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"{what} not reached within {timeout:g}s (last: {last!r})")
