"""What a job's cgroup is limited to: policy, apart from how the files are written.

A job gets its dynamic slot's resources, as HTCondor's starter gives them
(`CGROUP_MEMORY_LIMIT_POLICY = hard`, the manual's "Cgroup-Based Process
Tracking"): the slot's Memory as a hard memory limit, and a CPU weight in
proportion to the slot's Cpus so that busy slots share the node as their
sizes say. A CPU quota (the slot's Cpus as a ceiling) is optional: HTCondor
does not cap CPU by default, because an idle node's spare cycles harm nobody.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The kernel's default weights: one CPU's worth is cpu.shares 1024 (v1) or cpu.weight 100 (v2).
SHARES_PER_CPU = 1024
WEIGHT_PER_CPU = 100
#: The CFS period the quota is expressed over (the kernel's default, 100 ms).
CPU_PERIOD_US = 100_000


@dataclass(frozen=True)
class CgroupLimits:
    """Limits for one job's cgroup; None leaves the kernel's default (no limit, default weight)."""

    memory_bytes: int | None = None
    cpu_weight_cpus: float | None = None
    cpu_quota_cpus: float | None = None

    def __post_init__(self) -> None:
        if self.memory_bytes is not None and self.memory_bytes <= 0:
            raise ValueError(f"memory_bytes: {self.memory_bytes} must be positive")
        for name in ("cpu_weight_cpus", "cpu_quota_cpus"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name}: {value} must be a positive number of CPUs")


def slot_limits(cpus: float, memory_mib: int, *, cap_cpu: bool = False) -> CgroupLimits:
    """The limits of a job running in a slot of `cpus` CPUs and `memory_mib` MiB (its Memory).

    A slot of 0 CPUs (HTCondor allows it) still gets a small weight, never none.
    """
    if memory_mib <= 0:
        raise ValueError(f"memory_mib: {memory_mib} must be positive (the slot's Memory)")
    if cpus < 0:
        raise ValueError(f"cpus: {cpus} must not be negative (the slot's Cpus)")
    weight = cpus if cpus > 0 else 0.01
    return CgroupLimits(
        memory_bytes=memory_mib * 1024 * 1024,
        cpu_weight_cpus=weight,
        cpu_quota_cpus=cpus if cap_cpu and cpus > 0 else None,
    )


def cpu_shares(cpus: float) -> int:
    """v1 `cpu.shares` for a weight of `cpus` (the kernel's range is 2..262144)."""
    return max(2, min(262_144, round(SHARES_PER_CPU * cpus)))


def cpu_weight(cpus: float) -> int:
    """v2 `cpu.weight` for a weight of `cpus` (the kernel's range is 1..10000)."""
    return max(1, min(10_000, round(WEIGHT_PER_CPU * cpus)))


def cpu_quota_us(cpus: float) -> int:
    """The CFS quota per `CPU_PERIOD_US` for a ceiling of `cpus` (at least the kernel's 1 ms)."""
    return max(1000, round(CPU_PERIOD_US * cpus))
