"""GPUs through NVML, answered by recordings of real cards, in condor_gpu_discovery's form."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kondor_agent.detect import DetectionError, FakeNvml, discover_gpus, gpu_id


def test_two_h100s(nvml: Callable[[str], FakeNvml]) -> None:
    gpus = discover_gpus(nvml("h100x2"))
    assert [gpu.id for gpu in gpus] == ["GPU-3f1a6c2e", "GPU-b82d0c47"]
    assert gpus[0].properties == {
        "DeviceUuid": "GPU-3f1a6c2e-7b94-d0e5-18a2-5c9e4f7b2d61",
        "DeviceName": "NVIDIA H100 80GB HBM3",
        "DevicePciBusId": "0000:18:00.0",
        "Capability": 9.0,
        "ECCEnabled": True,
        "GlobalMemoryMb": 81559,
        "NvidiaDriver": "550.54.15",
        "DriverVersion": 12.4,
        "MaxSupportedVersion": 12040,
        "ClockMhz": 1980.0,
        "ComputeUnits": 132,
        "CoresPerCU": 128,
    }


def test_four_a100s(nvml: Callable[[str], FakeNvml]) -> None:
    gpus = discover_gpus(nvml("a100x4"))
    assert [gpu.id for gpu in gpus] == [
        "GPU-6a96bd13",
        "GPU-c4a646d7",
        "GPU-e5f6a7b8",
        "GPU-a1b2c3d4",
    ]
    for gpu in gpus:
        assert gpu.properties["DeviceName"] == "NVIDIA A100-SXM4-40GB"
        assert gpu.properties["Capability"] == 8.0
        assert gpu.properties["GlobalMemoryMb"] == 40960
        assert gpu.properties["DriverVersion"] == 12.2
        assert gpu.properties["ComputeUnits"] == 108
        assert gpu.properties["CoresPerCU"] == 64


def test_an_a100_in_mig_mode_is_replaced_by_its_mig_devices(
    nvml: Callable[[str], FakeNvml],
) -> None:
    gpus = discover_gpus(nvml("a100x4-one-mig"))
    ids = [gpu.id for gpu in gpus]
    # MIG devices first, by UUID, with their full ids; the parent GPU-c4a646d7 is not listed;
    # MIG slots 4-6 have no compute instance and are not devices.
    assert ids == [
        "MIG-1d4b8e60-2a7c-5f19-b3e8-7c0a5d9f1e24",
        "MIG-4a6f1c83-0e5b-5d92-a7c3-9b2e6f1d8c40",
        "MIG-7c0e5a12-9f3b-5d8e-a1c4-2b6f9e0d3a75",
        "MIG-e93a2f05-6b1d-5c47-8e2a-4f7d0c9b3a16",
        "GPU-6a96bd13",
        "GPU-e5f6a7b8",
        "GPU-a1b2c3d4",
    ]
    big = next(gpu for gpu in gpus if gpu.id.startswith("MIG-7c0e5a12"))
    assert big.properties == {
        "DeviceUuid": "MIG-7c0e5a12-9f3b-5d8e-a1c4-2b6f9e0d3a75",
        "DeviceName": "NVIDIA A100-SXM4-40GB MIG 3g.20gb",
        "GlobalMemoryMb": 19968,
        "ComputeUnits": 42,
        # The instance refuses these; like condor_gpu_discovery, it inherits its parent's.
        "Capability": 8.0,
        "ClockMhz": 1410.0,
        "ECCEnabled": True,
        "DevicePciBusId": "0000:0F:00.0",
        "NvidiaDriver": "535.161.08",
        "DriverVersion": 12.2,
        "MaxSupportedVersion": 12020,
        "CoresPerCU": 64,
    }


def test_mig_devices_match_slot_constraints_like_gpus(nvml: Callable[[str], FakeNvml]) -> None:
    # The ids are valid machine GPU ids (the core's pattern) and distinct.
    from kondor_core.api import Machine

    gpus = discover_gpus(nvml("a100x4-one-mig"))
    machine = Machine(name="n", cpus=8, memory="64Gi", gpus=gpus)
    assert len(machine.gpus) == 7


def test_no_nvml_library_means_no_gpus_and_no_error(nvml: Callable[[str], FakeNvml]) -> None:
    assert discover_gpus(nvml("no-nvml")) == []
    assert discover_gpus(None) == []


def test_the_real_pynvml_without_a_driver_means_no_gpus() -> None:
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        assert discover_gpus(pynvml) == []
    else:  # pragma: no cover - only on a machine with an NVIDIA driver
        pynvml.nvmlShutdown()
        assert all(gpu.id.startswith(("GPU-", "MIG-")) for gpu in discover_gpus(pynvml))


def test_nvml_is_shut_down_after_discovery(nvml: Callable[[str], FakeNvml]) -> None:
    fake = nvml("h100x2")
    discover_gpus(fake)
    assert fake.initialised == 0


def _edited(fixtures: Path, name: str, edit: Callable[[dict[str, Any]], None]) -> FakeNvml:
    recording = json.loads((fixtures / "nvml" / f"{name}.json").read_text())
    edit(recording)
    return FakeNvml(copy.deepcopy(recording))


def test_refused_properties_are_left_out(fixtures: Path) -> None:
    def refuse(recording: dict[str, Any]) -> None:
        device = recording["devices"][0]
        for call in (
            "nvmlDeviceGetEccMode",
            "nvmlDeviceGetMaxClockInfo",
            "nvmlDeviceGetNumGpuCores",
        ):
            device[call] = {"error": "NVML_ERROR_NOT_SUPPORTED"}
        recording["nvmlSystemGetCudaDriverVersion"] = {"error": "NVML_ERROR_NOT_SUPPORTED"}

    (gpu, _) = discover_gpus(_edited(fixtures, "h100x2", refuse))
    for missing in ("ECCEnabled", "ClockMhz", "ComputeUnits", "DriverVersion"):
        assert missing not in gpu.properties
    assert gpu.properties["CoresPerCU"] == 128
    assert gpu.properties["NvidiaDriver"] == "550.54.15"


def test_a_gpu_that_refuses_its_uuid_is_an_error(fixtures: Path) -> None:
    def lost(recording: dict[str, Any]) -> None:
        recording["devices"][1]["nvmlDeviceGetUUID"] = {"error": "NVML_ERROR_GPU_IS_LOST"}

    with pytest.raises(
        DetectionError, match="NVML: nvmlDeviceGetUUID failed: NVML_ERROR_GPU_IS_LOST"
    ):
        discover_gpus(_edited(fixtures, "h100x2", lost))


def test_the_fake_refuses_calls_nobody_recorded(fixtures: Path) -> None:
    def forget(recording: dict[str, Any]) -> None:
        del recording["devices"][0]["nvmlDeviceGetName"]

    with pytest.raises(LookupError, match="no answer for nvmlDeviceGetName on device 0"):
        discover_gpus(_edited(fixtures, "h100x2", forget))


@pytest.mark.parametrize(
    ("uuid", "ident"),
    [
        ("GPU-6a96bd13-91f4-3b0c-e2a7-0d5c8f4e1b92", "GPU-6a96bd13"),
        ("6a96bd13-91f4-3b0c-e2a7-0d5c8f4e1b92", "GPU-6a96bd13"),
        ("MIG-7c0e5a12-9f3b-5d8e-a1c4-2b6f9e0d3a75", "MIG-7c0e5a12-9f3b-5d8e-a1c4-2b6f9e0d3a75"),
    ],
)
def test_gpu_ids(uuid: str, ident: str) -> None:
    assert gpu_id(uuid) == ident
