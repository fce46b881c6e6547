"""SlotPolicy: the startd configuration for the nodes its nodeSelector picks.

Structured fields and the `condorConfig` snippet compile to one effective
policy (kondor_core.config.compile_policy); structured fields win.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, ValidationInfo, field_validator

from kondor_core.api.backfill import BackfillSpec
from kondor_core.api.base import (
    IN_CLASSAD_RANGE,
    AttributeName,
    ClassAdExpr,
    ClassAdInt,
    Condition,
    Model,
    Quantity,
    ResourceAmount,
)
from kondor_core.api.quantity import Unit, to_unit

#: The largest uid or gid Linux gives out ((uid_t)-1 means "no change" to setuid).
MAX_ID = 4294967294

ShareValue = int | float | str


class LabelSelectorRequirement(Model):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] = Field(default_factory=list)


class LabelSelector(Model):
    """A Kubernetes label selector; an empty selector selects every node."""

    match_labels: dict[str, str] = Field(default_factory=dict)
    match_expressions: list[LabelSelectorRequirement] = Field(default_factory=list)


class Reserved(Model):
    """Resources kept back for the node itself before slots are carved."""

    cpus: Annotated[int, Field(ge=0), IN_CLASSAD_RANGE] = 0
    memory: Annotated[Quantity, Field(description="a bare number means MiB")] = 0

    @field_validator("memory")
    @classmethod
    def _mib(cls, value: int | float | str) -> int | float | str:
        to_unit(value, Unit.MIB, field="reserved.memory")
        return value

    @property
    def memory_mib(self) -> int:
        return to_unit(self.memory, Unit.MIB, field="reserved.memory")


class SlotTypeSpec(Model):
    """One SLOT_TYPE_<N>: its share of the machine, how many slots, and whether partitionable."""

    id: Annotated[int, Field(ge=1, description="N in SLOT_TYPE_<N>"), IN_CLASSAD_RANGE]
    count: Annotated[int, Field(ge=0, description="NUM_SLOTS_TYPE_<N>"), IN_CLASSAD_RANGE] = 1
    partitionable: bool = False
    resources: Annotated[
        str | dict[str, ShareValue],
        Field(
            description=(
                "The share, in SLOT_TYPE syntax ('cpus=2, ram=50%, 1/4') or as a map "
                "(cpus: 2, memory: 50%, gpus: '2 : Capability >= 8.0', default: 25%)"
            )
        ),
    ] = "auto"
    consumption_policy: bool | None = Field(
        default=None, description="SLOT_TYPE_<N>_CONSUMPTION_POLICY"
    )
    consumption: dict[str, ClassAdExpr] = Field(
        default_factory=dict,
        description="SLOT_TYPE_<N>_CONSUMPTION_<resource>: resource name -> ClassAd expression",
    )


class CronJobSpec(Model):
    """One startd cron job (STARTD_CRON_<name>_*; the reference's "Startd Cron")."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$", description="JobName")]
    executable: str = Field(
        description="In the agent's hooks directory; a relative path is taken from it"
    )
    args: list[str] = Field(default_factory=list)
    mode: Literal["Periodic", "OneShot", "WaitForExit"] = "Periodic"
    period: Annotated[
        int | str | None,
        Field(
            description="Seconds, or with an s/m/h suffix (15s, 10m); required unless OneShot",
            json_schema_extra={"x-kubernetes-int-or-string": True},
        ),
    ] = None
    prefix: Annotated[str, Field(pattern=r"^[A-Za-z0-9_]*$")] = ""
    slots: list[Annotated[int, Field(ge=1), IN_CLASSAD_RANGE]] = Field(
        default_factory=list, description="Slot ids that may take the output; empty: all"
    )
    kill: bool = Field(default=False, description="Kill a run still going when the next is due")
    reconfig_rerun: bool = Field(default=False, description="OneShot: run again on a new policy")
    reconfig: bool = Field(default=False, description="Send SIGHUP on a new policy")
    job_load: Annotated[float, Field(ge=0, le=100)] = 0.01
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    condition: ClassAdExpr | None = Field(
        default=None, description="Run only while TRUE against the machine ad"
    )


def _check_slot_key(key: str) -> str:
    if not key.isdigit() or int(key) < 1:
        raise ValueError(f"slotAttributes: {key!r} is not a slot number; use '1', '2', ...")
    return key


#: How pod jobs are sized: `SlotPolicySpec.pod_mode`, the KONDOR_POD_MODE knob.
POD_MODES = ("dedicated", "harvest")
#: The Pod Security Standards levels, strictest first: `SlotPolicySpec.pod_security`, the
#: KONDOR_POD_SECURITY knob (kondor_core.jobs.podsecurity).
POD_SECURITY_LEVELS = ("restricted", "baseline", "privileged")


class UserAccount(Model):
    """The Unix account a user's process jobs run as on the nodes (kondor_core.jobs.runas)."""

    uid: int = Field(description="The uid (1 to 4294967294; 0, root, is refused)")
    gid: int | None = Field(
        default=None, description="The gid (1 to 4294967294; 0 is refused); default the uid"
    )

    @field_validator("uid", "gid")
    @classmethod
    def _not_root(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is None:
            return value
        if value == 0:
            what = "group root" if info.field_name == "gid" else "root"
            raise ValueError(
                f"{info.field_name} 0 is {what}; a job never runs as root: allowed: 1 to {MAX_ID}"
            )
        if not 1 <= value <= MAX_ID:
            raise ValueError(f"{info.field_name} {value} is out of range; allowed: 1 to {MAX_ID}")
        return value


class SlotPolicySpec(Model):
    """spec of a SlotPolicy (kondor.io/v1alpha1)."""

    node_selector: LabelSelector = Field(default_factory=LabelSelector)
    priority: ClassAdInt = Field(default=0, description="Highest wins where policies overlap")
    reserved: Reserved = Field(default_factory=Reserved)
    slot_types: list[SlotTypeSpec] = Field(default_factory=list)
    machine_resources: dict[AttributeName, ResourceAmount] = Field(
        default_factory=dict, description="MACHINE_RESOURCE_<name>: custom resource quantities"
    )
    attributes: dict[AttributeName, ClassAdExpr] = Field(
        default_factory=dict, description="STARTD_ATTRS: attribute name -> ClassAd expression"
    )
    slot_attributes: dict[str, dict[AttributeName, ClassAdExpr]] = Field(
        default_factory=dict,
        description="SLOT<N>_<attr>: slot number -> attribute name -> ClassAd expression",
    )
    macros: dict[str, str] = Field(
        default_factory=dict, description="Configuration macros usable as $(NAME)"
    )
    # The startd policy expressions, by their HTCondor names in camelCase.
    start: ClassAdExpr | None = None
    is_owner: ClassAdExpr | None = None
    rank: ClassAdExpr | None = None
    want_suspend: ClassAdExpr | None = None
    suspend: ClassAdExpr | None = None
    continue_: ClassAdExpr | None = Field(default=None, alias="continue")
    preempt: ClassAdExpr | None = None
    want_vacate: ClassAdExpr | None = None
    kill: ClassAdExpr | None = None
    max_job_retirement_time: ClassAdExpr | None = None
    machine_max_vacate_time: ClassAdExpr | None = None
    killing_timeout: ClassAdExpr | None = None
    match_timeout: ClassAdExpr | None = None
    claim_worklife: ClassAdExpr | None = None
    run_benchmarks: ClassAdExpr | None = None
    start_backfill: ClassAdExpr | None = None
    evict_backfill: ClassAdExpr | None = None
    hibernate: ClassAdExpr | None = None
    consumption_policy: bool | None = Field(default=None, description="CONSUMPTION_POLICY")
    modify_request: dict[AttributeName, ClassAdExpr] = Field(
        default_factory=dict,
        description="MODIFY_REQUEST_EXPR_<attr>: request attribute -> rounding expression",
    )
    cron: list[CronJobSpec] = Field(
        default_factory=list,
        description="Startd cron jobs (STARTD_CRON_JOBLIST); a job here wins over one of the "
        "same name in condorConfig",
    )
    pod_mode: Literal["dedicated", "harvest"] | None = Field(
        default=None,
        description="How pod jobs are sized (KONDOR_POD_MODE): dedicated (requests = limits = "
        "the slot, Guaranteed QoS; the default) or harvest (minimal requests, limits = the "
        "slot, a low PriorityClass: the owner's pods are admitted and job pods evicted first)",
    )
    pod_security: Literal["restricted", "baseline", "privileged"] | None = Field(
        default=None,
        description="The most a pod job's template may ask for on these nodes, as a Pod "
        "Security Standards level (KONDOR_POD_SECURITY): restricted (the default), baseline "
        "or privileged. A template asking for more is held at the node; one that no "
        "SlotPolicy allows is refused at submission. Whatever the level, a job pod runs "
        "as non-root, without privilege escalation, with all capabilities dropped and seccomp "
        "RuntimeDefault unless its template asks otherwise",
    )
    drain_on_cordon: bool = Field(
        default=False,
        description="A cordoned Node (kubectl cordon, kubectl drain) drains gracefully, as "
        "condor_drain -graceful; uncordoning it cancels that drain",
    )
    backfill: BackfillSpec | None = Field(
        default=None,
        description="The backfill process a slot runs in the Backfill state (START_BACKFILL "
        "with ENABLE_BACKFILL; killed on EVICT_BACKFILL or a match): one per slot",
    )
    user_accounts: dict[str, UserAccount] = Field(
        default_factory=dict,
        description="Authenticated user (an ExecutionJob's spec.owner) -> the uid and gid "
        "their process and Apptainer jobs run as, where STARTER_ALLOW_RUNAS_OWNER allows; "
        "others run as the slot's user (SLOT<N>_USER, NOBODY_SLOT_USER, else Kondor's "
        "per-slot user). Wins over the KONDOR_USER_ACCOUNTS knob; uid and gid 0 are refused",
    )
    condor_config: str = Field(default="", description="An HTCondor configuration snippet")

    @field_validator("slot_attributes")
    @classmethod
    def _slot_keys(cls, value: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
        for key in value:
            _check_slot_key(key)
        return value

    @field_validator("cron")
    @classmethod
    def _unique_jobs(cls, value: list[CronJobSpec]) -> list[CronJobSpec]:
        seen: set[str] = set()
        for job in value:
            if job.name.lower() in seen:
                raise ValueError(f"cron: the job name {job.name!r} appears twice; names are unique")
            seen.add(job.name.lower())
        return value

    @field_validator("slot_types")
    @classmethod
    def _unique_ids(cls, value: list[SlotTypeSpec]) -> list[SlotTypeSpec]:
        seen: set[int] = set()
        for slot_type in value:
            if slot_type.id in seen:
                raise ValueError(f"slotTypes: id {slot_type.id} appears twice; ids are unique")
            seen.add(slot_type.id)
        return value


class SlotPolicyStatus(Model):
    """status of a SlotPolicy, written by the operator."""

    observed_generation: int | None = None
    selected_nodes: int = Field(default=0, description="Nodes its nodeSelector selects")
    governed_nodes: int = Field(
        default=0, description="Selected nodes it governs (highest priority, ties by name)"
    )
    hash: str | None = Field(default=None, description="Hash of the compiled policy")
    conditions: list[Condition] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list, description="Knobs reported at compile")


#: The policy expressions: the field name in the spec and the HTCondor knob it sets.
POLICY_EXPRESSIONS: dict[str, str] = {
    "start": "START",
    "is_owner": "IS_OWNER",
    "rank": "RANK",
    "want_suspend": "WANT_SUSPEND",
    "suspend": "SUSPEND",
    "continue_": "CONTINUE",
    "preempt": "PREEMPT",
    "want_vacate": "WANT_VACATE",
    "kill": "KILL",
    "max_job_retirement_time": "MAXJOBRETIREMENTTIME",
    "machine_max_vacate_time": "MachineMaxVacateTime",
    "killing_timeout": "KILLING_TIMEOUT",
    "match_timeout": "MATCH_TIMEOUT",
    "claim_worklife": "CLAIM_WORKLIFE",
    "run_benchmarks": "RUNBENCHMARKS",
    "start_backfill": "START_BACKFILL",
    "evict_backfill": "EVICT_BACKFILL",
    "hibernate": "HIBERNATE",
}
