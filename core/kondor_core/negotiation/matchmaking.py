"""Matchmaking one job against a machine's slots, as the condor_negotiator does.

"Matchmaking with ClassAds" and "The RANK Expression" in the reference: a job
matches a slot when the job's Requirements (MY = the job, TARGET = the slot) and
the slot's Requirements/START (MY = the slot, TARGET = the job) are both TRUE.
Among the slots that match, the job's Rank picks first; a slot that would have to
preempt its current claim comes after an idle one of the same job Rank (the
negotiator only preempts when it must), and one preempted for RANK before one preempted
for user priority ("User Priorities and Negotiation"); then PREEMPTION_RANK; then the
slot's RANK for the job; then slot order. Which claimed slots are candidates is
`preemption.claim_verdict`'s decision.

Pure: the caller says which slots are candidates and what START and RANK are;
this module evaluates only the job's side with classad2.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import classad2

from kondor_core.classads import match_scope
from kondor_core.policy.evaluation import number, truth

#: An idle slot before one preempted for machine RANK, before one preempted for user priority.
_REASON_ORDER = {"Rank": 1, "UserPriority": 0}


@dataclass(frozen=True)
class Candidate:
    """A slot the job might go to: its ad (for the job's Requirements and Rank), whether the
    slot's START accepts the job, the slot's RANK for the job, and whether taking it preempts
    the slot's current claim."""

    slot: str
    ad: Any = field(compare=False, repr=False)
    start_accepts: bool
    slot_rank: float = 0.0
    preempts: bool = False
    #: Position in the machine's slot order (ties go to the first slot).
    order: int = 0
    #: Why START does not accept the job, for the report when nothing matches.
    start_reason: str = ""
    #: Why taking it preempts its claim ("Rank" or "UserPriority"; None: it does not).
    reason: str | None = None
    #: PREEMPTION_RANK of the claim it preempts (higher is preempted first).
    preemption_rank: float = 0.0
    #: Dynamic slots preempted with it (ALLOW_PSLOT_PREEMPTION), when it is partitionable.
    victims: tuple[str, ...] = ()


@dataclass(frozen=True)
class Choice:
    """The slot a job goes to, with the job's Rank for it; or why no slot took the job."""

    slot: str | None
    job_rank: float = 0.0
    preempts: bool = False
    reasons: tuple[str, ...] = ()


def requirements_met(job_ad: Any, slot_ad: Any) -> bool:
    """The job's Requirements evaluated with MY = the job and TARGET = the slot is TRUE, or a
    non-zero number (HTCondor's EvalBool, as classad2's `matches` takes it)."""
    requirements = job_ad.get("Requirements")
    if requirements is None:
        return True
    if isinstance(requirements, classad2.ExprTree):
        requirements = requirements.eval(match_scope(job_ad, slot_ad), slot_ad)
    return truth(requirements) is True


def job_rank(job_ad: Any, slot_ad: Any) -> float:
    """The job's Rank for the slot; 0 when it is UNDEFINED, ERROR or not a number."""
    rank = job_ad.get("Rank")
    if isinstance(rank, classad2.ExprTree):
        rank = rank.eval(match_scope(job_ad, slot_ad), slot_ad)
    # UNDEFINED and ERROR are ints to Python (classad2.Value is an IntEnum): `number` knows.
    return number(rank) or 0.0


def choose(job_ad: Any, candidates: Iterable[Candidate]) -> Choice:
    """The best slot for `job_ad` among `candidates`, or a Choice with no slot and reasons."""
    best: tuple[tuple[float, int, float, float, int], Candidate, float] | None = None
    reasons: list[str] = []
    for candidate in candidates:
        if not requirements_met(job_ad, candidate.ad):
            reasons.append(f"{candidate.slot}: the job's Requirements are not TRUE for it")
            continue
        if not candidate.start_accepts:
            reasons.append(f"{candidate.slot}: {candidate.start_reason or 'START is not TRUE'}")
            continue
        rank = job_rank(job_ad, candidate.ad)
        key = (
            rank,
            _REASON_ORDER.get(candidate.reason or "", 0) if candidate.preempts else 2,
            candidate.preemption_rank,
            candidate.slot_rank,
            -candidate.order,
        )
        if best is None or key > best[0]:
            best = (key, candidate, rank)
    if best is None:
        return Choice(slot=None, reasons=tuple(reasons))
    _, candidate, rank = best
    return Choice(slot=candidate.slot, job_rank=rank, preempts=candidate.preempts)
