"""The job ClassAd of an ExecutionJob, built in one place with condor_submit's names and units,
and the job's one identity (`job_id`, `global_job_id`).

`job_ad(job)` is the ad HTCondor's schedd keeps for a queued job: what condor_submit put in it
(`submit_ad`, from the spec) and what the schedd adds (ClusterId, ProcId, QDate, GlobalJobId,
JobStatus, EnteredCurrentStatus, NumJobStarts, ...: from the job's metadata and status). The
negotiator, the startd's START re-check, the `.job.ad` file the job reads and `kondor q -l`
all build it so, so a policy such as `START = $(IsVanilla)` sees the same job everywhere.
`kondor simulate` and the timeline replay, which have specs and no queue, use `submit_ad`.
"""

from __future__ import annotations

import math
from typing import Any

import classad2

from kondor_core.api.job import ExecutionJobSpec, ExecutionJobStatus
from kondor_core.api.manifest import ExecutionJob
from kondor_core.api.meta import parse_time
from kondor_core.api.pool import DEFAULT_POOL
from kondor_core.classads import parse_expr
from kondor_core.slots.layout import attribute_name

#: Kondor's jobs are vanilla-universe jobs ("JobUniverse" in the job ClassAd attributes).
VANILLA_UNIVERSE = 5
#: JobStatus as a number, as the job ClassAd holds it (condor_q's I R X C H S).
JOB_STATUS = {"Idle": 1, "Running": 2, "Removed": 3, "Completed": 4, "Held": 5, "Suspended": 7}
#: The namespace of a job whose metadata names none: the one the API server gives an object
#: created without one.
DEFAULT_NAMESPACE = "default"
#: The schedd's name in GlobalJobId: the Pool's (`default`). A cluster has one job queue,
#: whichever operator replica leads, and its ClusterIds come from the Pool's counter.
SCHEDD_NAME = DEFAULT_POOL
#: The attributes of `job_ad` that change over a job's life (its status moving on, its run's
#: usage): every other attribute is the same in every view of the job (the negotiator's,
#: START's re-check, the `.job.ad` file, `kondor q -l`), whenever it is built.
LIFE_ATTRIBUTES = frozenset(
    {
        "JobStatus",
        "EnteredCurrentStatus",
        "NumJobStarts",
        "NumJobMatches",
        "LastMatchTime",
        "JobStartDate",
        "JobCurrentStartDate",
        "LastVacateTime",
        "LastRejMatchReason",
        "RemoteHost",
        "HoldReason",
        "HoldReasonCode",
        "ExitCode",
        "ExitSignal",
        "ExitBySignal",
        "CompletionDate",
        "RemoteUserCpu",
        "RemoteSysCpu",
        "MemoryUsage",
        "DeferralTime",
    }
)

#: The attributes the schedd sets in a queued job's ad (`job_ad`): never the user's to give
#: (admission refuses them among a spec's extra attributes). DeferralTime is left out: a
#: spec's `+DeferralTime` attribute only shows in the ad (docs/jobs.md).
SCHEDD_ATTRIBUTES = frozenset(
    {"ClusterId", "ProcId", "GlobalJobId", "QDate"} | (LIFE_ATTRIBUTES - {"DeferralTime"})
)


def job_key(namespace: str | None, name: str) -> str:
    """The one key format of a job, everywhere (the schedd's cycle, the startd's claims, the
    operator's tables, the agent): `namespace/name`, the namespace the API server gave it."""
    return f"{namespace or DEFAULT_NAMESPACE}/{name}"


def job_id(job: ExecutionJob) -> str:
    """The job's key (`job_key`) from its metadata."""
    return job_key(job.metadata.namespace, job.metadata.name)


def global_job_id(cluster_id: int, qdate: int, schedd: str = SCHEDD_NAME) -> str:
    """GlobalJobId in HTCondor's form, `<schedd name>#<ClusterId>.<ProcId>#<QDate>` (ProcId
    is always 0: an ExecutionJob is one job)."""
    return f"{schedd}#{cluster_id}.0#{qdate}"


def qdate_of(job: ExecutionJob) -> int | None:
    """QDate: when the job entered the queue, its creationTimestamp in seconds since the
    epoch; None for a job not yet created."""
    created = parse_time(job.metadata.creation_timestamp or "")
    return math.floor(created.timestamp()) if created is not None else None


