"""HTCondor's default startd policy, the manual's helper macros and the POLICY templates, as data.

These are configuration *text*, unexpanded (`$(MINUTE)` stays a reference), so the
config compiler can put them in its macro table below the admin's own settings,
exactly as HTCondor's defaults sit below the configuration files.

Sources: "Examples of Policy Configuration" / "Default Policy" in the reference
(htcondor-execution-point-configuration.txt), the v7 "Default Policy Settings",
and HTCondor's param table (src/condor_utils/param_info.in: `[$POLICY.DESKTOP]`,
`[$FEATURE.POLICY_EXPR_FRAGMENTS]`, `[$POLICY.ALWAYS_RUN_JOBS]`).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

#: The manual's helper macros ("These macros are here to help write legible expressions").
#: `MachineBusy` is printed in the manual with an unbalanced parenthesis; it is balanced here.
HELPER_MACROS: Mapping[str, str] = MappingProxyType(
    {
        "MINUTE": "60",
        "HOUR": "(60 * $(MINUTE))",
        "StateTimer": "(time() - EnteredCurrentState)",
        "ActivityTimer": "(time() - EnteredCurrentActivity)",
        "ActivationTimer": "(time() - JobStart)",
        "LastCkpt": "(time() - LastPeriodicCheckpoint)",
        "NonCondorLoadAvg": "(LoadAvg - CondorLoadAvg)",
        "BackgroundLoad": "0.3",
        "HighLoad": "0.5",
        "StartIdleTime": "15 * $(MINUTE)",
        "ContinueIdleTime": "5 * $(MINUTE)",
        "MaxSuspendTime": "10 * $(MINUTE)",
        "MaxVacateTime": "10 * $(MINUTE)",
        "KeyboardBusy": "KeyboardIdle < $(MINUTE)",
        "ConsoleBusy": "(ConsoleIdle  < $(MINUTE))",
        "CPUIdle": "$(NonCondorLoadAvg) <= $(BackgroundLoad)",
        "CPUBusy": "$(NonCondorLoadAvg) >= $(HighLoad)",
        "KeyboardNotBusy": "($(KeyboardBusy) == False)",
        "MachineBusy": "($(CPUBusy) || $(KeyboardBusy))",
        "JustCPU": "($(CPUBusy) && ($(KeyboardBusy) == False))",
        # Job-size and universe fragments from HTCondor's param table (used by the templates).
        "BigJob": "(TARGET.ImageSize >= (50 * 1024))",
        "MediumJob": "(TARGET.ImageSize >= (15 * 1024) && TARGET.ImageSize < (50 * 1024))",
        "SmallJob": "(TARGET.ImageSize <  (15 * 1024))",
        "VANILLA": "5",
        "IsVanilla": "(TARGET.JobUniverse == $(VANILLA))",
    }
)

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
        "MachineMaxVacateTime": "10 * $(MINUTE)",
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

#: `use POLICY : Desktop` (HTCondor's `[$POLICY.DESKTOP]`, with the POLICY_EXPR_FRAGMENTS it
#: pulls in). HTCondor 10 re-defined CpuBusyTime as a timestamp and added CpuBusyTimer; Kondor
#: publishes CpuBusyTime as the manual describes (a duration), so CpuBusyTimer reads it directly.
POLICY_DESKTOP: Mapping[str, str] = MappingProxyType(
    {
        "KeyboardBusy": "(KeyboardIdle < $(MINUTE))",
        "ConsoleBusy": "(ConsoleIdle  < $(MINUTE))",
        "KeyboardNotBusy": "($(KeyboardBusy) == False)",
        "JustCPU": "($(CPUBusy) && ($(KeyboardBusy) == False))",
        "MachineBusy": "($(CPUBusy) || $(KeyboardBusy))",
        "NonCondorLoadAvg": "(LoadAvg - CondorLoadAvg)",
        "CpuIdle": "($(NonCondorLoadAvg) <= $(BackgroundLoad))",
        "CpuBusy": "($(NonCondorLoadAvg) >= $(HighLoad))",
        "ActivationTimer": "ifThenElse(JobStart =!= UNDEFINED, (time() - JobStart), 0)",
        "CpuBusyTimer": "ifThenElse(CpuIsBusy =?= true, CpuBusyTime, 0)",
        "WANT_SUSPEND": "($(SmallJob) || $(KeyboardNotBusy) || $(IsVanilla) ) && ( $(SUSPEND))",
        "WANT_VACATE": "$(ActivationTimer) > 600 || $(IsVanilla)",
        "SUSPEND": "($(KeyboardBusy) || ( ($(CpuBusyTimer) > 120) && $(ActivationTimer) > 90))",
        "CONTINUE": (
            "($(CPUIdle) && ($(ActivityTimer) > 10) && (KeyboardIdle > $(ContinueIdleTime)))"
        ),
        "PREEMPT": (
            '(((Activity == "Suspended") && ($(ActivityTimer) > $(MaxSuspendTime)))'
            " || (SUSPEND && (WANT_SUSPEND == False)))"
        ),
        "START": (
            "((KeyboardIdle > $(StartIdleTime)) && ( $(CPUIdle) || "
            '(State != "Unclaimed" && State != "Owner")) )'
        ),
        "KILL": "False",
        "MaxJobRetirementTime": "0",
        "CLAIM_WORKLIFE": "",
        "IS_OWNER": "(START =?= False)",
    }
)

#: `use POLICY : Always_Run_Jobs` (no preemption; formerly TESTINGMODE).
POLICY_ALWAYS_RUN_JOBS: Mapping[str, str] = MappingProxyType(
    {
        "WANT_SUSPEND": "False",
        "WANT_VACATE": "True",
        "SUSPEND": "False",
        "CONTINUE": "True",
        "PREEMPT": "False",
        "START": "True",
        "KILL": "False",
        "MaxJobRetirementTime": "2147483647",
        "CLAIM_WORKLIFE": "1200",
    }
)

#: Configuration templates by `use` name (case-insensitive in HTCondor; keys upper-case here).
POLICY_TEMPLATES: Mapping[str, Mapping[str, str]] = MappingProxyType(
    {
        "POLICY:DESKTOP": POLICY_DESKTOP,
        "POLICY:ALWAYS_RUN_JOBS": POLICY_ALWAYS_RUN_JOBS,
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
