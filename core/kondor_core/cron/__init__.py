"""Startd cron (the reference's "Daemon ClassAd Hooks"): job definitions, output, merging.

Pure: `kondor_core.config` compiles the jobs from a SlotPolicy (`spec.cron` and
STARTD_CRON_* in condorConfig), the agent runs them (`kondor_agent.cron`) and feeds each
run's output to `parse_output` / `OutputParser`, keeps the ads with `record`, and renders
slot ads through `merge_into_slots`.
"""

from kondor_core.cron.jobs import (
    DEFAULT_HOOKS_DIR,
    DEFAULT_JOB_LOAD,
    DEFAULT_MAX_JOB_LOAD,
    AutoPublish,
    CronError,
    CronJob,
    CronMode,
    CronSettings,
    HookPathError,
    hook_path,
    parse_args,
    parse_env,
    parse_period,
)
from kondor_core.cron.merge import (
    CronAds,
    attribute_names,
    merge_into_slots,
    merge_order,
    record,
    retain,
    selects,
)
from kondor_core.cron.output import (
    TARGETING,
    CronAd,
    OutputParser,
    OutputProblem,
    ParsedOutput,
    parse_output,
)

__all__ = [
    "DEFAULT_HOOKS_DIR",
    "DEFAULT_JOB_LOAD",
    "DEFAULT_MAX_JOB_LOAD",
    "TARGETING",
    "AutoPublish",
    "CronAd",
    "CronAds",
    "CronError",
    "CronJob",
    "CronMode",
    "CronSettings",
    "HookPathError",
    "OutputParser",
    "OutputProblem",
    "ParsedOutput",
    "attribute_names",
    "hook_path",
    "merge_into_slots",
    "merge_order",
    "parse_args",
    "parse_env",
    "parse_output",
    "parse_period",
    "record",
    "retain",
    "selects",
]
