"""The engine's own data: HTCondor's default knob values, evaluation contexts, numeric knobs,
and the attributes the engine publishes in every slot ad.

Configuration text (HTCondor's default for every knob, the manual's helper macros such as
`$(MINUTE)` and `$(CPUIdle)`, and the `use POLICY : ...` templates) lives in one place,
`kondor_core.config.templates`; the config compiler expands it, the engine's defaults are
read from it, and the engine receives expressions ready to evaluate.

Sources: "Examples of Policy Configuration" / "Default Policy" in the reference
(htcondor-execution-point-configuration.txt), the v7 "Default Policy Settings",
and HTCondor's param table.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from kondor_core.config import builtin_value

#: Attributes the engine publishes in every slot ad, beside the facts it is given
#: ("Startd ClassAd Attributes"). `CpuBusyTime` follows the manual: 0 while CpuBusy is
#: false, else the seconds since it became true; `CpuIsBusy` is CpuBusy's current value.
PUBLISHED_ATTRIBUTES: tuple[str, ...] = (
    "State",
    "Activity",
    "EnteredCurrentState",
    "EnteredCurrentActivity",
    "MyCurrentTime",
    "CurrentTime",
    "ClockMin",
    "ClockDay",
    "SlotID",
    "Name",
    "CurrentRank",
    "LastBenchmark",
    "CpuBusy",
    "CpuIsBusy",
    "CpuBusyTime",
    "JobStart",
    "JobId",
    "RemoteOwner",
    "RemoteUser",
    "TotalJobRunTime",
    "TotalJobSuspendTime",
    "PreemptingRank",
    "PreemptingOwner",
    "Requirements",
)

#: What the startd's code uses for a knob HTCondor's param table leaves unset: no RANK (0),
#: no retirement (0), and no backfill ("condor_startd Policy Configuration").
UNSET_DEFAULTS: Mapping[str, str] = MappingProxyType(
    {
        "RANK": "0",
        "MaxJobRetirementTime": "0",
        "START_BACKFILL": "False",
        "EVICT_BACKFILL": "False",
    }
)

#: Knobs whose default the engine takes from the configuration's built-in table.
_TABLE_KNOBS = (
    "WANT_SUSPEND",
    "WANT_VACATE",
    "START",
    "SUSPEND",
    "CONTINUE",
    "PREEMPT",
    "MachineMaxVacateTime",
    "KILL",
    "IS_OWNER",
    "CLAIM_WORKLIFE",
    "MATCH_TIMEOUT",
    "KILLING_TIMEOUT",
    "POLLING_INTERVAL",
    "UPDATE_INTERVAL",
    "ENABLE_BACKFILL",
)


def _default_policy() -> dict[str, str]:
    """HTCondor's defaults as the snippet language sees them (one table for both:
    kondor_core.config.templates.BUILTIN_MACROS, HTCondor's param table with Kondor's
    deliberate differences), expanded, then the code defaults of unset knobs."""
    policy = {}
    for knob in _TABLE_KNOBS:
        value = builtin_value(knob)
        if value is None:  # pragma: no cover - the drift test keeps these in the table
            raise RuntimeError(f"HTCondor's default for {knob} is missing from the table")
        policy[knob] = value
    return {**policy, **UNSET_DEFAULTS}


#: The default policy "as shipped with HTCondor": preemption disabled, always start jobs
#: (START True, PREEMPT False, MachineMaxVacateTime 10 * $(MINUTE), MATCH_TIMEOUT 120 s,
#: KILLING_TIMEOUT 30 s, CLAIM_WORKLIFE 1200 s, POLLING_INTERVAL 5 s, UPDATE_INTERVAL 300 s,
#: no backfill, IS_OWNER False), with the reference's WANT_VACATE False.
DEFAULT_POLICY: Mapping[str, str] = MappingProxyType(_default_policy())

#: Knobs the engine evaluates as ClassAd expressions in the slot ad, and where.
#: "local": against the slot ad alone. "job": with the claim's job ad as TARGET.
EXPRESSION_CONTEXT: Mapping[str, str] = MappingProxyType(
    {
        "IS_OWNER": "local",
        "RUNBENCHMARKS": "local",
        "START_BACKFILL": "local",
        "EVICT_BACKFILL": "local",
        "HIBERNATE": "local",
        "CLAIM_WORKLIFE": "local",
        # START is local in Owner, Unclaimed and Matched, against the job at claim time
        # and while Claimed.
        "START": "local or job",
        "RANK": "job",
        "SUSPEND": "job",
        "CONTINUE": "job",
        "PREEMPT": "job",
        "KILL": "job",
        "WANT_SUSPEND": "job",
        "WANT_VACATE": "job",
        "MaxJobRetirementTime": "job",
        "MachineMaxVacateTime": "job",
    }
)

#: Knobs with a `_VANILLA` variant consulted first for vanilla-universe jobs ("Claimed State").
VANILLA_VARIANTS: frozenset[str] = frozenset(
    {"SUSPEND", "CONTINUE", "PREEMPT", "KILL", "WANT_SUSPEND", "WANT_VACATE"}
)

#: Settings read as numbers or booleans rather than per-slot expressions.
NUMERIC_KNOBS: Mapping[str, float] = MappingProxyType(
    {
        "MATCH_TIMEOUT": 120.0,
        "KILLING_TIMEOUT": 30.0,
        "POLLING_INTERVAL": 5.0,
        "UPDATE_INTERVAL": 300.0,
        # The claim lease when the job has no JobLeaseDuration: MAX_CLAIM_ALIVES_MISSED *
        # ALIVE_INTERVAL ("The Claimed State and Leases").
        "MAX_CLAIM_ALIVES_MISSED": 6.0,
        "ALIVE_INTERVAL": 300.0,
    }
)

#: JobLeaseDuration's default: 40 minutes ("The Claimed State and Leases").
DEFAULT_JOB_LEASE_DURATION = 2400.0
