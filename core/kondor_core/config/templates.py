"""HTCondor's configuration templates (`use CATEGORY : Name`) and built-in macros, as data.

The knob definitions follow HTCondor's own `param_info.in` (the metaknobs at its
end, and the policy fragments such as `StateTimer` and `StartIdleTime`). Templates
are kept in HTCondor's configuration syntax so they go through the same parser as
a user's snippet; template arguments (`$(1)`, `$(2:default)`, `$(3+)`, `$(1?)`,
`$(0#)`) are substituted before parsing, as HTCondor's metaknobs do.

Every configuration starts from HTCondor's own defaults for every knob
(`htcondor_defaults`, generated from HTCondor's param table), with Kondor's
deliberate differences (`KONDOR_DEFAULTS`) on top: one table, `BUILTIN_MACROS`,
that the snippet language and the policy engine both read
(docs/config-differences.md lists the differences).

Machine-dependent values (DETECTED_CPUS, DETECTED_MEMORY, NUM_CPUS when it is not
set) are ClassAd attribute references, so that a value built from them (the
count of `use FEATURE : StaticSlots`, for one) is an expression the layout
evaluates against each node.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kondor_core.config.htcondor_defaults import HTCONDOR_DEFAULTS


@dataclass(frozen=True)
class Template:
    """One metaknob: its category and name as HTCondor spells them, and its body."""

    category: str
    name: str
    body: str
    description: str

    @property
    def label(self) -> str:
        return f"{self.category} : {self.name}"


#: Kondor's deliberate differences from HTCondor's defaults (docs/config-differences.md).
KONDOR_DEFAULTS: Mapping[str, str] = {
    "DOLLAR": "$",
    # The reference's "Default Policy" (HTCondor 25's param table has True).
    "WANT_VACATE": "False",
    # The manual's helper macros ("Examples of Policy Configuration": "These macros are here
    # to help write legible expressions"), available to every policy. `MachineBusy` is printed
    # there with an unbalanced parenthesis; it is balanced here. Names are case-insensitive, so
    # CPUIdle is also POLICY_EXPR_FRAGMENTS' CpuIdle (the fragments, when used, replace these).
    "StateTimer": "(time() - EnteredCurrentState)",
    "ActivityTimer": "(time() - EnteredCurrentActivity)",
    "ActivationTimer": "(time() - JobStart)",
    "LastCkpt": "(time() - LastPeriodicCheckpoint)",
    "NonCondorLoadAvg": "(LoadAvg - CondorLoadAvg)",
    "KeyboardBusy": "(KeyboardIdle < $(MINUTE))",
    "ConsoleBusy": "(ConsoleIdle  < $(MINUTE))",
    "CPUIdle": "($(NonCondorLoadAvg) <= $(BackgroundLoad))",
    "CPUBusy": "($(NonCondorLoadAvg) >= $(HighLoad))",
    "KeyboardNotBusy": "($(KeyboardBusy) == False)",
    "MachineBusy": "($(CPUBusy) || $(KeyboardBusy))",
    "JustCPU": "($(CPUBusy) && ($(KeyboardBusy) == False))",
    "IsWindows": "false",
    # What the node has, as attributes of its slot ads (the layout evaluates them).
    "DETECTED_CPUS": "DetectedCpus",
    "DETECTED_CORES": "DetectedCpus",
    "DETECTED_PHYSICAL_CPUS": "DetectedCpus",
    "DETECTED_MEMORY": "DetectedMemory",
    "NUM_CPUS": "TotalCpus",
    "MEMORY": "TotalMemory",
    # Paths the GPU templates mention; Kondor's agent discovers GPUs itself.
    "LIBEXEC": "/usr/libexec/condor",
    "GPU_MONITOR": "$(LIBEXEC)/condor_gpu_utilization",
    "GPU_DISCOVERY_EXTRA": "",
    # POLICY : UWCS_Desktop refers to it without defining it; HTCondor expands it to nothing.
    "UWCS_CLAIM_WORKLIFE": "",
}


def _merged(*tables: Mapping[str, str]) -> dict[str, str]:
    """Tables merged by case-insensitive name, a later one winning (with its spelling)."""
    merged: dict[str, tuple[str, str]] = {}
    for table in tables:
        for name, value in table.items():
            merged[name.upper()] = (name, value)
    return dict(merged.values())


#: Macros every configuration starts with: HTCondor's default for every knob, then
#: Kondor's differences (the manual's helper macros, and the machine facts as ClassAd
#: references).
BUILTIN_MACROS: Mapping[str, str] = _merged(HTCONDOR_DEFAULTS, KONDOR_DEFAULTS)

#: Built-ins whose value stands for "what the node has": a knob equal to one of
#: these is not an override (NUM_CPUS = $(DETECTED_CPUS) is the default).
MACHINE_REFERENCES = frozenset({"DetectedCpus", "DetectedMemory", "TotalCpus", "TotalMemory"})

_POLICY_EXPR_FRAGMENTS = """
PolicyExprFragments=1
KeyboardBusy=(KeyboardIdle < $(MINUTE))
ConsoleBusy=(ConsoleIdle  < $(MINUTE))
KeyboardNotBusy=($(KeyboardBusy) == False)
JustCPU=($(CPUBusy) && ($(KeyboardBusy) == False))
MachineBusy=($(CPUBusy) || $(KeyboardBusy))
NonCondorLoadAvg=(LoadAvg - CondorLoadAvg)
CpuIdle=($(NonCondorLoadAvg) <= $(BackgroundLoad))
CpuBusy=($(NonCondorLoadAvg) >= $(HighLoad))
ActivationTimer=ifThenElse(JobStart =!= UNDEFINED, (time() - JobStart), 0)
LastCkpt=(time() - LastPeriodicCheckpoint)
"""

# HTCondor 10 made CpuBusyTime a timestamp (with CpuBusyValue) and computes
# `CpuBusyTimer = IfThenElse(CpuBusyValue is 1, time() - CpuBusyTime, 0)`. Kondor's engine
# publishes CpuBusyTime as the manual's "Startd ClassAd Attributes" describe it, a duration
# (0 while CpuBusy is false, else the seconds since it became true), and CpuIsBusy as the
# current value, so CpuBusyTimer reads the duration directly: same meaning, same thresholds.
_DESKTOP = """
if ! defined PolicyExprFragments
  use FEATURE : POLICY_EXPR_FRAGMENTS
