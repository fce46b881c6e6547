"""The startd's state machine for one slot: `step(policy, slot, facts, job_ad, now, events)`.

It follows "State and Activity Transitions" in the reference, transition by
transition (the numbers in `Transition.number` are the reference's), and the
order in which the condor_startd checks them on every polling cycle: retirement
first, then PREEMPT, un-retirement, SUSPEND, CONTINUE, preempting claims, START,
CLAIM_WORKLIFE and draining on an idle claim. Entering Retiring or Idle is
re-evaluated at once, as the startd does, so a zero MaxJobRetirementTime goes
from Busy through Retiring to Preempting in one cycle.

Pure: no clock, no I/O. The caller passes `now` and gets back a new `SlotState`
and the actions for the agent.

The transitions are split by what they are: `stepper` (the step's working state and the
evaluation of knobs against the slot's ad), `moves` (entering a state and what that does),
`events` (one handler per event the slot is told), `states` (the periodic evaluation, one
function per state) and `retirement` (the claim's retirement and vacate timers).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kondor_core.policy.evaluation import StartdPolicy, truth
from kondor_core.policy.model import (
    Action,
    EngineError,
    Event,
    Fact,
    JobAd,
    MachineContext,
    SlotState,
    State,
)
from kondor_core.policy.transitions import retirement
from kondor_core.policy.transitions.events import handle
from kondor_core.policy.transitions.states import evaluate
from kondor_core.policy.transitions.stepper import (
    Stepper,
    as_classad,
    job_value,
    slot_prefix,
    timestamp,
)

__all__ = [
    "accepts",
    "advertised",
    "as_classad",
    "hibernate",
    "rank",
    "retirement_remaining",
    "slot_prefix",
    "step",
]


def step(  # noqa: PLR0917 - the engine's documented positional signature
    policy: StartdPolicy,
    slot: SlotState,
    facts: Mapping[str, Fact],
    job_ad: JobAd | None,
    now: float,
    events: Sequence[Event] = (),
    *,
    machine: MachineContext | None = None,
) -> tuple[SlotState, list[Action]]:
    """Apply `events` to `slot` at time `now`, then run one policy evaluation cycle.

    `facts` are the slot's machine attributes (LoadAvg, CondorLoadAvg, KeyboardIdle,
    ConsoleIdle, Cpus, Memory, ...); the engine adds State, Activity, the timers and the
    claim's attributes itself. `job_ad`, when given, refreshes the ad of the job on the
    current claim (the claim keeps the ad it was made with otherwise). The returned slot's
    `transitions` lists the changes made, each with its reason.
    """
    if slot.deleted:
        raise EngineError(f"{slot.name}: the dynamic slot was released; it takes no more steps")
    if slot.last_step is not None and now < slot.last_step:
        raise EngineError(
            f"{slot.name}: time went backwards: now={now} is before the last step at "
            f"{slot.last_step}; steps must come in time order"
        )
    stepper = Stepper(policy, slot, facts, now, machine or MachineContext())
    if job_ad is not None and slot.claim is not None:
        stepper.refresh_job(job_ad)
    for event in events:
        handle(stepper, event)
    evaluate(stepper)
    return stepper.finish()


def accepts(
    policy: StartdPolicy,
    slot: SlotState,
    facts: Mapping[str, Fact],
    job_ad: JobAd,
    now: float,
    *,
    machine: MachineContext | None = None,
) -> tuple[bool, str]:
    """Whether the slot's START accepts `job_ad` now (the startd's check of a claim request)."""
    stepper = Stepper(policy, slot, facts, now, machine or MachineContext())
    claim = stepper.new_claim("check", "check", job_ad)
    return stepper.start_accepts(claim)


def rank(
    policy: StartdPolicy,
    slot: SlotState,
    facts: Mapping[str, Fact],
    job_ad: JobAd,
    now: float,
    *,
    machine: MachineContext | None = None,
) -> float:
    """The slot's RANK for `job_ad` (0 when UNDEFINED), to compare with CurrentRank."""
    stepper = Stepper(policy, slot, facts, now, machine or MachineContext())
    return stepper.new_claim("rank", "rank", job_ad).rank


