"""Control groups v1, v2 and hybrid behind one interface, chosen once (as WALinuxAgent does).

The layout is detected from the files under the mount point, so a recorded tree
works as well as the host:

- **v2** (most Kubernetes nodes today): `/sys/fs/cgroup/cgroup.controllers` exists;
  every controller lives in that one hierarchy.
- **hybrid** (systemd's hybrid mode): v1 controllers under `/sys/fs/cgroup/<ctl>` and a
  v2 hierarchy at `/sys/fs/cgroup/unified`. A controller is read where it is attached:
  in v2 when `unified/cgroup.controllers` lists it, otherwise in its v1 directory.
- **v1**: one directory per controller (or per co-mounted group such as `cpu,cpuacct`).
- **none**: no cgroup file system; no limits are known and no usage can be measured.

Cgroups are named by their path inside a hierarchy (`/kubepods.slice`,
`/kubepods/burstable/pod<uid>`); the same path is used in every hierarchy, as the
kubelet and systemd create them. Limits are hierarchical, so the limit of a cgroup
is the smallest one set on it or any ancestor.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from kondor_agent.detect._hostfs import DetectionError, HostFS

#: A v1 memory limit at or above this is the kernel's "unlimited" (PAGE_COUNTER_MAX pages).
V1_UNLIMITED = 1 << 62

#: The kubelet's parent cgroup of all pods: systemd driver first, then cgroupfs driver.
KUBEPODS = ("/kubepods.slice", "/kubepods")

_V1_CONTROLLERS = ("cpu", "cpuacct", "cpuset", "memory", "pids", "freezer", "blkio", "devices")


class CgroupVersion(Enum):
    V1 = "v1"
    V2 = "v2"
    HYBRID = "hybrid"
    NONE = "none"


@dataclass(frozen=True)
class _Place:
    """Where one controller's files are: the hierarchy's directory (host path) and its kind."""

    base: str
    v2: bool


def ancestors(cgroup: str) -> list[str]:
    """`/a/b` -> `["/", "/a", "/a/b"]`: the cgroups whose limits bound `cgroup`."""
    parts = [part for part in cgroup.split("/") if part]
    return ["/"] + ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def parse_cpu_list(text: str, *, what: str) -> frozenset[int]:
    """A kernel CPU list (`0-3,8,10-11`) as a set of CPU numbers."""
    cpus: set[int] = set()
    text = text.strip()
    if not text:
        return frozenset()
    for chunk in text.split(","):
        first, _, last = chunk.strip().partition("-")
        try:
            lo = int(first)
            hi = int(last) if last else lo
        except ValueError:
            raise DetectionError(
                f"{what}: {text!r} is not a CPU list; expected ranges such as 0-3,8"
            ) from None
        if hi < lo or lo < 0:
            raise DetectionError(f"{what}: {text!r} has the backwards or negative range {chunk!r}")
        cpus.update(range(lo, hi + 1))
    return frozenset(cpus)


def _int(text: str, *, what: str, allowed: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise DetectionError(f"{what}: {text.strip()!r} is not {allowed}") from None


def parse_keyed(text: str, *, what: str) -> dict[str, int]:
    """A flat-keyed file (`cpu.stat`, `memory.stat`): `key value` per line."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        fields = line.split()
        if not fields:
            continue
        if len(fields) != 2:
            raise DetectionError(f"{what}: the line {line!r} is not 'key value'")
        values[fields[0]] = _int(fields[1], what=f"{what} {fields[0]}", allowed="an integer")
    return values


