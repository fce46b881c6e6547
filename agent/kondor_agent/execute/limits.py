"""What a job's cgroup is limited to: policy, apart from how the files are written.

A job gets its dynamic slot's resources as HTCondor's starter gives them (the
manual's "Limiting Resource Usage Using Cgroups"), under the knobs a SlotPolicy
snippet sets with HTCondor's names (`ExecuteSettings.from_macros`):

- CGROUP_MEMORY_LIMIT_POLICY `hard`: the hard limit is the slot's Memory and the
  soft limit 90% of it; `soft`: the soft limit is the slot's Memory and the hard
  limit the whole startd's memory (TotalMemory); `none`: no memory limit.
- DISABLE_SWAP_FOR_JOB: with a memory policy, the job may not swap
  (v1: memory.memsw.limit_in_bytes equal to the hard limit; v2: memory.swap.max 0),
  so a job over its memory is held rather than thrashing. Without it swap is left
  to the kernel (HTCondor's per-slot VirtualMemory cap is not carried out).

The defaults of those two are HTCondor's, read from the one table of defaults
(`kondor_core.config.templates.BUILTIN_MACROS`, generated from HTCondor 25.14's param
table: `hard` and `true`; the reference's older text gives `none`). Only Kondor's own
knobs below have their defaults here.
- A CPU weight of the slot's Cpus * 100 (v1 `cpu.shares`, v2 `cpu.weight`), which
  shares the node between busy slots by their sizes and lets one job use idle cores.
- Kondor's own knobs, for what HTCondor has no knob for: KONDOR_JOB_CPU_HARD_LIMIT
  (default false) caps the job at its slot's Cpus with the CFS quota, and
  KONDOR_JOB_PIDS_MAX (default unset) limits the processes and threads a job may
  have (the pids controller), so a fork bomb stays in its slot.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum

from kondor_core.config.templates import BUILTIN_MACROS

#: HTCondor writes Cpus * 100 into cpu.shares; v2's cpu.weight has the same scale (100 = one CPU).
SHARES_PER_CPU = 100
WEIGHT_PER_CPU = 100
#: The CFS period the quota is expressed over (the kernel's default, 100 ms).
CPU_PERIOD_US = 100_000
#: Under CGROUP_MEMORY_LIMIT_POLICY = hard the soft limit is this share of the slot's Memory.
HARD_POLICY_SOFT_SHARE = 0.9
_MIB = 1024 * 1024


class MemoryLimitPolicy(StrEnum):
    """CGROUP_MEMORY_LIMIT_POLICY's values."""

    HARD = "hard"
    SOFT = "soft"
    NONE = "none"


#: The knobs, as a SlotPolicy snippet names them (HTCondor's names are case-insensitive).
MEMORY_POLICY_KNOB = "CGROUP_MEMORY_LIMIT_POLICY"
DISABLE_SWAP_KNOB = "DISABLE_SWAP_FOR_JOB"
CPU_HARD_LIMIT_KNOB = "KONDOR_JOB_CPU_HARD_LIMIT"
PIDS_MAX_KNOB = "KONDOR_JOB_PIDS_MAX"
KNOBS = (MEMORY_POLICY_KNOB, DISABLE_SWAP_KNOB, CPU_HARD_LIMIT_KNOB, PIDS_MAX_KNOB)


class SettingsError(ValueError):
    """A knob's value is not one Kondor understands; the message names knob, value and choices."""


def _boolean(knob: str, text: str) -> bool:
    """HTCondor's boolean knob values: true/false (any case), or a number (non-zero is true)."""
    word = text.strip().lower()
    if word in ("true", "yes", "t", "y"):
        return True
    if word in ("false", "no", "f", "n"):
        return False
    try:
        return float(word) != 0
    except ValueError:
        raise SettingsError(f"{knob} = {text.strip()}: not a boolean; use true or false") from None


def _memory_policy(text: str) -> MemoryLimitPolicy:
    try:
        return MemoryLimitPolicy(text.strip().lower())
    except ValueError:
        allowed = ", ".join(p.value for p in MemoryLimitPolicy)
        raise SettingsError(
            f"{MEMORY_POLICY_KNOB} = {text.strip()}: not a policy; use one of {allowed}"
        ) from None


def htcondor_default(knob: str) -> str:
    """The knob's default in the one table of defaults (HTCondor's, with Kondor's few
    deliberate differences); names are case-insensitive."""
    for name, value in BUILTIN_MACROS.items():
        if name.upper() == knob:
            return value
    raise KeyError(f"{knob} has no default in the table of HTCondor's defaults")


#: HTCondor's defaults of the two knobs, from the one table.
DEFAULT_MEMORY_POLICY = _memory_policy(htcondor_default(MEMORY_POLICY_KNOB))
DEFAULT_DISABLE_SWAP = _boolean(DISABLE_SWAP_KNOB, htcondor_default(DISABLE_SWAP_KNOB))


