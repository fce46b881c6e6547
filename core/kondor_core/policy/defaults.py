"""The engine's own data: HTCondor's default knob values, evaluation contexts, numeric knobs,
and the attributes the engine publishes in every slot ad.

Configuration text (the manual's helper macros such as `$(MINUTE)` and `$(CPUIdle)`, and
the `use POLICY : ...` templates) lives in one place, `kondor_core.config.templates`; the
config compiler expands it, and the engine receives expressions ready to evaluate.

Sources: "Examples of Policy Configuration" / "Default Policy" in the reference
(htcondor-execution-point-configuration.txt), the v7 "Default Policy Settings",
and HTCondor's param table.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

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

#: The default policy "as shipped with HTCondor": preemption disabled, always start jobs.
#: Knobs the manual leaves out carry HTCondor's own defaults (the condor_startd
#: configuration macros): MATCH_TIMEOUT 120 s, KILLING_TIMEOUT 30 s, CLAIM_WORKLIFE
#: 1200 s, POLLING_INTERVAL 5 s, UPDATE_INTERVAL 300 s, MaxJobRetirementTime 0, no
#: backfill, IS_OWNER FALSE (dedicated resources), RANK 0.
DEFAULT_POLICY: Mapping[str, str] = MappingProxyType(
    {
        "WANT_SUSPEND": "False",
        "WANT_VACATE": "False",
        "START": "True",
        "SUSPEND": "False",
        "CONTINUE": "True",
        "PREEMPT": "False",
        "MachineMaxVacateTime": "600",
        "KILL": "False",
        "IS_OWNER": "False",
        "RANK": "0",
        "MaxJobRetirementTime": "0",
        "CLAIM_WORKLIFE": "1200",
        "MATCH_TIMEOUT": "120",
        "KILLING_TIMEOUT": "30",
        "POLLING_INTERVAL": "5",
        "UPDATE_INTERVAL": "300",
        "ENABLE_BACKFILL": "False",
        "START_BACKFILL": "False",
        "EVICT_BACKFILL": "False",
    }
)

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
