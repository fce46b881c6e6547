"""What a job is given of its slot's GPUs: environment, device nodes, and its GPU usage.

Three decisions, each HTCondor's, each pure:

* **Environment** (the starter's `Starter::PublishToEnv`, HTCondor 25): for a slot whose
  ad has GPUs, `_CONDOR_AssignedGPUs` is the slot's AssignedGPUs, and each variable of
  ENVIRONMENT_FOR_AssignedGPUs is the ids, each rewritten by the variable's
  `/regex/replacement/` and joined with `,` (the manual's "Configuration Macros":
  "Each environment variable name may be followed by an equals sign and a Perl style
  regular expression that defines how to modify each resource ID before using it as the
  value"). `use feature : GPUs` (and HTCondor's default) is
  `GPU_DEVICE_ORDINAL=/(CUDA|OCL)//  CUDA_VISIBLE_DEVICES=/CUDA//`: `CUDA0, CUDA1` becomes
  `0,1`; a `GPU-6a96bd13` or `MIG-...` id has no prefix to strip and passes unchanged. A
  bare `CUDA_VISIBLE_DEVICES` or `GPU_DEVICE_ORDINAL` (no regex), or
  `CUDA_VISIBLE_DEVICES=//`, keeps only the digits and commas of the list (the starter's
  "very special case"). A slot with no AssignedGPUs sets the same variables to
  ENVIRONMENT_VALUE_FOR_UnAssignedGPUs (default `10000`: "the CUDA runtime library (for
  GPUs) has this problem" of using GPUs it was not given). Then, unless
  AUTO_SET_NVIDIA_VISIBLE_DEVICES is false, NVIDIA_VISIBLE_DEVICES is the full UUIDs of the
  slot's GPUs (`none` for a slot without any), and CUDA_VISIBLE_DEVICES is forced to the
  same value (HTCONDOR-3350: newer CUDA runtimes take a list only of long ids).
* **Device isolation** (STARTER_HIDE_GPU_DEVICES, default true; the starter's
  `nvidia_env_var_to_exclude_list`): every NVIDIA GPU device node of the node whose UUID is
  not among the slot's is hidden; `all` hides none; a UUID the node does not have hides
  none (HTCondor: "Unknown GPU ... skipping device hiding"). /dev/nvidiactl and
  /dev/nvidia-uvm stay open: CUDA needs them.
* **Usage** (`use feature : GPUs`' GPU monitor): per job, GPUsUsage ("GPU usage over the
  lifetime of the job, reported as a fraction of the maximum possible utilization of one
  GPU") and GPUsMemoryUsage ("Peak memory usage over the lifetime of the job, in
  megabytes"); per slot, DeviceGPUsAverageUsage ("The number of seconds executed by GPUs
  assigned to this slot, divided by the number of seconds since the startd started up") and
  DeviceGPUsMemoryPeakUsage. Where HTCondor's condor_gpu_utilization charges a device's
  whole utilisation to its slot's job, Kondor charges a job only its own processes: NVML's
  running-process list (`usedGpuMemory`) and per-process samples (`smUtil`), because
  accounting mode is off by default and nvmlDeviceGetAccountingStats answers NOT_FOUND.
  The slot's Device* attributes are the device's own utilisation, as HTCondor's.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kondor_core.config.templates import BUILTIN_MACROS
from kondor_core.slots import gpu_ad_name

#: The knobs, with HTCondor's names.
ENVIRONMENT_FOR = "ENVIRONMENT_FOR_AssignedGPUs"
UNASSIGNED_VALUE = "ENVIRONMENT_VALUE_FOR_UnAssignedGPUs"
HIDE_DEVICES = "STARTER_HIDE_GPU_DEVICES"
AUTO_SET_NVIDIA = "AUTO_SET_NVIDIA_VISIBLE_DEVICES"
KNOBS = (ENVIRONMENT_FOR, UNASSIGNED_VALUE, HIDE_DEVICES, AUTO_SET_NVIDIA)

#: The starter joins the rewritten ids with this ("maybe get this from config someday").
ID_SEPARATOR = ","
_ID_DELIMITERS = re.compile(r"[,\s]+")
_MIB = 1024 * 1024


@dataclass(frozen=True)
class GpuSettings:
    """The GPU knobs as a SlotPolicy snippet sets them; unset, HTCondor's defaults."""

    environment_for: str = BUILTIN_MACROS.get(ENVIRONMENT_FOR, "")
    unassigned_value: str = BUILTIN_MACROS.get(UNASSIGNED_VALUE, "")
    hide_devices: bool = True
    auto_set_nvidia_visible_devices: bool = True

    @classmethod
    def from_macros(cls, macros: Mapping[str, str] = {}) -> GpuSettings:
        """The settings from a policy's macros (knob names are case-insensitive)."""
        upper = {name.upper(): value.strip() for name, value in macros.items()}
        default = cls()
        return cls(
            environment_for=upper.get(ENVIRONMENT_FOR.upper(), default.environment_for),
            unassigned_value=upper.get(UNASSIGNED_VALUE.upper(), default.unassigned_value),
            hide_devices=_boolean(upper.get(HIDE_DEVICES), default.hide_devices),
            auto_set_nvidia_visible_devices=_boolean(
                upper.get(AUTO_SET_NVIDIA), default.auto_set_nvidia_visible_devices
            ),
        )


