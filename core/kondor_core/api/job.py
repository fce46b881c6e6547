"""ExecutionJob: a job with its requests, requirements, rank and runtime."""

from __future__ import annotations

import signal
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from kondor_core.api.base import (
    IN_CLASSAD_RANGE,
    ClassAdExpr,
    ClassAdInt,
    Condition,
    Model,
    Quantity,
    ResourceAmount,
)
from kondor_core.api.crontab import CRON_FIELDS, parse_cron_field
from kondor_core.api.quantity import Unit, to_unit
from kondor_core.classads import check_expr
from kondor_core.inputs import InputError, check_attribute_name, check_classad_int

#: HTCondor's JobStatus values as Kondor shows them.
JobStatus = Literal["Idle", "Running", "Suspended", "Held", "Completed", "Removed"]
#: What the agent reports of one claim's execution (`status.execution.state`).
ExecutionState = Literal["Rejected", "Running", "Suspended", "Exited", "Killed", "Failed"]

#: A crontab field: a string (`"*/10"`), or a bare number YAML reads as an integer.
CronField = Annotated[int | str, Field(json_schema_extra={"x-kubernetes-int-or-string": True})]
#: Seconds of a window or a preparation time.
Seconds = Annotated[int, Field(ge=0), IN_CLASSAD_RANGE]

_SIGNALS = {name for name in dir(signal) if name.startswith("SIG") and not name.startswith("SIG_")}


class ProcessRuntime(Model):
    """A process run on the node, in the job's scratch directory (condor_submit's names)."""

    executable: Annotated[str, Field(min_length=1, description="condor_submit's executable")]
    arguments: list[str] = Field(default_factory=list, description="condor_submit's arguments")
    environment: dict[str, str] = Field(
        default_factory=dict, description="condor_submit's environment"
    )
    working_directory: str | None = Field(
        default=None, description="initialdir; default the job's scratch directory"
    )
    input: str | None = Field(default=None, description="stdin file; relative to the scratch dir")
    output: str | None = Field(default=None, description="stdout file; relative to the scratch dir")
    error: str | None = Field(default=None, description="stderr file; relative to the scratch dir")


class ApptainerRuntime(ProcessRuntime):
    """An Apptainer container: `apptainer exec IMAGE executable arguments`."""

    image: Annotated[str, Field(min_length=1, description="container image (SIF or directory)")]


class PodRuntime(Model):
    """A pod bound to the node, owned by the job; requests and limits are the slot's."""

    template: dict[str, Any] = Field(description="a PodTemplateSpec (metadata and spec)")


