"""`kondor simulate`'s core: job ads from ExecutionJob specs, and requests placed in order."""

from __future__ import annotations

import json
from typing import Any

import classad2
import pytest

from kondor_core.api.job import ExecutionJobSpec
from kondor_core.api.machine import Machine
from kondor_core.config.effective import EffectivePolicy, SlotTypeDef
from kondor_core.config.shares import parse_shares
from kondor_core.jobs import submit_ad
from kondor_core.sim import Placement, simulate
from kondor_core.slots import LayoutError


def machine(**fields: Any) -> Machine:
    values: dict[str, Any] = {
        "name": "node-a",
        "cpus": 8,
        "memory": "8Gi",
        "disk": "100Gi",
        "gpus": [
            {"id": "GPU-00000001", "properties": {"Capability": 7.0}},
            {"id": "GPU-00000002", "properties": {"Capability": 8.0}},
        ],
        "attributes": {"OpSys": "LINUX", "Arch": "X86_64"},
    }
    values.update(fields)
    return Machine.model_validate(values)


def spec(**fields: Any) -> ExecutionJobSpec:
    return ExecutionJobSpec.model_validate(fields)


def requests(*specs: tuple[str, dict[str, Any]]) -> list[tuple[str, Any]]:
    return [(name, submit_ad(spec(**fields), name)) for name, fields in specs]


def test_job_ad_carries_condor_submit_s_attributes() -> None:
    ad = submit_ad(
        spec(
            owner="alice",
            requestCpus=2,
            requestMemory="2Gi",
            requestDisk="1Gi",
            requestGpus=1,
            requestResources={"cogs": 2, "widgets": 0.5},
            requireGpus="Capability >= 8.0",
            requirements='TARGET.OpSys == "LINUX"',
            rank="TARGET.Cpus",
            priority=5,
            attributes={"ProjectName": '"physics"', "WantBigMem": "true"},
        ),
        "job-1",
    )
    values = {
        key: ad.eval(key)
        for key in (
            "RequestCpus",
            "RequestMemory",
            "RequestDisk",
            "RequestGPUs",
            "RequestCogs",
            "RequestWidgets",
            "Owner",
            "JobPrio",
            "ProjectName",
            "WantBigMem",
        )
    }
    assert values == {
        "RequestCpus": 2,
        "RequestMemory": 2048,  # MiB
        "RequestDisk": 1024 * 1024,  # KiB
        "RequestGPUs": 1,
        "RequestCogs": 2,
        "RequestWidgets": 0.5,
        "Owner": "alice",
        "JobPrio": 5,
        "ProjectName": "physics",
        "WantBigMem": True,
    }
    assert str(ad.lookup("Requirements")) == 'TARGET.OpSys == "LINUX"'
    assert str(ad.lookup("RequireGPUs")).startswith("Capability >= 8")
    assert str(ad.lookup("Rank")) == "TARGET.Cpus"


def test_requests_are_carved_in_order_from_the_partitionable_slot() -> None:
    sim = simulate(
        machine(),
        EffectivePolicy(),
        requests(
            ("a", {"requestCpus": 2, "requestMemory": 1000}),
            ("b", {"requestCpus": 1, "requestGpus": 1, "requireGpus": "Capability >= 8.0"}),
            ("c", {"requestCpus": 8}),
            ("d", {"requestCpus": 5}),
        ),
    )
    assert sim.placements[:2] == [
        Placement("a", "slot1_1@node-a"),
        Placement("b", "slot1_2@node-a"),
    ]
    assert sim.placements[3] == Placement("d", "slot1_3@node-a")
    refused = sim.placements[2]
    assert refused.slot is None and refused.reason is not None
    assert "no slot takes c" in refused.reason
    assert "slot1@node-a: not enough Cpus: the job needs 8 cores, 5 left of 8" in refused.reason
    names = [ad["Name"] for ad in sim.slots]
    assert names == ["slot1@node-a", "slot1_1@node-a", "slot1_2@node-a", "slot1_3@node-a"]
    slot1_1, slot1_2 = sim.slots[1], sim.slots[2]
    assert (slot1_1["Cpus"], slot1_1["Memory"]) == (2, 1024)
    assert slot1_2["AssignedGPUs"] == "GPU-00000002"
    assert sim.slots[0]["Cpus"] == 0