def _boolean(text: str | None, default: bool) -> bool:
    """A config boolean as param_boolean reads one; anything else keeps the default."""
    word = (text or "").strip().lower()
    if word in ("true", "yes", "t", "y", "1"):
        return True
    if word in ("false", "no", "f", "n", "0"):
        return False
    return default


# -- the slot's GPUs --------------------------------------------------------------------


@dataclass(frozen=True)
class SlotGpus:
    """What a slot ad says of its GPUs.

    `has_gpus`: the ad has a GPUs attribute (the machine has GPUs, so every slot counts
    them, 0 included). `assigned`: AssignedGPUs as published, None when the slot has none.
    `uuids`: the full UUID of each assigned GPU, from its property ad's DeviceUuid (None
    when one of them has none: HTCondor's join over AvailableGPUs fails then too)."""

    has_gpus: bool
    assigned: str | None = None
    uuids: tuple[str, ...] | None = ()

    @property
    def ids(self) -> tuple[str, ...]:
        """The assigned ids, in the slot's order."""
        return split_ids(self.assigned or "")


def split_ids(text: str) -> tuple[str, ...]:
    """A resource id list as StringTokenIterator splits it: on commas and white space."""
    return tuple(part for part in _ID_DELIMITERS.split(text) if part)


def full_uuid(device_uuid: str) -> str:
    """The id NVIDIA_VISIBLE_DEVICES takes: `GPU-<uuid>` or `MIG-<uuid>`. Kondor's detection
    keeps NVML's prefix in DeviceUuid; condor_gpu_discovery strips `GPU-`, so the starter adds
    it back (and leaves `MIG-` ids alone)."""
    if device_uuid.startswith(("GPU-", "MIG-")):
        return device_uuid
    return "GPU-" + device_uuid


def slot_gpus(ad: Mapping[str, Any]) -> SlotGpus:
    """Read a slot ad (a dict of attributes or a classad2.ClassAd, GPU property ads nested
    as `GPUs_<id>`) into `SlotGpus`."""
    if ad.get("GPUs") is None:
        return SlotGpus(has_gpus=False)
    assigned = ad.get("AssignedGPUs")
    if not isinstance(assigned, str):
        return SlotGpus(has_gpus=True)
    uuids: list[str] = []
    for gpu in split_ids(assigned):
        props = ad.get(gpu_ad_name(gpu))
        uuid = props.get("DeviceUuid") if props is not None else None
        if not isinstance(uuid, str) or not uuid:
            return SlotGpus(has_gpus=True, assigned=assigned, uuids=None)
        uuids.append(full_uuid(uuid))
    return SlotGpus(has_gpus=True, assigned=assigned, uuids=tuple(uuids))


