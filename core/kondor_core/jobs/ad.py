"""The job ClassAd of an ExecutionJob, built in one place with condor_submit's names and units.

`kondor simulate`, the timeline replay, the negotiator and the agent all read a job through
this ad, so a policy such as `START = $(IsVanilla)` sees the same job everywhere.
"""

from __future__ import annotations

from typing import Any

import classad2

from kondor_core.api.job import ExecutionJobSpec
from kondor_core.classads import parse_expr
from kondor_core.slots.layout import attribute_name

#: Kondor's jobs are vanilla-universe jobs ("JobUniverse" in the job ClassAd attributes).
VANILLA_UNIVERSE = 5
#: JobStatus as a number, as the job ClassAd holds it (condor_q's I R X C H S).
JOB_STATUS = {"Idle": 1, "Running": 2, "Removed": 3, "Completed": 4, "Held": 5, "Suspended": 7}


def job_ad(
    spec: ExecutionJobSpec,
    name: str,
    *,
    cluster_id: int | None = None,
    qdate: int | None = None,
    job_status: str = "Idle",
    deferral_time: int | None = None,
) -> Any:
    """The job ClassAd: condor_submit's Request*/Require*/Requirements/Rank names, memory in
    MiB and disk in KiB, JobPrio, Owner, ClusterId/ProcId, QDate, JobStatus, KillSig,
    MaxJobRetirementTime, JobMaxVacateTime, the runtime's Cmd, Args, Environment, Iwd, In,
    Out, Err, `JobUniverse = 5` unless the spec's extra attributes (HTCondor's `+Attr`) set
    it, then those attributes. A deferred or crontab job also has DeferralTime (the given
    `deferral_time`, the schedd's, else the spec's deferralTime), DeferralWindow,
    DeferralPrepTime, its Cron* fields as strings and, for a crontab job, OnExitRemove
    FALSE ("Time Scheduling for Job Execution"). A nice-user job (`niceUser: true`, or NiceUser
    TRUE among the attributes) that sets no MaxJobRetirementTime has 0, as condor_submit gives a
    nice_user job.

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
