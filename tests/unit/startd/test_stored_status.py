"""The ExecutionPoint status as stored: each slot ad without what it shares with the machine ad
(a third of it, and the clock that changes at every heartbeat), read back whole."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import yaml

from kondor_core import startd
from kondor_core.api import (
    ExecutionJobSpec,
    ExecutionPointStatus,
    Machine,
    SlotPolicy,
    SlotPolicySpec,
    whole_slot_ad,
)
from kondor_core.config import PolicyError, compile_policy
from kondor_core.jobs import submit_ad
from kondor_core.policy import ActivateClaim, EngineError, Match
from kondor_core.slots import LayoutError

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
MACHINES = sorted((EXAMPLES / "machines").glob("*.yaml"))
POLICIES = sorted((EXAMPLES / "policies").glob("*.yaml"))
NOW = 1_800_000_000.0


def _policy(path: Path) -> SlotPolicySpec:
    return SlotPolicy.model_validate(yaml.safe_load(path.read_text())).spec


def _statuses(machine_path: Path, policy_path: Path) -> list[ExecutionPointStatus]:
    """The node's status idle, then with its first slot claimed and running a job (a dynamic
    slot where the slot is partitionable), with live facts and the job's usage; none where
    the policy does not fit the machine."""
    machine = Machine.model_validate(yaml.safe_load(machine_path.read_text()))
    try:
        node = startd.start(machine, compile_policy(_policy(policy_path)), NOW)
    except (PolicyError, LayoutError, EngineError):
        return []
    live = {"LoadAvg": 0.25, "KeyboardIdle": 600}
    idle = startd.tick(node, live, NOW).startd
    first = idle.state.slots[0].name
    ad = submit_ad(ExecutionJobSpec(), "j")
    events = {first: [Match("c1", ad, job_id="j"), ActivateClaim()]}
    busy = startd.tick(idle, live, NOW + 1, slot_events=events).startd
    usage = {slot.name: {"LoadAvg": 1.0, "MemoryUsage": 10} for slot in busy.state.slots}
    return [
        startd.status(idle, live, NOW),
        startd.status(busy, live, NOW + 7, usage=usage),
    ]


def test_every_example_node_s_stored_status_reads_back_as_the_whole() -> None:
    statuses = [
        status
        for machine, policy in itertools.product(MACHINES, POLICIES)
        for status in _statuses(machine, policy)
    ]
    assert len(statuses) > 200  # most of the examples fit each other
    for status in statuses:
        assert status.slots
        for slot in status.slots:  # what makes leaving them out lossless
            assert status.machine.keys() <= slot.ad.keys(), slot.name
        stored = json.loads(json.dumps(status.dump()))  # as the API server holds it
        machine = stored["machine"]
        for slot in stored["slots"]:
            same = [k for k, v in slot["ad"].items() if k in machine and machine[k] == v]
            assert all(type(machine[k]) is not type(slot["ad"][k]) for k in same), same
        assert ExecutionPointStatus.model_validate(stored) == status


def test_the_clock_and_the_machine_are_stored_once_not_in_every_slot() -> None:
    machine = Machine.model_validate(
        yaml.safe_load((EXAMPLES / "machines/kwok-small.yaml").read_text())
    )
    spec = SlotPolicySpec.model_validate({"slotTypes": [{"id": 1, "count": 4, "resources": "25%"}]})
    node = startd.tick(startd.start(machine, compile_policy(spec), NOW), {}, NOW).startd
    status = startd.status(node, {}, NOW)
    stored = status.dump()
    assert stored["machine"]["MyCurrentTime"] == NOW and stored["machine"]["TotalSlots"] == 4
    assert stored["machine"]["TotalCpus"] == 4 and stored["machine"]["Machine"] == machine.name
    for slot in stored["slots"]:
        assert {"MyCurrentTime", "ClockMin", "TotalSlots", "TotalCpus", "Machine"}.isdisjoint(
            slot["ad"]
        )
        assert slot["ad"]["Cpus"] == 1 and slot["ad"]["Name"] == slot["name"]
    whole = {**stored, "slots": [slot.dump() for slot in status.slots]}  # the form before
    assert len(json.dumps(stored)) < 0.8 * len(json.dumps(whole))
    later = startd.status(node, {}, NOW + 60).dump()  # a heartbeat: only the clock moved
    assert later["slots"] == stored["slots"]
    assert later["machine"]["MyCurrentTime"] == NOW + 60


def test_a_slot_keeps_what_differs_from_the_machine_in_value_or_type() -> None:
    stored: dict[str, Any] = {
        "machine": {"Machine": "n", "LoadAvg": 0.5, "HasVM": 1, "Arch": "X86_64"},
        "slots": [
            {
                "name": "slot1@n",
                "type": "Static",
                "state": "Unclaimed",
                "activity": "Idle",
                "ad": {"LoadAvg": 1.5, "HasVM": True, "Name": "slot1@n"},
            }
        ],
    }
    status = ExecutionPointStatus.model_validate(stored)
    assert status.slots[0].ad == {
        "Machine": "n",
        "LoadAvg": 1.5,
        "HasVM": True,
        "Arch": "X86_64",
        "Name": "slot1@n",
    }
    assert status.dump()["slots"][0]["ad"] == {"LoadAvg": 1.5, "HasVM": True, "Name": "slot1@n"}
    assert whole_slot_ad(stored["machine"], {"Arch": "ARM"})["Arch"] == "ARM"
    # A status stored before this form (whole slot ads) reads the same.
    old = {**stored, "slots": [{**stored["slots"][0], "ad": status.slots[0].ad}]}
    assert ExecutionPointStatus.model_validate(old) == status
