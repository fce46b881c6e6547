"""When a deferred or crontab job runs: pure functions of (the job's times, now).

The manual's "Time Scheduling for Job Execution" is the specification:

- A job's DeferralTime is its `deferralTime` (an epoch time or an expression of one), or
  for a crontab job the next time its cron_* fields select, "based on the current time
  rounded later in time to the next minute" (`next_cron_time`), computed when it enters the
  queue, is re-queued (after each exit: a crontab job stays in the queue, HTCondor's
  `on_exit_remove = false`) or is released from hold.
- The schedd offers it to the negotiator once `time() + SCHEDD_INTERVAL >= DeferralTime -
  DeferralPrepTime` (`may_match`; no prep time: at once).
- The execution machine starts it at DeferralTime, not earlier; when it arrives later than
  DeferralWindow seconds after DeferralTime, it is put on hold (`start_decision`), with
  HoldReasonCode 20, MissedDeferredExecutionTime (the manual's table of hold codes).
- A crontab job that could not be matched in time "must wait for the next execution time
  specified by the CronTab schedule" (`missed`, then `next_cron_time`).

Kondor evaluates crontabs in UTC (the operator's clock has no site time zone); days of the
month and of the week are or-ed when both are restricted, as in cron, and when only one is
restricted it alone picks the days.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from enum import StrEnum

from kondor_core.api.job import ExecutionJobSpec

#: HoldReasonCode 20, MissedDeferredExecutionTime ("Job ClassAd Attributes": HoldReasonCode).
HOLD_MISSED_DEFERRED_EXECUTION_TIME = 20
#: The hold reason, the manual's words for code 20.
MISSED_REASON = "The job missed its deferred execution time and therefore failed to run."
#: How far ahead a crontab is searched: every (month, day, weekday) recurs within 28 years,
#: and the spec's validation refuses a crontab that names no date at all.
_SEARCH_DAYS = 366 * 29


@dataclass(frozen=True)
class Crontab:
    """The values of the five crontab fields (day of week 0-6, Sunday 0)."""

    minutes: frozenset[int]
    hours: frozenset[int]
    days_of_month: frozenset[int]
    months: frozenset[int]
    days_of_week: frozenset[int]

    def day_matches(self, day: dt.date) -> bool:
        """Whether jobs may run on `day`: its month matches, then its day of the month or
        of the week (or-ed when both are restricted, as cron does)."""
        if day.month not in self.months:
            return False
        by_month_day = day.day in self.days_of_month
        by_week_day = day.isoweekday() % 7 in self.days_of_week
        every_month_day = len(self.days_of_month) == 31
        every_week_day = len(self.days_of_week) == 7
        if every_month_day and not every_week_day:
            return by_week_day
        if every_week_day and not every_month_day:
            return by_month_day
        if every_month_day and every_week_day:
            return True
        return by_month_day or by_week_day


def next_cron_time(crontab: Crontab, now: float) -> int | None:
    """The job's next DeferralTime (epoch seconds, UTC) at `now`: the first selected minute
    from `now` rounded later to the next minute; None when no date in the next 29 years
    matches (which validation refuses)."""
    start = dt.datetime.fromtimestamp(now, dt.UTC).replace(second=0, microsecond=0)
    start += dt.timedelta(minutes=1)
    day = start.date()
    hours = sorted(crontab.hours)
    minutes = sorted(crontab.minutes)
    for _ in range(_SEARCH_DAYS):
        if crontab.day_matches(day):
            first_day = day == start.date()
            for hour in hours:
                if first_day and hour < start.hour:
                    continue
                for minute in minutes:
                    if first_day and hour == start.hour and minute < start.minute:
                        continue
                    at = dt.datetime(day.year, day.month, day.day, hour, minute, tzinfo=dt.UTC)
                    return int(at.timestamp())
        day += dt.timedelta(days=1)
    return None


def may_match(deferral_time: float, prep_time: int | None, now: float, interval: float) -> bool:
    """Whether the schedd offers the job to the negotiator at `now`: `time() +
    SCHEDD_INTERVAL >= DeferralTime - DeferralPrepTime`; a job without a prep time may be
    matched at once (it then waits on its slot, as the manual's plain deferral does)."""
    if prep_time is None:
        return True
    return now + interval >= deferral_time - prep_time


def matchable_at(deferral_time: float, prep_time: int | None, interval: float) -> float | None:
    """The first time `may_match` is true (None: always)."""
    return None if prep_time is None else deferral_time - prep_time - interval


def missed(deferral_time: float, window: int, now: float) -> bool:
    """Whether it is too late to start: more than DeferralWindow seconds after
    DeferralTime ("If this difference is greater than the deferral window ...")."""
    return now - deferral_time > window


class Start(StrEnum):
    """What the execution machine does with a matched job at `now`."""

    #: DeferralTime is still ahead: the job waits on its claimed slot (shown Running).
    WAIT = "Wait"
    #: DeferralTime has come (or passed within the window): the job starts now.
    NOW = "Now"
    #: Past the window: the job is evicted and held (HoldReasonCode 20).
    MISSED = "Missed"


def start_decision(deferral_time: float | None, window: int, now: float) -> Start:
    """The starter's check after the job arrived ("Deferred Execution Time", "Deferral
    Window"); a job without a DeferralTime starts now."""
    if deferral_time is None:
        return Start.NOW
    if now < deferral_time:
        return Start.WAIT
    return Start.MISSED if missed(deferral_time, window, now) else Start.NOW


def match_prep_time(spec: ExecutionJobSpec) -> int | None:
    """DeferralPrepTime as the schedd uses it in `may_match`: a crontab job without
    cronPrepTime is matched about its time (the manual's cron_window example: "with no
    preparation time, the job is likely to miss its deferral time"), a deferred job without
    deferralPrepTime at once (its "Preparation Time": a deferred job "has claimed the
    machine, but is not actually executing")."""
    if spec.prep_seconds is None and spec.is_crontab:
        return 0
    return spec.prep_seconds


def crontab_of(spec: ExecutionJobSpec) -> Crontab | None:
    """The job's crontab (unset fields are `*`), None for a job without one."""
    if not spec.is_crontab:
        return None
    return Crontab(*spec.cron_values())
