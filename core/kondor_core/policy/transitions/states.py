"""The periodic evaluation of a slot's policy, one function per state (the startd's
eval_policy for Owner, Unclaimed, Matched, Claimed, Preempting, Backfill and Drained), in the
order "State and Activity Transitions" gives for each."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from kondor_core.policy.evaluation import describe, truth
from kondor_core.policy.model import (
    ActionKind,
    Activity,
    Claim,
    EngineError,
    SlotKind,
    State,
)
from kondor_core.policy.transitions.events import COD_RUNNING, evict_backfill
from kondor_core.policy.transitions.moves import (
    change,
    delete,
    drop_claims,
    preempt,
)
from kondor_core.policy.transitions.retirement import (
    drain_applies,
    draining_refuses,
    in_retirement,
    may_unretire,
    retirement_expired,
    worklife_expired,
)
from kondor_core.policy.transitions.stepper import (
    Stepper,
)

MAX_CHANGES = 32


def evaluate(st: Stepper) -> None:
    """One polling cycle. Like the startd, a change into Retiring or Idle is evaluated
    again at once; any other change waits for the next cycle (so a policy whose SUSPEND
    and CONTINUE are both TRUE flips once per cycle, as HTCondor's does)."""
    update_cpu_busy(st)
    for _ in range(MAX_CHANGES):
        before = (st.s.state, st.s.activity)
        if st.s.deleted or not evaluate_once(st):
            return
        after = (st.s.state, st.s.activity)
        if after == before:
            continue  # only flags or actions changed (e.g. PREEMPT while retiring)
        if st.s.state is State.BACKFILL or st.s.activity not in (
            Activity.RETIRING,
            Activity.IDLE,
        ):
            return
    raise EngineError(
        f"{st.s.name}: the policy did not settle after {MAX_CHANGES} changes at "
        f"time {st.now} (last: {st.transitions[-1].reason if st.transitions else '-'})"
    )


def update_cpu_busy(st: Stepper) -> None:
    """CpuBusyTime starts when CpuBusy turns TRUE and stops when it turns FALSE."""
    if not st.policy.has("CpuBusy"):
        return
    busy = truth(st.evaluate_knob("CpuBusy", None)) is True
    since = st.s.cpu_busy_since
    if busy and since is None:
        st.replace(cpu_busy_since=st.now)
    elif not busy and since is not None:
        st.replace(cpu_busy_since=None)


def evaluate_once(st: Stepper) -> bool:
    """One pass of the startd's eval_policy for the current state; True if something changed."""
    before = (st.s.state, st.s.activity, len(st.transitions), len(st.actions))
    EVALUATIONS[st.s.state](st)
    after = (st.s.state, st.s.activity, len(st.transitions), len(st.actions))
    return before != after


def owner(st: Stepper) -> None:
    """Owner: a dynamic slot is released; a draining startd goes Drained (36); IS_OWNER FALSE makes
    the slot Unclaimed (1)."""
    s = st.s
    if s.kind is SlotKind.DYNAMIC:
        delete(st, "dynamic slot in Owner")
    elif draining_refuses(st):
        change(st, State.DRAINED, Activity.RETIRING, f"drain-{st.machine.draining}", 36)
    elif s.shutting_down is None:
        value = st.evaluate_knob("IS_OWNER", None)
        if truth(value) is not True:
            change(st, State.UNCLAIMED, Activity.IDLE, f"IS_OWNER is {describe(value)}", 1)


def unclaimed(st: Stepper) -> None:
    """Unclaimed: draining (37), shutdown or IS_OWNER to Owner (2), RUNBENCHMARKS (3),
    START_BACKFILL (7)."""
    s = st.s
    if s.kind is SlotKind.DYNAMIC:
        delete(st, "dynamic slot unclaimed")
        return
    if draining_refuses(st):
        change(st, State.DRAINED, Activity.RETIRING, f"drain-{st.machine.draining}", 37)
        return
    if s.shutting_down is not None:
        change(st, State.OWNER, Activity.IDLE, f"shutdown-{s.shutting_down}", 2)
        return
    is_owner = st.evaluate_knob("IS_OWNER", None)
    if truth(is_owner) is True:
        change(st, State.OWNER, Activity.IDLE, "IS_OWNER is TRUE", 2)
        return
    if s.activity is not Activity.IDLE:
        return
    if not s.act_was_benchmark and wants_benchmarks(st):
        st.act(ActionKind.RUN_BENCHMARKS, "RUNBENCHMARKS is TRUE", claim=None)
        change(st, State.UNCLAIMED, Activity.BENCHMARKING, "RUNBENCHMARKS is TRUE", 3)
        return
    if st.policy.enable_backfill and st.knob_is_true("START_BACKFILL", None):
        st.replace(destination=None, pending_claim=None)
        change(st, State.BACKFILL, Activity.IDLE, "START_BACKFILL is TRUE", 7)


def wants_benchmarks(st: Stepper) -> bool:
    """Whether RUNBENCHMARKS asks for benchmarks now (once at start-up when it is set at all)."""
    text = st.policy.knob("RUNBENCHMARKS")
    if text is None or st.s.suspended_for_cod:
        return False  # "if there's a COD job, we definitely don't want to run benchmarks"
    if st.s.last_benchmark == 0 and text.strip().lower() not in ("false", "0"):
        # "If RUNBENCHMARKS is defined and set to something other than FALSE, the startd
        # will automatically run one set of benchmarks when it first starts up."
        return True
    return st.knob_is_true("RUNBENCHMARKS", None)


def matched(st: Stepper) -> None:
    """Matched: back to Owner (8) when START turns FALSE or MATCH_TIMEOUT passes."""
    s = st.s
    start = st.evaluate_knob("START", None)
    if truth(start) is False:
        drop_claims(st, "START is FALSE")
        change(st, State.OWNER, Activity.IDLE, "START is FALSE", 8)
    elif st.now - s.entered_state >= st.policy.match_timeout:
        drop_claims(st, "MATCH_TIMEOUT")
        change(st, State.OWNER, Activity.IDLE, "MATCH_TIMEOUT", 8)


def claimed(st: Stepper) -> None:
    """Claimed, in the startd's order: the claim's lease, a COD job, the end of retirement,
    PREEMPT, un-retirement, SUSPEND and CONTINUE, a preempting claim, and on an idle claim
    START, CLAIM_WORKLIFE, draining and shutdown."""
    claim = st.s.claim
    if claim is None:  # defensive: a claimed slot always has a claim
        change(st, State.OWNER, Activity.IDLE, "claim lost")
        return
    if _lease_expired(st, claim) or _held_for_cod(st):
        return
    activity = st.s.activity
    if _retirement_over(st, claim, activity):
        return
    want_suspend = st.knob_is_true("WANT_SUSPEND", claim)
    if _preempt_true(st, claim, activity, want_suspend) or _retiring(st, activity):
        return
    if _suspend_or_continue(st, claim, activity, want_suspend):
        return
    s = st.s
    if activity is Activity.BUSY and s.pending_claim is not None:
        change(st, State.CLAIMED, Activity.RETIRING, s.retire_reason or "preempting claim", 13)
    elif activity is Activity.IDLE:
        _idle_claim(st, claim)


def _lease_expired(st: Stepper, claim: Claim) -> bool:
    """The schedd stopped renewing the claim's lease: evicted at once (fast)."""
    if st.now - claim.lease_renewed_at <= claim.lease_duration:
        return False
    st.replace_claim(may_unretire=False)
    st.replace(pending_claim=None)
    preempt(st, "claim lease expired", fast=True)
    return True


def _held_for_cod(st: Stepper) -> bool:
    """While a COD job is active the batch claim stays suspended (14, 20); True when it is."""
    if not st.s.suspended_for_cod:
        return False
    # ResState::eval_policy: "so long as there's an active COD job, we want to leave
    # the opportunistic claim" suspended: no SUSPEND, CONTINUE, PREEMPT or retirement.
    # A job activated on the claim meanwhile is suspended at once, as the agent
    # freezes it.
    activity = st.s.activity
    if activity in (Activity.BUSY, Activity.RETIRING):
        number = 20 if activity is Activity.RETIRING else 14
        change(st, State.CLAIMED, Activity.SUSPENDED, COD_RUNNING, number)
    return st.s.activity is Activity.SUSPENDED


def _retirement_over(st: Stepper, claim: Claim, activity: Activity) -> bool:
    """A retiring claim whose retirement time is up: Retiring (13), then Preempting."""
    if not (in_retirement(st) and retirement_expired(st)):
        return False
    if st.knob_is_true("PREEMPT", claim):
        st.replace_claim(preempt_was_true=True)
    reason = st.s.retire_reason or "retirement"
    if activity is Activity.BUSY:
        # Show the retirement the manual describes (13), then its end (18).
        change(st, State.CLAIMED, Activity.RETIRING, reason, 13)
        return True
    number = {Activity.SUSPENDED: 17, Activity.RETIRING: 18}.get(activity, 10)
    preempt(st, f"{reason}: retirement time expired", number=number)
    return True


def _preempt_true(st: Stepper, claim: Claim, activity: Activity, want_suspend: bool) -> bool:
    """PREEMPT (where WANT_SUSPEND does not suspend instead): irreversible retirement (13, 16)."""
    preempted = claim.preempt_was_true
    if not (
        (activity is Activity.BUSY and not want_suspend)
        or (activity is Activity.RETIRING and not preempted and not want_suspend)
        or (activity is Activity.SUSPENDED and not preempted)
    ) or not st.knob_is_true("PREEMPT", claim):
        return False
    st.replace_claim(preempt_was_true=True, may_unretire=False)
    st.replace(retire_reason="PREEMPT")
    if activity is Activity.RETIRING:
        return True  # already retiring; now irreversibly
    number = 16 if activity is Activity.SUSPENDED else 13
    change(st, State.CLAIMED, Activity.RETIRING, "PREEMPT", number)
    return True


def _retiring(st: Stepper, activity: Activity) -> bool:
    """Retiring: back to Busy when the reason went away (19), Preempting once it ends (18)."""
    if activity is not Activity.RETIRING:
        return False
    if may_unretire(st):
        st.replace(retire_reason=None)
        change(st, State.CLAIMED, Activity.BUSY, "preempting claim went away", 19)
        return True
    if retirement_expired(st):
        preempt(st, f"{st.s.retire_reason or 'retirement'}: retirement ended", number=18)
        return True
    return False


def _suspend_or_continue(st: Stepper, claim: Claim, activity: Activity, want_suspend: bool) -> bool:
    """SUSPEND on a running job (14, 20) and CONTINUE on a suspended one (15, 16)."""
    if (
        activity in (Activity.BUSY, Activity.RETIRING)
        and want_suspend
        and st.knob_is_true("SUSPEND", claim)
    ):
        number = 20 if activity is Activity.RETIRING else 14
        change(st, State.CLAIMED, Activity.SUSPENDED, "SUSPEND", number)
        return True
    if activity is Activity.SUSPENDED and st.knob_is_true("CONTINUE", claim):
        if not in_retirement(st):
            change(st, State.CLAIMED, Activity.BUSY, "CONTINUE", 15)
        else:
            change(st, State.CLAIMED, Activity.RETIRING, "CONTINUE (in retirement)", 16)
        return True
    return False


def _idle_claim(st: Stepper, claim: Claim) -> None:
    """An idle claim ends (10) for a preempting claim, START FALSE, CLAIM_WORKLIFE, a drain or
    a shutdown."""
    s = st.s
    if s.pending_claim is not None:
        preempt(st, s.retire_reason or "preempting claim", number=10)
        return
    start = st.evaluate_knob("START", claim)
    if truth(start) is False:
        preempt(st, "START is FALSE", number=10)
        return
    if worklife_expired(st):
        preempt(st, "CLAIM_WORKLIFE expired", number=10)
        return
    if drain_applies(st):
        preempt(st, f"drain-{st.machine.draining}", number=10)
        return
    if s.shutting_down is not None:
        preempt(st, f"shutdown-{s.shutting_down}", number=10)


def preempting(st: Stepper) -> None:
    """Preempting: Vacating becomes Killing (21) on KILL or at the vacate deadline; Killing
    escalates to SIGKILL once KILLING_TIMEOUT passes."""
    s = st.s
    claim = s.claim
    if s.activity is Activity.VACATING:
        if st.knob_is_true("KILL", claim):
            change(st, State.PREEMPTING, Activity.KILLING, "KILL", 21)
            return
        if s.vacate_deadline is not None and st.now >= s.vacate_deadline:
            change(
                st,
                State.PREEMPTING,
                Activity.KILLING,
                "MachineMaxVacateTime: the job took too long to vacate",
                21,
            )
            return
    elif (
        s.activity is Activity.KILLING
        and not s.kill_escalated
        and st.now - s.entered_activity >= st.policy.killing_timeout
    ):
        st.replace(kill_escalated=True)
        st.act(
            ActionKind.HARD_KILL,
            "KILLING_TIMEOUT: killing the job's processes",
            signal="SIGKILL",
            escalate=True,
        )


def backfill(st: Stepper) -> None:
    """Backfill: draining, shutdown or EVICT_BACKFILL evict the backfill client."""
    s = st.s
    if s.activity is Activity.KILLING:
        return
    if st.machine.draining is not None:
        evict_backfill(st, f"drain-{st.machine.draining}")
        return
    if s.shutting_down is not None:
        evict_backfill(st, f"shutdown-{s.shutting_down}")
        return
    value = st.evaluate_knob("EVICT_BACKFILL", None)
    if truth(value) is True:
        evict_backfill(st, "EVICT_BACKFILL is TRUE")


def drained(st: Stepper) -> None:
    """Drained: to Owner once draining ends (34, 35); Retiring to Idle once every slot is
    drained (33)."""
    s = st.s
    if st.machine.draining is None:
        number = 35 if s.activity is Activity.RETIRING else 34
        change(st, State.OWNER, Activity.IDLE, "draining ended", number)
        return
    if s.activity is Activity.RETIRING and st.machine.drain_complete:
        change(st, State.DRAINED, Activity.IDLE, "every slot is drained", 33)


#: The periodic evaluation of each state, the startd's eval_policy per state.
EVALUATIONS: Mapping[State, Callable[[Stepper], None]] = {
    State.OWNER: owner,
    State.UNCLAIMED: unclaimed,
    State.MATCHED: matched,
    State.CLAIMED: claimed,
    State.PREEMPTING: preempting,
    State.BACKFILL: backfill,
    State.DRAINED: drained,
}