def retirement_remaining(
    policy: StartdPolicy,
    slot: SlotState,
    facts: Mapping[str, Fact],
    now: float,
    *,
    machine: MachineContext | None = None,
) -> float:
    """Seconds of retirement the slot's running job has left (0 without a job; may be inf)."""
    stepper = Stepper(policy, slot, facts, now, machine or MachineContext())
    return retirement.retirement_remaining(stepper)


def advertised(
    policy: StartdPolicy,
    slot: SlotState,
    facts: Mapping[str, Fact],
    now: float,
    *,
    machine: MachineContext | None = None,
) -> dict[str, Fact]:
    """The policy attributes the slot publishes in its ad at `now`.

    Requirements is FALSE while the slot takes no match: Matched, Preempting, Drained, a
    preempting claim already waiting, shutting down, or a claim whose retirement cannot be
    undone (draining, PREEMPT) — so a negotiator reading only the ad offers it no job;
    otherwise it is TRUE when START locally evaluates to TRUE, and START's
    text when it depends on the job ("The START Expression", "Matched State").
    """
    stepper = Stepper(policy, slot, facts, now, machine or MachineContext())
    out: dict[str, Fact] = {
        "State": str(slot.state),
        "Activity": str(slot.activity),
        "EnteredCurrentState": timestamp(slot.entered_state),
        "EnteredCurrentActivity": timestamp(slot.entered_activity),
        "CurrentRank": slot.claim.rank if slot.claim is not None else 0.0,
        "LastBenchmark": timestamp(slot.last_benchmark),
    }
    if not _takes_matches(slot, stepper):
        out["Requirements"] = False
    elif truth(stepper.evaluate_knob("START", None)) is True:
        out["Requirements"] = True
    else:
        out["Requirements"] = stepper.machine.drain_start or policy.knob("START") or "False"
    claim = slot.claim
    if claim is not None:
        owner = job_value(claim, "Owner")
        if isinstance(owner, str):
            out["RemoteOwner"] = owner
        if claim.job_started_at is not None:
            out["JobId"] = claim.job_id
            out["JobStart"] = timestamp(claim.job_started_at)
            out["TotalJobRunTime"] = timestamp(stepper.job_age(claim))
            out["TotalJobSuspendTime"] = timestamp(stepper.suspended_time(claim))
    if slot.pending_claim is not None and slot.state is State.CLAIMED:
        out["PreemptingRank"] = slot.pending_claim.rank
    return out


def _takes_matches(slot: SlotState, stepper: Stepper) -> bool:
    """Whether the slot takes a new match now: on a Claimed slot, a preempting one."""
    if slot.state in (State.MATCHED, State.PREEMPTING, State.DRAINED) or slot.deleted:
        return False
    if slot.pending_claim is not None or slot.shutting_down is not None:
        return False
    if slot.suspended_for_cod:
        return False  # Resource::suspendForCOD makes the slot unavailable (COD_REQ)
    return slot.state is not State.CLAIMED or retirement.may_unretire(stepper)


def hibernate(
    policy: StartdPolicy,
    slot: SlotState,
    facts: Mapping[str, Fact],
    now: float,
    *,
    machine: MachineContext | None = None,
) -> str | None:
    """HIBERNATE evaluated locally: the sleep state the slot asks for ("NONE", "RAM", ...),
    or None when the policy has no HIBERNATE or it is not a string."""
    if not policy.has("HIBERNATE"):
        return None
    stepper = Stepper(policy, slot, facts, now, machine or MachineContext())
    value = stepper.evaluate_knob("HIBERNATE", None)
    return value if isinstance(value, str) else None
