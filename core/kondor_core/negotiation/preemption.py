"""Which claims the negotiator may preempt, and which it preempts first, as the
condor_negotiator decides ("User Priorities and Negotiation": Negotiation, Priorities in
Negotiation and Preemption; "Configuration Macros": PREEMPTION_REQUIREMENTS, PREEMPTION_RANK,
NEGOTIATOR_CONSIDER_PREEMPTION, NEGOTIATOR_CONSIDER_EARLY_PREEMPTION, ALLOW_PSLOT_PREEMPTION).

For a slot running a job (Claimed), with the new job as TARGET and the slot ad as MY:

- with NEGOTIATOR_CONSIDER_PREEMPTION false it is never a candidate;
- without NEGOTIATOR_CONSIDER_EARLY_PREEMPTION a slot with retirement time left
  (RetirementTimeRemaining > 0, which the startd publishes) is not a candidate;
- if the slot's RANK for the new job is greater than CurrentRank, it is a candidate by
  reason of Rank;
- else if the effective priority of the new job's submitter is better (lower) than that of
  the user the slot runs for (RemoteUserPrio), PREEMPTION_REQUIREMENTS is TRUE, and the
  slot's RANK for the new job is not worse than CurrentRank, it is a candidate by reason of
  Priority; a user never preempts themselves for priority.

Among candidates, an idle slot comes before one preempted for Rank, which comes before one
preempted for Priority; among those, the higher PREEMPTION_RANK first (its default prefers
the claim of the worst user priority, then the job that has run least).

As the negotiator does before a cycle, a Claimed slot ad has RemoteUserPrio (the effective
priority of its remote user: AccountingGroup, else RemoteUser) and RemoteUserResourcesInUse
from the accountant, set in the ad for the cycle (negotiator_view), so PREEMPTION_REQUIREMENTS,
PREEMPTION_RANK, the slot's START and RANK and the job's Requirements and Rank read them;
a preempting claim already waiting (PreemptingRank) becomes the CurrentRank to beat. The job
is given SubmitterUserPrio and SubmitterUserResourcesInUse.

ALLOW_PSLOT_PREEMPTION: a partitionable slot short of what a job needs may be matched with
some of its dynamic slots preempted: those eligible by the rules above (and never one with
retirement time left, whatever NEGOTIATOR_CONSIDER_EARLY_PREEMPTION says), taken by
CurrentRank (lowest first), then PREEMPTION_RANK (highest first), their Cpus, Memory and
Disk added to the partitionable slot's one at a time until the job fits. Dynamic slots are
then never preempted directly.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal

from kondor_core.api.pool import DEFAULT_PREEMPTION_RANK, PoolSpec
from kondor_core.classads import parse_expr
from kondor_core.negotiation.scope import evaluate_tree
from kondor_core.policy.evaluation import describe, number, truth

#: Why a match preempts its slot's claim: the slot's RANK prefers the new job, or the new
#: job's user has the better priority (PREEMPTION_REQUIREMENTS).
Reason = Literal["Rank", "UserPriority"]
#: The order of the reasons for a claim among candidates (higher first).
REASON_ORDER: Mapping[Reason | None, int] = {None: 2, "Rank": 1, "UserPriority": 0}
#: Resources pslot preemption adds up (custom resources are ignored, as HTCondor does).
PSLOT_RESOURCES = ("Cpus", "Memory", "Disk")
#: The negotiator's ephemeral attributes of a Claimed slot's remote user.
REMOTE_ATTRIBUTES = ("RemoteUserPrio", "RemoteUserResourcesInUse")


@lru_cache(maxsize=64)
def _parsed(text: str, field_name: str) -> Any:
    return parse_expr(text, field=field_name)


@dataclass(frozen=True)
class PreemptionPolicy:
    """The negotiator's preemption knobs and the effective user priorities of a cycle."""

    consider: bool = True
    early: bool = False
    pslot: bool = False
    requirements: str = "False"
    rank: str = DEFAULT_PREEMPTION_RANK
    #: Effective user priority by submitter (the accountant's), lower is better.
    priorities: Mapping[str, float] = field(default_factory=dict)
    #: Weighted resources in use by submitter.
    usage: Mapping[str, float] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        settings: PoolSpec,
        priorities: Mapping[str, float] | None = None,
        usage: Mapping[str, float] | None = None,
    ) -> PreemptionPolicy:
        """The policy of the Pool's settings (NEGOTIATOR_CONSIDER_PREEMPTION and the rest)."""
        return cls(
            consider=settings.negotiator_consider_preemption,
            early=settings.negotiator_consider_early_preemption,
            pslot=settings.allow_pslot_preemption,
            requirements=settings.preemption_requirements,
            rank=settings.preemption_rank,
            priorities=dict(priorities or {}),
            usage=dict(usage or {}),
        )

    @property
    def requirements_tree(self) -> Any:
        return _parsed(self.requirements, "preemptionRequirements")

    @property
    def rank_tree(self) -> Any:
        return _parsed(self.rank, "preemptionRank")


