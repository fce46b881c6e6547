"""Startd cron job definitions: what to run, how often, and where its output may go.

The reference's "Startd Cron" / "Daemon ClassAd Hooks" section and HTCondor's
configuration macros (STARTD_CRON_<JobName>_*) are the specification:

- MODE is Periodic (the default), WaitForExit or OneShot. OnDemand is the benchmark
  mechanism's mode; Kondor runs its own benchmarks, so it is refused here.
- PERIOD is a whole number with an optional s, m or h suffix (seconds by default), at
  least 1 second; Periodic and WaitForExit need one, OneShot ignores it (with a warning).
  For Periodic it is the time between starts, for WaitForExit the wait after an exit.
- PREFIX is prepended to every attribute the job outputs (letters, digits, underscore).
- SLOTS restricts the slot ids whose ads may take the output.
- KILL (Periodic and OneShot): kill a run still going when the next one is due.
- RECONFIG_RERUN (OneShot): run again when the policy changes.
- JOB_LOAD: the assumed CPU load of one run (default 0.01), counted against
  STARTD_CRON_MAX_JOB_LOAD (default 0.1).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

#: HTCondor's defaults ("Daemon Hook Configuration Options").
DEFAULT_JOB_LOAD = 0.01
DEFAULT_MAX_JOB_LOAD = 0.1
#: The agent's hooks directory unless `--hooks-dir` says otherwise.
DEFAULT_HOOKS_DIR = "/etc/kondor/hooks"

_PERIOD = re.compile(r"\s*(\d+)\s*([smhSMH]?)\s*")
_PREFIX = re.compile(r"[A-Za-z0-9_]*")
_JOB_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class CronMode(StrEnum):
    PERIODIC = "Periodic"
    WAIT_FOR_EXIT = "WaitForExit"
    ONE_SHOT = "OneShot"


class AutoPublish(StrEnum):
    """STARTD_CRON_AUTOPUBLISH: when a job's output is published at once (besides
    `- update:true`); otherwise it goes out with the next update (UPDATE_INTERVAL)."""

    NEVER = "Never"
    ALWAYS = "Always"
    IF_CHANGED = "If_Changed"


class CronError(ValueError):
    """A cron job definition that cannot run; the message names the field."""


@dataclass(frozen=True)
class CronJob:
    """One startd cron job after compilation."""

    name: str
    #: As written: relative paths are inside the agent's hooks directory.
    executable: str
    args: tuple[str, ...] = ()
    mode: CronMode = CronMode.PERIODIC
    #: Seconds; 0 for OneShot.
    period: int = 0
    prefix: str = ""
    #: Slot ids whose ads may take the output; empty: every slot.
    slots: tuple[int, ...] = ()
    kill: bool = False
    reconfig_rerun: bool = False
    #: Send SIGHUP to a running job when the policy changes (STARTD_CRON_<name>_RECONFIG).
    reconfig: bool = False
    job_load: float = DEFAULT_JOB_LOAD
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    #: STARTD_CRON_<name>_CONDITION: run only while it is TRUE against the machine ad.
    condition: str | None = None
    #: Where the executable was given, for messages (`spec.cron[0].executable`); not part of
    #: what the job does.
    source: str = field(default="", compare=False)

    def in_slot_list(self, slot_id: int) -> bool:
        return not self.slots or slot_id in self.slots


@dataclass(frozen=True)
class CronSettings:
    """The machine-wide STARTD_CRON_* knobs."""

    max_job_load: float = DEFAULT_MAX_JOB_LOAD
    log_non_zero_exit: bool = False
    autopublish: AutoPublish = AutoPublish.NEVER


def parse_period(text: str, *, field: str) -> int:
    """`15s`, `10m`, `2h` or `30` (seconds) -> seconds; at least 1."""
    match = _PERIOD.fullmatch(text)
    if match is None:
        raise CronError(
            f"{field}: {text!r} is not a period; use whole seconds with an optional s, m or h "
            "suffix (15s, 10m, 2h)"
        )
    seconds = int(match.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[match.group(2).lower()]
    if seconds < 1:
        raise CronError(f"{field}: {text!r} is shorter than the minimum period of 1 second")
    return seconds


def parse_mode(text: str, *, field: str) -> CronMode:
    for mode in CronMode:
        if mode.value.lower() == text.strip().lower():
            return mode
    if text.strip().lower() == "ondemand":
        raise CronError(
            f"{field}: OnDemand is the benchmark mechanism's mode; Kondor runs its own "
            "benchmarks (RUNBENCHMARKS), so use Periodic, WaitForExit or OneShot"
        )
    raise CronError(f"{field}: {text!r} is not a mode; use Periodic, WaitForExit or OneShot")


def check_prefix(prefix: str, *, field: str) -> str:
    if not _PREFIX.fullmatch(prefix):
        raise CronError(
            f"{field}: {prefix!r} is not a prefix; a prefix holds letters, digits and '_' only"
        )
    return prefix


def check_job_name(name: str, *, field: str) -> str:
    if not _JOB_NAME.fullmatch(name):
        raise CronError(f"{field}: {name!r} is not a job name; use letters, digits and '_'")
    return name


def parse_slots(text: str, *, field: str) -> tuple[int, ...]:
    """STARTD_CRON_<name>_SLOTS: a comma or space separated list of slot ids."""
    items = [item for item in re.split(r"[,\s]+", text.strip()) if item]
    if not all(item.isdigit() and int(item) >= 1 for item in items):
        raise CronError(f"{field}: {text!r} is not a list of slot ids; use 1, 2, ...")
    return tuple(sorted({int(item) for item in items}))


def parse_args(text: str, *, field: str) -> tuple[str, ...]:
    """HTCondor's argument syntax: V2 when double-quoted (spaces separate, single quotes
    group, '' is a literal quote), else V1 (whitespace separates)."""
    stripped = text.strip()
    if not stripped.startswith('"'):
        return tuple(stripped.split())
    if len(stripped) < 2 or not stripped.endswith('"'):
        raise CronError(f"{field}: {text!r} opens a double quote it does not close")
    return _v2_words(stripped[1:-1], field=field, text=text)


def _v2_words(body: str, *, field: str, text: str) -> tuple[str, ...]:
    words: list[str] = []
    current: list[str] = []
    started = quoted = False
    index = 0
    while index < len(body):
        char = body[index]
        if char == "'":
            if quoted and body[index + 1 : index + 2] == "'":
                current.append("'")
                index += 2
                continue
            quoted, started = not quoted, True
        elif char.isspace() and not quoted:
            if started:
                words.append("".join(current))
            current, started = [], False
        else:
            current.append(char)
            started = True
        index += 1
    if quoted:
        raise CronError(f"{field}: {text!r} opens a single quote it does not close")
    if started:
        words.append("".join(current))
    return tuple(words)


def parse_env(text: str, *, field: str) -> dict[str, str]:
    """HTCondor's environment syntax: V2 when double-quoted (`"A=1 B='two words'"`), else V1
    (`A=1;B=2`)."""
    stripped = text.strip()
    items = (
        parse_args(stripped, field=field)
        if stripped.startswith('"')
        else [item for item in stripped.split(";") if item.strip()]
    )
    env: dict[str, str] = {}
    for item in items:
        name, equals, value = item.strip().partition("=")
        if not equals or not _ENV_NAME.fullmatch(name):
            raise CronError(f"{field}: {item!r} is not NAME=value")
        env[name] = value
    return env


def check_env_names(env: Mapping[str, str], *, field: str) -> None:
    for name in env:
        if not _ENV_NAME.fullmatch(name):
            raise CronError(f"{field}: {name!r} is not an environment variable name")


class HookPathError(ValueError):
    """An executable outside the hooks directory."""


def hook_path(executable: str, hooks_dir: str, *, field: str) -> str:
    """Where `executable` lives: inside `hooks_dir` (a relative path is taken from it).

    Lexical only (no file system): `..` that climbs out and absolute paths elsewhere are
    refused. The agent checks again with symlinks resolved.
    """
    if not executable.strip():
        raise HookPathError(f"{field}: the executable is empty")
    root = posixpath.normpath(hooks_dir)
    joined = posixpath.normpath(posixpath.join(root, executable))
    if joined == root or posixpath.commonpath([root, joined]) != root:
        raise HookPathError(
            f"{field}: {executable!r} is outside the hooks directory {root}; startd cron "
            "executables and job hooks must be in it (a relative path is taken from it)"
        )
    return joined
