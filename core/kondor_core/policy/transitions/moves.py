"""Moving a slot to a state and activity, and what entering it does ("State and Activity
Transitions"): `change` records the transition (with the reference's number) and `enter`
carries out its entry actions; preempt, retire and leave_preempting are the startd's own
compound moves."""

from __future__ import annotations

from typing import Any

from kondor_core.policy.evaluation import describe, truth
from kondor_core.policy.model import (
    ActionKind,
    Activity,
    SlotKind,
    State,
    Transition,
)
from kondor_core.policy.transitions.retirement import (
    draining_refuses,
    in_retirement,
    max_vacate_time,
)
from kondor_core.policy.transitions.stepper import (
    Stepper,
)


def change(
    st: Stepper,
    state: State,
    activity: Activity,
    reason: str,
    number: int | None = None,
) -> None:
    """Move the slot to `state`/`activity`, recording the transition (with the reference's
    `number`), then carry out what entering it does (`enter`). A job leaving Suspended is
    resumed."""
    s = st.s
    if s.state is state and s.activity is activity:
        return
    old_state, old_activity = s.state, s.activity
    # Leaving Suspended resumes the job, whatever comes next (it must see the soft kill).
    if old_state is State.CLAIMED and old_activity is Activity.SUSPENDED and s.claim:
        claim = s.claim
        if claim.suspended_since is not None:
            st.replace_claim(
                suspended_total=claim.suspended_total + (st.now - claim.suspended_since),
                suspended_since=None,
            )
        if state in (State.CLAIMED, State.PREEMPTING) and st.s.claim and st.s.claim.active:
            st.act(ActionKind.CONTINUE_JOB, reason)
    changes: dict[str, Any] = {"state": state, "activity": activity}
    if state is not old_state:
        changes["entered_state"] = st.now
        changes["entered_activity"] = st.now
    else:
        changes["entered_activity"] = st.now
    changes["act_was_benchmark"] = old_activity is Activity.BENCHMARKING
    st.replace(**changes)
    job = st.s.claim.job_id if st.s.claim is not None else None
    st.transitions.append(
        Transition(
            time=st.now,
            slot=s.name,
            from_state=old_state,
            from_activity=old_activity,
            state=state,
            activity=activity,
            reason=reason,
            number=number,
            job_id=job,
        )
    )
    enter(st, state, activity, reason, state is not old_state)


def enter(st: Stepper, state: State, activity: Activity, reason: str, state_changed: bool) -> None:
    """What entering a state does: Owner drops the claims (and may go Drained (36) or Unclaimed
    (1)), Claimed suspends or retires the job, Preempting soft- or hard-kills it, Backfill starts
    or kills the client; a dynamic slot in Owner or Unclaimed is released."""
    s = st.s
    if state is State.OWNER:
        drop_claims(st, reason)
        if s.kind is SlotKind.DYNAMIC:
            delete(st, reason)
            return
        if draining_refuses(st):
            change(st, State.DRAINED, Activity.RETIRING, f"drain-{st.machine.draining}", 36)
            return
        if s.shutting_down is None:
            value = st.evaluate_knob("IS_OWNER", None)
            if truth(value) is not True:
                change(st, State.UNCLAIMED, Activity.IDLE, f"IS_OWNER is {describe(value)}", 1)
        return
    if state is State.UNCLAIMED:
        if s.kind is SlotKind.DYNAMIC:
            delete(st, reason)
        return
    if state is State.CLAIMED:
        if activity is Activity.SUSPENDED and s.claim is not None:
            st.replace_claim(suspended_since=st.now)
            st.act(ActionKind.SUSPEND_JOB, reason)
        elif activity is Activity.BUSY and in_retirement(st):
            change(st, State.CLAIMED, Activity.RETIRING, st.s.retire_reason or reason, None)
        elif activity is Activity.RETIRING and (s.claim is None or not s.claim.active):
            preempt(st, reason, number=18)
        return
    if state is State.PREEMPTING:
        claim = s.claim
        active = claim is not None and claim.active
        if activity is Activity.VACATING:
            if active:
                deadline = st.now + max_vacate_time(st)
                st.replace(vacate_deadline=deadline)
                assert claim is not None
                st.act(ActionKind.SOFT_KILL, reason, signal=claim.kill_sig)
            else:
                leave_preempting(st, "no job was running")
        elif activity is Activity.KILLING:
            if active:
                st.replace(vacate_deadline=None, kill_escalated=False)
                st.act(ActionKind.HARD_KILL, reason, signal="SIGKILL")
            else:
                leave_preempting(st, "no job was running")
        return
    if state is State.BACKFILL:
        # Backfill/Idle on the way out (to Owner, Matched or Claimed) starts nothing.
        if activity is Activity.IDLE and not s.backfill_running and s.destination is None:
            st.act(ActionKind.START_BACKFILL, reason, claim=None)
        elif activity is Activity.KILLING:
            st.act(ActionKind.KILL_BACKFILL, reason, claim=None)
        return


