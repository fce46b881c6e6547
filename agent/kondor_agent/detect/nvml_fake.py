# ruff: noqa: N802 - the fake mirrors NVML's own function names
"""A faithful fake of the `pynvml` calls detection makes, answering from a recording.

A recording is JSON: the answer of each NVML call, keyed by the call's name, per
device, with a refusal written as `{"error": "NVML_ERROR_NOT_SUPPORTED"}` (NVML's
own code names). The fake raises exactly where the card refused, so the code under
test takes the same paths as on the real card. A call the recording does not
answer raises LookupError: a test must not pass on an answer nobody recorded.

    {
      "nvmlInit": null,                # or {"error": "NVML_ERROR_LIBRARY_NOT_FOUND"}
      "nvmlSystemGetDriverVersion": "550.54.15",
      "nvmlSystemGetCudaDriverVersion": 12040,
      "devices": [
        {"nvmlDeviceGetUUID": "GPU-...", "nvmlDeviceGetName": "NVIDIA H100 80GB HBM3",
         "nvmlDeviceGetMemoryInfo": {"total": 85520809984, "free": ..., "used": ...},
         "nvmlDeviceGetCudaComputeCapability": [9, 0],
         "nvmlDeviceGetMaxClockInfo": {"graphics": 1980},
         "nvmlDeviceGetMaxMigDeviceCount": 0,
         "migDevices": [ {device answers}, {"error": "NVML_ERROR_NOT_FOUND"}, ... ],
         ...}
      ]
    }

The development cluster and demos can use it too: `FakeNvml.load(path)`.

Usage calls (the GPU monitor's) answer from the same per-device keys:
`nvmlDeviceGetUtilizationRates` ({"gpu": 100, "memory": 41}), `nvmlDeviceGetComputeProcesses`
([{"pid": 438, "usedGpuMemory": 7453278208}]), `nvmlDeviceGetProcessUtilization` (the samples;
only those newer than the timestamp asked are returned, NOT_FOUND when none is, as NVML does),
`nvmlDeviceGetAccountingMode` and `nvmlDeviceGetAccountingStats`. `usage_answers` turns the
usage recording of `shared/reference/nvml` (`h100-usage-under-load.json`: phases `idle`,
`busy`, `after_exit`) into those keys, and `FakeNvml.under_load(device, usage, *phases)`
answers the device recording with them.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

#: NVML's return codes (nvml.h), by the names recordings use.
NVML_CODES = {
    "NVML_ERROR_UNINITIALIZED": 1,
    "NVML_ERROR_INVALID_ARGUMENT": 2,
    "NVML_ERROR_NOT_SUPPORTED": 3,
    "NVML_ERROR_NO_PERMISSION": 4,
    "NVML_ERROR_NOT_FOUND": 6,
    "NVML_ERROR_DRIVER_NOT_LOADED": 9,
    "NVML_ERROR_LIBRARY_NOT_FOUND": 12,
    "NVML_ERROR_GPU_IS_LOST": 15,
    "NVML_ERROR_UNKNOWN": 999,
}
_NAMES = {code: name for name, code in NVML_CODES.items()}
_CLOCKS = {0: "graphics", 1: "sm", 2: "mem", 3: "video"}


class FakeNvmlError(Exception):
    """pynvml.NVMLError's shape: the NVML return code in `value`."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return _NAMES.get(self.value, f"NVML error {self.value}")


class _Handle:
    def __init__(self, answers: dict[str, Any], where: str) -> None:
        self.answers = answers
        self.where = where


