"""The startd state machine's data: states, activities, slot state, events, actions, transitions.

Everything here is a frozen value. The names are HTCondor's ("Machine States",
"Machine Activities", "State and Activity Transitions" in the reference).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from kondor_core.errors import KondorError

#: A job ad as the caller has it: a classad2 ClassAd, or a plain mapping of attribute -> value
#: (strings are string values; use `classad2.ExprTree` for expressions).
JobAd = Any

#: A fact about the machine: a measured attribute (LoadAvg, KeyboardIdle) or a static one.
Fact = bool | int | float | str


class State(StrEnum):
    """The seven machine states ("Machine States")."""

    OWNER = "Owner"
    UNCLAIMED = "Unclaimed"
    MATCHED = "Matched"
    CLAIMED = "Claimed"
    PREEMPTING = "Preempting"
    BACKFILL = "Backfill"
    DRAINED = "Drained"


class Activity(StrEnum):
    """The seven activities ("Machine Activities")."""

    IDLE = "Idle"
    BENCHMARKING = "Benchmarking"
    BUSY = "Busy"
    SUSPENDED = "Suspended"
    RETIRING = "Retiring"
    VACATING = "Vacating"
    KILLING = "Killing"


class SlotKind(StrEnum):
    STATIC = "static"
    PARTITIONABLE = "partitionable"
    DYNAMIC = "dynamic"


class DrainMode(StrEnum):
    """condor_drain's schedules: -graceful honours MaxJobRetirementTime (coordinated across
    slots), -quick vacates at once within MachineMaxVacateTime, -fast hard-kills."""

    GRACEFUL = "graceful"
    QUICK = "quick"
    FAST = "fast"


class ShutdownMode(StrEnum):
    """condor_off: graceful retires as configured, peaceful makes MaxJobRetirementTime
    infinite, fast bypasses retirement ("Claimed/Retiring" in the reference)."""

    GRACEFUL = "graceful"
    PEACEFUL = "peaceful"
    FAST = "fast"


# --------------------------------------------------------------------------- claims


@dataclass(frozen=True)
class Claim:
    """A claim on a slot by a schedd (the operator, in Kondor), with its job."""

    claim_id: str
    job_id: str
    #: The job ad; compared by identity only (ClassAds are mutable).
    job_ad: JobAd = field(compare=False, repr=False)
    #: RANK evaluated against this job when the claim was made (CurrentRank while it runs).
    rank: float = 0.0
    claimed_at: float = 0.0
    #: Claim lease ("The Claimed State and Leases"): JobLeaseDuration, default 40 minutes.
    lease_duration: float = 2400.0
    lease_renewed_at: float = 0.0
    #: How many jobs this claim has started (CLAIM_WORKLIFE counts only after the first).
    activations: int = 0
    #: JobStart of the running job, or None when the claim is idle.
    job_started_at: float | None = None
    #: Time the current job has spent suspended (retirement does not count it).
    suspended_total: float = 0.0
    suspended_since: float | None = None
    #: False once retirement was made irreversible (PREEMPT, shutdown, vacate).
    may_unretire: bool = True
    #: PREEMPT evaluated to TRUE on this claim (then WANT_VACATE decides Vacating vs Killing).
    preempt_was_true: bool = False
    #: Peaceful shutdown: MaxJobRetirementTime is infinite.
    retire_peacefully: bool = False
    #: MachineMaxVacateTime, pledged when the job started.
    pledged_max_vacate_time: float = 600.0
    #: The job's soft-kill signal (KillSig), SIGTERM by default.
    kill_sig: str = "SIGTERM"
    #: The negotiator preempts for user priority rather than machine RANK.
    for_user_priority: bool = False
    #: AcceptedWhileDraining: the claim began while the machine drained with a -start.
    accepted_while_draining: bool = False
    #: The job's Owner (RemoteOwner while it runs here).
    owner: str | None = None
    #: The job's attributes flattened for evaluation; filled by the engine.
    job_attrs: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def active(self) -> bool:
        """A starter (the job) is running on this claim."""
        return self.job_started_at is not None


@dataclass(frozen=True)
class SlotState:
    """One slot as the startd policy sees it. `step` returns a new one; nothing mutates."""

    name: str
    slot_id: int = 1
    kind: SlotKind = SlotKind.STATIC
    #: For a dynamic slot, the partitionable slot it was carved from.
    parent: str | None = None
    state: State = State.OWNER
    activity: Activity = Activity.IDLE
    entered_state: float = 0.0
    entered_activity: float = 0.0
    claim: Claim | None = None
    #: A claim waiting for this slot: a RANK/priority preemption (r_pre in HTCondor), or a
    #: match that arrived while the backfill client was being killed.
    pending_claim: Claim | None = None
    #: Where the slot goes once the job (or the backfill client) is gone.
    destination: State | None = None
    #: Why the current claim is being retired or preempted (reported in transitions).
    retire_reason: str | None = None
    #: The claim is evicted without a soft kill (vacate -fast, drain -fast, shutdown -fast).
    evict_fast: bool = False
    #: Preempting/Vacating ends (hard kill) at this time: MachineMaxVacateTime/JobMaxVacateTime.
    vacate_deadline: float | None = None
    #: KILLING_TIMEOUT already escalated to killing every process of the job.
    kill_escalated: bool = False
    #: LastBenchmark; 0 until benchmarks have run.
    last_benchmark: float = 0.0
    #: The activity before the current one was Benchmarking (no immediate re-run).
    act_was_benchmark: bool = False
    #: CpuBusy latch: when CpuBusy last became true, or None while it is false.
    cpu_busy_since: float | None = None
    #: The backfill client is running in this slot.
    backfill_running: bool = False
    #: condor_off was received: no new claims, claims retire or are killed per the mode.
    shutting_down: ShutdownMode | None = None
    #: A COD application runs on this slot (the startd's r_suspended_for_cod): the batch
    #: claim's job stays Claimed/Suspended and the policy is not evaluated for it.
    suspended_for_cod: bool = False
    #: The time of the last `step`, to reject time going backwards.
    last_step: float | None = None
    #: A dynamic slot that went back to its partitionable slot.
    deleted: bool = False
    #: The transitions made by the last `step` (timeline drivers collect them).
    transitions: tuple[Transition, ...] = ()

    def claim_active(self) -> bool:
        """A job is running (or suspended) on the current claim."""
        return self.claim is not None and self.claim.active


# --------------------------------------------------------------------------- events


@dataclass(frozen=True)
class Match:
    """The negotiator matched this slot with a job (transitions 5/6, D/C; 31/32, L/M in Backfill).

    `claimed=True` is the usual Kondor case, where the claim arrives with the match
    (Unclaimed -> Claimed/Idle, transition 5); `claimed=False` stops in Matched until a
    `ClaimRequest` with the same claim id (transition 9) or MATCH_TIMEOUT.
    On a Claimed slot the match is a preempting claim: accepted when RANK prefers the new
    job (or `for_user_priority`), and the running job is retired (transition 13).
    """

    claim_id: str
    job_ad: JobAd = field(compare=False)
    job_id: str = ""
    claimed: bool = True
    for_user_priority: bool = False


@dataclass(frozen=True)
class ClaimRequest:
    """The schedd claims a Matched slot (transition 9, G)."""

    claim_id: str


@dataclass(frozen=True)
class ActivateClaim:
    """The claim is activated: a job starts on Claimed/Idle (transition 11).

    `job_ad`/`job_id` replace the claim's job when the schedd runs another job on the claim.
    """

    job_ad: JobAd = field(default=None, compare=False)
    job_id: str | None = None


@dataclass(frozen=True)
class JobExited:
    """The job ended on its own (Busy -> Idle, transition 12; Retiring -> Preempting, 18)."""

    exit_code: int = 0


@dataclass(frozen=True)
class JobGone:
    """The job's processes are gone after a soft or hard kill (the starter exited)."""


