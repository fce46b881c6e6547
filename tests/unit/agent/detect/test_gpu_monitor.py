"""The GPU monitor against the real H100's recorded answers (driver 580, one CUDA process
running a bf16 matrix loop: `h100-usage-under-load.json`), and the node's GPU device nodes.

Accounting mode was off on the card, and nvmlDeviceGetAccountingStats answered NOT_FOUND
for the running process: the monitor reads the running-process list and the per-process
samples instead, and never asks for accounting.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kondor_agent.detect import FakeNvml, GpuMonitor, GpuUsageBook, HostFS, gpu_device_nodes
from kondor_agent.detect.nvml_fake import FakeNvmlError, usage_answers
from kondor_core.jobs.gpus import GpuDeviceNode

NVML = Path(__file__).parent / "fixtures" / "nvml"
DEVICE = NVML / "h100-80gb-hbm3-driver580.json"
USAGE = NVML / "h100-usage-under-load.json"
H100 = "GPU-f2bd270c-c66e-0c7c-504e-e9af63626b3c"


def test_the_fake_answers_as_the_card_did_under_load() -> None:
    nvml = FakeNvml.under_load(DEVICE, USAGE, "busy")
    nvml.nvmlInit()
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    assert nvml.nvmlDeviceGetUtilizationRates(handle).gpu == 100
    assert nvml.nvmlDeviceGetMemoryInfo(handle).used == 7965835264
    (process,) = nvml.nvmlDeviceGetComputeProcesses(handle)
    assert (process.pid, process.usedGpuMemory) == (438, 7453278208)
    (sample,) = nvml.nvmlDeviceGetProcessUtilization(handle, 0)
    assert (sample.pid, sample.smUtil, sample.memUtil) == (438, 42, 17)
    # NVML answers NOT_FOUND when there is no sample newer than the timestamp given
    with pytest.raises(FakeNvmlError, match="NOT_FOUND"):
        nvml.nvmlDeviceGetProcessUtilization(handle, sample.timeStamp)
    assert nvml.nvmlDeviceGetAccountingMode(handle) == 0
    with pytest.raises(FakeNvmlError, match="NOT_FOUND"):
        nvml.nvmlDeviceGetAccountingStats(handle, 438)


def test_usage_of_a_job_and_its_slot_from_the_recorded_h100() -> None:
    """Idle, then 60 s with the job's process running, then 60 s after it exited."""
    recording = json.loads(USAGE.read_text())
    nvml = FakeNvml.under_load(DEVICE, USAGE, "idle")
    nvml.set_usage(0, {"nvmlDeviceGetComputeProcesses": []})  # idle: nothing running
    monitor = GpuMonitor(nvml)
    book = GpuUsageBook()
    slots = {"slot1_1": [H100]}

    book.record(monitor.poll(0.0), {"default/train": [438]}, slots)
    assert book.job_attributes("default/train") == {}  # no time has passed yet

    nvml.set_usage(0, usage_answers(recording, "busy"))
    book.record(monitor.poll(60.0), {"default/train": [438, 439]}, slots)
    assert book.job_attributes("default/train") == {"GPUsUsage": 0.42, "GPUsMemoryUsage": 7108}
    assert book.slot_attributes("slot1_1") == {
        "DeviceGPUsAverageUsage": 1.0,
        "DeviceGPUsMemoryPeakUsage": 7597,
    }
    assert monitor.problems == []

    # after the exit the device is idle again: its utilisation is the idle one's; the
    # process list is empty, so no per-process sample is asked for
    nvml.set_usage(0, usage_answers(recording, "idle", "after_exit"))
    calls = len(nvml.calls)
    book.record(monitor.poll(120.0), {"default/train": [438]}, slots)
    assert "nvmlDeviceGetProcessUtilization" not in nvml.calls[calls:]
    assert "nvmlDeviceGetAccountingStats" not in nvml.calls
    assert book.job_attributes("default/train") == {"GPUsUsage": 0.21, "GPUsMemoryUsage": 7108}
    assert book.slot_attributes("slot1_1") == {
        "DeviceGPUsAverageUsage": 0.5,
        "DeviceGPUsMemoryPeakUsage": 7597,
    }
    # a job no longer running is forgotten
    book.record(monitor.poll(180.0), {}, slots)
    assert book.job_attributes("default/train") == {}


def test_a_refused_call_is_a_problem_not_a_crash() -> None:
    nvml = FakeNvml.under_load(DEVICE, USAGE, "busy")
    nvml.set_usage(0, {"nvmlDeviceGetUtilizationRates": {"error": "NVML_ERROR_NOT_SUPPORTED"}})
    monitor = GpuMonitor(nvml)
    poll = monitor.poll(0.0)
    assert poll.devices == ()
    assert len(poll.processes) == 1
    assert monitor.problems == [f"{H100}: utilisation: NVML_ERROR_NOT_SUPPORTED"]


def _information(uuid: str, minor: int) -> str:
    return (
        "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 42\n"
        f"GPU UUID: \t {uuid}\nVideo BIOS: \t 96.00.99.00.01\nBus Type: \t PCIe\n"
        f"DMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\nDevice Minor: \t {minor}\n"
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
def test_device_nodes_from_the_driver_files(tmp_path: Path) -> None:
    (tmp_path / "dev").mkdir()
    os.mknod(tmp_path / "dev" / "nvidiactl", 0o600 | 0o020000, os.makedev(195, 255))
    for minor, (bus, uuid) in enumerate([("0000:00:06.0", H100), ("0000:00:07.0", "GPU-x")]):
        where = tmp_path / "proc" / "driver" / "nvidia" / "gpus" / bus
        where.mkdir(parents=True)
        (where / "information").write_text(_information(uuid, minor))
    assert gpu_device_nodes(HostFS(tmp_path)) == [
        GpuDeviceNode(H100, 195, 0),
        GpuDeviceNode("GPU-x", 195, 1),
    ]


def test_no_driver_no_device_nodes(tmp_path: Path) -> None:
    assert gpu_device_nodes(HostFS(tmp_path)) == []
