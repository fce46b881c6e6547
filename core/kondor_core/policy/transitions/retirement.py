"""A claim's retirement and vacate timers, and whether it is closing: "The Claimed State and
Leases", MaxJobRetirementTime, MachineMaxVacateTime, CLAIM_WORKLIFE and draining."""

from __future__ import annotations

import math

import classad2

from kondor_core.policy.evaluation import number
from kondor_core.policy.model import (
    Activity,
    DrainMode,
    ShutdownMode,
    State,
)
from kondor_core.policy.transitions.stepper import (
    Stepper,
    lookup_attr,
)

#: An unbounded retirement (peaceful shutdown).
INF = math.inf


def in_retirement(st: Stepper) -> bool:
    """Whether the claim is being retired: a preempting claim waits, or it may not un-retire."""
    return st.s.pending_claim is not None or not may_unretire(st)


def drain_applies(st: Stepper) -> bool:
    """Whether the machine's drain applies to this slot's claim: always, but to a claim
    accepted while draining (condor_drain -start) only once the drain is finishing."""
    if st.machine.draining is None:
        return False
    claim = st.s.claim
    return not (
        claim is not None and claim.accepted_while_draining and not st.machine.drain_finishing
    )


def draining_refuses(st: Stepper) -> bool:
    """The machine drains and takes no new job (no -start, or the drain is finishing)."""
    return st.machine.draining is not None and st.machine.drain_start is None


def may_unretire(st: Stepper) -> bool:
    """Whether a retiring claim may go back to Busy: no drain or shutdown applies, nothing
    made its retirement irreversible, no preempting claim waits."""
    claim = st.s.claim
    return (
        not drain_applies(st)
        and st.s.shutting_down is None
        and claim is not None
        and claim.may_unretire
        and st.s.pending_claim is None
    )


def retirement_remaining(st: Stepper) -> float:
    """MaxJobRetirementTime minus the job's age ("MAXJOBRETIREMENTTIME" in the summary).

    The startd's value is evaluated against the job; the job's own MaxJobRetirementTime
    may lower it, never raise it. Peaceful shutdown makes it infinite (unless the policy
    says -1, "preempt at once"); quick draining makes it zero.
    """
    claim = st.s.claim
    if claim is None or not claim.active:
        return 0.0
    value = number(st.evaluate_knob("MaxJobRetirementTime", claim))
    mjrt = value if value is not None else 0.0
    if (claim.retire_peacefully or st.s.shutting_down is ShutdownMode.PEACEFUL) and (mjrt != -1):
        mjrt = INF
    if st.machine.draining is DrainMode.QUICK:
        mjrt = 0.0
    if claim.accepted_while_draining and st.machine.drain_finishing:
        mjrt = 0.0  # the last job that ran when the drain began is gone
    job_value = lookup_attr(claim.job_ad, "MaxJobRetirementTime")
    if isinstance(job_value, classad2.ExprTree):
        tree = st.policy.job_tree(job_value, field="job MaxJobRetirementTime", job_is_my=True)
        job_value = tree.eval(claim.job_ad, st.ad(claim))
    job_mjrt = number(job_value)
    if job_mjrt is not None and job_mjrt < mjrt:
        mjrt = job_mjrt
    return max(0.0, mjrt - st.job_age(claim))


def max_vacate_time(st: Stepper) -> float:
    """MachineMaxVacateTime, lowered by JobMaxVacateTime, or raised by converting
    retirement time the job still has ("MachineMaxVacateTime" in the summary)."""
    claim = st.s.claim
    if claim is None:
        return 0.0
    machine_time = claim.pledged_max_vacate_time
    job_value = lookup_attr(claim.job_ad, "JobMaxVacateTime")
    if job_value is None:
        job_value = lookup_attr(claim.job_ad, "KillSigTimeout")
    if job_value is None:
        return machine_time
    if isinstance(job_value, classad2.ExprTree):
        tree = st.policy.job_tree(job_value, field="job JobMaxVacateTime", job_is_my=True)
        job_value = tree.eval(claim.job_ad, st.ad(claim))
    job_time = number(job_value)
    if job_time is None:
        job_time = 0.0
    if job_time <= machine_time:
        return job_time
    remaining = retirement_remaining(st)
    if remaining >= job_time:
        return job_time
    if remaining > machine_time:
        return remaining
    return machine_time


def retirement_expired(st: Stepper) -> bool:
    """Whether the retirement is over, early enough that the vacate time ends with it
    (condor_drain -graceful: the longest retirement any slot has)."""
    remaining = retirement_remaining(st)
    coordinated = st.machine.drain_retirement_remaining
    accepted = st.s.claim is not None and st.s.claim.accepted_while_draining
    if st.machine.draining is DrainMode.GRACEFUL and coordinated is not None and not accepted:
        # condor_drain -graceful: every job gets the longest retirement any slot has.
        remaining = max(remaining, coordinated) if st.s.claim_active() else coordinated
    if remaining <= 0:
        return True
    # Enter Preempting early enough that the vacate time ends with the retirement.
    return max_vacate_time(st) >= remaining


def worklife_expired(st: Stepper) -> bool:
    """CLAIM_WORKLIFE: the claim has run jobs and is older than the policy allows."""
    claim = st.s.claim
    worklife = st.policy.claim_worklife
    if claim is None or worklife is None or claim.activations == 0:
        return False
    return st.now - claim.claimed_at > worklife


def claim_closing(st: Stepper) -> bool:
    """Whether the claim takes no new job: it is being preempted, retired, drained or shut
    down, or CLAIM_WORKLIFE expired."""
    s = st.s
    return (
        s.pending_claim is not None
        or s.activity is Activity.RETIRING
        or s.state is State.PREEMPTING
        or worklife_expired(st)
        or drain_applies(st)
        or s.shutting_down is not None
    )
