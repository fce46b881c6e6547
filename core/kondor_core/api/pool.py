"""Pool: the cluster-scoped singleton `default` holding the negotiator's settings and, in its
status, the accountant.

The admin writes `spec` (HTCondor's condor_negotiator knobs, by their names and defaults,
"Configuration Macros"; `condorConfig` takes the same knobs as an HTCondor config snippet).
The operator writes `status`: the accountant's user priorities and usage ("User Priorities
and Negotiation") and the last cycle's figures. A missing Pool means the defaults below;
the operator creates it.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from kondor_core.api.base import ClassAdExpr, Model
from kondor_core.api.defrag import DefragSpec

#: The plural of the Pool kind (`/apis/kondor.io/v1alpha1/pools`).
POOLS = "pools"
#: The one Pool the operator reads; a Pool of another name is ignored.
DEFAULT_POOL = "default"
#: NEGOTIATOR_INTERVAL (seconds). HTCondor's is 60; Kondor cycles soon after a change too,
#: and a shorter interval keeps a small pool responsive.
DEFAULT_NEGOTIATOR_INTERVAL = 20
#: HTCondor's MATCH_TIMEOUT default (seconds).
DEFAULT_MATCH_TIMEOUT = 120
#: HTCondor's PRIORITY_HALFLIFE default (seconds): one day.
DEFAULT_PRIORITY_HALFLIFE = 86400.0
#: HTCondor's DEFAULT_PRIO_FACTOR default.
DEFAULT_PRIO_FACTOR = 1000.0
#: HTCondor's NICE_USER_PRIO_FACTOR default.
DEFAULT_NICE_USER_PRIO_FACTOR = 1e10
#: HTCondor's PREEMPTION_RANK default.
DEFAULT_PREEMPTION_RANK = (
    "(RemoteUserPrio * 1000000) - ifThenElse(isUndefined(TotalJobRunTime), 0, TotalJobRunTime)"
)
#: The best (lowest) real user priority, where every user starts.
MIN_PRIORITY = 0.5


class PoolSpec(Model):
    """spec of the Pool `default` (kondor.io/v1alpha1): the negotiator's knobs, with
    HTCondor's names and defaults ("Configuration Macros": condor_negotiator)."""

    negotiator_interval: Annotated[int, Field(ge=1)] = Field(
        default=DEFAULT_NEGOTIATOR_INTERVAL,
        description="NEGOTIATOR_INTERVAL: seconds between negotiation cycles (a new job or a "
        "freed slot also starts one soon)",
    )
    match_timeout: Annotated[int, Field(ge=1)] = Field(
        default=DEFAULT_MATCH_TIMEOUT,
        description="MATCH_TIMEOUT: seconds a match may wait for the execution point's answer "
        "before the job is Idle again",
    )
    priority_halflife: Annotated[float, Field(ge=1)] = Field(
        default=DEFAULT_PRIORITY_HALFLIFE,
        description="PRIORITY_HALFLIFE: seconds in which a user's real priority moves half way "
        "to the resources the user uses",
    )
    default_prio_factor: Annotated[float, Field(ge=1)] = Field(
        default=DEFAULT_PRIO_FACTOR,
        description="DEFAULT_PRIO_FACTOR: the priority factor of a user with none of their own "
        "(effective priority = real priority x factor)",
    )
    priority_factors: dict[str, Annotated[float, Field(ge=1)]] = Field(
        default_factory=dict,
        description="Per-user priority factors (condor_userprio -setfactor): user -> factor",
    )
    nice_user_prio_factor: Annotated[float, Field(ge=1)] = Field(
        default=DEFAULT_NICE_USER_PRIO_FACTOR,
        description="NICE_USER_PRIO_FACTOR: the factor of nice-user jobs (NiceUser true in "
        "the job ad), accounted as the submitter nice-user.<owner>",
    )
    usage_resets: dict[str, str] = Field(
        default_factory=dict,
        description="condor_userprio -resetusage: user -> when (RFC 3339); the accountant "
        "resets the user's usage and real priority once for each new time",
    )
    preemption_requirements: ClassAdExpr = Field(
        default="False",
        description="PREEMPTION_REQUIREMENTS: when a user of better effective priority may "
        "preempt a running job (MY = the slot, with RemoteUserPrio; TARGET = the new job, with "
        "SubmitterUserPrio); HTCondor's default False allows only RANK preemption",
    )
    preemption_rank: ClassAdExpr = Field(
        default=DEFAULT_PREEMPTION_RANK,
        description="PREEMPTION_RANK: which claim preemption takes first (higher first; MY = "
        "the slot, TARGET = the new job); also orders dynamic slots for ALLOW_PSLOT_PREEMPTION",
    )
    negotiator_consider_preemption: bool = Field(
        default=True,
        description="NEGOTIATOR_CONSIDER_PREEMPTION: false makes the negotiator match only "
        "slots that are not Claimed (no RANK or priority preemption)",
    )
    negotiator_consider_early_preemption: bool = Field(
        default=False,
        description="NEGOTIATOR_CONSIDER_EARLY_PREEMPTION: match slots whose claim has "
        "retirement time left (RetirementTimeRemaining > 0); the startd retires the job before "
        "the new claim takes over",
    )
    allow_pslot_preemption: bool = Field(
        default=False,
        description="ALLOW_PSLOT_PREEMPTION: match a partitionable slot too small for a job "
        "with some of its dynamic slots preempted (by CurrentRank, then PREEMPTION_RANK; never "
        "one with retirement time left); dynamic slots are then not preempted alone",
    )
    slot_weight: ClassAdExpr = Field(
        default="Cpus",
        description="SLOT_WEIGHT: what one slot counts for in usage and fair share, an "
        "expression of the slot's resources (Cpus, Memory, Disk, GPUs)",
    )
    negotiator_discount_suspended_resources: bool = Field(
        default=False,
        description="NEGOTIATOR_DISCOUNT_SUSPENDED_RESOURCES: suspended jobs count for no usage",
    )
    defrag: DefragSpec = Field(
        default_factory=DefragSpec,
        description="condor_defrag's knobs (DEFRAG_*): draining nodes so that whole-node jobs "
        "get one",
    )
    condor_config: str | None = Field(
        default=None,
        description="The same knobs as an HTCondor config snippet (PRIORITY_HALFLIFE = 3600); "
        "a field set in spec wins over the snippet",
    )


