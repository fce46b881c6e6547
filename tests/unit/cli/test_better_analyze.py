"""`kubectl kondor q -better-analyze JOB`: the job's Requirements clause by clause against
the ExecutionPoints' slot ads, and where the job stands."""

from __future__ import annotations

from kondor_cli.jobs import better_analyze, slot_offers
from kondor_core.api import ExecutionJob

from ..negotiation.test_schedd import NOW, execution_point


def test_a_job_no_slot_can_run_names_the_clause_rejecting_every_slot() -> None:
    eps = [execution_point(name, cpus=cpus).dump() for name, cpus in (("a", 4), ("b", 8))]
    offers, problems = slot_offers(eps, NOW)
    assert problems == [] and len(offers) == 2
    job = ExecutionJob.model_validate(
        {
            "metadata": {"name": "big", "namespace": "ns"},
            "spec": {
                "owner": "alice",
                "requirements": "TotalCpus >= 8 && TotalCpus > 64",
                "process": {"executable": "/bin/true"},
            },
            "status": {"jobStatus": "Idle", "clusterId": 12},
        }
    )
    report = better_analyze(job, offers)
    assert "The Requirements expression for job 12.0 is" in report
    assert "[0]          1         1  TotalCpus >= 8" in report
    assert "[1]          0         2  TotalCpus > 64" in report
    assert "2 are rejected by your job's requirements" in report
    assert report.rstrip().endswith("Job is idle and no slot can run it.")
