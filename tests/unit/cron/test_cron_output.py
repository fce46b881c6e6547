"""Startd cron output: attribute lines, `-` separators, named ads, and the merge into slot ads
(the reference's "Startd Cron": SlotMergeConstraint, SlotName, SlotTypeId, SlotId)."""

from __future__ import annotations

from typing import Any

import pytest

from kondor_core.cron import CronJob, parse_output, record
from kondor_core.slots import SlotAd
from kondor_core.startd import merge_into_slots

JOB = CronJob(name="test", executable="test", period=60)


def _slot(number: int, type_id: int = 1, machine: str = "node") -> SlotAd:
    attributes = {
        "Name": f"slot{number}@{machine}",
        "SlotID": number,
        "SlotTypeID": type_id,
        "Cpus": 1,
        "State": "Unclaimed",
    }
    return SlotAd(attributes["Name"], attributes, frozenset())


SLOTS = [_slot(1), _slot(2), _slot(3, type_id=2), _slot(4, type_id=2)]


def _merged(job: CronJob, text: str, slots: list[SlotAd] = SLOTS) -> dict[str, dict[str, Any]]:
    parsed = parse_output(job, text)
    assert parsed.problems == ()
    ads = merge_into_slots(slots, record({}, parsed.ads), [job.name])
    return {ad.name.split("@")[0]: ad.attributes for ad in ads}


def test_the_references_multi_ad_example() -> None:
    """Value=1 on slot1, Value=2 on slot2, Value=10 on every other slot, and an update now."""
    output = "Value=1\nSlotId=1\n-s1\nValue=2\nSlotId=2\n-s2\nValue=10\n- update:true\n"
    parsed = parse_output(JOB, output)
    assert [ad.full_name for ad in parsed.ads] == ["tests1", "tests2", "test"]
    assert parsed.update is True
    merged = _merged(JOB, output)
    assert {slot: ad["Value"] for slot, ad in merged.items()} == {
        "slot1": 1,
        "slot2": 2,
        "slot3": 10,
        "slot4": 10,
    }
    # The targeting attribute is never merged: slot1 keeps its own SlotID.
    assert merged["slot2"]["SlotID"] == 2


def test_a_named_ad_replaces_the_one_of_its_name_and_others_stay() -> None:
    first = parse_output(JOB, "Value=1\nSlotId=1\n-s1\nOther=5\n-s2\n")
    second = parse_output(JOB, "Value=7\nSlotId=1\n-s1\n")
    ads = record(record({}, first.ads), second.ads)
    assert list(ads) == ["tests1", "tests2"]
    merged = merge_into_slots(SLOTS, ads, ["test"])
    assert merged[0].attributes["Value"] == 7
    assert merged[2].attributes["Other"] == 5


@pytest.mark.parametrize(
    ("targeting", "expected"),
    [
        ("SlotMergeConstraint = TARGET.Cpus == 1 && TARGET.SlotID > 2", {"slot3", "slot4"}),
        ('SlotName = "slot1"', {"slot1"}),
        ('Name = "slot"', {"slot1", "slot2", "slot3", "slot4"}),
        ("SlotTypeId = 2", {"slot3", "slot4"}),
        ("SlotId = 4", {"slot4"}),
        # Priority: SlotMergeConstraint decides even when SlotId would say otherwise.
        ("SlotMergeConstraint = TARGET.SlotID == 1\nSlotId = 2", {"slot1"}),
        ('SlotName = "slot2"\nSlotTypeId = 2', {"slot2"}),
        ("SlotTypeId = 1\nSlotId = 3", {"slot1", "slot2"}),
    ],
)
def test_merge_targets_slots_in_the_references_order(targeting: str, expected: set[str]) -> None:
    merged = _merged(JOB, f"Flag = true\n{targeting}\n")
    assert {slot for slot, ad in merged.items() if ad.get("Flag") is True} == expected


def test_prefix_applies_to_merged_attributes_not_to_targeting() -> None:
    job = CronJob(name="foo", executable="foo", period=60, prefix="Foo")
    merged = _merged(job, 'Temp = 41.5\nSensor = "cpu0"\nSlotId = 2\n')
    assert merged["slot2"]["FooTemp"] == 41.5
    assert merged["slot2"]["FooSensor"] == "cpu0"
    assert "Temp" not in merged["slot2"] and "FooSlotId" not in merged["slot2"]
    assert "FooTemp" not in merged["slot1"]


def test_slots_knob_limits_the_slots_that_take_the_output() -> None:
    job = CronJob(name="test", executable="test", period=60, slots=(1, 3))
    merged = _merged(job, "Value = 3\n")
    assert {slot for slot, ad in merged.items() if "Value" in ad} == {"slot1", "slot3"}


def test_expressions_are_kept_as_expressions() -> None:
    parsed = parse_output(JOB, "Hot = Temp > 80\nTemp = 85\n")
    (ad,) = merge_into_slots([_slot(1)], record({}, parsed.ads), ["test"])
    assert ad.attributes["Hot"] == "Temp > 80"
    assert "Hot" in ad.expressions
    assert ad.to_classad().eval("Hot") is True


def test_malformed_lines_are_reported_and_never_reach_the_ads() -> None:
    output = 'Good = 1\nthis is not an attribute\nBad = (1 +\nAlso = "fine"\n- s1 update:maybe\n'
    parsed = parse_output(JOB, output)
    assert [(p.line, p.text) for p in parsed.problems] == [
        (2, "this is not an attribute"),
        (3, "Bad = (1 +"),
        (5, "- s1 update:maybe"),
    ]
    assert "line 3" in str(parsed.problems[1]) and "test" in str(parsed.problems[1])
    (ad,) = parsed.ads
    assert dict(ad.attributes) == {"Good": "1", "Also": '"fine"'}
    (slot,) = merge_into_slots([_slot(1)], record({}, parsed.ads), ["test"])
    assert (slot.attributes["Good"], slot.attributes["Also"]) == (1, "fine")
    assert "Bad" not in slot.attributes


@pytest.mark.parametrize(
    ("separator", "tag", "update"),
    [
        ("-", "", None),
        ("- update:true", "", True),
        ("-update:false", "", False),
        ("-gpu0", "gpu0", None),
        ("- gpu0 update:TRUE", "gpu0", True),
    ],
)
def test_separator_syntax(separator: str, tag: str, update: bool | None) -> None:
    (ad,) = parse_output(JOB, f"X = 1\n{separator}\n").ads
    assert (ad.tag, ad.update) == (tag, update)


def test_output_without_separator_is_the_jobs_own_ad_and_empty_output_is_none() -> None:
    (ad,) = parse_output(JOB, "X = 1\n\n# a comment\n").ads
    assert ad.full_name == "test"
    assert parse_output(JOB, "").ads == ()


def test_merged_attributes_replace_ones_of_any_spelling_and_inputs_are_not_changed() -> None:
    slot = _slot(1)
    (merged,) = merge_into_slots([slot], record({}, parse_output(JOB, "cpus = 8\n").ads), [])
    assert merged.attributes["cpus"] == 8 and "Cpus" not in merged.attributes
    assert slot.attributes["Cpus"] == 1