endif
STARTD_LATCH_EXPRS = $(STARTD_LATCH_EXPRS) CpuBusy
CpuBusyTimer=ifThenElse(CpuIsBusy =?= true, CpuBusyTime, 0)
WANT_SUSPEND=($(SmallJob) || $(KeyboardNotBusy) || $(IsVanilla) ) && ( $(SUSPEND))
WANT_VACATE=$(ActivationTimer) > 600 || $(IsVanilla)
SUSPEND=($(KeyboardBusy) || ( ($(CpuBusyTimer) > 120) && $(ActivationTimer) > 90))
CONTINUE=($(CPUIdle) && ($(ActivityTimer) > 10) && (KeyboardIdle > $(ContinueIdleTime)))
PREEMPT=(((Activity == "Suspended") && ($(ActivityTimer) > $(MaxSuspendTime))) \\
  || (SUSPEND && (WANT_SUSPEND == False)))
START=((KeyboardIdle > $(StartIdleTime)) && ( $(CPUIdle) || \\
  (State != "Unclaimed" && State != "Owner")) )
KILL=False
MaxJobRetirementTime=0
CLAIM_WORKLIFE=
SLOTS_CONNECTED_TO_KEYBOARD=1000000
SLOTS_CONNECTED_TO_CONSOLE=1000000
IS_OWNER=(START =?= False)
"""

_POLICY_HOURS_TO_START = """
WorkdayBeginHour=$(1:8)
WorkdayEndHour=$(2:12+5)
WorkdayBeginMinuteStartJobs=($(WorkdayBeginHour))*60 - 29.5
WorkdayBeginMinuteStopJobs=($(WorkdayBeginHour))*60 - 9.5
WorkdayEndMinute=($(WorkdayEndHour))*60 + 0.5
RunJobsHours=ClockMin < $INT(WorkdayBeginMinuteStartJobs) || ClockMin > $INT(WorkdayEndMinute)
NoJobsHours=ClockMin > $INT(WorkdayBeginMinuteStopJobs) && ClockMin < $INT(WorkdayEndMinute)
if $(3?)
  WorkweekFirstDay=$(3:1)
  WorkweekLastDay=$(4:5)
  IsWeekend=ClockDay < $INT(WorkweekFirstDay) || ClockDay > $INT(WorkWeekLastDay)
  IsWorkday=ClockDay >= $INT(WorkweekFirstDay) && ClockDay <= $INT(WorkWeekLastDay)
  RunJobsHours=$(IsWeekend) || $(RunJobsHours)
  NoJobsHours=$(IsWorkday) && $(NoJobsHours)