def job_ad(job: ExecutionJob, *, job_status: str | None = None) -> Any:
    """The job's ClassAd as HTCondor's schedd holds it: `submit_ad` of its spec (GlobalJobId
    in HTCondor's form once the job has a ClusterId, its `job_id` before), with ClusterId,
    QDate, JobStatus (`job_status` when given, else the status's) and DeferralTime from the
    status, then the attributes the schedd keeps for a queued job (`schedd_attributes`)."""
    status = job.status
    cluster_id = status.cluster_id if status is not None else None
    qdate = qdate_of(job)
    name = job_id(job)
    if cluster_id is not None and qdate is not None:
        name = global_job_id(cluster_id, qdate)
    ad = submit_ad(
        job.spec,
        name,
        cluster_id=cluster_id,
        qdate=qdate,
        job_status=job_status or (status.job_status if status is not None else "Idle"),
        deferral_time=status.deferral_time if status is not None else None,
    )
    if status is not None:
        for key, value in schedd_attributes(status, qdate).items():
            ad[key] = value
    return ad


def _epoch(text: str | None) -> int | None:
    when = parse_time(text) if text else None
    return math.floor(when.timestamp()) if when is not None else None


def schedd_attributes(status: ExecutionJobStatus, qdate: int | None) -> dict[str, Any]:
    """What the schedd adds to a queued job's ad from its status, by HTCondor's names
    ("Job ClassAd Attributes"): EnteredCurrentStatus (QDate until the status first moves),
    NumJobStarts, NumJobMatches, LastMatchTime, JobStartDate, LastVacateTime,
    LastRejMatchReason, RemoteHost (while running or suspended), HoldReason, HoldReasonCode,
    ExitCode, ExitSignal, ExitBySignal, CompletionDate, and of its current run
    JobCurrentStartDate, RemoteUserCpu, RemoteSysCpu, MemoryUsage. Unknown ones are left out."""
    execution = status.execution
    values: dict[str, Any] = {
        "EnteredCurrentStatus": _epoch(status.entered_current_status) or qdate,
        "NumJobStarts": status.num_job_starts,
        "NumJobMatches": status.num_job_matches,
        "LastMatchTime": _epoch(status.match_time),
        "JobStartDate": _epoch(status.job_start_date),
        "LastVacateTime": _epoch(status.last_vacate_time),
        "LastRejMatchReason": status.last_rej_match_reason,
        "HoldReason": status.hold_reason,
        "HoldReasonCode": status.hold_reason_code,
        "ExitCode": status.exit_code,
        "ExitSignal": status.exit_signal,
        "CompletionDate": _epoch(status.completion_date),
    }
    if status.job_status in ("Running", "Suspended"):
        values["RemoteHost"] = (execution.slot if execution is not None else None) or status.slot
    if status.exit_code is not None or status.exit_signal is not None:
        values["ExitBySignal"] = status.exit_signal is not None
    if execution is not None:
        values |= {
            "JobCurrentStartDate": _epoch(execution.start_time),
            "RemoteUserCpu": execution.remote_user_cpu,
            "RemoteSysCpu": execution.remote_sys_cpu,
            "MemoryUsage": execution.peak_memory,
        }
    return {key: value for key, value in values.items() if value is not None}


def submit_ad(
    spec: ExecutionJobSpec,
    name: str,
    *,
    cluster_id: int | None = None,
    qdate: int | None = None,
    job_status: str = "Idle",
    deferral_time: int | None = None,
) -> Any:
    """The job ClassAd condor_submit makes of a spec (GlobalJobId `name`): condor_submit's
    Request*/Require*/Requirements/Rank names, memory in MiB and disk in KiB, JobPrio, Owner,
    ClusterId/ProcId, QDate, JobStatus, KillSig, MaxJobRetirementTime, JobMaxVacateTime, the
    runtime's Cmd, Args, Environment, Iwd, In, Out, Err, `JobUniverse = 5` unless the spec's
    extra attributes (HTCondor's `+Attr`) set it, then those attributes. A deferred or
    crontab job also has DeferralTime (the given `deferral_time`, the schedd's, else the
    spec's deferralTime), DeferralWindow, DeferralPrepTime, its Cron* fields as strings and,
    for a crontab job, OnExitRemove FALSE ("Time Scheduling for Job Execution"). A nice-user
    job (`niceUser: true`, or NiceUser TRUE among the attributes) that sets no
    MaxJobRetirementTime has 0, as condor_submit gives a nice_user job.

    Raises `kondor_core.classads.ExpressionError` naming the field of an unparsable expression.
    """
    values: dict[str, Any] = {
        "MyType": "Job",
        "TargetType": "Machine",
        "GlobalJobId": name,
        "JobUniverse": VANILLA_UNIVERSE,
        "RequestCpus": spec.request_cpus,
        "RequestMemory": spec.request_memory_mib,
        "RequestDisk": spec.request_disk_kib,
        "RequestGPUs": spec.request_gpus,
        "JobPrio": spec.priority,
        "Requirements": True,
        "Rank": 0.0,
        "JobStatus": JOB_STATUS.get(job_status, 1),
        "KillSig": spec.kill_sig,
        "ProcId": 0,
    }
    if spec.nice_user:
        values["NiceUser"] = True
    if cluster_id is not None:
        values["ClusterId"] = cluster_id
    if qdate is not None:
        values["QDate"] = qdate
    values.update(_runtime(spec))
    for resource, amount in spec.request_resources.items():
        values[f"Request{attribute_name(resource)}"] = (
            int(amount) if amount == int(amount) else amount
        )
    if spec.owner is not None:
        values["Owner"] = spec.owner
    expressions = {
        "RequireGPUs": spec.require_gpus,
        "Requirements": spec.requirements,
        "Rank": spec.rank,
        "MaxJobRetirementTime": spec.max_job_retirement_time,
        "JobMaxVacateTime": spec.job_max_vacate_time,
    }
    for attribute, text in expressions.items():
        if text is not None:
            values[attribute] = parse_expr(text, field=attribute)
    values.update(_schedule(spec, deferral_time))
    for attribute, text in spec.attributes.items():
        values[attribute] = parse_expr(text, field=f"attributes.{attribute}")
    ad = classad2.ClassAd(values)
    if "MaxJobRetirementTime" not in values and _nice(ad):
        ad["MaxJobRetirementTime"] = NICE_USER_RETIREMENT_TIME
    return ad


