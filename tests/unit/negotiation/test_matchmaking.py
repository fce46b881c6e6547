"""The negotiator's choice of a slot for a job ("Matchmaking with ClassAds", "The RANK
Expression"): job Rank first, an idle slot before a preemption, then the slot's RANK."""

from __future__ import annotations

import classad2
import pytest

from kondor_core.negotiation.matchmaking import Candidate, choose


def slot(
    name: str, *, memory: int = 4096, ok: bool = True, rank: float = 0.0, **kw: bool
) -> Candidate:
    ad = classad2.ClassAd({"Name": name, "Memory": memory})
    return Candidate(name, ad, ok, rank, kw.get("preempts", False), int(name[-1]))


def job(**attrs: str) -> classad2.ClassAd:
    return classad2.ClassAd({key: classad2.ExprTree(value) for key, value in attrs.items()})


@pytest.mark.parametrize(
    ("job_attrs", "candidates", "chosen"),
    [
        # The job's Rank wins over slot order.
        ({"Rank": "Memory"}, [slot("s1", memory=1024), slot("s2", memory=8192)], "s2"),
        # Equal job Rank: an idle slot before one that must be preempted, whatever its RANK.
        ({}, [slot("s1", rank=10, preempts=True), slot("s2")], "s2"),
        # Then the slot's RANK for the job.
        ({}, [slot("s1", rank=1), slot("s2", rank=5)], "s2"),
        # Then slot order.
        ({}, [slot("s1"), slot("s2")], "s1"),
        # The job's Requirements and the slot's START must both be TRUE.
        ({"Requirements": "Memory > 2048"}, [slot("s1", memory=1024), slot("s2", ok=False)], None),
    ],
)
def test_choose(job_attrs: dict[str, str], candidates: list[Candidate], chosen: str | None) -> None:
    assert choose(job(**job_attrs), candidates).slot == chosen


def test_no_slot_says_why_for_each() -> None:
    choice = choose(
        job(Requirements="Memory > 2048"), [slot("s1", memory=1024), slot("s2", ok=False)]
    )
    assert choice.reasons == (
        "s1: the job's Requirements are not TRUE for it",
        "s2: START is not TRUE",
    )
