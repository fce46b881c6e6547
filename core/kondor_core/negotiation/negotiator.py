"""One negotiation cycle, as the condor_negotiator runs it, as a pure function of its inputs.

The negotiator sees what the collector would hold: the idle jobs' ads and the slot ads the
startds published ("Matchmaking with ClassAds", "The RANK Expression" in the reference).
For each idle job, best JobPrio first and then in submission order, it looks at every slot
ad that takes a match:

- an Unclaimed slot (static or partitionable), or a static slot running backfill;
- a Claimed slot whose claim may be preempted (`preemption.claim_verdict`: RANK preemption
  when its RANK for the job is greater than its CurrentRank, user-priority preemption under
  PREEMPTION_REQUIREMENTS, never with retirement time left unless
  NEGOTIATOR_CONSIDER_EARLY_PREEMPTION), unless the slot advertises Requirements FALSE (a
  preempting claim already waits, the claim is retiring for good, the startd drains or
  shuts down);
- with ALLOW_PSLOT_PREEMPTION, a partitionable slot too small for the job whose dynamic
  slots, preempted, free enough (`preemption.pslot_victims`).

The job's Requirements (MY = the job, TARGET = the slot) and the slot's START (MY = the
slot, TARGET = the job) must both be TRUE, and a partitionable slot must have what the job
consumes left. The best slot is chosen by `matchmaking.choose` (job Rank, an idle slot
before a preempted one, slot RANK, slot order). A partitionable slot takes several jobs in
one cycle: what each match consumes (its Consumption<Res> expressions when the slot has a
consumption policy, else the job's Request<Res>) is taken off the slot's ad for the rest of
the cycle. A static slot must hold what the job requests (condor_submit adds that to a
job's Requirements; Kondor's negotiator checks it itself), and it or a preempted claim takes
one job per cycle.

The startd has the last word: it re-checks START and the resources when the match arrives
(`kondor_core.startd.tick`), so a match the negotiator's view allowed may still be refused,
and the job waits for the next cycle. User priorities and fair share (`fairshare`) order
and filter what this cycle does; the effective priorities reach the preemption rules
through `PreemptionPolicy`.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import classad2

from kondor_core.classads import match_scope, parse_expr
from kondor_core.negotiation.matchmaking import Candidate, choose
from kondor_core.negotiation.preemption import (
    Preempt,
    PreemptionPolicy,
    claim_verdict,
    negotiator_view,
    pslot_victims,
    set_submitter,
)
from kondor_core.policy.evaluation import describe, number, rewrite_time, truth
from kondor_core.slots.layout import UNIT_WORDS

#: Resources every partitionable slot ad has, with the request a job makes when it says none.
_STANDARD = {"Cpus": 1, "Memory": 0, "Disk": 0}


@dataclass(frozen=True)
class IdleJob:
    """An idle job in the queue: its id, its ClassAd (`kondor_core.jobs.job_ad`), its
    place in submission order, its submitter and its weight."""

    id: str
    ad: Any = field(compare=False, repr=False)
    order: int = 0
    #: The accounting name of its submitter (`accountant.submitter`), for fair share.
    submitter: str = ""
    #: What it counts for in its submitter's usage (SLOT_WEIGHT of what it requests).
    weight: float = 1.0

    @property
    def priority(self) -> int:
        """JobPrio (0 when the ad has none or it is not a whole number)."""
        value = self.ad.get("JobPrio")
        return value if isinstance(value, int) and not isinstance(value, bool) else 0


@dataclass(frozen=True)
class Matched:
    """A job matched to a slot (by the slot ad's Name), with the ranks it was chosen by and
    whether it preempts the slot's current claim."""

    job: str
    slot: str
    job_rank: float = 0.0
    slot_rank: float = 0.0
    preempts: bool = False
    #: Why it preempts: "Rank" (machine RANK) or "UserPriority" (PREEMPTION_REQUIREMENTS).
    reason: str | None = None
    #: The dynamic slots preempted to make room on a partitionable slot (pslot preemption).
    victims: tuple[str, ...] = ()


@dataclass(frozen=True)
class Cycle:
    """What one cycle decided: the matches in the order made, and why each unmatched job found
    no slot (HTCondor's LastRejMatchReason)."""

    matches: tuple[Matched, ...]
    rejections: Mapping[str, str]


def slot_offer(attributes: Mapping[str, Any], expressions: Collection[str], now: float) -> Any:
    """A published slot ad as the negotiator evaluates it at `now`: a ClassAd whose
    expressions read `time()` as `now` (MyCurrentTime), so a policy's timers give the same
    answer to the negotiator as to the startd, in simulated time as in real time."""
    values: dict[str, Any] = {}
    for key, value in attributes.items():
        if key in expressions:
            values[key] = parse_expr(rewrite_time(str(value)), field=key)
        elif isinstance(value, dict):
            values[key] = classad2.ClassAd(value)
        else:
            values[key] = value
    values["MyCurrentTime"] = math.floor(now)
    return classad2.ClassAd(values)


def negotiate(
    jobs: Sequence[IdleJob],
    offers: Sequence[Any],
    *,
    consider_preemption: bool = True,
    preemption: PreemptionPolicy | None = None,
) -> Cycle:
    """One cycle: match `jobs` to the slot ads `offers` (from `slot_offer`), in condor_status
    order, best JobPrio first then in submission order. The offers are not modified.

    With `consider_preemption` False (NEGOTIATOR_CONSIDER_PREEMPTION), a Claimed slot is
    never a candidate; `preemption` gives the other knobs and the user priorities (without
    it, only RANK preemption)."""
    matchmaker = Matchmaker(offers, consider_preemption=consider_preemption, preemption=preemption)
    matches: list[Matched] = []
    rejections: dict[str, str] = {}
    for job in sorted(jobs, key=lambda j: (-j.priority, j.order)):
        outcome = matchmaker.match(job)
        if isinstance(outcome, Matched):
            matches.append(outcome)
        else:
            rejections[job.id] = outcome
    return Cycle(tuple(matches), rejections)


class Matchmaker:
    """The slots of one cycle, matched one job at a time: what a match takes of a
    partitionable slot is taken off this cycle's copy of its ad, and a static slot (or a
    preempted claim) takes one job. The offers given are not modified, but for the
    ephemeral RemoteUserPrio and RemoteUserResourcesInUse of a Claimed slot (negotiator_view)."""

    def __init__(
        self,
        offers: Sequence[Any],
        *,
        consider_preemption: bool = True,
        preemption: PreemptionPolicy | None = None,
    ) -> None:
        policy = preemption or PreemptionPolicy()
        if policy.consider != consider_preemption:
            policy = dataclasses.replace(policy, consider=consider_preemption and policy.consider)
        self.policy = policy
        self.ads = negotiator_view(offers, policy)
        self.consider_preemption = policy.consider
        self._consumed: set[int] = set()
        self._taken: set[int] = set()
        self._index = {str(ad.get("Name")): i for i, ad in enumerate(self.ads)}

    def match(self, job: IdleJob) -> Matched | str:
        """The job's match (and the slot's share taken), or why no slot took it."""
        ads = self.ads
        set_submitter(job.ad, job.submitter, self.policy)
        refusals: list[str] = []
        candidates: list[Candidate] = []
        for order, ad in enumerate(ads):
            if order in self._taken:
                refusals.append(f"{ad.get('Name')} is Claimed")  # by a match of this cycle
                continue
            candidate = _candidate(job, ad, order, refusals, self.policy, children=self._children)
            if candidate is not None:
                candidates.append(candidate)
        choice = choose(job.ad, candidates)
        if choice.slot is None:
            return "; ".join([*refusals, *choice.reasons]) or "no slot is Unclaimed"
        chosen = next(c for c in candidates if c.slot == choice.slot)
        index = chosen.order
        if ads[index].get("PartitionableSlot") is True and not chosen.preempts:
            if index not in self._consumed:  # what the cycle takes stays in this cycle's copy
                ads[index] = copy.deepcopy(ads[index])
                self._consumed.add(index)
            _consume(ads[index], job.ad)
        else:
            self._taken.add(index)
            self._taken.update(self._index[name] for name in chosen.victims)
        return Matched(
            job.id,
            choice.slot,
            choice.job_rank,
            chosen.slot_rank,
            choice.preempts,
            chosen.reason,
            chosen.victims,
        )

    def forbid_priority_preemption(self) -> None:
        """From now on no match preempts for user priority (RANK preemption still may)."""
        self.policy = dataclasses.replace(self.policy, requirements="False")

    def _children(self, parent: Any) -> list[Any]:
        """The dynamic slots of a partitionable slot offered this cycle and not yet taken."""
        names = parent.get("ChildName")
        if not isinstance(names, list):
            return []
        indices = [self._index.get(str(name)) for name in names]
        return [self.ads[i] for i in indices if i is not None and i not in self._taken]


def _candidate(
    idle: IdleJob,
    ad: Any,
    order: int,
    refusals: list[str],
    policy: PreemptionPolicy,
    *,
    children: Callable[[Any], list[Any]] = lambda _: [],
) -> Candidate | None:
    """The slot as a candidate for the job, or None (and why, in `refusals`) when it takes
    no match for the job now."""
    job = idle.ad
    name = str(ad.get("Name", f"slot #{order + 1}"))
    state = ad.get("State")
    if ad.get("Requirements") is False:
        refusals.append(f"{name} is {state}/{ad.get('Activity')} and takes no match")
        return None
    partitionable = ad.get("PartitionableSlot") is True
    slot_rank = _number(ad, "Rank", job)
    preempt: Preempt | None = None
    victims: tuple[str, ...] = ()
    open_states = ("Unclaimed",) if partitionable else ("Unclaimed", "Backfill")
    if state == "Claimed" and not partitionable:
        if policy.pslot and ad.get("DynamicSlot") is True:
            refusals.append(
                f"{name} is Claimed (ALLOW_PSLOT_PREEMPTION preempts dynamic slots only "
                "through their partitionable slot)"
            )
            return None
        verdict = claim_verdict(policy, ad, job, idle.submitter, slot_rank)
        if isinstance(verdict, str):
            refusals.append(verdict)
            return None
        preempt = verdict
    elif state not in open_states:
        refusals.append(f"{name} is {state}")
        return None
    short = _shortfall(ad, job)
    if short is not None:
        found = None
        if partitionable and policy.pslot and policy.consider:
            needs = _consumption(ad, job)
            found = pslot_victims(
                policy,
                ad,
                children(ad),
                job,
                submitter=idle.submitter,
                needs=needs,
                slot_rank_of=lambda child: _number(child, "Rank", job),
            )
        if found is None or isinstance(found, str):
            refusals.append(f"{name}: {short}" + (f", and {found}" if found else ""))
            return None
        preempt = Preempt(found.reason, found.rank)
        victims = found.slots
    start = _evaluate(ad, "Start", job)
    accepts = truth(start) is True
    reason = "" if accepts else f"START is {describe(start)} for the job"
    return Candidate(
        name,
        ad,
        accepts,
        slot_rank,
        preempt is not None,
        order,
        reason,
        preempt.reason if preempt is not None else None,
        preempt.rank if preempt is not None else 0.0,
        victims,
    )


def _consumption(ad: Any, job: Any) -> dict[str, float]:
    """What `job` takes of the slot `ad`, by attribute: a dynamic slot's share of a
    partitionable slot, or what a static slot must hold (it is not resized)."""
    resources = dict(_STANDARD)
    if "GPUs" in ad:
        resources["GPUs"] = 0
    for key in ad.keys():  # noqa: SIM118 - classad2 ads iterate like this
        if key.startswith("TotalSlot") and key[9:] not in ("VirtualMemory", *resources):
            resources[key[9:]] = 0
    out: dict[str, float] = {}
    for attribute, default in resources.items():
        if f"Consumption{attribute}" in ad:
            value = _evaluate(ad, f"Consumption{attribute}", job)
        else:
            value = job.eval(f"Request{attribute}") if f"Request{attribute}" in job else default
        amount = number(value)
        out[attribute] = math.ceil(amount) if amount is not None and amount > 0 else 0
    return out


def _shortfall(ad: Any, job: Any) -> str | None:
    for attribute, amount in _consumption(ad, job).items():
        left = _plain(ad.get(attribute))
        if amount > left:
            unit = UNIT_WORDS.get(attribute.lower(), "")
            total = _whole(_plain(ad.get(f"TotalSlot{attribute}", left)))
            return (
                f"not enough {attribute}: the job needs {amount} {unit}".rstrip()
                + f", {_whole(left)} left of {total}"
            )
    return None


def _consume(ad: Any, job: Any) -> None:
    for attribute, amount in _consumption(ad, job).items():
        if amount:
            ad[attribute] = _whole(_plain(ad.get(attribute)) - amount)


def _evaluate(ad: Any, attribute: str, job: Any) -> Any:
    value = ad.get(attribute)
    if isinstance(value, classad2.ExprTree):
        return value.eval(match_scope(ad, job), job)
    return value


def _number(ad: Any, attribute: str, job: Any) -> float:
    """A numeric expression of the slot for the job; 0 when UNDEFINED, ERROR or not a number."""
    return _plain(_evaluate(ad, attribute, job))


def _plain(value: Any) -> float:
    """A number; 0 for UNDEFINED, ERROR or anything else (booleans count as 1/0)."""
    return number(value) or 0.0


def _whole(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


def shortfall(ad: Any, job: Any) -> str | None:
    """What the slot `ad` has too little of for `job` (the negotiator's resource check), or
    None when it has enough."""
    return _shortfall(ad, job)


def evaluate_slot(ad: Any, attribute: str, job: Any) -> Any:
    """A slot expression (START, RANK) evaluated for `job`, as the negotiator does."""
    return _evaluate(ad, attribute, job)


def consumption(ad: Any, job: Any) -> dict[str, float]:
    """What `job` takes of the slot `ad`, by attribute (`_consumption`)."""
    return _consumption(ad, job)


def consume(ad: Any, job: Any) -> None:
    """Take what `job` consumes off the (cycle's copy of the) partitionable slot ad `ad`."""
    _consume(ad, job)