endif
RunJobsHours=($(RunJobsHours))
NoJobsHours=($(NoJobsHours))
"""

# POLICY : DESKTOP_IDLE and DESKTOP_HOURS, with Kondor's CpuBusyTimer (see _DESKTOP).
_EVICT_NOT_SUSPEND = """
WANT_SUSPEND=False
WANT_VACATE=True
SUSPEND=False
CONTINUE=True
KILL=False
MaxJobRetirementTime=0
CLAIM_WORKLIFE=
SLOTS_CONNECTED_TO_KEYBOARD=1000000
SLOTS_CONNECTED_TO_CONSOLE=1000000
IS_OWNER=(START =?= False)
"""

_DESKTOP_IDLE = (
    """
if $(1?)
  use FEATURE : POLICY_HOURS_TO_START($(1+))
endif
NonCondorLoadAvg=(LoadAvg - CondorLoadAvg)
CpuBusy=($(NonCondorLoadAvg) >= $(HighLoad))
CpuIdle=($(NonCondorLoadAvg) <= $(BackgroundLoad))
STARTD_LATCH_EXPRS = $(STARTD_LATCH_EXPRS) CpuBusy
CpuBusyTimer=ifThenElse(CpuIsBusy =?= true, CpuBusyTime, 0)
PreemptKeyboardIdleTime=60
PreemptCpuBusyTime=120
PREEMPT=(KeyboardIdle < $(PreemptKeyboardIdleTime)) || ($(CpuBusyTimer) > $(PreemptCpuBusyTime))
if defined NoJobsHours
  PREEMPT = ($(PREEMPT)) && ($(NoJobsHours))
endif
START=(KeyboardIdle > $(StartIdleTime)) && $(CPUIdle)
if defined RunJobsHours
  START = ($(START)) || ($(RunJobsHours))
endif
"""
    + _EVICT_NOT_SUSPEND
)

_DESKTOP_HOURS = (
    """