def delete(st: Stepper, reason: str) -> None:
    """Release a dynamic slot (its resources go back to the partitionable slot)."""
    st.act(
        ActionKind.RELEASE_DYNAMIC_SLOT,
        reason,
        claim=None,
        dynamic_slot=st.s.name,
        parent=st.s.parent,
    )
    st.replace(deleted=True)


def drop_claims(st: Stepper, reason: str) -> None:
    """Release the current and any preempting claim, and forget where the slot was heading."""
    s = st.s
    if s.claim is not None:
        st.act(ActionKind.RELEASE_CLAIM, reason)
    if s.pending_claim is not None:
        st.act(ActionKind.RELEASE_CLAIM, reason, claim=s.pending_claim)
    if s.claim is not None or s.pending_claim is not None or s.destination is not None:
        st.replace(
            claim=None,
            pending_claim=None,
            destination=None,
            retire_reason=None,
            evict_fast=False,
            vacate_deadline=None,
        )


def preempt(st: Stepper, reason: str, *, number: int | None = None, fast: bool = False) -> None:
    """Enter Preempting: Killing when fast or when PREEMPT was TRUE and WANT_VACATE is not;
    Vacating otherwise ("Preempting State", WANT_VACATE in the summary)."""
    s = st.s
    claim = s.claim
    fast = fast or s.evict_fast
    if fast:
        activity = Activity.KILLING
    elif claim is not None and claim.preempt_was_true and claim.active:
        want_vacate = st.evaluate_knob("WANT_VACATE", claim)
        activity = Activity.KILLING if truth(want_vacate) is False else Activity.VACATING
        if activity is Activity.KILLING:
            reason = f"{reason}; WANT_VACATE is {describe(want_vacate)}"
    else:
        activity = Activity.VACATING
    destination = State.CLAIMED if s.pending_claim is not None else State.OWNER
    st.replace(destination=destination, evict_fast=fast, retire_reason=reason)
    change(st, State.PREEMPTING, activity, reason, number)


def leave_preempting(st: Stepper, why: str) -> None:
    """The job is gone: to Claimed/Idle for a waiting preempting claim (23, 24), else to
    Owner (22, 25)."""
    s = st.s
    killing = s.activity is Activity.KILLING
    cause = s.retire_reason or "preempted"
    if s.claim is not None:
        st.act(ActionKind.RELEASE_CLAIM, f"{cause}; {why}")
    pending = s.pending_claim
    if (
        pending is not None
        and s.destination is State.CLAIMED
        and st.machine.draining is None
        and s.shutting_down is None
    ):
        st.replace(
            claim=pending,
            pending_claim=None,
            destination=None,
            retire_reason=None,
            evict_fast=False,
            vacate_deadline=None,
        )
        change(
            st,
            State.CLAIMED,
            Activity.IDLE,
            f"{cause}; {why}; the preempting claim takes over",
            24 if killing else 23,
        )
        return
    st.replace(claim=None, destination=None, vacate_deadline=None)
    change(st, State.OWNER, Activity.IDLE, f"{cause}; {why}", 25 if killing else 22)


def retire(st: Stepper, reason: str, *, reversible: bool, peaceful: bool = False) -> None:
    """retire_claim(): Claimed -> Retiring; irreversible for PREEMPT, shutdown and vacate."""
    s = st.s
    if s.state is State.MATCHED:
        change(st, State.OWNER, Activity.IDLE, reason, 8)
        return
    if s.state is not State.CLAIMED or s.claim is None:
        return
    if not reversible:
        st.replace_claim(may_unretire=False, retire_peacefully=peaceful)
    st.replace(retire_reason=reason)
    if s.activity is Activity.IDLE:
        preempt(st, reason, number=10)
    elif s.activity is Activity.BUSY:
        change(st, State.CLAIMED, Activity.RETIRING, reason, 13)
    elif s.activity is Activity.SUSPENDED and not st.s.claim_active():
        preempt(st, reason, number=17)