class FakeNvml:
    """The subset of the `pynvml` module detection uses, answering from a recording."""

    NVMLError = FakeNvmlError
    NVML_CLOCK_GRAPHICS = 0

    def __init__(self, recording: dict[str, Any]) -> None:
        self.recording = recording
        self.initialised = 0
        self.calls: list[str] = []

    @classmethod
    def load(cls, path: Path) -> FakeNvml:
        return cls(json.loads(Path(path).read_text()))

    @classmethod
    def under_load(cls, device: Path, usage: Path, *phases: str) -> FakeNvml:
        """The device recording at `device` (its first GPU) answering the usage calls as
        the usage recording's `phases` say, later phases winning."""
        recording = json.loads(Path(device).read_text())
        answers = usage_answers(json.loads(Path(usage).read_text()), *phases)
        recording["devices"][0] = {**recording["devices"][0], **answers}
        return cls(recording)

    def set_usage(self, index: int, answers: dict[str, Any]) -> None:
        """Replace device `index`'s usage answers (the next poll of a test's story)."""
        self.recording["devices"][index].update(answers)

    def _answer(self, answers: dict[str, Any], call: str, where: str) -> Any:
        self.calls.append(call)
        if call not in answers:
            raise LookupError(f"the NVML recording has no answer for {call} on {where}")
        value = answers[call]
        if isinstance(value, dict) and set(value) == {"error"}:
            raise FakeNvmlError(NVML_CODES[value["error"]])
        return value

    def _initialised(self) -> None:
        if self.initialised <= 0:
            raise FakeNvmlError(NVML_CODES["NVML_ERROR_UNINITIALIZED"])

    # -- the library ---------------------------------------------------------------------

    def nvmlInit(self) -> None:
        if "nvmlInit" in self.recording:
            self._answer(self.recording, "nvmlInit", "the system")
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self._initialised()
        self.initialised -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._initialised()
        return str(self._answer(self.recording, "nvmlSystemGetDriverVersion", "the system"))

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._initialised()
        return int(self._answer(self.recording, "nvmlSystemGetCudaDriverVersion", "the system"))

    def nvmlDeviceGetCount(self) -> int:
        self._initialised()
        return len(self.recording.get("devices", []))

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._initialised()
        devices = self.recording.get("devices", [])
        if not 0 <= index < len(devices):
            raise FakeNvmlError(NVML_CODES["NVML_ERROR_INVALID_ARGUMENT"])
        return _Handle(devices[index], f"device {index}")

    # -- per device ----------------------------------------------------------------------

    def _device(self, handle: _Handle, call: str) -> Any:
        self._initialised()
        return self._answer(handle.answers, call, handle.where)

    def nvmlDeviceGetUUID(self, handle: _Handle) -> str:
        return str(self._device(handle, "nvmlDeviceGetUUID"))

    def nvmlDeviceGetName(self, handle: _Handle) -> str:
        return str(self._device(handle, "nvmlDeviceGetName"))

    def nvmlDeviceGetMemoryInfo(self, handle: _Handle) -> SimpleNamespace:
        return SimpleNamespace(**self._device(handle, "nvmlDeviceGetMemoryInfo"))

    def nvmlDeviceGetCudaComputeCapability(self, handle: _Handle) -> tuple[int, int]:
        major, minor = self._device(handle, "nvmlDeviceGetCudaComputeCapability")
        return int(major), int(minor)

    def nvmlDeviceGetMaxClockInfo(self, handle: _Handle, clock: int) -> int:
        clocks = self._device(handle, "nvmlDeviceGetMaxClockInfo")
        name = _CLOCKS.get(clock, str(clock))
        if name not in clocks:
            raise FakeNvmlError(NVML_CODES["NVML_ERROR_INVALID_ARGUMENT"])
        value = clocks[name]
        if isinstance(value, dict):
            raise FakeNvmlError(NVML_CODES[value["error"]])
        return int(value)

    def nvmlDeviceGetEccMode(self, handle: _Handle) -> list[int]:
        current, pending = self._device(handle, "nvmlDeviceGetEccMode")
        return [int(current), int(pending)]

    def nvmlDeviceGetPciInfo(self, handle: _Handle) -> SimpleNamespace:
        return SimpleNamespace(**self._device(handle, "nvmlDeviceGetPciInfo"))

    def nvmlDeviceGetNumGpuCores(self, handle: _Handle) -> int:
        return int(self._device(handle, "nvmlDeviceGetNumGpuCores"))

    def nvmlDeviceGetAttributes(self, handle: _Handle) -> SimpleNamespace:
        return SimpleNamespace(**self._device(handle, "nvmlDeviceGetAttributes"))

    def nvmlDeviceGetMigMode(self, handle: _Handle) -> list[int]:
        current, pending = self._device(handle, "nvmlDeviceGetMigMode")
        return [int(current), int(pending)]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: _Handle) -> int:
        return int(self._device(handle, "nvmlDeviceGetMaxMigDeviceCount"))

    # -- usage (the GPU monitor) ---------------------------------------------------------

    def nvmlDeviceGetUtilizationRates(self, handle: _Handle) -> SimpleNamespace:
        return SimpleNamespace(**self._device(handle, "nvmlDeviceGetUtilizationRates"))

    def nvmlDeviceGetComputeProcesses(self, handle: _Handle) -> list[SimpleNamespace]:
        return [SimpleNamespace(**p) for p in self._device(handle, "nvmlDeviceGetComputeProcesses")]

    def nvmlDeviceGetProcessUtilization(
        self, handle: _Handle, last_seen: int
    ) -> list[SimpleNamespace]:
        samples = self._device(handle, "nvmlDeviceGetProcessUtilization")
        newer = [SimpleNamespace(**s) for s in samples if int(s["timeStamp"]) > last_seen]
        if not newer:
            raise FakeNvmlError(NVML_CODES["NVML_ERROR_NOT_FOUND"])
        return newer

    def nvmlDeviceGetAccountingMode(self, handle: _Handle) -> int:
        return int(self._device(handle, "nvmlDeviceGetAccountingMode"))

    def nvmlDeviceGetAccountingStats(self, handle: _Handle, pid: int) -> SimpleNamespace:
        return SimpleNamespace(**self._device(handle, "nvmlDeviceGetAccountingStats"))

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: _Handle, index: int) -> _Handle:
        children = self._device(handle, "migDevices")
        if not 0 <= index < len(children):
            raise FakeNvmlError(NVML_CODES["NVML_ERROR_INVALID_ARGUMENT"])
        child = children[index]
        if set(child) == {"error"}:
            raise FakeNvmlError(NVML_CODES[child["error"]])
        return _Handle(child, f"{handle.where} MIG {index}")


def usage_answers(usage: dict[str, Any], *phases: str) -> dict[str, Any]:
    """The usage recording's `phases` (`idle`, `busy`, `after_exit`) as per-device call
    answers, later phases winning. Only what was recorded is answered: the compute process
    list was recorded as Python reprs of pynvml's structures, read back with literal_eval."""
    answers: dict[str, Any] = {}
    if "accounting_mode_before" in usage:
        answers["nvmlDeviceGetAccountingMode"] = usage["accounting_mode_before"]
    for phase in phases:
        recorded = usage[phase]
        if "utilization" in recorded:
            answers["nvmlDeviceGetUtilizationRates"] = recorded["utilization"]
        if "memory" in recorded:
            answers["nvmlDeviceGetMemoryInfo"] = recorded["memory"]
        if "compute_processes" in recorded:
            answers["nvmlDeviceGetComputeProcesses"] = [
                ast.literal_eval(p) if isinstance(p, str) else p
                for p in recorded["compute_processes"]
            ]
        if "process_utilization" in recorded:
            answers["nvmlDeviceGetProcessUtilization"] = recorded["process_utilization"]
        if "accounting_stats_job" in recorded:
            answers["nvmlDeviceGetAccountingStats"] = recorded["accounting_stats_job"]
    return answers
