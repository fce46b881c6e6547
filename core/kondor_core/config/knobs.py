"""Which configuration knobs Kondor reads, keeps for the policy engine, or knows it ignores.

The reference's "condor_startd Policy Configuration" and "Configuration for
Execution Points" name the knobs; everything a snippet sets is one of:

- a knob the compiler turns into a field of the effective policy (slot types,
  policy expressions, STARTD_ATTRS, startd cron jobs, ...), matched by `is_understood`;
- a startd knob kept in `EffectivePolicy.macros` for the policy engine
  (`STARTD_KNOBS`);
- an HTCondor knob Kondor does not implement (`unimplemented_reason`): reported;
- a helper macro some understood knob refers to as $(NAME): fine;
- anything else: reported as unknown.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from kondor_core.api.slotpolicy import POLICY_EXPRESSIONS

#: HTCondor knob (upper case) -> the spelling Kondor uses for it.
POLICY_KNOBS: Mapping[str, str] = {knob.upper(): knob for knob in POLICY_EXPRESSIONS.values()}

#: Policy knobs with a `_VANILLA` variant consulted first for vanilla-universe jobs.
_VANILLA_KNOBS = ("SUSPEND", "CONTINUE", "PREEMPT", "KILL", "WANT_SUSPEND", "WANT_VACATE")

#: Startd knobs the compiler does not turn into fields, kept in `macros` for the
#: policy engine and the agent (upper case -> canonical spelling).
STARTD_KNOBS: Mapping[str, str] = {
    name.upper(): name
    for name in (
        "ENABLE_BACKFILL",
        "BACKFILL_SYSTEM",
        "POLLING_INTERVAL",
        "UPDATE_INTERVAL",
        "UPDATE_OFFSET",
        "STARTD_LATCH_EXPRS",
        "WANT_HOLD",
        "WANT_HOLD_REASON",
        "WANT_HOLD_SUBCODE",
        "HIBERNATE_CHECK_INTERVAL",
        "MUST_MODIFY_REQUEST_EXPRS",
        "STARTD_NOCLAIM_SHUTDOWN",
        "MAX_CLAIM_ALIVES_MISSED",
        "CLAIM_PARTITIONABLE_LEFTOVERS",
        "STARTD_JOB_ATTRS",
        "MAX_JOB_RUNTIME",
        # The policy engine's own knobs ("condor_startd Policy Configuration", "The Claimed
        # State and Leases"): cross-slot attributes, keep-alives, and the vanilla variants.
        "STARTD_SLOT_ATTRS",
        "ALIVE_INTERVAL",
        *(f"{knob}_VANILLA" for knob in _VANILLA_KNOBS),
        # How the agent limits a job's cgroup ("Limiting Resource Usage Using Cgroups"), and
        # Kondor's own CPU cap and pids limit (kondor_agent.execute.limits reads them).
        "CGROUP_MEMORY_LIMIT_POLICY",
        "DISABLE_SWAP_FOR_JOB",
        "KONDOR_JOB_CPU_HARD_LIMIT",
        "KONDOR_JOB_PIDS_MAX",
        # How pod jobs are sized and prioritised (kondor_core.jobs.pod).
        "KONDOR_POD_MODE",
        "KONDOR_HARVEST_PRIORITY_CLASS",
        # What a job is given of its slot's GPUs ("Configuration Macros", the starter's
        # GPU environment and STARTER_HIDE_GPU_DEVICES; kondor_core.jobs.gpus), and how a
        # pod job gets them (kondor_core.jobs.pod).
        "ENVIRONMENT_FOR_AssignedGPUs",
        "ENVIRONMENT_VALUE_FOR_UnAssignedGPUs",
        "STARTER_HIDE_GPU_DEVICES",
        "AUTO_SET_NVIDIA_VISIBLE_DEVICES",
        "KONDOR_GPU_POD_DEVICES",
        # GPUs in no slot ("Configuration Macros"; kondor_core.slots.layout reads it).
        "OFFLINE_MACHINE_RESOURCE_GPUs",
        # The most a pod job's template may ask for (kondor_core.jobs.podsecurity).
        "KONDOR_POD_SECURITY",
        # How an Apptainer job's command line is built ("Apptainer and Singularity Support";
        # kondor_core.jobs.apptainer reads them).
        "SINGULARITY",
        "SINGULARITY_JOB",
        "SINGULARITY_IMAGE_EXPR",
        "SINGULARITY_BIND_EXPR",
        "SINGULARITY_TARGET_DIR",
        "SINGULARITY_EXTRA_ARGUMENTS",
        "SINGULARITY_VERBOSITY",
        "SINGULARITY_MOUNT_HOME",
        "SINGULARITY_USE_PID_NAMESPACES",
        "SINGULARITY_RUN_TEST_BEFORE_JOB",
        "SINGULARITY_IGNORE_MISSING_BIND_TARGET",
        "MOUNT_UNDER_SCRATCH",
        # Job hooks ("Hooks"; kondor_core.jobs.hooks): the keywords, UPDATE_JOB_INFO's
        # intervals, and Kondor's bound on every hook's run.
        "STARTD_JOB_HOOK_KEYWORD",
        "STARTER_JOB_HOOK_KEYWORD",
        "STARTER_DEFAULT_JOB_HOOK_KEYWORD",
        "STARTER_INITIAL_UPDATE_INTERVAL",
        "STARTER_UPDATE_INTERVAL",
        "KONDOR_JOB_HOOK_TIMEOUT",
        # Fetch-work hooks ("Job Hooks That Fetch Work"; kondor_core.jobs.fetchwork): the
        # delay between fetches, where fetched ExecutionJobs go, the CA of https hooks.
        "FetchWorkDelay",
        "KONDOR_FETCH_WORK_NAMESPACE",
        "KONDOR_HOOK_CA_FILE",
        # Computing On Demand ("Computing On Demand (COD)"; kondor_core.startd.cod): who may
        # hold COD claims.
        "VALID_COD_USERS",
        # Who a job runs as ("User Accounts in HTCondor on Unix Platforms";
        # kondor_core.jobs.runas reads them), and Kondor's mapping of users to uids.
        "STARTER_ALLOW_RUNAS_OWNER",
        "UID_DOMAIN",
        "TRUST_UID_DOMAIN",
        "SOFT_UID_DOMAIN",
        "NOBODY_SLOT_USER",
        "DEDICATED_EXECUTE_ACCOUNT_REGEXP",
        "EXECUTE_LOGIN_IS_DEDICATED",
        "KONDOR_USER_ACCOUNTS",
        "KONDOR_SLOT_USER_UID_BASE",
    )
}

#: Startd knobs kept in `macros` by pattern: `<Keyword>_HOOK_<hook>` and
#: SLOT<N>_JOB_HOOK_KEYWORD (kondor_core.jobs.hooks reads them).
STARTD_KNOB_PATTERNS = (
    re.compile(
        r"\w+?_HOOK_(?:PREPARE_JOB|UPDATE_JOB_INFO|JOB_EXIT|FETCH_WORK|REPLY_FETCH|EVICT_CLAIM)"
        r"(?:_TIMEOUT)?",
        re.IGNORECASE,
    ),
    re.compile(r"SLOT\d+_JOB_HOOK_KEYWORD", re.IGNORECASE),
    # The slot user of slot N or dynamic slot N_M (kondor_core.jobs.runas).
    re.compile(r"SLOT\d+(?:_\d+)?_USER", re.IGNORECASE),
    # A COD application's attributes by keyword (kondor_core.startd.cod): FractGen_Cmd, ...
    re.compile(
        r"\w+?_(?:CMD|ARGS|IWD|IN|OUT|ERR|ENV|KILLSIG|JOBUNIVERSE|OWNER|CLUSTERID|PROCID"
        r"|JARFILES|STARTERUSERLOG|STARTERUSERLOGUSEXML)",
        re.IGNORECASE,
    ),
)

#: Startd knobs in `macros` whose value is a ClassAd expression: checked at compile.
STARTD_EXPRESSION_KNOBS = frozenset(
    {
        "WANT_HOLD",
        "WANT_HOLD_REASON",
        "WANT_HOLD_SUBCODE",
        "SINGULARITY_JOB",
        "SINGULARITY_IMAGE_EXPR",
        "SINGULARITY_BIND_EXPR",
        "FETCHWORKDELAY",
    }
)

#: Knobs the compiler reads by exact name (upper case).
EXACT_KNOBS = frozenset(
    {
        "NUM_SLOTS",
        "NUM_CPUS",
        "MEMORY",
        "RESERVED_MEMORY",
        "MACHINE_RESOURCE_NAMES",
        "STARTD_ATTRS",
        "STARTD_EXPRS",
        "CONSUMPTION_POLICY",
    }
)

#: Knobs the compiler reads by pattern: N is a slot type or slot number.
#: STARTD_CRON_* ("Daemon Hook Configuration Options") compile to `EffectivePolicy.cron_jobs`
#: and `cron`; the compiler reports the ones it cannot use (a job not in the job list,
#: STARTD_CRON_CONFIG_VAL, STARTD_CRON_<job>_METRICS).
KNOB_PATTERNS = (
    re.compile(r"STARTD_CRON_(\w+)", re.IGNORECASE),
    re.compile(r"SLOT_TYPE_(\d+)", re.IGNORECASE),
    re.compile(r"NUM_SLOTS_TYPE_(\d+)", re.IGNORECASE),
    re.compile(r"SLOT_TYPE_(\d+)_PARTITIONABLE", re.IGNORECASE),
    re.compile(r"SLOT_TYPE_(\d+)_CONSUMPTION_POLICY", re.IGNORECASE),
    re.compile(r"SLOT_TYPE_(\d+)_CONSUMPTION_(\w+)", re.IGNORECASE),
    re.compile(r"CONSUMPTION_(\w+)", re.IGNORECASE),
    re.compile(r"MACHINE_RESOURCE_INVENTORY_(\w+)", re.IGNORECASE),
    re.compile(r"MACHINE_RESOURCE_(\w+)", re.IGNORECASE),
    re.compile(r"SLOT(\d+)_STARTD_(?:ATTRS|EXPRS)", re.IGNORECASE),
    re.compile(r"MODIFY_REQUEST_EXPR_(\w+)", re.IGNORECASE),
)

_NEGOTIATOR = "it configures the negotiator, which a SlotPolicy does not"
_NO_KEYBOARD = "a pod has no console or keyboard to share with slots"
_AGENT_GPUS = "the Kondor agent discovers GPUs through NVML itself"
_OTHER_ASSIGNED = (
    "only the GPUs' ENVIRONMENT_FOR_AssignedGPUs and ENVIRONMENT_VALUE_FOR_UnAssignedGPUs are "
    "implemented (kondor_core.jobs.gpus): a SlotPolicy declares no other non-fungible resource"
)
_BENCHMARKS = (
    "the agent measures Mips and KFlops with its own built-in benchmarks when RUNBENCHMARKS "
    "asks (kondor_agent.benchmarks)"
)

#: HTCondor knobs Kondor does not implement, with the reason (upper case).
UNIMPLEMENTED: Mapping[str, str] = {
    "PERIODIC_CHECKPOINT": "Kondor does not checkpoint jobs periodically",
    "PREEMPTION_REQUIREMENTS": _NEGOTIATOR,
    "PREEMPTION_RANK": _NEGOTIATOR,
    "NEGOTIATOR_PRE_JOB_RANK": _NEGOTIATOR,
    "NEGOTIATOR_POST_JOB_RANK": _NEGOTIATOR,
    "NEGOTIATOR_CONSIDER_PREEMPTION": _NEGOTIATOR,
    "ALLOW_PSLOT_PREEMPTION": _NEGOTIATOR,
    "SLOT_WEIGHT": _NEGOTIATOR,
    "SLOTS_CONNECTED_TO_KEYBOARD": _NO_KEYBOARD,
    "SLOTS_CONNECTED_TO_CONSOLE": _NO_KEYBOARD,
    "GPU_DISCOVERY_EXTRA": _AGENT_GPUS,
    "RESERVED_DISK": "only spec.reserved cpus and memory (RESERVED_MEMORY) are implemented",
    "RESERVED_SWAP": "only spec.reserved cpus and memory (RESERVED_MEMORY) are implemented",
    "COUNT_HYPERTHREAD_CPUS": "the node's CPU count comes from Kubernetes",
    "EXECUTE": "the agent chooses each job's scratch directory",
    "JOB_DEFAULT_REQUESTCPUS": "it is submit-side configuration",
    "JOB_DEFAULT_REQUESTMEMORY": "it is submit-side configuration",
    "JOB_DEFAULT_REQUESTDISK": "it is submit-side configuration",
    "DAEMON_LIST": "Kondor runs no HTCondor daemons",
    "CONDOR_HOST": "Kondor runs no HTCondor daemons",
    "COLLECTOR_HOST": "Kondor runs no HTCondor daemons",
}

#: Families of HTCondor knobs Kondor does not implement: name prefix -> reason.
UNIMPLEMENTED_PREFIXES: Mapping[str, str] = {
    "ENVIRONMENT_FOR_": _OTHER_ASSIGNED,
    "ENVIRONMENT_VALUE_FOR_": _OTHER_ASSIGNED,
    "BENCHMARKS_": _BENCHMARKS,
    "ALLOW_": "HTCondor security settings do not apply; Kubernetes RBAC does",
    "DENY_": "HTCondor security settings do not apply; Kubernetes RBAC does",
    "SEC_": "HTCondor security settings do not apply; Kubernetes RBAC does",
    "NEGOTIATOR_": _NEGOTIATOR,
    "SCHEDD_": "it configures the schedd, not an execution point",
    "COLLECTOR_": "Kondor runs no collector",
    "DOCKER_": "jobs run as pods; container settings come from the job's pod template",
    "SINGULARITY": "Kondor builds the Apptainer command line from the SINGULARITY knobs of the "
    'manual\'s "Apptainer and Singularity Support" only',
    "APPTAINER": "Kondor reads HTCondor's SINGULARITY_* names for Apptainer",
    "CGROUP_": "the agent manages the job's cgroups through Kubernetes",
    "STARTER_": "Kondor's agent launches jobs; there is no condor_starter",
    "USE_PID_NAMESPACES": "jobs run as pods, each in its own namespaces",
    "HIBERNATION_": "Kondor does not put nodes to sleep",
    "UNHIBERNATE": "Kondor does not put nodes to sleep",
}

#: Knobs the compiler reads only by their slot-number prefix (SLOT<N>_<knob>) that
#: HTCondor has for other purposes than attributes.
PER_SLOT_UNIMPLEMENTED: Mapping[str, str] = {
    "EXECUTE": "the agent chooses each job's scratch directory",
    "CPU_AFFINITY": "CPU placement is the kubelet's",
}


def is_understood(name: str) -> bool:
    """Whether the compiler turns the knob `name` into a field of the effective policy."""
    upper = name.upper()
    if upper in POLICY_KNOBS or upper in EXACT_KNOBS:
        return True
    return any(pattern.fullmatch(name) for pattern in KNOB_PATTERNS)


def is_startd_knob(name: str) -> bool:
    """Whether `name` is a startd knob kept in `macros` for the policy engine and the agent."""
    return name.upper() in STARTD_KNOBS or any(p.fullmatch(name) for p in STARTD_KNOB_PATTERNS)


#: The hook Kondor does not run: the one before file transfer, which Kondor does not do.
_UNRUN_HOOK = re.compile(r"\w+?_HOOK_PREPARE_JOB_BEFORE_TRANSFER", re.IGNORECASE)


def unimplemented_reason(name: str) -> str | None:
    """Why Kondor does not implement the HTCondor knob `name`, or None if it is not one."""
    upper = name.upper()
    if _UNRUN_HOOK.fullmatch(name):
        return (
            "Kondor has no file transfer, so no hook runs before it; PREPARE_JOB runs before "
            "the job"
        )
    if upper in UNIMPLEMENTED:
        return UNIMPLEMENTED[upper]
    for prefix, reason in UNIMPLEMENTED_PREFIXES.items():
        if upper.startswith(prefix):
            return reason
    return None


def canonical_name(name: str) -> str:
    """The spelling Kondor reports a knob under (HTCondor names are case-insensitive)."""
    upper = name.upper()
    return POLICY_KNOBS.get(upper) or STARTD_KNOBS.get(upper) or name
