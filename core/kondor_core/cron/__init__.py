"""Startd cron (the reference's "Daemon ClassAd Hooks"): job definitions, their schedule,
output, merging.

Pure: `kondor_core.config` compiles the jobs from a SlotPolicy (`spec.cron` and
STARTD_CRON_* in condorConfig), the agent runs them (`kondor_agent.cron`) when
`schedule.due` says (`schedule` holds the transitions, under their own names) and feeds each
run's output to `parse_output` / `OutputParser`, keeps the ads with `record`, and the startd
merges them into its slot ads (`kondor_core.startd`).
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
from kondor_core.cron.kept import CronAds, attribute_names, merge_order, record, retain
from kondor_core.cron.output import (
    TARGETING,
    CronAd,
    OutputParser,
    OutputProblem,
    OutputReader,
    ParsedOutput,
    parse_output,
)
from kondor_core.cron.schedule import HOLD_RETRY, CronAction, CronState

__all__ = [
    "DEFAULT_HOOKS_DIR",
    "DEFAULT_JOB_LOAD",
    "DEFAULT_MAX_JOB_LOAD",
    "HOLD_RETRY",
    "TARGETING",
    "AutoPublish",
    "CronAction",
    "CronAd",
    "CronAds",
    "CronError",
    "CronJob",
    "CronMode",
    "CronSettings",
    "CronState",
    "HookPathError",
    "OutputParser",
    "OutputProblem",
    "OutputReader",
    "ParsedOutput",
    "attribute_names",
    "hook_path",
    "merge_order",
    "parse_args",
    "parse_env",
    "parse_output",
    "parse_period",
    "record",
    "retain",
]
