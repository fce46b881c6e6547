"""Detection: the node's machine description (`Machine`), as the condor_startd would detect it.

Resources are the smallest of what the hardware has, what the cgroup the jobs run
under allows, and what the kubelet would accept (the Node's allocatable), minus
what the caller reserves; so Kondor never advertises more than a pod could get.

- **cpus** (DetectedCpus): online logical CPUs (`/sys/devices/system/cpu/online`, as
  HTCondor counts hyperthreads by default), the cgroup's effective cpuset, its CPU
  quota (`cpu.max` or `cfs_quota_us/cfs_period_us`, the smallest along its path), and
  allocatable `cpu`; minus reserved `cpu`; rounded down to whole cores.
- **memory** (DetectedMemory, MiB): `MemTotal`, the cgroup's memory limit, allocatable
  `memory`; minus reserved `memory`.
- **disk** (TotalDisk, KiB): free space of the execute directory for unprivileged users
  (statvfs `f_bavail`, as HTCondor's sysapi_disk_space), allocatable
  `ephemeral-storage`; minus reserved `ephemeral-storage`.
- **swap** (MiB): `SwapTotal`.
- **gpus**: NVML, see `_gpus`. GPUs are not capped by allocatable `nvidia.com/gpu`,
  because Apptainer jobs do not go through the device plugin.
- **attributes**: OpSys*, Arch, Utsname* (`_osinfo`), HasSingularity and
  SingularityVersion (`_apptainer`), and one `K8sLabel_*` attribute per node label
  (`_labels`); **labels** keeps the labels themselves.

`allocatable` and `reserved` are Kubernetes resource lists (`{"cpu": "7900m",
"memory": "30Gi", "ephemeral-storage": "100Gi"}`). `reserved` is what the agent keeps
back beyond the kubelet's own reservations (for instance the requests of the node's
DaemonSet pods); it is not the SlotPolicy's `reserved`, which the core subtracts
when it carves slots (HTCondor's RESERVED_MEMORY), so do not pass that here too.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Protocol

from pydantic import ValidationError

from kondor_agent.detect._apptainer import Runner, apptainer_attributes, run_on_path
from kondor_agent.detect._cgroups import CgroupFS, parse_cpu_list
from kondor_agent.detect._gpus import NvmlLibrary, default_nvml, discover_gpus
from kondor_agent.detect._hostfs import DetectionError, HostFS
from kondor_agent.detect._labels import label_attributes
from kondor_agent.detect._osinfo import os_attributes
from kondor_core.api import Machine, Unit, describe_errors, format_quantity, parse_quantity

#: The resource names `reserved` accepts (Kubernetes' names, as in allocatable).
RESERVABLE = ("cpu", "memory", "ephemeral-storage")

MIB = 1024 * 1024


class StatvfsResult(Protocol):
    """The fields of `os.statvfs` detection uses."""

    @property
    def f_bavail(self) -> int: ...
    @property
    def f_frsize(self) -> int: ...


Statvfs = Callable[[str], StatvfsResult]


@dataclass(frozen=True)
class Detected:
    """A machine description and, per resource, why it has the value it has."""

    machine: Machine
    notes: list[str] = field(default_factory=list)


def parse_meminfo(text: str) -> dict[str, int]:
    """`/proc/meminfo` in bytes (its `kB` are KiB)."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, sep, rest = line.partition(":")
        fields = rest.split()
        if not sep or not fields:
            continue
        try:
            number = int(fields[0])
        except ValueError:
            raise DetectionError(f"/proc/meminfo: {line.strip()!r} has no number") from None
        values[key.strip()] = number * (1024 if fields[1:] == ["kB"] else 1)
    return values


def _quantities(
    resources: Mapping[str, str | int | float] | None, *, what: str
) -> dict[str, Decimal]:
    out: dict[str, Decimal] = {}
    for name, value in (resources or {}).items():
        try:
            out[name] = parse_quantity(value, bare=Unit.BYTES, field=f"{what}.{name}")
        except ValueError as err:
            raise DetectionError(str(err)) from None
    return out


