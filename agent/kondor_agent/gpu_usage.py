"""GPU usage of running jobs, for their status and their slots' ads.

One `GpuWatch` per agent reads NVML through `kondor_agent.detect.GpuMonitor` at most once
per `interval` seconds, however many jobs ask, and folds each poll once into each running
job's totals (`kondor_core.jobs.gpus`): the job's own processes (its cgroup's pids) for
GPUsUsage and GPUsMemoryUsage, the slot's GPUs (their UUIDs) for DeviceGPUsAverageUsage and
DeviceGPUsMemoryPeakUsage. Without NVML (no libnvidia-ml, no driver) it measures nothing.
"""

from __future__ import annotations

import importlib
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from kondor_agent.detect import GpuMonitor
from kondor_core.jobs.gpus import (
    GpuPoll,
    GpuUsage,
    add_job_poll,
    add_slot_poll,
    job_usage_attributes,
    slot_usage_attributes,
)

log = logging.getLogger("kondor_agent.gpu_usage")


@dataclass
class _Job:
    job: GpuUsage = field(default_factory=GpuUsage)
    slot: GpuUsage = field(default_factory=GpuUsage)
    polls_seen: int = 0


class GpuWatch:
    """Each running job's GPU usage since it started."""

    def __init__(
        self,
        monitor: GpuMonitor | None,
        *,
        interval: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.monitor = monitor
        self.interval = interval
        self._clock = clock
        self._poll: GpuPoll | None = None
        self._polled_at: float | None = None
        self._polls = 0
        self._jobs: dict[str, _Job] = {}

    @classmethod
    def open(cls, nvml: Any = None, **options: Any) -> GpuWatch:
        """A watch through `nvml` (default: pynvml); one measuring nothing where NVML
        cannot be initialised."""
        try:
            library = nvml if nvml is not None else importlib.import_module("pynvml")
            library.nvmlInit()
        except Exception as err:  # no module, no libnvidia-ml, no driver: no GPUs to watch
            log.info("GPU usage is not measured: %s", err)
            return cls(None, **options)
        return cls(GpuMonitor(library), **options)

    def _latest(self) -> GpuPoll | None:
        assert self.monitor is not None
        now = self._clock()
        if self._polled_at is None or now - self._polled_at >= self.interval:
            self._poll = self.monitor.poll(now)
            self._polled_at = now
            self._polls += 1
            for problem in self.monitor.problems:
                log.warning("GPU monitor: %s", problem)
        return self._poll

    def measure(
        self, key: str, pids: Iterable[int], devices: Iterable[str]
    ) -> dict[str, float | int]:
        """The job's GPUsUsage and GPUsMemoryUsage and its slot's DeviceGPUsAverageUsage and
        DeviceGPUsMemoryPeakUsage so far (nothing before a first interval has passed)."""
        if self.monitor is None:
            return {}
        poll = self._latest()
        entry = self._jobs.get(key)
        if poll is not None and (entry is None or entry.polls_seen != self._polls):
            if entry is None:  # the job's first poll: its peaks count, the time before not
                entry = self._jobs[key] = _Job()
                poll = replace(poll, seconds=0.0)
            entry.polls_seen = self._polls
            entry.job = add_job_poll(entry.job, poll, pids)
            entry.slot = add_slot_poll(entry.slot, poll, devices)
        if entry is None:
            return {}
        return {**job_usage_attributes(entry.job), **slot_usage_attributes(entry.slot)}

    def forget(self, key: str) -> None:
        """The job has ended (its last figures were reported)."""
        self._jobs.pop(key, None)
