"""Job hooks around the launcher: which keyword a job's hooks use, which hook programs that
keyword names, and what the PREPARE_JOB hook's answer means.

The reference's "Hooks" ("Job Hooks That Modify and Monitor Execution", "Keywords to Define
Job Fetch Hooks in the HTCondor Configuration files"):

- The startd's keyword is SLOT<N>_JOB_HOOK_KEYWORD, else STARTD_JOB_HOOK_KEYWORD; it is put
  into fetched jobs as their HookKeyword.
- The starter's keyword (the one PREPARE_JOB, UPDATE_JOB_INFO and JOB_EXIT are read under) is
  STARTER_JOB_HOOK_KEYWORD when set, whatever the job says; else the job's HookKeyword when it
  is valid (the configuration defines at least one `<Keyword>_HOOK_*` for it); else
  STARTER_DEFAULT_JOB_HOOK_KEYWORD; else none, and no hook runs.
- PREPARE_JOB gets the job ad on stdin and prints attributes to insert or update in it.
  HookStatusCode, when present and not negative, is used instead of the exit status unless
  the hook died by a signal: 0 runs the job, 1-299 holds it (HoldReasonCode 19,
  HookPrepareJobFailure, the status code as subcode, HookStatusMessage as HoldReason) and 300
  or more returns it to Idle.
- UPDATE_JOB_INFO runs STARTER_INITIAL_UPDATE_INTERVAL seconds (8) after the job is spawned,
  then every STARTER_UPDATE_INTERVAL seconds (300), with JobState, JobPid, NumPids,
  JobStartDate, RemoteSysCpu, RemoteUserCpu and ImageSize added to the ad; its output and
  exit status are ignored.
- JOB_EXIT runs when the job exits, with the reason as its argument (exit, remove, hold,
  evict) and the exit attributes (ExitReason, ExitBySignal, ExitSignal or ExitCode,
  JobDuration) added; the starter waits for it.

Kondor's own KONDOR_JOB_HOOK_TIMEOUT (seconds, default 60) bounds every hook: one that runs
longer is killed (a PREPARE_JOB killed so holds the job).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

#: The hooks the starter runs around a job, in the order of a job's life.
PREPARE_JOB = "PREPARE_JOB"
UPDATE_JOB_INFO = "UPDATE_JOB_INFO"
JOB_EXIT = "JOB_EXIT"
STARTER_HOOKS = (PREPARE_JOB, UPDATE_JOB_INFO, JOB_EXIT)
#: The startd's hooks (fetch work; `kondor_core.jobs.fetchwork`).
STARTD_HOOKS = ("FETCH_WORK", "REPLY_FETCH", "EVICT_CLAIM")

#: HoldReasonCode HookPrepareJobFailure: PREPARE_JOB could not run or returned failure.
HOOK_PREPARE_JOB_FAILURE = 19

#: The reasons of the Warning Events a failed hook becomes on the ExecutionPoint (the hook
#: could not run, ran past its timeout, printed more than it may, or exited non-zero).
PREPARE_JOB_FAILED = "PrepareJobFailed"
UPDATE_JOB_INFO_FAILED = "UpdateJobInfoFailed"
JOB_EXIT_FAILED = "JobExitFailed"
#: The file in a process job's directory where its supervisor records the failures of
#: UPDATE_JOB_INFO and JOB_EXIT, one `<reason>\t<message>` line each, for the agent to report.
HOOK_FAILURES_FILE = "hook-failures"

DEFAULT_INITIAL_UPDATE_INTERVAL = 8.0
DEFAULT_UPDATE_INTERVAL = 300.0
DEFAULT_TIMEOUT = 60.0

#: Why the starter's job ended, as JOB_EXIT's argument says it.
ExitHow = Literal["exit", "remove", "hold", "evict"]
PrepareAction = Literal["run", "hold", "idle"]


def _upper(macros: Mapping[str, str]) -> dict[str, str]:
    return {name.upper(): value.strip() for name, value in macros.items()}


def _keyword(value: str | None) -> str | None:
    """A keyword as the configuration gives it; empty means unset."""
    if value is None:
        return None
    word = value.strip().strip('"').strip()
    return word or None


def defines_hooks(macros: Mapping[str, str], keyword: str) -> bool:
    """Whether the configuration defines any `<keyword>_HOOK_*` (what makes a keyword valid)."""
    prefix = f"{keyword.upper()}_HOOK_"
    return any(name.upper().startswith(prefix) and value.strip() for name, value in macros.items())


def startd_hook_keyword(macros: Mapping[str, str], slot_id: int) -> str | None:
    """The startd's keyword for slot `slot_id`: SLOT<N>_JOB_HOOK_KEYWORD, else
    STARTD_JOB_HOOK_KEYWORD; None when neither is set."""
    upper = _upper(macros)
    return _keyword(upper.get(f"SLOT{slot_id}_JOB_HOOK_KEYWORD")) or _keyword(
        upper.get("STARTD_JOB_HOOK_KEYWORD")
    )


def starter_hook_keyword(macros: Mapping[str, str], job_hook_keyword: str | None) -> str | None:
    """The keyword the starter's hooks are read under: STARTER_JOB_HOOK_KEYWORD, else the
    job's HookKeyword when the configuration defines hooks for it, else
    STARTER_DEFAULT_JOB_HOOK_KEYWORD; None when no hooks run."""
    upper = _upper(macros)
    forced = _keyword(upper.get("STARTER_JOB_HOOK_KEYWORD"))
    if forced is not None:
        return forced
    wanted = _keyword(job_hook_keyword)
    if wanted is not None and defines_hooks(macros, wanted):
        return wanted
    return _keyword(upper.get("STARTER_DEFAULT_JOB_HOOK_KEYWORD"))


def job_hook_keyword(
    macros: Mapping[str, str],
    *,
    slot_id: int,
    job_hook_keyword: str | None,
    fetched: bool = False,
) -> str | None:
    """The keyword a job's starter hooks use on slot `slot_id`. A fetched job carries the
    startd's keyword as its HookKeyword (the startd inserts it); any other job its own."""
    if fetched:
        job_hook_keyword = startd_hook_keyword(macros, slot_id) or job_hook_keyword
    return starter_hook_keyword(macros, job_hook_keyword)


