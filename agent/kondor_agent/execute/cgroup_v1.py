"""cgroup v1's control files, one hierarchy per controller (`memory`, `cpu`, `cpuacct`,
`freezer`): the v1 side of `cgroup_files.VersionFiles`."""

from __future__ import annotations

from pathlib import Path

from kondor_agent.execute.cgroup_files import (
    Hierarchy,
    MemoryLimits,
    limit_bytes,
    read,
    read_int,
    write,
)
from kondor_agent.execute.limits import (
    CPU_PERIOD_US,
    SHARES_PER_CPU,
    CgroupLimits,
    cpu_quota_us,
    cpu_shares,
)


class CgroupV1:
    """The v1 files: limit_in_bytes, soft_limit_in_bytes and memsw for memory, shares and
    CFS quota for CPU, freezer.state, cpuacct's usage."""

    peak_memory = "memory.max_usage_in_bytes"
    oom_kills = "memory.oom_control"
    swap_limit = "memory.memsw.limit_in_bytes"

    def write_memory(self, h: Hierarchy, cgroup: str, limits: CgroupLimits, *, swap: bool) -> None:
        """No swap is a memsw limit equal to the hard limit (memsw counts memory and swap)."""
        if limits.memory_bytes is not None:
            write(h.file(cgroup, "memory.limit_in_bytes"), str(limits.memory_bytes))
        if limits.memory_soft_bytes is not None:
            write(h.file(cgroup, "memory.soft_limit_in_bytes"), str(limits.memory_soft_bytes))
        if limits.swap_bytes is not None and swap and limits.memory_bytes is not None:
            total = limits.memory_bytes + limits.swap_bytes
            write(h.file(cgroup, self.swap_limit), str(total))

    def read_memory(self, h: Hierarchy, cgroup: str) -> MemoryLimits:
        memory = limit_bytes(h.file(cgroup, "memory.limit_in_bytes"))
        # An unset soft limit reads as "unlimited".
        soft = limit_bytes(h.file(cgroup, "memory.soft_limit_in_bytes")) or None
        memsw = limit_bytes(h.file(cgroup, self.swap_limit))
        swap = memsw - memory if memsw is not None and memory is not None else None
        return MemoryLimits(memory, soft, swap)

    def write_cpu(self, h: Hierarchy, cgroup: str, limits: CgroupLimits) -> None:
        if limits.cpu_weight_cpus is not None:
            write(h.file(cgroup, "cpu.shares"), str(cpu_shares(limits.cpu_weight_cpus)))
        quota = None if limits.cpu_quota_cpus is None else cpu_quota_us(limits.cpu_quota_cpus)
        write(h.file(cgroup, "cpu.cfs_period_us"), str(CPU_PERIOD_US))
        write(h.file(cgroup, "cpu.cfs_quota_us"), str(quota or -1))

    def read_cpu(self, h: Hierarchy, cgroup: str) -> tuple[float | None, float | None]:
        """The CPU weight and quota, in CPUs."""
        shares = read(h.file(cgroup, "cpu.shares"))
        weight = None if shares is None else int(shares) / SHARES_PER_CPU
        quota = None
        q = int((read(h.file(cgroup, "cpu.cfs_quota_us")) or "-1").strip())
        if q > 0:
            period = int(read(h.file(cgroup, "cpu.cfs_period_us")) or CPU_PERIOD_US)
            quota = q / period
        return weight, quota

    def freeze_file(self, h: Hierarchy, cgroup: str) -> Path:
        return h.file(cgroup, "freezer.state")

    def set_frozen(self, h: Hierarchy, cgroup: str, frozen: bool) -> None:
        write(self.freeze_file(h, cgroup), "FROZEN" if frozen else "THAWED")

    def frozen(self, h: Hierarchy, cgroup: str) -> bool:
        return (read(self.freeze_file(h, cgroup)) or "").strip() == "FROZEN"

    def cpu_seconds(self, h: Hierarchy, cgroup: str) -> tuple[float | None, float | None]:
        """User and system CPU time (cpuacct, in nanoseconds)."""
        user = read_int(h.file(cgroup, "cpuacct.usage_user"))
        system = read_int(h.file(cgroup, "cpuacct.usage_sys"))
        return (
            None if user is None else user / 1e9,
            None if system is None else system / 1e9,
        )

    def memory_bytes(self, h: Hierarchy, cgroup: str) -> int | None:
        return read_int(h.file(cgroup, "memory.usage_in_bytes"))
