"""Every write the operator plans fits the API models, strictly: a misspelt key fails here.

The CRDs are generated from the same models (`make crds`), so a patch that validates here is
one the API server's schema keeps; one that does not would be pruned or refused there. Each
patch is applied (RFC 7386) to the object it patches, and the object after it is validated
with unknown fields forbidden, metadata included.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ConfigDict, Field, ValidationError

from kondor_core.api import (
    API_VERSION,
    ExecutionPoint,
    ObjectMeta,
    OperatorStatus,
    OwnerReference,
    PolicyRef,
    SlotPolicySpec,
    SlotPolicyStatus,
    apply_merge_patch,
)
from kondor_core.fleet import (
    Action,
    CreateExecutionPoint,
    DeleteExecutionPoint,
    Event,
    NodeFacts,
    ObservedExecutionPoint,
    ObservedPolicy,
    PatchExecutionPoint,
    PatchOperatorStatus,
    PolicyCandidate,
    PolicyCounts,
    Resolution,
    check_policy,
    plan_execution_points,
    plan_policy_statuses,
)
from kondor_operator.epwatch import ExecutionPointTable
from kondor_operator.kube import ObjectRef
from kondor_operator.metrics import Metrics
from kondor_operator.reconciler import Reconciler, node_entry, slot_policy_entry

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


class StrictOwnerReference(OwnerReference):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class StrictObjectMeta(ObjectMeta):
    """ObjectMeta lets the API server's other fields through; the operator writes only these."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    owner_references: list[StrictOwnerReference] = Field(  # type: ignore[assignment]
        default_factory=list, alias="ownerReferences"
    )


_TOP = {"apiVersion", "kind", "metadata", "spec", "status"}


def check_execution_point(body: Mapping[str, Any]) -> None:
    """`body` is an ExecutionPoint: spec and status (status.operator included) as the models
    say, and nothing else in metadata than ObjectMeta knows."""
    ExecutionPoint.model_validate(body)
    StrictObjectMeta.model_validate(body["metadata"])


def check_slot_policy(body: Mapping[str, Any]) -> None:
    """`body` is a SlotPolicy whose status is a SlotPolicyStatus (its spec may be invalid:
    that is what the status reports)."""
    assert set(body) <= _TOP, set(body) - _TOP
    StrictObjectMeta.model_validate(body["metadata"])
    SlotPolicyStatus.model_validate(body.get("status") or {})


def patched(body: Mapping[str, Any], patch: Mapping[str, Any], *, subresource: bool) -> Any:
    """`body` after `patch`, as the API server applies it: the status subresource changes
    status only, the main resource everything but status."""
    if subresource:
        assert set(patch) == {"status"}, f"a status write touches {set(patch)}"
    else:
        assert "status" not in patch, "status goes through the status subresource"
    return apply_merge_patch(body, patch)


# ---- a fake API server: every write is applied and the object after it checked ----------------


