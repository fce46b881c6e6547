"""compile_policy against HTCondor's own configuration engine (`htcondor2.param`).

Every example configuration (the reference's, and the condorConfig of each SlotPolicy
under examples/) is written to a file and read by HTCondor in a subprocess: CONDOR_CONFIG
names the file and `htcondor2.reload_config()` reads the next one, so one subprocess reads
them all. For every knob the snippet sets in either engine, what Kondor's compiled policy
has (fields, expressions, macros, and the snippet table for the rest) is compared with
HTCondor's expansion: as ClassAd expressions where both parse (classad2's unparsed form,
or equal constant values such as `10 * 60` and HTCondor's typed `600`), otherwise as text.
Kondor's machine facts (`$(DETECTED_CPUS)` is the slot attribute DetectedCpus, see
kondor_core.config.templates) are replaced by the values HTCondor detected, on both sides.

The differences that remain are listed in DIFFERENCES, each with the reason and a check
that it is that difference and no other; docs/config-differences.md says the same for
readers. An unlisted difference fails, and so does a listed one that has gone away.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from collections import ChainMap
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import classad2
import pytest
import yaml

from kondor_core.api.slotpolicy import SlotPolicySpec
from kondor_core.config import EffectivePolicy, PolicyError, compile_policy, parse_snippet
from kondor_core.config.snippet import MacroError

_ROOT = Path(__file__).resolve().parents[3]

# -- the examples ----------------------------------------------------------------------------

_EP = "execution-point-configuration"

#: The reference's configuration examples that Kondor accepts, verbatim unless the comment
#: says otherwise (reference file without `htcondor-` and `.txt`, then the section).
REFERENCE_EXAMPLES: dict[str, str] = {
    # "Dividing System Resources in Multi-core Machines" (NUM_SLOTS_TYPE_1 = 1 added so
    # the slot type makes slots; without it Kondor leaves the type out, as HTCondor does).
    f"{_EP}: mem=64": "SLOT_TYPE_1 = mem=64\nNUM_SLOTS_TYPE_1 = 1",
    f"{_EP}: mem=1/2": "SLOT_TYPE_1 = mem=1/2\nNUM_SLOTS_TYPE_1 = 1",
    f"{_EP}: mem=50%": "SLOT_TYPE_1 = mem=50%\nNUM_SLOTS_TYPE_1 = 1",
    f"{_EP}: mem=auto": "SLOT_TYPE_1 = mem=auto\nNUM_SLOTS_TYPE_1 = 1",
    f"{_EP}: slot types 1-6": """
SLOT_TYPE_1 = cpus=2, ram=128, swap=25%, disk=1/2
SLOT_TYPE_2 = cpus=1/2, memory=128, virt=25%, disk=50%
SLOT_TYPE_3 = c=1/2, m=50%, v=1/4, disk=1/2
SLOT_TYPE_4 = c=25%, m=64, v=1/4, d=25%
SLOT_TYPE_5 = 25%
SLOT_TYPE_6 = 1/4
NUM_SLOTS_TYPE_1 = 1
NUM_SLOTS_TYPE_2 = 1
NUM_SLOTS_TYPE_3 = 1
NUM_SLOTS_TYPE_4 = 1
NUM_SLOTS_TYPE_5 = 1
NUM_SLOTS_TYPE_6 = 1
""",
    f"{_EP}: auto, listed": "SLOT_TYPE_1 = cpus=1, ram=1/2, swap=50%\nNUM_SLOTS_TYPE_1 = 1",
    f"{_EP}: auto, blanket": "SLOT_TYPE_1 = cpus=1, disk=auto, 50%\nNUM_SLOTS_TYPE_1 = 1",
    f"{_EP}: cogs and actuators": """
MACHINE_RESOURCE_Cogs = 16
MACHINE_RESOURCE_actuator = 8

if defined MACHINE_RESOURCE_NAMES
  MACHINE_RESOURCE_NAMES = $(MACHINE_RESOURCE_NAMES) Cogs actuator
endif

# declare one partitionable slot with half of the Cogs, 6 actuators, and
# 50% of all other resources:
SLOT_TYPE_1 = cogs=50%,actuator=6,50%
SLOT_TYPE_1_PARTITIONABLE = TRUE
NUM_SLOTS_TYPE_1 = 1

# declare two static slots, each with 25% of the Cogs, 1 actuator, and
# 25% of all other resources:
SLOT_TYPE_2 = cogs=25%,actuator=1,25%
SLOT_TYPE_2_PARTITIONABLE = FALSE
NUM_SLOTS_TYPE_2 = 2
""",
    f"{_EP}: a SUSPEND per slot": """
SUSPEND = ( (SlotID == 1) && (PolicyForSlot1) ) || \\
          ( (SlotID == 2) && (PolicyForSlot2) )
""",
    f"{_EP}: one partitionable slot": """
NUM_SLOTS = 1
NUM_SLOTS_TYPE_1 = 1
SLOT_TYPE_1 = 100%
SLOT_TYPE_1_PARTITIONABLE = TRUE
""",
    f"{_EP}: pslot preemption": "ALLOW_PSLOT_PREEMPTION = True",
    f"{_EP}: job defaults": """
JOB_DEFAULT_REQUESTCPUS = 1
JOB_DEFAULT_REQUESTMEMORY = \\
    ifThenElse(MemoryUsage =!= UNDEFINED, MemoryUsage, 1)
JOB_DEFAULT_REQUESTDISK = DiskUsage
""",
    f"{_EP}: PID namespaces": "USE_PID_NAMESPACES = True",
    f"{_EP}: GID tracking": (
        "USE_GID_PROCESS_TRACKING = True\nMIN_TRACKING_GID = 750\nMAX_TRACKING_GID = 757"
    ),
    f"{_EP}: jobs always run": "START = True\nSUSPEND = False\nPREEMPT = False\nKILL = False",
    f"{_EP}: RANK, the group": (
        'RANK = Owner == "coltrane" || Owner == "tyner" \\\n'
        '    || Owner == "garrison" || Owner == "jones"'
    ),
    f"{_EP}: RANK, bass": (
        'RANK = (Owner == "coltrane") + (Owner == "tyner") \\\n'
        '    + ((Owner == "garrison") * 10) + (Owner == "jones")'
    ),
    f"{_EP}: RANK = ImageSize": "RANK = ImageSize",
    f"{_EP}: RANK, coltrane": 'RANK = (Owner == "coltrane" * 1000000000000) + Imagesize',
    f"{_EP}: START, and": 'START = KeyboardIdle > 15 * $(MINUTE) && Owner == "coltrane"',
    f"{_EP}: START, or": 'START = KeyboardIdle > 15 * $(MINUTE) || Owner == "coltrane"',
    f"{_EP}: RunBenchmarks": "RunBenchmarks = (time() - LastBenchmark) >= (4 * $(HOUR))",
    f"{_EP}: claimed expressions": """
WANT_SUSPEND            = True
WANT_VACATE             = $(ActivationTimer) > 10 * $(MINUTE)
SUSPEND                 = $(KeyboardBusy) || $(CPUBusy)
""",
    f"{_EP}: vanilla expressions": """
WANT_SUSPEND_VANILLA    = True
WANT_VACATE_VANILLA     = True
SUSPEND_VANILLA         = $(KeyboardBusy) || $(CPUBusy)
""",
    f"{_EP}: backfill": """
# Turn on backfill functionality, and use BOINC
ENABLE_BACKFILL = TRUE
BACKFILL_SYSTEM = BOINC

# Spawn a backfill job if we've been Unclaimed for more than 5
# minutes
START_BACKFILL = $(StateTimer) > (5 * $(MINUTE))

# Evict a backfill job if the machine is busy (based on keyboard
# activity or cpu load)
EVICT_BACKFILL = $(MachineBusy)
""",
    # "Default Policy", the macros and the policy as one file (the reference prints
    # MachineBusy with an unbalanced parenthesis; both engines keep the text).
    f"{_EP}: default policy": """
##  These macros are here to help write legible expressions:
MINUTE          = 60
HOUR            = (60 * $(MINUTE))
StateTimer      = (time() - EnteredCurrentState)
ActivityTimer   = (time() - EnteredCurrentActivity)
ActivationTimer = (time() - JobStart)

NonCondorLoadAvg        = (LoadAvg - CondorLoadAvg)
BackgroundLoad          = 0.3
HighLoad                = 0.5
StartIdleTime           = 15 * $(MINUTE)
ContinueIdleTime        = 5 * $(MINUTE)
MaxSuspendTime          = 10 * $(MINUTE)

