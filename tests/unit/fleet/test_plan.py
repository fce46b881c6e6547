"""The pure diff from the ExecutionPoints that exist to the ones the policies call for."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from kondor_core.api import OperatorStatus, PolicyRef, SlotPolicySpec
from kondor_core.fleet import (
    MANAGED_BY_LABEL,
    CreateExecutionPoint,
    DeleteExecutionPoint,
    NodeFacts,
    ObservedExecutionPoint,
    PatchExecutionPoint,
    PatchOperatorStatus,
    PolicyCandidate,
    Resolution,
    execution_point_manifest,
    operator_status,
    plan_execution_points,
)

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
NODE = NodeFacts("n1", "uid-1", {"pool": "batch"})
SPEC = SlotPolicySpec.model_validate({"priority": 3})
BATCH = PolicyCandidate("batch", 2, SPEC, "abc123")
OTHER = PolicyCandidate("other", 7, SPEC, "def456")


def settled(resolution: Resolution, **fields: Any) -> ObservedExecutionPoint:
    """An ExecutionPoint as the operator left it for `resolution`."""
    status = operator_status(
        resolution=resolution,
        last_heartbeat=None,
        update_interval=300,
        old=OperatorStatus(),
        now=NOW,
    )
    base: dict[str, Any] = {
        "name": "n1",
        "node_name": "n1",
        "policy": PolicyRef(name=resolution.policy.name),
        "owner_uid": "uid-1",
        "operator_status": status,
    }
    return ObservedExecutionPoint(**{**base, **fields})


def plan(
    resolutions: dict[str, Resolution],
    existing: dict[str, ObservedExecutionPoint],
    nodes: dict[str, NodeFacts] | None = None,
    **kwargs: Any,
) -> list[Any]:
    return plan_execution_points(
        {"n1": NODE} if nodes is None else nodes, resolutions, existing, now=NOW, **kwargs
    )


def test_manifest_is_named_after_the_node_owned_by_it_and_names_the_policy() -> None:
    manifest = execution_point_manifest(NODE, Resolution(BATCH))
    assert manifest["apiVersion"] == "kondor.io/v1alpha1"
    assert manifest["kind"] == "ExecutionPoint"
    assert manifest["metadata"]["name"] == "n1"
    assert manifest["metadata"]["labels"] == {MANAGED_BY_LABEL: "kondor-operator"}
    assert manifest["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "uid-1"}
    ]
    # The name only: the node's agent follows the policy's generations itself.
    assert manifest["spec"] == {"nodeName": "n1", "policy": {"name": "batch"}}


@pytest.mark.parametrize(
    ("case", "resolutions", "existing", "nodes", "expected"),
    [
        ("selected node without EP", {"n1": Resolution(BATCH)}, {}, None, [CreateExecutionPoint]),
        ("unselected node", {}, {}, None, []),
        ("settled", {"n1": Resolution(BATCH)}, {"n1": settled(Resolution(BATCH))}, None, []),
        (
            "policy changed",
            {"n1": Resolution(OTHER)},
            {"n1": settled(Resolution(BATCH))},
            None,
            [PatchExecutionPoint, PatchOperatorStatus],
        ),
        ("unselected", {}, {"n1": settled(Resolution(BATCH))}, None, [DeleteExecutionPoint]),
        ("node gone", {}, {"n1": settled(Resolution(BATCH))}, {}, [DeleteExecutionPoint]),
        (
            "being deleted",
            {},
            {"n1": settled(Resolution(BATCH), deleting=True)},
            None,
            [],
        ),
        (
            "not ours and not selected",
            {},
            {"n1": settled(Resolution(BATCH), managed=False)},
            None,
            [],
        ),
        (
            "node re-created with a new uid",
            {"n1": Resolution(BATCH)},
            {"n1": settled(Resolution(BATCH), owner_uid="old")},
            None,
            [PatchExecutionPoint],
        ),
    ],
)
def test_plan(
    case: str,
    resolutions: dict[str, Resolution],
    existing: dict[str, ObservedExecutionPoint],
    nodes: dict[str, NodeFacts] | None,
    expected: list[type],
) -> None:
    assert [type(a) for a in plan(resolutions, existing, nodes)] == expected, case


def test_policy_change_patches_the_spec_and_says_so() -> None:
    [patch, _] = plan({"n1": Resolution(OTHER)}, {"n1": settled(Resolution(BATCH))})
    assert isinstance(patch, PatchExecutionPoint)
    assert patch.patch == {"spec": {"policy": {"name": "other"}}}
    assert patch.event.reason == "PolicyChanged"
    assert patch.event.message == "SlotPolicy batch -> other"


def test_an_edit_of_the_winning_policy_rewrites_no_execution_point() -> None:
    """A new generation of the same policy is the agents' to follow (condor_reconfig): the
    operator writes nothing, so an edit re-carving 1,000 nodes costs 1,000 writes, not 2,000."""
    edited = PolicyCandidate("batch", 3, SlotPolicySpec.model_validate({"priority": 3}), "fff")
    assert plan({"n1": Resolution(edited)}, {"n1": settled(Resolution(BATCH))}) == []


def test_an_ep_we_did_not_create_is_adopted_when_its_node_is_selected() -> None:
    ep = settled(Resolution(BATCH), managed=False, owner_uid=None, policy=None)
    [patch] = plan({"n1": Resolution(BATCH)}, {"n1": ep})
    assert isinstance(patch, PatchExecutionPoint)
    assert patch.patch["metadata"]["labels"] == {MANAGED_BY_LABEL: "kondor-operator"}
    assert patch.patch["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    assert patch.patch["spec"]["policy"]["name"] == "batch"
    assert patch.event.reason == "Adopted"


def test_an_invalid_policy_freezes_its_execution_points() -> None:
    ep = settled(Resolution(BATCH))
    # batch turned invalid: it resolves nothing, but its EP is neither deleted nor moved.
    assert plan({}, {"n1": ep}, held={"batch"}) == []
    actions = plan({"n1": Resolution(OTHER)}, {"n1": ep}, held={"batch"})
    assert not any(isinstance(a, PatchExecutionPoint) for a in actions)
    # Once its node is gone, it goes.
    assert [type(a) for a in plan({}, {"n1": ep}, nodes={}, held={"batch"})] == [
        DeleteExecutionPoint
    ]


def test_a_new_tie_is_a_condition_and_a_warning_event() -> None:
    tie = Resolution(BATCH, ("other",))
    [status] = plan({"n1": tie}, {"n1": settled(Resolution(BATCH))})
    assert isinstance(status, PatchOperatorStatus)
    operator = status.patch["status"]["operator"]
    assert set(status.patch["status"]) == {"operator"}, "the operator writes only its subtree"
    assert operator["tieWith"] == ["other"]
    [tied] = [c for c in operator["conditions"] if c["type"] == "PolicyTie"]
    assert tied["status"] == "True"
    assert "batch, other" in tied["message"] and "priority 3" in tied["message"]
    assert status.event is not None and status.event.type == "Warning"
    # Reported once: a settled tie is not announced again.
    assert plan({"n1": tie}, {"n1": settled(tie)}) == []


def test_only_limits_the_plan_to_the_touched_names() -> None:
    nodes = {"n1": NODE, "n2": NodeFacts("n2", "uid-2")}
    resolutions = {"n1": Resolution(BATCH), "n2": Resolution(BATCH)}
    actions = plan_execution_points(nodes, resolutions, {}, only=["n2"], now=NOW)
    assert [a.name for a in actions] == ["n2"]


def test_stale_heartbeat_is_judged_by_the_policy_update_interval() -> None:
    ep = settled(Resolution(BATCH), last_heartbeat="2026-01-02T03:03:00Z")  # 65 s before NOW
    fresh = plan({"n1": Resolution(BATCH)}, {"n1": ep}, update_intervals={"batch": 60})
    assert fresh[0].patch["status"]["operator"]["heartbeat"] == "Fresh"
    stale = plan({"n1": Resolution(BATCH)}, {"n1": ep}, update_intervals={"batch": 20})
    assert stale[0].patch["status"]["operator"]["heartbeat"] == "Stale"