class Server:
    """The reconciler's Writer over stored objects, checking each object after each write."""

    def __init__(self) -> None:
        self.nodes: dict[str, dict[str, Any]] = {}
        self.policies: dict[str, dict[str, Any]] = {}
        self.eps: dict[str, dict[str, Any]] = {}
        self.writes: list[tuple[str, str, Any]] = []
        self.events: list[tuple[ObjectRef, Event]] = []

    def node(self, name: str, **labels: str) -> None:
        self.nodes[name] = {"metadata": {"name": name, "uid": f"uid-{name}", "labels": labels}}

    def policy(self, name: str, generation: int = 1, **spec: Any) -> None:
        before = self.policies.get(name, {})
        self.policies[name] = {
            "apiVersion": API_VERSION,
            "kind": "SlotPolicy",
            "metadata": {"name": name, "uid": f"uid-{name}", "generation": generation},
            "spec": spec,
            "status": before.get("status", {}),
        }

    def create_execution_point(self, manifest: Mapping[str, Any]) -> str | None:
        body = copy.deepcopy(dict(manifest))
        name = body["metadata"]["name"]
        assert "status" not in body, "a create cannot set status"
        check_execution_point(body)
        body["metadata"]["uid"] = f"ep-{name}"
        self.eps[name] = body
        self.writes.append(("create", name, manifest))
        return str(body["metadata"]["uid"])

    def patch_execution_point(self, name: str, patch: Mapping[str, Any]) -> bool:
        self.eps[name] = patched(self.eps[name], patch, subresource=False)
        check_execution_point(self.eps[name])
        self.writes.append(("patch", name, patch))
        return True

    def patch_execution_point_status(self, name: str, patch: Mapping[str, Any]) -> bool:
        self.eps[name] = patched(self.eps[name], patch, subresource=True)
        assert set(patch["status"]) == {"operator"}, "the operator writes only status.operator"
        check_execution_point(self.eps[name])
        self.writes.append(("status", name, patch))
        return True

    def delete_execution_point(self, name: str) -> bool:
        del self.eps[name]
        self.writes.append(("delete", name, None))
        return True

    def patch_slot_policy_status(self, name: str, patch: Mapping[str, Any]) -> bool:
        self.policies[name] = patched(self.policies[name], patch, subresource=True)
        check_slot_policy(self.policies[name])
        self.writes.append(("policy-status", name, patch))
        return True

    def post_event(self, ref: ObjectRef, event: Event) -> None:
        self.events.append((ref, event))

    def reconcile(self) -> list[tuple[str, str, Any]]:
        """One full pass of a reconciler that sees the stored objects; the writes it made."""
        subject = Reconciler(self, Metrics(), clock=lambda: NOW)
        points = ExecutionPointTable()
        points.relist(list(self.eps.values()))
        subject.attach(
            {name: [node_entry(body)] for name, body in self.nodes.items()},
            points,
            {name: [slot_policy_entry(body)] for name, body in self.policies.items()},
        )
        start = len(self.writes)
        asyncio.run(subject.run_once())
        return self.writes[start:]

    def settle(self, passes: int = 4) -> list[tuple[str, str, Any]]:
        """Reconcile until a pass writes nothing; every write made on the way."""
        writes: list[tuple[str, str, Any]] = []
        for _ in range(passes):
            made = self.reconcile()
            if not made:
                return writes
            writes += made
        raise AssertionError(f"not settled after {passes} passes: {self.writes[-5:]}")


def _agent_status(heartbeat: str) -> dict[str, Any]:
    slot = {"name": "slot1@n4", "type": "Partitionable", "state": "Unclaimed", "activity": "Idle"}
    return {"lastHeartbeat": heartbeat, "slots": [slot], "summary": {"slots": 1}}


def test_every_write_of_a_busy_fleet_fits_the_models() -> None:
    server = Server()
    for name, labels in {
        "n1": {"pool": "batch"},
        "n2": {"pool": "batch", "gpu": "yes"},
        "n3": {},
        "n4": {"pool": "batch"},
    }.items():
        server.node(name, **labels)
    server.policy("batch", priority=1, nodeSelector={"matchLabels": {"pool": "batch"}})
    server.policy("gpu", priority=1, nodeSelector={"matchLabels": {"gpu": "yes"}})
    server.policy("broken", start="Idle >")
    server.eps["n1"] = {  # managed, naming a policy that no longer selects it
        "apiVersion": API_VERSION,
        "kind": "ExecutionPoint",
        "metadata": {
            "name": "n1",
            "uid": "ep-n1",
            "labels": {"app.kubernetes.io/managed-by": "kondor-operator"},
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "uid-n1"}
            ],
        },
        "spec": {"nodeName": "n1", "policy": {"name": "retired"}},
    }
    server.eps["n4"] = {  # made by hand, with an agent reporting: adopted
        "apiVersion": API_VERSION,
        "kind": "ExecutionPoint",
        "metadata": {"name": "n4", "uid": "ep-n4"},
        "spec": {"nodeName": "n4"},
        "status": _agent_status("2026-01-02T02:00:00Z"),
    }
    server.eps["gone"] = {
        **copy.deepcopy(server.eps["n1"]),
        "metadata": {
            "name": "gone",
            "uid": "ep-gone",
            "labels": {"app.kubernetes.io/managed-by": "kondor-operator"},
        },
        "spec": {"nodeName": "gone"},
    }
    writes = server.settle()
    verbs = {(verb, name) for verb, name, _ in writes}
    assert {
        ("create", "n2"),
        ("patch", "n1"),
        ("patch", "n4"),
        ("delete", "gone"),
        ("status", "n1"),
        ("status", "n2"),
        ("status", "n4"),
        ("policy-status", "batch"),
        ("policy-status", "gpu"),
        ("policy-status", "broken"),
    } <= verbs
    # The agent's fields are as the agent left them; the operator's beside them.
    n4 = server.eps["n4"]["status"]
    assert n4["slots"] == _agent_status("")["slots"] and n4["operator"]["heartbeat"] == "Stale"
    assert server.eps["n2"]["status"]["operator"]["tieWith"] == ["gpu"]

    # batch turns invalid: its hash is cleared (a null in the patch), then fixed again.
    hash_before = server.policies["batch"]["status"]["hash"]
    server.policy("batch", 2, priority=1, start="Idle >")
    server.settle()
    assert "hash" not in server.policies["batch"]["status"]
    server.policy("batch", 3, priority=2, nodeSelector={"matchLabels": {"pool": "batch"}})
    server.settle()
    assert server.policies["batch"]["status"]["hash"] == hash_before
    assert server.eps["n2"]["status"]["operator"]["tieWith"] == []


