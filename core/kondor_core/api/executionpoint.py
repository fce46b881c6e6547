"""ExecutionPoint: one per selected node. The operator writes spec; the agent writes status."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, model_validator

from kondor_core.api.base import ClassAdExpr, Condition, Model


class PolicyRef(Model):
    """The SlotPolicy that won for this node (spec.policy): named, not pinned to a generation.
    The node's agent follows that SlotPolicy and carves each generation of it the operator's
    status calls valid, as a startd reads its configuration again at condor_reconfig;
    `status.policy` says which it carved."""

    name: str


class ResolvedPolicy(Model):
    """The SlotPolicy generation (and its compiled hash) a node's slots were carved with."""

    name: str
    generation: int = 0
    hash: str = ""


class DrainRequest(Model):
    """condor_drain for one node, written by `kubectl kondor drain` (the admin's field; the
    operator never touches it) and carried out by the node's agent."""

    mode: Literal["graceful", "quick", "fast"] = Field(
        default="graceful",
        description="graceful: jobs finish within MaxJobRetirementTime; quick: vacated at once "
        "within MachineMaxVacateTime; fast: killed at once",
    )
    reason: str = Field(default="", max_length=1024, description="-reason, shown in status")
    resume_on_completion: bool = Field(
        default=False,
        description="-resume-on-completion: once every slot is drained, run jobs again",
    )
    exit_on_completion: bool = Field(
        default=False,
        description="-exit-on-completion: once every slot is drained the node's startd exits: "
        "its agent publishes no slots and takes no job until the drain is cancelled (wins over "
        "resumeOnCompletion; `kubectl kondor drain` refuses both)",
    )
    check: ClassAdExpr | None = Field(
        default=None, description="-check: the drain was asked only if this held for every slot"
    )
    start: ClassAdExpr | None = Field(
        default=None,
        description="-start (graceful only): the START expression while draining; resources "
        "freed by retired jobs take the jobs it accepts until the last job that ran when the "
        "drain began exits, then those are evicted",
    )
    requested_at: str = Field(
        description="When it was asked (RFC 3339); a new time is a new request"
    )
    requested_by: str = Field(default="", description="Who asked (the API user)")


class ExecutionPointSpec(Model):
    """spec of an ExecutionPoint (kondor.io/v1alpha1)."""

    node_name: str
    policy: PolicyRef | None = None
    drain: DrainRequest | None = Field(
        default=None, description="A drain asked by an admin (`kubectl kondor drain`)"
    )


class DrainStatus(Model):
    """How the node's drain goes, as its agent carries it out."""

    requested_at: str = Field(description="The request this is about (spec.drain.requestedAt)")
    mode: str
    reason: str = ""
    state: Literal["Draining", "Drained", "Resumed", "Exited"] = Field(
        description="Draining: jobs are retiring or being vacated; Drained: every slot is "
        "Drained; Resumed: drained, then running jobs again (-resume-on-completion); Exited: "
        "drained, and the startd exited (-exit-on-completion): no slots until -cancel"
    )
    since: str = Field(description="When it entered this state (RFC 3339)")


class PowerStatus(Model):
    """Power management ("Power Management"): HIBERNATE as the node's slots last answered it,
    every HIBERNATE_CHECK_INTERVAL seconds. Kondor does not suspend the node: once every slot
    agrees, the operator marks the Node for the cluster autoscaler's scale-down."""

    sleep_state: str | None = Field(
        default=None,
        description="The low power state every slot agrees on (the deepest asked for), or "
        "none while some slot says NONE",
    )
    slots: dict[str, str] = Field(default_factory=dict, description="Each slot's HIBERNATE")
    reason: str = Field(default="", description="Which slot vetoes, and why")
    since: str = Field(description="When sleepState last changed (RFC 3339)")


