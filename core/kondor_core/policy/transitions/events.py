"""The events a slot is told, each a handler: matches, claim requests and activations from
the schedd, the job's end from the agent, condor_vacate / condor_off / condor_drain from the
admin, the backfill client and COD claims ("Machine States", "State and Activity
Transitions")."""

from __future__ import annotations

import dataclasses

from kondor_core.policy.evaluation import number
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
    Match,
    PreemptingClaimWithdrawn,
    ReleaseClaim,
    ResumeForCod,
    Shutdown,
    ShutdownMode,
    SlotKind,
    State,
    SuspendForCod,
    Vacate,
)
from kondor_core.policy.transitions.moves import (
    change,
    leave_preempting,
    preempt,
    retire,
)
from kondor_core.policy.transitions.retirement import (
    claim_closing,
    draining_refuses,
    in_retirement,
    worklife_expired,
)
from kondor_core.policy.transitions.stepper import (
    Stepper,
    lookup_attr,
)

#: The reasons of the suspension for COD and of its end (the startd's own log lines).
COD_RUNNING = "a COD job is now running"
COD_ENDED = "no COD job active"


def handle(st: Stepper, event: Event) -> None:
    """One event, by its kind, to its handler (the short ones inline: a lease renewed, a
    preempting claim withdrawn, benchmarks done (4), the backfill client started (26))."""
    s = st.s
    if isinstance(event, Match):
        on_match(st, event)
    elif isinstance(event, ClaimRequest):
        on_claim_request(st, event)
    elif isinstance(event, ActivateClaim):
        on_activate(st, event)
    elif isinstance(event, JobExited | JobGone):
        on_job_end(st, event)
    elif isinstance(event, LeaseRenewed):
        if s.claim is not None:
            st.replace_claim(lease_renewed_at=st.now)
    elif isinstance(event, ReleaseClaim):
        on_release(st)
    elif isinstance(event, PreemptingClaimWithdrawn):
        if s.pending_claim is not None and s.state is State.CLAIMED:
            st.act(ActionKind.RELEASE_CLAIM, "preempting claim withdrawn", s.pending_claim)
            st.replace(pending_claim=None, destination=None)
    elif isinstance(event, Vacate):
        on_vacate(st, event)
    elif isinstance(event, Shutdown):
        on_shutdown(st, event)
    elif isinstance(event, Drain):
        on_drain(st, event)
    elif isinstance(event, CancelDrain):
        pass  # the machine clears draining; the periodic evaluation does the rest
    elif isinstance(event, BenchmarksDone):
        if s.activity is Activity.BENCHMARKING:
            st.replace(last_benchmark=st.now)
            change(st, State.UNCLAIMED, Activity.IDLE, "benchmarks completed", 4)
        else:
            st.replace(last_benchmark=st.now)
    elif isinstance(event, BackfillStarted):
        if s.state is State.BACKFILL and s.activity is Activity.IDLE:
            st.replace(backfill_running=True)
            change(st, State.BACKFILL, Activity.BUSY, "backfill client started", 26)
    elif isinstance(event, BackfillExited):
        on_backfill_exit(st)
    elif isinstance(event, SuspendForCod):
        on_suspend_for_cod(st)
    elif isinstance(event, ResumeForCod):
        on_resume_for_cod(st)
    else:  # pragma: no cover - the Event union is closed
        raise EngineError(f"{s.name}: unknown event {event!r}")


def on_suspend_for_cod(st: Stepper) -> None:
    """Resource::suspendForCOD: a running batch job is suspended ("Suspending because a
    COD job is now running"); a preempting, suspended, idle or absent one is left as it
    is, the slot only marked (it takes no match meanwhile)."""
    s = st.s
    if s.suspended_for_cod:
        return
    st.replace(suspended_for_cod=True)
    if s.state is State.CLAIMED and s.activity in (Activity.BUSY, Activity.RETIRING):
        number = 20 if s.activity is Activity.RETIRING else 14
        change(st, State.CLAIMED, Activity.SUSPENDED, COD_RUNNING, number)


def on_resume_for_cod(st: Stepper) -> None:
    """Resource::resumeForCOD: a batch job suspended meanwhile resumes ("Resuming because
    no COD job active"), into Retiring if its claim is being retired."""
    s = st.s
    if not s.suspended_for_cod:
        return
    st.replace(suspended_for_cod=False)
    if s.state is State.CLAIMED and s.activity is Activity.SUSPENDED:
        if in_retirement(st):
            change(st, State.CLAIMED, Activity.RETIRING, COD_ENDED, 16)
        else:
            change(st, State.CLAIMED, Activity.BUSY, COD_ENDED, 15)