use FEATURE : POLICY_HOURS_TO_START($(1+))
NonCondorLoadAvg=(LoadAvg - CondorLoadAvg)
CpuBusy=($(NonCondorLoadAvg) >= $(HighLoad))
STARTD_LATCH_EXPRS = $(STARTD_LATCH_EXPRS) CpuBusy
CpuBusyTimer=ifThenElse(CpuIsBusy =?= true, CpuBusyTime, 0)
PREEMPT = $(NoJobsHours)
START = $(RunJobsHours)
"""
    + _EVICT_NOT_SUSPEND
)

_ALWAYS_RUN_JOBS = """
WANT_SUSPEND=False
WANT_VACATE=True
SUSPEND=False
CONTINUE=True
PREEMPT=False
START=True
KILL=False
PREEMPTION_REQUIREMENTS=False
NEGOTIATOR_CONSIDER_PREEMPTION=False
MaxJobRetirementTime=2147483647
CLAIM_WORKLIFE=1200
"""

_TESTINGMODE_POLICY_VALUES = """
TESTINGMODE_WANT_SUSPEND=False
TESTINGMODE_WANT_VACATE=True
TESTINGMODE_START=True
TESTINGMODE_SUSPEND=False
TESTINGMODE_CONTINUE=True
TESTINGMODE_PREEMPT=False
TESTINGMODE_KILL=False
TESTINGMODE_PERIODIC_CHECKPOINT=False
TESTINGMODE_PREEMPTION_REQUIREMENTS=False
TESTINGMODE_PREEMPTION_RANK=0
TESTINGMODE_CLAIM_WORKLIFE=1200
"""

_UWCS_DESKTOP_POLICY_VALUES = """
if ! defined PolicyExprFragments
  use FEATURE : POLICY_EXPR_FRAGMENTS
endif
STARTD_LATCH_EXPRS = $(STARTD_LATCH_EXPRS) CpuBusy
CpuBusyTimer=ifThenElse(CpuIsBusy =?= true, CpuBusyTime, 0)
UWCS_WANT_SUSPEND=( $(SmallJob) || $(KeyboardNotBusy) || $(IsVanilla) ) && ( $(SUSPEND) )
UWCS_WANT_VACATE=( $(ActivationTimer) > 10 * $(MINUTE) || $(IsVanilla) )
UWCS_START=( (KeyboardIdle > $(StartIdleTime)) && ( $(CPUIdle) || \\
  (State != "Unclaimed" && State != "Owner")) )
UWCS_SUSPEND=( $(KeyboardBusy) || ( ($(CpuBusyTimer) > 2 * $(MINUTE)) && $(ActivationTimer) > 90 ) )
UWCS_CONTINUE=( $(CPUIdle) && ($(ActivityTimer) > 10) && (KeyboardIdle > $(ContinueIdleTime)) )
UWCS_PREEMPT=( ((Activity == "Suspended") && ($(ActivityTimer) > $(MaxSuspendTime))) \\
  || (SUSPEND && (WANT_SUSPEND == False)) )
UWCS_MaxJobRetirementTime=0
UWCS_KILL=false
UWCS_PERIODIC_CHECKPOINT=$(LastCkpt) > (3 * $(HOUR) + $RANDOM_INTEGER(-30,30,1) * $(MINUTE) )
UWCS_NEGOTIATOR_PRE_JOB_RANK=(10000000 * My.Rank) + (1000000 * (RemoteOwner =?= UNDEFINED)) \\
  - (100000 * Cpus) - Memory
UWCS_NEGOTIATOR_POST_JOB_RANK=(RemoteOwner =?= UNDEFINED) * \\
  (ifthenElse(isUndefined(KFlops), 1000, Kflops) - SlotID - 1.0e10*(Offline=?=True))
UWCS_PREEMPTION_REQUIREMENTS=((SubmitterGroup =?= RemoteGroup) \\
  && ($(StateTimer) > (1 * $(HOUR))) \\
  && (RemoteUserPrio > TARGET.SubmitterUserPrio * 1.2)) || (MY.NiceUser == True)
UWCS_PREEMPTION_RANK=(RemoteUserPrio * 1000000) \\
  - ifThenElse(isUndefined(TotalJobRuntime), 0, TotalJobRuntime)
