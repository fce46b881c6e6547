"""Startd cron ads merged into the slot ads.

The reference's "Startd Cron": each slot ad takes every ad whose targeting attributes select it,
tried in order of priority — SlotMergeConstraint (evaluated with the slot ad as TARGET),
then SlotName or Name (a prefix of the slot's Name), then SlotTypeId, then SlotId — and an
ad with none of them goes to every slot. STARTD_CRON_<job>_SLOTS limits the slot ids.

Order: a job's own (unnamed) ad merges first and its named ads after it, in the order
they first appeared, jobs in job-list order, so the reference's example gives Value 1 on
slot1, 2 on slot2 and 10 on the rest (the startd registers a job's own ad when the job is
created, before any named one).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kondor_core.classads import ClassAd, ExpressionError, evaluate, parse_expr
from kondor_core.cron import CronAd, CronAds, merge_order
from kondor_core.slots.ads import SlotAd, literal_or_expression


def selects(ad: CronAd, slot: SlotAd, slot_classad: Any = None) -> bool:
    """Whether `ad` merges into `slot` (see the module docstring)."""
    slot_id = _integer(_get(slot.attributes, "SlotID"))
    if ad.slots and (slot_id is None or slot_id not in ad.slots):
        return False
    targeting = ad.targeting
    constraint = targeting.get("SlotMergeConstraint")
    if constraint is not None:
        my = _ad_of(ad)
        target = slot_classad if slot_classad is not None else slot.to_classad()
        try:
            return parse_expr(constraint, field="SlotMergeConstraint").eval(my, target) is True
        except ExpressionError:  # checked when the line was read
            return False
    for attribute in ("SlotName", "Name"):
        text = targeting.get(attribute)
        if text is None:
            continue
        name = _constant(text)
        slot_name = _get(slot.attributes, "Name")
        if isinstance(name, str) and name and isinstance(slot_name, str):
            return slot_name.startswith(name)
    for attribute, slot_attribute in (("SlotTypeId", "SlotTypeID"), ("SlotId", "SlotID")):
        text = targeting.get(attribute)
        if text is None:
            continue
        wanted = _integer(_constant(text))
        have = _integer(_get(slot.attributes, slot_attribute))
        if wanted is not None and have is not None:
            return wanted == have
    return True


def merge_into_slots(
    slots: Sequence[SlotAd], current: CronAds, jobs: Sequence[str] = ()
) -> list[SlotAd]:
    """The slot ads with the cron ads merged in (a later ad's attribute replaces an earlier
    one's); `slots` are not changed."""
    if not current:
        return list(slots)
    ordered = merge_order(current, jobs)
    needs_classad = any("SlotMergeConstraint" in ad.targeting for ad in ordered)
    out = []
    for slot in slots:
        target = slot.to_classad() if needs_classad else None
        attributes = dict(slot.attributes)
        expressions = set(slot.expressions)
        for ad in ordered:
            if not selects(ad, slot, target):
                continue
            for name, text in ad.attributes.items():
                for existing in [k for k in attributes if k.lower() == name.lower()]:
                    del attributes[existing]
                    expressions.discard(existing)
                is_literal, value = literal_or_expression(text)
                attributes[name] = value
                if not is_literal:
                    expressions.add(name)
        out.append(SlotAd(slot.name, attributes, frozenset(expressions)))
    return out


def _ad_of(ad: CronAd) -> Any:
    values: dict[str, Any] = {}
    for name, text in {**ad.attributes, **ad.targeting}.items():
        values[name] = parse_expr(text, field=name)
    return ClassAd(values)


def _get(attributes: Mapping[str, Any], name: str) -> Any:
    if name in attributes:
        return attributes[name]
    lowered = name.lower()
    for key, value in attributes.items():
        if key.lower() == lowered:
            return value
    return None


def _constant(text: str) -> Any:
    try:
        return evaluate(text, field="cron attribute")
    except ExpressionError:
        return None


def _integer(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None
