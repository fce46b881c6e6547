"""cgroup v2's control files, one unified hierarchy (`memory.max`, `cpu.weight`, `cpu.max`,
`cgroup.freeze`, `cpu.stat`): the v2 side of `cgroup_files.VersionFiles`."""

from __future__ import annotations

from pathlib import Path

from kondor_agent.execute.cgroup_files import (
    Hierarchy,
    MemoryLimits,
    keyed,
    limit_bytes,
    read,
    read_int,
    write,
)
from kondor_agent.execute.limits import CPU_PERIOD_US, CgroupLimits, cpu_quota_us, cpu_weight


class CgroupV2:
    """The v2 files: memory.max, memory.low and memory.swap.max, cpu.weight and cpu.max,
    cgroup.freeze and cgroup.events, cpu.stat."""

    peak_memory = "memory.peak"
    oom_kills = "memory.events"
    swap_limit = "memory.swap.max"

    def write_memory(self, h: Hierarchy, cgroup: str, limits: CgroupLimits, *, swap: bool) -> None:
        """The soft limit is memory.low (what the kernel reclaims last under pressure)."""
        if limits.memory_bytes is not None:
            write(h.file(cgroup, "memory.max"), str(limits.memory_bytes))
        if limits.memory_soft_bytes is not None:
            write(h.file(cgroup, "memory.low"), str(limits.memory_soft_bytes))
        if limits.swap_bytes is not None and swap:
            write(h.file(cgroup, self.swap_limit), str(limits.swap_bytes))

    def read_memory(self, h: Hierarchy, cgroup: str) -> MemoryLimits:
        memory = limit_bytes(h.file(cgroup, "memory.max"))
        soft = limit_bytes(h.file(cgroup, "memory.low")) or None  # 0 when unset
        return MemoryLimits(memory, soft, limit_bytes(h.file(cgroup, self.swap_limit)))

    def write_cpu(self, h: Hierarchy, cgroup: str, limits: CgroupLimits) -> None:
        if limits.cpu_weight_cpus is not None:
            write(h.file(cgroup, "cpu.weight"), str(cpu_weight(limits.cpu_weight_cpus)))
        quota = None if limits.cpu_quota_cpus is None else cpu_quota_us(limits.cpu_quota_cpus)
        write(h.file(cgroup, "cpu.max"), f"{quota or 'max'} {CPU_PERIOD_US}")

    def read_cpu(self, h: Hierarchy, cgroup: str) -> tuple[float | None, float | None]:
        """The CPU weight and quota, in CPUs."""
        w = read(h.file(cgroup, "cpu.weight"))
        weight = None if w is None else int(w) / 100
        quota = None
        fields = (read(h.file(cgroup, "cpu.max")) or "max").split()
        if fields[0] != "max":
            period = int(fields[1]) if len(fields) > 1 else CPU_PERIOD_US
            quota = int(fields[0]) / period
        return weight, quota

    def freeze_file(self, h: Hierarchy, cgroup: str) -> Path:
        return h.file(cgroup, "cgroup.freeze")

    def set_frozen(self, h: Hierarchy, cgroup: str, frozen: bool) -> None:
        write(self.freeze_file(h, cgroup), "1" if frozen else "0")

    def frozen(self, h: Hierarchy, cgroup: str) -> bool:
        path = h.file(cgroup, "cgroup.events")
        return keyed(read(path) or "", path).get("frozen") == 1

    def cpu_seconds(self, h: Hierarchy, cgroup: str) -> tuple[float | None, float | None]:
        """User and system CPU time (cpu.stat, in microseconds; v2 accounts CPU time
        without the cpu controller)."""
        path = h.file(cgroup, "cpu.stat")
        text = read(path)
        if text is None:
            return None, None
        stat = keyed(text, path)
        user = stat["user_usec"] / 1e6 if "user_usec" in stat else None
        system = stat["system_usec"] / 1e6 if "system_usec" in stat else None
        return user, system

    def memory_bytes(self, h: Hierarchy, cgroup: str) -> int | None:
        return read_int(h.file(cgroup, "memory.current"))