#: condor_submit's max_job_retirement_time of a nice_user job when it gives none
#: (MAXJOBRETIREMENTTIME: "nice_user jobs are submitted with a default retirement time of 0,
#: so they will never wait in retirement unless the user overrides the default").
NICE_USER_RETIREMENT_TIME = 0


def _nice(ad: Any) -> bool:
    """NiceUser TRUE in the job ad (condor_submit's nice_user: the spec's niceUser or an extra
    attribute),
    as the negotiator reads it (a non-zero integer is TRUE too)."""
    if "NiceUser" not in ad:
        return False
    value = ad.eval("NiceUser")
    plain = isinstance(value, int) and not isinstance(value, bool | classad2.Value)
    return value is True or (plain and value != 0)


def _schedule(spec: ExecutionJobSpec, deferral_time: int | None) -> dict[str, Any]:
    """DeferralTime, DeferralWindow, DeferralPrepTime, Cron* and OnExitRemove."""
    if not spec.is_time_scheduled:
        return {}
    values: dict[str, Any] = {"DeferralWindow": spec.window_seconds}
    if deferral_time is not None:
        values["DeferralTime"] = deferral_time
    elif isinstance(spec.deferral_time, str):
        values["DeferralTime"] = parse_expr(spec.deferral_time, field="deferralTime")
    elif spec.deferral_time is not None:
        values["DeferralTime"] = spec.deferral_time
    if spec.prep_seconds is not None:
        values["DeferralPrepTime"] = spec.prep_seconds
    for name, attribute in _CRON_ATTRIBUTES.items():
        value = getattr(spec, name)
        if value is not None:
            values[attribute] = str(value)
    if spec.is_crontab:
        values["OnExitRemove"] = False
    return values


_CRON_ATTRIBUTES = {
    "cron_minute": "CronMinute",
    "cron_hour": "CronHour",
    "cron_day_of_month": "CronDayOfMonth",
    "cron_month": "CronMonth",
    "cron_day_of_week": "CronDayOfWeek",
}


def _runtime(spec: ExecutionJobSpec) -> dict[str, Any]:
    """Cmd, Arguments, Environment, Iwd, In, Out, Err of the process or Apptainer runtime
    (condor_submit's new-syntax Arguments and Environment strings), and the container image."""
    runtime = spec.process or spec.apptainer
    if runtime is None:
        return {"Cmd": "pod"} if spec.pod is not None else {}
    values: dict[str, Any] = {
        "Cmd": runtime.executable,
        "Arguments": " ".join(_quoted(arg) for arg in runtime.arguments),
        "Environment": " ".join(f"{k}={_quoted(v)}" for k, v in runtime.environment.items()),
    }
    for attribute, value in (
        ("Iwd", runtime.working_directory),
        ("In", runtime.input),
        ("Out", runtime.output),
        ("Err", runtime.error),
    ):
        if value is not None:
            values[attribute] = value
    if spec.apptainer is not None:
        values["ContainerImage"] = spec.apptainer.image
    return values


def _quoted(text: str) -> str:
    """One word of condor_submit's new argument syntax: single-quoted when it has spaces or
    quotes, a single quote doubled inside."""
    if text and not any(c in text for c in " \t'\""):
        return text
    return "'" + text.replace("'", "''") + "'"