# ---- the pure planning code, directly ---------------------------------------------------------

NODE = NodeFacts("n1", "uid-1", {"pool": "batch"})
BATCH = PolicyCandidate("batch", 2, SlotPolicySpec.model_validate({"priority": 3}), "abc")
OTHER = PolicyCandidate("other", 7, SlotPolicySpec.model_validate({"priority": 3}), "def")


def _document(ep: ObservedExecutionPoint) -> dict[str, Any]:
    """The ExecutionPoint the planner observed, as the API server holds it."""
    metadata: dict[str, Any] = {"name": ep.name}
    if ep.managed:
        metadata["labels"] = {"app.kubernetes.io/managed-by": "kondor-operator"}
    if ep.owner_uid:
        owner = {"apiVersion": "v1", "kind": "Node", "name": ep.name, "uid": ep.owner_uid}
        metadata["ownerReferences"] = [owner]
    spec: dict[str, Any] = {"nodeName": ep.node_name}
    if ep.policy is not None:
        spec["policy"] = ep.policy.dump()
    status: dict[str, Any] = {"operator": ep.operator_status.dump()}
    if ep.last_heartbeat:
        status["lastHeartbeat"] = ep.last_heartbeat
    body = {"apiVersion": API_VERSION, "kind": "ExecutionPoint", "metadata": metadata}
    return {**body, "spec": spec, "status": status}


def check_action(action: Action, observed: ObservedExecutionPoint | None) -> None:
    """The object `action` leaves behind fits the models."""
    if isinstance(action, CreateExecutionPoint):
        check_execution_point(action.manifest)
    elif isinstance(action, DeleteExecutionPoint):
        return
    else:
        assert observed is not None
        subresource = isinstance(action, PatchOperatorStatus)
        check_execution_point(patched(_document(observed), action.patch, subresource=subresource))


def _observed(**fields: Any) -> ObservedExecutionPoint:
    base: dict[str, Any] = {
        "name": "n1",
        "node_name": "n1",
        "policy": PolicyRef(name="batch"),
        "owner_uid": "uid-1",
    }
    return ObservedExecutionPoint(**{**base, **fields})


OBSERVED: dict[str, ObservedExecutionPoint | None] = {
    "none yet": None,
    "settled": _observed(),
    "unmanaged": _observed(managed=False, owner_uid=None, policy=None),
    "wrong node name and owner": _observed(node_name="", owner_uid="old"),
    "stale": _observed(last_heartbeat="2026-01-01T00:00:00Z"),
    "fresh": _observed(last_heartbeat="2026-01-02T03:04:00Z"),
    "tied before": _observed(
        operator_status=OperatorStatus(heartbeat="Unknown", policy="batch", tie_with=["x"])
    ),
}


@pytest.mark.parametrize("resolution", [Resolution(BATCH), Resolution(OTHER, ("batch",)), None])
@pytest.mark.parametrize("case", sorted(OBSERVED))
def test_every_planned_execution_point_write_fits_the_models(
    case: str, resolution: Resolution | None
) -> None:
    observed = OBSERVED[case]
    existing = {"n1": observed} if observed is not None else {}
    resolutions = {"n1": resolution} if resolution is not None else {}
    actions = plan_execution_points({"n1": NODE}, resolutions, existing, now=NOW)
    for action in actions:
        check_action(action, observed)


