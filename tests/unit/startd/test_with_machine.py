"""New machine facts keep a startd's slots, claims and states; new resources need a re-carve."""

from __future__ import annotations

from typing import Any

from kondor_core import startd
from kondor_core.api import ExecutionJobSpec, Machine, SlotPolicySpec
from kondor_core.config import compile_policy
from kondor_core.jobs import submit_ad
from kondor_core.policy import ActivateClaim, Match


def machine(**changes: Any) -> Machine:
    values: dict[str, Any] = {
        "name": "desk",
        "cpus": 4,
        "memory": "8Gi",
        "disk": "10Gi",
        "attributes": {"KeyboardIdle": 3600},
    }
    return Machine.model_validate({**values, **changes})


def claimed() -> startd.Startd:
    node = startd.tick(startd.start(machine(), compile_policy(SlotPolicySpec()), 0), {}, 0)
    ad = submit_ad(ExecutionJobSpec(), "j")
    events = {"slot1@desk": [Match("c1", ad, job_id="j"), ActivateClaim()]}
    return startd.tick(node.startd, {}, 1, slot_events=events).startd


def test_new_facts_keep_the_claims_and_are_published() -> None:
    node = claimed()
    kept = startd.with_machine(node, machine(attributes={"KeyboardIdle": 0}))
    assert kept is not None
    assert kept.state == node.state and kept.slots == node.slots
    ads = {ad.name: ad.attributes for ad in startd.published_ads(kept, {}, 2)}
    assert ads["slot1_1@desk"]["KeyboardIdle"] == 0
    assert (ads["slot1_1@desk"]["State"], ads["slot1_1@desk"]["Activity"]) == ("Claimed", "Busy")
    assert kept.facts["slot1_1@desk"]["KeyboardIdle"] == 0


def test_new_resources_need_a_re_carve() -> None:
    assert startd.with_machine(claimed(), machine(cpus=8)) is None
