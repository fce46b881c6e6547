"""What a slot's job is limited to (policy), and the kernel values it becomes."""

from __future__ import annotations

import pytest

from kondor_agent.execute.limits import (
    CgroupLimits,
    cpu_quota_us,
    cpu_shares,
    cpu_weight,
    slot_limits,
)


@pytest.mark.parametrize(
    ("cpus", "memory_mib", "cap", "expected"),
    [
        (1, 1024, False, CgroupLimits(memory_bytes=1 << 30, cpu_weight_cpus=1)),
        (4, 512, False, CgroupLimits(memory_bytes=512 << 20, cpu_weight_cpus=4)),
        (2, 128, True, CgroupLimits(memory_bytes=128 << 20, cpu_weight_cpus=2, cpu_quota_cpus=2)),
        # A 0-CPU slot still gets a small weight and no quota.
        (0, 64, True, CgroupLimits(memory_bytes=64 << 20, cpu_weight_cpus=0.01)),
    ],
)
def test_slot_limits(cpus: float, memory_mib: int, cap: bool, expected: CgroupLimits) -> None:
    assert slot_limits(cpus, memory_mib, cap_cpu=cap) == expected


@pytest.mark.parametrize(
    ("cpus", "shares", "weight", "quota"),
    [
        (1, 1024, 100, 100_000),
        (0.5, 512, 50, 50_000),
        (0.001, 2, 1, 1000),
        (1000, 262_144, 10_000, 100_000_000),
    ],
)
def test_kernel_values_stay_in_the_kernels_ranges(
    cpus: float, shares: int, weight: int, quota: int
) -> None:
    assert (cpu_shares(cpus), cpu_weight(cpus), cpu_quota_us(cpus)) == (shares, weight, quota)


def test_bad_slot_sizes_are_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match="memory_mib: 0"):
        slot_limits(1, 0)
    with pytest.raises(ValueError, match="cpus: -1"):
        slot_limits(-1, 10)
    with pytest.raises(ValueError, match="memory_bytes"):
        CgroupLimits(memory_bytes=0)