#: The `<Keyword>_HOOK_<hook>` knobs of the starter's hooks.
JOB_HOOK_KNOB = re.compile(r"(\w+?)_HOOK_(PREPARE_JOB|UPDATE_JOB_INFO|JOB_EXIT)", re.IGNORECASE)
#: The `<Keyword>_HOOK_<hook>` knobs of the startd's (fetch-work) hooks.
STARTD_HOOK_KNOB = re.compile(r"(\w+?)_HOOK_(FETCH_WORK|REPLY_FETCH|EVICT_CLAIM)", re.IGNORECASE)
#: Kondor's per-hook bound: `<Keyword>_HOOK_<hook>_TIMEOUT` seconds.
HOOK_TIMEOUT_KNOB = re.compile(
    r"(\w+?)_HOOK_(PREPARE_JOB|UPDATE_JOB_INFO|JOB_EXIT|FETCH_WORK|REPLY_FETCH|EVICT_CLAIM)"
    r"_TIMEOUT",
    re.IGNORECASE,
)


def hook_programs(macros: Mapping[str, str]) -> dict[str, str]:
    """Every starter hook program the configuration names, by its knob (any keyword)."""
    return {
        name: value.strip()
        for name, value in macros.items()
        if JOB_HOOK_KNOB.fullmatch(name) and value.strip()
    }


def startd_hook_programs(macros: Mapping[str, str]) -> dict[str, str]:
    """Every fetch-work hook (a program or an http(s) URL) the configuration names, by knob."""
    return {
        name: value.strip()
        for name, value in macros.items()
        if STARTD_HOOK_KNOB.fullmatch(name) and value.strip()
    }


def check_hook_settings(macros: Mapping[str, str]) -> None:
    """The intervals and timeouts as numbers of seconds; HookSettingsError names the knob."""
    upper = _upper(macros)
    _seconds(upper, "STARTER_INITIAL_UPDATE_INTERVAL", DEFAULT_INITIAL_UPDATE_INTERVAL)
    _seconds(upper, "STARTER_UPDATE_INTERVAL", DEFAULT_UPDATE_INTERVAL)
    _seconds(upper, "KONDOR_JOB_HOOK_TIMEOUT", DEFAULT_TIMEOUT)
    for name in upper:
        if HOOK_TIMEOUT_KNOB.fullmatch(name):
            _seconds(upper, name, DEFAULT_TIMEOUT)


def hook_timeout(macros: Mapping[str, str], knob: str) -> float:
    """The bound on one hook's run: `<knob>_TIMEOUT`, else KONDOR_JOB_HOOK_TIMEOUT, else 60 s."""
    upper = _upper(macros)
    default = _seconds(upper, "KONDOR_JOB_HOOK_TIMEOUT", DEFAULT_TIMEOUT)
    return _seconds(upper, f"{knob.upper()}_TIMEOUT", default)


