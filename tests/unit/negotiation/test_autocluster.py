"""Autoclusters and slot classes decide as the plain matchmaker does: the same job gets the
same slot, on pools with static, partitionable and claimed slots, START and RANK."""

from __future__ import annotations

import random
from typing import Any

import pytest

from kondor_core.api import ExecutionJobSpec
from kondor_core.jobs import submit_ad
from kondor_core.negotiation.autocluster import IndexedMatchmaker
from kondor_core.negotiation.negotiator import IdleJob, Matched, Matchmaker, slot_offer

from .test_schedd import NOW, execution_point

STATIC = "SLOT_TYPE_1 = cpus=1\nNUM_SLOTS_TYPE_1 = {n}\nSLOT_TYPE_1_PARTITIONABLE = FALSE\n"


def pool(seed: int) -> list[Any]:
    rng = random.Random(seed)
    ads: list[Any] = []
    for node in range(12):
        cpus = rng.choice([2, 4, 8])
        policy: dict[str, str] = {}
        if node % 3 == 0:
            policy = {"condorConfig": STATIC.format(n=cpus)}
        elif node % 3 == 1:
            policy = {"condorConfig": 'START = TARGET.Owner != "carol"\nRANK = TARGET.JobPrio'}
        ep = execution_point(f"n{node:02d}", cpus=cpus, policy=policy)
        assert ep.status is not None
        ads += [slot_offer(s.ad, set(s.expressions), NOW) for s in ep.status.slots]
    return ads


def jobs(seed: int, count: int) -> list[IdleJob]:
    rng = random.Random(seed)
    out = []
    for i in range(count):
        spec: dict[str, Any] = {
            "owner": rng.choice(["alice", "bob", "carol"]),
            "requestCpus": rng.choice([1, 1, 2, 4]),
            "priority": rng.choice([0, 1]),
            "process": {"executable": "/bin/true"},
        }
        if rng.random() < 0.3:
            spec["requirements"] = f"TotalCpus >= {rng.choice([4, 8])}"
        if rng.random() < 0.3:
            spec["rank"] = "TotalCpus"
        ad = submit_ad(ExecutionJobSpec.model_validate(spec), f"ns/j{i}", cluster_id=i + 1)
        out.append(IdleJob(f"ns/j{i}", ad, i))
    return out


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_the_index_matches_as_the_plain_matchmaker_does(seed: int) -> None:
    offers = pool(seed)
    queue = jobs(seed, 80)
    plain = Matchmaker(offers)
    indexed = IndexedMatchmaker(offers, jobs=[j.ad for j in queue], small_pool=0)
    for job in queue:
        expected, got = plain.match(job), indexed.match(job)
        if isinstance(expected, Matched):
            assert got == expected, job.id
        else:
            assert isinstance(got, str), job.id
    assert indexed.autoclusters < len(queue) and indexed.slot_classes < len(offers)