def smallest(bounds: Mapping[str, Decimal | float | int | None]) -> tuple[Decimal, str]:
    """The smallest known bound and a note naming all of them (None = no bound)."""
    known = {name: Decimal(str(value)) for name, value in bounds.items() if value is not None}
    if not known:
        raise DetectionError(f"no bound is known among {', '.join(bounds)}")
    winner = min(known, key=lambda name: known[name])
    listed = ", ".join(
        f"{name} {_show(bounds[name])}" + (" <" if name == winner else "") for name in bounds
    )
    return known[winner], listed


def _show(value: Decimal | float | int | None) -> str:
    if value is None:
        return "none"
    number = Decimal(str(value))
    return f"{number.normalize():f}" if number != number.to_integral() else str(int(number))


def online_cpus(host: HostFS) -> int:
    """Online logical CPUs; `/proc/cpuinfo` where sysfs does not say."""
    text = host.read_optional("/sys/devices/system/cpu/online")
    if text is not None and text.strip():
        return len(parse_cpu_list(text, what="/sys/devices/system/cpu/online"))
    cpuinfo = host.read_text("/proc/cpuinfo")
    count = sum(1 for line in cpuinfo.splitlines() if line.split(":")[0].strip() == "processor")
    if count == 0:
        raise DetectionError("/proc/cpuinfo: no 'processor' lines")
    return count


def _cpus(
    host: HostFS,
    cgroups: CgroupFS,
    group: str,
    *,
    allocated: Mapping[str, Decimal],
    held: Mapping[str, Decimal],
    notes: list[str],
) -> int:
    """Whole cores, never more than the kubelet would accept."""
    cpuset = cgroups.cpuset(group)
    cpu_bound, listed = smallest(
        {
            "online": online_cpus(host),
            "cpuset": len(cpuset) if cpuset is not None else None,
            "quota": cgroups.cpu_limit(group),
            "allocatable": allocated.get("cpu"),
        }
    )
    cpus = math.floor(cpu_bound - held.get("cpu", Decimal(0)))
    notes.append(f"cpus {cpus}: smallest of {listed}; reserved {_show(held.get('cpu'))}")
    if cpus < 1:
        raise DetectionError(
            f"cpus: no whole core is left for jobs ({listed}; reserved {_show(held.get('cpu'))})"
        )
    return cpus


def _memory_mib(
    meminfo: Mapping[str, int],
    cgroups: CgroupFS,
    group: str,
    *,
    allocated: Mapping[str, Decimal],
    held: Mapping[str, Decimal],
    notes: list[str],
) -> int:
    """MiB of memory: the smallest of MemTotal, the cgroup's limit and allocatable."""
    if "MemTotal" not in meminfo:
        raise DetectionError("/proc/meminfo: no MemTotal line")
    memory_bound, listed = smallest(
        {
            "MemTotal": meminfo["MemTotal"],
            "cgroup": cgroups.memory_limit(group),
            "allocatable": allocated.get("memory"),
        }
    )
    memory_mib = math.floor((memory_bound - held.get("memory", Decimal(0))) / MIB)
    notes.append(
        f"memory {memory_mib} MiB: smallest of {listed} bytes; reserved {_show(held.get('memory'))}"
    )
    if memory_mib < 1:
        raise DetectionError(f"memory: nothing is left for jobs ({listed} bytes)")
    return memory_mib


def _disk_kib(
    execute: str,
    statvfs: Statvfs,
    *,
    allocated: Mapping[str, Decimal],
    held: Mapping[str, Decimal],
    notes: list[str],
) -> int:
    """KiB free in the execute directory's file system, at most allocatable's."""
    try:
        fs = statvfs(execute)
    except OSError as err:
        raise DetectionError(
            f"execute directory {execute}: cannot measure its file system ({err.strerror or err})"
        ) from None
    disk_bound, listed = smallest(
        {"free": fs.f_bavail * fs.f_frsize, "allocatable": allocated.get("ephemeral-storage")}
    )
    disk_kib = max(0, math.floor((disk_bound - held.get("ephemeral-storage", Decimal(0))) / 1024))
    notes.append(f"disk {disk_kib} KiB: smallest of {listed} bytes ({execute})")
    return disk_kib