@dataclass(frozen=True)
class Preempt:
    """A Claimed slot the job may take by preempting its claim: why, and its PREEMPTION_RANK."""

    reason: Reason
    rank: float = 0.0


def remote_user(ad: Any) -> str | None:
    """The accounting name of the user a slot runs for: AccountingGroup (a nice-user job's
    `nice-user.<owner>`), else RemoteUser (RemoteOwner); None when it runs for nobody."""
    for key in ("AccountingGroup", "RemoteUser", "RemoteOwner"):
        value = ad.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def retirement_left(ad: Any) -> float:
    """RetirementTimeRemaining of the slot ad at the cycle's time (seconds; 0 when it does not
    say): the startd publishes it as an expression of MyCurrentTime while the job runs."""
    if "RetirementTimeRemaining" not in ad:
        return 0.0
    return max(0.0, number(ad.eval("RetirementTimeRemaining")) or 0.0)


def remote_attributes(policy: PreemptionPolicy, ad: Any) -> dict[str, float]:
    """The negotiator's RemoteUserPrio and RemoteUserResourcesInUse of a Claimed slot (none
    when the accountant does not know its remote user)."""
    user = remote_user(ad)
    if user is None or user not in policy.priorities:
        return {}
    return {
        "RemoteUserPrio": float(policy.priorities[user]),
        "RemoteUserResourcesInUse": float(policy.usage.get(user, 0.0)),
    }


def evaluate(policy: PreemptionPolicy, tree: Any, my: Any, target: Any) -> Any:
    """A negotiator expression with MY = `my` (the slot, with its remote user's priority)
    and TARGET = `target` (the job)."""
    return evaluate_tree(tree, my, target, remote_attributes(policy, my))


def preemption_rank(policy: PreemptionPolicy, slot: Any, job: Any) -> float:
    """PREEMPTION_RANK of the slot's claim for the job (higher is preempted first); 0 when
    it is UNDEFINED, ERROR or not a number."""
    return number(evaluate(policy, policy.rank_tree, slot, job)) or 0.0


def negotiator_view(offers: Sequence[Any], policy: PreemptionPolicy | None = None) -> list[Any]:
    """The offers as the negotiator evaluates them. As the condor_negotiator's
    addRemoteUserPrios does to the slot ads of a cycle, a Claimed slot whose remote user the
    accountant knows is given the ephemeral RemoteUserPrio and RemoteUserResourcesInUse
    ("Negotiation ... ephemeral attributes"), so START, RANK and the job's Requirements and
    Rank read them as PREEMPTION_REQUIREMENTS does; they are set in the ad itself (the offers
    are the cycle's own, and a copy of each Claimed ad would cost more than the cycle's
    matching), and taken out of one whose remote user is not known. A Claimed slot with a
    preempting claim waiting has its PreemptingRank as its CurrentRank (a copy of its ad)."""
    out: list[Any] = []
    for ad in offers:
        if ad.get("State") != "Claimed":
            out.append(ad)
            continue
        seen = ad
        if "PreemptingRank" in ad:
            seen = copy.copy(ad)
            preempting = number(seen.get("PreemptingRank"))
            if preempting is not None:
                seen["CurrentRank"] = preempting
        remote = remote_attributes(policy, seen) if policy is not None else {}
        for key in REMOTE_ATTRIBUTES:
            if key in remote:
                seen[key] = remote[key]
            elif key in seen:
                del seen[key]
        out.append(seen)
    return out


def set_submitter(job: Any, submitter: str, policy: PreemptionPolicy) -> None:
    """SubmitterUserPrio and SubmitterUserResourcesInUse in the job ad (the negotiator's
    ephemeral attributes), when the accountant knows the submitter."""
    if submitter in policy.priorities:
        job["SubmitterUserPrio"] = float(policy.priorities[submitter])
        job["SubmitterUserResourcesInUse"] = float(policy.usage.get(submitter, 0.0))


