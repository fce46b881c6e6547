"""render_policy (what `kondor policy compile` prints) and policy_hash (what the operator pins)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kondor_core.api.slotpolicy import SlotPolicySpec
from kondor_core.config import compile_policy, policy_hash, render_policy, shares_text
from kondor_core.config.effective import EffectivePolicy
from kondor_core.config.shares import ShareSpec, parse_shares, shares_from_map


def _compile(config: str = "", **fields: Any) -> EffectivePolicy:
    return compile_policy(SlotPolicySpec.model_validate({"condorConfig": config, **fields}))


def _meaning(shares: ShareSpec) -> tuple[object, ...]:
    listed = sorted((k, s.kind, s.amount, s.constraint) for k, s in shares.shares.items())
    return (tuple(listed), shares.default.kind, shares.default.amount)


_GPU_POLICY = """use FEATURE : GPUs
use POLICY : Desktop
SLOT_TYPE_1 @=slot
   GPUs = 2 : Capability >= 8.0
   90%
@slot
SLOT_TYPE_1_PARTITIONABLE = TRUE
SLOT_TYPE_1_CONSUMPTION_POLICY = TRUE
NUM_SLOTS_TYPE_1 = 1
use FEATURE : StaticSlots(2, $(DETECTED_CPUS) - 1)
favorite_color = "blue"
STARTD_ATTRS = favorite_color
SLOT2_favorite_color = "green"
MACHINE_RESOURCE_Cogs = c0 c1
"""


def test_render_is_plain_json_with_everything_a_user_needs() -> None:
    rendered = render_policy(_compile(_GPU_POLICY))
    assert json.loads(json.dumps(rendered)) == rendered
    assert rendered["slotTypes"] == [
        {
            "id": 1,
            "count": 1,
            "partitionable": True,
            "resources": "GPUs=2 : Capability >= 8.0, 90%",
            "consumptionPolicy": True,
            "consumption": {
                "cpus": "quantize(target.RequestCpus,{1})",
                "memory": "quantize(target.RequestMemory,{128})",
                "disk": "quantize(target.RequestDisk,{1024})",
            },
        },
        {
            "id": 2,
            "count": "DetectedCpus - 1",
            "partitionable": False,
            "resources": "auto",
            "consumptionPolicy": False,
        },
    ]
    assert rendered["attributes"] == {"favorite_color": '"blue"'}
    assert rendered["slotAttributes"] == {"2": {"favorite_color": '"green"'}}
    assert rendered["machineResources"] == {"Cogs": 2.0}
    assert rendered["machineResourceIds"] == {"Cogs": ["c0", "c1"]}
    assert rendered["inventoryResources"] == ["GPUs"]
    assert rendered["expressions"]["KILL"] == "False"
    assert rendered["templates"][:2] == ["FEATURE : GPUs", "FEATURE : GPUsMonitor"]
    assert rendered["warnings"]


@pytest.mark.parametrize(
    "text",
    [
        "cpus=2, ram=128, swap=25%, disk=1/2",
        "c=1/2, m=50%, v=1/4, disk=1/2",
        "25%",
        "1/4",
        "auto",
        "cpus=1, disk=auto, 50%",
        "cogs=50%,actuator=6,50%",
        'GPUs = 1 : "GPU-6a96bd13"\nCPUs = 1\nMemory = 10',
        'GPUs = 2 : Capability >= 8.0 && DeviceName != "x, y"\n90%',
    ],
)
def test_shares_text_reads_back_to_the_same_shares(text: str) -> None:
    shares = parse_shares(text, field="test")
    assert _meaning(parse_shares(shares_text(shares), field="again")) == _meaning(shares)


def test_shares_text_of_a_map() -> None:
    shares = shares_from_map({"cpus": 2, "memory": "50%", "default": "25%"}, field="test")
    assert shares_text(shares) == "cpus=2, memory=50%, 25%"


def test_hash_is_stable_and_ignores_comments_and_layout() -> None:
    plain = _compile("START = KeyboardIdle > 600\nNUM_SLOTS = 2\nFOO = 1")
    commented = _compile(
        "# the desk policy\n\nNUM_SLOTS = 2\n\nSTART = KeyboardIdle > 600\nFOO = 1"
    )
    digest = policy_hash(plain)
    assert len(digest) == 64 and int(digest, 16) >= 0
    assert policy_hash(_compile("START = KeyboardIdle > 600\nNUM_SLOTS = 2\nFOO = 1")) == digest
    assert plain.warnings != commented.warnings  # the unknown FOO is on another line
    assert policy_hash(commented) == digest


def test_the_same_policy_written_either_way_has_the_same_hash() -> None:
    assert policy_hash(_compile("START = KeyboardIdle > 600")) == policy_hash(
        _compile(start="KeyboardIdle > 600")
    )


@pytest.mark.parametrize(
    "changed",
    [
        "START = KeyboardIdle > 601\nNUM_SLOTS = 2",
        "START = KeyboardIdle > 600\nNUM_SLOTS = 3",
        "START = KeyboardIdle > 600\nNUM_SLOTS = 2\nPOLLING_INTERVAL = 5",
    ],
)
def test_hash_changes_when_what_a_node_does_changes(changed: str) -> None:
    base = policy_hash(_compile("START = KeyboardIdle > 600\nNUM_SLOTS = 2"))
    assert policy_hash(_compile(changed)) != base
