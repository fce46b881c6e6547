"""condor_q -better-analyze: each Requirements clause with the slots it rejects, START
rejections, resources, and where the job stands."""

from __future__ import annotations

from kondor_core.api import ExecutionJobSpec
from kondor_core.jobs import submit_ad
from kondor_core.negotiation.analyze import analyze, conjuncts, job_state, render
from kondor_core.negotiation.negotiator import slot_offer

from .test_schedd import NOW, execution_point


def offers(*names_cpus: tuple[str, int], policy: dict[str, str] | None = None) -> list[object]:
    out = []
    for name, cpus in names_cpus:
        ep = execution_point(name, cpus=cpus, policy=policy)
        assert ep.status is not None
        out += [slot_offer(s.ad, set(s.expressions), NOW) for s in ep.status.slots]
    return out


def ad(**spec: object) -> object:
    body = {"owner": "alice", "process": {"executable": "/bin/true"}, **spec}
    return submit_ad(ExecutionJobSpec.model_validate(body), "ns/j", cluster_id=3)


def test_conjuncts_split_top_level_ands_only() -> None:
    assert conjuncts('(a > 1) && (b == "x && y") && (c || (d && e))') == [
        "a > 1",
        'b == "x && y"',
        "c || (d && e)",
    ]
    assert conjuncts("((a && b))") == ["a", "b"]
    assert conjuncts("true") == ["true"]


def test_a_job_no_slot_can_run_shows_the_clause_that_rejects_each_slot() -> None:
    slots = offers(("node-a", 4), ("node-b", 8), ("node-c", 16))
    job = ad(requirements='TotalCpus >= 8 && Machine != "none" && TotalCpus > 64')
    result = analyze("ns/j", job, slots)
    assert [(c.text, c.matched, c.rejected) for c in result.clauses] == [
        ("TotalCpus >= 8", 2, 1),
        ('Machine != "none"', 3, 0),
        ("TotalCpus > 64", 0, 3),
    ]
    assert result.rejected_by_requirements == 3 and result.available == 0
    text = render(result, "3.0")
    assert "[2]          0         3  TotalCpus > 64" in text
    assert "3 are rejected by your job's requirements" in text


def test_resources_and_start_rejections_are_counted_apart() -> None:
    slots = offers(("node-a", 2), ("node-b", 8))
    big = analyze("ns/j", ad(requestCpus=4), slots)
    assert big.rejected_by_resources == 1 and big.available == 1
    assert big.resource_reasons == {"not enough Cpus": 1}
    picky = offers(("node-c", 4), policy={"condorConfig": 'START = TARGET.Owner == "bob"'})
    refused = analyze("ns/j", ad(), picky)
    assert refused.rejected_by_start == 1 and refused.start_reasons == {"START is FALSE": 1}


def test_where_the_job_stands() -> None:
    assert job_state("Running", claimed=True, last_reason=None, available=0) == "Job is running."
    waiting = job_state(
        "Idle", claimed=False, last_reason="no slot left this cycle: alice holds 6 of a fair "
        "share of 6 (waiting for user priority)", available=0,
    )  # fmt: skip
    assert waiting.startswith("Job is waiting for its user's priority")