@dataclass(frozen=True)
class ExecuteSettings:
    """How the node limits its jobs: the knobs above, parsed; HTCondor's defaults."""

    memory_policy: MemoryLimitPolicy = DEFAULT_MEMORY_POLICY
    disable_swap: bool = DEFAULT_DISABLE_SWAP
    cpu_hard_limit: bool = False
    pids_max: int | None = None

    @classmethod
    def from_macros(cls, macros: Mapping[str, str]) -> ExecuteSettings:
        """The settings a compiled policy's macros give; SettingsError names a bad value."""
        upper = {name.upper(): value for name, value in macros.items()}
        settings = cls()
        text = upper.get(MEMORY_POLICY_KNOB)
        if text is not None and text.strip():
            settings = replace(settings, memory_policy=_memory_policy(text))
        text = upper.get(DISABLE_SWAP_KNOB)
        if text is not None and text.strip():
            settings = replace(settings, disable_swap=_boolean(DISABLE_SWAP_KNOB, text))
        text = upper.get(CPU_HARD_LIMIT_KNOB)
        if text is not None and text.strip():
            settings = replace(settings, cpu_hard_limit=_boolean(CPU_HARD_LIMIT_KNOB, text))
        text = upper.get(PIDS_MAX_KNOB)
        if text is not None and text.strip():
            try:
                pids = int(text.strip())
            except ValueError:
                pids = 0
            if pids < 1:
                raise SettingsError(
                    f"{PIDS_MAX_KNOB} = {text.strip()}: not a number of processes; "
                    "use a whole number of at least 1 (leave it unset for no limit)"
                )
            settings = replace(settings, pids_max=pids)
        return settings


@dataclass(frozen=True)
class CgroupLimits:
    """Limits for one job's cgroup; None leaves the kernel's default (no limit, default weight).

    `swap_bytes` is the swap the job may use beyond its memory (0: none).
    """

    memory_bytes: int | None = None
    memory_soft_bytes: int | None = None
    swap_bytes: int | None = None
    cpu_weight_cpus: float | None = None
    cpu_quota_cpus: float | None = None
    pids_max: int | None = None

    def __post_init__(self) -> None:
        for name in ("memory_bytes", "memory_soft_bytes"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name}: {value} must be positive")
        if self.swap_bytes is not None and self.swap_bytes < 0:
            raise ValueError(f"swap_bytes: {self.swap_bytes} must not be negative")
        for name in ("cpu_weight_cpus", "cpu_quota_cpus"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name}: {value} must be a positive number of CPUs")
        if self.pids_max is not None and self.pids_max < 1:
            raise ValueError(f"pids_max: {self.pids_max} must be at least 1")


def slot_limits(
    cpus: float,
    memory_mib: int,
    *,
    settings: ExecuteSettings = ExecuteSettings(),
    machine_memory_mib: int | None = None,
) -> CgroupLimits:
    """The limits of a job in a slot of `cpus` CPUs and `memory_mib` MiB (its Memory), on a
    startd of `machine_memory_mib` (TotalMemory; the hard limit under the soft policy).

    A slot of 0 CPUs (HTCondor allows it) still gets a small weight, never none.
    """
    if memory_mib <= 0:
        raise ValueError(f"memory_mib: {memory_mib} must be positive (the slot's Memory)")
    if cpus < 0:
        raise ValueError(f"cpus: {cpus} must not be negative (the slot's Cpus)")
    slot_bytes = memory_mib * _MIB
    hard = soft = None
    if settings.memory_policy is MemoryLimitPolicy.HARD:
        hard, soft = slot_bytes, int(slot_bytes * HARD_POLICY_SOFT_SHARE)
    elif settings.memory_policy is MemoryLimitPolicy.SOFT:
        soft = slot_bytes
        if machine_memory_mib is not None and machine_memory_mib > 0:
            hard = max(machine_memory_mib, memory_mib) * _MIB
    swap = 0 if settings.disable_swap and hard is not None else None
    return CgroupLimits(
        memory_bytes=hard,
        memory_soft_bytes=soft,
        swap_bytes=swap,
        cpu_weight_cpus=cpus if cpus > 0 else 0.01,
        cpu_quota_cpus=cpus if settings.cpu_hard_limit and cpus > 0 else None,
        pids_max=settings.pids_max,
    )


def cpu_shares(cpus: float) -> int:
    """v1 `cpu.shares` for a weight of `cpus`: HTCondor's Cpus * 100 (the kernel's range is
    2..262144)."""
    return max(2, min(262_144, round(SHARES_PER_CPU * cpus)))


def cpu_weight(cpus: float) -> int:
    """v2 `cpu.weight` for a weight of `cpus` (the kernel's range is 1..10000)."""
    return max(1, min(10_000, round(WEIGHT_PER_CPU * cpus)))


def cpu_quota_us(cpus: float) -> int:
    """The CFS quota per `CPU_PERIOD_US` for a ceiling of `cpus` (at least the kernel's 1 ms)."""
    return max(1000, round(CPU_PERIOD_US * cpus))