"""

_UWCS_DESKTOP = """
use FEATURE : UWCS_DESKTOP_POLICY_VALUES
WANT_SUSPEND=$(UWCS_WANT_SUSPEND)
WANT_VACATE=$(UWCS_WANT_VACATE)
SUSPEND=$(UWCS_SUSPEND)
CONTINUE=$(UWCS_CONTINUE)
PREEMPT=$(UWCS_PREEMPT)
START=$(UWCS_START)
KILL=$(UWCS_KILL)
PERIODIC_CHECKPOINT=$(UWCS_PERIODIC_CHECKPOINT)
PREEMPTION_REQUIREMENTS=$(UWCS_PREEMPTION_REQUIREMENTS)
PREEMPTION_RANK=$(UWCS_PREEMPTION_RANK)
NEGOTIATOR_PRE_JOB_RANK=$(UWCS_NEGOTIATOR_PRE_JOB_RANK)
NEGOTIATOR_POST_JOB_RANK=$(UWCS_NEGOTIATOR_POST_JOB_RANK)
MaxJobRetirementTime=$(UWCS_MaxJobRetirementTime)
CLAIM_WORKLIFE=$(UWCS_CLAIM_WORKLIFE)
SLOTS_CONNECTED_TO_KEYBOARD=1024*1024
IS_OWNER=(START =?= False)
"""

_LIMIT_JOB_RUNTIMES = """
MAX_JOB_RUNTIME=$(1:24*3600)
MaxJobRetirementTime=$(MAX_JOB_RUNTIME)+120
PREEMPT=(Activity == "Busy") && ((time() - EnteredCurrentActivity) > $(MAX_JOB_RUNTIME))
"""

_PREEMPT_IF = """
if !$(1?)
  error : use POLICY : PREEMPT_IF requires an argument: the name of a macro holding the trigger
endif
if defined PREEMPT
  PREEMPT = $($(1)) || $(PREEMPT)
else
  PREEMPT = $($(1))
endif
MAXJOBRETIREMENTTIME = ifthenelse($($(1)),-1,$(MAXJOBRETIREMENTTIME:0))
if defined WANT_SUSPEND
  WANT_SUSPEND = $($(1)) =!= true && $(WANT_SUSPEND)
else
  WANT_SUSPEND = $($(1)) =!= true
endif
"""

_WANT_HOLD_IF = """
use POLICY : PREEMPT_IF($(1))
if ! $(3?)
  error : use POLICY : WANT_HOLD_IF requires 3 arguments: policy_variable, subcode, reason_text
endif
if defined WANT_HOLD
  WANT_HOLD = (JobUniverse != 1 && $($(1))) || $(WANT_HOLD)
else
  WANT_HOLD = (JobUniverse != 1 && $($(1)))
endif
WANT_HOLD_SUBCODE = ifThenElse($($(1)), $(2) , $(WANT_HOLD_SUBCODE:UNDEFINED))
WANT_HOLD_REASON = ifThenElse($($(1)), "$(3+)", $(WANT_HOLD_REASON:UNDEFINED))
"""

_PREEMPT_IF_RUNTIME_EXCEEDS = """
MAX_JOB_RUNTIME = $(1:24*3600)
PREEMPT_RUNTIME_EXCEEDS = (JobState == "Running") \\
  && ((time() - JobCurrentStartDate) > $(MAX_JOB_RUNTIME))
use POLICY : PREEMPT_IF( PREEMPT_RUNTIME_EXCEEDS )
"""

_HOLD_IF_RUNTIME_EXCEEDS = """
MAX_JOB_RUNTIME = $(1:24*3600)
HOLD_REASON_RUNTIME_EXCEEDS = runtime exceeded maximum ($(MAX_JOB_RUNTIME) seconds)
HOLD_RUNTIME_EXCEEDS = (JobState == "Running") \\
  && ((time() - JobCurrentStartDate) > $(MAX_JOB_RUNTIME))
use POLICY : WANT_HOLD_IF( HOLD_RUNTIME_EXCEEDS, $(HOLD_SUBCODE_RUNTIME_EXCEEDS:103), \\
  $(HOLD_REASON_RUNTIME_EXCEEDS) )
"""

_STARTD_PUBLISH_CPUS_USAGE = """
CpusUsage = ifthenelse(TotalLoadAvg > 0.0 && Activity!="Idle", \\
  CondorLoadAvg/TotalLoadAvg*MIN({TotalLoadAvg, $(DETECTED_CORES)}), 0)
