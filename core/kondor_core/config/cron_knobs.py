"""Startd cron: STARTD_CRON_JOBLIST and its jobs' knobs, then spec.cron ("Daemon Hook
Configuration Options")."""

from __future__ import annotations

import re
from typing import Any

from kondor_core.api.slotpolicy import (
    CronJobSpec,
)
from kondor_core.config.reader import KnobReader
from kondor_core.config.reader import bare as _bare
from kondor_core.config.reader import constant as _constant
from kondor_core.config.reader import label as _label
from kondor_core.config.reader import split_list as _split_list
from kondor_core.config.snippet import (
    Definition,
)
from kondor_core.cron import jobs as cron


def cron_jobs(r: KnobReader) -> tuple[tuple[cron.CronJob, ...], cron.CronSettings]:
    """STARTD_CRON_JOBLIST and its jobs' knobs, then spec.cron (which wins by name).

    As "Daemon Hook Configuration Options"; STARTD_CRON_NAME (which HTCondor no
    longer supports) renames the knobs' prefix (`CRON_JOBLIST` for `CRON`).
    """
    base = "STARTD_CRON"
    renamed = r.knob("STARTD_CRON_NAME")
    if renamed is not None:
        base = renamed[0].strip().upper()
        r.warnings.append(
            f"{_label(renamed[1])}: HTCondor no longer supports STARTD_CRON_NAME; Kondor "
            f"reads the {base}_* knobs as it once did, but prefer STARTD_CRON_*"
        )
    settings = _cron_settings(r, base)
    jobs: dict[str, cron.CronJob] = {}
    listed = r.knob(f"{base}_JOBLIST")
    for name in _split_list(listed[0]) if listed else []:
        label = _label(listed[1]) if listed else ""
        if name.lower() in jobs:
            r.warnings.append(f"{label}: {name} is listed twice; it runs once")
            continue
        job = _snippet_cron_job(r, base, name, label)
        if job is not None:
            jobs[name.lower()] = job
    for index, spec_job in enumerate(r.spec.cron):
        job = _spec_cron_job(r, index, spec_job)
        if job is None:
            continue
        if job.name.lower() in jobs:
            r.warnings.append(
                f"spec.cron[{index}] overrides the startd cron job {job.name} of condorConfig"
            )
        jobs[job.name.lower()] = job
    _unused_cron_knobs(r, base)
    return tuple(jobs.values()), settings


def _cron_settings(r: KnobReader, base: str) -> cron.CronSettings:
    """<base>_MAX_JOB_LOAD, _LOG_NON_ZERO_EXIT and _AUTOPUBLISH."""
    max_load = cron.DEFAULT_MAX_JOB_LOAD
    found = r.knob(f"{base}_MAX_JOB_LOAD")
    if found is not None:
        max_load = _load(r, found[0], _label(found[1]), default=max_load)
    log_non_zero = r.flag(r.knob(f"{base}_LOG_NON_ZERO_EXIT"), default=False)
    autopublish = cron.AutoPublish.NEVER
    found = r.knob(f"{base}_AUTOPUBLISH")
    if found is not None:
        chosen = next(
            (a for a in cron.AutoPublish if a.value.lower() == found[0].strip().lower()), None
        )
        if chosen is None:
            r.problems.append(
                f"{_label(found[1])}: {found[0]!r} is not Never, Always or If_Changed"
            )
        else:
            autopublish = chosen
    return cron.CronSettings(max_load, log_non_zero, autopublish)


def _load(r: KnobReader, value: str, label: str, *, default: float) -> float:
    """A job load: a number >= 0."""
    result = _constant(value)
    if isinstance(result, int | float) and not isinstance(result, bool) and result >= 0:
        return float(result)
    r.problems.append(f"{label}: {value!r} is not a load; use a number >= 0 such as 0.01")
    return default


