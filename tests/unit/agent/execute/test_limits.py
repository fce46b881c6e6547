"""What a slot's job is limited to (policy, from the SlotPolicy's knobs), and the kernel values."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kondor_agent.execute.limits import (
    CgroupLimits,
    ExecuteSettings,
    MemoryLimitPolicy,
    SettingsError,
    cpu_quota_us,
    cpu_shares,
    cpu_weight,
    htcondor_default,
    slot_limits,
)
from kondor_core.config.htcondor_defaults import HTCONDOR_DEFAULTS
from kondor_core.config.templates import BUILTIN_MACROS

MIB = 1 << 20
HARD = ExecuteSettings(memory_policy=MemoryLimitPolicy.HARD, disable_swap=False)
SOFT = ExecuteSettings(memory_policy=MemoryLimitPolicy.SOFT, disable_swap=False)
NONE = ExecuteSettings(memory_policy=MemoryLimitPolicy.NONE, disable_swap=False)


@pytest.mark.parametrize(
    ("cpus", "memory_mib", "settings", "expected"),
    [
        # hard: the slot's Memory, soft limit at 90% of it ("Limiting Resource
        # Usage Using Cgroups").
        (1, 1000, HARD, CgroupLimits(1000 * MIB, 900 * MIB, cpu_weight_cpus=1)),
        # soft: the soft limit at the slot's Memory, the hard one at the startd's whole memory.
        (4, 512, SOFT, CgroupLimits(8192 * MIB, 512 * MIB, cpu_weight_cpus=4)),
        # none: no memory limit, the CPU weight still.
        (2, 128, NONE, CgroupLimits(cpu_weight_cpus=2)),
        # DISABLE_SWAP_FOR_JOB: no swap beyond the hard limit.
        (
            1,
            100,
            ExecuteSettings(disable_swap=True),
            CgroupLimits(100 * MIB, 90 * MIB, swap_bytes=0, cpu_weight_cpus=1),
        ),
        # ... which means nothing without a memory limit.
        (
            1,
            100,
            ExecuteSettings(memory_policy=MemoryLimitPolicy.NONE, disable_swap=True),
            CgroupLimits(cpu_weight_cpus=1),
        ),
        # HTCondor's defaults: hard, and no swap.
        (1, 100, ExecuteSettings(), CgroupLimits(100 * MIB, 90 * MIB, 0, cpu_weight_cpus=1)),
        # The CPU cap and the pids limit (Kondor's knobs).
        (
            2,
            100,
            ExecuteSettings(disable_swap=False, cpu_hard_limit=True, pids_max=64),
            CgroupLimits(100 * MIB, 90 * MIB, cpu_weight_cpus=2, cpu_quota_cpus=2, pids_max=64),
        ),
        # A 0-CPU slot still gets a small weight and no quota.
        (
            0,
            64,
            ExecuteSettings(disable_swap=False, cpu_hard_limit=True),
            CgroupLimits(64 * MIB, int(64 * MIB * 0.9), cpu_weight_cpus=0.01),
        ),
    ],
)
def test_slot_limits(
    cpus: float, memory_mib: int, settings: ExecuteSettings, expected: CgroupLimits
) -> None:
    got = slot_limits(cpus, memory_mib, settings=settings, machine_memory_mib=8192)
    assert got == expected


def test_soft_policy_without_the_machine_memory_sets_no_hard_limit() -> None:
    assert slot_limits(1, 512, settings=SOFT) == CgroupLimits(
        memory_soft_bytes=512 * MIB, cpu_weight_cpus=1
    )


def test_the_defaults_are_htcondors_from_the_one_table() -> None:
    """CGROUP_MEMORY_LIMIT_POLICY and DISABLE_SWAP_FOR_JOB unset are HTCondor 25's defaults
    (hard, true), as the table generated from its param table gives them."""
    assert HTCONDOR_DEFAULTS["CGROUP_MEMORY_LIMIT_POLICY"] == "hard"
    assert HTCONDOR_DEFAULTS["DISABLE_SWAP_FOR_JOB"] == "true"
    assert (
        htcondor_default("CGROUP_MEMORY_LIMIT_POLICY")
        == BUILTIN_MACROS["CGROUP_MEMORY_LIMIT_POLICY"]
    )
    assert (
        ExecuteSettings()
        == ExecuteSettings.from_macros({})
        == ExecuteSettings(
            memory_policy=MemoryLimitPolicy(BUILTIN_MACROS["CGROUP_MEMORY_LIMIT_POLICY"]),
            disable_swap=BUILTIN_MACROS["DISABLE_SWAP_FOR_JOB"] == "true",
            cpu_hard_limit=False,
            pids_max=None,
        )
    )


@pytest.mark.parametrize(
    ("macros", "expected"),
    [
        ({}, ExecuteSettings()),
        (
            {"CGROUP_MEMORY_LIMIT_POLICY": "Soft", "DISABLE_SWAP_FOR_JOB": "True"},
            ExecuteSettings(memory_policy=MemoryLimitPolicy.SOFT, disable_swap=True),
        ),
        ({"cgroup_memory_limit_policy": "none"}, replace(NONE, disable_swap=True)),
        (
            {"KONDOR_JOB_CPU_HARD_LIMIT": "1", "KONDOR_JOB_PIDS_MAX": "4096"},
            ExecuteSettings(cpu_hard_limit=True, pids_max=4096),
        ),
        ({"DISABLE_SWAP_FOR_JOB": "false", "OTHER": "x"}, HARD),
    ],
)
def test_settings_from_the_policy_macros(macros: dict[str, str], expected: ExecuteSettings) -> None:
    assert ExecuteSettings.from_macros(macros) == expected


@pytest.mark.parametrize(
    ("macros", "message"),
    [
        (
            {"CGROUP_MEMORY_LIMIT_POLICY": "hrad"},
            "CGROUP_MEMORY_LIMIT_POLICY = hrad: .*hard, soft, none",
        ),
        ({"DISABLE_SWAP_FOR_JOB": "maybe"}, "DISABLE_SWAP_FOR_JOB = maybe: not a boolean"),
        ({"KONDOR_JOB_PIDS_MAX": "0"}, "KONDOR_JOB_PIDS_MAX = 0: .*at least 1"),
        ({"KONDOR_JOB_PIDS_MAX": "lots"}, "KONDOR_JOB_PIDS_MAX = lots"),
    ],
)
def test_bad_knob_values_are_refused_naming_knob_value_and_choices(
    macros: dict[str, str], message: str
) -> None:
    with pytest.raises(SettingsError, match=message):
        ExecuteSettings.from_macros(macros)


@pytest.mark.parametrize(
    ("cpus", "shares", "weight", "quota"),
    [
        # HTCondor writes Cpus * 100 into cpu.shares; cpu.weight has the same scale.
        (1, 100, 100, 100_000),
        (0.5, 50, 50, 50_000),
        (0.001, 2, 1, 1000),
        (4000, 262_144, 10_000, 400_000_000),
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
    with pytest.raises(ValueError, match="pids_max"):
        CgroupLimits(pids_max=0)