# -- the environment --------------------------------------------------------------------


class EnvironmentSpecError(ValueError):
    """An ENVIRONMENT_FOR_AssignedGPUs entry HTCondor would ignore (and log)."""


@dataclass(frozen=True)
class EnvironmentRule:
    """One entry of ENVIRONMENT_FOR_AssignedGPUs: a name, and a /regex/replacement/ or none."""

    name: str
    pattern: str | None = None
    replacement: str = ""


_NAME = re.compile(r"[^\s,=]+")


def parse_environment_for(text: str) -> tuple[tuple[EnvironmentRule, ...], tuple[str, ...]]:
    """The entries of `key[=/regex/replace/] ...`, separated by spaces and/or commas (the
    regex's separator may be any non-space character), and a message for each entry
    ignored: an unterminated or invalid regex ends the list, as in the starter."""
    rules: list[EnvironmentRule] = []
    problems: list[str] = []
    rest = text
    while True:
        rest = rest.lstrip(" \t\r\n,")
        found = _NAME.match(rest)
        if found is None:
            break
        name = found.group()
        rest = rest[found.end() :].lstrip()
        if not rest.startswith("="):
            rules.append(EnvironmentRule(name))
            continue
        spec = rest[1:].lstrip()
        mark = spec[:1]
        parts = spec[1:].split(mark, 2) if mark else []
        if len(parts) < 3:
            problems.append(f"{ENVIRONMENT_FOR}: {name!r} ignored: missing end marker")
            break
        pattern, replacement, rest = parts
        try:
            re.compile(pattern)
        except re.error as err:
            problems.append(f"{ENVIRONMENT_FOR}: {name!r} ignored: regex {pattern!r}: {err}")
            break
        rules.append(EnvironmentRule(name, pattern, replacement))
    return tuple(rules), tuple(problems)


_DIGIT_HACK_NAMES = ("CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL")


def rule_value(rule: EnvironmentRule, assigned: str) -> str:
    """The variable's value for the assigned id list `assigned`."""
    if rule.pattern is None:
        if rule.name in _DIGIT_HACK_NAMES:
            return _digits_and_commas(assigned)
        return assigned
    if rule.name == "CUDA_VISIBLE_DEVICES" and rule.pattern == "":
        return _digits_and_commas(assigned)
    regex = re.compile(rule.pattern)
    return ID_SEPARATOR.join(_rewrite(regex, rule.replacement, gpu) for gpu in split_ids(assigned))


def _digits_and_commas(text: str) -> str:
    return "".join(ch for ch in text if ch.isdigit() or ch == ",")


def _rewrite(regex: re.Pattern[str], replacement: str, gpu: str) -> str:
    """The first match of `regex` in `gpu` replaced; `$1`..`$9` name groups (PCRE's)."""
    found = regex.search(gpu)
    if found is None:
        return gpu
    out = [gpu[: found.start()]]
    i = 0
    while i < len(replacement):
        if replacement[i] == "$" and i + 1 < len(replacement) and replacement[i + 1].isdigit():
            group = int(replacement[i + 1])
            if group <= regex.groups:
                out.append(found.group(group) or "")
            i += 2
            continue
        out.append(replacement[i])
        i += 1
    out.append(gpu[found.end() :])
    return "".join(out)


