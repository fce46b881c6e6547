"""A running job's GPU usage from the real H100's recorded answers under load: measured once
per interval however often it is asked, in the job's status fields and its slot's ad."""

from __future__ import annotations

from pathlib import Path

from kondor_agent.detect import FakeNvml
from kondor_agent.gpu_usage import GpuWatch
from kondor_agent.jobs import SLOT_USAGE_ATTRIBUTES, Usage, slot_usage_attributes

NVML = Path(__file__).parent / "detect" / "fixtures" / "nvml"
H100 = "GPU-f2bd270c-c66e-0c7c-504e-e9af63626b3c"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def later(nvml: FakeNvml, clock: Clock, seconds: float) -> None:
    """Time passes: the recorded process sample comes again, `seconds` newer (NVML keeps
    sampling a running process; the monitor asks only for samples newer than its last)."""
    clock.now += seconds
    device = nvml.recording["devices"][0]
    device["nvmlDeviceGetProcessUtilization"] = [
        {**sample, "timeStamp": sample["timeStamp"] + int(seconds * 1_000_000)}
        for sample in device["nvmlDeviceGetProcessUtilization"]
    ]


def watch(clock: Clock) -> tuple[GpuWatch, FakeNvml]:
    nvml = FakeNvml.under_load(
        NVML / "h100-80gb-hbm3-driver580.json", NVML / "h100-usage-under-load.json", "busy"
    )
    return GpuWatch.open(nvml, interval=5.0, clock=clock), nvml


def test_a_jobs_gpu_usage_from_the_recorded_h100() -> None:
    clock = Clock()
    gpus, nvml = watch(clock)
    # the first look sets the peaks only: no time has been watched yet
    assert gpus.measure("ml.train.1", [438], [H100]) == {}
    later(nvml, clock, 10)
    expected = {
        "GPUsUsage": 0.42,  # pid 438's smUtil 42
        "GPUsMemoryUsage": 7108,  # its usedGpuMemory 7453278208 B, in MiB rounded up
        "DeviceGPUsAverageUsage": 1.0,  # the device: 100 % busy
        "DeviceGPUsMemoryPeakUsage": 7597,  # 7965835264 B used on the device
    }
    assert gpus.measure("ml.train.1", [438], [H100]) == expected
    # asked again within the interval: NVML is not read again, nothing is added
    calls = len(nvml.calls)
    clock.now += 1
    assert gpus.measure("ml.train.1", [438], [H100]) == expected
    assert len(nvml.calls) == calls
    # another job on another slot with no process on the GPU uses none of it
    assert gpus.measure("ml.other.1", [999], []) == {}
    later(nvml, clock, 5)
    assert gpus.measure("ml.other.1", [999], []) == {
        "GPUsUsage": 0.0,
        "GPUsMemoryUsage": 0,
        "DeviceGPUsAverageUsage": 0.0,
        "DeviceGPUsMemoryPeakUsage": 0,
    }
    gpus.forget("ml.train.1")
    assert gpus.measure("ml.train.1", [438], [H100]) == {}  # a new run starts afresh


def test_without_nvml_nothing_is_measured() -> None:
    nvml = FakeNvml.load(NVML / "no-nvml.json")
    assert GpuWatch.open(nvml).measure("ml.train.1", [1], [H100]) == {}


def test_the_slot_ad_carries_the_gpu_usage() -> None:
    figures = {"GPUsUsage": 0.42, "GPUsMemoryUsage": 7108, "DeviceGPUsAverageUsage": 1.0}
    attributes = slot_usage_attributes(Usage(num_pids=1, gpus=figures), load=1.0)
    assert {k: attributes[k] for k in figures} == figures
    assert set(figures) <= SLOT_USAGE_ATTRIBUTES  # coalesced with the other usage figures