def test_json_output_contract() -> None:
    sim = simulate(machine(), EffectivePolicy(), requests(("a", {}), ("huge", {"requestCpus": 99})))
    out = json.loads(json.dumps(sim.to_json()))
    assert set(out) == {"slots", "placements"}
    assert out["placements"][0] == {"request": "a", "slot": "slot1_1@node-a"}
    assert out["placements"][1]["slot"] is None
    assert "not enough Cpus" in out["placements"][1]["reason"]
    assert isinstance(out["slots"][0]["Cpus"], int)
    assert isinstance(out["slots"][0]["Requirements"], str)


def static_policy(**fields: Any) -> EffectivePolicy:
    return EffectivePolicy(
        slot_types=(
            SlotTypeDef(1, 2, False, parse_shares("cpus=2, 25%", field="t1")),
            SlotTypeDef(2, 1, True, parse_shares("auto", field="t2")),
        ),
        **fields,
    )


def test_static_slots_are_taken_first_in_slot_order_then_the_partitionable_one() -> None:
    sim = simulate(
        machine(gpus=[]),
        static_policy(),
        requests(("a", {}), ("b", {"requestCpus": 2}), ("c", {}), ("d", {"requestCpus": 3})),
    )
    assert [p.slot for p in sim.placements] == [
        "slot1@node-a",
        "slot2@node-a",
        "slot3_1@node-a",
        "slot3_2@node-a",
    ]
    states = {ad["Name"]: (ad["State"], ad["Activity"]) for ad in sim.slots}
    assert states == {
        "slot1@node-a": ("Claimed", "Busy"),
        "slot2@node-a": ("Claimed", "Busy"),
        "slot3@node-a": ("Unclaimed", "Idle"),
        "slot3_1@node-a": ("Claimed", "Busy"),
        "slot3_2@node-a": ("Claimed", "Busy"),
    }


def test_a_too_big_static_slot_request_moves_on_to_the_next_slot() -> None:
    sim = simulate(machine(gpus=[]), static_policy(), requests(("big", {"requestCpus": 3})))
    assert sim.placements == [Placement("big", "slot3_1@node-a")]


def test_start_and_job_requirements_decide_before_resources() -> None:
    policy = static_policy(expressions={"START": 'TARGET.Owner == "alice" || SlotID == 3'})
    sim = simulate(
        machine(gpus=[]),
        policy,
        requests(
            ("bob-job", {"owner": "bob"}),
            ("alice-job", {"owner": "alice"}),
            ("arm-job", {"owner": "alice", "requirements": 'TARGET.Arch == "ARM64"'}),
        ),
    )
    assert sim.placements[0] == Placement("bob-job", "slot3_1@node-a")
    assert sim.placements[1] == Placement("alice-job", "slot1@node-a")
    arm = sim.placements[2]
    assert arm.slot is None and arm.reason is not None
    assert "slot1@node-a is Claimed" in arm.reason
    assert "slot2@node-a: the job's Requirements are not TRUE for it" in arm.reason
    assert "slot3@node-a: the job's Requirements are not TRUE for it" in arm.reason


def test_start_false_is_named_in_the_reason() -> None:
    policy = EffectivePolicy(expressions={"START": 'TARGET.Owner =!= "mallory"'})
    sim = simulate(machine(), policy, requests(("m", {"owner": "mallory"})))
    assert sim.placements[0].reason == "no slot takes m: slot1@node-a: START is FALSE for the job"


def test_requests_written_as_classad_text_get_condor_submit_s_defaults() -> None:
    ad = classad2.ClassAd('[ RequestCpus = 2; Owner = "carol" ]')
    sim = simulate(machine(), EffectivePolicy(), [("from-text", ad)])
    assert sim.placements == [Placement("from-text", "slot1_1@node-a")]
    dslot = sim.slots[1]
    assert (dslot["Cpus"], dslot["Memory"], dslot["RemoteOwner"]) == (2, 128, "carol")


def test_classads_output_is_classad_text_of_every_slot() -> None:
    sim = simulate(machine(), EffectivePolicy(), requests(("a", {"requestGpus": 1})))
    text = sim.classads()
    ads = list(classad2.parseAds(text, classad2.ParserType.Old))
    assert [ad["Name"] for ad in ads] == ["slot1@node-a", "slot1_1@node-a"]
    assert ads[1]["GPUs_GPU_00000001"]["Capability"] == 7.0
    assert ads[0].eval("Requirements") is True


def test_a_bad_layout_raises_layout_error() -> None:
    policy = EffectivePolicy(
        slot_types=(SlotTypeDef(1, 9, False, parse_shares("auto", field="t")),)
    )
    with pytest.raises(LayoutError, match="more slots than cores"):
        simulate(machine(), policy, [])