def _snippet_cron_job(r: KnobReader, base: str, name: str, listed_by: str) -> cron.CronJob | None:
    """One job of <base>_JOBLIST from its <base>_<name>_* knobs; None (with the problems
    reported) where it cannot run."""

    def knob(item: str) -> tuple[str, Definition] | None:
        return r.knob(f"{base}_{name}_{item}")

    try:
        cron.check_job_name(name, field=listed_by)
    except cron.CronError as err:
        r.problems.append(str(err))
        return None
    metrics = knob("METRICS")
    if metrics is not None:
        _resource_monitor(r, base, name, metrics[1])
        return None
    executable = knob("EXECUTABLE")
    if executable is None:
        r.problems.append(
            f"{listed_by}: the startd cron job {name} has no {base}_{name.upper()}_EXECUTABLE"
        )
        return None
    problems = len(r.problems)
    fields: dict[str, object] = {
        "name": name,
        "executable": executable[0],
        "source": _label(executable[1]),
    }
    mode_found = knob("MODE")
    mode = cron.CronMode.PERIODIC
    if mode_found is not None:
        mode = _cron_value(r, cron.parse_mode, mode_found) or mode
    fields["mode"] = mode
    period = knob("PERIOD")
    if mode is cron.CronMode.ONE_SHOT:
        if period is not None:
            r.warnings.append(f"{_label(period[1])}: a OneShot job has no period; ignored")
    elif period is None:
        r.problems.append(
            f"{_label(executable[1])}: the {mode} job {name} needs "
            f"{base}_{name.upper()}_PERIOD (15s, 10m, 2h)"
        )
    elif mode is cron.CronMode.WAIT_FOR_EXIT and re.fullmatch(r"\s*0+\s*[smhSMH]?\s*", period[0]):
        # FEATURE : ContinuousCronHook's PERIOD = 0: restart as soon as it exits (the
        # schedule keeps the manual's one-second minimum).
        fields["period"] = 0
    else:
        fields["period"] = _cron_value(r, cron.parse_period, period) or 0
    readers = {
        "ARGS": ("args", cron.parse_args),
        "PREFIX": ("prefix", cron.check_prefix),
        "SLOTS": ("slots", cron.parse_slots),
        "ENV": ("env", cron.parse_env),
    }
    for item, (attribute, reader) in readers.items():
        found = knob(item)
        if found is not None:
            fields[attribute] = _cron_value(r, reader, found)
    for item, attribute in (
        ("KILL", "kill"),
        ("RECONFIG_RERUN", "reconfig_rerun"),
        ("RECONFIG", "reconfig"),
    ):
        fields[attribute] = r.flag(knob(item), default=False)
    found = knob("JOB_LOAD")
    if found is not None:
        fields["job_load"] = _load(r, found[0], _label(found[1]), default=0.01)
    found = knob("CWD")
    if found is not None:
        fields["cwd"] = found[0]
    found = knob("CONDITION")
    if found is not None and r.expression(found[0], _label(found[1])):
        fields["condition"] = found[0]
    if len(r.problems) > problems:
        return None
    return cron.CronJob(**fields)  # type: ignore[arg-type]


def _resource_monitor(r: KnobReader, base: str, name: str, metrics: Definition) -> None:
    """A job with METRICS is a custom machine resource monitor, which Kondor does not
    implement: the whole job is left out (`use FEATURE : GPUs` defines one)."""
    knob_prefix = f"{base}_{name}_".upper()
    for definition in r.table.user_definitions():
        if _bare(definition.name).upper().startswith(knob_prefix):
            r.consumed.add(definition.name.upper())
    origin = metrics.origin
    where = (
        f"condorConfig line {origin.line} ({origin.text.strip()})"
        if origin.template is not None
        else _label(metrics)
    )
    message = (
        f"{where}: the startd cron job {name} is a custom machine resource monitor "
        f"({base}_{name}_METRICS), which Kondor does not implement; it does not run"
    )
    if name.upper() == "GPUS_MONITOR":  # use FEATURE : GPUs' condor_gpu_utilization
        message += (
            "; the Kondor agent measures GPU usage itself through NVML (GPUsUsage, "
            "GPUsMemoryUsage, DeviceGPUsAverageUsage, DeviceGPUsMemoryPeakUsage: docs/gpus.md)"
        )
    r.warnings.append(message)


def _cron_value(r: KnobReader, reader: Any, found: tuple[str, Definition]) -> Any:
    """A cron knob read by `reader`; None (and a problem) where it is wrong."""
    try:
        return reader(found[0], field=_label(found[1]))
    except cron.CronError as err:
        r.problems.append(str(err))
        return None


def _spec_cron_job(r: KnobReader, index: int, spec: CronJobSpec) -> cron.CronJob | None:
    """One of spec.cron; None (and a problem) where it is wrong."""
    where = f"spec.cron[{index}]"
    mode = cron.CronMode(spec.mode)
    period = 0
    try:
        if mode is cron.CronMode.ONE_SHOT:
            if spec.period is not None:
                r.warnings.append(f"{where}.period: a OneShot job has no period; ignored")
        elif spec.period is None:
            raise cron.CronError(f"{where}.period: a {mode} job needs a period (15s, 10m)")
        else:
            period = cron.parse_period(str(spec.period), field=f"{where}.period")
        cron.check_env_names(spec.env, field=f"{where}.env")
    except cron.CronError as err:
        r.problems.append(str(err))
        return None
    return cron.CronJob(
        name=spec.name,
        executable=spec.executable,
        args=tuple(spec.args),
        mode=mode,
        period=period,
        prefix=spec.prefix,
        slots=tuple(sorted(set(spec.slots))),
        kill=spec.kill,
        reconfig_rerun=spec.reconfig_rerun,
        reconfig=spec.reconfig,
        job_load=spec.job_load,
        env=dict(spec.env),
        cwd=spec.cwd,
        condition=spec.condition,
        source=f"{where}.executable",
    )


def _unused_cron_knobs(r: KnobReader, base: str) -> None:
    """STARTD_CRON_* the compiler did not read: said why, never silently dropped."""
    for definition in r.table.user_definitions():
        name = _bare(definition.name)
        upper = name.upper()
        if not upper.startswith(f"{base}_") or upper in r.consumed:
            continue
        if r.table.get(name) is not definition:
            continue
        r.consumed.add(definition.name.upper())
        if upper == f"{base}_CONFIG_VAL":
            reason = "there is no condor_config_val on a Kondor node; it has no effect"
        elif upper.endswith("_METRICS"):
            reason = "custom machine resource monitors are not implemented; it has no effect"
        else:
            reason = f"it is not a knob of a job in {base}_JOBLIST; it has no effect"
        r.warnings.append(f"{_label(definition)}: {name}: {reason}")
