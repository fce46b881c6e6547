"""The negotiator writes many jobs at once (issue 16): with `write_concurrency` N, the
matches of one cycle and the follows of one pass go out N at a time, one write per job, and
the pass's figures and the jobs it hands on are those of the writes."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

import pytest

from kondor_operator.metrics import Metrics
from kondor_operator.negotiator import Negotiator

from .test_negotiator import NOW, FakeKube, World, job_body, point

pytestmark = pytest.mark.timeout(10)


class SlowKube(FakeKube):
    """Each write takes `delay` seconds; counts how many are under way at once."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay
        self.lock = threading.Lock()
        self.now = self.peak = 0

    def _slow(self) -> None:
        with self.lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
        time.sleep(self.delay)
        with self.lock:
            self.now -= 1

    def patch_execution_job_status(
        self, namespace: str, name: str, patch: Mapping[str, Any], resource_version: str | None
    ) -> dict[str, Any] | None:
        self._slow()
        with self.lock:
            return super().patch_execution_job_status(namespace, name, patch, resource_version)


def _world(concurrency: int, delay: float, jobs: int) -> tuple[World, SlowKube]:
    world = World()
    kube = SlowKube(delay)
    world.kube = kube
    world.negotiator = Negotiator(kube, Metrics(), clock=lambda: NOW, write_concurrency=concurrency)
    world.negotiator.attach(world.index, world.eps, world.pools)
    for node in ("node-a", "node-b", "node-c", "node-d"):
        world.eps[node] = point(node)  # 4 cores each
    for index in range(jobs):
        kube.add(job_body(f"j{index:02d}"))
    world.sync()
    return world, kube


def test_a_cycle_s_matches_are_written_at_once_one_write_per_job() -> None:
    world, kube = _world(concurrency=8, delay=0.05, jobs=16)
    started = time.monotonic()
    done = world.negotiator.run_once(set(), cycle=True)
    took = time.monotonic() - started
    assert done.matched == 16
    assert kube.peak > 1
    # Serially: 16 writes (each a ClusterId and its match) of 50 ms.
    assert took < 16 * 0.05 / 2
    for index in range(16):
        name = f"j{index:02d}"
        assert world.status(name)["claimId"]
        assert [what for what, job, _ in kube.calls if job == name] == ["status"]
    ids = sorted(world.status(f"j{i:02d}")["clusterId"] for i in range(16))
    assert ids == list(range(1, 17))  # one ClusterId each, none twice


def test_one_writer_writes_one_at_a_time() -> None:
    world, kube = _world(concurrency=1, delay=0.0, jobs=6)
    done = world.negotiator.run_once(set(), cycle=True)
    assert done.matched == 6 and kube.peak == 1


def test_a_failed_write_fails_the_pass_after_the_others() -> None:
    world, kube = _world(concurrency=4, delay=0.0, jobs=4)
    original = kube.patch_execution_job_status

    def failing(
        namespace: str, name: str, patch: Mapping[str, Any], version: str | None
    ) -> dict[str, Any] | None:
        if name == "j02":
            raise RuntimeError("the API server is gone")
        return original(namespace, name, patch, version)

    kube.patch_execution_job_status = failing  # type: ignore[method-assign,assignment]
    with pytest.raises(RuntimeError, match="gone"):
        world.negotiator.run_once(set(), cycle=True)
    assert world.status("j01").get("clusterId") == 2  # the others were written