def on_match(st: Stepper, event: Match) -> None:
    """The negotiator's match: Unclaimed to Matched (6) or Claimed (5), a preempting claim on a
    Claimed slot, Backfill evicted for it (28, then 31/32); refused where the slot cannot take
    it."""
    s = st.s
    try:
        claim = st.new_claim(
            event.claim_id,
            event.job_id,
            event.job_ad,
            for_user_priority=event.for_user_priority,
        )
    except EngineError as err:
        raise EngineError(f"{s.name}: match {event.claim_id}: {err}") from None
    refuse = None
    if s.kind is SlotKind.PARTITIONABLE:
        refuse = "a partitionable slot is claimed through a dynamic slot (use step_machine)"
    elif s.state in (State.PREEMPTING, State.DRAINED, State.MATCHED) or s.deleted:
        refuse = f"the slot is {s.state}"
    elif s.shutting_down is not None or draining_refuses(st):
        refuse = "the startd is shutting down or draining"
    elif s.state is State.CLAIMED:
        refuse = preempting_claim_refusal(st, claim)
    if refuse is None:
        ok, why = st.start_accepts(claim)
        if not ok:
            refuse = why
    if refuse is not None:
        st.act(ActionKind.REFUSE_CLAIM, f"match refused: {refuse}", claim)
        return
    if st.machine.draining is not None:  # accepted by condor_drain -start
        claim = dataclasses.replace(claim, accepted_while_draining=True)
    who = f"match with {claim.job_id}"
    if s.state is State.CLAIMED:
        kind = "user priority" if claim.for_user_priority else "RANK"
        st.replace(
            pending_claim=claim,
            destination=State.CLAIMED,
            retire_reason=f"{kind} preemption by {claim.job_id} (RANK {claim.rank:g} > "
            f"CurrentRank {s.claim.rank if s.claim else 0:g})",
        )
        return
    if s.state is State.BACKFILL:
        target = State.CLAIMED if event.claimed else State.MATCHED
        st.replace(pending_claim=claim, destination=target)
        if s.activity is Activity.IDLE:
            finish_backfill(st, who)
        elif s.activity is Activity.BUSY:
            change(st, State.BACKFILL, Activity.KILLING, who, 28)
        return
    if event.claimed:
        st.replace(claim=claim, pending_claim=None, destination=None)
        change(st, State.CLAIMED, Activity.IDLE, who, 5 if s.state is State.UNCLAIMED else None)
    else:
        st.replace(pending_claim=claim)
        change(st, State.MATCHED, Activity.IDLE, who, 6 if s.state is State.UNCLAIMED else None)


def preempting_claim_refusal(st: Stepper, claim: Claim) -> str | None:
    """Why a Claimed slot refuses a preempting claim, None when it takes it (RANK or user
    priority above the current claim's)."""
    s = st.s
    if s.pending_claim is not None:
        return "a preempting claim is already waiting"
    if s.activity is Activity.RETIRING and s.claim and not s.claim.may_unretire:
        return "the claim is already being evicted"
    current = s.claim.rank if s.claim is not None else 0.0
    if claim.for_user_priority or claim.rank > current:
        return None
    return f"RANK {claim.rank:g} does not exceed CurrentRank {current:g}"


def on_claim_request(st: Stepper, event: ClaimRequest) -> None:
    """The schedd claims a matched slot: Matched to Claimed/Idle (9); refused otherwise."""
    s = st.s
    pending = s.pending_claim
    if s.state is State.MATCHED and pending is not None and pending.claim_id == event.claim_id:
        claim = dataclasses.replace(pending, claimed_at=st.now, lease_renewed_at=st.now)
        st.replace(claim=claim, pending_claim=None)
        change(st, State.CLAIMED, Activity.IDLE, f"claimed by {claim.job_id}", 9)
        return
    st.actions.append(
        Action(
            kind=ActionKind.REFUSE_CLAIM,
            slot=s.name,
            reason=f"claim request refused: the slot is {s.state}/{s.activity}, "
            f"not matched with claim {event.claim_id}",
            claim_id=event.claim_id,
        )
    )


