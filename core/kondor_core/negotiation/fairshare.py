"""One negotiation cycle with fair share, as the condor_negotiator runs it ("Job Scheduling":
user priorities; "User Priorities and Negotiation"): submitters in order of effective user
priority, each up to its slice of the pie, then the pie spun again for what is left.

- The pie is the pool's weighted resources (SLOT_WEIGHT): those the submitters' jobs hold
  now plus those of the slots that take a match. Each submitter with idle jobs gets a slice
  inversely proportional to its effective priority; its limit this cycle is its slice less
  what it already uses.
- Submitters are served best (lowest) effective priority first; within a submitter, jobs by
  JobPrio (higher first) then submission order. A job no slot takes is passed over and the
  next one tried: an unmatchable high-priority job never blocks a lower one.
- What the slices leave (a submitter whose jobs match nothing, rounding) is shared again
  among the submitters still wanting, slice by slice; what even that leaves goes to them
  in priority order, whole jobs at a time. So a nice-user submitter (NICE_USER_PRIO_FACTOR
  makes its slice nothing) gets only what nobody else wants.

Pure: the caller gives effective priorities and usage (`accountant`), the jobs with their
submitter and weight, and the offers (`negotiator.slot_offer`).
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import classad2

from kondor_core.classads import parse_expr
from kondor_core.negotiation.accountant import pie
from kondor_core.negotiation.autocluster import IndexedMatchmaker
from kondor_core.negotiation.negotiator import IdleJob, Matched
from kondor_core.negotiation.preemption import PreemptionPolicy
from kondor_core.policy.evaluation import number

#: Slack for comparing weights with limits (slices are floats).
_EPSILON = 1e-9
#: Spins of the pie before leftovers go round in priority order.
_MAX_SPINS = 8


@dataclass(frozen=True)
class FairCycle:
    """What one fair-share cycle decided: the matches in the order made, why each unmatched
    job found no slot, each submitter's slice (limit before usage) and what it got."""

    matches: tuple[Matched, ...]
    rejections: Mapping[str, str]
    shares: Mapping[str, float] = field(default_factory=dict)
    matched_weight: Mapping[str, float] = field(default_factory=dict)
    order: tuple[str, ...] = ()
    pool_size: float = 0.0


#: SLOT_WEIGHT by (expression, resources): a pool's slots come in a few sizes, and every
#: cycle weighs every slot (the pie) and every claimed job (the usage).
_WEIGHTS: dict[tuple[str, frozenset[tuple[str, Any]]], float] = {}


def weight_of(expression: str, resources: Mapping[str, Any]) -> float:
    """SLOT_WEIGHT evaluated on a slot with `resources` (Cpus, Memory, Disk, GPUs...); 0
    when it is not a number."""
    try:
        key = (expression, frozenset(resources.items()))
    except TypeError:  # a resource that is no plain value: weighed, not kept
        return _weigh(expression, resources)
    found = _WEIGHTS.get(key)
    if found is None:
        found = _weigh(expression, resources)
        if len(_WEIGHTS) >= 10_000:
            _WEIGHTS.clear()
        _WEIGHTS[key] = found
    return found


def _weigh(expression: str, resources: Mapping[str, Any]) -> float:
    value = parse_expr(expression, field="slotWeight").eval(classad2.ClassAd(dict(resources)))
    return max(0.0, number(value) or 0.0)


def request_weight(expression: str, job_ad: Any) -> float:
    """SLOT_WEIGHT of the slot a job would get: a slot with what the job requests."""
    resources = {
        attribute: _plain(job_ad.eval(f"Request{attribute}"))
        if f"Request{attribute}" in job_ad
        else 0
        for attribute in ("Cpus", "Memory", "Disk", "GPUs")
    }
    if not resources["Cpus"]:
        resources["Cpus"] = 1
    return weight_of(expression, resources)


def offered_weight(expression: str, offers: Sequence[Any]) -> float:
    """The weighted resources of the offers that take a match without preempting
    (Unclaimed, or running backfill): the free part of the pie."""
    total = 0.0
    for ad in offers:
        if ad.get("State") not in ("Unclaimed", "Backfill") or ad.get("Requirements") is False:
            continue
        resources = {key: _plain(ad.get(key)) for key in ("Cpus", "Memory", "Disk", "GPUs")}
        total += weight_of(expression, resources)
    return total