@pytest.mark.parametrize(
    "spec", [{}, {"start": "Idle >"}, {"condorConfig": "UPDATE_INTERVAL = 30"}], ids=repr
)
@pytest.mark.parametrize("old", [{}, {"hash": "old", "selectedNodes": 9}], ids=repr)
def test_every_planned_policy_status_fits_the_models(
    spec: dict[str, Any], old: dict[str, Any]
) -> None:
    observed = ObservedPolicy("p", "uid-p", 3, spec, SlotPolicyStatus.model_validate(old))
    counts = {"p": PolicyCounts(selected=2, governed=1, tie_with=("q",))}
    for patch in plan_policy_statuses({"p": observed}, {"p": check_policy(spec)}, counts, now=NOW):
        body = {"apiVersion": API_VERSION, "kind": "SlotPolicy", "metadata": {"name": "p"}}
        check_slot_policy(
            patched({**body, "spec": spec, "status": old}, patch.patch, subresource=True)
        )


# ---- and the check catches a misspelt key ------------------------------------------------------


def _rename(document: Any, path: tuple[str, ...], wrong: str) -> Any:
    """`document` with the key at `path` spelt `wrong`."""
    document = copy.deepcopy(document)
    *parents, key = path
    target = document
    for part in parents:
        target = target[part]
    target[wrong] = target.pop(key)
    return document


def _planned_status_patch() -> dict[str, Any]:
    [status] = plan_execution_points(
        {"n1": NODE}, {"n1": Resolution(OTHER, ("batch",))}, {"n1": _observed()}, now=NOW
    )[1:]
    assert isinstance(status, PatchOperatorStatus)
    return status.patch


@pytest.mark.parametrize(
    ("path", "wrong"),
    [
        (("status", "operator", "tieWith"), "tiesWith"),
        (("status", "operator", "heartbeat"), "heartBeat"),
        (("status", "operator"), "operater"),
    ],
)
def test_a_misspelt_operator_status_key_is_caught(path: tuple[str, ...], wrong: str) -> None:
    patch = _planned_status_patch()
    check_execution_point(patched(_document(_observed()), patch, subresource=True))
    bad = _rename(patch, path, wrong)
    with pytest.raises(ValidationError, match=wrong):
        check_execution_point(patched(_document(_observed()), bad, subresource=True))


@pytest.mark.parametrize(
    ("path", "wrong"),
    [(("status", "selectedNodes"), "selectednodes"), (("status", "observedGeneration"), "gen")],
)
def test_a_misspelt_policy_status_key_is_caught(path: tuple[str, ...], wrong: str) -> None:
    observed = ObservedPolicy("p", "uid-p", 3, {})
    [planned] = plan_policy_statuses({"p": observed}, {"p": check_policy({})}, {}, now=NOW)
    body = {"apiVersion": API_VERSION, "kind": "SlotPolicy", "metadata": {"name": "p"}}
    check_slot_policy(patched(body, planned.patch, subresource=True))
    with pytest.raises(ValidationError, match=wrong):
        check_slot_policy(patched(body, _rename(planned.patch, path, wrong), subresource=True))


@pytest.mark.parametrize(
    ("path", "wrong"),
    [(("spec", "policy"), "polcy"), (("metadata", "ownerReferences"), "ownerReference")],
)
def test_a_misspelt_spec_or_metadata_key_is_caught(path: tuple[str, ...], wrong: str) -> None:
    observed = _observed(managed=False, owner_uid=None, policy=None)
    [adopt, _status] = plan_execution_points(
        {"n1": NODE}, {"n1": Resolution(BATCH)}, {"n1": observed}, now=NOW
    )
    assert isinstance(adopt, PatchExecutionPoint)
    check_execution_point(patched(_document(observed), adopt.patch, subresource=False))
    bad = _rename(adopt.patch, path, wrong)
    with pytest.raises(ValidationError, match=wrong):
        check_execution_point(patched(_document(observed), bad, subresource=False))