def on_activate(st: Stepper, event: ActivateClaim) -> None:
    """The schedd activates the claim: Claimed/Idle to Busy (11) and the job starts, unless the
    claim is closing or START refuses the job."""
    s = st.s
    claim = s.claim
    if s.state is not State.CLAIMED or s.activity is not Activity.IDLE or claim is None:
        st.actions.append(
            Action(
                kind=ActionKind.REFUSE_CLAIM,
                slot=s.name,
                reason=f"activation refused: the slot is {s.state}/{s.activity}",
                job_id=event.job_id,
            )
        )
        return
    if event.job_ad is not None:
        fresh = st.new_claim(claim.claim_id, event.job_id or "", event.job_ad)
        claim = dataclasses.replace(
            claim,
            job_ad=fresh.job_ad,
            owner=fresh.owner,
            job_attrs=fresh.job_attrs,
            job_id=fresh.job_id,
            rank=fresh.rank,
        )
        st.replace(claim=claim)
    if claim_closing(st):
        why = "CLAIM_WORKLIFE expired" if worklife_expired(st) else "the claim is closing"
        st.act(ActionKind.REFUSE_CLAIM, f"activation refused: {why}")
        return
    ok, why = st.start_accepts(claim)
    if not ok:
        st.act(ActionKind.REFUSE_CLAIM, f"activation refused: {why}")
        return
    max_vacate = number(st.evaluate_knob("MachineMaxVacateTime", claim))
    kill_sig = lookup_attr(claim.job_ad, "KillSig")
    st.replace_claim(
        activations=claim.activations + 1,
        job_started_at=st.now,
        suspended_total=0.0,
        suspended_since=None,
        preempt_was_true=False,
        pledged_max_vacate_time=max_vacate if max_vacate is not None else 600.0,
        kill_sig=str(kill_sig) if isinstance(kill_sig, str | int) else "SIGTERM",
    )
    assert st.s.claim is not None
    st.act(ActionKind.START_JOB, f"claim activated: {st.s.claim.job_id}")
    change(st, State.CLAIMED, Activity.BUSY, "claim activated", 11)


def on_job_end(st: Stepper, event: JobExited | JobGone) -> None:
    """The job exited or its processes are gone: Busy/Suspended to Idle (12), Retiring to
    Preempting (18), Preempting left (22-25)."""
    s = st.s
    what = "job exited" if isinstance(event, JobExited) else "job processes gone"
    if isinstance(event, JobExited):
        what = f"job exited with code {event.exit_code}"
    if s.claim is not None and s.claim.active:
        st.replace_claim(job_started_at=None, suspended_since=None)
    if s.state is State.CLAIMED:
        if s.activity in (Activity.BUSY, Activity.SUSPENDED):
            change(st, State.CLAIMED, Activity.IDLE, what, 12)
        elif s.activity is Activity.RETIRING:
            preempt(st, what, number=18)
    elif s.state is State.PREEMPTING:
        leave_preempting(st, what)


def on_release(st: Stepper) -> None:
    """The schedd releases the claim: Matched to Owner (8), Claimed to Preempting (10)."""
    s = st.s
    if s.state is State.MATCHED:
        change(st, State.OWNER, Activity.IDLE, "match released by the schedd", 8)
    elif s.state is State.CLAIMED and s.claim is not None:
        st.replace_claim(may_unretire=False)
        preempt(st, "claim released by the schedd", number=10)


def on_vacate(st: Stepper, event: Vacate) -> None:
    """condor_vacate [-fast]: Matched to Owner (8), the claim evicted (10), Vacating to Killing
    (21), backfill evicted."""
    s = st.s
    reason = "vacate -fast" if event.fast else "vacate"
    if s.state is State.MATCHED:
        change(st, State.OWNER, Activity.IDLE, reason, 8)
    elif s.state is State.CLAIMED:
        if s.pending_claim is not None:
            st.act(ActionKind.RELEASE_CLAIM, reason, s.pending_claim)
            st.replace(pending_claim=None)
        if s.claim is not None:
            st.replace_claim(may_unretire=False)
        preempt(st, reason, number=10 if s.activity is Activity.IDLE else None, fast=event.fast)
    elif s.state is State.PREEMPTING and event.fast and s.activity is Activity.VACATING:
        st.replace(evict_fast=True)
        change(st, State.PREEMPTING, Activity.KILLING, reason, 21)
    elif s.state is State.BACKFILL:
        evict_backfill(st, reason)