@dataclass(frozen=True)
class LeaseRenewed:
    """A keep-alive from the schedd reset the claim lease."""


@dataclass(frozen=True)
class ReleaseClaim:
    """The schedd has no more work and releases the claim (H)."""


@dataclass(frozen=True)
class PreemptingClaimWithdrawn:
    """The preempting claim went away (transition 19 un-retires a RANK preemption)."""


@dataclass(frozen=True)
class Vacate:
    """condor_vacate: evict the job (soft kill; `fast` hard-kills) and return to Owner."""

    fast: bool = False


@dataclass(frozen=True)
class Drain:
    """condor_drain: a machine-wide event (use `step_machine`)."""

    mode: DrainMode = DrainMode.GRACEFUL
    #: -resume-on-completion: finalize once every slot is drained (transition 34 to Owner).
    resume_on_completion: bool = False
    #: -start: the START expression while draining (graceful): resources freed by retired
    #: jobs take jobs it accepts, until the last job running when the drain began exits.
    start: str | None = None


@dataclass(frozen=True)
class CancelDrain:
    """condor_drain -cancel (transitions 34/35 to Owner)."""


@dataclass(frozen=True)
class Shutdown:
    """condor_off: graceful, peaceful (-peaceful) or fast (-fast)."""

    mode: ShutdownMode = ShutdownMode.GRACEFUL


@dataclass(frozen=True)
class BenchmarksDone:
    """The benchmarks finished (Benchmarking -> Idle, transition 4)."""


@dataclass(frozen=True)
class BackfillStarted:
    """The backfill client runs (Backfill/Idle -> Busy, transition 26)."""