def gpu_environment(slot: SlotGpus, settings: GpuSettings) -> dict[str, str]:
    """The GPU variables of a job's environment, as the starter sets them for this slot."""
    if not slot.has_gpus:
        return {}
    env: dict[str, str] = {}
    names = settings.environment_for.strip()
    assigned = slot.assigned
    if assigned is not None or names:
        value = assigned if assigned is not None else settings.unassigned_value
        if names:
            rules, _ = parse_environment_for(names)
            env.update({rule.name: rule_value(rule, value) for rule in rules})
        env["_CONDOR_AssignedGPUs"] = value
    if settings.auto_set_nvidia_visible_devices:
        visible = ID_SEPARATOR.join(slot.uuids or ())
        if visible:
            env["NVIDIA_VISIBLE_DEVICES"] = visible
            env["CUDA_VISIBLE_DEVICES"] = visible
        else:
            env["NVIDIA_VISIBLE_DEVICES"] = "none"
    return env


def nvidia_visible_devices(slot: SlotGpus) -> str:
    """What a pod's container is given as NVIDIA_VISIBLE_DEVICES (the NVIDIA container
    runtime's variable): the slot's full UUIDs, or `none` for a slot without GPUs (no GPU,
    as the starter sets it)."""
    return ID_SEPARATOR.join(slot.uuids or ()) or "none"


def visible_mismatch(slot: SlotGpus, given: str | None) -> str | None:
    """Why the devices a container was given (its NVIDIA_VISIBLE_DEVICES as the kubelet or
    device plugin left it) are not the slot's, or None when they are the same set."""
    wanted = set(slot.uuids or ())
    if given is None:
        return f"the container has no NVIDIA_VISIBLE_DEVICES; the slot assigned {sorted(wanted)}"
    got = {gpu for gpu in split_ids(given) if gpu not in ("void", "none")}
    if given.strip() == "all":
        return f"the container was given all GPUs; the slot assigned {sorted(wanted)}"
    if got == wanted:
        return None
    return f"the container was given {sorted(got)}; the slot assigned {sorted(wanted)}"


# -- device isolation -------------------------------------------------------------------


@dataclass(frozen=True)
class GpuDeviceNode:
    """One NVIDIA GPU's device node: its UUID (/proc/driver/nvidia/gpus/*/information's
    `GPU UUID`) and its device numbers (major of /dev/nvidiactl, `Device Minor`)."""

    uuid: str
    major: int
    minor: int

    @property
    def path(self) -> str:
        return f"/dev/nvidia{self.minor}"


def hidden_devices(visible: str, devices: Sequence[GpuDeviceNode]) -> tuple[GpuDeviceNode, ...]:
    """The GPU device nodes a job whose slot's GPUs are `visible` (full UUIDs, comma
    separated) must not open. An empty `visible` hides every GPU; `all` hides none; a UUID
    the node does not list hides none (as the starter, which then skips hiding)."""
    if visible.strip() == "all":
        return ()
    remaining = list(devices)
    for uuid in split_ids(visible):
        kept = [device for device in remaining if device.uuid != uuid]
        if len(kept) == len(remaining):
            return ()
        remaining = kept
    return tuple(remaining)


def devices_to_hide(
    slot: SlotGpus, settings: GpuSettings, devices: Sequence[GpuDeviceNode]
) -> tuple[GpuDeviceNode, ...]:
    """The device nodes a job on `slot` must not open, as STARTER_HIDE_GPU_DEVICES says."""
    if not settings.hide_devices:
        return ()
    return hidden_devices(ID_SEPARATOR.join(slot.uuids or ()), devices)


def parse_nvidia_information(text: str) -> tuple[str, int] | None:
    """The UUID and device minor of /proc/driver/nvidia/gpus/<bus id>/information, or None
    when the file names neither."""
    uuid = minor = None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "GPU UUID":
            uuid = value.strip()
        elif key.strip() == "Device Minor":
            minor = value.strip()
    if not uuid or minor is None or not minor.isdigit():
        return None
    return uuid, int(minor)


# -- usage ------------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuProcess:
    """One entry of nvmlDeviceGetComputeProcesses on a device: pid and bytes it holds."""

    device: str
    pid: int
    used_memory: int | None