def on_shutdown(st: Stepper, event: Shutdown) -> None:
    """condor_off -graceful/-peaceful/-fast: Matched to Owner (8), the claim retired or killed,
    Vacating to Killing (21), backfill evicted, Unclaimed to Owner (2)."""
    s = st.s
    reason = f"shutdown-{event.mode}"
    st.replace(shutting_down=event.mode)
    if s.state is State.MATCHED:
        change(st, State.OWNER, Activity.IDLE, reason, 8)
    elif s.state is State.CLAIMED:
        if event.mode is ShutdownMode.FAST:
            if s.claim is not None:
                st.replace_claim(may_unretire=False)
            preempt(st, reason, number=None, fast=True)
        else:
            retire(st, reason, reversible=False, peaceful=event.mode is ShutdownMode.PEACEFUL)
    elif s.state is State.PREEMPTING and event.mode is ShutdownMode.FAST:
        if s.activity is Activity.VACATING:
            st.replace(evict_fast=True)
            change(st, State.PREEMPTING, Activity.KILLING, reason, 21)
    elif s.state is State.BACKFILL:
        evict_backfill(st, reason)
    elif s.state is State.UNCLAIMED:
        change(st, State.OWNER, Activity.IDLE, reason, 2)


def on_drain(st: Stepper, event: Drain) -> None:
    """condor_drain (machine-wide, through step_machine): Matched to Owner (8), the claim retired
    (graceful) or evicted (quick, fast), Vacating to Killing (21), backfill evicted."""
    if st.machine.draining is None:
        raise EngineError(f"{st.s.name}: draining is machine-wide; pass Drain to step_machine")
    s = st.s
    reason = f"drain-{event.mode}"
    if s.state is State.MATCHED:
        change(st, State.OWNER, Activity.IDLE, reason, 8)
    elif s.state is State.CLAIMED:
        if event.mode is DrainMode.GRACEFUL:
            retire(st, reason, reversible=True)
        else:
            if s.claim is not None:
                st.replace_claim(may_unretire=False)
            preempt(
                st,
                reason,
                fast=event.mode is DrainMode.FAST,
                number=10 if s.activity is Activity.IDLE else None,
            )
    elif s.state is State.PREEMPTING and event.mode is DrainMode.FAST:
        if s.activity is Activity.VACATING:
            st.replace(evict_fast=True)
            change(st, State.PREEMPTING, Activity.KILLING, reason, 21)
    elif s.state is State.BACKFILL:
        evict_backfill(st, reason)


def evict_backfill(st: Stepper, reason: str) -> None:
    """Evict the backfill client: Backfill/Idle leaves at once, Busy goes Killing (28)."""
    s = st.s
    st.replace(destination=State.OWNER, pending_claim=None)
    if s.activity is Activity.IDLE:
        finish_backfill(st, reason)
    elif s.activity is Activity.BUSY:
        change(st, State.BACKFILL, Activity.KILLING, reason, 28)


def on_backfill_exit(st: Stepper) -> None:
    """The backfill client exited: Killing to Idle (29) and on, Busy to Idle (27)."""
    s = st.s
    if s.state is not State.BACKFILL:
        return
    st.replace(backfill_running=False)
    if s.activity is Activity.KILLING:
        change(st, State.BACKFILL, Activity.IDLE, "backfill client exited", 29)
        finish_backfill(st, "backfill client killed")
    elif s.activity is Activity.BUSY:
        change(st, State.BACKFILL, Activity.IDLE, "backfill client exited on its own", 27)


def finish_backfill(st: Stepper, reason: str) -> None:
    """Backfill/Idle after the client is gone: go where the eviction was heading."""
    s = st.s
    destination = s.destination
    pending = s.pending_claim
    if destination is State.CLAIMED and pending is not None:
        st.replace(claim=pending, pending_claim=None, destination=None)
        change(st, State.CLAIMED, Activity.IDLE, f"{reason}; claimed by {pending.job_id}", 31)
    elif destination is State.MATCHED and pending is not None:
        st.replace(destination=None)
        change(st, State.MATCHED, Activity.IDLE, f"{reason}; matched with {pending.job_id}", 32)
    elif destination is State.OWNER:
        st.replace(destination=None)
        change(st, State.OWNER, Activity.IDLE, reason, 30)