@dataclass(frozen=True)
class BackfillExited:
    """The backfill client exited (Busy -> Idle, 27; Killing -> Idle, 29)."""


@dataclass(frozen=True)
class SuspendForCod:
    """A COD application started running on the slot (the startd's suspendForCOD): a running
    batch job is suspended (Claimed/Busy or Retiring -> Suspended) and stays so, whatever
    SUSPEND, CONTINUE or PREEMPT say, until `ResumeForCod`."""


@dataclass(frozen=True)
class ResumeForCod:
    """No COD application runs on the slot any more (the startd's resumeForCOD): the batch
    job suspended for COD resumes (Claimed/Suspended -> Busy)."""


Event = (
    Match
    | ClaimRequest
    | ActivateClaim
    | JobExited
    | JobGone
    | LeaseRenewed
    | ReleaseClaim
    | PreemptingClaimWithdrawn
    | Vacate
    | Drain
    | CancelDrain
    | Shutdown
    | BenchmarksDone
    | BackfillStarted
    | BackfillExited
    | SuspendForCod
    | ResumeForCod
)


# --------------------------------------------------------------------------- actions


class ActionKind(StrEnum):
    """What the agent carries out. The engine only decides."""

    START_JOB = "start-job"
    SUSPEND_JOB = "suspend-job"
    CONTINUE_JOB = "continue-job"
    #: Send the job's KillSig (default SIGTERM) and let it shut down.
    SOFT_KILL = "soft-kill"
    #: Kill the job outright (SIGKILL); `escalate` after KILLING_TIMEOUT kills every process.
    HARD_KILL = "hard-kill"
    #: Tell the schedd the claim is over (broken or closed).
    RELEASE_CLAIM = "release-claim"
    #: Tell the schedd its claim request or activation was refused.
    REFUSE_CLAIM = "refuse-claim"
    CARVE_DYNAMIC_SLOT = "carve-dynamic-slot"
    RELEASE_DYNAMIC_SLOT = "release-dynamic-slot"
    START_BACKFILL = "start-backfill"
    KILL_BACKFILL = "kill-backfill"
    RUN_BENCHMARKS = "run-benchmarks"


@dataclass(frozen=True)
class Action:
    kind: ActionKind
    slot: str
    reason: str
    job_id: str | None = None
    claim_id: str | None = None
    #: SOFT_KILL: the signal; HARD_KILL: "SIGKILL".
    signal: str | None = None
    #: HARD_KILL after KILLING_TIMEOUT: kill the starter and all its children.
    escalate: bool = False
    #: CARVE_DYNAMIC_SLOT: the new slot's name and the partitionable slot it comes from.
    dynamic_slot: str | None = None
    parent: str | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": str(self.kind), "slot": self.slot, "reason": self.reason}
        for key in ("job_id", "claim_id", "signal", "dynamic_slot", "parent"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        if self.escalate:
            out["escalate"] = True
        return out


@dataclass(frozen=True)
class Transition:
    """One change of state and/or activity, with what caused it."""

    time: float
    slot: str
    from_state: State
    from_activity: Activity
    state: State
    activity: Activity
    #: The expression or event that caused it: "IS_OWNER", "START", "SUSPEND", "MATCH_TIMEOUT",
    #: "match", "vacate", "drain-graceful", ... with detail after a colon.
    reason: str
    #: The transition's number in the reference's diagram, where it has one.
    number: int | None = None
    job_id: str | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "time": self.time,
            "slot": self.slot,
            "state": str(self.state),
            "activity": str(self.activity),
            "from": f"{self.from_state}/{self.from_activity}",
            "reason": self.reason,
        }
        if self.number is not None:
            out["transition"] = self.number
        if self.job_id is not None:
            out["job"] = self.job_id
        return out


@dataclass(frozen=True)
class MachineContext:
    """What a slot needs to know about the whole machine for one step."""

    draining: DrainMode | None = None
    #: Graceful draining: the longest retirement any slot still has (coordinated retirement).
    drain_retirement_remaining: float | None = None
    #: Every slot of the machine is in the Drained state (Drained/Retiring -> Idle, 33).
    drain_complete: bool = False
    #: condor_drain -start: the START expression while draining, until `drain_finishing`.
    drain_start: str | None = None
    #: No job that ran when the drain began is left: jobs accepted while draining are
    #: evicted (MaxJobRetirementTime 0) and nothing more is accepted.
    drain_finishing: bool = False
    #: Cross-slot attributes (slot1_State, ...) from STARTD_SLOT_ATTRS.
    slot_attrs: Mapping[str, Fact] = field(default_factory=dict)


class EngineError(KondorError):
    """Input the engine rejects: time going backwards, an event for an unknown slot, ..."""
