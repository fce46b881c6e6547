"""Jobs as the negotiator and the startd see them: the job ClassAd of an ExecutionJob."""

from kondor_core.jobs.ad import JOB_STATUS, VANILLA_UNIVERSE, job_ad

__all__ = ["JOB_STATUS", "VANILLA_UNIVERSE", "job_ad"]
