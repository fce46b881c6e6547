# ruff: noqa: N802 - the protocol mirrors NVML's own function names
"""GPUs through NVML, in the nested form `condor_gpu_discovery -properties -extra` prints.

What HTCondor does (`src/gpu/condor_gpu_discovery.cpp`, `cuda_device_enumeration.cpp`)
and this module repeats with NVML alone:

- A GPU's id is `GPU-` and the first 8 hex digits of its UUID (`-short-uuid`, the
  default): `GPU-6a96bd13`.
- A GPU in MIG mode (NVML reports a non-zero maximum of MIG devices) is not
  advertised itself; each MIG device that has a compute instance is, with its full
  NVML UUID as the id (`MIG-<uuid>`): HTCondor never shortens MIG ids, because
  CUDA_VISIBLE_DEVICES does not accept a shortened one. MIG devices come first,
  ordered by UUID, then whole GPUs by index, as condor_gpu_discovery lists them.
- Properties: `DeviceName`, `DeviceUuid`, `DevicePciBusId`, `Capability` (CUDA compute
  capability, 9.0), `ECCEnabled`, `GlobalMemoryMb` (total memory in MiB, rounded),
  `DriverVersion` (the CUDA driver API version, 12.4), `MaxSupportedVersion` (12040),
  `NvidiaDriver` (the kernel driver, "550.54.15"), and the `-extra` ones `ClockMhz`
  (maximum graphics clock), `ComputeUnits` (streaming multiprocessors) and `CoresPerCU`
  (CUDA cores per multiprocessor for the capability). A MIG device inherits
  Capability, ClockMhz, ECCEnabled, the driver versions and the PCI bus id from its
  parent where NVML gives none for the instance itself.
- A property NVML refuses (NOT_SUPPORTED and the like) is left out, as HTCondor
  leaves it out; a GPU whose UUID NVML refuses is reported as an error.

`ComputeUnits` needs CUDA for a whole GPU in HTCondor; here it is NVML's core count
(`nvmlDeviceGetNumGpuCores`) divided by `CoresPerCU`, and left out when either is
unknown. For MIG devices NVML gives the multiprocessor count directly.

Without libnvidia-ml (no driver, no GPU) there are no GPUs and no error.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from kondor_agent.detect._hostfs import DetectionError
from kondor_core.api import Gpu
from kondor_core.api.machine import GpuProperty

log = logging.getLogger(__name__)

#: CUDA cores per streaming multiprocessor by compute capability (NVIDIA's published
#: figures per architecture); CoresPerCU is left out for capabilities not listed.
CORES_PER_SM: dict[tuple[int, int], int] = {
    (3, 0): 192,
    (3, 2): 192,
    (3, 5): 192,
    (3, 7): 192,
    (5, 0): 128,
    (5, 2): 128,
    (5, 3): 128,
    (6, 0): 64,
    (6, 1): 128,
    (6, 2): 128,
    (7, 0): 64,
    (7, 2): 64,
    (7, 5): 64,
    (8, 0): 64,
    (8, 6): 128,
    (8, 7): 128,
    (8, 9): 128,
    (9, 0): 128,
    (10, 0): 128,
    (12, 0): 128,
}

_GPU_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$")


class NvmlLibrary(Protocol):
    """The part of the `pynvml` module that detection calls (the module itself fits)."""

    @property
    def NVMLError(self) -> type[Exception]: ...
    @property
    def NVML_CLOCK_GRAPHICS(self) -> int: ...

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlSystemGetDriverVersion(self) -> Any: ...
    def nvmlSystemGetCudaDriverVersion(self) -> Any: ...
    def nvmlDeviceGetCount(self) -> Any: ...
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any: ...
    def nvmlDeviceGetUUID(self, handle: Any) -> Any: ...
    def nvmlDeviceGetName(self, handle: Any) -> Any: ...
    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any: ...
    def nvmlDeviceGetCudaComputeCapability(self, handle: Any) -> Any: ...
    def nvmlDeviceGetMaxClockInfo(self, handle: Any, clock: int) -> Any: ...
    def nvmlDeviceGetEccMode(self, handle: Any) -> Any: ...
    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any: ...
    def nvmlDeviceGetNumGpuCores(self, handle: Any) -> Any: ...
    def nvmlDeviceGetAttributes(self, handle: Any) -> Any: ...
    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Any) -> Any: ...
    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, index: int) -> Any: ...


def default_nvml() -> NvmlLibrary | None:
    """The real `pynvml` module, or None when it is not installed."""
    try:
        import pynvml  # noqa: PLC0415 - optional at run time; absent means no GPUs
    except ImportError:  # pragma: no cover - a dependency of the project
        return None
    library: NvmlLibrary = pynvml
    return library


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


@dataclass(frozen=True)
class _Props:
    """What NVML says about one device; None where it refused."""

    uuid: str
    name: str | None
    memory_total: int | None
    capability: tuple[int, int] | None
    clock_mhz: int | None
    ecc: bool | None
    pci_bus_id: str | None
    multiprocessors: int | None
    cores: int | None


class _Reader:
    def __init__(self, nvml: NvmlLibrary) -> None:
        self.nvml = nvml

    def optional(self, call: Callable[[], Any]) -> Any:
        """A property call; None when NVML refuses it (HTCondor leaves such properties out)."""
        try:
            return call()
        except self.nvml.NVMLError as err:
            log.debug("NVML refused a property: %s", err)
            return None

    def required(self, call: Callable[[], Any], what: str) -> Any:
        try:
            return call()
        except self.nvml.NVMLError as err:
            raise DetectionError(f"NVML: {what} failed: {err}") from None

    def props(self, handle: Any, *, mig: bool) -> _Props:
        n = self.nvml
        uuid = _text(self.required(lambda: n.nvmlDeviceGetUUID(handle), "nvmlDeviceGetUUID"))
        name = self.optional(lambda: n.nvmlDeviceGetName(handle))
        memory = self.optional(lambda: n.nvmlDeviceGetMemoryInfo(handle))
        capability = self.optional(lambda: n.nvmlDeviceGetCudaComputeCapability(handle))
        clock = self.optional(lambda: n.nvmlDeviceGetMaxClockInfo(handle, n.NVML_CLOCK_GRAPHICS))
        ecc = self.optional(lambda: n.nvmlDeviceGetEccMode(handle))
        pci = self.optional(lambda: n.nvmlDeviceGetPciInfo(handle))
        attributes = self.optional(lambda: n.nvmlDeviceGetAttributes(handle)) if mig else None
        cores = None if mig else self.optional(lambda: n.nvmlDeviceGetNumGpuCores(handle))
        pci_id = getattr(pci, "busIdLegacy", None) or getattr(pci, "busId", None)
        return _Props(
            uuid=uuid,
            name=_text(name) if name is not None else None,
            memory_total=int(memory.total) if memory is not None else None,
            capability=(int(capability[0]), int(capability[1]))
            if capability is not None and capability[0] >= 0
            else None,
            clock_mhz=int(clock) if clock else None,
            ecc=bool(ecc[0]) if ecc is not None else None,
            pci_bus_id=_text(pci_id) if pci_id else None,
            multiprocessors=int(attributes.multiprocessorCount) if attributes is not None else None,
            cores=int(cores) if cores else None,
        )


def gpu_id(uuid: str) -> str:
    """condor_gpu_discovery's id: `GPU-` + 8 hex digits; MIG UUIDs unchanged."""
    if uuid.startswith("MIG-"):
        return uuid
    bare = uuid.removeprefix("GPU-")
    return "GPU-" + bare[:8]


