"""Autoclusters and a slot index, so that a cycle does not evaluate every job against every
slot (DESIGN.md, "Scale"; the condor_negotiator's autoclusters and its slot cache).

- **Autoclusters.** Two jobs whose significant attributes are equal match the same slots the
  same way. The significant attributes are those the slots' expressions (START, RANK,
  Requirements, Consumption*, and the slot attributes those refer to) and the job's own
  Requirements and Rank refer to, with the job's requests. A job's autocluster is the values
  of those attributes; the cycle evaluates each autocluster, not each job.
- **Slot classes.** Likewise two slots whose attributes the jobs' Requirements and Rank and
  the slots' own expressions refer to are equal (a node's identical one-core static slots,
  the same machine type across nodes) answer every job the same: each autocluster is
  evaluated against each slot class once (its Requirements, the class's START and RANK).
- **Slot index.** Within an accepting class the slots are taken in condor_status order;
  what the job requests (cpus, memory, disk, GPUs) is checked numerically before anything
  else, and taken static slots are skipped by a pointer, not re-examined.
- **Rejected autoclusters.** An autocluster no slot takes is not tried again in the cycle,
  as HTCondor does: nothing a cycle does gives slots back.

It is `negotiator.Matchmaker`'s drop-in (same `match`), and decides as it does: the best
slot by job Rank, an idle slot before a claim preempted for RANK before one preempted for
user priority, PREEMPTION_RANK, slot RANK, then slot order. What the preemption rules read
of a claimed slot (its remote user and their priority, RetirementTimeRemaining, what
PREEMPTION_REQUIREMENTS and PREEMPTION_RANK refer to) makes its class, and the submitter is
part of an autocluster while preemption is considered. One approximation: a partitionable
slot that has already given part of itself this cycle is re-checked alone (Requirements,
START and resources) when picked, but keeps the place its class's RANK gave it at the start
of the cycle. With ALLOW_PSLOT_PREEMPTION and claimed dynamic slots offered, a job no slot
class takes tries the partitionable slots with some of their dynamic slots preempted (the
plain matchmaker weighs those among all candidates; the index, after the classes).
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import classad2

from kondor_core.negotiation.negotiator import (
    IdleJob,
    Matched,
    Matchmaker,
    consume,
    consumption,
    shortfall,
)
from kondor_core.negotiation.preemption import (
    REASON_ORDER,
    PreemptionPolicy,
    PslotVictims,
    claim_verdict,
    negotiator_view,
    preemption_rank,
    pslot_victims,
    retirement_left,
    set_submitter,
)
from kondor_core.negotiation.scope import closure as _closure
from kondor_core.negotiation.scope import evaluate, identifiers
from kondor_core.policy.evaluation import describe, number, truth

#: Slot attributes that always decide what a slot offers.
_SLOT_FIXED = ("State", "Activity", "PartitionableSlot", "CurrentRank", "Requirements", "Start")
#: What decides whether a Claimed slot's claim may be preempted (with what
#: PREEMPTION_REQUIREMENTS refers to, and whether it has retirement time left), when
#: preemption is considered. RemoteUserPrio follows from the remote user; PREEMPTION_RANK
#: only orders the claims that may be preempted, within their group.
_CLAIM_FIXED = ("DynamicSlot", "RemoteUser", "RemoteOwner", "AccountingGroup")
#: The reasons for a claim, by their order among candidates (higher first).
_REASONS = {order: reason for reason, order in REASON_ORDER.items()}
#: The slot expressions the negotiator evaluates, whose references make slots differ.
_SLOT_ROOTS = ("Start", "Rank", "Requirements")
#: Resources whose Consumption<Res> expressions a slot may have (consumption policy).
_CONSUMPTION = ("ConsumptionCpus", "ConsumptionMemory", "ConsumptionDisk", "ConsumptionGPUs")
#: The job's requests: always significant.
_JOB_REQUESTS = ("RequestCpus", "RequestMemory", "RequestDisk", "RequestGPUs")
#: The resources every job's request is checked for without ClassAd evaluation.
_STANDARD_RESOURCES = ("Cpus", "Memory", "Disk", "GPUs")
#: Up to this many slots the plain Matchmaker decides (one reason per slot for a job no
#: slot takes); beyond, the index does, and the reason is a summary with counts.
SMALL_POOL = 64


def _plain(value: Any) -> float:
    return number(value) or 0.0


@dataclass
class _Group:
    """The slots one autocluster ranks alike, in condor_status order, with the first one
    still worth looking at: a slot taken, or too small for this autocluster's requests,
    stays so for the rest of the cycle (resources only shrink within a cycle)."""

    #: (job Rank, 2 for an idle slot / 1 a claim preempted for RANK / 0 for user priority,
    #: slot RANK; 0 for claims, whose slot RANKs are in `slot_ranks`).
    rank: tuple[float, int, float]
    members: list[int]
    first: int = 0
    #: Each preempted claim's slot RANK for the job.
    slot_ranks: dict[int, float] = field(default_factory=dict)
    #: Claims are taken by PREEMPTION_RANK (higher first), then slot RANK: sorted so the
    #: first time the group is looked at.
    ordered: bool = True


@dataclass
class _Autocluster:
    groups: list[_Group] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    rejected: str | None = None
    #: What each job of it requests of the standard resources (None: it requests a custom
    #: resource or by expression, and each slot is checked with the negotiator's own rule).
    needs: dict[str, int] | None = None
    #: The partitionable slots that accept it, with their ranks (pslot preemption).
    pslots: list[tuple[int, tuple[float, int, float]]] | None = None


class IndexedMatchmaker:
    """`negotiator.Matchmaker` over autoclusters and slot classes (module docstring)."""

    def __init__(
        self,
        offers: Sequence[Any],
        *,
        consider_preemption: bool = True,
        jobs: Iterable[Any] = (),
        small_pool: int = SMALL_POOL,
        preemption: PreemptionPolicy | None = None,
    ) -> None:
        policy = preemption or PreemptionPolicy()
        if policy.consider != consider_preemption:
            policy = dataclasses.replace(policy, consider=consider_preemption and policy.consider)
        self.policy = policy
        self.ads = negotiator_view(offers, policy)
        self.consider_preemption = policy.consider
        self._taken: set[int] = set()
        self._consumed: set[int] = set()
        self._plain: Matchmaker | None = None
        self._autoclusters: dict[tuple[Any, ...], _Autocluster] = {}
        self._submitter = ""
        #: PREEMPTION_RANK by what of the job it refers to, then by slot.
        self._preemption_ranks: dict[tuple[str, ...], dict[int, float]] = {}
        self._preemption_rank_refs = sorted(identifiers(self.policy.rank))
        self._groupings: dict[tuple[str, ...], dict[tuple[Any, ...], list[int]]] = {}
        self._base: list[int] = []
        self._slot_refs: list[str] = []
        self._consumes: list[bool] = []
        #: Claimed slots are offered and preemption is considered: the preemption rules'
        #: attributes make slot classes, and the submitter is part of an autocluster.
        self._claimed = policy.consider and any(ad.get("State") == "Claimed" for ad in self.ads)
        #: ALLOW_PSLOT_PREEMPTION with claimed dynamic slots offered: a job no slot class
        #: takes tries the partitionable slots with some of their dynamic slots preempted.
        self._pslot = (
            self._claimed
            and policy.pslot
            and any(
                ad.get("DynamicSlot") is True and ad.get("State") == "Claimed" for ad in self.ads
            )
        )
        self._by_name = (
            {str(ad.get("Name")): i for i, ad in enumerate(self.ads)} if self._pslot else {}
        )
        if len(self.ads) <= small_pool:
            self._plain = Matchmaker(offers, consider_preemption=policy.consider, preemption=policy)
            return
        del jobs  # the job side is keyed per autocluster
        self._classify()

    @property
    def slot_classes(self) -> int:
        return len(set(self._base))

    @property
    def autoclusters(self) -> int:
        return len(self._autoclusters)

    def _classify(self) -> None:
        """Each slot's base class: the values of what the slots' own expressions refer to."""
        closures: dict[tuple[str, ...], list[str]] = {}
        keys: dict[tuple[Any, ...], int] = {}
        refs: dict[str, None] = {}
        preemption_refs = self._preemption_refs()
        claim_names: dict[tuple[str, ...], list[str]] = {}
        for ad in self.ads:
            texts = tuple(str(ad.get(name)) for name in (*_SLOT_ROOTS, *_CONSUMPTION))
            names = closures.get(texts)
            if names is None:
                roots = [
                    n
                    for n, t in zip((*_SLOT_ROOTS, *_CONSUMPTION), texts, strict=True)
                    if t != "None"
                ]
                names = sorted(set(_closure((ad,), roots)) | set(_SLOT_FIXED))
                closures[texts] = names
                refs.update(dict.fromkeys(names))
            key: tuple[Any, ...] = (texts, *(str(ad.get(name)) for name in names))
            if self._claimed and ad.get("State") == "Claimed":
                extra = claim_names.get(texts)
                if extra is None:
                    extra = sorted(set(_closure((ad,), preemption_refs)) | set(_CLAIM_FIXED))
                    claim_names[texts] = extra
                retiring = retirement_left(ad) > 0
                key = (*key, retiring, *(str(ad.get(name)) for name in extra))
            self._base.append(keys.setdefault(key, len(keys)))
            self._consumes.append(any(t != "None" for t in texts[len(_SLOT_ROOTS) :]))
        self._slot_refs = list(refs)

    def _preemption_refs(self, *, rank: bool = False) -> list[str]:
        """What PREEMPTION_REQUIREMENTS (and PREEMPTION_RANK) refer to, when they matter (a
        Claimed slot is offered and preemption is considered)."""
        if not self._claimed:
            return []
        refs = identifiers(self.policy.requirements)
        return sorted(refs | identifiers(self.policy.rank) if rank else refs)

    def _grouping(self, names: tuple[str, ...]) -> dict[tuple[Any, ...], list[int]]:
        """The slots by base class and the values of `names` (what an autocluster's
        Requirements and Rank refer to), each in condor_status order."""
        found = self._groupings.get(names)
        if found is None:
            found = {}
            for index, ad in enumerate(self.ads):
                key = (self._base[index], *(str(ad.get(name)) for name in names))
                found.setdefault(key, []).append(index)
            self._groupings[names] = found
        return found

    def _job_key(self, job: Any) -> tuple[tuple[str, ...], tuple[Any, ...]]:
        """What the job's autocluster is: the slot attributes its Requirements and Rank
        refer to, and the values of its significant attributes (its Requirements, Rank and
        requests, what the slots' expressions refer to, and what those refer to in turn)."""
        texts = []
        refs: set[str] = set()
        for name in ("Requirements", "Rank"):
            value = job.get(name)
            texts.append(str(value))
            if isinstance(value, classad2.ExprTree):
                refs |= identifiers(texts[-1])
        slot_names = tuple(sorted(refs))
        values: list[Any] = [*texts]
        todo = [*_JOB_REQUESTS, *refs, *self._slot_refs, *self._preemption_refs(rank=True)]
        seen: set[str] = {"Requirements", "Rank"}
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            value = job.get(name)
            if value is None:
                continue
            if isinstance(value, classad2.ExprTree):
                text = str(value)
                todo.extend(identifiers(text))
                values.append((name, text))
            else:
                values.append((name, value))
        return slot_names, tuple(sorted(values, key=str))

    # -- evaluation

    def _verdict(self, job: Any, ad: Any, submitter: str = "") -> tuple[float, int, float] | str:
        """The slot's ranks for the job (job Rank, 2 for an idle slot / 1 a claim preempted
        for RANK / 0 for user priority, slot RANK), or why it takes no match from the job
        (resources apart)."""
        state = ad.get("State")
        name = ad.get("Name")
        if ad.get("Requirements") is False:
            return f"{name} is {state}/{ad.get('Activity')} and takes no match"
        partitionable = ad.get("PartitionableSlot") is True
        slot_rank = _plain(evaluate(ad, job, "Rank"))
        reason_order = REASON_ORDER[None]
        open_states = ("Unclaimed",) if partitionable else ("Unclaimed", "Backfill")
        if state == "Claimed" and not partitionable:
            if self._pslot and ad.get("DynamicSlot") is True:
                return (
                    f"{name} is Claimed (ALLOW_PSLOT_PREEMPTION preempts dynamic slots only "
                    "through their partitionable slot)"
                )
            verdict = claim_verdict(self.policy, ad, job, submitter, slot_rank, ranked=False)
            if isinstance(verdict, str):
                return verdict
            reason_order = REASON_ORDER[verdict.reason]
        elif state not in open_states:
            return f"{name} is {state}"
        if "Requirements" in job and truth(evaluate(job, ad, "Requirements")) is not True:
            return f"{name}: the job's Requirements are not TRUE for it"
        start = evaluate(ad, job, "Start")
        if truth(start) is not True:
            return f"{name}: START is {describe(start)} for the job"
        return (_plain(evaluate(job, ad, "Rank")), reason_order, slot_rank)

    def _autocluster(self, job: Any, submitter: str = "") -> _Autocluster:
        slot_names, values = self._job_key(job)
        # Whom the job's user may preempt depends on the user: the user is significant.
        key = (slot_names, values, submitter if self._claimed else "", self.policy.requirements)
        found = self._autoclusters.get(key)
        if found is not None:
            return found
        made = _Autocluster(needs=_needs(job))
        ranked: dict[tuple[float, int, float], _Group] = {}
        idle = REASON_ORDER[None]
        for members in self._grouping(slot_names).values():
            verdict = self._verdict(job, self.ads[members[0]], submitter)
            if isinstance(verdict, str):
                made.reasons.append(f"{len(members)} slot(s) like {verdict}")
                continue
            job_rank, order, slot_rank = verdict
            if order == idle:
                ranked.setdefault(verdict, _Group(verdict, [])).members.extend(members)
                continue
            # Claims of one reason go together, taken by PREEMPTION_RANK then slot RANK.
            group = ranked.setdefault((job_rank, order, 0.0), _Group((job_rank, order, 0.0), []))
            group.members.extend(members)
            group.slot_ranks.update(dict.fromkeys(members, slot_rank))
            group.ordered = False
        made.groups = [
            dataclasses.replace(group, members=sorted(group.members))
            for _, group in sorted(ranked.items(), key=lambda item: item[0], reverse=True)
        ]
        self._autoclusters[key] = made
        return made

    # -- matching

    def forbid_priority_preemption(self) -> None:
        """From now on no match preempts for user priority (RANK preemption still may)."""
        self.policy = dataclasses.replace(self.policy, requirements="False")
        if self._plain is not None:
            self._plain.forbid_priority_preemption()

    def match(self, job: IdleJob) -> Matched | str:
        """The job's match (and the slot's share taken), or why no slot took it."""
        if self._plain is not None:
            return self._plain.match(job)
        if self._claimed:
            set_submitter(job.ad, job.submitter, self.policy)
        self._submitter = job.submitter
        cluster = self._autocluster(job.ad, job.submitter)
        if cluster.rejected is not None:
            return cluster.rejected
        for group in cluster.groups:
            if not group.ordered:
                self._order_claims(group, job.ad)
            index = self._first_fit(group, job.ad, cluster.needs)
            if index is not None:
                rank, order, slot_rank = group.rank
                slot_rank = group.slot_ranks.get(index, slot_rank)
                return self._take(
                    job, index, rank, slot_rank, reason=_REASONS[order], needs=cluster.needs
                )
        if self._pslot:
            found = self._pslot_match(job, cluster)
            if found is not None:
                return found
        parts = list(cluster.reasons[:5])
        if len(cluster.reasons) > 5:
            parts.append(f"and {len(cluster.reasons) - 5} more kinds of slot")
        if cluster.groups:
            accepting = sum(len(group.members) for group in cluster.groups)
            parts.append(f"{accepting} slot(s) accept the job but are taken or too small for it")
        cluster.rejected = "; ".join(parts) or "no slot is Unclaimed"
        return cluster.rejected

    def _pslot_match(self, job: IdleJob, cluster: _Autocluster) -> Matched | None:
        """ALLOW_PSLOT_PREEMPTION, once no slot class takes the job: the best partitionable
        slot whose START and the job's Requirements accept each other and whose dynamic
        slots, preempted by CurrentRank then PREEMPTION_RANK, free enough (as
        `negotiator._candidate` decides; after the classes, not among them)."""
        if cluster.pslots is None:
            cluster.pslots = []
            for index, ad in enumerate(self.ads):
                if ad.get("PartitionableSlot") is True and isinstance(ad.get("ChildName"), list):
                    verdict = self._verdict(job.ad, ad, job.submitter)
                    if not isinstance(verdict, str):
                        cluster.pslots.append((index, verdict))
        best: tuple[tuple[float, int, float, float, int], int, PslotVictims] | None = None
        for index, (job_rank, _, slot_rank) in cluster.pslots:
            ad = self.ads[index]
            if index in self._taken or shortfall(ad, job.ad) is None:
                continue  # taken, or it has room: a slot class would have given it
            children = [
                self.ads[i]
                for name in ad.get("ChildName")
                if (i := self._by_name.get(str(name))) is not None and i not in self._taken
            ]
            found = pslot_victims(
                self.policy,
                ad,
                children,
                job.ad,
                submitter=job.submitter,
                needs=consumption(ad, job.ad),
                slot_rank_of=lambda child: _plain(evaluate(child, job.ad, "Rank")),
            )
            if isinstance(found, str):
                continue
            key = (job_rank, REASON_ORDER[found.reason], found.rank, slot_rank, -index)
            if best is None or key > best[0]:
                best = (key, index, found)
        if best is None:
            return None
        (job_rank, _, _, slot_rank, _), index, found = best
        self._taken.add(index)
        self._taken.update(self._by_name[name] for name in found.slots)
        name = str(self.ads[index].get("Name"))
        return Matched(job.id, name, job_rank, slot_rank, True, found.reason, found.slots)

    def _order_claims(self, group: _Group, job: Any) -> None:
        """The group's claims by PREEMPTION_RANK (higher first), then slot RANK, then
        condor_status order; those taken already are left out."""
        ads, ranks = self.ads, group.slot_ranks
        members = [i for i in group.members[group.first :] if i not in self._taken]
        # A claim's PREEMPTION_RANK changes only with what of the job it refers to (the
        # default refers to none): computed once per claim and such values.
        seen = tuple(str(job.get(name)) for name in self._preemption_rank_refs)
        cache = self._preemption_ranks.setdefault(seen, {})
        keyed = []
        for i in members:
            value = cache.get(i)
            if value is None:
                value = cache[i] = preemption_rank(self.policy, ads[i], job)
            keyed.append((-value, -ranks.get(i, 0.0), i))
        group.members = [i for _, _, i in sorted(keyed)]
        group.first = 0
        group.ordered = True

    def _fits(self, index: int, job: Any, needs: dict[str, int] | None) -> bool:
        ad = self.ads[index]
        if needs is None or self._consumes[index]:
            return shortfall(ad, job) is None
        for attribute, amount in needs.items():
            if (
                amount
                and (attribute != "GPUs" or "GPUs" in ad)
                and amount > _plain(ad.get(attribute))
            ):
                return False
        return True

    def _first_fit(self, group: _Group, job: Any, needs: dict[str, int] | None) -> int | None:
        """The first slot of the group with what the job needs, the group's pointer moved
        past slots taken or too small."""
        members = group.members
        position = group.first
        while position < len(members):
            index = members[position]
            if index in self._taken or not self._fits(index, job, needs):
                if position == group.first:
                    group.first += 1
                position += 1
                continue
            if index in self._consumed and isinstance(
                self._verdict(job, self.ads[index], self._submitter), str
            ):
                position += 1
                continue
            return index
        return None

    def _take(
        self,
        job: IdleJob,
        index: int,
        rank: float,
        slot_rank: float,
        *,
        reason: str | None,
        needs: dict[str, int] | None,
    ) -> Matched:
        preempts = reason is not None
        ad = self.ads[index]
        if ad.get("PartitionableSlot") is True and not preempts:
            if index not in self._consumed:
                self.ads[index] = ad = copy.deepcopy(ad)
                self._consumed.add(index)
            if needs is None or self._consumes[index]:
                consume(ad, job.ad)
            else:
                for attribute, amount in needs.items():
                    if amount and attribute in ad:
                        left = _plain(ad.get(attribute)) - amount
                        ad[attribute] = int(left) if float(left).is_integer() else left
        else:
            self._taken.add(index)
        return Matched(job.id, str(ad.get("Name")), rank, slot_rank, preempts, reason)


def _needs(job: Any) -> dict[str, int] | None:
    """The standard resources a job requests, as the negotiator counts them (a job with no
    RequestCpus takes one core), or None when it requests more than these or by an
    expression."""
    needs: dict[str, int] = {}
    for key in job.keys():  # noqa: SIM118 - classad2 ads iterate like this
        if key.startswith("Request") and key[7:] not in _STANDARD_RESOURCES:
            return None
    for attribute in _STANDARD_RESOURCES:
        value = job.get(f"Request{attribute}", 1 if attribute == "Cpus" else 0)
        if isinstance(value, classad2.ExprTree):
            return None
        amount = number(value)
        needs[attribute] = math.ceil(amount) if amount is not None and amount > 0 else 0
    return needs
