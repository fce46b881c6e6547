"""The crontab fields of a job (condor_submit's cron_minute ... cron_day_of_week), parsed.

The manual's "Time Scheduling for Job Execution", "Semantics for CronTab Specification" is
the specification: each field is `*`, a value, a range `a-b` (inclusive, a not above b), a
step over a range or `*` (`10-30/5`, `*/3`), or a comma-separated list of those (their
union; repeats ignored). Values outside the field's range are refused; day of week 7 is
Sunday, as 0 is. Parsing is here, beside the API model that validates with it at admission;
what the fields mean for when a job runs is `kondor_core.jobs.deferral`.
"""

from __future__ import annotations

#: The crontab fields: the spec's name, condor_submit's command, the job attribute, the range.
CRON_FIELDS: tuple[tuple[str, str, str, int, int], ...] = (
    ("cronMinute", "cron_minute", "CronMinute", 0, 59),
    ("cronHour", "cron_hour", "CronHour", 0, 23),
    ("cronDayOfMonth", "cron_day_of_month", "CronDayOfMonth", 1, 31),
    ("cronMonth", "cron_month", "CronMonth", 1, 12),
    ("cronDayOfWeek", "cron_day_of_week", "CronDayOfWeek", 0, 7),
)
_RANGES = {spec: (low, high) for spec, _, _, low, high in CRON_FIELDS}


def parse_cron_field(text: str, field: str) -> frozenset[int]:
    """The values `text` selects for the crontab field `field` (its spec name, `cronMinute`
    ...); ValueError naming the field, the value and what is allowed otherwise. Day of week
    7 becomes 0 (both are Sunday)."""
    low, high = _RANGES[field]
    allowed = (
        f"allowed: *, a value in {low}-{high}, a range a-b, a step */n or a-b/n, "
        "or a comma-separated list of these"
    )
    values: set[int] = set()
    for entry in str(text).split(","):
        item = entry.strip()
        if not item:
            raise ValueError(f"{field} {text!r} has an empty list entry; {allowed}")
        values |= _item(item, text, field, (low, high), allowed)
    if field == "cronDayOfWeek" and 7 in values:
        values = (values - {7}) | {0}
    return frozenset(values)


def _item(item: str, text: str, field: str, bounds: tuple[int, int], allowed: str) -> set[int]:
    low, high = bounds
    base, slash, step_text = item.partition("/")
    step = 1
    if slash:
        step = _number(step_text, text, field, allowed)
        if step < 1:
            raise ValueError(f"{field} {text!r}: a step must be 1 or more; {allowed}")
    if base == "*":
        first, last = low, high
    elif "-" in base:
        left, _, right = base.partition("-")
        first = _number(left, text, field, allowed)
        last = _number(right, text, field, allowed)
        if first > last:
            raise ValueError(
                f"{field} {text!r}: in range {base} the left value must not exceed the right"
            )
    elif slash:
        raise ValueError(f"{field} {text!r}: a step follows a range or *, not {base!r}; {allowed}")
    else:
        first = last = _number(base, text, field, allowed)
    for value in (first, last):
        if not low <= value <= high:
            raise ValueError(f"{field} {text!r}: {value} is outside {low}-{high}; {allowed}")
    return set(range(first, last + 1, step))


def _number(word: str, text: str, field: str, allowed: str) -> int:
    word = word.strip()
    if not word.isdigit():
        raise ValueError(f"{field} {text!r}: {word!r} is not a whole number; {allowed}")
    return int(word)