def _properties(
    props: _Props,
    *,
    driver: str | None,
    cuda_version: int | None,
    parent: _Props | None = None,
) -> dict[str, GpuProperty]:
    capability = props.capability or (parent.capability if parent else None)
    clock = props.clock_mhz or (parent.clock_mhz if parent else None)
    ecc = props.ecc if props.ecc is not None else (parent.ecc if parent else None)
    pci = props.pci_bus_id or (parent.pci_bus_id if parent else None)
    out: dict[str, GpuProperty] = {"DeviceUuid": props.uuid}
    if props.name:
        out["DeviceName"] = props.name
    if pci:
        out["DevicePciBusId"] = pci
    if capability is not None:
        out["Capability"] = float(f"{capability[0]}.{capability[1]}")
    if ecc is not None:
        out["ECCEnabled"] = ecc
    if props.memory_total is not None:
        out["GlobalMemoryMb"] = round(props.memory_total / (1024 * 1024))
    if driver:
        out["NvidiaDriver"] = driver
    if cuda_version:
        out["DriverVersion"] = round(cuda_version // 1000 + (cuda_version % 100) / 100, 2)
        out["MaxSupportedVersion"] = cuda_version
    if clock:
        out["ClockMhz"] = float(clock)
    cores_per_sm = CORES_PER_SM.get(capability) if capability is not None else None
    if props.multiprocessors:
        out["ComputeUnits"] = props.multiprocessors
    elif props.cores and cores_per_sm:
        out["ComputeUnits"] = props.cores // cores_per_sm
    if cores_per_sm:
        out["CoresPerCU"] = cores_per_sm
    return out


def discover_gpus(nvml: NvmlLibrary | None) -> list[Gpu]:
    """The node's GPUs and MIG devices; empty when NVML (libnvidia-ml) is not there."""
    if nvml is None:
        return []
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as err:
        # No driver or no library: a node without GPUs, which is not an error.
        log.info("NVML is not available (%s); no GPUs advertised", err)
        return []
    try:
        return _discover(nvml)
    finally:
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlShutdown()


def _discover(nvml: NvmlLibrary) -> list[Gpu]:
    read = _Reader(nvml)
    driver = read.optional(nvml.nvmlSystemGetDriverVersion)
    driver_text = _text(driver) if driver is not None else None
    cuda = read.optional(nvml.nvmlSystemGetCudaDriverVersion)
    cuda_version = int(cuda) if cuda else None
    count = int(read.required(nvml.nvmlDeviceGetCount, "nvmlDeviceGetCount"))
    whole: list[Gpu] = []
    mig: list[Gpu] = []
    for index in range(count):
        handle = read.required(
            partial(nvml.nvmlDeviceGetHandleByIndex, index),
            f"nvmlDeviceGetHandleByIndex({index})",
        )
        max_mig = read.optional(partial(nvml.nvmlDeviceGetMaxMigDeviceCount, handle)) or 0
        props = read.props(handle, mig=False)
        if not max_mig:
            whole.append(
                Gpu(
                    id=gpu_id(props.uuid),
                    properties=_properties(props, driver=driver_text, cuda_version=cuda_version),
                )
            )
            continue
        for mig_index in range(int(max_mig)):
            # A MIG slot without a compute instance has no handle; nobody can use it.
            child = read.optional(
                partial(nvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, mig_index)
            )
            if child is None:
                continue
            child_props = read.props(child, mig=True)
            ident = gpu_id(child_props.uuid)
            if not _GPU_ID.match(ident):
                log.warning(
                    "MIG device %s of GPU %s has an id HTCondor's form cannot carry (a driver "
                    "older than 470); it is not advertised",
                    ident,
                    props.uuid,
                )
                continue
            mig.append(
                Gpu(
                    id=ident,
                    properties=_properties(
                        child_props, driver=driver_text, cuda_version=cuda_version, parent=props
                    ),
                )
            )
    mig.sort(key=lambda gpu: gpu.id)
    return mig + whole
