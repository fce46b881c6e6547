"""condor_drain on Kubernetes: the admin's request in the ExecutionPoint's spec, carried out by
the node's startd along the engine's drain transitions (the reference's "Drained" state).

The request is declarative: the startd drains while `spec.drain` names a request, a request
with a new `requestedAt` replaces the one before (cancel, then drain again), and its removal
cancels the drain (condor_drain -cancel). Which request the startd was given is remembered by
its `requestedAt`, so an agent that restarts gives its fresh startd the same drain again, and
a drain that already resumed (-resume-on-completion) is not repeated. A drain with
-exit-on-completion ends Exited: the agent stops serving the node (`exited`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from kondor_core.api import DrainRequest, DrainStatus, ExecutionPoint
from kondor_core.api.meta import format_time
from kondor_core.policy import CancelDrain, Drain, DrainMode, Event, State
from kondor_core.policy.machine import MachineState


@dataclass(frozen=True)
class DrainStep:
    """The machine events for this cycle and the request the startd then carries out."""

    events: tuple[Event, ...]
    applied: str | None


def drain_step(requested: DrainRequest | None, applied: str | None) -> DrainStep:
    """What to tell the startd, given the request in the spec and the one it was given."""
    if requested is None:
        return DrainStep((CancelDrain(),) if applied is not None else (), None)
    if requested.requested_at == applied:
        return DrainStep((), applied)
    # -exit-on-completion wins over -resume-on-completion (condor_drain takes one of them).
    resume = requested.resume_on_completion and not requested.exit_on_completion
    drain = Drain(DrainMode(requested.mode), resume_on_completion=resume, start=requested.start)
    events: tuple[Event, ...] = (CancelDrain(), drain) if applied is not None else (drain,)
    return DrainStep(events, requested.requested_at)


def drain_status(
    requested: DrainRequest | None,
    machine: MachineState,
    previous: DrainStatus | None,
    now: float,
) -> DrainStatus | None:
    """The drain's state for the ExecutionPoint's status: Draining until every slot is
    Drained, then Drained, or Resumed once a -resume-on-completion drain has finished, or
    Exited once an -exit-on-completion one has (that state stays until the request goes)."""
    if requested is None:
        return None
    state: Literal["Draining", "Drained", "Resumed", "Exited"]
    if machine.draining is None:
        state = "Resumed"
    elif machine.slots and all(slot.state is State.DRAINED for slot in machine.slots):
        state = "Exited" if requested.exit_on_completion else "Drained"
    else:
        state = "Draining"
    same = previous is not None and previous.requested_at == requested.requested_at
    if same and previous is not None and previous.state == state:
        return previous
    if state == "Resumed" and not same:
        # The startd was given this request but has not drained yet (its first cycle).
        state = "Draining"
    return DrainStatus(
        requested_at=requested.requested_at,
        mode=requested.mode,
        reason=requested.reason,
        state=state,
        since=format_time(now),
    )


def exited(requested: DrainRequest | None, status: DrainStatus | None) -> bool:
    """Whether the node's startd exited for this request (-exit-on-completion, carried out):
    its agent then publishes no slots and claims nothing until the request is cancelled or
    replaced (condor_drain's startd exits; on Kubernetes the agent stays up, so that -cancel
    brings the node back without a restart)."""
    return (
        requested is not None
        and requested.exit_on_completion
        and status is not None
        and status.requested_at == requested.requested_at
        and status.state == "Exited"
    )


def resumed(requested: DrainRequest | None, status: DrainStatus | None) -> str | None:
    """The request an earlier agent already carried out to the end (Resumed), if the spec
    still names it: a restarted agent must not drain the node again for it."""
    if requested is None or status is None or status.state != "Resumed":
        return None
    return requested.requested_at if status.requested_at == requested.requested_at else None


#: Who a drain of a cordoned node is requested by (spec.drain.requestedBy), and its reason.
CORDON_REQUESTER = "kondor-cordon"
CORDON_REASON = "the Node is cordoned"


@dataclass(frozen=True)
class CordonPlan:
    """spec.drain to write for cordoned nodes, and the cordon drains to cancel."""

    drain: dict[str, dict[str, Any]]
    cancel: tuple[str, ...]


def cordon_drains(
    cordoned: Collection[str],
    execution_points: Sequence[ExecutionPoint],
    drains_on_cordon: Callable[[str], bool],
    now_text: str,
) -> CordonPlan:
    """A SlotPolicy's drainOnCordon: the ExecutionPoint of a cordoned node (Node
    spec.unschedulable) governed by such a policy and not drained already gets a graceful
    drain; a drain asked this way is cancelled once the node is uncordoned. An admin's own
    drain is never touched."""
    drain: dict[str, dict[str, Any]] = {}
    cancel: list[str] = []
    for ep in execution_points:
        name, request = ep.metadata.name, ep.spec.drain
        if ep.spec.node_name in cordoned:
            policy = ep.spec.policy.name if ep.spec.policy is not None else None
            if request is None and policy is not None and drains_on_cordon(policy):
                drain[name] = {
                    "mode": "graceful",
                    "reason": CORDON_REASON,
                    "requestedAt": now_text,
                    "requestedBy": CORDON_REQUESTER,
                }
        elif request is not None and request.requested_by == CORDON_REQUESTER:
            cancel.append(name)
    return CordonPlan(drain, tuple(cancel))
