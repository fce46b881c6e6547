"""What the schedd writes for one job (`JobChange`) and the merge patch of the status
subresource that carries it (`status_patch`): the schedd's fields, never the agent's
`execution`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kondor_core.api import ExecutionJob, ExecutionJobStatus, merge_patch
from kondor_core.jobs.ad import DEFAULT_NAMESPACE, job_key

#: The operator's part of the status: every field but the agent's `execution`.
_AGENT_FIELD = "execution"


@dataclass(frozen=True)
class JobChange:
    """What the operator writes for one job: its new status (the operator's fields; the
    agent's `execution` is carried as read and never written) and the ExecutionPoint it is
    matched to (None: none), with a short why for the log."""

    namespace: str
    name: str
    status: ExecutionJobStatus
    execution_point: str | None
    why: str

    @classmethod
    def of(
        cls, job: ExecutionJob, status: ExecutionJobStatus, execution_point: str | None, why: str
    ) -> JobChange:
        """The change of `job` to `status`, named by the job's namespace (as `job_id` has it)
        and name."""
        namespace = job.metadata.namespace or DEFAULT_NAMESPACE
        return cls(namespace, job.metadata.name, status, execution_point, why)

    @property
    def key(self) -> str:
        """The job's key (`kondor_core.jobs.job_key`)."""
        return job_key(self.namespace, self.name)


def operator_part(status: ExecutionJobStatus) -> dict[str, Any]:
    dumped = status.dump()
    dumped.pop(_AGENT_FIELD, None)
    return dumped


def status_patch(old: ExecutionJobStatus | None, new: ExecutionJobStatus) -> dict[str, Any]:
    """The merge patch of the status subresource that turns the operator's fields of `old`
    into those of `new` (a field gone becomes null); `execution`, the agent's, is never in
    it. Empty when nothing changes."""
    before = operator_part(old) if old is not None else {}
    patch = merge_patch(before, operator_part(new))
    return {"status": patch} if patch else {}
