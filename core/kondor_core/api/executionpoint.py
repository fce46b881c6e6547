"""ExecutionPoint: one per selected node. The operator writes spec; the agent writes status."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from kondor_core.api.base import Condition, Model


class ResolvedPolicy(Model):
    """The SlotPolicy that won for this node, pinned by generation and compiled hash."""

    name: str
    generation: int = 0
    hash: str = ""


class ExecutionPointSpec(Model):
    """spec of an ExecutionPoint (kondor.io/v1alpha1)."""

    node_name: str
    policy: ResolvedPolicy | None = None
    drain: str | None = Field(
        default=None, description="Requested drain: graceful, quick or fast (DRAIN_JOBS)"
    )


class SlotStatus(Model):
    """One slot as the agent reports it; `ad` holds the whole slot ad."""

    name: str
    type: str
    state: str
    activity: str
    cpus: float = 0
    memory: int = 0
    gpus: int = 0
    ad: dict[str, Any] = Field(default_factory=dict)


class SlotSummary(Model):
    """Counts shown by `kubectl get executionpoints`."""

    slots: int = 0
    claimed: int = 0
    unclaimed: int = 0
    owner: int = 0
    cpus: float = 0
    memory: str = "0"
    gpus: int = 0
    state: str = ""


class ExecutionPointStatus(Model):
    """status of an ExecutionPoint: written by the agent, except `operator`."""

    summary: SlotSummary = Field(default_factory=SlotSummary)
    slots: list[SlotStatus] = Field(default_factory=list)
    conditions: list[Condition] = Field(default_factory=list)
    last_heartbeat: str | None = None
    machine: dict[str, Any] = Field(default_factory=dict)
    operator: dict[str, Any] = Field(default_factory=dict)