def claim_verdict(
    policy: PreemptionPolicy,
    ad: Any,
    job: Any,
    submitter: str,
    slot_rank: float,
    *,
    early: bool | None = None,
    ranked: bool = True,
) -> Preempt | str:
    """Whether the job may take the Claimed slot `ad` by preempting its claim (module
    docstring), or why not. `early` overrides NEGOTIATOR_CONSIDER_EARLY_PREEMPTION (pslot
    preemption never preempts a claim with retirement time left); with `ranked` False
    PREEMPTION_RANK is left to the caller (the Preempt's rank is 0)."""
    name = ad.get("Name")
    if not policy.consider:
        return f"{name} is Claimed (NEGOTIATOR_CONSIDER_PREEMPTION is false)"
    left = retirement_left(ad)
    if left > 0 and not (policy.early if early is None else early):
        return f"{name} is Claimed with {_seconds(left)} of retirement time left"
    current = number(ad.get("CurrentRank")) or 0.0
    if slot_rank > current:
        return Preempt("Rank", preemption_rank(policy, ad, job) if ranked else 0.0)
    user = remote_user(ad)
    if user is None or user == submitter:
        return f"{name} is Claimed" + (f" by {user}" if user else "")
    theirs = policy.priorities.get(user)
    ours = policy.priorities.get(submitter)
    if theirs is None or ours is None or not theirs > ours:
        return (
            f"{name} is Claimed by {user}, whose priority {_priority(theirs)} is not worse "
            f"than {submitter}'s {_priority(ours)}"
        )
    if policy.requirements.strip().lower() == "false":  # HTCondor's default
        return f"{name} is Claimed by {user}: PREEMPTION_REQUIREMENTS is FALSE"
    verdict = evaluate(policy, policy.requirements_tree, ad, job)
    if truth(verdict) is not True:
        return f"{name} is Claimed by {user}: PREEMPTION_REQUIREMENTS is {describe(verdict)}"
    if slot_rank < current:
        return f"{name} is Claimed by {user}: RANK {slot_rank:g} is below CurrentRank {current:g}"
    return Preempt("UserPriority", preemption_rank(policy, ad, job) if ranked else 0.0)


@dataclass(frozen=True)
class PslotVictims:
    """Dynamic slots of a partitionable slot to preempt for a job, in the order taken, and
    the strongest reason among them (UserPriority when any is preempted for priority)."""

    slots: tuple[str, ...]
    reason: Reason
    rank: float


def pslot_victims(
    policy: PreemptionPolicy,
    parent: Any,
    children: Sequence[Any],
    job: Any,
    *,
    submitter: str,
    needs: Mapping[str, float],
    slot_rank_of: Callable[[Any], float],
) -> PslotVictims | str:
    """The dynamic slots of `parent` whose Cpus, Memory and Disk, added to what `parent`
    has left, give the job what it `needs` (by resource), chosen by CurrentRank then
    PREEMPTION_RANK; or why none do. `slot_rank_of(ad)` is a child's RANK for the job."""
    eligible: list[tuple[float, float, Any, Preempt]] = []
    refusals: list[str] = []
    for child in children:
        if child.get("State") != "Claimed":
            continue
        verdict = claim_verdict(policy, child, job, submitter, slot_rank_of(child), early=False)
        if isinstance(verdict, str):
            refusals.append(verdict)
            continue
        current = number(child.get("CurrentRank")) or 0.0
        eligible.append((current, -verdict.rank, child, verdict))
    eligible.sort(key=lambda item: (item[0], item[1]))
    have = {key: number(parent.get(key)) or 0.0 for key in PSLOT_RESOURCES}
    taken: list[str] = []
    reasons: list[Preempt] = []
    for _, _, child, verdict in eligible:
        if _fits(have, needs):
            break
        for key in PSLOT_RESOURCES:
            have[key] += number(child.get(key)) or 0.0
        taken.append(str(child.get("Name")))
        reasons.append(verdict)
    if not taken or not _fits(have, needs):
        why = "; ".join(refusals[:3])
        return "its dynamic slots that may be preempted do not free enough" + (
            f" ({why})" if why else ""
        )
    reason: Reason = "UserPriority" if any(r.reason == "UserPriority" for r in reasons) else "Rank"
    return PslotVictims(tuple(taken), reason, max(r.rank for r in reasons))


def _fits(have: Mapping[str, float], needs: Mapping[str, float]) -> bool:
    return all(needs.get(key, 0) <= have.get(key, 0.0) for key in PSLOT_RESOURCES)


def _seconds(value: float) -> str:
    return "unlimited time" if math.isinf(value) else f"{value:.0f}s"


def _priority(value: float | None) -> str:
    return "unknown" if value is None else f"{value:g}"