def negotiate_fair(
    jobs: Sequence[IdleJob],
    offers: Sequence[Any],
    *,
    priorities: Mapping[str, float],
    usage: Mapping[str, float],
    free: float,
    size: float | None = None,
    consider_preemption: bool = True,
    preemption: PreemptionPolicy | None = None,
) -> FairCycle:
    """One cycle over `jobs` (each with its submitter and weight) and `offers`: submitters
    by `priorities` (effective, lower first), limits from the pie of the pool's `size`
    (weighted; `free` plus `usage` when not given) less `usage` (weighted resources each
    submitter holds now); `free` is what the offers have unclaimed. The offers are not
    modified.

    `preemption` has the preemption knobs (`preemption.PreemptionPolicy`; the effective
    priorities and usage are taken from `priorities` and `usage` when it has none). A
    submitter preempts for user priority only within its slice: what is handed out beyond
    the slices never preempts for priority (it would take from a user what the pie gives
    them back the next cycle)."""
    policy = preemption or PreemptionPolicy(consider=consider_preemption)
    if not policy.priorities:
        policy = dataclasses.replace(policy, priorities=dict(priorities), usage=dict(usage))
    matchmaker = IndexedMatchmaker(
        offers,
        consider_preemption=consider_preemption,
        jobs=[job.ad for job in jobs],
        preemption=policy,
    )
    queues: dict[str, deque[IdleJob]] = {}
    for job in sorted(jobs, key=lambda j: (-j.priority, j.order)):
        queues.setdefault(job.submitter, deque()).append(job)
    order = sorted(queues, key=lambda name: (priorities.get(name, math.inf), name))
    if size is None:
        size = free + sum(max(0.0, value) for value in usage.values())
    size = max(size, free)
    eup = {name: priorities.get(name, math.inf) for name in order}
    cycle = _FairRound(
        matchmaker=matchmaker,
        queues=queues,
        order=order,
        held={name: max(0.0, usage.get(name, 0.0)) for name in order},
        eup=eup,
        shares=pie(eup, size),
        size=size,
        left=free,
        consider_preemption=consider_preemption,
    )
    cycle.hand_out_slices()
    matchmaker.forbid_priority_preemption()
    cycle.hand_out_leftovers()
    return FairCycle(
        tuple(cycle.matches), cycle.rejections, cycle.shares, cycle.got, tuple(order), size
    )


@dataclass
class _FairRound:
    """One fair-share cycle in progress: each submitter's queue, what it holds and has got,
    its slice of the pie, and what is left free."""

    matchmaker: IndexedMatchmaker
    queues: dict[str, deque[IdleJob]]
    order: list[str]
    held: dict[str, float]
    eup: dict[str, float]
    shares: dict[str, float]
    size: float
    left: float
    consider_preemption: bool
    got: dict[str, float] = field(default_factory=dict)
    matches: list[Matched] = field(default_factory=list)
    rejections: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.got = dict.fromkeys(self.order, 0.0)

    def hand_out_slices(self) -> None:
        """Each submitter, best priority first, gets jobs matched up to its slice (its share
        less what it holds); the pie is spun again over what is left for the hungry ones."""
        limits = {name: self.shares[name] - self.held[name] for name in self.order}
        for _ in range(_MAX_SPINS):
            progress = False
            for name in self.order:
                queue = self.queues[name]
                while queue and self.got[name] + queue[0].weight <= limits[name] + _EPSILON:
                    job = queue.popleft()
                    outcome = self.matchmaker.match(job)
                    if isinstance(outcome, Matched):
                        self.matches.append(outcome)
                        self.got[name] += job.weight
                        self.left -= 0.0 if outcome.preempts else job.weight
                        progress = True
                    else:
                        self.rejections[job.id] = outcome
            hungry = {name: self.eup[name] for name in self.order if self.queues[name]}
            if not progress or not hungry or self.left <= _EPSILON:
                break
            for name, extra in pie(hungry, self.left).items():  # spin again for leftovers
                limits[name] = self.got[name] + extra

    def hand_out_leftovers(self) -> None:
        """What no slice took goes round one job at a time, each time to the submitter whose
        usage after the job, weighed by its effective priority, is least: fair among equals,
        and a nice user (its priority 1e10 times worse) last."""
        held, got, shares, order = self.held, self.got, self.shares, self.order
        while True:
            waiting = [name for name in order if self.queues[name]]
            if not waiting:
                break
            name = min(
                waiting,
                key=lambda n: (
                    (held[n] + got[n] + self.queues[n][0].weight) * self.eup[n],
                    order.index(n),
                ),
            )
            job = self.queues[name].popleft()
            if self.left <= _EPSILON and not self.consider_preemption:
                self.rejections[job.id] = _waiting(name, shares[name], held[name] + got[name])
                continue
            outcome = self.matchmaker.match(job)
            if isinstance(outcome, Matched):
                self.matches.append(outcome)
                got[name] += job.weight
                if not outcome.preempts:
                    self.left -= job.weight
            elif (
                self.left <= _EPSILON
                and shares[name] < self.size - _EPSILON
                and held[name] + got[name] >= shares[name] - _EPSILON
            ):
                # Nothing is free and the submitter has its share of a pool it shares with
                # others: it waits for its priority (for their jobs to end, or its usage to age).
                self.rejections[job.id] = _waiting(name, shares[name], held[name] + got[name])
            else:
                self.rejections[job.id] = outcome


def _waiting(name: str, share: float, used: float) -> str:
    return (
        f"no slot left this cycle: {name} holds {_whole(used)} of a fair share of "
        f"{_whole(share)} (waiting for user priority)"
    )


def _whole(value: float) -> str:
    return f"{value:.0f}" if abs(value - round(value)) < 1e-6 else f"{value:.2f}"


def _plain(value: Any) -> float:
    return number(value) or 0.0