STARTD_ATTRS = $(STARTD_ATTRS) CpusUsage
"""

_PREEMPT_IF_CPUS_EXCEEDED = """
use POLICY : STARTD_PUBLISH_CpusUsage
CPU_EXCEEDED = (CpusUsage > Cpus + 0.8)
use POLICY : PREEMPT_IF(CPU_EXCEEDED)
"""

_HOLD_IF_CPUS_EXCEEDED = """
use POLICY : STARTD_PUBLISH_CpusUsage
CPU_EXCEEDED = (CpusUsage > Cpus + 0.8)
HOLD_REASON_CPU_EXCEEDED = CPU usage exceeded request_cpus
use POLICY : WANT_HOLD_IF( CPU_EXCEEDED, $(HOLD_SUBCODE_CPU_EXCEEDED:101), \\
  $(HOLD_REASON_CPU_EXCEEDED) )
"""

_PREEMPT_IF_DISK_EXCEEDED = """
DISK_EXCEEDED = (JobUniverse != 13 && DiskUsage =!= UNDEFINED && DiskUsage > Disk)
use POLICY : PREEMPT_IF(DISK_EXCEEDED)
"""

_HOLD_IF_DISK_EXCEEDED = """
DISK_EXCEEDED = (JobUniverse != 13 && DiskUsage =!= UNDEFINED && DiskUsage > Disk)
HOLD_REASON_DISK_EXCEEDED = disk usage exceeded allocated disk
use POLICY : WANT_HOLD_IF( DISK_EXCEEDED, $(HOLD_SUBCODE_DISK_EXCEEDED:104), \\
  $(HOLD_REASON_DISK_EXCEEDED) )
"""

_PREEMPT_IF_MEMORY_EXCEEDED = """
MEMORY_EXCEEDED = (JobUniverse != 13 && MemoryUsage =!= UNDEFINED && MemoryUsage > Memory)
use POLICY : PREEMPT_IF(MEMORY_EXCEEDED)
"""

_HOLD_IF_MEMORY_EXCEEDED = """
MEMORY_EXCEEDED = (JobUniverse != 13 && MemoryUsage =!= UNDEFINED && MemoryUsage > Memory)
HOLD_REASON_MEMORY_EXCEEDED = memory usage exceeded request_memory
use POLICY : WANT_HOLD_IF( MEMORY_EXCEEDED, $(HOLD_SUBCODE_MEMORY_EXCEEDED:102), \\
  $(HOLD_REASON_MEMORY_EXCEEDED) )
"""

_GPUS = """
MACHINE_RESOURCE_INVENTORY_GPUs=$(LIBEXEC)/condor_gpu_discovery $(1) -properties \\
  $(GPU_DISCOVERY_EXTRA)
ENVIRONMENT_FOR_AssignedGPUs=GPU_DEVICE_ORDINAL=/(CUDA|OCL)//  CUDA_VISIBLE_DEVICES=/CUDA//
ENVIRONMENT_VALUE_FOR_UnAssignedGPUs=10000
use FEATURE : GPUsMonitor
"""

_MONITOR = """
if ! $(5?)
  error : use FEATURE : Monitor requires five or more arguments
endif
STARTD_CRON_JOBLIST = $(STARTD_CRON_JOBLIST) $(1)_MONITOR
STARTD_CRON_$(1)_MONITOR_MODE = $(2)
STARTD_CRON_$(1)_MONITOR_PERIOD = $(3)
STARTD_CRON_$(1)_MONITOR_EXECUTABLE = $(4)
STARTD_CRON_$(1)_MONITOR_METRICS = $(5+)
"""

_GPUS_MONITOR = """
use FEATURE : Monitor( GPUs, WaitForExit, 300, $(GPU_MONITOR), SUM:GPUs, PEAK:GPUsMemory )
STARTD_CRON_GPUs_MONITOR_CONDITION = TotalGPUs > 0 && OpSys =!= "WINDOWS"
STARTD_JOB_ATTRS = $(STARTD_JOB_ATTRS) GPUsUsage GPUsMemoryUsage
"""

# The daemon cron hooks ("Daemon ClassAd Hooks"); $(1) is STARTD_CRON (or SCHEDD_CRON, whose
# knobs Kondor reports and ignores), $(2) the job's tag.
_PERIODIC_CRON_HOOK = """
if ! $(4?)
  error : use FEATURE : PeriodicCronHook requires at least 4 arguments: \