KeyboardBusy            = KeyboardIdle < $(MINUTE)
ConsoleBusy             = (ConsoleIdle  < $(MINUTE))
CPUIdle                = $(NonCondorLoadAvg) <= $(BackgroundLoad)
CPUBusy                = $(NonCondorLoadAvg) >= $(HighLoad)
KeyboardNotBusy         = ($(KeyboardBusy) == False)
MachineBusy             = ($(CPUBusy) || $(KeyboardBusy)

WANT_SUSPEND         = False
WANT_VACATE          = False
START                = True
SUSPEND              = False
CONTINUE             = True
PREEMPT              = False
# Kill jobs that take too long leaving gracefully.
MachineMaxVacateTime = 10 * $(MINUTE)
KILL                 = False
""",
    f"{_EP}: time of day": """
WorkHours = ( (ClockMin >= 480 && ClockMin < 1020) && \\
              (ClockDay > 0 && ClockDay < 6) )
AfterHours = ( (ClockMin < 480 || ClockMin >= 1020) || \\
               (ClockDay == 0 || ClockDay == 6) )
# Only start jobs after hours.
START = $(AfterHours)

# Consider the machine busy during work hours, or if the keyboard or
# CPU are busy.
MachineBusy = ( $(WorkHours) || $(CPUBusy) || $(KeyboardBusy) )
""",
    # "Desktop/Non-Desktop Policy", with the desktops' `IsDesktop = True` line at the end.
    f"{_EP}: desktop/non-desktop, a desktop": """
# If "IsDesktop" is configured, make it an attribute of the machine ClassAd.
STARTD_ATTRS = IsDesktop

# Only consider starting jobs if:
# 1) the load average is low enough OR the machine is currently
#    running an HTCondor job
# 2) AND the user is not active (if a desktop)
START = ( ($(CPUIdle) || (State != "Unclaimed" && State != "Owner")) \\
          && (IsDesktop =!= True || (KeyboardIdle > $(StartIdleTime))) )

# Suspend (instead of vacating/killing) for the following cases:
WANT_SUSPEND = ( $(SmallJob) || $(JustCpu) \\
                 || $(IsVanilla) )

# When preempting, vacate (instead of killing) in the following cases:
WANT_VACATE  = ( $(ActivationTimer) > 10 * $(MINUTE) \\
                 || $(IsVanilla) )

# Suspend jobs if:
# 1) The CPU has been busy for more than 2 minutes, AND
# 2) the job has been running for more than 90 seconds
# 3) OR suspend if this is a desktop and the user is active
SUSPEND = ( ((CpuBusyTime > 2 * $(MINUTE)) && ($(ActivationTimer) > 90)) \\
            || ( IsDesktop =?= True && $(KeyboardBusy) ) )

# Continue jobs if:
# 1) the CPU is idle, AND
# 2) we've been suspended more than 5 minutes AND
# 3) the keyboard has been idle for long enough (if this is a desktop)
CONTINUE = ( $(CPUIdle) && ($(ActivityTimer) > 300) \\
             && (IsDesktop =!= True || (KeyboardIdle > $(ContinueIdleTime))) )

# Preempt jobs if:
# 1) The job is suspended and has been suspended longer than we want
# 2) OR, we don't want to suspend this job, but the conditions to
#    suspend jobs have been met (someone is using the machine)
PREEMPT = ( ((Activity == "Suspended") && \\
            ($(ActivityTimer) > $(MaxSuspendTime))) \\
           || (SUSPEND && (WANT_SUSPEND == False)) )

# Replace 0 in the following expression with whatever amount of
# retirement time you want dedicated machines to provide.  The other part
# of the expression forces the whole expression to 0 on desktop
# machines.
MAXJOBRETIREMENTTIME = (IsDesktop =!= True) * 0

# Kill jobs if they have taken too long to vacate gracefully
MachineMaxVacateTime = 10 * $(MINUTE)
KILL = False

IsDesktop = True
""",
    f"{_EP}: interactive RANK": "RANK = ( (MY.SlotID == 1) && (TARGET.InteractiveJob =?= True) )",
    f"{_EP}: interactive START": (
        "START = ( (MY.SlotID == 1) && (TARGET.InteractiveJob =?= True) )"
    ),
    f"{_EP}: GenomeDBPath": (
        'GenomeDBPath = "/path/to/db"\nSTARTD_ATTRS = GenomeDBPath $(STARTD_ATTRS)'
    ),
    f"{_EP}: per-slot attribute values": """
favorite_color = "blue"
favorite_season = "spring"
STARTD_ATTRS = favorite_color, favorite_season
SLOT2_favorite_color = "green"
SLOT3_favorite_season = "summer"
""",
    # "Daemon ClassAd Hooks", the complete example, with $(ROOT) and $(RELEASE_DIR) (which
    # an HTCondor installation defines and Kondor does not) written out as /usr/local/condor.
    f"{_EP}: startd cron, benchmarks and schedd cron": """
#
# Startd Cron Stuff
#
# helper variable to use in identifying locations of files
MODULES = /usr/local/condor/modules

# Startd Cron Stuff
STARTD_CRON_CONFIG_VAL = /usr/local/condor/bin/condor_config_val
STARTD_CRON_MAX_JOB_LOAD = 0.2
STARTD_CRON_JOBLIST =

# Enable the output of non-zero exit codes to the log
STARTD_CRON_LOG_NON_ZERO_EXIT = true

# The test job
STARTD_CRON_JOBLIST = $(STARTD_CRON_JOBLIST) test
STARTD_CRON_TEST_MODE = OneShot
STARTD_CRON_TEST_RECONFIG_RERUN = True
STARTD_CRON_TEST_PREFIX = test_
STARTD_CRON_TEST_EXECUTABLE = $(MODULES)/test
STARTD_CRON_TEST_KILL = True
STARTD_CRON_TEST_ARGS = abc 123
STARTD_CRON_TEST_SLOTS = 1
STARTD_CRON_TEST_JOB_LOAD = 0.01

# job 'date'
STARTD_CRON_JOBLIST = $(STARTD_CRON_JOBLIST) date
STARTD_CRON_DATE_MODE = Periodic
STARTD_CRON_DATE_EXECUTABLE = $(MODULES)/date
STARTD_CRON_DATE_PERIOD = 15s
STARTD_CRON_DATE_JOB_LOAD = 0.01

# Job 'foo'
STARTD_CRON_JOBLIST = $(STARTD_CRON_JOBLIST) foo
STARTD_CRON_FOO_EXECUTABLE = $(MODULES)/foo
STARTD_CRON_FOO_PREFIX = Foo
STARTD_CRON_FOO_MODE = Periodic
STARTD_CRON_FOO_PERIOD = 10m
STARTD_CRON_FOO_JOB_LOAD = 0.2

#
# Benchmark Stuff
#
BENCHMARKS_JOBLIST = mips kflops

# MIPS benchmark
BENCHMARKS_MIPS_EXECUTABLE = $(LIBEXEC)/condor_mips
BENCHMARKS_MIPS_JOB_LOAD = 1.0

# KFLOPS benchmark
BENCHMARKS_KFLOPS_EXECUTABLE = $(LIBEXEC)/condor_kflops
BENCHMARKS_KFLOPS_JOB_LOAD = 1.0

#
# Schedd Cron Stuff
#
SCHEDD_CRON_CONFIG_VAL = /usr/local/condor/bin/condor_config_val
SCHEDD_CRON_JOBLIST =

# Test job
SCHEDD_CRON_JOBLIST = $(SCHEDD_CRON_JOBLIST) test
SCHEDD_CRON_TEST_MODE = OneShot
SCHEDD_CRON_TEST_RECONFIG_RERUN = True
SCHEDD_CRON_TEST_PREFIX = test_
SCHEDD_CRON_TEST_EXECUTABLE = $(MODULES)/test
SCHEDD_CRON_TEST_PERIOD = 5m
SCHEDD_CRON_TEST_KILL = True
SCHEDD_CRON_TEST_ARGS = abc 123
""",
    f"{_EP}: docker volumes": """
DOCKER_VOLUMES = SOME_DIR, ANOTHER_DIR
DOCKER_VOLUME_DIR_SOME_DIR = /path1
DOCKER_VOLUME_DIR_SOME_DIR_MOUNT_IF = WantSomeDirMounted && Owner == "smith"
DOCKER_VOLUME_DIR_ANOTHER_DIR = /path/to/no2
DOCKER_MOUNT_VOLUMES = SOME_DIR, ANOTHER_DIR
""",
    f"{_EP}: docker networks": "DOCKER_NETWORKS = some_virtual_network, another_network",
    f"{_EP}: docker shm, half the memory": "DOCKER_SHM_SIZE = Memory * 1024 * 1024 / 2",
    f"{_EP}: docker shm, the job's": (
        "DOCKER_SHM_SIZE = ifThenElse(DevShmSize isnt Undefined && isInteger(DevShmSize) && "
        "int(DevShmSize) <= (Memory * 1024 * 1024), int(DevShmSize), 2 * 1024 * 1024 * 1024)"
    ),
    f"{_EP}: singularity for all jobs": """
# Forces _all_ jobs to run inside singularity.
SINGULARITY_JOB = true
# Forces all jobs to use the CernVM-based image.
SINGULARITY_IMAGE_EXPR = "/cvmfs/cernvm-prod.cern.ch/cvm3"
""",
    f"{_EP}: singularity on request": (
        "SINGULARITY_JOB = !isUndefined(TARGET.SingularityImage)\n"
        "SINGULARITY_IMAGE_EXPR = TARGET.SingularityImage"
    ),
    f"{_EP}: singularity bind": 'SINGULARITY_BIND_EXPR = "/nfs"',
    f"{_EP}: singularity bind, trusted": (
        'SINGULARITY_BIND_EXPR = (Target.Owner == "TrustedUser") ? SomeExpressionFromJob : ""'
    ),
    f"{_EP}: singularity arguments": 'SINGULARITY_EXTRA_ARGUMENTS = "-w"',
    f"{_EP}: singularity path": "SINGULARITY = /opt/singularity/bin/singularity",
    f"{_EP}: singularity target dir": (
        "# Maps $_CONDOR_SCRATCH_DIR on the host to /srv inside the image.\n"
        "SINGULARITY_TARGET_DIR = /srv"
    ),
    f"{_EP}: VM_TYPE": "VM_TYPE = kvm",
    f"{_EP}: job suspension, lying about the cores": (
        "NUM_CPUS = $(DETECTED_CORES)*2\nMEMORY = $(DETECTED_MEMORY)*2"
    ),
    # Read with a warning, as HTCondor does ("obsolete use of ':' for parameter assignment").
    "startd-policy-v6: obsolete ':' assignment": "WANT_SUSPEND : True",
    # $(SBIN) is HTCondor's default, $(RELEASE_DIR)/sbin.
    f"{_EP}: vm-gahp": "VM_GAHP_SERVER = $(SBIN)/condor_vm-gahp.exe",
    f"{_EP}: GPUs": "use feature : GPUs",
    f"{_EP}: GPUs, extra": "use feature : GPUs\nGPU_DISCOVERY_EXTRA = -extra",
    f"{_EP}: GPU slot types": """
# declare a partitionable slot that has the 2 powerful GPUs
# and 90% of the other resources:
SLOT_TYPE_1 @=slot
   GPUs = 2 : Capability >= 8.0
   90%
@slot
SLOT_TYPE_1_PARTITIONABLE = TRUE
NUM_SLOTS_TYPE_1 = 1

# declare a small static slot and assign it a specific GPU by id
SLOT_TYPE_2 @=slot
   GPUs = 1 : "GPU-6a96bd13"
   CPUs = 1
           Memory = 10
@slot
SLOT_TYPE_2_PARTITIONABLE = FALSE
NUM_SLOTS_TYPE_2 = 1

# declare two static slots that split up the remaining resources which may or may not include GPUs
SLOT_TYPE_3 = auto
SLOT_TYPE_3_PARTITIONABLE = FALSE
NUM_SLOTS_TYPE_3 = 2
""",
    f"{_EP}: consumption policy defaults": """
CONSUMPTION_POLICY = True
CONSUMPTION_CPUS = quantize(target.RequestCpus,{1})
CONSUMPTION_MEMORY = quantize(target.RequestMemory,{128})
CONSUMPTION_DISK = quantize(target.RequestDisk,{1024})
""",
    f"{_EP}: consumption policy, cores": """
SLOT_TYPE_1 = cpus=8
SLOT_TYPE_1_PARTITIONABLE = True
NUM_SLOTS_TYPE_1 = 1
SLOT_TYPE_1_CONSUMPTION_POLICY = True
SLOT_TYPE_1_CONSUMPTION_CPUS = TARGET.RequestCpus
SLOT_WEIGHT = Cpus
""",
    f"{_EP}: consumption policy, gpus": """
MACHINE_RESOURCE_NAMES = gpus
MACHINE_RESOURCE_gpus = 4
SLOT_TYPE_2 = cpus=8, gpus=4
SLOT_TYPE_2_PARTITIONABLE = True
NUM_SLOTS_TYPE_2 = 1
SLOT_TYPE_2_CONSUMPTION_POLICY = True
SLOT_TYPE_2_CONSUMPTION_gpus = TARGET.RequestGpu
SLOT_WEIGHT = Cpus
""",
    f"{_EP}: hibernation": """
HIBERNATE_CHECK_INTERVAL = 20
TimeToWait  = (2 * $(HOUR))
ShouldHibernate = ( (KeyboardIdle > $(StartIdleTime)) \\
                    && $(CPUIdle) \\
                    && ($(StateTimer) > $(TimeToWait)) )
HibernateState  = "RAM"
HIBERNATE = ifThenElse($(ShouldHibernate), $(HibernateState), "NONE" )
""",
    f"{_EP}: job hooks": """
# Most slots fetch and run work from the database system.
STARTD_JOB_HOOK_KEYWORD = DATABASE

# Slot4 fetches and runs work from a web service.
SLOT4_JOB_HOOK_KEYWORD = WEB

# The database system needs to both provide work and know the reply
# for each attempted claim.
DATABASE_HOOK_DIR = /usr/local/condor/fetch/database
DATABASE_HOOK_FETCH_WORK = $(DATABASE_HOOK_DIR)/fetch_work.php
DATABASE_HOOK_REPLY_FETCH = $(DATABASE_HOOK_DIR)/reply_fetch.php

# The web system only needs to fetch work.
WEB_HOOK_DIR = /usr/local/condor/fetch/web
WEB_HOOK_FETCH_WORK = $(WEB_HOOK_DIR)/fetch_work.php
""",
    f"{_EP}: FetchWorkDelay": (
        'FetchWorkDelay = ifThenElse(State == "Claimed" && Activity == "Idle", 0, 300)'
    ),
    f"{_EP}: java hook": "JAVA5_HOOK_PREPARE_JOB = $(LIBEXEC)/java5_prepare_hook",
    f"{_EP}: java hook attribute": (
        "HasJava5PrepareHook = True\nSTARTD_ATTRS = HasJava5PrepareHook $(STARTD_ATTRS)"
    ),
    "startd-policy-v7: BenchmarkTimer": (
        "BenchmarkTimer = (CurrentTime - LastBenchmark)\n"
        "RunBenchmarks = $(BenchmarkTimer) >= (4 * $(HOUR))"
    ),
    "startd-policy-v7: retirement and PreemptingRank": """
MaxJobRetirementTime = 3600 * ( \\
  MY.PreemptingRank =?= UNDEFINED || \\
  PreemptingRank < 600)
""",
    "startd-policy-v7: time of day": """
WorkHours = ( (ClockMin >= 480 && ClockMin < 1020) && \\
              (ClockDay > 0 && ClockDay < 6) )
AfterHours = ( (ClockMin < 480 || ClockMin >= 1020) || \\
               (ClockDay == 0 || ClockDay == 6) )
# Only start jobs after hours.
START = $(AfterHours) && $(CPUIdle) && KeyboardIdle > $(StartIdleTime)

# Consider the machine busy during work hours, or if the keyboard or
# CPU are busy.
MachineBusy = ( $(WorkHours) || $(CPUBusy) || $(KeyboardBusy) )
WANT_SUSPEND = $(AfterHours)
""",
    "startd-policy-v7: two days of retirement": """
# When we want to kick a job off, let it run uninterrupted for
# up to 2 days before forcing it to vacate.
MAXJOBRETIREMENTTIME = $(HOUR) * 24 * 2
""",
    "startd-policy-v7: no claim preemption": """
#Disable preemption by machine activity.
PREEMPT = False
#Disable preemption by user priority.
PREEMPTION_REQUIREMENTS = False
#Disable preemption by machine RANK by ranking all jobs equally.
RANK = 0
#Since we are disabling claim preemption, we
# may as well optimize negotiation for this case:
NEGOTIATOR_CONSIDER_PREEMPTION = False
""",
    "startd-policy-v7: job suspension with two virtual machines": """
# Lie to Condor, to achieve 2 virtual machines with only a single CPU
NUM_CPUS = 2

# VM1 is the high-prio VM, while VM2 is the background VM...
START = (VirtualMachineID == 1) && $(VM1_START) || \\
        (VirtualMachineID == 2) && $(VM2_START)

# Only start jobs on VM1 if the job is marked as a high-priority job
VM1_START = (TARGET.IsHighPrioJob =?= TRUE)

# Only start jobs on VM2 if there is no job on VM1, and if the machine is
# otherwise idle...  NOTE: the "Busy" activity is only in the Claimed
# state, and only when there is an active job, so that is good enough
# for our needs...
VM2_START = ( (vm1_Activity != "Busy") && \\
              (KeyboardIdle > $(StartIdleTime)) && \\
              ($(CPUIdle) || (State != "Unclaimed" && State != "Owner")) )

# Only suspend jobs on VM2.  Suspend if there is keyboard activity or
# if a job starts on VM1...
SUSPEND = (VirtualMachineID == 2) && \\
          ( (vm1_Activity == "Busy") || ($(KeyboardBusy)) )

# Since SUSPEND can only be TRUE on VM2, we can write the
# CONTINUE expression specifically for VM2:
CONTINUE = (KeyboardIdle > $(ContinueIdleTime)) && \\
           (vm1_Activity != "Busy")
""",
    "startd-policy-v6: helper macros": """
MINUTE = 60
HOUR = (60 * $(MINUTE))
StateTimer = (CurrentTime - EnteredCurrentState)
ActivityTimer = (CurrentTime - EnteredCurrentActivity)
ActivationTimer = (CurrentTime - JobStart)
LastCkpt = (CurrentTime - LastPeriodicCheckpoint)
NonCondorLoadAvg = (LoadAvg - CondorLoadAvg)
BackgroundLoad = 0.3
HighLoad = 0.5
StartIdleTime = 15 * $(MINUTE)
ContinueIdleTime = 5 * $(MINUTE)
MaxSuspendTime = 10 * $(MINUTE)
MaxVacateTime = 5 * $(MINUTE)
KeyboardBusy = KeyboardIdle < $(MINUTE)
CPU_Idle = $(NonCondorLoadAvg) <= $(BackgroundLoad)
CPU_Busy = $(NonCondorLoadAvg) >= $(HighLoad)
MachineBusy = ($(CPU_Busy) || $(KeyboardBusy))
""",
    "computing-on-demand: FractGen": """
FractGen_Cmd = "/usr/local/bin/fractgen"
FractGen_Iwd = "/tmp/cod-fractgen"
FractGen_Out = "/tmp/cod-fractgen/output"
FractGen_Err = "/tmp/cod-fractgen/error"
FractGen_Args = "mandelbrot -0.65865,-0.56254 -0.45865,-0.71254"
""",
}

#: Every template Kondor knows, used alone (HTCondor ships the same metaknobs built in).
TEMPLATE_EXAMPLES: dict[str, str] = {
    f"template: {line}": line
    for line in (
        "use POLICY : Desktop",
        "use POLICY : UWCS_Desktop",
        "use POLICY : Always_Run_Jobs",
        "use POLICY : Limit_Job_Runtimes",
        "use POLICY : Limit_Job_Runtimes(3600)",
        "use POLICY : Preempt_If_Runtime_Exceeds",
        "use POLICY : Hold_If_Runtime_Exceeds(7200)",
        "use POLICY : Startd_Publish_CpusUsage",
        "use POLICY : Preempt_If_Cpus_Exceeded",
        "use POLICY : Hold_If_Cpus_Exceeded",
        "use POLICY : Preempt_If_Disk_Exceeded",
        "use POLICY : Hold_If_Disk_Exceeded",
        "use POLICY : Preempt_If_Memory_Exceeded",
        "use POLICY : Hold_If_Memory_Exceeded",
        "use FEATURE : POLICY_EXPR_FRAGMENTS",
        "use FEATURE : TESTINGMODE_POLICY_VALUES",
        "use FEATURE : UWCS_DESKTOP_POLICY_VALUES",
        "use FEATURE : PartitionableSlot",
        "use FEATURE : PartitionableSlot(2, cpus=4, 50%)",
        "use FEATURE : StaticSlots",
        "use FEATURE : StaticSlots(1, $(DETECTED_CPUS) / 2)",
        "use FEATURE : StaticSlots(1, 2 * 4)",
        "use FEATURE : StaticSlots(2, 3, cpus=1, mem=25%)",
        "use FEATURE : POLICY_HOURS_TO_START",
        "use FEATURE : POLICY_HOURS_TO_START(7, 18)",
        "use FEATURE : POLICY_HOURS_TO_START(7.5, 19, 1, 5)",
        "use POLICY : Desktop_Idle",
        "use POLICY : Desktop_Idle(9, 17, 1, 5)",
        "use POLICY : Desktop_Hours",
        "use POLICY : Desktop_Hours(6, 20)",
        "use FEATURE : StartdCronPeriodic(load, 5m, /usr/local/bin/load)",
        "use FEATURE : StartdCronPeriodic(load, 90, /usr/local/bin/load, -v --all)",
        "use FEATURE : StartdCronOneShot(hw, /usr/local/bin/hardware)",
        "use FEATURE : StartdCronOneShot(hw, /usr/local/bin/hardware, --short)",
        "use FEATURE : StartdCronContinuous(watch, /usr/local/bin/watch)",
        "use FEATURE : PeriodicCronHook(STARTD_CRON, disk, 10m, /usr/local/bin/disk)",
        "use FEATURE : OneShotCronHook(STARTD_CRON, os, /usr/local/bin/os, x)",
    )
} | {
    "template: PREEMPT_IF after Desktop": (
        "use POLICY : Desktop\nIdleTooLong = KeyboardIdle > 3600\n"
        "use POLICY : PREEMPT_IF(IdleTooLong)"
    ),
    "template: NUM_CPUS and StaticSlots": "NUM_CPUS = 6\nuse FEATURE : StaticSlots",
    "template: two startd cron jobs and a prefix": (
        "use FEATURE : StartdCronOneShot(hw, /usr/local/bin/hardware)\n"
        "use FEATURE : StartdCronPeriodic(load, 2m, /usr/local/bin/load)\n"
        "STARTD_CRON_load_PREFIX = Load_"
    ),
    "no snippet: HTCondor's defaults": "",
    "NUM_SLOTS over the machine": "NUM_SLOTS = $(DETECTED_CPUS) - 1",
    "machine overrides": "NUM_CPUS = 8\nMEMORY = 4096\nRESERVED_MEMORY = 512",
    "modify request": "MODIFY_REQUEST_EXPR_REQUESTMEMORY = quantize(RequestMemory,{512})",
    "machine resource ids": "MACHINE_RESOURCE_Cogs = c0, c1 c2",
    "per-slot attribute lists": """
favorite_color = "blue"
favorite_season = "spring"
favorite_movie = "Vertigo"
favorite_song = "Blue Moon"
STARTD_ATTRS = favorite_color, favorite_season
SLOT1_STARTD_ATTRS = favorite_movie
SLOT2_STARTD_ATTRS = favorite_song
""",
    **{
        f"version: {condition}": f"if {condition}\nA = yes\nelse\nA = no\nendif"
        for condition in (
            "version >= 9.0",
            "version >= 25.14",
            "version > 25.14",
            "version > 25.14.0",
            "version == 25.14",
            "version == 25.14.1",
            "version != 25.14.1",
            "version < 26.0",
            "version <= 8.1.6",
            "! version >= 26.0",
        )
    },
    **{
        f"function: {text}": f"{setup}RESULT = {text}"
        for setup, text in (
            ("A = 7\n", "$INT(A)"),
            ("", "$INT(3*4)"),
            ("", "$INT(3*4, %03d)"),
            ("", "$INT(7.9)"),
            ("", "$REAL(1/4.0)"),
            ("", "$REAL(3, %.2f)"),
            ("", "$EVAL(2 + 3)"),
            ("", '$STRING("x")'),
            ("X = 5\n", "$INT(X, %d)"),
            ("L = a, b, c\n", "$CHOICE(1, L)"),
            ("", "$CHOICE(2, x, y, z)"),
            ("S = abcdef\n", "$SUBSTR(S, 2, 3)"),
            ("S = abcdef\n", "$SUBSTR(S, -2)"),
            ("S = abcdef\n", "$SUBSTR(S, 1, -2)"),
        )
    },
    "syntax: macros of macros": "A = 1\nB = $(A)$(A)\nC = <$(B)> and $(A)",
    "syntax: a macro named by a macro": "N = 2\nX2 = two\nR = $(X$(N))",
    "syntax: lazy expansion": "B = $(A) + 1\nA = 1\nA = 5",
    "syntax: defaults": "E =\nD = 2\nR1 = $(NOPE:7)\nR2 = $(E:8)\nR3 = $(NOPE:$(D)1)",
    "syntax: later definitions win, any case": "a = 1\nA = 2\nR = $(a)",
    "syntax: continuation lines": "R = 1 + \\\n  2 + \\\n  3\nS = x\\\ny",
    "syntax: self-append and prepend": "R = x\nR = $(R) y\nR = w $(r)\nS = $(S) alone",
    "syntax: a multi-line value": "R @=end\n  first line\n  second line\n@end\nS = $(R)",
    "syntax: nested conditionals": """
if true
  if false
    R = 1
  elif defined NOPE
    R = 2
  else
    R = 3
  endif
else
  R = 4
endif
if ! defined R
  S = unset
elif $(R)
  S = set
endif
""",
    "syntax: conditions on numbers and words": (
        "if 0\nA = 1\nelse\nA = 0\nendif\nif yes\nB = 1\nendif\nif ! false\nC = 1\nendif"
    ),
    "syntax: DOLLAR": "R = $(DOLLAR)(NOT_A_MACRO) costs $(DOLLAR)5",
    "syntax: defined on a default": "if defined START\nR = start is $(START)\nendif",
    "syntax: appending to a default": "START = $(START) && KeyboardIdle > 60",
    "conditionals and appending": """
A = 1
A = $(A) + 2
if defined A
  B = yes
else
  B = no
endif
if $(NOPE:0)
  C = 1
elif true
  C = 2
endif
MULTI @=end
  first
  second
@end
""",
}


def _repository_examples() -> dict[str, str]:
    """The condorConfig of every SlotPolicy under examples/ (structured fields are Kondor's
    own and have no HTCondor counterpart; the snippet alone is compared)."""
    found = {}
    for path in sorted((_ROOT / "examples").rglob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if not isinstance(document, dict) or document.get("kind") != "SlotPolicy":
                continue
            config = (document.get("spec") or {}).get("condorConfig")
            if config:
                found[str(path.relative_to(_ROOT))] = config
    return found


EXAMPLES: dict[str, str] = REFERENCE_EXAMPLES | TEMPLATE_EXAMPLES | _repository_examples()

#: The reference's examples that Kondor refuses (deliberately stricter) and HTCondor reads,
#: and what Kondor says.
REFUSED: dict[str, tuple[str, str]] = {
    f"{_EP}: desktop/non-desktop without IsDesktop": (
        "STARTD_ATTRS = IsDesktop\nSTART = IsDesktop =!= True",
        "lists IsDesktop, but nothing defines it",
    ),
    f"{_EP}: attribute lists without values": (
        "STARTD_ATTRS = favorite_color, favorite_season\n"
        "SLOT1_STARTD_ATTRS = favorite_movie\nSLOT2_STARTD_ATTRS = favorite_song",
        "lists favorite_color, but nothing defines it",
    ),
    f"{_EP}: BOINC": ("BOINC_HOME = $(LOCAL_DIR)/boinc", "$(LOCAL_DIR) is not defined"),
    f"{_EP}: startd cron as printed": (
        "MODULES = $(ROOT)/modules\nSTARTD_CRON_JOBLIST = date\n"
        "STARTD_CRON_DATE_EXECUTABLE = $(MODULES)/date\nSTARTD_CRON_DATE_PERIOD = 15s",
        "$(ROOT) is not defined",
    ),
    "function: a default inside $INT": (
        "RESULT = ClockDay < $INT(WorkweekFirstDay:1)",
        "'WorkweekFirstDay:1' is not a ClassAd expression",
    ),
    "startd-policy-v7: default policy with IsPVM": (
        "WANT_SUSPEND = ( $(SmallJob) || $(KeyboardNotBusy) \\\n"
        "                 || $(IsPVM) || $(IsVanilla) )",
        "$(IsPVM) is not defined",
    ),
}

#: "Test-job Policy Example": five lines added "to the existing configuration"; alone, they
#: build on HTCondor's defaults (START = True, ...).
TEST_JOB_ALONE = f"{_EP}: test-job policy alone"
REFERENCE_EXAMPLES[TEST_JOB_ALONE] = """
START      = ($(START)) || Owner == "coltrane"
SUSPEND    = ($(SUSPEND)) && Owner != "coltrane"
CONTINUE   = $(CONTINUE)
PREEMPT    = ($(PREEMPT)) && Owner != "coltrane"
KILL       = $(KILL)
"""
EXAMPLES[TEST_JOB_ALONE] = REFERENCE_EXAMPLES[TEST_JOB_ALONE]

# -- HTCondor's side -------------------------------------------------------------------------

#: First lines of every file HTCondor reads, so that the oracle does not depend on the host:
#: Kondor's LIBEXEC (an RPM installation's), and a machine whose cores are its CPUs (in
#: Kondor DETECTED_CORES is DetectedCpus, since a pod is given CPUs, not cores).
_HEADER = """\
LIBEXEC = /usr/libexec/condor
DETECTED_CORES = $(DETECTED_CPUS)
DETECTED_PHYSICAL_CPUS = $(DETECTED_CPUS)
# -- the example --
"""

#: Run by `sys.executable`: read each file named on the command line, print the first one's
#: knobs and, for each other file, the knobs whose text differs from the first's.
#: `htcondor2.param` converts knobs HTCondor knows as booleans or numbers (SINGULARITY_JOB
#: comes back evaluated, False); where such a knob is named in the example or differs from
#: the first file, its text is read through an alias, `ORACLE_RAW_<n> = $(KNOB)`, appended
#: to a copy of the file: HTCondor does not know the alias, so it keeps the text.
_READ_CONFIGS = r"""
import json, os, re, sys
import htcondor2

def read(path):
    os.environ["CONDOR_CONFIG"] = path
    htcondor2.reload_config()
    values = {}
    for name in htcondor2.param.keys():
        if name:
            try:
                values[name] = htcondor2.param.get(name)
            except Exception as err:
                values[name] = err
    return values

def text(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    return None if value is None else str(value)

configs, baseline = [], None
for path in sys.argv[1:]:
    values = read(path)
    baseline = values if baseline is None else baseline
    with open(path) as file:
        written = file.read()
    example = written.split("# -- the example --", 1)[-1]
    named = {word.upper() for word in re.findall(r"[A-Za-z_][A-Za-z0-9_.]*", example)}
    typed = [
        name
        for name, value in values.items()
        if not (value is None or isinstance(value, str))
        and (name.upper() in named or repr(value) != repr(baseline.get(name)))
    ]
    if typed:
        aliases = "".join(f"\nORACLE_RAW_{index} = $({name})" for index, name in enumerate(typed))
        with open(path + ".raw", "w") as copy:
            copy.write(written + aliases)
        raw = read(path + ".raw")
        values.update({name: raw.get(f"ORACLE_RAW_{index}") for index, name in enumerate(typed)})
    values = {name: text(value) for name, value in values.items()}
    if not configs:
        configs.append(values)  # the baseline in full, then what each file changes
    else:
        first = configs[0]
        configs.append({k: v for k, v in values.items() if v != first.get(k)})
        configs[-1].update({k: None for k in first if k not in values})
sys.stdout.write(json.dumps(configs))
"""

Knobs = Mapping[str, str | None]


@dataclass(frozen=True)
class Oracle:
    """What HTCondor's configuration engine makes of each example."""

    #: example -> knob (upper case) -> value as HTCondor expands it (None: not set): what the
    #: example changes, over the defaults
    configs: Mapping[str, ChainMap[str, str | None]]
    #: the header alone: HTCondor's defaults
    defaults: Knobs
    #: knobs whose default changes from one read to the next ($RANDOM_INTEGER)
    unstable: frozenset[str]

    def set_by(self, example: str) -> set[str]:
        """Knobs the example's configuration changes from HTCondor's defaults."""
        knobs = self.configs[example]
        return {
            name
            for name in knobs.maps[0]
            if name not in self.unstable and knobs.get(name) != self.defaults.get(name)
        }


def read_with_htcondor(configs: Mapping[str, str], folder: Path) -> Oracle:
    """Have htcondor2 read every configuration (after _HEADER), in one subprocess."""
    # The defaults read again, several times: a default drawn by $RANDOM_INTEGER
    # (PERIODIC_CHECKPOINT's, one of 61 values) may draw the same value twice, and pass for a
    # stable knob; under pytest -n each worker reads them, so a one-in-61 flake showed.
    again = [f"(defaults, read again {n})" for n in range(1, 5)]
    runs = ["(defaults)", *again, *configs, "(defaults, read last)"]
    paths = []
    for index, name in enumerate(runs):
        path = folder / f"{index}.config"
        path.write_text(_HEADER + configs.get(name, "") + "\n")
        paths.append(str(path))
    env = {
        key: value
        for key, value in os.environ.items()
        if key != "CONDOR_CONFIG" and not key.upper().startswith("_CONDOR_")
    }
    env["CONDOR_CONFIG"] = paths[0]
    done = subprocess.run(
        [sys.executable, "-c", _READ_CONFIGS, *paths],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, f"htcondor2 could not read the configurations:\n{done.stderr}"
    baseline, *rest = (
        {name.upper(): value for name, value in knobs.items()} for knobs in json.loads(done.stdout)
    )
    *changed, last = rest[len(again) :]
    unstable = frozenset().union(*rest[: len(again)])
    # reload_config() must forget the previous file, or one example would leak into the next.
    assert set(last) <= unstable, f"htcondor2.reload_config() kept knobs between files: {last}"
    return Oracle(
        {name: ChainMap(knobs, baseline) for name, knobs in zip(configs, changed, strict=True)},
        baseline,
        unstable,
    )


@pytest.fixture(scope="module")
def oracle(tmp_path_factory: pytest.TempPathFactory) -> Oracle:
    if importlib.util.find_spec("htcondor2") is None:
        pytest.skip("htcondor2 (HTCondor's configuration engine, in the htcondor wheel) is missing")
    refused = {name: text for name, (text, _) in REFUSED.items()}
    configs = {**EXAMPLES, **refused}
    return read_with_htcondor(configs, tmp_path_factory.mktemp("condor_config"))


# -- Kondor's side ---------------------------------------------------------------------------

Kind = Literal["expression", "text", "names", "exact", "quantity"]


@dataclass(frozen=True)
class Knob:
    """One knob as Kondor has it and as HTCondor expands it, and how to compare them."""

    kondor: str | None
    htcondor: str | None
    kind: Kind = "expression"


def _compile(config: str) -> EffectivePolicy:
    return compile_policy(SlotPolicySpec.model_validate({"condorConfig": config}))


def _bare(name: str) -> str:
    prefix, dot, bare = name.rpartition(".")
    return bare if dot and prefix.upper() == "STARTD" else name


def _flag(value: bool) -> str:
    return "true" if value else "false"


def _share_form(shares: Any) -> str:
    """A ShareSpec as comparable text: each resource's kind, amount and constraint."""

    def one(share: Any) -> str:
        constraint = f" : {share.constraint}" if share.constraint else ""
        return f"{share.kind} {share.amount}{constraint}"

    items = [f"{name.lower()}={one(share)}" for name, share in sorted(shares.shares.items())]
    return ", ".join([*items, f"default={one(shares.default)}"])


def _htcondor_shares(text: str | None) -> str:
    """HTCondor's SLOT_TYPE_<N> text read the way Kondor reads shares (empty: auto)."""
    try:
        policy = _compile(f"SLOT_TYPE_1 @=end\n{text or ''}\n@end\nNUM_SLOTS_TYPE_1 = 1")
    except PolicyError as err:
        return f"<not shares: {err.problems}>"
    return _share_form(policy.slot_types[0].shares)


def _seconds(period: str | None) -> str | None:
    """A startd cron PERIOD (`15s`, `10m`, `2h`, `30`) in seconds, as the reference defines it."""
    match = re.fullmatch(r"\s*(\d+)\s*([smhSMH]?)\s*", period or "")
    if match is None:
        return period
    scale = {"": 1, "s": 1, "m": 60, "h": 3600}[match.group(2).lower()]
    return str(int(match.group(1)) * scale)


#: Defaults HTCondor keeps in its code rather than its param table, from the reference
#: ("Daemon Hook Configuration Options"): what an unset knob means.
_CODE_DEFAULTS: Mapping[str, str] = {
    "RESERVED_MEMORY": "0",
    "STARTD_CRON_MAX_JOB_LOAD": "0.1",
    "STARTD_CRON_LOG_NON_ZERO_EXIT": "false",
    "STARTD_CRON_AUTOPUBLISH": "Never",
    "MODE": "Periodic",
    "JOB_LOAD": "0.01",
    "FLAG": "false",
}


def kondor_knobs(config: str, htcondor: Knobs) -> dict[str, Knob]:
    """Every knob of `config` as Kondor has it, paired with HTCondor's value."""
    policy = _compile(config)

    def pair(name: str, kondor: str | None, kind: Kind = "expression", default: str = "") -> Knob:
        return Knob(kondor, htcondor.get(name.upper()) or default or None, kind)

    knobs: dict[str, Knob] = {}
    table = parse_snippet(config).table
    for definition in table.user_definitions():
        name = _bare(definition.name)
        if table.get(name) is not definition:
            continue
        try:
            expansion = table.value(name)
            value = expansion.value if expansion is not None else None
        except MacroError as err:
            value = f"<not expanded: {err}>"
        knobs[name.upper()] = pair(name, value or None)
    for name, value in {**policy.macros, **policy.expressions}.items():
        knobs[name.upper()] = pair(name, value)
    knobs.update(_slot_type_knobs(policy, pair, htcondor))
    knobs.update(_machine_knobs(policy, pair))
    knobs.update(_attribute_knobs(policy, pair, htcondor))
    knobs.update(_cron_knobs(policy, pair, htcondor))
    return knobs


Pair = Callable[..., Knob]


def _slot_type_knobs(
    policy: EffectivePolicy, pair: Pair, htcondor: Knobs
) -> Iterator[tuple[str, Knob]]:
    """SLOT_TYPE_<N> and its companions; unset, HTCondor's NUM_SLOTS_TYPE_<N> is 0, a type is
    static, and its consumption policy and expressions are the machine's (CONSUMPTION_*)."""
    for slot_type in policy.slot_types:
        if slot_type.id == 0:
            yield "NUM_SLOTS", pair("NUM_SLOTS", str(slot_type.count))
            continue
        knob = f"SLOT_TYPE_{slot_type.id}"
        shares = Knob(_share_form(slot_type.shares), _htcondor_shares(htcondor.get(knob)), "exact")
        yield knob, shares
        count, partitionable = f"NUM_SLOTS_TYPE_{slot_type.id}", f"{knob}_PARTITIONABLE"
        yield count, pair(count, str(slot_type.count), default="0")
        yield partitionable, pair(partitionable, _flag(slot_type.partitionable), default="false")
        consumption = f"{knob}_CONSUMPTION_POLICY"
        machine = htcondor.get("CONSUMPTION_POLICY") or "false"
        yield consumption, pair(consumption, _flag(slot_type.consumption_policy), default=machine)
        for resource, expression in slot_type.consumption.items():
            name = f"{knob}_CONSUMPTION_{resource.upper()}"
            machine = htcondor.get(f"CONSUMPTION_{resource.upper()}") or ""
            yield name, pair(name, expression, default=machine)


def _machine_knobs(policy: EffectivePolicy, pair: Pair) -> Iterator[tuple[str, Knob]]:
    for resource, quantity in policy.machine_resources.items():
        ids = policy.machine_resource_ids.get(resource)
        name = f"MACHINE_RESOURCE_{resource}"
        yield name.upper(), pair(name, " ".join(ids) if ids else repr(quantity), "quantity")
    if policy.machine_resource_names is not None:
        names = " ".join(policy.machine_resource_names)
        yield "MACHINE_RESOURCE_NAMES", pair("MACHINE_RESOURCE_NAMES", names, "names")
    for name, value in (("NUM_CPUS", policy.num_cpus), ("MEMORY", policy.memory_mib)):
        if value is not None:
            yield name, pair(name, str(value))
    reserved = str(policy.reserved_memory_mib)
    yield (
        "RESERVED_MEMORY",
        pair("RESERVED_MEMORY", reserved, default=_CODE_DEFAULTS["RESERVED_MEMORY"]),
    )
    for attribute, expression in policy.modify_request.items():
        name = f"MODIFY_REQUEST_EXPR_{attribute}"
        yield name.upper(), pair(name, expression)


def _attribute_knobs(
    policy: EffectivePolicy, pair: Pair, htcondor: Knobs
) -> Iterator[tuple[str, Knob]]:
    """STARTD_ATTRS and per-slot attributes ("Configuring STARTD_ATTRS on a per-slot basis":
    slot N advertises STARTD_ATTRS and SLOT<N>_STARTD_ATTRS, valued by SLOT<N>_<attr>, else
    <attr>)."""
    every_slot = " ".join(policy.startd_attrs)
    if every_slot or htcondor.get("STARTD_ATTRS"):
        yield "STARTD_ATTRS", pair("STARTD_ATTRS", every_slot or None, "names")
    for attribute, expression in policy.startd_attrs.items():
        yield attribute.upper(), pair(attribute, expression)
    slots = {int(m.group(1)) for k in htcondor if (m := re.fullmatch(r"SLOT(\d+)_STARTD_ATTRS", k))}
    for slot in sorted(slots | set(policy.slot_attrs)):
        own = policy.slot_attrs.get(slot, {})
        listed = (
            f"{htcondor.get('STARTD_ATTRS') or ''} {htcondor.get(f'SLOT{slot}_STARTD_ATTRS') or ''}"
        )
        kondor = " ".join([*policy.startd_attrs, *own]) or None
        yield f"slot{slot} advertises", Knob(kondor, listed.strip() or None, "names")
        for attribute, expression in own.items():
            value = htcondor.get(f"SLOT{slot}_{attribute}".upper()) or htcondor.get(
                attribute.upper()
            )
            yield f"SLOT{slot}_{attribute}".upper(), Knob(expression, value)


def _cron_knobs(policy: EffectivePolicy, pair: Pair, htcondor: Knobs) -> Iterator[tuple[str, Knob]]:
    """STARTD_CRON_* ("Daemon ClassAd Hooks"): the job list, each job's knobs, the settings."""
    names = " ".join(job.name for job in policy.cron_jobs)
    if names or htcondor.get("STARTD_CRON_JOBLIST"):
        yield "STARTD_CRON_JOBLIST", pair("STARTD_CRON_JOBLIST", names or None, "names")
    for job in policy.cron_jobs:
        prefix = f"STARTD_CRON_{job.name.upper()}_"
        knobs: list[tuple[str, str | None, Kind, str]] = [
            ("EXECUTABLE", job.executable, "text", ""),
            ("MODE", job.mode.value, "names", _CODE_DEFAULTS["MODE"]),
            ("ARGS", " ".join(job.args) or None, "text", ""),
            ("PREFIX", job.prefix or None, "text", ""),
            ("SLOTS", " ".join(str(slot) for slot in job.slots) or None, "names", ""),
            ("KILL", _flag(job.kill), "expression", _CODE_DEFAULTS["FLAG"]),
            ("RECONFIG", _flag(job.reconfig), "expression", _CODE_DEFAULTS["FLAG"]),
            ("RECONFIG_RERUN", _flag(job.reconfig_rerun), "expression", _CODE_DEFAULTS["FLAG"]),
            ("JOB_LOAD", repr(job.job_load), "expression", _CODE_DEFAULTS["JOB_LOAD"]),
            ("CWD", job.cwd, "text", ""),
            ("CONDITION", job.condition, "expression", ""),
        ]
        for item, value, kind, default in knobs:
            yield prefix + item, pair(prefix + item, value, kind, default)
        if job.mode.value != "OneShot":
            period = _seconds(htcondor.get(f"{prefix}PERIOD"))
            yield f"{prefix}PERIOD", Knob(str(job.period), period)
    settings = policy.cron
    for name, value, kind in (
        ("STARTD_CRON_MAX_JOB_LOAD", repr(settings.max_job_load), "expression"),
        ("STARTD_CRON_LOG_NON_ZERO_EXIT", _flag(settings.log_non_zero_exit), "expression"),
        ("STARTD_CRON_AUTOPUBLISH", settings.autopublish.value, "names"),
    ):
        yield name, pair(name, value, kind, _CODE_DEFAULTS[name])


# -- comparing -------------------------------------------------------------------------------

#: Kondor's machine facts (kondor_core.config.templates) and the HTCondor knobs they stand for.
_FACTS = {
    "DetectedCpus": "DETECTED_CPUS",
    "TotalCpus": "NUM_CPUS",
    "DetectedMemory": "DETECTED_MEMORY",
    "TotalMemory": "MEMORY",
}
_FACT = re.compile(r"\b(" + "|".join(_FACTS) + r")\b", re.IGNORECASE)


def _with_facts(text: str, htcondor: Knobs) -> str:
    """`text` with the machine facts replaced by what HTCondor detected (MEMORY unset is
    DETECTED_MEMORY)."""
    values = {fact.lower(): htcondor.get(knob) for fact, knob in _FACTS.items()}
    values["totalmemory"] = values["totalmemory"] or values["detectedmemory"]
    return _FACT.sub(lambda m: values[m.group(1).lower()] or m.group(1), text)


def _parsed(text: str) -> Any:
    try:
        return classad2.ExprTree(text)
    except classad2.ClassAdException:
        return None


def _constant(tree: Any) -> Any:
    """The value of an expression that needs no ad (`10 * 60`, `MIN({16, 10000})`), else
    None (an expression with attribute references, or one that calls time())."""
    if "time(" in str(tree).lower() or any(classad2.ClassAd().externalRefs(tree)):
        return None
    value = tree.eval()
    if value is classad2.Value.Undefined or value is classad2.Value.Error:
        return None
    return value


def _names(text: str | None) -> set[str]:
    return {name.lower() for name in re.split(r"[,\s]+", text or "") if name}


def agree(knob: Knob, htcondor: Knobs) -> bool:
    """Whether Kondor's value means what HTCondor's does."""
    kondor = (knob.kondor or "").strip()
    theirs = (knob.htcondor or "").strip()
    if knob.kind == "names":
        return _names(kondor) == _names(theirs)
    if knob.kind == "exact":
        return kondor == theirs
    if knob.kind == "quantity":
        try:
            return float(kondor) == float(theirs)
        except ValueError:
            return _names(kondor) == _names(theirs)
    if " ".join(kondor.split()) == " ".join(theirs.split()):
        return True
    if knob.kind == "text" or not kondor or not theirs:
        return False
    ours, reference = _parsed(_with_facts(kondor, htcondor)), _parsed(_with_facts(theirs, htcondor))
    if ours is None or reference is None:
        return False
    if str(ours) == str(reference):
        return True
    value, theirs_value = _constant(ours), _constant(reference)
    if isinstance(value, bool) or isinstance(theirs_value, bool):
        return value is theirs_value
    # HTCondor's typed knobs print as floats (PRIORITY_HALFLIFE 86400.0): 86400 == 86400.0.
    numbers = (int, float)
    return (
        isinstance(value, numbers) and isinstance(theirs_value, numbers) and value == theirs_value
    )


def differences(example: str, oracle: Oracle) -> dict[str, Knob]:
    """The knobs of `example` where Kondor and HTCondor disagree.

    A knob that neither engine changes from its default is compared once, in the example
    without a snippet, rather than in every example.
    """
    htcondor = oracle.configs[example]
    set_by = oracle.set_by(example)
    knobs = kondor_knobs(EXAMPLES[example], htcondor)
    if EXAMPLES[example].strip():
        defaults = kondor_knobs("", oracle.defaults)
        knobs = {
            name: knob
            for name, knob in knobs.items()
            if name in set_by or name not in defaults or knob.kondor != defaults[name].kondor
        }
    for name in set_by - set(knobs):
        knobs[name] = Knob(None, htcondor[name])
    return {name: knob for name, knob in knobs.items() if not agree(knob, htcondor)}


def defaults_differences(kondor: Mapping[str, str], oracle: Oracle) -> dict[str, Knob]:
    """Kondor's built-in values (`kondor` by knob) where HTCondor's defaults differ."""
    knobs = {
        name.upper(): Knob(value or None, oracle.defaults.get(name.upper()))
        for name, value in kondor.items()
        if name.upper() not in oracle.unstable
    }
    return {name: knob for name, knob in knobs.items() if not agree(knob, oracle.defaults)}


#: Macros HTCondor fills in from the host and its installation when it starts; Kondor has
#: none of them (a SlotPolicy cannot know the node's paths or names), so the defaults built
#: on them do not expand in Kondor ("host-macros" in docs/config-differences.md).
HOST_MACROS = ("LOCAL_DIR", "ETC", "FULL_HOSTNAME", "USERNAME", "COLLECTOR_HOST", "CONDOR_HOST")


def _host_dependent(err: MacroError) -> bool:
    return any(f"$({name}) is not defined" in str(err) for name in HOST_MACROS)


def _kondor_builtins() -> dict[str, str]:
    """Every built-in macro (HTCondor's defaults and Kondor's differences), expanded."""
    from kondor_core.config import builtin_value
    from kondor_core.config.templates import BUILTIN_MACROS

    values = {}
    for name in BUILTIN_MACROS:
        try:
            values[name] = builtin_value(name) or ""
        except MacroError as err:
            assert _host_dependent(err), err
    del values["DOLLAR"]
    return values


def _kondor_default_policy() -> dict[str, str]:
    from kondor_core.policy.defaults import DEFAULT_POLICY

    return dict(DEFAULT_POLICY)


#: Kondor's own defaults, compared with HTCondor's (the configuration without a snippet).
DEFAULTS: dict[str, Callable[[], dict[str, str]]] = {
    "(Kondor's built-in macros)": _kondor_builtins,
    "(Kondor's default policy)": _kondor_default_policy,
}

# -- the differences that are meant ----------------------------------------------------------


@dataclass(frozen=True)
class Difference:
    """A deliberate difference: its name in docs/config-differences.md, why, and a check
    that the knob differs in this way and no other."""

    name: str
    why: str
    explains: Callable[[Knob, Knobs], bool]
    #: The values may agree by chance (a random number): not reported as gone when they do.
    by_chance: bool = False


def _rewritten(ours: str, theirs: str) -> Callable[[Knob, Knobs], bool]:
    """With Kondor's `ours` written as HTCondor's `theirs`, the values agree."""

    def explains(knob: Knob, htcondor: Knobs) -> bool:
        value = knob.kondor or ""
        return ours in value and agree(Knob(value.replace(ours, theirs), knob.htcondor), htcondor)

    return explains


def _htcondor_broken(knob: Knob, htcondor: Knobs) -> bool:
    """HTCondor expanded a macro to nothing: its value is empty or no ClassAd expression."""
    return _parsed(knob.kondor or "") is not None and (
        not knob.htcondor or _parsed(knob.htcondor) is None
    )


def _htcondor_only(knob: Knob, htcondor: Knobs) -> bool:
    return knob.kondor is None and knob.htcondor is not None


CPU_BUSY_TIMER = Difference(
    "cpu-busy-timer",
    "HTCondor 10 made CpuBusyTime a timestamp (with CpuBusyValue); Kondor's engine publishes "
    "it as the reference describes it, a duration (and CpuIsBusy), so POLICY : Desktop's "
    "CpuBusyTimer reads it directly: same meaning, same thresholds (config/templates.py).",
    _rewritten(
        "ifThenElse(CpuIsBusy =?= true, CpuBusyTime, 0)",
        "IfThenElse(CpuBusyValue is 1, time() - CpuBusyTime, 0)",
    ),
)
CPU_BUSY_TIMER_PRODUCT = Difference(
    "cpu-busy-timer",
    CPU_BUSY_TIMER.why + " POLICY : Desktop_Idle and Desktop_Hours write HTCondor's form as "
    "CpuBusyValue * (time() - CpuBusyTime).",
    _rewritten(
        "ifThenElse(CpuIsBusy =?= true, CpuBusyTime, 0)",
        "(CpuBusyValue * (time() - CpuBusyTime))",
    ),
)
MANUAL_HELPERS = Difference(
    "manual-helper-macros",
    "The reference's helper macros (CPUIdle, CPUBusy, KeyboardBusy, MachineBusy, JustCPU, "
    "ActivationTimer, ...) are built into every Kondor policy; HTCondor 25 defines them only "
    "under use FEATURE : POLICY_EXPR_FRAGMENTS and elsewhere expands $(CPUIdle) to nothing, "
    "which leaves a broken expression or none.",
    _htcondor_broken,
)
_RANDOM_MINUTES = re.compile(r"\+ (-?\d+) \* 60 \)")


def _same_but_random(knob: Knob, htcondor: Knobs) -> bool:
    """Both pick a number of minutes from -30 to 30; otherwise the values agree."""
    ours, theirs = (
        _RANDOM_MINUTES.search(knob.kondor or ""),
        _RANDOM_MINUTES.search(knob.htcondor or ""),
    )
    if ours is None or theirs is None or not -30 <= int(ours.group(1)) <= 30:
        return False
    return _RANDOM_MINUTES.sub("", knob.kondor or "") == _RANDOM_MINUTES.sub(
        "", knob.htcondor or ""
    )


RANDOM_INTEGER = Difference(
    "random-functions",
    "$RANDOM_INTEGER and $RANDOM_CHOICE choose from the same range as HTCondor, but with a "
    "choice seeded by the knob and its arguments, so that the same SlotPolicy always compiles "
    "to the same policy: UWCS_PERIODIC_CHECKPOINT's number of minutes differs.",
    _same_but_random,
    by_chance=True,
)
GPU_MONITOR = Difference(
    "gpus-monitor",
    "FEATURE : GPUs adds the GPUs_MONITOR startd cron job, a custom machine resource monitor "
    "(STARTD_CRON_GPUs_MONITOR_METRICS), which Kondor does not run: it is left out of the "
    "cron jobs, with a warning.",
    lambda knob, htcondor: _names(knob.htcondor) - _names(knob.kondor) == {"gpus_monitor"},
)
GPU_DISCOVERY = Difference(
    "gpu-discovery",
    "HTCondor 25's FEATURE : GPUs passes GPU_DISCOVERY_EXTRA on in STARTD_DETECT_GPUS; Kondor's "
    "agent discovers GPUs itself, so Kondor's template does not set it (and reports "
    "GPU_DISCOVERY_EXTRA as not implemented).",
    _htcondor_only,
)
COLLECTOR_KNOB = Difference(
    "collector-knobs",
    "HTCondor's default for COLLECTOR_FORWARD_CLAIMED_PRIVATE_ADS follows "
    "NEGOTIATOR_CONSIDER_PREEMPTION, which POLICY : Always_Run_Jobs sets; Kondor runs no "
    "negotiator or collector and has neither knob.",
    _htcondor_only,
)
DISK_QUANTUM = Difference(
    "modify-request-disk",
    "HTCondor 25 rounds RequestDisk less the size of the job's catalogs, to "
    "Target.DiskQuantum; Kondor keeps the reference's default, quantize(RequestDisk,{1024}) "
    "(config/effective.py).",
    lambda knob, htcondor: knob.kondor == "quantize(RequestDisk,{1024})",
)
WANT_VACATE_DEFAULT = Difference(
    "default-want-vacate",
    "Kondor's default policy is the reference's \"Default Policy\" (WANT_VACATE = False); "
    "HTCondor 25's param table has WANT_VACATE = True.",
    lambda knob, htcondor: knob.kondor == "False" and (knob.htcondor or "").lower() == "true",
)
UNSET_DEFAULTS = Difference(
    "unset-defaults",
    "Kondor's default policy writes out what HTCondor's startd uses for a knob its param "
    "table leaves unset: RANK 0, MaxJobRetirementTime 0, START_BACKFILL and EVICT_BACKFILL "
    "False.",
    lambda knob, htcondor: knob.htcondor is None and knob.kondor in {"0", "False"},
)
HELPERS_DEFAULT = Difference(
    "manual-helper-macros",
    MANUAL_HELPERS.why,
    lambda knob, htcondor: knob.kondor is not None and knob.htcondor is None,
)
MACHINE_FACTS = Difference(
    "machine-facts",
    "Kondor's MEMORY is the slot attribute TotalMemory, what the node has (the layout "
    "evaluates it per node); HTCondor leaves MEMORY unset and detects the memory when the "
    "startd starts.",
    lambda knob, htcondor: (knob.kondor, knob.htcondor) == ("TotalMemory", None),
)

_DESKTOPS = (
    "template: use POLICY : Desktop",
    "template: PREEMPT_IF after Desktop",
    "examples/policies/desktop.yaml",
    "examples/policies/owner-undefined.yaml",
    "examples/policies/test-job.yaml",
)

#: Knobs that use the reference's helper macros, by example.
_HELPERS_USED: dict[str, tuple[str, ...]] = {
    f"{_EP}: claimed expressions": ("WANT_VACATE", "SUSPEND"),
    f"{_EP}: vanilla expressions": ("SUSPEND_VANILLA",),
    f"{_EP}: backfill": ("EVICT_BACKFILL",),
    f"{_EP}: time of day": ("MACHINEBUSY",),
    f"{_EP}: desktop/non-desktop, a desktop": (
        "START",
        "WANT_SUSPEND",
        "WANT_VACATE",
        "SUSPEND",
        "CONTINUE",
    ),
    f"{_EP}: hibernation": ("SHOULDHIBERNATE", "HIBERNATE"),
    "startd-policy-v7: time of day": ("START", "MACHINEBUSY"),
    "startd-policy-v7: job suspension with two virtual machines": ("START", "VM2_START", "SUSPEND"),
    "examples/policies/backfill-static.yaml": ("EVICT_BACKFILL",),
    "examples/policies/desktop-non-desktop.yaml": (
        "START",
        "WANT_SUSPEND",
        "WANT_VACATE",
        "SUSPEND",
        "CONTINUE",
    ),
    "examples/policies/retirement.yaml": ("PREEMPT",),
    "examples/policies/time-of-day.yaml": ("MACHINEBUSY", "PREEMPT"),
}

#: Every difference between Kondor and HTCondor 25's configuration engine that is meant, by
#: (example, knob); docs/config-differences.md explains each by name.
DIFFERENCES: dict[tuple[str, str], Difference] = {
    **{
        (example, knob): CPU_BUSY_TIMER
        for example in _DESKTOPS
        for knob in ("CPUBUSYTIMER", "SUSPEND", "WANT_SUSPEND")
    },
    **{
        ("template: use POLICY : UWCS_Desktop", knob): CPU_BUSY_TIMER
        for knob in ("CPUBUSYTIMER", "SUSPEND", "WANT_SUSPEND", "UWCS_SUSPEND", "UWCS_WANT_SUSPEND")
    },
    **{
        (example, knob): MANUAL_HELPERS
        for example, knobs in _HELPERS_USED.items()
        for knob in knobs
    },
    **{
        (f"template: use POLICY : {template}", knob): CPU_BUSY_TIMER_PRODUCT
        for template in ("Desktop_Idle", "Desktop_Idle(9, 17, 1, 5)")
        for knob in ("CPUBUSYTIMER", "PREEMPT")
    },
    **{
        (f"template: use POLICY : {template}", "CPUBUSYTIMER"): CPU_BUSY_TIMER_PRODUCT
        for template in ("Desktop_Hours", "Desktop_Hours(6, 20)")
    },
    ("template: use FEATURE : UWCS_DESKTOP_POLICY_VALUES", "CPUBUSYTIMER"): CPU_BUSY_TIMER,
    ("template: use FEATURE : UWCS_DESKTOP_POLICY_VALUES", "UWCS_SUSPEND"): CPU_BUSY_TIMER,
    ("template: use POLICY : UWCS_Desktop", "PERIODIC_CHECKPOINT"): RANDOM_INTEGER,
    ("template: use POLICY : UWCS_Desktop", "UWCS_PERIODIC_CHECKPOINT"): RANDOM_INTEGER,
    (
        "template: use FEATURE : UWCS_DESKTOP_POLICY_VALUES",
        "UWCS_PERIODIC_CHECKPOINT",
    ): RANDOM_INTEGER,
    **{
        (example, "STARTD_CRON_JOBLIST"): GPU_MONITOR
        for example in (f"{_EP}: GPUs", f"{_EP}: GPUs, extra", "examples/policies/gpu-split.yaml")
    },
    (f"{_EP}: GPUs, extra", "STARTD_DETECT_GPUS"): GPU_DISCOVERY,
    **{
        (example, "COLLECTOR_FORWARD_CLAIMED_PRIVATE_ADS"): COLLECTOR_KNOB
        for example in (
            "template: use POLICY : Always_Run_Jobs",
            "examples/policies/no-preemption.yaml",
            "startd-policy-v7: no claim preemption",
        )
    },
    ("no snippet: HTCondor's defaults", "MODIFY_REQUEST_EXPR_REQUESTDISK"): DISK_QUANTUM,
    ("(Kondor's default policy)", "WANT_VACATE"): WANT_VACATE_DEFAULT,
    ("(Kondor's built-in macros)", "WANT_VACATE"): WANT_VACATE_DEFAULT,
    **{
        ("(Kondor's default policy)", knob): UNSET_DEFAULTS
        for knob in ("RANK", "MAXJOBRETIREMENTTIME", "START_BACKFILL", "EVICT_BACKFILL")
    },
    **{
        ("(Kondor's built-in macros)", knob): HELPERS_DEFAULT
        for knob in (
            "KEYBOARDBUSY",
            "CONSOLEBUSY",
            "CPUIDLE",
            "CPUBUSY",
            "KEYBOARDNOTBUSY",
            "MACHINEBUSY",
            "JUSTCPU",
            "NONCONDORLOADAVG",
            "ACTIVATIONTIMER",
            "LASTCKPT",
        )
    },
    ("(Kondor's built-in macros)", "MEMORY"): MACHINE_FACTS,
}

# -- the tests -------------------------------------------------------------------------------


def _show(found: Mapping[str, Knob]) -> str:
    return "\n".join(
        f"  {name}:\n    Kondor:   {knob.kondor!r}\n    HTCondor: {knob.htcondor!r}"
        for name, knob in sorted(found.items())
    )


def _only_listed(example: str, found: Mapping[str, Knob], htcondor: Knobs) -> None:
    """`found` must be exactly the differences DIFFERENCES lists for `example`, each as it says."""
    listed = {knob: d for (where, knob), d in DIFFERENCES.items() if where == example}
    unlisted = {name: knob for name, knob in found.items() if name not in listed}
    gone = sorted(knob for knob in set(listed) - set(found) if not listed[knob].by_chance)
    unexplained = {
        f"{name} ({listed[name].name})": knob
        for name, knob in found.items()
        if name in listed and not listed[name].explains(knob, htcondor)
    }
    problems = []
    if unlisted:
        problems.append(
            f"Kondor and HTCondor disagree, and DIFFERENCES does not say why:\n{_show(unlisted)}"
        )
    if unexplained:
        problems.append(f"these differ in more ways than DIFFERENCES says:\n{_show(unexplained)}")
    if gone:
        problems.append(f"DIFFERENCES lists differences that are gone (remove them): {gone}")
    assert not problems, f"{example}:\n" + "\n".join(problems)


@pytest.mark.parametrize("example", list(EXAMPLES))
def test_kondor_compiles_each_example_as_htcondor_expands_it(example: str, oracle: Oracle) -> None:
    try:
        found = differences(example, oracle)
    except PolicyError as err:
        pytest.fail(f"Kondor refuses {example!r}; list it in REFUSED with the reason: {err}")
    _only_listed(example, found, oracle.configs[example])


@pytest.mark.parametrize("name", list(DEFAULTS))
def test_kondor_defaults_are_htcondors(name: str, oracle: Oracle) -> None:
    _only_listed(name, defaults_differences(DEFAULTS[name](), oracle), oracle.defaults)


def test_every_listed_difference_is_about_a_compared_example() -> None:
    compared = set(EXAMPLES) | set(DEFAULTS)
    stale = sorted({where for where, _ in DIFFERENCES} - compared)
    assert not stale, f"DIFFERENCES names examples nothing compares: {stale}"


def test_the_differences_are_documented() -> None:
    """docs/config-differences.md explains every difference by name, and no other."""
    text = (_ROOT / "docs" / "config-differences.md").read_text()
    documented = set(re.findall(r"^### `([a-z-]+)`", text, re.MULTILINE))
    named = {difference.name for difference in DIFFERENCES.values()}
    assert documented == named | {"host-macros"}, (
        f"documented but not listed: {sorted(documented - named - {'host-macros'})}; "
        f"listed but not documented: {sorted(named - documented)}"
    )
    for example in REFUSED:
        assert example in text, f"docs/config-differences.md does not mention {example!r}"


@pytest.mark.parametrize("example", list(REFUSED))
def test_kondor_refuses_what_htcondor_reads_with_a_reason(example: str, oracle: Oracle) -> None:
    """Kondor is stricter than HTCondor here (a missing macro is an error, not an empty
    string); HTCondor reads each of these and sets knobs from it."""
    config, reason = REFUSED[example]
    with pytest.raises(PolicyError) as refused:
        _compile(config)
    assert any(reason in problem for problem in refused.value.problems), refused.value.problems
    assert oracle.set_by(example), f"HTCondor set no knob from {example!r}"


def test_the_test_job_policy_appends_to_htcondors_default_start(oracle: Oracle) -> None:
    """ "Test-job Policy Example": the five lines are added "to the existing configuration";
    with no other configuration, HTCondor's defaults (START = True, ...) are the existing one."""
    htcondor = oracle.configs[TEST_JOB_ALONE]
    assert agree(Knob('(True) || Owner == "coltrane"', htcondor["START"]), htcondor)
    policy = _compile(EXAMPLES[TEST_JOB_ALONE])
    for knob in ("START", "SUSPEND", "CONTINUE", "PREEMPT", "KILL"):
        assert agree(Knob(policy.expressions[knob], htcondor[knob]), htcondor), knob


def test_the_default_table_is_generated_from_the_installed_htcondor() -> None:
    """core/kondor_core/config/htcondor_defaults.py comes from this HTCondor's param table
    (`make condor-defaults`); test_kondor_defaults_are_htcondors compares every knob of it."""
    if importlib.util.find_spec("htcondor2") is None:
        pytest.skip("htcondor2 (HTCondor's configuration engine, in the htcondor wheel) is missing")
    from importlib.metadata import version

    from kondor_core.config.htcondor_defaults import HTCONDOR_DEFAULTS, HTCONDOR_VERSION

    assert version("htcondor") == HTCONDOR_VERSION, "run `make condor-defaults`"
    assert {"START", "PREEMPT", "WANT_SUSPEND", "MachineMaxVacateTime"} <= set(HTCONDOR_DEFAULTS)