class HookSettingsError(ValueError):
    """A hook knob whose value Kondor cannot use; the message names the knob."""


def _seconds(upper: Mapping[str, str], knob: str, default: float) -> float:
    text = upper.get(knob, "")
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        raise HookSettingsError(f"{knob} = {text}: expected a number of seconds") from None
    if not value > 0:
        raise HookSettingsError(f"{knob} = {text}: expected a number of seconds above 0")
    return value


@dataclass(frozen=True)
class JobHooks:
    """The starter hooks of one keyword: the programs (as configured, not yet checked against
    the hooks directory) by the knob that names them, and the intervals."""

    keyword: str
    #: Knob name (`<Keyword>_HOOK_<hook>`) -> the program it names, for the hooks set.
    programs: Mapping[str, str]
    initial_update_interval: float = DEFAULT_INITIAL_UPDATE_INTERVAL
    update_interval: float = DEFAULT_UPDATE_INTERVAL
    timeout: float = DEFAULT_TIMEOUT

    def knob(self, hook: str) -> str:
        return f"{self.keyword}_HOOK_{hook}"

    def program(self, hook: str) -> str | None:
        return self.programs.get(self.knob(hook))


def job_hooks(
    macros: Mapping[str, str],
    *,
    slot_id: int,
    hook_keyword: str | None,
    fetched: bool = False,
) -> JobHooks | None:
    """The starter hooks for a job on slot `slot_id` whose HookKeyword is `hook_keyword`,
    None when the resolved keyword names none."""
    keyword = job_hook_keyword(
        macros, slot_id=slot_id, job_hook_keyword=hook_keyword, fetched=fetched
    )
    if keyword is None:
        return None
    upper = _upper(macros)
    programs = {
        f"{keyword}_HOOK_{hook}": upper[f"{keyword.upper()}_HOOK_{hook}"]
        for hook in STARTER_HOOKS
        if upper.get(f"{keyword.upper()}_HOOK_{hook}")
    }
    if not programs:
        return None
    return JobHooks(
        keyword=keyword,
        programs=programs,
        initial_update_interval=_seconds(
            upper, "STARTER_INITIAL_UPDATE_INTERVAL", DEFAULT_INITIAL_UPDATE_INTERVAL
        ),
        update_interval=_seconds(upper, "STARTER_UPDATE_INTERVAL", DEFAULT_UPDATE_INTERVAL),
        timeout=_seconds(upper, "KONDOR_JOB_HOOK_TIMEOUT", DEFAULT_TIMEOUT),
    )


@dataclass(frozen=True)
class PrepareOutcome:
    """What PREPARE_JOB's answer does to the job: run it, hold it, or return it to Idle."""

    action: PrepareAction
    status: int = 0
    message: str = ""


def prepare_outcome(
    exit_code: int | None,
    exit_signal: int | None,
    output: Mapping[str, Any],
    *,
    knob: str,
) -> PrepareOutcome:
    """The starter's reading of PREPARE_JOB: HookStatusCode (when an int >= 0) before the
    exit status, unless a signal ended the hook; 0 runs, 1-299 holds, 300 and up is Idle.
    `output` is the ad the hook printed; `knob` names the hook in messages."""
    said = output.get("HookStatusMessage")
    message = said if isinstance(said, str) and said else ""
    if exit_signal is not None:
        return PrepareOutcome(
            "hold",
            exit_signal,
            message or f"{knob} was killed by signal {exit_signal}",
        )
    status = exit_code or 0
    code = output.get("HookStatusCode")
    if isinstance(code, int) and not isinstance(code, bool) and code >= 0:
        status = code
    if status == 0:
        return PrepareOutcome("run")
    if not message:
        message = f"{knob} failed (status {status})"
    return PrepareOutcome("hold" if status < 300 else "idle", status, message)


def update_times(start: float, initial: float, interval: float, until: float) -> list[float]:
    """When UPDATE_JOB_INFO runs for a job spawned at `start`, up to `until`."""
    times: list[float] = []
    at = start + initial
    while at <= until:
        times.append(at)
        at += interval
    return times


def exit_reason(how: ExitHow, *, exit_code: int | None, exit_signal: int | None) -> str:
    """JOB_EXIT's ExitReason, in words."""
    if how == "exit":
        if exit_signal is not None:
            return f"died on signal {exit_signal}"
        return f"exited normally with status {exit_code or 0}"
    return {
        "remove": "The job was removed",
        "hold": "The job was put on hold",
        "evict": "The job was evicted from the slot",
    }[how]