class ExecutionJobSpec(Model):
    """spec of an ExecutionJob (kondor.io/v1alpha1). Requests follow condor_submit's request_*.

    Exactly one runtime: `process`, `apptainer` or `pod`."""

    owner: str | None = Field(default=None, description="Set by admission to the submitting user")
    request_cpus: Annotated[int, Field(ge=0), IN_CLASSAD_RANGE] = 1
    request_memory: Annotated[Quantity, Field(description="a bare number means MiB")] = 128
    request_disk: Annotated[Quantity, Field(description="a bare number means KiB")] = 1024
    request_gpus: Annotated[int, Field(ge=0), IN_CLASSAD_RANGE] = 0
    request_resources: dict[str, ResourceAmount] = Field(
        default_factory=dict, description="Custom resources: name -> amount (Request<Name>)"
    )
    require_gpus: ClassAdExpr | None = Field(
        default=None, description="RequireGPUs: constraint on each assigned GPU's property ad"
    )
    requirements: ClassAdExpr | None = None
    rank: ClassAdExpr | None = None
    priority: ClassAdInt = Field(
        default=0, description="JobPrio: higher runs first among a user's jobs"
    )
    attributes: dict[str, ClassAdExpr] = Field(
        default_factory=dict, description="Extra job ClassAd attributes (name -> expression)"
    )
    nice_user: bool = Field(
        default=False,
        description="nice_user (NiceUser): the job runs only on what nobody else wants, is "
        "preempted first, and is accounted as nice-user.<owner>",
    )
    kill_sig: str = Field(default="SIGTERM", description="KillSig: the soft-kill signal")
    max_job_retirement_time: ClassAdExpr | None = Field(
        default=None, description="MaxJobRetirementTime (seconds, an expression)"
    )
    job_max_vacate_time: ClassAdExpr | None = Field(
        default=None, description="JobMaxVacateTime (seconds, an expression)"
    )
    process: ProcessRuntime | None = None
    apptainer: ApptainerRuntime | None = None
    pod: PodRuntime | None = None
    hold: bool = Field(default=False, description="condor_hold while true; false releases it")
    remove: bool = Field(default=False, description="condor_rm: the job is Removed")
    deferral_time: (
        Annotated[int | str, Field(json_schema_extra={"x-kubernetes-int-or-string": True})] | None
    ) = Field(
        default=None,
        description="deferral_time (DeferralTime): when the job starts, seconds since the "
        "epoch or a ClassAd expression of them (QDate + 60)",
    )
    deferral_window: Seconds | None = Field(
        default=None,
        description="deferral_window (DeferralWindow): seconds after DeferralTime it may "
        "still start; later it is held (default 0)",
    )
    deferral_prep_time: Seconds | None = Field(
        default=None,
        description="deferral_prep_time (DeferralPrepTime): seconds before DeferralTime it "
        "may be matched (default: at once)",
    )
    cron_minute: CronField | None = Field(default=None, description="cron_minute (0-59)")
    cron_hour: CronField | None = Field(default=None, description="cron_hour (0-23)")
    cron_day_of_month: CronField | None = Field(
        default=None, description="cron_day_of_month (1-31)"
    )
    cron_month: CronField | None = Field(default=None, description="cron_month (1-12)")
    cron_day_of_week: CronField | None = Field(
        default=None, description="cron_day_of_week (0-7, Sunday is 0 or 7)"
    )
    cron_window: Seconds | None = Field(
        default=None, description="cron_window (DeferralWindow) of a crontab job"
    )
    cron_prep_time: Seconds | None = Field(
        default=None, description="cron_prep_time (DeferralPrepTime) of a crontab job"
    )

    @field_validator("request_memory")
    @classmethod
    def _mib(cls, value: int | float | str) -> int | float | str:
        to_unit(value, Unit.MIB, field="requestMemory")
        return value

    @field_validator("request_disk")
    @classmethod
    def _kib(cls, value: int | float | str) -> int | float | str:
        to_unit(value, Unit.KIB, field="requestDisk")
        return value

    @field_validator("kill_sig")
    @classmethod
    def _signal(cls, value: str) -> str:
        name = value.strip().upper()
        if name.isdigit() and 0 < int(name) < 65:
            return name
        name = name if name.startswith("SIG") else f"SIG{name}"
        if name not in _SIGNALS:
            raise ValueError(
                f"killSig {value!r} is not a signal; give a name such as SIGTERM or a number"
            )
        return name

    @field_validator(
        "cron_minute", "cron_hour", "cron_day_of_month", "cron_month", "cron_day_of_week"
    )
    @classmethod
    def _cron(cls, value: int | str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        if isinstance(value, bool):
            raise ValueError(f"{info.field_name}: {value!r} is not a crontab field")
        field = _CRON_NAMES[info.field_name or ""]
        parse_cron_field(str(value), field)
        return str(value).strip()

    @field_validator("deferral_time")
    @classmethod
    def _deferral_time(cls, value: int | str | None) -> int | str | None:
        if isinstance(value, int) and not isinstance(value, bool):
            return check_classad_int(value, field="deferralTime")
        if isinstance(value, str):
            check_expr(value, field="deferralTime")
        return value

    @model_validator(mode="after")
    def _one_schedule(self) -> ExecutionJobSpec:
        cron = [alias for name, alias in _CRON_NAMES.items() if getattr(self, name) is not None]
        deferral = [
            alias for name, alias in _DEFERRAL_NAMES.items() if getattr(self, name) is not None
        ]
        if cron and self.deferral_time is not None:
            raise ValueError(
                f"a job runs at its deferralTime or on its crontab ({', '.join(cron)}), not "
                "both: keep one"
            )
        if (self.cron_window is not None or self.cron_prep_time is not None) and not cron:
            raise ValueError(
                "cronWindow and cronPrepTime need a crontab: give at least one of "
                + ", ".join(_CRON_NAMES.values())
            )
        if deferral and self.deferral_time is None:
            raise ValueError(
                f"{' and '.join(deferral)} need deferralTime (or use cronWindow/cronPrepTime "
                "with a crontab)"
            )
        if cron and self.cron_schedule_never_runs():
            fields = ", ".join(f"{_CRON_NAMES[n]}={getattr(self, n)!r}" for n in _CRON_NAMES)
            raise ValueError(f"the crontab {fields} names no day that exists")
        return self

    @property
    def is_crontab(self) -> bool:
        """The job runs on a crontab (at least one cron_* field), again after each exit."""
        return any(getattr(self, name) is not None for name in _CRON_NAMES)

    @property
    def is_time_scheduled(self) -> bool:
        """The job has a DeferralTime: its deferralTime or its crontab's next time."""
        return self.deferral_time is not None or self.is_crontab

    @property
    def window_seconds(self) -> int:
        """DeferralWindow: cronWindow for a crontab job, deferralWindow otherwise; 0 unset."""
        window = self.cron_window if self.is_crontab else self.deferral_window
        return window or 0

    @property
    def prep_seconds(self) -> int | None:
        """DeferralPrepTime: cronPrepTime for a crontab job, deferralPrepTime otherwise."""
        return self.cron_prep_time if self.is_crontab else self.deferral_prep_time

    def cron_values(self) -> tuple[frozenset[int], ...]:
        """The values of the five crontab fields, in CRON_FIELDS order; `*` for unset ones
        (the manual: once one is given, the others default to every value)."""
        return tuple(
            parse_cron_field(str(getattr(self, name) or "*"), alias)
            for name, alias in _CRON_NAMES.items()
        )

    def cron_schedule_never_runs(self) -> bool:
        """No date matches: days of the month none of its months has (30 February), with
        day of week unrestricted."""
        _, _, days, months, weekdays = self.cron_values()
        if self.cron_day_of_week is not None and len(weekdays) < 7:
            return False  # a weekday matches in every month
        longest = {2: 29, 4: 30, 6: 30, 9: 30, 11: 30}
        return not any(day <= longest.get(month, 31) for month in months for day in days)

    @model_validator(mode="after")
    def _one_runtime(self) -> ExecutionJobSpec:
        given = [name for name in RUNTIMES if getattr(self, name) is not None]
        if len(given) > 1:
            raise ValueError(
                f"a job has exactly one runtime, this one has {' and '.join(given)}: "
                "keep one of process, apptainer or pod"
            )
        return self

    @property
    def runtime(self) -> str | None:
        """The runtime's name (process, apptainer or pod), None when the spec has none."""
        return next((name for name in RUNTIMES if getattr(self, name) is not None), None)

    def attribute_name_problems(self) -> list[str]:
        """`spec.attributes` keys that are no ClassAd attribute name (admission lists them
        with its other problems, so the model itself lets them through)."""
        problems = []
        for name in self.attributes:
            try:
                check_attribute_name(name, field=f"spec.attributes.{name}")
            except InputError as err:
                problems.append(str(err))
        return problems

    @property
    def request_memory_mib(self) -> int:
        return to_unit(self.request_memory, Unit.MIB, field="requestMemory")

    @property
    def request_disk_kib(self) -> int:
        return to_unit(self.request_disk, Unit.KIB, field="requestDisk")


#: The runtimes, in the order messages name them.
RUNTIMES = ("process", "apptainer", "pod")
#: The crontab fields: the model's name -> the spec's name.
_CRON_NAMES = {
    "cron_minute": "cronMinute",
    "cron_hour": "cronHour",
    "cron_day_of_month": "cronDayOfMonth",
    "cron_month": "cronMonth",
    "cron_day_of_week": "cronDayOfWeek",
}
assert tuple(_CRON_NAMES.values()) == tuple(f[0] for f in CRON_FIELDS)
_DEFERRAL_NAMES = {"deferral_window": "deferralWindow", "deferral_prep_time": "deferralPrepTime"}


class ExecutionAccount(Model):
    """The Unix account a process or Apptainer job runs as on its node (kondor_core.jobs.runas)."""

    name: str = Field(description="The owner's name, or the slot user's (slot1_2, nobody)")
    uid: int | None = Field(default=None, description="Its uid (never 0)")
    gid: int | None = Field(default=None, description="Its gid (never 0)")
    reason: str | None = Field(default=None, description="Why the starter chose it")


class JobExecution(Model):
    """status.execution: the agent's account of the job's current claim on its node."""

    claim_id: str = Field(description="The claim this execution answers (status.claimId)")
    state: ExecutionState
    slot: str | None = Field(default=None, description="The slot running it (a dynamic slot)")
    reason: str | None = Field(default=None, description="Why the startd refused the match")
    directory: str | None = Field(default=None, description="The job's directory on the node")
    start_time: str | None = None
    end_time: str | None = None
    exit_code: int | None = None
    exit_signal: int | None = None
    remote_user_cpu: float | None = Field(default=None, description="RemoteUserCpu (seconds)")
    remote_sys_cpu: float | None = Field(default=None, description="RemoteSysCpu (seconds)")
    peak_memory: int | None = Field(default=None, description="MemoryUsage peak (MiB)")
    image_size: int | None = Field(
        default=None, description="ImageSize (KiB): the most memory the job has used"
    )
    memory_usage: int | None = Field(
        default=None, description="MemoryUsage (MiB): its memory now, the peak once it ended"
    )
    resident_set_size: int | None = Field(
        default=None, description="ResidentSetSize (KiB): its memory at the last update"
    )
    num_pids: int | None = Field(default=None, description="NumPids: its processes now")
    gpus_usage: float | None = Field(
        default=None,
        description="GPUsUsage: its processes' GPU use over its run, a fraction of one GPU "
        "(NVML's per-process samples)",
    )
    gpus_memory_usage: int | None = Field(
        default=None, description="GPUsMemoryUsage (MiB): the most GPU memory it has held"
    )
    job_current_start_executing_date: int | None = Field(
        default=None,
        description="JobCurrentStartExecutingDate (seconds since the epoch): this run's start",
    )
    usage_time: str | None = Field(
        default=None, description="When the usage above was measured (updated while it runs)"
    )
    hold_reason: str | None = None
    hold_reason_code: int | None = None
    account: ExecutionAccount | None = Field(
        default=None,
        description="Who the job runs as on the node (never root): the owner's mapped uid "
        "or the slot's user, and why",
    )


class ExecutionJobStatus(Model):
    """status of an ExecutionJob: the operator writes all but `execution`, the agent's."""

    job_status: JobStatus = "Idle"
    entered_current_status: str | None = Field(
        default=None,
        description="EnteredCurrentStatus: when jobStatus last changed (RFC 3339); none: "
        "the job has had its first status since it was created",
    )
    cluster_id: int | None = Field(
        default=None,
        description="ClusterId (ProcId is 0): from the Pool's counter, never reused",
    )
    execution_point: str | None = None
    slot: str | None = Field(default=None, description="The slot the negotiator matched")
    claim_id: str | None = None
    match_time: str | None = None
    preemption: Literal["Rank", "UserPriority"] | None = Field(
        default=None,
        description="Why the match preempts the claim its slot holds: the slot's RANK prefers "
        "the job (Rank) or the job's user has the better priority (UserPriority, under "
        "PREEMPTION_REQUIREMENTS); none when the slot was free",
    )
    preempt_slots: list[str] | None = Field(
        default=None,
        description="The dynamic slots the match preempts on its partitionable slot "
        "(ALLOW_PSLOT_PREEMPTION): the agent vacates them, then claims the slot for the job",
    )
    last_rej_match_reason: str | None = Field(
        default=None, description="LastRejMatchReason: why the last cycle found no slot"
    )
    num_job_starts: int = Field(default=0, description="NumJobStarts: claims that started it")
    job_start_date: str | None = Field(
        default=None, description="JobStartDate: when it first started running (RFC 3339)"
    )
    last_vacate_time: str | None = Field(
        default=None, description="LastVacateTime: when it was last vacated (RFC 3339)"
    )
    num_job_matches: int = Field(
        default=0, description="NumJobMatches: matches made (each claim id is <uid>#<number>)"
    )
    deferral_time: int | None = Field(
        default=None,
        description="DeferralTime (seconds since the epoch): when a deferred job starts, or a "
        "crontab job's next run",
    )
    hold_reason: str | None = None
    hold_reason_code: int | None = None
    exit_code: int | None = None
    exit_signal: int | None = None
    completion_date: str | None = None
    conditions: list[Condition] = Field(default_factory=list)
    execution: JobExecution | None = None