@dataclass(frozen=True)
class ProcessSample:
    """One nvmlDeviceGetProcessUtilization sample: the process's SM use, percent."""

    device: str
    pid: int
    sm_util: int


@dataclass(frozen=True)
class DeviceReading:
    """A device's own utilisation (nvmlDeviceGetUtilizationRates.gpu, percent) and memory
    in use (nvmlDeviceGetMemoryInfo.used, bytes) at one poll."""

    device: str
    gpu_util: int
    memory_used: int


@dataclass(frozen=True)
class GpuPoll:
    """What the monitor read from NVML at one poll, over `seconds` since the previous."""

    seconds: float
    processes: tuple[GpuProcess, ...] = ()
    samples: tuple[ProcessSample, ...] = ()
    devices: tuple[DeviceReading, ...] = ()


@dataclass(frozen=True)
class GpuUsage:
    """Running totals: GPU-seconds used, the seconds watched, the peak memory in bytes."""

    gpu_seconds: float = 0.0
    seconds: float = 0.0
    peak_memory: int = 0
    devices: frozenset[str] = field(default_factory=frozenset)

    @property
    def average(self) -> float | None:
        """GPU-seconds per second watched (a fraction of one GPU), None before any time."""
        return self.gpu_seconds / self.seconds if self.seconds > 0 else None

    @property
    def peak_memory_mib(self) -> int:
        """The peak in MiB, rounded up as condor_gpu_utilization rounds it."""
        return math.ceil(self.peak_memory / _MIB)


def add_job_poll(usage: GpuUsage, poll: GpuPoll, pids: Iterable[int]) -> GpuUsage:
    """`usage` of the job whose processes are `pids` after one more poll: its processes'
    SM use over the poll (each process's newest sample per device), and the memory its
    processes hold together (summed over every device) as a candidate peak."""
    mine = set(pids)
    util: dict[tuple[str, int], int] = {}
    for sample in poll.samples:
        if sample.pid in mine:
            util[(sample.device, sample.pid)] = sample.sm_util
    memory = sum(p.used_memory or 0 for p in poll.processes if p.pid in mine)
    devices = {p.device for p in poll.processes if p.pid in mine} | {d for d, _ in util}
    return replace(
        usage,
        gpu_seconds=usage.gpu_seconds + sum(util.values()) / 100 * poll.seconds,
        seconds=usage.seconds + poll.seconds,
        peak_memory=max(usage.peak_memory, memory),
        devices=usage.devices | devices,
    )


def add_slot_poll(usage: GpuUsage, poll: GpuPoll, devices: Iterable[str]) -> GpuUsage:
    """`usage` of a slot holding `devices` (UUIDs) after one more poll: the devices' own
    utilisation over the poll, and their memory in use together as a candidate peak."""
    mine = set(devices)
    readings = [reading for reading in poll.devices if reading.device in mine]
    return replace(
        usage,
        gpu_seconds=usage.gpu_seconds + sum(r.gpu_util for r in readings) / 100 * poll.seconds,
        seconds=usage.seconds + poll.seconds,
        peak_memory=max(usage.peak_memory, sum(r.memory_used for r in readings)),
        devices=usage.devices | {r.device for r in readings},
    )


def job_usage_attributes(usage: GpuUsage) -> dict[str, float | int]:
    """GPUsUsage and GPUsMemoryUsage (MiB) of the job ad; nothing before any time passed."""
    average = usage.average
    if average is None:
        return {}
    return {"GPUsUsage": round(average, 4), "GPUsMemoryUsage": usage.peak_memory_mib}


def slot_usage_attributes(usage: GpuUsage) -> dict[str, float | int]:
    """DeviceGPUsAverageUsage and DeviceGPUsMemoryPeakUsage (MiB) of the slot ad."""
    average = usage.average
    if average is None:
        return {}
    return {
        "DeviceGPUsAverageUsage": round(average, 4),
        "DeviceGPUsMemoryPeakUsage": usage.peak_memory_mib,
    }