STARTD_CRON | SCHEDD_CRON, tag, period, hook_exe [,hook_args]
endif
$(1)_JOBLIST=$($(1)_JOBLIST) $(2)
$(1)_$(2)_MODE=Periodic
$(1)_$(2)_PERIOD=$(3)
$(1)_$(2)_EXECUTABLE=$(4)
if $(5?)
  $(1)_$(2)_ARGS=$(5)
endif
"""

_ONE_SHOT_CRON_HOOK = """
if ! $(3?)
  error : use FEATURE : OneShotCronHook requires at least 3 arguments: \
STARTD_CRON | SCHEDD_CRON, tag, hook_exe [,hook_args]
endif
$(1)_JOBLIST=$($(1)_JOBLIST) $(2)
$(1)_$(2)_MODE=OneShot
$(1)_$(2)_KILL=true
$(1)_$(2)_RECONFIG_RERUN=true
$(1)_$(2)_EXECUTABLE=$(3)
if $(4?)
  $(1)_$(2)_ARGS=$(4)
endif
"""

_CONTINUOUS_CRON_HOOK = """
if ! $(3?)
  error : use FEATURE : ContinuousCronHook requires at least 3 arguments: \
STARTD_CRON | SCHEDD_CRON, tag, hook_exe [,hook_args]
endif
$(1)_JOBLIST=$($(1)_JOBLIST) $(2)
$(1)_$(2)_MODE=WaitForExit
$(1)_$(2)_PERIOD=0
$(1)_$(2)_EXECUTABLE=$(3)
if $(4?)
  $(1)_$(2)_ARGS=$(4)
