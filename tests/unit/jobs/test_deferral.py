"""Time scheduling ("Time Scheduling for Job Execution"): the manual's crontab examples, the
next DeferralTime, when a deferred job may be matched, and when it is held for missing its
window."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from kondor_core.api.crontab import parse_cron_field
from kondor_core.api.job import ExecutionJobSpec
from kondor_core.jobs import submit_ad
from kondor_core.jobs.deferral import (
    HOLD_MISSED_DEFERRED_EXECUTION_TIME,
    Crontab,
    Start,
    crontab_of,
    may_match,
    next_cron_time,
    start_decision,
)


def _at(text: str) -> int:
    return int(dt.datetime.fromisoformat(text).replace(tzinfo=dt.UTC).timestamp())


# -- the manual's syntax examples ("Semantics for CronTab Specification") -------------------------


@pytest.mark.parametrize(
    ("field", "text", "values"),
    [
        ("cronMonth", "*", set(range(1, 13))),
        ("cronHour", "0-4", {0, 1, 2, 3, 4}),
        ("cronMinute", "15,20,25,30", {15, 20, 25, 30}),
        ("cronHour", "0-3,9-12,15", {0, 1, 2, 3, 9, 10, 11, 12, 15}),
        ("cronMinute", "10-30/5", {10, 15, 20, 25, 30}),
        ("cronHour", "*/3", {0, 3, 6, 9, 12, 15, 18, 21}),
        ("cronMinute", "15,15,15", {15}),  # "Multiple entries of the same value are ignored"
        ("cronMinute", "*/10,*/6", {0, 6, 10, 12, 18, 20, 24, 30, 36, 40, 42, 48, 50, 54}),
        ("cronHour", "0-23/2", set(range(0, 24, 2))),
        ("cronDayOfWeek", "7", {0}),  # "Sunday is 0 or 7"
        ("cronDayOfWeek", "0-7", set(range(7))),
        ("cronDayOfMonth", "1-31", set(range(1, 32))),
    ],
)
def test_the_manuals_crontab_syntax(field: str, text: str, values: set[int]) -> None:
    assert parse_cron_field(text, field) == values


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ({"cronMinute": 61}, "cronMinute '61': 61 is outside 0-59"),
        ({"cronMinute": "*/0"}, "a step must be 1 or more"),
        ({"cronMinute": ""}, "empty list entry"),
        ({"cronHour": "1,,2"}, "empty list entry"),
        ({"cronHour": "24"}, "24 is outside 0-23"),
        ({"cronDayOfMonth": "0"}, "0 is outside 1-31"),
        ({"cronMonth": "13"}, "13 is outside 1-12"),
        ({"cronDayOfWeek": "8"}, "8 is outside 0-7"),
        ({"cronHour": "5-2"}, "the left value must not exceed the right"),
        ({"cronMinute": "5/2"}, "a step follows a range or *"),
        ({"cronMinute": "x"}, "'x' is not a whole number"),
        ({"cronDayOfMonth": "30-31", "cronMonth": "2"}, "names no day that exists"),
        ({"cronMinute": "0", "deferralTime": 5}, "not both"),
        ({"cronWindow": 60}, "cronWindow and cronPrepTime need a crontab"),
        ({"deferralWindow": 60}, "need deferralTime"),
        ({"deferralTime": "QDate +"}, "deferralTime"),
        ({"deferralWindow": -1, "deferralTime": 5}, "greater than or equal to 0"),
    ],
)
def test_bad_schedules_are_refused_naming_field_and_value(spec: dict[str, Any], says: str) -> None:
    with pytest.raises(ValidationError, match=None) as error:
        ExecutionJobSpec.model_validate(spec)
    assert says in str(error.value)


def test_a_weekday_makes_any_month_day_spec_possible() -> None:
    ExecutionJobSpec.model_validate({"cronDayOfMonth": "31", "cronMonth": "2", "cronDayOfWeek": 1})


# -- the next DeferralTime: the manual's usage examples --------------------------------------------


def _next(spec: dict[str, Any], now: str) -> str:
    crontab = crontab_of(ExecutionJobSpec.model_validate(spec))
    assert crontab is not None
    at = next_cron_time(crontab, _at(now))
    assert at is not None
    return dt.datetime.fromtimestamp(at, dt.UTC).strftime("%Y-%m-%d %H:%M")


@pytest.mark.parametrize(
    ("spec", "now", "then"),
    [
        # "if a job is submitted at 9:30am, then the next deferral time ... 10:00am"
        ({"cronMinute": 0, "cronHour": "*", "cronPrepTime": 300}, "2026-03-02 09:30", "10:00"),
        # rounded later to the next minute: a job at 10:00:00 exactly is next at 11:00
        ({"cronMinute": 0}, "2026-03-02 10:00:00", "11:00"),
        ({"cronMinute": 0}, "2026-03-02 09:59:59", "10:00"),
        ({"cronMinute": "*"}, "2026-03-02 09:30:10", "09:31"),
        # "Run 23 minutes after every two hours, every day of the week"
        (
            {
                "cronMinute": 23,
                "cronHour": "0-23/2",
                "cronDayOfMonth": "*",
                "cronMonth": "*",
                "cronDayOfWeek": "*",
            },
            "2026-03-02 09:30",
            "10:23",
        ),
        ({"cronMinute": 23, "cronHour": "0-23/2"}, "2026-03-02 23:30", "2026-03-03 00:23"),
    ],
)
def test_next_deferral_time(spec: dict[str, Any], now: str, then: str) -> None:
    got = _next(spec, now)
    assert got.endswith(then) if len(then) == 5 else got == then


# "Run at 10:30pm on each of May 10th to May 20th, as well as every remaining Monday within
# the month of May" (the manual's lines say hour 20 and day of week 2: Tuesday at 20:30).
_MAY = {
    "cronMinute": 30,
    "cronHour": 20,
    "cronDayOfMonth": "10-20",
    "cronMonth": 5,
    "cronDayOfWeek": 2,
}


@pytest.mark.parametrize(
    ("now", "then"),
    [
        ("2026-01-01 00:00", "2026-05-05 20:30"),  # 5 May 2026 is a Tuesday, before the 10th
        ("2026-05-05 20:30", "2026-05-10 20:30"),
        ("2026-05-15 21:00", "2026-05-16 20:30"),
        ("2026-05-20 21:00", "2026-05-26 20:30"),  # the remaining Tuesday
        ("2026-05-26 21:00", "2027-05-04 20:30"),
    ],
)
def test_day_of_month_or_day_of_week(now: str, then: str) -> None:
    assert _next(_MAY, now) == then


# "Run every 10 minutes and every 6 minutes before noon on January 18th"
_JAN = {
    "cronMinute": "*/10,*/6",
    "cronHour": "0-11",
    "cronDayOfMonth": 18,
    "cronMonth": 1,
    "cronDayOfWeek": "*",
    "cronPrepTime": 120,
}


@pytest.mark.parametrize(
    ("now", "then"),
    [
        ("2026-01-01 00:00", "2026-01-18 00:00"),
        ("2026-01-18 00:00", "2026-01-18 00:06"),
        ("2026-01-18 00:06", "2026-01-18 00:10"),
        ("2026-01-18 11:54", "2027-01-18 00:00"),
    ],
)
def test_every_ten_and_six_minutes_before_noon(now: str, then: str) -> None:
    assert _next(_JAN, now) == then


def test_a_leap_day_is_found() -> None:
    assert (
        _next(
            {"cronMinute": 0, "cronHour": 0, "cronDayOfMonth": 29, "cronMonth": 2},
            "2026-03-01 00:00",
        )
        == "2028-02-29 00:00"
    )


# -- matching ahead of time, and the window ------------------------------------------------------


@pytest.mark.parametrize(
    ("now", "prep", "interval", "matched"),
    [
        # "HTCondor may attempt to match the job ... once it is 9:55am" (prep 300, 10:00)
        ("09:55:00", 300, 0, True),
        ("09:54:59", 300, 0, False),
        # ( time() + SCHEDD_INTERVAL ) >= ( DeferralTime - CronPrepTime )
        ("09:54:00", 300, 60, True),
        ("09:53:59", 300, 60, False),
        # "delays the job from being matched until 60 seconds before"
        ("09:59:00", 60, 0, True),
        ("09:58:00", 60, 0, False),
        # no prep time: matched at once, and waits on its slot
        ("01:00:00", None, 0, True),
    ],
)
def test_may_match(now: str, prep: int | None, interval: int, matched: bool) -> None:
    at = _at("2026-03-02 10:00")
    assert may_match(at, prep, _at(f"2026-03-02 {now}"), interval) is matched


@pytest.mark.parametrize(
    ("deferral", "window", "now", "start"),
    [
        (None, 0, 100, Start.NOW),
        (160, 0, 100, Start.WAIT),  # the job always waits: "deferral_time = (QDate + 60)"
        (160, 0, 160, Start.NOW),
        (160, 0, 161, Start.MISSED),
        # "the deferral time is 45 seconds in the past ... 75 seconds remain in the window"
        (1000, 120, 1045, Start.NOW),
        (1000, 120, 1120, Start.NOW),  # "less than or equal to the deferral window"
        (1000, 120, 1121, Start.MISSED),
    ],
)
def test_start_decision(deferral: int | None, window: int, now: int, start: Start) -> None:
    assert start_decision(deferral, window, now) is start


def test_hold_code_is_missed_deferred_execution_time() -> None:
    assert HOLD_MISSED_DEFERRED_EXECUTION_TIME == 20


# -- the job ad ----------------------------------------------------------------------------------


def test_the_job_ad_carries_htcondors_attributes() -> None:
    spec = ExecutionJobSpec.model_validate(
        {"deferralTime": "QDate + 60", "deferralWindow": 120, "deferralPrepTime": 30}
    )
    ad = submit_ad(spec, "ns/job", qdate=1000)
    assert ad.eval("DeferralTime") == 1060
    assert (ad["DeferralWindow"], ad["DeferralPrepTime"]) == (120, 30)
    assert submit_ad(spec, "ns/job", qdate=1000, deferral_time=5)["DeferralTime"] == 5
    cron = ExecutionJobSpec.model_validate({"cronMinute": "*/10", "cronWindow": 60})
    ad = submit_ad(cron, "ns/job", deferral_time=600)
    assert (ad["CronMinute"], ad["DeferralTime"], ad["DeferralWindow"]) == ("*/10", 600, 60)
    assert ad["OnExitRemove"] is False
    assert "CronHour" not in ad and "DeferralPrepTime" not in ad
    assert "DeferralTime" not in submit_ad(ExecutionJobSpec(), "ns/plain")


# -- an oracle: the next time is the first minute, scanned one by one, the crontab selects -------

_DENSE = st.fixed_dictionaries(
    {
        "cronMinute": st.sampled_from(["*", "0", "*/7", "5-50/9", "1,30,59", "*/10,*/6"]),
        "cronHour": st.sampled_from(["*", "*/5", "0-3,22", "12"]),
        "cronDayOfMonth": st.sampled_from(["*", "1-10", "15,31"]),
        "cronDayOfWeek": st.sampled_from(["*", "0", "1-5", "6,7"]),
    }
)


def _selects(crontab: Crontab, at: dt.datetime) -> bool:
    """The oracle: the crontab's fields select this minute (parsed once per example, not per
    minute scanned: a month of minutes is 44,640 of them)."""
    return (
        at.minute in crontab.minutes and at.hour in crontab.hours and crontab.day_matches(at.date())
    )


@settings(max_examples=60, deadline=None)
@given(spec=_DENSE, offset=st.integers(min_value=0, max_value=366 * 86400))
def test_the_next_time_is_the_first_selected_minute(spec: dict[str, str], offset: int) -> None:
    parsed = ExecutionJobSpec.model_validate(spec)
    crontab = crontab_of(parsed)
    assert crontab is not None
    now = _at("2026-01-01 00:00") + offset + 17
    at = next_cron_time(crontab, now)
    assert at is not None and at > now and at % 60 == 0
    minute = dt.datetime.fromtimestamp(now - now % 60 + 60, dt.UTC)
    while int(minute.timestamp()) < at:  # no selected minute in between
        assert not _selects(crontab, minute), minute
        minute += dt.timedelta(minutes=1)
    assert _selects(crontab, dt.datetime.fromtimestamp(at, dt.UTC))
