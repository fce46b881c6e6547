"""The periodic evaluation of a slot's policy, one function per state (the startd's
eval_policy for Owner, Unclaimed, Matched, Claimed, Preempting, Backfill and Drained), in the
order "State and Activity Transitions" gives for each."""

from __future__ import annotations

from kondor_core.policy.evaluation import describe, truth
from kondor_core.policy.model import (
    ActionKind,
    Activity,
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
    state = st.s.state
    if state is State.OWNER:
        owner(st)
    elif state is State.UNCLAIMED:
        unclaimed(st)
    elif state is State.MATCHED:
        matched(st)
    elif state is State.CLAIMED:
        claimed(st)
    elif state is State.PREEMPTING:
        preempting(st)
    elif state is State.BACKFILL:
        backfill(st)
    elif state is State.DRAINED:
        drained(st)
    after = (st.s.state, st.s.activity, len(st.transitions), len(st.actions))
    return before != after


def owner(st: Stepper) -> None:
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
    text = st.policy.knob("RUNBENCHMARKS")
    if text is None or st.s.suspended_for_cod:
        return False  # "if there's a COD job, we definitely don't want to run benchmarks"
    if st.s.last_benchmark == 0 and text.strip().lower() not in ("false", "0"):
        # "If RUNBENCHMARKS is defined and set to something other than FALSE, the startd
        # will automatically run one set of benchmarks when it first starts up."
        return True
    return st.knob_is_true("RUNBENCHMARKS", None)


def matched(st: Stepper) -> None:
    s = st.s
    start = st.evaluate_knob("START", None)
    if truth(start) is False:
        drop_claims(st, "START is FALSE")
        change(st, State.OWNER, Activity.IDLE, "START is FALSE", 8)
    elif st.now - s.entered_state >= st.policy.match_timeout:
        drop_claims(st, "MATCH_TIMEOUT")
        change(st, State.OWNER, Activity.IDLE, "MATCH_TIMEOUT", 8)


def claimed(st: Stepper) -> None:
    s = st.s
    claim = s.claim
    if claim is None:  # defensive: a claimed slot always has a claim
        change(st, State.OWNER, Activity.IDLE, "claim lost")
        return
    if st.now - claim.lease_renewed_at > claim.lease_duration:
        st.replace_claim(may_unretire=False)
        st.replace(pending_claim=None)
        preempt(st, "claim lease expired", fast=True)
        return
    activity = s.activity
    if s.suspended_for_cod:
        # ResState::eval_policy: "so long as there's an active COD job, we want to leave
        # the opportunistic claim" suspended: no SUSPEND, CONTINUE, PREEMPT or retirement.
        # A job activated on the claim meanwhile is suspended at once, as the agent
        # freezes it.
        if activity in (Activity.BUSY, Activity.RETIRING):
            number = 20 if activity is Activity.RETIRING else 14
            change(st, State.CLAIMED, Activity.SUSPENDED, COD_RUNNING, number)
        if st.s.activity is Activity.SUSPENDED:
            return
    if in_retirement(st) and retirement_expired(st):
        if st.knob_is_true("PREEMPT", claim):
            st.replace_claim(preempt_was_true=True)
        reason = st.s.retire_reason or "retirement"
        if activity is Activity.BUSY:
            # Show the retirement the manual describes (13), then its end (18).
            change(st, State.CLAIMED, Activity.RETIRING, reason, 13)
            return
        number = {Activity.SUSPENDED: 17, Activity.RETIRING: 18}.get(activity, 10)
        preempt(st, f"{reason}: retirement time expired", number=number)
        return
    want_suspend = st.knob_is_true("WANT_SUSPEND", claim)
    preempted = claim.preempt_was_true
    if (
        (activity is Activity.BUSY and not want_suspend)
        or (activity is Activity.RETIRING and not preempted and not want_suspend)
        or (activity is Activity.SUSPENDED and not preempted)
    ) and st.knob_is_true("PREEMPT", claim):
        st.replace_claim(preempt_was_true=True, may_unretire=False)
        st.replace(retire_reason="PREEMPT")
        if activity is Activity.RETIRING:
            return  # already retiring; now irreversibly
        number = 16 if activity is Activity.SUSPENDED else 13
        change(st, State.CLAIMED, Activity.RETIRING, "PREEMPT", number)
        return
    if activity is Activity.RETIRING:
        if may_unretire(st):
            st.replace(retire_reason=None)
            change(st, State.CLAIMED, Activity.BUSY, "preempting claim went away", 19)
            return
        if retirement_expired(st):
            preempt(st, f"{s.retire_reason or 'retirement'}: retirement ended", number=18)
            return
    if (
        activity in (Activity.BUSY, Activity.RETIRING)
        and want_suspend
        and st.knob_is_true("SUSPEND", claim)
    ):
        number = 20 if activity is Activity.RETIRING else 14
        change(st, State.CLAIMED, Activity.SUSPENDED, "SUSPEND", number)
        return
    if activity is Activity.SUSPENDED and st.knob_is_true("CONTINUE", claim):
        if not in_retirement(st):
            change(st, State.CLAIMED, Activity.BUSY, "CONTINUE", 15)
        else:
            change(st, State.CLAIMED, Activity.RETIRING, "CONTINUE (in retirement)", 16)
        return
    if activity is Activity.BUSY and s.pending_claim is not None:
        change(st, State.CLAIMED, Activity.RETIRING, s.retire_reason or "preempting claim", 13)
        return
    if activity is Activity.IDLE:
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
    s = st.s
    if st.machine.draining is None:
        number = 35 if s.activity is Activity.RETIRING else 34
        change(st, State.OWNER, Activity.IDLE, "draining ended", number)
        return
    if s.activity is Activity.RETIRING and st.machine.drain_complete:
        change(st, State.DRAINED, Activity.IDLE, "every slot is drained", 33)
