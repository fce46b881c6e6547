"""Jobs as the negotiator and the startd see them: the job ClassAd of an ExecutionJob, and
the admission of an ExecutionJob (owner, validity, what may change)."""

from kondor_core.jobs.ad import (
    JOB_STATUS,
    LIFE_ATTRIBUTES,
    VANILLA_UNIVERSE,
    global_job_id,
    job_ad,
    job_id,
    job_key,
    submit_ad,
)
from kondor_core.jobs.admission import (
    Admission,
    Delegates,
    Requester,
    admit_job,
    change_problems,
    job_problems,
    pod_template_problems,
)

__all__ = [
    "JOB_STATUS",
    "LIFE_ATTRIBUTES",
    "VANILLA_UNIVERSE",
    "Admission",
    "Delegates",
    "Requester",
    "admit_job",
    "change_problems",
    "global_job_id",
    "job_ad",
    "job_id",
    "job_key",
    "job_problems",
    "pod_template_problems",
    "submit_ad",
]
