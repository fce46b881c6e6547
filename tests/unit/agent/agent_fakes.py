"""Fakes for the agent's edges: an API server holding one ExecutionPoint and its SlotPolicies,
a clock that only moves when told, and a machine source tests can change."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from kondor_agent.kube import NotFoundError, WriteError
from kondor_agent.report import apply_merge_patch
from kondor_core.api import ExecutionPointStatus, Machine

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"


def policy_status(generation: int, *, valid: bool = True) -> dict[str, Any]:
    """A SlotPolicy's status as the operator writes it once it has checked `generation`."""
    condition = {
        "type": "Valid",
        "status": "True" if valid else "False",
        "reason": "Compiled" if valid else "Invalid",
        "message": "the policy compiles" if valid else "spec.start: 'X >' is not valid",
        "observedGeneration": generation,
        "lastTransitionTime": "2027-01-15T08:00:00Z",
    }
    return {"observedGeneration": generation, "conditions": [condition]}


class FakeClock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class FakeAPI:
    """ExecutionPoints and SlotPolicies in memory; status patches applied as the API server
    applies merge patches, and recorded."""

    def __init__(self) -> None:
        self.execution_points: dict[str, dict[str, Any]] = {}
        self.slot_policies: dict[str, dict[str, Any]] = {}
        self.patches: list[tuple[float, dict[str, Any]]] = []
        self.fail_writes = False
        self.clock: FakeClock | None = None

    def add_policy(
        self, manifest: Mapping[str, Any], generation: int = 1, *, checked: bool | None = True
    ) -> None:
        """Store a SlotPolicy at `generation` with the operator's verdict on it: `checked`
        True (valid), False (invalid) or None (not checked yet: no status for it)."""
        body = copy.deepcopy(dict(manifest))
        body.setdefault("metadata", {})["generation"] = generation
        if checked is not None:
            body["status"] = policy_status(generation, valid=checked)
        self.slot_policies[body["metadata"]["name"]] = body

    def add_execution_point(self, node: str, policy: str | None, status: Any = None) -> None:
        spec: dict[str, Any] = {"nodeName": node}
        if policy is not None:
            spec["policy"] = {"name": policy}
        body: dict[str, Any] = {
            "apiVersion": "kondor.io/v1alpha1",
            "kind": "ExecutionPoint",
            "metadata": {"name": node},
            "spec": spec,
        }
        if status is not None:
            body["status"] = status
        self.execution_points[node] = body

    def status(self, node: str) -> dict[str, Any]:
        return dict(self.execution_points[node].get("status", {}))

    def slot_ads(self, node: str) -> list[dict[str, Any]]:
        """The node's whole slot ads, as a reader of its stored status sees them."""
        return [slot.ad for slot in ExecutionPointStatus.model_validate(self.status(node)).slots]

    def read_execution_point(self, name: str) -> dict[str, Any] | None:
        found = self.execution_points.get(name)
        return copy.deepcopy(found) if found is not None else None

    def read_slot_policy(self, name: str) -> dict[str, Any] | None:
        found = self.slot_policies.get(name)
        return copy.deepcopy(found) if found is not None else None

    def patch_status(self, name: str, patch: Mapping[str, Any]) -> None:
        if self.fail_writes:
            raise WriteError("500 Internal Server Error")
        if name not in self.execution_points:
            raise NotFoundError(name)
        body = self.execution_points[name]
        body["status"] = apply_merge_patch(body.get("status", {}), patch.get("status", {}))
        self.patches.append((self.clock() if self.clock else 0.0, copy.deepcopy(dict(patch))))


class MachineBox:
    """A machine source whose machine a test replaces."""

    def __init__(self, machine: Machine) -> None:
        self.machine = machine

    def __call__(self) -> Machine:
        return self.machine


def load_yaml(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    return data


def example_machine(name: str) -> Machine:
    return Machine.model_validate(load_yaml(EXAMPLES / "machines" / name))
