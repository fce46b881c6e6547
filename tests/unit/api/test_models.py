"""Manifests and machine files: good input parses, bad input names the field and the value."""

from __future__ import annotations

from typing import Any

import pytest

from kondor_core.api import (
    ExecutionJob,
    InvalidObjectError,
    Machine,
    SlotPolicy,
    validate,
)


def _policy(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kondor.io/v1alpha1",
        "kind": "SlotPolicy",
        "metadata": {"name": "p"},
        "spec": spec,
    }


def test_policy_with_camel_case_fields_and_continue_keyword() -> None:
    policy = validate(
        SlotPolicy,
        _policy(
            slotTypes=[{"id": 1, "partitionable": True, "resources": {"cpus": "50%"}}],
            maxJobRetirementTime="3600",
            isOwner="FALSE",
            **{"continue": "KeyboardIdle > 300"},
        ),
        what="policy.yaml",
    )
    assert policy.spec.continue_ == "KeyboardIdle > 300"
    assert policy.spec.slot_types[0].partitionable
    assert policy.spec.dump()["continue"] == "KeyboardIdle > 300"


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"start": "Cpus >"}, "spec.start: 'Cpus >' is not a valid ClassAd expression"),
        ({"rank": ""}, "spec.rank: '' is not a valid ClassAd expression (the expression is empty)"),
        (
            {"slotTypes": [{"id": 0}]},
            "spec.slotTypes[0].id: Input should be greater than or equal to 1",
        ),
        ({"slotTypes": [{"id": 1}, {"id": 1}]}, "spec.slotTypes: id 1 appears twice"),
        ({"bogus": 1}, "spec.bogus: Extra inputs are not permitted"),
        ({"reserved": {"memory": "lots"}}, "spec.reserved.memory: 'lots' is not a quantity"),
        (
            {"slotAttributes": {"one": {"a": "1"}}},
            "spec.slotAttributes: 'one' is not a slot number",
        ),
        (
            {"attributes": {"Color": "blue sky"}},
            "spec.attributes.Color: 'blue sky' is not a valid ClassAd",
        ),
        (
            {"nodeSelector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}},
            "spec.nodeSelector.matchExpressions[0].operator: Input should be 'In', 'NotIn'",
        ),
    ],
)
def test_bad_policy_names_field_and_value(spec: dict[str, Any], expected: str) -> None:
    with pytest.raises(InvalidObjectError) as err:
        validate(SlotPolicy, _policy(**spec), what="policy.yaml")
    assert expected in str(err.value)
    assert str(err.value).startswith("policy.yaml is invalid")


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(InvalidObjectError) as err:
        validate(SlotPolicy, _policy(start="(", kill=")", priority="high"), what="p")
    assert len(err.value.problems) == 3


MACHINE = {"name": "node-a", "cpus": 8, "memory": "16Gi", "disk": "200Gi", "swap": 2048}


def test_machine_units() -> None:
    machine = validate(Machine, MACHINE, what="m")
    assert (machine.memory_mib, machine.disk_kib, machine.swap_mib) == (16384, 200 * 1024**2, 2048)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"cpus": 0}, "cpus: Input should be greater than or equal to 1"),
        ({"memory": "16 gigs"}, "'16 gigs' is not a quantity"),
        ({"gpus": [{"id": "GPU-1"}, {"id": "GPU-1"}]}, "the id 'GPU-1' appears twice"),
        ({"resources": {"memory": 4}}, "'memory' is a standard resource"),
        ({"resources": {"two words": 1}}, "'two words' is not a resource name"),
        ({"name": ""}, "name: String should have at least 1 character"),
    ],
)
def test_bad_machine(change: dict[str, Any], expected: str) -> None:
    with pytest.raises(InvalidObjectError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        validate(Machine, {**MACHINE, **change}, what="m")


def test_job_defaults_and_units() -> None:
    job = validate(
        ExecutionJob,
        {
            "apiVersion": "kondor.io/v1alpha1",
            "kind": "ExecutionJob",
            "metadata": {"name": "j", "namespace": "default"},
            "spec": {
                "requestMemory": "2Gi",
                "requestDisk": "1Gi",
                "requireGpus": "Capability >= 8.0",
            },
        },
        what="j",
    )
    assert (job.spec.request_cpus, job.spec.request_memory_mib, job.spec.request_disk_kib) == (
        1,
        2048,
        1024**2,
    )


def test_wrong_kind_is_refused() -> None:
    with pytest.raises(InvalidObjectError, match="kind"):
        validate(SlotPolicy, {**_policy(), "kind": "Pod"}, what="p")