class CgroupFS:
    """Limits and usage of cgroups, whatever the layout; the layout is detected once."""

    def __init__(self, host: HostFS, mount: str = "/sys/fs/cgroup") -> None:
        self.host = host
        self.mount = mount.rstrip("/") or "/"
        self._v2_base: str | None = None
        self._v2_controllers: frozenset[str] = frozenset()
        self._v1_dirs: dict[str, str] = {}
        if host.exists(f"{self.mount}/cgroup.controllers"):
            self._v2_base = self.mount
        elif host.exists(f"{self.mount}/unified/cgroup.controllers"):
            self._v2_base = f"{self.mount}/unified"
        if self._v2_base is not None:
            controllers = host.read_text(f"{self._v2_base}/cgroup.controllers").split()
            self._v2_controllers = frozenset(controllers)
        if self._v2_base != self.mount:
            self._v1_dirs = self._find_v1_dirs()
        if self._v2_base == self.mount:
            self.version = CgroupVersion.V2
        elif self._v1_dirs and self._v2_base is not None:
            self.version = CgroupVersion.HYBRID
        elif self._v1_dirs:
            self.version = CgroupVersion.V1
        else:
            self.version = CgroupVersion.NONE

    def __repr__(self) -> str:
        return f"CgroupFS({self.host!r}, version={self.version.value})"

    def _find_v1_dirs(self) -> dict[str, str]:
        names = [n for n in self.host.listdir(self.mount) if self.host.is_dir(f"{self.mount}/{n}")]
        found: dict[str, str] = {}
        for controller in _V1_CONTROLLERS:
            # An exact directory first (`cpu`, often a link to `cpu,cpuacct`), then a co-mount.
            if controller in names:
                found[controller] = f"{self.mount}/{controller}"
                continue
            for name in names:
                if controller in name.split(","):
                    found[controller] = f"{self.mount}/{name}"
                    break
        return found

    @property
    def unified(self) -> str | None:
        """Host path of the v2 hierarchy (the mount, or `unified` when hybrid); None if absent."""
        return self._v2_base

    def hierarchy(self, controller: str) -> tuple[str, bool] | None:
        """Where `controller` is attached: (its hierarchy's host path, whether v2); None if absent.

        Shared with `kondor_agent.execute.cgroups`, which writes where this class reads.
        """
        place = self._place(controller)
        return None if place is None else (place.base, place.v2)

    def _place(self, controller: str) -> _Place | None:
        if self._v2_base is not None and controller in self._v2_controllers:
            return _Place(self._v2_base, v2=True)
        if controller in self._v1_dirs:
            return _Place(self._v1_dirs[controller], v2=False)
        return None

    def _file(self, place: _Place, cgroup: str, name: str) -> str:
        inner = cgroup.strip("/")
        return f"{place.base}/{inner}/{name}" if inner else f"{place.base}/{name}"

    def _read(self, place: _Place, cgroup: str, name: str) -> tuple[str, str | None]:
        path = self._file(place, cgroup, name)
        return path, self.host.read_optional(path)

    # -- discovery -----------------------------------------------------------------------

    def exists(self, cgroup: str) -> bool:
        """Whether `cgroup` exists in the cpu, memory or v2 hierarchy."""
        for controller in ("memory", "cpu", "cpuacct"):
            place = self._place(controller)
            if place is not None and self.host.is_dir(self._file(place, cgroup, "")):
                return True
        if self._v2_base is not None:
            return self.host.is_dir(self._file(_Place(self._v2_base, True), cgroup, ""))
        return False

    def kubepods(self) -> str | None:
        """The kubelet's pods cgroup (`/kubepods.slice` or `/kubepods`), None when absent."""
        for cgroup in KUBEPODS:
            if self.exists(cgroup):
                return cgroup
        return None

    # -- limits --------------------------------------------------------------------------

    def cpu_limit(self, cgroup: str) -> float | None:
        """CPU quota in cores (the smallest along the path), None when no quota is set."""
        place = self._place("cpu")
        if place is None:
            return None
        limits: list[float] = []
        for group in ancestors(cgroup):
            if place.v2:
                path, text = self._read(place, group, "cpu.max")
                if text is None:
                    continue
                fields = text.split()
                if len(fields) not in (1, 2):
                    raise DetectionError(
                        f"{path}: {text.strip()!r} is not '<quota|max> [period]' (cpu.max)"
                    )
                if fields[0] == "max":
                    continue
                quota = _int(fields[0], what=path, allowed="a quota in microseconds or 'max'")
                period = (
                    _int(fields[1], what=path, allowed="a period in microseconds")
                    if len(fields) == 2
                    else 100_000
                )
            else:
                path, text = self._read(place, group, "cpu.cfs_quota_us")
                if text is None:
                    continue
                quota = _int(text, what=path, allowed="a quota in microseconds or -1")
                if quota < 0:
                    continue
                period_path, period_text = self._read(place, group, "cpu.cfs_period_us")
                if period_text is None:
                    raise DetectionError(f"{period_path}: missing beside {path}")
                period = _int(period_text, what=period_path, allowed="a period in microseconds")
            if period <= 0 or quota <= 0:
                raise DetectionError(f"{path}: quota {quota} and period {period} must be positive")
            limits.append(quota / period)
        return min(limits) if limits else None

    def cpuset(self, cgroup: str) -> frozenset[int] | None:
        """The CPUs the cgroup may run on (its effective cpuset), None when unknown."""
        place = self._place("cpuset")
        if place is None:
            return None
        names = ("cpuset.cpus.effective",) if place.v2 else ("cpuset.effective_cpus", "cpuset.cpus")
        # The nearest cgroup that has the file: effective sets already include the ancestors'.
        for group in reversed(ancestors(cgroup)):
            for name in names:
                path, text = self._read(place, group, name)
                if text is not None and text.strip():
                    return parse_cpu_list(text, what=path)
        return None

    def memory_limit(self, cgroup: str) -> int | None:
        """Memory limit in bytes (the smallest along the path), None when unlimited."""
        place = self._place("memory")
        if place is None:
            return None
        limits: list[int] = []
        for group in ancestors(cgroup):
            name = "memory.max" if place.v2 else "memory.limit_in_bytes"
            path, text = self._read(place, group, name)
            if text is None or text.strip() == "max":
                continue
            value = _int(text, what=path, allowed="a number of bytes or 'max'")
            if value < 0:
                raise DetectionError(f"{path}: {value} is negative")
            if not place.v2 and value >= V1_UNLIMITED:
                continue
            limits.append(value)
        return min(limits) if limits else None

    # -- usage ---------------------------------------------------------------------------

    def cpu_usage_usec(self, cgroup: str) -> int | None:
        """CPU time used by the cgroup and its descendants, in microseconds; None when absent."""
        place = self._place("cpuacct")
        if place is not None and not place.v2:
            path, text = self._read(place, cgroup, "cpuacct.usage")
            if text is None:
                return None
            return _int(text, what=path, allowed="nanoseconds") // 1000
        if self._v2_base is None:
            return None
        # cgroup v2 accounts CPU time (cpu.stat usage_usec) even without the cpu controller.
        path, text = self._read(_Place(self._v2_base, True), cgroup, "cpu.stat")
        if text is None:
            return None
        stat = parse_keyed(text, what=path)
        if "usage_usec" not in stat:
            raise DetectionError(f"{path}: no usage_usec line")
        return stat["usage_usec"]

    def memory_usage(self, cgroup: str) -> int | None:
        """Memory charged to the cgroup in bytes (page cache included); None when absent."""
        place = self._place("memory")
        if place is None:
            return None
        path, text = self._read(
            place, cgroup, "memory.current" if place.v2 else "memory.usage_in_bytes"
        )
        if text is None:
            return None
        return _int(text, what=path, allowed="a number of bytes")

    def memory_working_set(self, cgroup: str) -> int | None:
        """Usage minus inactive page cache, as the kubelet computes a working set."""
        usage = self.memory_usage(cgroup)
        place = self._place("memory")
        if usage is None or place is None:
            return None
        path, text = self._read(place, cgroup, "memory.stat")
        if text is None:
            return usage
        stat = parse_keyed(text, what=path)
        inactive = stat.get("inactive_file" if place.v2 else "total_inactive_file", 0)
        return max(0, usage - inactive)


def pod_cgroup(kubepods: str, uid: str, qos_class: str) -> str:
    """The cgroup the kubelet gives a pod, for either cgroup driver.

    systemd driver (`/kubepods.slice`): `kubepods-<qos>.slice/kubepods-<qos>-pod<uid>.slice`
    with the UID's dashes as underscores; cgroupfs driver (`/kubepods`): `<qos>/pod<uid>`.
    Guaranteed pods sit directly under kubepods. `qos_class` is the pod's
    `status.qosClass` (Guaranteed, Burstable, BestEffort).
    """
    qos = qos_class.lower()
    if qos not in ("guaranteed", "burstable", "besteffort"):
        raise ValueError(f"qosClass: {qos_class!r} is not Guaranteed, Burstable or BestEffort")
    base = kubepods.rstrip("/")
    if base.endswith(".slice"):
        escaped = uid.replace("-", "_")
        if qos == "guaranteed":
            return f"{base}/kubepods-pod{escaped}.slice"
        return f"{base}/kubepods-{qos}.slice/kubepods-{qos}-pod{escaped}.slice"
    if qos == "guaranteed":
        return f"{base}/pod{uid}"
    return f"{base}/{qos}/pod{uid}"