class UserPriority(Model):
    """One submitter in the accountant, as condor_userprio shows it."""

    name: str = Field(description="The submitter: the owner, or nice-user.<owner>")
    real_priority: float = Field(
        default=MIN_PRIORITY, description="Real user priority: usage smoothed by the half-life"
    )
    priority_factor: float = Field(default=DEFAULT_PRIO_FACTOR, description="Priority factor")
    effective_priority: float = Field(
        default=MIN_PRIORITY * DEFAULT_PRIO_FACTOR,
        description="Effective user priority: real priority x factor (lower is better)",
    )
    resources_used: float = Field(
        default=0.0, description="Weighted resources in use (SLOT_WEIGHT) at the last update"
    )
    accumulated_usage: float = Field(
        default=0.0, description="Weighted accumulated usage (slot weight x seconds)"
    )
    begin_usage_time: str | None = Field(default=None, description="First usage (RFC 3339)")
    last_usage_time: str | None = Field(default=None, description="Last usage (RFC 3339)")
    last_reset: str | None = Field(
        default=None, description="The usageResets time last carried out for this user"
    )


class CycleStats(Model):
    """What the last negotiation cycle did (the negotiator ad's LastNegotiationCycle*)."""

    time: str | None = Field(default=None, description="When it ran (RFC 3339)")
    duration_seconds: float = 0.0
    jobs_considered: int = 0
    matches: int = 0
    preemptions: int = 0
    submitters: int = 0
    rejections: dict[str, int] = Field(
        default_factory=dict, description="Unmatched jobs by reason (first words)"
    )


class PoolStatus(Model):
    """status of the Pool `default`: the accountant, written by the operator."""

    last_update: str | None = Field(
        default=None, description="When the accountant last aged the priorities (RFC 3339)"
    )
    users: list[UserPriority] = Field(default_factory=list, description="condor_userprio -all")
    last_cycle: CycleStats | None = None
    last_cluster_id: Annotated[int, Field(ge=0)] | None = Field(
        default=None,
        description="The last ClusterId given to a job: the next job gets one more. Written "
        "by the negotiator alone, guarded by the Pool's resourceVersion, so a ClusterId is "
        "never given twice (an operator restart, the newest jobs deleted)",
    )