endif
"""

_PARTITIONABLE_SLOT = """
NUM_SLOTS_TYPE_$(1:1)=1
SLOT_TYPE_$(1:1)_PARTITIONABLE=true
SLOT_TYPE_$(1:1)=$(2+:100%)
"""

# As in HTCondor: the second SLOT_TYPE line wins, so with no allocation argument
# the type's share is empty (auto), and its slots divide the machine evenly.
_STATIC_SLOTS = """
NUM_SLOTS_TYPE_$(1:1)=$(2:$(NUM_CPUS))
SLOT_TYPE_$(1:1)_PARTITIONABLE=false
SLOT_TYPE_$(1:1)=$(3+:1/$(NUM_SLOTS_TYPE_$(1:1)))
SLOT_TYPE_$(1:1)=$(3+)
"""

_ALL = (
    Template(
        "FEATURE", "POLICY_EXPR_FRAGMENTS", _POLICY_EXPR_FRAGMENTS, "desktop policy fragments"
    ),
    Template("FEATURE", "UWCS_DESKTOP_POLICY_VALUES", _UWCS_DESKTOP_POLICY_VALUES, "UWCS_* values"),
    Template("FEATURE", "TESTINGMODE_POLICY_VALUES", _TESTINGMODE_POLICY_VALUES, "TESTINGMODE_*"),
    Template("FEATURE", "GPUs", _GPUS, "detect GPUs and offer them as a custom resource"),
    Template("FEATURE", "GPUsMonitor", _GPUS_MONITOR, "monitor GPU usage"),
    Template("FEATURE", "Monitor", _MONITOR, "a custom machine resource monitor"),
    Template("FEATURE", "PeriodicCronHook", _PERIODIC_CRON_HOOK, "a periodic cron hook"),
    Template("FEATURE", "OneShotCronHook", _ONE_SHOT_CRON_HOOK, "a one-shot cron hook"),
    Template("FEATURE", "ContinuousCronHook", _CONTINUOUS_CRON_HOOK, "a continuous cron hook"),
    Template(
        "FEATURE",
        "StartdCronPeriodic",
        "use FEATURE : PeriodicCronHook(STARTD_CRON, $(0))",
        "a periodic startd cron job: tag, period, executable [, arguments]",
    ),
    Template(
        "FEATURE",
        "StartdCronOneShot",
        "use FEATURE : OneShotCronHook(STARTD_CRON, $(0))",
        "a one-shot startd cron job: tag, executable [, arguments]",
    ),
    Template(
        "FEATURE",
        "StartdCronContinuous",
        "use FEATURE : ContinuousCronHook(STARTD_CRON, $(0))",
        "a continuous startd cron job: tag, executable [, arguments]",
    ),
    Template("FEATURE", "PartitionableSlot", _PARTITIONABLE_SLOT, "one partitionable slot"),
    Template("FEATURE", "StaticSlots", _STATIC_SLOTS, "static slots, one per core by default"),
    Template("POLICY", "Desktop", _DESKTOP, "cycle scavenging on desktop computers"),
    Template("POLICY", "Always_Run_Jobs", _ALWAYS_RUN_JOBS, "a no-preemption policy"),
    Template(
        "FEATURE",
        "POLICY_HOURS_TO_START",
        _POLICY_HOURS_TO_START,
        "work hours: begin hour, end hour [, first and last workday]",
    ),
    Template("POLICY", "Desktop_Idle", _DESKTOP_IDLE, "run jobs when the desktop is idle"),
    Template("POLICY", "Desktop_Hours", _DESKTOP_HOURS, "run jobs outside work hours"),
    Template("POLICY", "UWCS_Desktop", _UWCS_DESKTOP, "run jobs only when the user is away"),
    Template("POLICY", "Limit_Job_Runtimes", _LIMIT_JOB_RUNTIMES, "limit job runtimes"),
    Template("POLICY", "PREEMPT_IF", _PREEMPT_IF, "preempt when a macro's trigger is true"),
    Template("POLICY", "WANT_HOLD_IF", _WANT_HOLD_IF, "hold when a macro's trigger is true"),
    Template("POLICY", "Preempt_If_Runtime_Exceeds", _PREEMPT_IF_RUNTIME_EXCEEDS, "runtime"),
    Template("POLICY", "Hold_If_Runtime_Exceeds", _HOLD_IF_RUNTIME_EXCEEDS, "runtime"),
    Template("POLICY", "Startd_Publish_CpusUsage", _STARTD_PUBLISH_CPUS_USAGE, "CpusUsage"),
    Template("POLICY", "Preempt_If_Cpus_Exceeded", _PREEMPT_IF_CPUS_EXCEEDED, "cpus"),
    Template("POLICY", "Hold_If_Cpus_Exceeded", _HOLD_IF_CPUS_EXCEEDED, "cpus"),
    Template("POLICY", "Preempt_If_Disk_Exceeded", _PREEMPT_IF_DISK_EXCEEDED, "disk"),
    Template("POLICY", "Hold_If_Disk_Exceeded", _HOLD_IF_DISK_EXCEEDED, "disk"),
    Template("POLICY", "Preempt_If_Memory_Exceeded", _PREEMPT_IF_MEMORY_EXCEEDED, "memory"),
    Template("POLICY", "Hold_If_Memory_Exceeded", _HOLD_IF_MEMORY_EXCEEDED, "memory"),
)

#: (CATEGORY, NAME) upper-cased -> template; HTCondor matches both case-insensitively.
TEMPLATES: Mapping[tuple[str, str], Template] = {
    (template.category.upper(), template.name.upper()): template for template in _ALL
}


def known_templates() -> str:
    """The templates Kondor knows, for error messages."""
    return ", ".join(sorted(template.label for template in _ALL))
