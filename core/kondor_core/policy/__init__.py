"""The condor_startd policy engine: states, activities and every transition, as pure functions.

The reference's "condor_startd Policy Configuration", "Machine States", "Machine
Activities", "State and Activity Transitions", "The Claimed State and Leases",
backfill, "Drained State" and "Examples of Policy Configuration" are the
specification. Every expression is evaluated by classad2.

Use:
    policy = StartdPolicy.compile({"START": "...", ...})   # or StartdPolicy.from_effective(...)
    slot, actions = step(policy, slot, facts, job_ad, now, events)        # one slot
    result = step_machine(policy, machine, facts, now, events, ...)       # a whole machine

Replaying a policy over simulated time (`run_timeline`), the scenario files of `kondor
simulate --timeline` and their replay with a job queue are simulators, in `kondor_core.sim`.
"""

from kondor_core.policy import defaults
from kondor_core.policy.evaluation import StartdPolicy, rewrite_time
from kondor_core.policy.machine import MachineState, MachineStep, step_machine
from kondor_core.policy.model import (
    Action,
    ActionKind,
    ActivateClaim,
    Activity,
    BackfillExited,
    BackfillStarted,
    BenchmarksDone,
    CancelDrain,
    Claim,
    ClaimRequest,
    Drain,
    DrainMode,
    EngineError,
    Event,
    JobExited,
    JobGone,
    LeaseRenewed,
    MachineContext,
    Match,
    PreemptingClaimWithdrawn,
    ReleaseClaim,
    ResumeForCod,
    Shutdown,
    ShutdownMode,
    SlotKind,
    SlotState,
    State,
    SuspendForCod,
    Transition,
    Vacate,
)
from kondor_core.policy.transitions import (
    accepts,
    advertised,
    hibernate,
    rank,
    retirement_remaining,
    step,
)

__all__ = [
    "Action",
    "ActionKind",
    "ActivateClaim",
    "Activity",
    "BackfillExited",
    "BackfillStarted",
    "BenchmarksDone",
    "CancelDrain",
    "Claim",
    "ClaimRequest",
    "Drain",
    "DrainMode",
    "EngineError",
    "Event",
    "JobExited",
    "JobGone",
    "LeaseRenewed",
    "MachineContext",
    "MachineState",
    "MachineStep",
    "Match",
    "PreemptingClaimWithdrawn",
    "ReleaseClaim",
    "ResumeForCod",
    "Shutdown",
    "ShutdownMode",
    "SlotKind",
    "SlotState",
    "StartdPolicy",
    "State",
    "SuspendForCod",
    "Transition",
    "Vacate",
    "accepts",
    "advertised",
    "defaults",
    "hibernate",
    "rank",
    "retirement_remaining",
    "rewrite_time",
    "step",
    "step_machine",
]