def detect(
    host: HostFS,
    *,
    node_name: str,
    labels: Mapping[str, str] | None = None,
    allocatable: Mapping[str, str | int | float] | None = None,
    reserved: Mapping[str, str | int | float] | None = None,
    execute_dir: Path | str,
    nvml: NvmlLibrary | None = None,
    runner: Runner | None = None,
    cgroup: str | None = None,
    statvfs: Statvfs = os.statvfs,
) -> Detected:
    """The machine description of the host behind `host`, with notes on each figure.

    `cgroup` is the cgroup whose limits bound the jobs (default: the kubelet's
    `kubepods` cgroup, or the root when there is none). `execute_dir` is a path in the
    agent's own file system (where it runs jobs), not under `host.root`. `nvml`
    defaults to the real `pynvml` (no GPUs when libnvidia-ml is absent) and `runner`
    to running programs found on PATH.
    """
    allocated = _quantities(allocatable, what="allocatable")
    held = _quantities(reserved, what="reserved")
    unknown = sorted(set(held) - set(RESERVABLE))
    if unknown:
        raise DetectionError(
            f"reserved: {', '.join(unknown)} cannot be reserved; use {', '.join(RESERVABLE)}"
        )
    cgroups = CgroupFS(host)
    if cgroup is not None and not cgroups.exists(cgroup):
        raise DetectionError(
            f"cgroup {cgroup}: no such cgroup under {host.path('/sys/fs/cgroup')} "
            f"({cgroups.version.value}); name one such as {cgroups.kubepods() or '/'}"
        )
    group = cgroup or cgroups.kubepods() or "/"
    notes = [f"cgroups {cgroups.version.value}, limits of {group}"]
    cpus = _cpus(host, cgroups, group, allocated=allocated, held=held, notes=notes)
    meminfo = parse_meminfo(host.read_text("/proc/meminfo"))
    memory_mib = _memory_mib(meminfo, cgroups, group, allocated=allocated, held=held, notes=notes)
    disk_kib = _disk_kib(str(execute_dir), statvfs, allocated=allocated, held=held, notes=notes)

    swap_mib = meminfo.get("SwapTotal", 0) // MIB
    gpus = discover_gpus(nvml if nvml is not None else default_nvml())
    if gpus:
        notes.append(f"gpus: {', '.join(gpu.id for gpu in gpus)}")

    attributes: dict[str, bool | int | float | str] = dict(os_attributes(host))
    attributes.update(apptainer_attributes(runner if runner is not None else run_on_path))
    from_labels, collisions = label_attributes(labels or {})
    attributes.update(from_labels)
    notes.extend(collisions)

    try:
        machine = Machine(
            name=node_name,
            cpus=cpus,
            memory=format_quantity(memory_mib, Unit.MIB),
            disk=format_quantity(disk_kib, Unit.KIB) if disk_kib else 0,
            swap=format_quantity(swap_mib, Unit.MIB) if swap_mib else 0,
            gpus=gpus,
            labels=dict(labels or {}),
            attributes=attributes,
        )
    except ValidationError as err:
        raise DetectionError("; ".join(describe_errors(err))) from None
    return Detected(machine, notes)


def detect_machine(
    host: HostFS,
    *,
    node_name: str,
    labels: Mapping[str, str] | None = None,
    allocatable: Mapping[str, str | int | float] | None = None,
    reserved: Mapping[str, str | int | float] | None = None,
    execute_dir: Path | str,
    nvml: NvmlLibrary | None = None,
    runner: Runner | None = None,
    cgroup: str | None = None,
    statvfs: Statvfs = os.statvfs,
) -> Machine:
    """The machine description of the host behind `host` (see `detect`)."""
    return detect(
        host,
        node_name=node_name,
        labels=labels,
        allocatable=allocatable,
        reserved=reserved,
        execute_dir=execute_dir,
        nvml=nvml,
        runner=runner,
        cgroup=cgroup,
        statvfs=statvfs,
    ).machine
