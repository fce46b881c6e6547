"""The GPU monitor of `use feature : GPUs`: NVML read every polling interval, usage kept
per job and per slot.

HTCondor runs condor_gpu_utilization, which charges each device's whole utilisation to
the slot holding it (and so to its job). Kondor reads, per whole GPU, NVML's running
compute processes (`usedGpuMemory`) and the per-process samples newer than the last poll
(`smUtil`), and charges a job only its own processes; the slot keeps the device's own
utilisation and memory in use, as HTCondor's Device* attributes. Accounting mode is off by
default (nvmlDeviceGetAccountingStats answers NOT_FOUND on the real H100), so nothing here
needs it. The arithmetic is `kondor_core.jobs.gpus` (pure); this module only reads NVML.

NVML reports host process ids: the agent runs with the host's PID namespace (the chart's
`hostPID: true`), so a job cgroup's `cgroup.procs` names the same processes.
MIG devices are not read (NVML has no per-process samples for them); their parent GPU is.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kondor_core.jobs.gpus import (
    DeviceReading,
    GpuPoll,
    GpuProcess,
    GpuUsage,
    ProcessSample,
    add_job_poll,
    add_slot_poll,
    full_uuid,
    job_usage_attributes,
    slot_usage_attributes,
)

log = logging.getLogger("kondor_agent.detect.gpumonitor")


@dataclass
class _Device:
    handle: Any
    uuid: str
    last_sample: int = 0


@dataclass
class GpuMonitor:
    """Reads the node's whole GPUs through `nvml` (pynvml or FakeNvml) at each `poll`."""

    nvml: Any
    problems: list[str] = field(default_factory=list)
    _devices: list[_Device] | None = None
    _previous: float | None = None

    def _open(self) -> list[_Device]:
        if self._devices is None:
            n = self.nvml
            n.nvmlInit()
            self._devices = []
            for index in range(n.nvmlDeviceGetCount()):
                handle = n.nvmlDeviceGetHandleByIndex(index)
                self._devices.append(_Device(handle, full_uuid(str(n.nvmlDeviceGetUUID(handle)))))
        return self._devices

    def poll(self, now: float) -> GpuPoll:
        """What NVML says now, over the seconds since the previous poll (0 the first time:
        it sets the memory peaks only). A device call NVML refuses is left out and the
        refusal is in `problems`."""
        self.problems = []
        seconds = 0.0 if self._previous is None else max(0.0, now - self._previous)
        self._previous = now
        processes: list[GpuProcess] = []
        samples: list[ProcessSample] = []
        readings: list[DeviceReading] = []
        for device in self._open():
            found = self._processes(device)
            processes += found
            if found:
                samples += self._samples(device)
            reading = self._reading(device)
            if reading is not None:
                readings.append(reading)
        return GpuPoll(seconds, tuple(processes), tuple(samples), tuple(readings))

    def _call(self, device: _Device, what: str, call: Any) -> Any:
        try:
            return call()
        except self.nvml.NVMLError as err:
            self.problems.append(f"{device.uuid}: {what}: {err}")
            return None

    def _processes(self, device: _Device) -> list[GpuProcess]:
        n = self.nvml
        found = self._call(
            device, "running processes", lambda: n.nvmlDeviceGetComputeProcesses(device.handle)
        )
        return [
            GpuProcess(device.uuid, int(p.pid), _memory(getattr(p, "usedGpuMemory", None)))
            for p in found or ()
        ]

    def _samples(self, device: _Device) -> list[ProcessSample]:
        n = self.nvml
        try:
            found = n.nvmlDeviceGetProcessUtilization(device.handle, device.last_sample)
        except n.NVMLError as err:
            if "NOT_FOUND" not in str(err):  # NOT_FOUND: no sample since the last poll
                self.problems.append(f"{device.uuid}: process samples: {err}")
            return []
        newest: dict[int, Any] = {}
        for sample in found:
            device.last_sample = max(device.last_sample, int(sample.timeStamp))
            if sample.pid not in newest or sample.timeStamp > newest[sample.pid].timeStamp:
                newest[sample.pid] = sample
        return [ProcessSample(device.uuid, int(pid), int(s.smUtil)) for pid, s in newest.items()]

    def _reading(self, device: _Device) -> DeviceReading | None:
        n = self.nvml
        rates = self._call(
            device, "utilisation", lambda: n.nvmlDeviceGetUtilizationRates(device.handle)
        )
        memory = self._call(device, "memory", lambda: n.nvmlDeviceGetMemoryInfo(device.handle))
        if rates is None or memory is None:
            return None
        return DeviceReading(device.uuid, int(rates.gpu), int(memory.used))


def _memory(value: Any) -> int | None:
    """usedGpuMemory; None where NVML cannot tell (NVML_VALUE_NOT_AVAILABLE, all ones)."""
    if value is None or int(value) >= 2**64 - 1:
        return None
    return int(value)


@dataclass
class GpuUsageBook:
    """The running GPU usage of each job (by its key) and each slot (by its name)."""

    jobs: dict[str, GpuUsage] = field(default_factory=dict)
    slots: dict[str, GpuUsage] = field(default_factory=dict)

    def record(
        self,
        poll: GpuPoll,
        job_pids: Mapping[str, Iterable[int]],
        slot_devices: Mapping[str, Iterable[str]],
    ) -> None:
        """Add one poll: each running job's processes, each GPU slot's devices (UUIDs).
        Jobs no longer listed are forgotten (their last figures were published)."""
        self.jobs = {
            job: add_job_poll(self.jobs.get(job, GpuUsage()), poll, pids)
            for job, pids in job_pids.items()
        }
        for slot, devices in slot_devices.items():
            self.slots[slot] = add_slot_poll(self.slots.get(slot, GpuUsage()), poll, devices)

    def job_attributes(self, job: str) -> dict[str, float | int]:
        """GPUsUsage and GPUsMemoryUsage of the job, or nothing before its first interval."""
        usage = self.jobs.get(job)
        return job_usage_attributes(usage) if usage is not None else {}

    def slot_attributes(self, slot: str) -> dict[str, float | int]:
        """DeviceGPUsAverageUsage and DeviceGPUsMemoryPeakUsage of the slot."""
        usage = self.slots.get(slot)
        return slot_usage_attributes(usage) if usage is not None else {}