class SlotStatus(Model):
    """One slot as the agent reports it. Read through `ExecutionPointStatus`, `ad` is the whole
    slot ad (`kondor simulate`'s form); stored, it holds only what differs from the status's
    `machine` (`ExecutionPointStatus.dump`)."""

    name: str = Field(description="The slot's Name: slot1@node, slot1_1@node")
    type: str = Field(description="Partitionable, Dynamic or Static (SlotType)")
    state: str
    activity: str
    cpus: float = 0
    memory: int = Field(default=0, description="MiB, as the slot ad's Memory")
    disk: int = Field(default=0, description="KiB, as the slot ad's Disk")
    gpus: int = 0
    entered_current_state: int | None = Field(
        default=None, description="EnteredCurrentState: epoch seconds"
    )
    entered_current_activity: int | None = Field(
        default=None, description="EnteredCurrentActivity: epoch seconds"
    )
    job: str | None = Field(default=None, description="The job the slot runs (JobId), if any")
    ad: dict[str, Any] = Field(
        default_factory=dict,
        description="The slot ad, less the attributes it shares with status.machine: the "
        "whole ad is status.machine overlaid with this",
    )
    expressions: list[str] = Field(
        default_factory=list,
        description="Attributes of `ad` whose string is ClassAd source (Requirements, Start), "
        "not a string value",
    )


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


class OperatorStatus(Model):
    """`status.operator` of an ExecutionPoint: the operator's subtree (the agent never writes
    it): which SlotPolicy governs the node and why, and whether its agent reports."""

    heartbeat: Literal["Fresh", "Stale", "Unknown"] = Field(
        default="Unknown",
        description="Fresh while the agent's lastHeartbeat is younger than three update "
        "intervals; Unknown before its first report",
    )
    policy: str | None = Field(default=None, description="The SlotPolicy that governs the node")
    priority: int | None = Field(default=None, description="That policy's spec.priority")
    tie_with: list[str] = Field(
        default_factory=list,
        description="Policies of equal priority that select the node too (the first by name wins)",
    )
    conditions: list[Condition] = Field(
        default_factory=list, description="HeartbeatFresh and PolicyTie"
    )


class ExecutionPointStatus(Model):
    """status of an ExecutionPoint: written by the agent, except `operator`."""

    summary: SlotSummary = Field(default_factory=SlotSummary)
    slots: list[SlotStatus] = Field(default_factory=list)
    conditions: list[Condition] = Field(default_factory=list)
    last_heartbeat: str | None = Field(
        default=None, description="When the agent last wrote this status (RFC 3339)"
    )
    policy: ResolvedPolicy | None = Field(
        default=None, description="The SlotPolicy (generation, hash) the slots were carved with"
    )
    machine: dict[str, Any] = Field(
        default_factory=dict,
        description="The machine ad: what every slot ad shares (detected resources and facts, "
        "the clock); stored once here, not in each slot's ad",
    )
    operator: OperatorStatus = Field(
        default_factory=OperatorStatus, description="Written by the operator, never the agent"
    )
    drain: DrainStatus | None = Field(default=None, description="The drain asked in spec.drain")
    power: PowerStatus | None = Field(
        default=None,
        description="Power management (HIBERNATE), when the policy sets HIBERNATE_CHECK_INTERVAL",
    )

    @model_validator(mode="after")
    def _whole_slot_ads(self) -> ExecutionPointStatus:
        """Each slot's `ad` whole again: the stored form (`dump`) leaves out of it what it
        shares with `machine`."""
        if self.machine and any(self.machine.keys() - slot.ad.keys() for slot in self.slots):
            whole = [
                slot.model_copy(update={"ad": whole_slot_ad(self.machine, slot.ad)})
                for slot in self.slots
            ]
            object.__setattr__(self, "slots", whole)  # frozen: set while being built
        return self

    def dump(self) -> dict[str, Any]:
        """The stored form: each slot's `ad` without the attributes it shares, same value and
        type, with `machine` (a third of a slot ad, and the clock that changes at each
        heartbeat), which the API server would otherwise store, patch and send to every
        watcher once per slot. Reading it back (`model_validate`) gives the whole ads."""
        document = super().dump()
        machine = document.get("machine")
        if machine:
            for slot in document.get("slots") or ():
                slot["ad"] = {k: v for k, v in slot["ad"].items() if not _shared(machine, k, v)}
        return document


def whole_slot_ad(machine: Mapping[str, Any], ad: Mapping[str, Any]) -> dict[str, Any]:
    """A slot's whole ad from its stored `ad` and its status's `machine`: every attribute of
    the machine ad is in every slot ad, so what the stored form left out comes from there."""
    return {**machine, **ad}


def _shared(machine: Mapping[str, Any], key: str, value: Any) -> bool:
    found = machine.get(key, _ABSENT)
    return type(found) is type(value) and found == value


_ABSENT = object()
