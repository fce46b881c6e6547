"""`kubectl kondor q` shows a deferred or crontab job's DeferralTime (the next run) and its
crontab fields, by HTCondor's names."""

from __future__ import annotations

from kondor_cli import jobs
from kondor_core.api import ExecutionJob


def test_q_shows_the_next_run_of_a_crontab_job() -> None:
    job = ExecutionJob.model_validate(
        {
            "metadata": {"name": "hourly", "namespace": "physics"},
            "spec": {"owner": "alice", "cronMinute": 0, "process": {"executable": "/bin/true"}},
            "status": {"jobStatus": "Idle", "clusterId": 21, "deferralTime": 1_800_003_600},
        }
    )
    ad = jobs.queue_ad(job)
    assert ad["DeferralTime"] == 1_800_003_600
    assert (ad["CronMinute"], ad["OnExitRemove"]) == ("0", False)
